//! Optimisers over flat parameter slices (so a server shard can apply them to a slice).

use crate::dnn::DnnError;

/// SGD with (heavy-ball) momentum over flat `f32` tensors or slices of them:
/// `v <- momentum * v + grad; p <- p - lr * v`. (The parameter server's per-row rule is
/// a different thing: stateful, sparse, in `petrel_ps`.)
///
/// Plain data, no hidden state: the velocity lives with whoever owns the parameters
/// (a server shard keeps one velocity buffer per slice it owns).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlatSgdMomentum {
    /// Learning rate.
    pub lr: f32,
    /// Momentum (0 = plain SGD).
    pub momentum: f32,
}

impl FlatSgdMomentum {
    /// SGD with this learning rate and momentum.
    pub fn new(lr: f32, momentum: f32) -> Self {
        FlatSgdMomentum { lr, momentum }
    }

    /// One update of one tensor (or slice of one). All three slices must have equal length.
    pub fn step(
        &self,
        velocity: &mut [f32],
        params: &mut [f32],
        grad: &[f32],
    ) -> Result<(), DnnError> {
        if velocity.len() != params.len() || grad.len() != params.len() {
            return Err(DnnError::ParamLength {
                index: 0,
                name: format!("velocity {} / grad {}", velocity.len(), grad.len()),
                expected: params.len(),
                got: grad.len().min(velocity.len()),
            });
        }
        for ((v, p), g) in velocity.iter_mut().zip(params.iter_mut()).zip(grad) {
            *v = self.momentum * *v + g;
            *p -= self.lr * *v;
        }
        Ok(())
    }

    /// Zeroed velocity buffers matching a network's parameter tensors.
    pub fn zero_velocity(net: &crate::dnn::Sequential) -> Vec<Vec<f32>> {
        net.params().iter().map(|p| vec![0.0; p.len()]).collect()
    }

    /// Apply one step to every tensor of `net` using its current gradients.
    pub fn step_network(
        &self,
        velocity: &mut [Vec<f32>],
        net: &mut crate::dnn::Sequential,
    ) -> Result<(), DnnError> {
        let grads: Vec<Vec<f32>> = net.grads().iter().map(|g| g.to_vec()).collect();
        if velocity.len() != grads.len() {
            return Err(DnnError::ParamCount {
                expected: grads.len(),
                got: velocity.len(),
            });
        }
        for ((v, p), g) in velocity.iter_mut().zip(net.params_mut()).zip(&grads) {
            self.step(v, p, g)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnn::Sequential;
    use crate::dnn::data::{Dataset, gaussian_clusters, teacher_mlp, template_images};

    #[test]
    fn step_formula() {
        let opt = FlatSgdMomentum::new(0.1, 0.9);
        let mut v = vec![1.0, 0.0];
        let mut p = vec![1.0, 1.0];
        opt.step(&mut v, &mut p, &[1.0, 2.0]).unwrap();
        assert!((v[0] - 1.9).abs() < 1e-6 && (v[1] - 2.0).abs() < 1e-6);
        assert!((p[0] - 0.81).abs() < 1e-6 && (p[1] - 0.8).abs() < 1e-6);
        assert!(opt.step(&mut v, &mut p, &[1.0]).is_err());
    }

    fn train(net: &mut Sequential, data: &Dataset, steps: usize, batch: usize) -> f32 {
        train_lr(net, data, steps, batch, 0.05)
    }

    fn train_lr(net: &mut Sequential, data: &Dataset, steps: usize, batch: usize, lr: f32) -> f32 {
        let opt = FlatSgdMomentum::new(lr, 0.9);
        let mut vel = FlatSgdMomentum::zero_velocity(net);
        for s in 0..steps {
            let (x, y) = data.batch((s * batch) % data.len(), batch);
            net.compute_gradients(&x, &y).unwrap();
            opt.step_network(&mut vel, net).unwrap();
        }
        let (x, y) = data.batch(0, data.len());
        net.loss_and_accuracy(&x, &y).unwrap().1
    }

    #[test]
    fn mlp_learns_gaussian_clusters() {
        let data = gaussian_clusters(600, 10, 4, 1.0, 42).unwrap();
        let mut net = Sequential::mlp(&[10, 32, 4], 1).unwrap();
        let acc = train(&mut net, &data, 300, 32);
        assert!(acc > 0.95, "accuracy {acc}");
    }

    #[test]
    fn mlp_learns_teacher_labels() {
        let data = teacher_mlp(1000, 8, 16, 3, 7).unwrap();
        let mut net = Sequential::mlp(&[8, 64, 3], 2).unwrap();
        let acc = train(&mut net, &data, 400, 32);
        assert!(acc > 0.85, "accuracy {acc}");
    }

    #[test]
    fn small_cnn_learns_template_images() {
        let data = template_images(64, 4, 28, 0.5, 3).unwrap();
        let mut net = Sequential::small_cnn(4);
        let acc = train_lr(&mut net, &data, 30, 16, 0.02);
        assert!(acc > 0.9, "accuracy {acc}");
    }
}
