//! Optimisers over flat parameter slices (so a server shard can apply them to a slice).

use crate::MlError;

/// SGD with (heavy-ball) momentum over flat `f32` tensors or slices of them:
/// `v <- momentum * v + grad; p <- p - lr * v`; the velocity lives with the parameters.
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
    ) -> Result<(), MlError> {
        if velocity.len() != params.len() || grad.len() != params.len() {
            return Err(MlError::ParamLength {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
