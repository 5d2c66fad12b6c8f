//! The cost model and the C/M bounds of synchronous data-parallel training.
//!
//! # Wire model
//! A worker pushes gradients on its uplink and pulls parameters on its downlink; on a
//! full-duplex NIC the two directions do not compete, so one full model transfer costs
//! `M = params * bytes_per_param / bandwidth` (not 2x). Servers are assumed to be on
//! separate NICs of the same bandwidth with one shard per worker, so every shard sees the
//! same load as a worker. If servers are co-located with workers (the P3 paper's set-up and
//! the reference's), each NIC also carries its server's replies to the other `n - 1`
//! workers: per direction it moves `2 (n-1)/n` model copies, and [`CostModel`] with
//! `colocated_servers` accounts for that by the same factor on M and on every slice.

use crate::core::error::P3CoreError;
use crate::core::profile::ModelProfile;

/// Hardware and set-up assumptions for bounds and simulation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Sustained FLOP/s of one worker's device.
    pub device_flops_per_s: f64,
    /// Samples per worker per iteration.
    pub batch: usize,
    /// Per-direction NIC bandwidth in bytes/s (full duplex).
    pub bandwidth_bytes_per_s: f64,
    /// 4 for f32 tensors.
    pub bytes_per_param: f64,
    /// Workers training data-parallel.
    pub n_workers: usize,
    /// Servers share the workers' NICs (see module docs); `false` = dedicated NICs.
    pub colocated_servers: bool,
    /// Fixed cost per transferred slice (latency / per-message processing), seconds.
    pub per_slice_overhead_s: f64,
}

impl CostModel {
    /// f32 parameters, dedicated server NICs, no per-slice overhead.
    pub fn new(
        device_flops_per_s: f64,
        batch: usize,
        bandwidth_bytes_per_s: f64,
        n_workers: usize,
    ) -> Self {
        CostModel {
            device_flops_per_s,
            batch,
            bandwidth_bytes_per_s,
            bytes_per_param: 4.0,
            n_workers,
            colocated_servers: false,
            per_slice_overhead_s: 0.0,
        }
    }

    /// Model copies crossing the busiest NIC direction per model transfer.
    pub fn wire_factor(&self) -> f64 {
        if self.colocated_servers {
            let n = self.n_workers.max(1) as f64;
            2.0 * (n - 1.0) / n
        } else {
            1.0
        }
    }

    /// Wire time of `params` parameters on one direction.
    pub fn wire_seconds(&self, params: u64) -> f64 {
        params as f64 * self.bytes_per_param * self.wire_factor() / self.bandwidth_bytes_per_s
    }

    /// Every rate and size positive and finite, the overhead finite and >= 0.
    pub(crate) fn validate(&self) -> Result<(), P3CoreError> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let ok = pos(self.device_flops_per_s)
            && pos(self.bandwidth_bytes_per_s)
            && pos(self.bytes_per_param)
            && self.batch > 0
            && self.n_workers > 0
            && self.per_slice_overhead_s.is_finite()
            && self.per_slice_overhead_s >= 0.0;
        if !ok {
            return Err(P3CoreError::InvalidCostModel(Box::new(*self)));
        }
        Ok(())
    }
}

/// Iteration-time bounds of synchronous data-parallel training (REFERENCE.md section 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Forward compute per iteration.
    pub fwd_s: f64,
    /// Backward compute per iteration.
    pub bwd_s: f64,
    /// C = forward + backward compute per iteration.
    pub compute_s: f64,
    /// M = wire time of one full model transfer per direction (see module docs).
    pub comm_s: f64,
    /// C + M: no overlap.
    pub no_overlap_s: f64,
    /// T_fwd + max(T_bwd, M): overlap with backward only (wait-free backprop / FIFO).
    pub wait_free_s: f64,
    /// max(C, M): priority scheduling across the iteration boundary (ignoring the tail).
    pub optimal_s: f64,
}

impl Bounds {
    /// The bounds of `profile` under `cost`.
    pub fn compute(profile: &ModelProfile, cost: &CostModel) -> Bounds {
        let (fwd, bwd) = profile.layer_seconds(cost.device_flops_per_s, cost.batch);
        let (fwd_s, bwd_s): (f64, f64) = (fwd.iter().sum(), bwd.iter().sum());
        let compute_s = fwd_s + bwd_s;
        let comm_s = cost.wire_seconds(profile.total_params());
        Bounds {
            fwd_s,
            bwd_s,
            compute_s,
            comm_s,
            no_overlap_s: compute_s + comm_s,
            wait_free_s: fwd_s + bwd_s.max(comm_s),
            optimal_s: compute_s.max(comm_s),
        }
    }

    /// `(T_no_overlap - t) / (T_no_overlap - max(C, M))`: 1.0 = optimal, 0.0 = no overlap.
    pub fn efficiency(&self, t: f64) -> f64 {
        let denom = self.no_overlap_s - self.optimal_s;
        if denom <= 0.0 {
            1.0
        } else {
            (self.no_overlap_s - t) / denom
        }
    }

    /// Bandwidth (bytes/s) at which M == C for this profile and cost model.
    pub fn balanced_bandwidth(profile: &ModelProfile, cost: &CostModel) -> f64 {
        let b = Bounds::compute(profile, cost);
        cost.bandwidth_bytes_per_s * b.comm_s / b.compute_s
    }
}

/// The best iteration time any schedule can reach for `profile` on `cost`'s link: the ideal
/// pipeline of forward, backward, push and pull with infinitely fine slices.
///
/// Fluid model: layer `l`'s gradient (wire time `m_l = cost.wire_seconds(params_l)`) is ready
/// when its backward ends; the uplink serves ready gradients preemptively, lowest layer first
/// (the layer the next forward pass needs first); the pull of a slice follows its push
/// through the shard at once (cut-through) on a downlink of the same rate, so layer `l` is
/// back when its push ends; the next forward of layer `l` starts when layer `l - 1`'s forward
/// ended and layer `l` is back. No per-slice cost, no latency, no aggregation time. On top of
/// `max(C, M)` this counts the irreducible tail: what is produced last (the first layers'
/// gradients) is needed first. The result is the steady-state period, between `max(C, M)`
/// and `C + M`.
pub fn ideal_iteration_s(profile: &ModelProfile, cost: &CostModel) -> f64 {
    let (fwd, bwd) = profile.layer_seconds(cost.device_flops_per_s, cost.batch);
    let wire: Vec<f64> = profile
        .layers
        .iter()
        .map(|l| cost.wire_seconds(l.params))
        .collect();
    let n = fwd.len();
    if n == 0 {
        return 0.0;
    }
    // Layer l is back (and may run forward) at ready[l]; the first iteration starts with all.
    let mut ready = vec![0.0f64; n];
    let mut starts = Vec::new();
    for _ in 0..4 {
        let mut t = 0.0f64;
        for l in 0..n {
            t = t.max(ready[l]);
            if l == 0 {
                starts.push(t);
            }
            t += fwd[l];
        }
        // Backward from the last layer; gradient l arrives at the end of its backward.
        let mut arrivals = Vec::with_capacity(n);
        for l in (0..n).rev() {
            t += bwd[l];
            arrivals.push((l, t));
        }
        // Preemptive priority uplink: each arrival outranks everything queued (it is a lower
        // layer), so the queue is a stack served from the top.
        let mut stack: Vec<(usize, f64)> = Vec::new();
        let mut now = arrivals.first().map_or(0.0, |a| a.1);
        let mut next = 0;
        loop {
            if next < arrivals.len() && arrivals[next].1 <= now {
                stack.push((arrivals[next].0, wire[arrivals[next].0]));
                next += 1;
                continue;
            }
            let Some(top) = stack.last_mut() else {
                match arrivals.get(next) {
                    Some(a) => {
                        now = a.1;
                        continue;
                    }
                    None => break,
                }
            };
            let until_next = arrivals.get(next).map_or(f64::INFINITY, |a| a.1 - now);
            if top.1 <= until_next {
                now += top.1;
                ready[top.0] = now;
                stack.pop();
            } else {
                top.1 -= until_next;
                now += until_next;
            }
        }
    }
    match starts.as_slice() {
        [.., a, b] => b - a,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::profile::LayerProfile;

    fn layers(specs: &[(u64, f64)]) -> ModelProfile {
        ModelProfile {
            name: "toy".into(),
            layers: specs
                .iter()
                .enumerate()
                .map(|(i, &(p, f))| LayerProfile::new(format!("l{i}"), p, f))
                .collect(),
        }
    }

    #[test]
    fn ideal_of_one_layer_cannot_overlap() {
        // fwd 2 s, bwd 4 s, M = 4 s: the only gradient is ready last and needed first.
        let p = layers(&[(1000, 4e9)]);
        let cost = CostModel::new(64e9, 32, 1000.0, 4);
        let t = ideal_iteration_s(&p, &cost);
        assert!((t - 10.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn ideal_lies_between_max_and_sum_and_tends_to_each() {
        // Ten equal layers.
        let p = layers(&[(100, 1e9); 10]);
        for bw in [10.0, 100.0, 1000.0, 1e4, 1e6] {
            let cost = CostModel::new(64e9, 32, bw, 2);
            let b = Bounds::compute(&p, &cost);
            let t = ideal_iteration_s(&p, &cost);
            assert!(
                t >= b.optimal_s - 1e-9 && t <= b.no_overlap_s + 1e-9,
                "{bw}: {t} {b:?}"
            );
        }
        // Fast link: C plus the first layer's push (0.4 ms); slow link: M plus the first
        // layer's compute after it arrives.
        let fast = CostModel::new(64e9, 32, 1e6, 2);
        let b = Bounds::compute(&p, &fast);
        let t = ideal_iteration_s(&p, &fast);
        assert!((t - (b.compute_s + 400.0 / 1e6)).abs() < 1e-9, "{t} {b:?}");
        let slow = CostModel::new(64e9, 32, 10.0, 2);
        let b = Bounds::compute(&p, &slow);
        assert!(ideal_iteration_s(&p, &slow) < 1.05 * b.comm_s);
    }

    #[test]
    fn a_big_input_layer_is_the_tail() {
        // The first layer holds 90% of the parameters (the case max(C, M) misjudges): it is
        // pushed last and needed first, so nothing hides its wire time.
        let big_first = layers(&[(900, 1e9), (50, 1e9), (50, 1e9)]);
        let big_last = layers(&[(50, 1e9), (50, 1e9), (900, 1e9)]);
        let cost = CostModel::new(32e9, 32, 1000.0, 2);
        let b = Bounds::compute(&big_first, &cost);
        let first = ideal_iteration_s(&big_first, &cost);
        let last = ideal_iteration_s(&big_last, &cost);
        assert!(first > 1.3 * b.optimal_s, "{first} vs {b:?}");
        assert!(last < first, "{last} {first}");
    }

    #[test]
    fn bounds_by_hand() {
        let p = ModelProfile {
            name: "toy".into(),
            layers: vec![
                LayerProfile::new("a", 250, 1e9),
                LayerProfile::new("b", 750, 3e9),
            ],
        };
        // 32 samples on 64 GFLOP/s: fwd 4e9*32/64e9 = 2 s, bwd 4 s; 1000 params * 4 B at
        // 1000 B/s = 4 s.
        let cost = CostModel::new(64e9, 32, 1000.0, 4);
        let b = Bounds::compute(&p, &cost);
        assert_eq!(
            (b.fwd_s, b.bwd_s, b.compute_s, b.comm_s),
            (2.0, 4.0, 6.0, 4.0)
        );
        assert_eq!(
            (b.no_overlap_s, b.wait_free_s, b.optimal_s),
            (10.0, 6.0, 6.0)
        );
        assert_eq!(b.efficiency(10.0), 0.0);
        assert_eq!(b.efficiency(6.0), 1.0);
        assert_eq!(Bounds::balanced_bandwidth(&p, &cost), 1000.0 * 4.0 / 6.0);
        let colo = CostModel {
            colocated_servers: true,
            ..cost
        };
        assert_eq!(colo.wire_factor(), 1.5);
        assert_eq!(Bounds::compute(&p, &colo).comm_s, 6.0);
        assert!(cost.validate().is_ok());
        let bad = CostModel {
            bandwidth_bytes_per_s: 0.0,
            ..cost
        };
        assert!(matches!(
            bad.validate(),
            Err(P3CoreError::InvalidCostModel(_))
        ));
    }
}
