//! LeNet-style conv net (3->16->32 5x5 convs, max-pool 2, 800->120->10), batch 32,
//! forward + cross-entropy + backward, candle vs burn (ndarray + autodiff) alternating.
use std::time::Instant;

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device as BurnDevice, Distribution, Int, Tensor, TensorData};
use candle_core::{DType, Device, Module};
use candle_nn::VarBuilder;

const BATCH: usize = 32;

#[derive(burn::module::Module, Debug)]
struct BurnLeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    act: Relu,
}

impl BurnLeNet {
    fn new(device: &BurnDevice) -> Self {
        BurnLeNet {
            conv1: Conv2dConfig::new([3, 16], [5, 5]).init(device),
            conv2: Conv2dConfig::new([16, 32], [5, 5]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(800, 120).init(device),
            fc2: LinearConfig::new(120, 10).init(device),
            act: Relu::new(),
        }
    }
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let x = self.pool.forward(self.act.forward(self.conv1.forward(x)));
        let x = self.pool.forward(self.act.forward(self.conv2.forward(x)));
        let x: Tensor<2> = x.flatten(1, 3);
        self.fc2.forward(self.act.forward(self.fc1.forward(x)))
    }
}

struct CandleLeNet {
    c1: candle_nn::Conv2d,
    c2: candle_nn::Conv2d,
    f1: candle_nn::Linear,
    f2: candle_nn::Linear,
}

impl CandleLeNet {
    fn forward(&self, x: &candle_core::Tensor) -> candle_core::Result<candle_core::Tensor> {
        let x = self.c1.forward(x)?.relu()?.max_pool2d(2)?;
        let x = self.c2.forward(&x)?.relu()?.max_pool2d(2)?;
        let x = x.flatten_from(1)?;
        self.f2.forward(&self.f1.forward(&x)?.relu()?)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    // candle
    let varmap = candle_nn::VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let cfg = candle_nn::Conv2dConfig::default();
    let cnet = CandleLeNet {
        c1: candle_nn::conv2d(3, 16, 5, cfg, vb.pp("c1"))?,
        c2: candle_nn::conv2d(16, 32, 5, cfg, vb.pp("c2"))?,
        f1: candle_nn::linear(800, 120, vb.pp("f1"))?,
        f2: candle_nn::linear(120, 10, vb.pp("f2"))?,
    };
    let cx = candle_core::Tensor::randn(0f32, 1.0, (BATCH, 3, 32, 32), &Device::Cpu)?;
    let cy = candle_core::Tensor::from_vec(
        (0..BATCH as u32).map(|i| i % 10).collect::<Vec<_>>(),
        BATCH,
        &Device::Cpu,
    )?;
    let candle_step = || -> candle_core::Result<f32> {
        let logits = cnet.forward(&cx)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &cy)?;
        let grads = loss.backward()?;
        let mut s = 0f32;
        for v in varmap.all_vars() {
            if let Some(g) = grads.get(v.as_tensor()) {
                s += g.sum_all()?.to_scalar::<f32>()?;
            }
        }
        Ok(s)
    };
    // burn
    let device = BurnDevice::ndarray().autodiff();
    let bnet = BurnLeNet::new(&device);
    let bx = Tensor::<4>::random([BATCH, 3, 32, 32], Distribution::Normal(0.0, 1.0), &device);
    let by = Tensor::<1, Int>::from_data(
        TensorData::new(
            (0..BATCH as i64).map(|i| i % 10).collect::<Vec<_>>(),
            [BATCH],
        ),
        &device,
    );
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let burn_step = || -> f32 {
        let logits = bnet.forward(bx.clone());
        let loss = loss_fn.forward(logits, by.clone());
        let grads = loss.backward();
        let g = bnet
            .conv1
            .weight
            .grad(&grads)
            .map(|g| g.sum().into_scalar())
            .unwrap_or(0.0);
        g
    };
    candle_step()?;
    burn_step();
    let (mut tc, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..iters {
        let t = Instant::now();
        candle_step()?;
        tc.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        burn_step();
        tb.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (mc, mb) = (med(&mut tc), med(&mut tb));
    println!("framework | median ms per iteration (batch {BATCH}, fwd+bwd) | images/s");
    println!("candle 0.11 | {mc:.1} | {:.1}", BATCH as f64 / mc * 1e3);
    println!(
        "burn 0.22 ndarray+autodiff | {mb:.1} | {:.1}",
        BATCH as f64 / mb * 1e3
    );
    println!(
        "{{\"batch\":{BATCH},\"iterations\":{iters},\"candle_ms\":{mc:.2},\"burn_ms\":{mb:.2},\"burn_over_candle\":{:.3}}}",
        mb / mc
    );
    Ok(())
}
