//! Real models written with candle as [`StagedNet`]s: an MLP, a LeNet-style CNN, and a
//! ResNet-18 and a VGG-11 layout for 32x32 images with a width knob (`width = 64` is the
//! published channel count; the CPU benches and tests use narrower copies of the same
//! layout).
//!
//! Stage boundaries follow the natural modules: one stage per dense layer, per conv block
//! of LeNet and VGG (conv + ReLU, + max-pool where the layout pools), per residual block
//! of the ResNet, plus a stem and a head. Batch normalisation is left out: its running
//! statistics are per-worker state outside synchronous SGD (they would make the three
//! modes and the worker count change the model), so the ResNet instead starts every
//! residual branch's last convolution at zero ("zero-init residual", Goyal et al. 2017),
//! which keeps the deep stack trainable without normalisation.

use candle_core::{Module, Tensor};
use candle_nn::init::Init;
use candle_nn::{Conv2d, Conv2dConfig, VarBuilder, conv2d, linear, seq};

use crate::models::staged::StagedNet;

fn conv(
    c_in: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    vb: VarBuilder,
) -> candle_core::Result<Conv2d> {
    let cfg = Conv2dConfig {
        padding: k / 2,
        stride,
        ..Default::default()
    };
    conv2d(c_in, c_out, k, cfg, vb)
}

/// A multilayer perceptron `sizes[0] -> … -> sizes[last]` with ReLU between layers, on
/// examples of shape `input` (flattened by the first stage); one stage per dense layer.
pub fn mlp(input: &[usize], sizes: &[usize]) -> StagedNet {
    let mut net = StagedNet::new("mlp", input);
    let n = sizes.len().saturating_sub(1);
    for (i, w) in sizes.windows(2).enumerate() {
        let (a, b, last) = (w[0], w[1], i + 1 == n);
        net = net.stage(&format!("dense{i}"), move |vb| {
            let l = linear(a, b, vb)?;
            let mut s = seq().add_fn(|x| x.flatten_from(1)).add(l);
            if !last {
                s = s.add_fn(|x| x.relu());
            }
            Ok(s)
        });
    }
    net
}

/// LeNet-5 style: conv 5x5 (6) + ReLU + max-pool, conv 5x5 (16) + ReLU + max-pool,
/// dense 120, dense 84, dense `classes`; for `channels x side x side` inputs (1x28x28
/// MNIST, 3x32x32 CIFAR). Five stages.
pub fn lenet(channels: usize, side: usize, classes: usize) -> StagedNet {
    let after = ((side - 4) / 2 - 4) / 2;
    let flat = 16 * after * after;
    StagedNet::new("lenet", &[channels, side, side])
        .stage("conv1", move |vb| {
            let c = conv2d(channels, 6, 5, Conv2dConfig::default(), vb)?;
            Ok(seq().add(c).add_fn(|x| x.relu()?.max_pool2d(2)))
        })
        .stage("conv2", move |vb| {
            let c = conv2d(6, 16, 5, Conv2dConfig::default(), vb)?;
            Ok(seq().add(c).add_fn(|x| x.relu()?.max_pool2d(2)))
        })
        .stage("fc1", move |vb| {
            let l = linear(flat, 120, vb)?;
            Ok(seq()
                .add_fn(|x| x.flatten_from(1))
                .add(l)
                .add_fn(|x| x.relu()))
        })
        .stage("fc2", |vb| {
            Ok(seq().add(linear(120, 84, vb)?).add_fn(|x| x.relu()))
        })
        .stage("fc3", move |vb| linear(84, classes, vb))
}

/// A ResNet basic block: `relu(x + conv(relu(conv(x))))`, with a strided 1x1 projection on
/// the shortcut when the shape changes; the branch's last convolution starts at zero.
#[derive(Debug, Clone)]
pub struct BasicBlock {
    conv1: Conv2d,
    conv2: Conv2d,
    shortcut: Option<Conv2d>,
}

impl BasicBlock {
    /// A block from `c_in` to `c_out` channels, first convolution with `stride`.
    pub fn new(
        c_in: usize,
        c_out: usize,
        stride: usize,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let conv1 = conv(c_in, c_out, 3, stride, vb.pp("conv1"))?;
        let w = vb
            .pp("conv2")
            .get_with_hints((c_out, c_out, 3, 3), "weight", Init::Const(0.0))?;
        let b = vb
            .pp("conv2")
            .get_with_hints(c_out, "bias", Init::Const(0.0))?;
        let cfg = Conv2dConfig {
            padding: 1,
            ..Default::default()
        };
        let conv2 = Conv2d::new(w, Some(b), cfg);
        let shortcut = if stride != 1 || c_in != c_out {
            Some(conv(c_in, c_out, 1, stride, vb.pp("shortcut"))?)
        } else {
            None
        };
        Ok(BasicBlock {
            conv1,
            conv2,
            shortcut,
        })
    }
}

impl Module for BasicBlock {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let branch = self.conv2.forward(&self.conv1.forward(x)?.relu()?)?;
        let skip = match &self.shortcut {
            Some(s) => s.forward(x)?,
            None => x.clone(),
        };
        (skip + branch)?.relu()
    }
}

/// ResNet-18 layout for `3 x 32 x 32` inputs: a 3x3 stem of `width` channels, four groups of two
/// basic blocks (`width`, `2 width`, `4 width`, `8 width` channels, the last three starting with
/// stride 2), global average pooling and a dense head. Ten stages: stem, eight blocks, head.
pub fn resnet18(width: usize, classes: usize) -> StagedNet {
    let mut net = StagedNet::new("resnet18", &[3, 32, 32]).stage("stem", move |vb| {
        let c = conv(3, width, 3, 1, vb)?;
        Ok(seq().add(c).add_fn(|x| x.relu()))
    });
    let mut c_in = width;
    for (g, mult) in [1, 2, 4, 8].into_iter().enumerate() {
        let c_out = width * mult;
        for b in 0..2 {
            let stride = if g > 0 && b == 0 { 2 } else { 1 };
            let c = c_in;
            net = net.stage(&format!("layer{}.{b}", g + 1), move |vb| {
                BasicBlock::new(c, c_out, stride, vb)
            });
            c_in = c_out;
        }
    }
    net.stage("head", move |vb| {
        let l = linear(c_in, classes, vb)?;
        Ok(seq().add_fn(|x| x.mean(3)?.mean(2)).add(l))
    })
}

/// VGG-11 layout for `3 x 32 x 32` inputs: eight 3x3 conv + ReLU stages of `width`, `2w`, `4w`,
/// `4w`, `8w`, `8w`, `8w`, `8w` channels with max-pooling after stages 1, 2, 4, 6 and 8 (32 -> 1
/// pixel), then dense `8w -> 8w` + ReLU and dense `8w -> classes`. Ten stages.
pub fn vgg11(width: usize, classes: usize) -> StagedNet {
    const WIDTHS: [usize; 8] = [1, 2, 4, 4, 8, 8, 8, 8];
    const POOLS: [bool; 8] = [true, true, false, true, false, true, false, true];
    let mut net = StagedNet::new("vgg11", &[3, 32, 32]);
    let mut c_in = 3;
    for (i, (mult, pool)) in WIDTHS.into_iter().zip(POOLS).enumerate() {
        let (a, b) = (c_in, width * mult);
        net = net.stage(&format!("conv{}", i + 1), move |vb| {
            let c = conv(a, b, 3, 1, vb)?;
            let s = seq().add(c).add_fn(|x| x.relu());
            Ok(if pool {
                s.add_fn(|x| x.max_pool2d(2))
            } else {
                s
            })
        });
        c_in = b;
    }
    let c = c_in;
    net.stage("fc1", move |vb| {
        let l = linear(c, c, vb)?;
        Ok(seq()
            .add_fn(|x| x.flatten_from(1))
            .add(l)
            .add_fn(|x| x.relu()))
    })
    .stage("fc2", move |vb| linear(c, classes, vb))
}

/// A model by name: `mlp` (for `input`), `lenet`, `resnet18`, `vgg11` (the last two for 3x32x32
/// inputs), with `width` channels where the layout has a width; `None` for an unknown name.
pub fn by_name(name: &str, input: &[usize], width: usize, classes: usize) -> Option<StagedNet> {
    match name {
        "mlp" => {
            let features: usize = input.iter().product();
            Some(mlp(input, &[features, 8 * width.max(1), classes]))
        }
        "lenet" => match input {
            &[c, h, w] if h == w && h >= 16 => Some(lenet(c, h, classes)),
            _ => None,
        },
        "resnet18" => Some(resnet18(width, classes)),
        "vgg11" => Some(vgg11(width, classes)),
        _ => None,
    }
}

/// The names [`by_name`] knows.
pub const MODEL_NAMES: [&str; 4] = ["mlp", "lenet", "resnet18", "vgg11"];
