//! A sequential network whose parameters are an ordered list of named flat tensors.

use ndarray::{Array2, ArrayD, Ix2};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::dnn::DnnError;
use crate::dnn::layers::{
    Conv2d, Dense, Flatten, Init, Layer, MaxPool2d, Relu, SoftmaxCrossEntropy,
};

/// Name and shape of one parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// `"{layer_index}.{kind}.{weight|bias}"`, e.g. `"0.dense.weight"`.
    pub name: String,
    /// Index of the owning layer in the network.
    pub layer: usize,
    /// The tensor's shape (row-major).
    pub shape: Vec<usize>,
}

impl ParamSpec {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// True for a tensor without elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Layers applied in order; the last layer outputs logits `(N, classes)`.
///
/// Parameter tensors are listed layer 0 first, weight before bias. That order is the one
/// P3 prioritises by (earlier = needed sooner by the next forward pass).
#[derive(Debug, Clone, Default)]
pub struct Sequential {
    layers: Vec<Layer>,
}

impl Sequential {
    /// A network of these layers, in forward order.
    pub fn new(layers: Vec<Layer>) -> Self {
        Sequential { layers }
    }

    /// The layers, in forward order.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Mutable access to one layer, for callers that run the network layer by layer
    /// (a P3 worker starts layer `i`'s forward pass as soon as its parameters arrived).
    pub fn layer_mut(&mut self, i: usize) -> Option<&mut Layer> {
        self.layers.get_mut(i)
    }

    /// For each layer, the range of its tensors in [`Sequential::params`] order.
    pub fn layer_param_ranges(&self) -> Vec<std::ops::Range<usize>> {
        let mut start = 0;
        self.layers
            .iter()
            .map(|l| {
                let n = l.param_shapes().len();
                let r = start..start + n;
                start += n;
                r
            })
            .collect()
    }

    /// Multi-layer perceptron `sizes[0] -> sizes[1] -> ... -> sizes[last]` with ReLU between
    /// dense layers (none after the last). Hidden layers use He init, the output Xavier.
    pub fn mlp(sizes: &[usize], seed: u64) -> Result<Self, DnnError> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(DnnError::Architecture(format!(
                "mlp needs at least two non-zero sizes, got {sizes:?}"
            )));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut layers = Vec::new();
        for i in 0..sizes.len() - 1 {
            let last = i == sizes.len() - 2;
            let init = if last { Init::Xavier } else { Init::He };
            layers.push(Layer::Dense(Dense::new(
                sizes[i],
                sizes[i + 1],
                init,
                &mut rng,
            )));
            if !last {
                layers.push(Layer::Relu(Relu::new()));
            }
        }
        Ok(Sequential { layers })
    }

    /// Small CNN for `(N, 1, 28, 28)` inputs:
    /// conv3x3(1->8, pad 1) relu pool2 -> conv3x3(8->16, pad 1) relu pool2 -> flatten ->
    /// dense(16*7*7 -> 10). 9,098 parameters.
    pub fn small_cnn(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        Sequential {
            layers: vec![
                Layer::Conv2d(Conv2d::new(1, 8, 3, 1, Init::He, &mut rng)),
                Layer::Relu(Relu::new()),
                Layer::MaxPool2d(MaxPool2d::new()),
                Layer::Conv2d(Conv2d::new(8, 16, 3, 1, Init::He, &mut rng)),
                Layer::Relu(Relu::new()),
                Layer::MaxPool2d(MaxPool2d::new()),
                Layer::Flatten(Flatten::new()),
                Layer::Dense(Dense::new(16 * 7 * 7, 10, Init::Xavier, &mut rng)),
            ],
        }
    }

    /// Names and shapes of all parameter tensors, in [`Sequential::params`] order.
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                l.param_shapes()
                    .into_iter()
                    .map(move |(suffix, shape)| ParamSpec {
                        name: format!("{i}.{}.{suffix}", l.kind()),
                        layer: i,
                        shape,
                    })
            })
            .collect()
    }

    /// Element counts of all parameter tensors (what a `SlicePlan` is built from).
    pub fn param_counts(&self) -> Vec<u64> {
        self.params().iter().map(|p| p.len() as u64).collect()
    }

    /// Total parameters.
    pub fn num_params(&self) -> usize {
        self.params().iter().map(|p| p.len()).sum()
    }

    /// Flat views of all parameter tensors, layer 0 first.
    pub fn params(&self) -> Vec<&[f32]> {
        self.layers.iter().flat_map(|l| l.params()).collect()
    }

    /// `(name, view)` pairs, same order as [`Sequential::params`].
    pub fn named_params(&self) -> Vec<(String, &[f32])> {
        self.param_specs()
            .into_iter()
            .map(|s| s.name)
            .zip(self.params())
            .collect()
    }

    /// Mutable flat views of every parameter tensor, in network order.
    pub fn params_mut(&mut self) -> Vec<&mut [f32]> {
        self.layers
            .iter_mut()
            .flat_map(|l| l.params_mut())
            .collect()
    }

    /// Gradients of the last backward pass, same order and lengths as the parameters.
    pub fn grads(&self) -> Vec<&[f32]> {
        self.layers.iter().flat_map(|l| l.grads()).collect()
    }

    /// Overwrite all parameters. Checks every length before writing anything, so a bad
    /// call leaves the network untouched.
    pub fn set_params(&mut self, values: &[&[f32]]) -> Result<(), DnnError> {
        let specs = self.param_specs();
        if values.len() != specs.len() {
            return Err(DnnError::ParamCount {
                expected: specs.len(),
                got: values.len(),
            });
        }
        for (i, (spec, v)) in specs.iter().zip(values).enumerate() {
            if spec.len() != v.len() {
                return Err(DnnError::ParamLength {
                    index: i,
                    name: spec.name.clone(),
                    expected: spec.len(),
                    got: v.len(),
                });
            }
        }
        for (dst, src) in self.params_mut().into_iter().zip(values) {
            dst.copy_from_slice(src);
        }
        Ok(())
    }

    /// All parameters concatenated into one vector (layer 0 first).
    pub fn flat_params(&self) -> Vec<f32> {
        self.params().concat()
    }

    /// Inverse of [`Sequential::flat_params`].
    pub fn set_flat_params(&mut self, flat: &[f32]) -> Result<(), DnnError> {
        let total = self.num_params();
        if flat.len() != total {
            return Err(DnnError::ParamLength {
                index: 0,
                name: "<all>".into(),
                expected: total,
                got: flat.len(),
            });
        }
        let mut off = 0;
        for dst in self.params_mut() {
            dst.copy_from_slice(&flat[off..off + dst.len()]);
            off += dst.len();
        }
        Ok(())
    }

    /// Forward pass; returns logits `(N, classes)`. Caches activations for `backward`.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<Array2<f32>, DnnError> {
        let mut a = x.clone();
        for l in &mut self.layers {
            a = l.forward(&a)?;
        }
        let shape = a.shape().to_vec();
        a.into_dimensionality::<Ix2>().map_err(|_| DnnError::Shape {
            layer: "sequential output".into(),
            expected: "(N, classes)".into(),
            got: shape,
        })
    }

    /// Backward pass from dL/dlogits; fills every layer's gradients.
    pub fn backward(&mut self, grad_logits: &Array2<f32>) -> Result<(), DnnError> {
        let mut g = grad_logits.clone().into_dyn();
        for l in self.layers.iter_mut().rev() {
            g = l.backward(&g)?;
        }
        Ok(())
    }

    /// Forward + softmax cross-entropy + backward. Returns `(mean loss, accuracy)` of the
    /// batch *before* any update; gradients are then available from [`Sequential::grads`].
    pub fn compute_gradients(
        &mut self,
        x: &ArrayD<f32>,
        labels: &[usize],
    ) -> Result<(f32, f32), DnnError> {
        let logits = self.forward(x)?;
        let (loss, acc) = SoftmaxCrossEntropy::loss_and_accuracy(&logits.view(), labels)?;
        let (_, g) = SoftmaxCrossEntropy::loss_and_grad(&logits.view(), labels)?;
        self.backward(&g)?;
        Ok((loss, acc))
    }

    /// Mean loss and accuracy on a batch (forward only).
    pub fn loss_and_accuracy(
        &mut self,
        x: &ArrayD<f32>,
        labels: &[usize],
    ) -> Result<(f32, f32), DnnError> {
        let logits = self.forward(x)?;
        SoftmaxCrossEntropy::loss_and_accuracy(&logits.view(), labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    #[test]
    fn mlp_param_layout() {
        let net = Sequential::mlp(&[4, 8, 3], 1).unwrap();
        let names: Vec<String> = net.param_specs().into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "0.dense.weight",
                "0.dense.bias",
                "2.dense.weight",
                "2.dense.bias"
            ]
        );
        assert_eq!(net.param_counts(), vec![32, 8, 24, 3]);
        assert_eq!(net.num_params(), 67);
        assert!(Sequential::mlp(&[4], 1).is_err());
    }

    #[test]
    fn seeded_init_is_deterministic() {
        let a = Sequential::mlp(&[4, 8, 3], 7).unwrap().flat_params();
        let b = Sequential::mlp(&[4, 8, 3], 7).unwrap().flat_params();
        let c = Sequential::mlp(&[4, 8, 3], 8).unwrap().flat_params();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn set_params_roundtrip_and_errors() {
        let mut net = Sequential::mlp(&[3, 2], 1).unwrap();
        let new: Vec<Vec<f32>> = net.params().iter().map(|p| vec![0.5; p.len()]).collect();
        let views: Vec<&[f32]> = new.iter().map(|v| v.as_slice()).collect();
        net.set_params(&views).unwrap();
        assert!(net.flat_params().iter().all(|&v| v == 0.5));
        assert!(matches!(
            net.set_params(&views[..1]),
            Err(DnnError::ParamCount { .. })
        ));
        let bad = [&[1.0f32][..], &[1.0, 2.0][..]];
        assert!(matches!(
            net.set_params(&bad),
            Err(DnnError::ParamLength { index: 0, .. })
        ));
        assert!(net.flat_params().iter().all(|&v| v == 0.5));
        let flat: Vec<f32> = (0..8).map(|i| i as f32).collect();
        net.set_flat_params(&flat).unwrap();
        assert_eq!(net.flat_params(), flat);
    }

    #[test]
    fn small_cnn_shapes_and_grads() {
        let mut net = Sequential::small_cnn(3);
        assert_eq!(net.num_params(), 80 + 1168 + 7850);
        let x = ArrayD::from_elem(IxDyn(&[2, 1, 28, 28]), 0.3f32);
        let logits = net.forward(&x).unwrap();
        assert_eq!(logits.shape(), &[2, 10]);
        let (loss, _) = net.compute_gradients(&x, &[1, 7]).unwrap();
        assert!(loss.is_finite());
        let g = net.grads();
        assert_eq!(g.len(), 6);
        for (g, p) in g.iter().zip(net.params()) {
            assert_eq!(g.len(), p.len());
        }
        assert!(g[0].iter().any(|&v| v != 0.0));
    }

    /// Whole-network gradient check of the CNN path on a tiny input (all layer kinds
    /// chained), using dL/dparam from finite differences of the real loss.
    #[test]
    fn tiny_cnn_network_grad_check() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut net = Sequential::new(vec![
            Layer::Conv2d(Conv2d::new(1, 2, 3, 1, Init::He, &mut rng)),
            Layer::Relu(Relu::new()),
            Layer::MaxPool2d(MaxPool2d::new()),
            Layer::Flatten(Flatten::new()),
            Layer::Dense(Dense::new(2 * 2 * 2, 3, Init::Xavier, &mut rng)),
        ]);
        let x = ArrayD::from_shape_vec(
            IxDyn(&[2, 1, 4, 4]),
            (0..32)
                .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
                .collect(),
        )
        .unwrap();
        let labels = [2, 0];
        net.compute_gradients(&x, &labels).unwrap();
        let grads: Vec<f32> = net.grads().concat();
        let base = net.flat_params();
        let eps = 1e-3f32;
        let mut max_err = 0.0f32;
        for i in 0..base.len() {
            let mut p = base.clone();
            p[i] += eps;
            net.set_flat_params(&p).unwrap();
            let lp = net.loss_and_accuracy(&x, &labels).unwrap().0;
            p[i] -= 2.0 * eps;
            net.set_flat_params(&p).unwrap();
            let lm = net.loss_and_accuracy(&x, &labels).unwrap().0;
            let num = (lp - lm) / (2.0 * eps);
            max_err = max_err.max((num - grads[i]).abs());
        }
        assert!(max_err < 5e-3, "max grad error {max_err}");
    }
}
