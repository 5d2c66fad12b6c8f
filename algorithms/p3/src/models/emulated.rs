//! [`EmulatedModel`]: a [`ModelProfile`] with emulated compute as a [`StageModel`].

use std::time::Duration;

use crate::core::ModelProfile;
use crate::error::P3Error;
use crate::kit::{StageGrads, StageModel};

/// A profiled model with emulated compute: stage = profile layer with one tensor of the layer's
/// size; forward and backward take the profiled time on a device of `device_flops_per_s`; gradients
/// are real buffers of the layer's size (so real bytes cross the network) holding a constant.
pub struct EmulatedModel {
    fwd: Vec<Duration>,
    bwd: Vec<Duration>,
    counts: Vec<usize>,
    grad_value: f32,
}

impl EmulatedModel {
    /// `profile` at `batch` samples per iteration on a device of `device_flops_per_s`.
    pub fn new(profile: &ModelProfile, device_flops_per_s: f64, batch: usize) -> Self {
        let (fwd, bwd) = profile.layer_seconds(device_flops_per_s, batch);
        let secs = |t: Vec<f64>| t.into_iter().map(|s| Duration::from_secs_f64(s.max(0.0)));
        EmulatedModel {
            fwd: secs(fwd).collect(),
            bwd: secs(bwd).collect(),
            counts: profile.layers.iter().map(|l| l.params as usize).collect(),
            grad_value: 1e-3,
        }
    }
}

impl StageModel for EmulatedModel {
    type Error = P3Error;

    fn stage_tensors(&self) -> Vec<Vec<u64>> {
        self.counts.iter().map(|&n| vec![n as u64]).collect()
    }

    fn set_tensor(&mut self, tensor: usize, values: &[f32]) -> Result<(), P3Error> {
        match self.counts.get(tensor) {
            Some(&n) if n == values.len() => Ok(()),
            Some(&n) => Err(P3Error::TensorLength {
                tensor,
                expected: n,
                got: values.len(),
            }),
            None => Err(P3Error::NoTensor(tensor)),
        }
    }

    fn forward_stage(&mut self, _iter: u64, stage: usize) -> Result<Duration, P3Error> {
        self.fwd.get(stage).copied().ok_or(P3Error::NoStage(stage))
    }

    fn backward_stage(&mut self, stage: usize) -> Result<StageGrads, P3Error> {
        let compute = *self.bwd.get(stage).ok_or(P3Error::NoStage(stage))?;
        let n = self.counts[stage];
        Ok(StageGrads {
            grads: vec![vec![self.grad_value; n]],
            compute,
        })
    }
}
