//! The worker's engine, sans I/O: [`SliceWorkerCore`] is a worker's view of the plan. It cuts a
//! layer's gradient into slices, reassembles returned parameter slices into per-layer buffers and
//! tracks, per layer, whether the next forward pass may use it ([`LayerReadiness`]).

use crate::core::error::P3CoreError;
use crate::core::readiness::LayerReadiness;
use crate::core::slicing::{Slice, SlicePlan};

/// A worker's bookkeeping: parameter buffers per plan layer, readiness, iteration.
#[derive(Debug, Clone)]
pub struct SliceWorkerCore {
    plan: SlicePlan,
    readiness: LayerReadiness,
    params: Vec<Vec<f32>>,
    /// Iteration whose parameters are expected back.
    iter: u64,
}

impl SliceWorkerCore {
    /// `initial` holds one buffer per plan layer, all ready (iteration 0 starts from them).
    pub fn new(plan: SlicePlan, initial: Vec<Vec<f32>>) -> Result<Self, P3CoreError> {
        if initial.len() != plan.n_layers() {
            return Err(P3CoreError::TensorCount {
                expected: plan.n_layers(),
                got: initial.len(),
            });
        }
        for (layer, p) in initial.iter().enumerate() {
            let expected: u64 = plan.layer_slices(layer).iter().map(|s| s.len).sum();
            if p.len() as u64 != expected {
                return Err(P3CoreError::LayerLength {
                    layer,
                    expected: expected as usize,
                    got: p.len(),
                });
            }
        }
        let mut readiness = LayerReadiness::new(&plan);
        for s in plan.slices() {
            readiness.mark_received(s.id)?;
        }
        Ok(SliceWorkerCore {
            plan,
            readiness,
            params: initial,
            iter: 0,
        })
    }

    /// Cuts `layer`'s gradient into its slices (slice descriptor + values), in offset order.
    pub fn grad_slices(
        &self,
        layer: usize,
        grad: &[f32],
    ) -> Result<Vec<(Slice, Vec<f32>)>, P3CoreError> {
        let slices = self.plan.layer_slices(layer);
        let expected: u64 = slices.iter().map(|s| s.len).sum();
        if grad.len() as u64 != expected || layer >= self.plan.n_layers() {
            return Err(P3CoreError::LayerLength {
                layer,
                expected: expected as usize,
                got: grad.len(),
            });
        }
        Ok(slices
            .iter()
            .map(|s| {
                let a = s.offset as usize;
                (*s, grad[a..a + s.len as usize].to_vec())
            })
            .collect())
    }

    /// Starts waiting for the parameters of iteration `iter` (call after the forward pass
    /// of the previous parameters finished and before pushing this iteration's gradients).
    pub fn begin_round(&mut self, iter: u64) {
        self.iter = iter;
        self.readiness.reset();
    }

    /// Stores a returned slice. Returns `Some(layer)` when this completed the layer.
    pub fn receive(
        &mut self,
        iter: u64,
        slice: usize,
        values: &[f32],
    ) -> Result<Option<usize>, P3CoreError> {
        let s = *self.plan.slice(slice).ok_or(P3CoreError::UnknownSlice {
            id: slice,
            n_slices: self.plan.slices().len(),
        })?;
        if iter != self.iter {
            return Err(P3CoreError::WrongIteration {
                slice,
                expected: self.iter,
                got: iter,
            });
        }
        if values.len() as u64 != s.len {
            return Err(P3CoreError::Length {
                slice,
                expected: s.len as usize,
                got: values.len(),
            });
        }
        let a = s.offset as usize;
        self.params[s.layer][a..a + values.len()].copy_from_slice(values);
        Ok(self.readiness.mark_received(slice)?.then_some(s.layer))
    }

    /// Whether `layer`'s parameters of the awaited iteration are all back.
    pub fn is_ready(&self, layer: usize) -> bool {
        self.readiness.is_ready(layer)
    }

    /// Whether every layer's parameters are back.
    pub fn all_ready(&self) -> bool {
        self.readiness.all_ready()
    }

    /// The current values of one layer.
    pub fn layer_params(&self, layer: usize) -> Option<&[f32]> {
        self.params.get(layer).map(|p| p.as_slice())
    }

    /// The current values of every layer.
    pub fn params(&self) -> &[Vec<f32>] {
        &self.params
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_readiness_per_layer() {
        let plan = SlicePlan::new(&[4, 2], 2, 2).unwrap();
        let mut w = SliceWorkerCore::new(plan, vec![vec![0.0; 4], vec![0.0; 2]]).unwrap();
        assert!(w.all_ready());
        w.begin_round(1);
        assert!(!w.is_ready(0) && !w.is_ready(1));
        assert_eq!(w.receive(1, 2, &[5.0, 6.0]).unwrap(), Some(1));
        assert!(w.is_ready(1) && !w.is_ready(0));
        assert_eq!(w.receive(1, 0, &[1.0, 2.0]).unwrap(), None);
        assert!(matches!(
            w.receive(0, 1, &[1.0, 2.0]),
            Err(P3CoreError::WrongIteration { .. })
        ));
        assert!(matches!(
            w.receive(1, 1, &[1.0]),
            Err(P3CoreError::Length { .. })
        ));
        assert_eq!(w.receive(1, 1, &[3.0, 4.0]).unwrap(), Some(0));
        assert_eq!(w.layer_params(0).unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        assert!(w.grad_slices(0, &[0.0; 3]).is_err());
        assert_eq!(w.grad_slices(0, &[0.0; 4]).unwrap().len(), 2);
    }
}
