//! Per-layer readiness: which slices of each layer have arrived in the current round, so a
//! worker's forward pass of layer `l` waits only for layer `l`'s slices (P3's point).

use crate::core::error::P3CoreError;
use crate::core::slicing::SlicePlan;

/// Which slices of each layer have arrived in the current round; a layer's forward pass
/// may start once [`LayerReadiness::is_ready`] (all its slices arrived).
#[derive(Debug, Clone)]
pub struct LayerReadiness {
    layer_of: Vec<usize>,
    received: Vec<bool>,
    missing: Vec<usize>,
    totals: Vec<usize>,
}

impl LayerReadiness {
    /// Nothing received yet (layers without slices are ready from the start).
    pub fn new(plan: &SlicePlan) -> Self {
        let totals = plan.slices_per_layer();
        LayerReadiness {
            layer_of: plan.slices().iter().map(|s| s.layer).collect(),
            received: vec![false; plan.slices().len()],
            missing: totals.clone(),
            totals,
        }
    }

    /// Records a slice; returns `true` when this completed its layer. Receiving the same
    /// slice twice in a round is harmless (returns `false` the second time).
    pub fn mark_received(&mut self, slice_id: usize) -> Result<bool, P3CoreError> {
        let n_slices = self.received.len();
        let layer = *self
            .layer_of
            .get(slice_id)
            .ok_or(P3CoreError::UnknownSlice {
                id: slice_id,
                n_slices,
            })?;
        if self.received[slice_id] {
            return Ok(false);
        }
        self.received[slice_id] = true;
        self.missing[layer] -= 1;
        Ok(self.missing[layer] == 0)
    }

    /// Whether every slice of `layer` arrived this round (true for layers without slices).
    pub fn is_ready(&self, layer: usize) -> bool {
        self.missing.get(layer).is_some_and(|&m| m == 0)
    }

    /// Whether every layer is ready.
    pub fn all_ready(&self) -> bool {
        self.missing.iter().all(|&m| m == 0)
    }

    /// Starts a new round for one layer (after its forward pass consumed it).
    pub fn reset_layer(&mut self, layer: usize) {
        if let Some(&total) = self.totals.get(layer) {
            self.missing[layer] = total;
            for (r, &l) in self.received.iter_mut().zip(&self.layer_of) {
                if l == layer {
                    *r = false;
                }
            }
        }
    }

    /// Starts a new round for all layers.
    pub fn reset(&mut self) {
        self.received.iter_mut().for_each(|r| *r = false);
        self.missing.clone_from(&self.totals);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use petrel_messages::{Priority, PriorityQueue};

    #[test]
    fn readiness_tracks_layers() {
        let plan = SlicePlan::new(&[4, 0, 2], 2, 2).unwrap();
        let mut r = LayerReadiness::new(&plan);
        assert!(!r.is_ready(0) && r.is_ready(1) && !r.is_ready(2));
        assert_eq!(r.mark_received(2).ok(), Some(true)); // layer 2 has one slice
        assert!(r.is_ready(2));
        assert_eq!(r.mark_received(1).ok(), Some(false));
        assert_eq!(r.mark_received(1).ok(), Some(false)); // duplicate is harmless
        assert!(!r.is_ready(0));
        assert_eq!(r.mark_received(0).ok(), Some(true));
        assert!(r.all_ready());
        assert!(matches!(
            r.mark_received(3),
            Err(P3CoreError::UnknownSlice { id: 3, n_slices: 3 })
        ));
        r.reset_layer(0);
        assert_eq!(r.mark_received(0).ok(), Some(false));
        assert!(!r.is_ready(0) && r.is_ready(2));
        r.reset();
        assert!(!r.is_ready(2));
    }

    /// How a runtime uses a plan with a network's tensors (an MLP 6 -> 5 -> 3: weights and
    /// biases): every parameter tensor is a plan "layer", slices address
    /// `(tensor, offset, len)` of the flat views.
    #[test]
    fn plan_slices_a_network_s_tensors() {
        let counts = [30u64, 5, 15, 3];
        let plan = SlicePlan::new(&counts, 4, 3).unwrap();
        let grads: Vec<Vec<f32>> = counts
            .iter()
            .enumerate()
            .map(|(t, &n)| (0..n).map(|i| (t * 100) as f32 + i as f32 * 0.5).collect())
            .collect();
        let mut rebuilt: Vec<Vec<f32>> = grads.iter().map(|g| vec![0.0; g.len()]).collect();
        let mut q = PriorityQueue::new();
        for l in (0..plan.n_layers()).rev() {
            for s in plan.layer_slices(l) {
                q.push(s.priority, *s);
            }
        }
        let mut ready = LayerReadiness::new(&plan);
        let mut last_prio = Priority(i32::MAX);
        while let Some((_, s)) = q.pop() {
            assert!(s.priority <= last_prio);
            last_prio = s.priority;
            let (o, n) = (s.offset as usize, s.len as usize);
            rebuilt[s.layer][o..o + n].copy_from_slice(&grads[s.layer][o..o + n]);
            ready.mark_received(s.id).unwrap();
        }
        assert!(ready.all_ready());
        assert_eq!(rebuilt, grads);
    }
}
