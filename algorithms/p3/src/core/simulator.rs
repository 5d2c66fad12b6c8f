//! A deterministic discrete-event simulator of one worker's iteration under Sequential,
//! FIFO or P3 synchronisation, and the automatic slice size built on it. The wire model is
//! [`crate::core::cost`]'s.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use petrel_messages::PriorityQueue;

use crate::core::cost::{Bounds, CostModel};
use crate::core::error::P3CoreError;
use crate::core::mode::Mode;
use crate::core::profile::ModelProfile;
use crate::core::readiness::LayerReadiness;
use crate::core::slicing::SlicePlan;

/// Automatic slice size: simulates `Mode::P3` for every candidate and returns the one with
/// the lowest iteration time, with that time. Ties go to the larger slice (fewer
/// messages). `cost.per_slice_overhead_s` is what makes small slices expensive; with zero
/// overhead smaller slices never lose.
pub fn auto_slice_size(
    profile: &ModelProfile,
    cost: &CostModel,
    candidates: &[u64],
    iterations: usize,
) -> Result<(u64, f64), P3CoreError> {
    let mut best: Option<(u64, f64)> = None;
    let mut sorted: Vec<u64> = candidates.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    for size in sorted {
        let r = simulate(
            profile,
            &SimConfig {
                mode: Mode::P3,
                slice_size: size,
                cost: *cost,
                iterations: iterations.max(1),
            },
        )?;
        // Strictly better by more than rounding noise, so ties keep the larger slice.
        if best.is_none_or(|(_, t)| r.secs_per_iter < t * (1.0 - 1e-9)) {
            best = Some((size, r.secs_per_iter));
        }
    }
    best.ok_or(P3CoreError::NoSliceCandidates)
}

/// Simulator input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// The schedule to simulate.
    pub mode: Mode,
    /// Parameters per slice (P3 mode only; the public P3 code uses 40,000).
    pub slice_size: u64,
    /// Device, batch and link.
    pub cost: CostModel,
    /// Measured iterations, after one warm-up iteration (which starts with all parameters
    /// in place and is not counted). At least 1.
    pub iterations: usize,
}

/// Simulator output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimReport {
    /// Steady-state seconds per iteration (mean over the measured iterations).
    pub secs_per_iter: f64,
    /// The C/M bounds of the simulated set-up.
    pub bounds: Bounds,
    /// `bounds.efficiency(secs_per_iter)`.
    pub efficiency: f64,
    /// Number of slices per model transfer in this mode.
    pub n_slices: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKind {
    Compute,
    Pushed(usize),
    Pulled(usize),
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    /// Reversed so `BinaryHeap` pops the earliest event; ties by insertion order.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time
            .total_cmp(&self.time)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

/// One link direction: non-preemptive within a slice, priority order between slices.
#[derive(Default)]
struct Link {
    queue: PriorityQueue<usize>,
    busy: bool,
}

struct Sim<'a> {
    plan: SlicePlan,
    cfg: &'a SimConfig,
    fwd: Vec<f64>,
    bwd: Vec<f64>,
    slice_time: Vec<f64>,
    events: BinaryHeap<Event>,
    seq: u64,
    push: Link,
    pull: Link,
    readiness: LayerReadiness,
    /// Parameter rounds fully pulled per layer; round r feeds the forward of iteration r.
    layer_round: Vec<usize>,
    /// Position in the compute schedule: iteration and step (0..L forward, L..2L backward).
    iter: usize,
    step: usize,
    compute_busy: bool,
    /// Start time of the forward pass of every iteration begun so far.
    iter_starts: Vec<f64>,
    /// Iteration whose start ends the simulation (warm-up + measured iterations).
    stop_at: usize,
}

impl Sim<'_> {
    fn schedule(&mut self, time: f64, kind: EventKind) {
        self.events.push(Event {
            time,
            seq: self.seq,
            kind,
        });
        self.seq += 1;
    }

    fn n_layers(&self) -> usize {
        self.fwd.len()
    }

    fn try_start_link(&mut self, now: f64, is_push: bool) {
        let link = if is_push {
            &mut self.push
        } else {
            &mut self.pull
        };
        if link.busy {
            return;
        }
        if let Some((_, id)) = link.queue.pop() {
            link.busy = true;
            let done = now + self.slice_time[id];
            let kind = if is_push {
                EventKind::Pushed(id)
            } else {
                EventKind::Pulled(id)
            };
            self.schedule(done, kind);
        }
    }

    /// Whether the forward pass of `layer` in the current iteration has its parameters.
    fn params_ready(&self, layer: usize) -> bool {
        let r = self.iter;
        match self.cfg.mode {
            Mode::Sequential => self.layer_round.iter().all(|&x| x >= r),
            Mode::Fifo | Mode::P3 => self.layer_round[layer] >= r,
        }
    }

    fn try_start_compute(&mut self, now: f64) {
        if self.compute_busy || self.iter > self.stop_at {
            return;
        }
        let l_count = self.n_layers();
        let dur = if self.step < l_count {
            let layer = self.step;
            if !self.params_ready(layer) {
                return;
            }
            if layer == 0 {
                self.iter_starts.push(now);
                if self.iter == self.stop_at {
                    // Start of the iteration after the last measured one: done.
                    self.iter += 1;
                    return;
                }
            }
            self.fwd[layer]
        } else {
            self.bwd[2 * l_count - 1 - self.step]
        };
        self.compute_busy = true;
        self.schedule(now + dur, EventKind::Compute);
    }

    fn enqueue_layer_push(&mut self, layer: usize) {
        for s in self.plan.layer_slices(layer) {
            self.push.queue.push(s.priority, s.id);
        }
    }

    fn on_compute_done(&mut self, now: f64) {
        self.compute_busy = false;
        let l_count = self.n_layers();
        if self.step >= l_count {
            let layer = 2 * l_count - 1 - self.step;
            match self.cfg.mode {
                Mode::Sequential => {
                    if layer == 0 {
                        for l in (0..l_count).rev() {
                            self.enqueue_layer_push(l);
                        }
                    }
                }
                Mode::Fifo | Mode::P3 => self.enqueue_layer_push(layer),
            }
            self.try_start_link(now, true);
        }
        self.step += 1;
        if self.step == 2 * l_count {
            self.step = 0;
            self.iter += 1;
        }
        self.try_start_compute(now);
    }

    fn run(&mut self) -> Result<(), P3CoreError> {
        self.try_start_compute(0.0);
        while let Some(ev) = self.events.pop() {
            let now = ev.time;
            match ev.kind {
                EventKind::Compute => self.on_compute_done(now),
                EventKind::Pushed(id) => {
                    // Server aggregation is modelled as instantaneous and symmetric across
                    // workers: the updated slice is immediately available to pull.
                    self.push.busy = false;
                    let prio = self.plan.slices()[id].priority;
                    self.pull.queue.push(prio, id);
                    self.try_start_link(now, true);
                    self.try_start_link(now, false);
                }
                EventKind::Pulled(id) => {
                    self.pull.busy = false;
                    if self.readiness.mark_received(id)? {
                        let layer = self.plan.slices()[id].layer;
                        self.layer_round[layer] += 1;
                        self.readiness.reset_layer(layer);
                    }
                    self.try_start_link(now, false);
                    self.try_start_compute(now);
                }
            }
            if self.iter > self.stop_at {
                break;
            }
        }
        Ok(())
    }
}

/// Deterministic discrete-event simulation of one (representative) worker of synchronous
/// data-parallel training; all workers behave identically, so one suffices.
///
/// Model: forward runs layers `0..L` then backward `L-1..0`, each layer taking its
/// profile time. When layer `l`'s backward finishes its slices join the push queue
/// (in `Sequential` mode: all layers at once after the whole backward). A single uplink
/// sends one slice at a time, always the highest-priority queued one (so preemption only
/// at slice boundaries). A pushed slice is aggregated instantly and joins the pull queue;
/// a single downlink pulls likewise. The forward pass of layer `l` in the next iteration
/// starts once all of layer `l`'s slices were pulled (`Sequential`: once the whole model
/// was). Returns the mean time per iteration over `iterations` iterations after a warm-up
/// iteration.
pub fn simulate(profile: &ModelProfile, cfg: &SimConfig) -> Result<SimReport, P3CoreError> {
    cfg.cost.validate()?;
    if cfg.iterations == 0 {
        return Err(P3CoreError::ZeroIterations);
    }
    if profile.layers.is_empty() {
        return Err(P3CoreError::EmptyProfile);
    }
    let plan = SlicePlan::with_mode(cfg.mode, &profile.param_counts(), cfg.slice_size, 1)?;
    let c = &cfg.cost;
    let slice_time = plan
        .slices()
        .iter()
        .map(|s| c.wire_seconds(s.len) + c.per_slice_overhead_s)
        .collect();
    let n_layers = profile.layers.len();
    let (fwd, bwd) = profile.layer_seconds(c.device_flops_per_s, c.batch);
    let mut sim = Sim {
        readiness: LayerReadiness::new(&plan),
        plan,
        cfg,
        fwd,
        bwd,
        slice_time,
        events: BinaryHeap::new(),
        seq: 0,
        push: Link::default(),
        pull: Link::default(),
        // Round 0 (initial parameters) is present everywhere. Layers without slices are
        // never pulled, so they are treated as always up to date.
        layer_round: vec![0; n_layers],
        iter: 0,
        step: 0,
        compute_busy: false,
        iter_starts: Vec::new(),
        stop_at: cfg.iterations + 1,
    };
    for l in 0..n_layers {
        if sim.plan.layer_slices(l).is_empty() {
            sim.layer_round[l] = usize::MAX;
        }
    }
    sim.run()?;
    let starts = &sim.iter_starts;
    if starts.len() != cfg.iterations + 2 {
        return Err(P3CoreError::Stalled {
            iterations: starts.len().saturating_sub(1),
        });
    }
    // Iteration 0 is the warm-up (it starts with all parameters present and nothing in
    // flight); measure from the start of iteration 1 to the start of iteration n + 1.
    let secs_per_iter = (starts[cfg.iterations + 1] - starts[1]) / cfg.iterations as f64;
    let bounds = Bounds::compute(profile, c);
    tracing::debug!(
        model = %profile.name,
        mode = ?cfg.mode,
        secs_per_iter,
        compute_s = bounds.compute_s,
        comm_s = bounds.comm_s,
        "p3 simulation finished"
    );
    Ok(SimReport {
        secs_per_iter,
        bounds,
        efficiency: bounds.efficiency(secs_per_iter),
        n_slices: sim.plan.slices().len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_slice_size_trades_overhead_for_granularity() {
        let profile = ModelProfile::vgg19().scaled(0.01);
        let mut cost = CostModel::new(1e12, 32, 1.0e8, 2);
        let b = Bounds::compute(&profile, &cost);
        cost.bandwidth_bytes_per_s *= b.comm_s / b.compute_s;
        let candidates = [1_000, 10_000, 100_000, 1_000_000];
        let (free, t_free) = auto_slice_size(&profile, &cost, &candidates, 3).unwrap();
        cost.per_slice_overhead_s = 2e-3;
        let (costly, t_costly) = auto_slice_size(&profile, &cost, &candidates, 3).unwrap();
        assert!(
            costly > free,
            "overhead must push the choice up: {free} vs {costly}"
        );
        assert!(t_costly >= t_free);
        assert!(auto_slice_size(&profile, &cost, &[], 3).is_err());
    }
    use crate::core::profile::{LayerProfile, ModelProfile};

    /// GTX-1080Ti-class sustained throughput; only the C/M ratio matters for the shape.
    const DEVICE: f64 = 10e12;
    const BATCH: usize = 32;

    /// One worker (dedicated server NICs, no per-slice overhead) of the given device,
    /// batch and link.
    fn sim_config(mode: Mode, slice_size: u64, bw: f64, device: f64, batch: usize) -> SimConfig {
        SimConfig {
            mode,
            slice_size,
            cost: CostModel::new(device, batch, bw, 1),
            iterations: 2,
        }
    }

    fn run(profile: &ModelProfile, mode: Mode, bw: f64, iterations: usize) -> SimReport {
        let cfg = SimConfig {
            iterations,
            ..sim_config(mode, 40_000, bw, DEVICE, BATCH)
        };
        simulate(profile, &cfg).unwrap()
    }

    fn measured(name: &str, params: u64, fwd_s: f64, bwd_s: f64) -> LayerProfile {
        LayerProfile {
            name: name.into(),
            params,
            fwd_flops: 0.0,
            bwd_flops: 0.0,
            measured: Some(crate::core::profile::MeasuredTime { fwd_s, bwd_s }),
        }
    }

    #[test]
    fn simulate_toy_exact() {
        let p = ModelProfile {
            name: "toy".into(),
            layers: vec![measured("l0", 100, 1.0, 1.0), measured("l1", 100, 1.0, 1.0)],
        };
        let cfg = |mode| SimConfig {
            mode,
            slice_size: 50,
            cost: CostModel::new(1.0, 1, 400.0, 1),
            iterations: 3,
        };
        let t = |mode| simulate(&p, &cfg(mode)).unwrap().secs_per_iter;
        // compute 0-4; push l1 4-5, l0 5-6; pull l1 5-6, l0 6-7 -> next forward at 7
        assert!((t(Mode::Sequential) - 7.0).abs() < 1e-9);
        // push l1 3-4 (right after its backward), l0 4-5; pull l1 4-5, l0 5-6
        assert!((t(Mode::Fifo) - 6.0).abs() < 1e-9);
        // half-layer slices: pushes 3-3.5-4 (l1), 4-4.5-5 (l0); pulls lag half a slot;
        // l0 is complete at 5.5
        assert!((t(Mode::P3) - 5.5).abs() < 1e-9);
        let bad = SimConfig {
            iterations: 0,
            ..cfg(Mode::P3)
        };
        assert!(simulate(&p, &bad).is_err());
    }

    #[test]
    fn vgg19_ordering_and_bound_at_balanced_bandwidth() {
        let p = ModelProfile::vgg19();
        let bw = Bounds::balanced_bandwidth(&p, &CostModel::new(DEVICE, BATCH, 1.0, 1));
        let seq = run(&p, Mode::Sequential, bw, 3);
        let fifo = run(&p, Mode::Fifo, bw, 3);
        let p3 = run(&p, Mode::P3, bw, 3);
        let b = p3.bounds;
        assert!((b.comm_s / b.compute_s - 1.0).abs() < 1e-9);
        assert!(p3.secs_per_iter <= fifo.secs_per_iter);
        assert!(fifo.secs_per_iter <= seq.secs_per_iter);
        assert!(seq.secs_per_iter >= b.no_overlap_s * (1.0 - 1e-9));
        assert!(p3.secs_per_iter >= b.optimal_s * (1.0 - 1e-9));
        assert!(p3.secs_per_iter <= 1.15 * b.optimal_s, "{p3:?}");
        // FIFO cannot beat the overlap-with-backward-only bound
        assert!(fifo.secs_per_iter >= b.wait_free_s * (1.0 - 1e-9));
    }

    #[test]
    fn other_models_keep_ordering() {
        for p in [
            ModelProfile::resnet50(),
            ModelProfile::builtin("sockeye").unwrap(),
        ] {
            let bw = Bounds::balanced_bandwidth(&p, &CostModel::new(DEVICE, BATCH, 1.0, 1));
            let seq = run(&p, Mode::Sequential, bw, 2).secs_per_iter;
            let fifo = run(&p, Mode::Fifo, bw, 2).secs_per_iter;
            let p3 = run(&p, Mode::P3, bw, 2).secs_per_iter;
            assert!(p3 <= fifo && fifo <= seq, "{}: {p3} {fifo} {seq}", p.name);
        }
    }

    #[test]
    fn high_bandwidth_converges_to_compute() {
        let p = ModelProfile::vgg19();
        let bw = 1000.0 * Bounds::balanced_bandwidth(&p, &CostModel::new(DEVICE, BATCH, 1.0, 1));
        for mode in [Mode::Sequential, Mode::Fifo, Mode::P3] {
            let r = run(&p, mode, bw, 2);
            let c = r.bounds.compute_s;
            assert!(
                (r.secs_per_iter - c).abs() <= 0.01 * c,
                "{mode:?}: {} vs C={c}",
                r.secs_per_iter
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// On random small models every mode respects the lower bounds, Sequential is
        /// never below C + M, and P3 never loses to Sequential.
        #[test]
        fn simulated_times_respect_bounds(
            layers in proptest::collection::vec((1u64..5000, 0.0f64..2e9), 1..6),
            bw in 1e3f64..1e6,
            slice in 1u64..3000,
        ) {
            let p = ModelProfile {
                name: "rand".into(),
                layers: layers
                    .iter()
                    .enumerate()
                    .map(|(i, &(n, f))| LayerProfile::new(format!("l{i}"), n, f))
                    .collect(),
            };
            let mut t = Vec::new();
            for mode in [Mode::Sequential, Mode::Fifo, Mode::P3] {
                let cfg = sim_config(mode, slice, bw, 1e12, 8);
                let r = simulate(&p, &cfg).unwrap();
                proptest::prop_assert!(r.secs_per_iter >= r.bounds.optimal_s * (1.0 - 1e-9));
                t.push((r.secs_per_iter, r.bounds));
            }
            proptest::prop_assert!(t[0].0 >= t[0].1.no_overlap_s * (1.0 - 1e-9));
            proptest::prop_assert!(t[2].0 <= t[0].0 * (1.0 + 1e-9));
        }
    }

    #[test]
    #[ignore]
    fn print_speedups() {
        for m in ["vgg19", "resnet50", "sockeye"] {
            let p = ModelProfile::builtin(m).unwrap();
            let cost = CostModel::new(DEVICE, BATCH, 1.0, 1);
            let bal = Bounds::balanced_bandwidth(&p, &cost);
            for (label, bw) in [
                ("M=C".to_string(), bal),
                ("1 Gbit/s".into(), 1e9 / 8.0),
                ("10 Gbit/s".into(), 10e9 / 8.0),
                ("25 Gbit/s".into(), 25e9 / 8.0),
            ] {
                let s = run(&p, Mode::Sequential, bw, 5);
                let f = run(&p, Mode::Fifo, bw, 5);
                let q = run(&p, Mode::P3, bw, 5);
                let b = q.bounds;
                println!(
                    "{m:9} {label:10} bw={:.2} Gbit/s C={:.4} M={:.4} seq={:.4} fifo={:.4} p3={:.4} max(C,M)={:.4} p3/fifo speedup={:+.1}% eff={:.2}",
                    bw * 8.0 / 1e9,
                    b.compute_s,
                    b.comm_s,
                    s.secs_per_iter,
                    f.secs_per_iter,
                    q.secs_per_iter,
                    b.optimal_s,
                    (f.secs_per_iter / q.secs_per_iter - 1.0) * 100.0,
                    q.efficiency
                );
            }
        }
    }
}
