//! Sans-I/O P3 planning: slicing, priorities, the send queue, per-layer readiness, the
//! C/M bounds and a deterministic discrete-event simulator of one worker's iteration.
//!
//! # Priorities
//! In [`Mode::P3`] a slice of layer `l` (0-based, forward order) of a model with `L` layers
//! has `priority = L - l`: layer 0 gets `L`, the last layer gets 1, and a *higher* value is
//! sent first. In [`Mode::Fifo`] and [`Mode::Sequential`] every layer is one slice and all
//! priorities are 0, so [`SliceQueue`] degenerates to FIFO: gradients go out in the order
//! backprop produces them (last layer first).
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

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::core::profile::ModelProfile;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("slice size must be at least 1 parameter")]
    ZeroSliceSize,
    #[error("need at least one server shard")]
    ZeroShards,
    #[error("unknown slice id {id} (plan has {n_slices} slices)")]
    UnknownSlice { id: usize, n_slices: usize },
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// How gradients and parameters are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// No overlap: all gradients are sent after the whole backward pass and the next
    /// forward pass starts after the whole model is back. `T ~= C + M`, plus up to one
    /// largest-layer transfer: a server can return a layer only after it has received all
    /// of it (store-and-forward per transfer unit), so the pull of the biggest layer cannot
    /// overlap its own push.
    Sequential,
    /// Whole-layer transfers in the order gradients are produced (MXNet/TF default):
    /// overlaps communication with backward, but the next forward pass waits for layer 0,
    /// which is sent last. `T >= T_fwd + max(T_bwd, M)`, plus the same store-and-forward
    /// penalty as `Sequential`.
    Fifo,
    /// Sliced, layer-priority transfers with preemption at slice boundaries.
    P3,
}

impl Mode {
    /// Parses `sequential`, `fifo` or `p3` (case-insensitive).
    pub fn parse(s: &str) -> Result<Mode, PlanError> {
        match s.to_ascii_lowercase().as_str() {
            "sequential" | "seq" => Ok(Mode::Sequential),
            "fifo" => Ok(Mode::Fifo),
            "p3" => Ok(Mode::P3),
            other => Err(PlanError::Config(format!(
                "unknown mode {other:?} (expected sequential, fifo or p3)"
            ))),
        }
    }

    /// Lower-case name, as accepted by [`Mode::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Fifo => "fifo",
            Mode::P3 => "p3",
        }
    }

    /// Whether a layer's gradient is pushed as soon as backprop produced it (`fifo`, `p3`)
    /// rather than after the whole backward pass (`sequential`).
    pub fn pushes_during_backward(self) -> bool {
        !matches!(self, Mode::Sequential)
    }
}

/// A contiguous piece of one layer's flat parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slice {
    /// Index in [`SlicePlan::slices`].
    pub id: usize,
    pub layer: usize,
    /// First parameter of the slice within its layer.
    pub offset: u64,
    /// Number of parameters (>= 1).
    pub len: u64,
    /// Server shard owning the slice.
    pub shard: usize,
    /// Higher is sent first (see the module docs for the formula).
    pub priority: u32,
}

/// Every layer cut into slices, with shard and priority.
#[derive(Debug, Clone, PartialEq)]
pub struct SlicePlan {
    mode: Mode,
    slice_size: u64,
    n_shards: usize,
    slices: Vec<Slice>,
    /// Range of slice ids of each layer.
    layer_ranges: Vec<std::ops::Range<usize>>,
}

impl SlicePlan {
    /// P3 plan: each layer cut into slices of at most `slice_size` parameters (the last
    /// slice of a layer may be shorter), slices assigned to shards round-robin in layer
    /// order, the round-robin continuing across layer boundaries (so small layers do not
    /// all land on shard 0).
    pub fn new(
        layer_param_counts: &[u64],
        slice_size: u64,
        n_shards: usize,
    ) -> Result<Self, PlanError> {
        Self::with_mode(Mode::P3, layer_param_counts, slice_size, n_shards)
    }

    /// Plan for any mode. For `Fifo` and `Sequential`, `slice_size` is ignored: each layer
    /// is a single slice with priority 0. Layers with 0 parameters get no slices.
    pub fn with_mode(
        mode: Mode,
        layer_param_counts: &[u64],
        slice_size: u64,
        n_shards: usize,
    ) -> Result<Self, PlanError> {
        if n_shards == 0 {
            return Err(PlanError::ZeroShards);
        }
        if mode == Mode::P3 && slice_size == 0 {
            return Err(PlanError::ZeroSliceSize);
        }
        let n_layers = layer_param_counts.len();
        let mut slices = Vec::new();
        let mut layer_ranges = Vec::with_capacity(n_layers);
        for (layer, &count) in layer_param_counts.iter().enumerate() {
            let start = slices.len();
            let (size, priority) = match mode {
                Mode::P3 => (slice_size, Self::p3_priority(n_layers, layer)),
                Mode::Fifo | Mode::Sequential => (count.max(1), 0),
            };
            let mut offset = 0;
            while offset < count {
                let len = size.min(count - offset);
                let id = slices.len();
                slices.push(Slice {
                    id,
                    layer,
                    offset,
                    len,
                    shard: id % n_shards,
                    priority,
                });
                offset += len;
            }
            layer_ranges.push(start..slices.len());
        }
        Ok(SlicePlan {
            mode,
            slice_size,
            n_shards,
            slices,
            layer_ranges,
        })
    }

    /// Like [`SlicePlan::with_mode`], but for `Fifo` and `Sequential` every layer is cut
    /// into `n_shards` nearly equal parts on consecutive shards (fewer for layers with fewer
    /// parameters than shards), all at priority 0, as MXNet's kvstore partitions big arrays
    /// over its servers. The layer is still the scheduling unit (its parts are sent
    /// together), but no single shard becomes the hot spot for a huge layer. `P3` plans are
    /// the same as [`SlicePlan::new`].
    pub fn layerwise_split(
        mode: Mode,
        layer_param_counts: &[u64],
        slice_size: u64,
        n_shards: usize,
    ) -> Result<Self, PlanError> {
        if mode == Mode::P3 {
            return Self::new(layer_param_counts, slice_size, n_shards);
        }
        if n_shards == 0 {
            return Err(PlanError::ZeroShards);
        }
        let mut slices = Vec::new();
        let mut layer_ranges = Vec::with_capacity(layer_param_counts.len());
        let mut next_shard = 0usize;
        for (layer, &count) in layer_param_counts.iter().enumerate() {
            let start = slices.len();
            let parts = (n_shards as u64).min(count);
            let mut offset = 0;
            for p in 0..parts {
                // Even split: the first `count % parts` parts get one extra parameter.
                let len = count / parts + u64::from(p < count % parts);
                let id = slices.len();
                slices.push(Slice {
                    id,
                    layer,
                    offset,
                    len,
                    shard: next_shard % n_shards,
                    priority: 0,
                });
                next_shard += 1;
                offset += len;
            }
            layer_ranges.push(start..slices.len());
        }
        Ok(SlicePlan {
            mode,
            slice_size,
            n_shards,
            slices,
            layer_ranges,
        })
    }

    /// `n_layers - layer` (saturating; layer 0 has the highest priority).
    pub fn p3_priority(n_layers: usize, layer: usize) -> u32 {
        n_layers.saturating_sub(layer).min(u32::MAX as usize) as u32
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn slice_size(&self) -> u64 {
        self.slice_size
    }
    pub fn n_shards(&self) -> usize {
        self.n_shards
    }
    pub fn n_layers(&self) -> usize {
        self.layer_ranges.len()
    }
    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }
    pub fn slice(&self, id: usize) -> Option<&Slice> {
        self.slices.get(id)
    }

    /// Slices of one layer in offset order (empty for an unknown layer).
    pub fn layer_slices(&self, layer: usize) -> &[Slice] {
        self.layer_ranges
            .get(layer)
            .map(|r| &self.slices[r.clone()])
            .unwrap_or(&[])
    }

    /// Slices owned by `shard`.
    pub fn shard_slices(&self, shard: usize) -> impl Iterator<Item = &Slice> {
        self.slices.iter().filter(move |s| s.shard == shard)
    }

    /// Parameters owned by each shard.
    pub fn shard_param_counts(&self) -> Vec<u64> {
        let mut v = vec![0; self.n_shards];
        for s in &self.slices {
            v[s.shard] += s.len;
        }
        v
    }
}

struct QueueEntry<T> {
    priority: u32,
    seq: Reverse<u64>,
    item: T,
}

impl<T> PartialEq for QueueEntry<T> {
    fn eq(&self, o: &Self) -> bool {
        self.priority == o.priority && self.seq == o.seq
    }
}
impl<T> Eq for QueueEntry<T> {}
impl<T> PartialOrd for QueueEntry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for QueueEntry<T> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.priority, self.seq).cmp(&(o.priority, o.seq))
    }
}

/// Max-priority queue, FIFO among equal priorities. Generic so a runtime can queue
/// payloads (slice + bytes) rather than just slice descriptors.
pub struct SliceQueue<T = Slice> {
    heap: BinaryHeap<QueueEntry<T>>,
    next_seq: u64,
}

impl<T> Default for SliceQueue<T> {
    fn default() -> Self {
        SliceQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T> std::fmt::Debug for SliceQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceQueue")
            .field("len", &self.heap.len())
            .finish()
    }
}

impl<T> SliceQueue<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, priority: u32, item: T) {
        self.heap.push(QueueEntry {
            priority,
            seq: Reverse(self.next_seq),
            item,
        });
        self.next_seq += 1;
    }

    /// Highest priority first; among equals, the earliest pushed.
    pub fn pop(&mut self) -> Option<T> {
        self.heap.pop().map(|e| e.item)
    }

    pub fn pop_with_priority(&mut self) -> Option<(u32, T)> {
        self.heap.pop().map(|e| (e.priority, e.item))
    }

    pub fn peek(&self) -> Option<&T> {
        self.heap.peek().map(|e| &e.item)
    }

    pub fn peek_priority(&self) -> Option<u32> {
        self.heap.peek().map(|e| e.priority)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

impl SliceQueue<Slice> {
    /// Queues a slice with its own priority.
    pub fn push_slice(&mut self, slice: Slice) {
        self.push(slice.priority, slice);
    }
}

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
        let totals: Vec<usize> = plan.layer_ranges.iter().map(|r| r.len()).collect();
        LayerReadiness {
            layer_of: plan.slices.iter().map(|s| s.layer).collect(),
            received: vec![false; plan.slices.len()],
            missing: totals.clone(),
            totals,
        }
    }

    /// Records a slice; returns `true` when this completed its layer. Receiving the same
    /// slice twice in a round is harmless (returns `false` the second time).
    pub fn mark_received(&mut self, slice_id: usize) -> Result<bool, PlanError> {
        let n_slices = self.received.len();
        let layer = *self.layer_of.get(slice_id).ok_or(PlanError::UnknownSlice {
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

    pub fn is_ready(&self, layer: usize) -> bool {
        self.missing.get(layer).is_some_and(|&m| m == 0)
    }

    /// Number of leading layers that are ready: forward can run through layers
    /// `0..ready_prefix()` without waiting.
    pub fn ready_prefix(&self) -> usize {
        self.missing.iter().take_while(|&&m| m == 0).count()
    }

    pub fn all_ready(&self) -> bool {
        self.missing.iter().all(|&m| m == 0)
    }

    /// Slices still missing for `layer`.
    pub fn missing(&self, layer: usize) -> usize {
        self.missing.get(layer).copied().unwrap_or(0)
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

    fn validate(&self) -> Result<(), PlanError> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let ok = pos(self.device_flops_per_s)
            && pos(self.bandwidth_bytes_per_s)
            && pos(self.bytes_per_param)
            && self.batch > 0
            && self.n_workers > 0
            && self.per_slice_overhead_s.is_finite()
            && self.per_slice_overhead_s >= 0.0;
        if !ok {
            return Err(PlanError::Config(format!("{self:?}")));
        }
        Ok(())
    }
}

/// Iteration-time bounds of synchronous data-parallel training (REFERENCE.md section 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub fwd_s: f64,
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
    pub fn compute(profile: &ModelProfile, cost: &CostModel) -> Bounds {
        let fwd_s: f64 = profile
            .layers
            .iter()
            .map(|l| l.fwd_seconds(cost.device_flops_per_s, cost.batch))
            .sum();
        let bwd_s: f64 = profile
            .layers
            .iter()
            .map(|l| l.bwd_seconds(cost.device_flops_per_s, cost.batch))
            .sum();
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

/// Automatic slice size: simulates `Mode::P3` for every candidate and returns the one with
/// the lowest iteration time, with that time. Ties go to the larger slice (fewer
/// messages). `cost.per_slice_overhead_s` is what makes small slices expensive; with zero
/// overhead smaller slices never lose.
pub fn auto_slice_size(
    profile: &ModelProfile,
    cost: &CostModel,
    candidates: &[u64],
    iterations: usize,
) -> Result<(u64, f64), PlanError> {
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
    best.ok_or_else(|| PlanError::Config("no slice size candidates".into()))
}

/// Simulator input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    pub mode: Mode,
    /// Parameters per slice (P3 mode only; the public P3 code uses 40,000).
    pub slice_size: u64,
    pub cost: CostModel,
    /// Measured iterations, after one warm-up iteration (which starts with all parameters
    /// in place and is not counted). At least 1.
    pub iterations: usize,
}

impl SimConfig {
    pub fn new(
        mode: Mode,
        slice_size: u64,
        bandwidth_bytes_per_s: f64,
        device_flops_per_s: f64,
        batch: usize,
        iterations: usize,
    ) -> Self {
        SimConfig {
            mode,
            slice_size,
            cost: CostModel::new(device_flops_per_s, batch, bandwidth_bytes_per_s, 1),
            iterations,
        }
    }
}

/// Simulator output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimReport {
    /// Steady-state seconds per iteration (mean over the measured iterations).
    pub secs_per_iter: f64,
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
struct Link {
    queue: SliceQueue<usize>,
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
        if let Some(id) = link.queue.pop() {
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

    fn run(&mut self) -> Result<(), PlanError> {
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
pub fn simulate(profile: &ModelProfile, cfg: &SimConfig) -> Result<SimReport, PlanError> {
    cfg.cost.validate()?;
    if cfg.iterations == 0 {
        return Err(PlanError::Config("iterations must be >= 1".into()));
    }
    if profile.layers.is_empty() {
        return Err(PlanError::Config("profile has no layers".into()));
    }
    let plan = SlicePlan::with_mode(cfg.mode, &profile.param_counts(), cfg.slice_size, 1)?;
    let c = &cfg.cost;
    let slice_time = plan
        .slices()
        .iter()
        .map(|s| c.wire_seconds(s.len) + c.per_slice_overhead_s)
        .collect();
    let n_layers = profile.layers.len();
    let mut sim = Sim {
        readiness: LayerReadiness::new(&plan),
        plan,
        cfg,
        fwd: profile
            .layers
            .iter()
            .map(|l| l.fwd_seconds(c.device_flops_per_s, c.batch))
            .collect(),
        bwd: profile
            .layers
            .iter()
            .map(|l| l.bwd_seconds(c.device_flops_per_s, c.batch))
            .collect(),
        slice_time,
        events: BinaryHeap::new(),
        seq: 0,
        push: Link {
            queue: SliceQueue::new(),
            busy: false,
        },
        pull: Link {
            queue: SliceQueue::new(),
            busy: false,
        },
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
        return Err(PlanError::Config(format!(
            "simulation stalled after {} iterations",
            starts.len().saturating_sub(1)
        )));
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

    fn run(profile: &ModelProfile, mode: Mode, bw: f64, iters: usize) -> SimReport {
        let cfg = SimConfig::new(mode, 40_000, bw, DEVICE, BATCH, iters);
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
    fn slicing_offsets_shards_priorities() {
        let plan = SlicePlan::new(&[5, 0, 7, 3], 3, 2).unwrap();
        let got: Vec<(usize, u64, u64, usize, u32)> = plan
            .slices()
            .iter()
            .map(|s| (s.layer, s.offset, s.len, s.shard, s.priority))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 0, 3, 0, 4),
                (0, 3, 2, 1, 4),
                (2, 0, 3, 0, 2),
                (2, 3, 3, 1, 2),
                (2, 6, 1, 0, 2),
                (3, 0, 3, 1, 1),
            ]
        );
        assert!(plan.layer_slices(1).is_empty());
        assert!(plan.layer_slices(9).is_empty());
        assert_eq!(plan.shard_param_counts(), vec![7, 8]);
        assert_eq!(plan.shard_slices(1).count(), 3);
        for (i, s) in plan.slices().iter().enumerate() {
            assert_eq!(s.id, i);
        }
        assert_eq!(SlicePlan::new(&[1], 0, 1), Err(PlanError::ZeroSliceSize));
        assert_eq!(SlicePlan::new(&[1], 1, 0), Err(PlanError::ZeroShards));
    }

    #[test]
    fn fifo_plan_is_whole_layers_equal_priority() {
        let plan = SlicePlan::with_mode(Mode::Fifo, &[5, 7, 0], 2, 3).unwrap();
        let got: Vec<(usize, u64, u64, usize, u32)> = plan
            .slices()
            .iter()
            .map(|s| (s.layer, s.offset, s.len, s.shard, s.priority))
            .collect();
        assert_eq!(got, vec![(0, 0, 5, 0, 0), (1, 0, 7, 1, 0)]);
    }

    proptest::proptest! {
        /// Slices tile every layer exactly, respect the size limit, and shards are
        /// assigned round-robin over the global slice order.
        #[test]
        fn slices_tile_layers(
            counts in proptest::collection::vec(0u64..200, 1..8),
            size in 1u64..50,
            shards in 1usize..5,
        ) {
            let plan = SlicePlan::new(&counts, size, shards).unwrap();
            for (l, &c) in counts.iter().enumerate() {
                let mut next = 0;
                for s in plan.layer_slices(l) {
                    proptest::prop_assert_eq!(s.offset, next);
                    proptest::prop_assert!(s.len >= 1 && s.len <= size);
                    proptest::prop_assert_eq!(s.priority as usize, counts.len() - l);
                    next += s.len;
                }
                proptest::prop_assert_eq!(next, c);
            }
            for s in plan.slices() {
                proptest::prop_assert_eq!(s.shard, s.id % shards);
            }
        }

        /// Pops come out by descending priority, FIFO among equal priorities.
        #[test]
        fn queue_order(prios in proptest::collection::vec(0u32..4, 0..40)) {
            let mut q = SliceQueue::new();
            for (i, &p) in prios.iter().enumerate() {
                q.push(p, i);
            }
            let mut expected: Vec<(u32, usize)> =
                prios.iter().copied().zip(0..).collect();
            expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut got = Vec::new();
            while let Some(x) = q.pop_with_priority() {
                got.push(x);
            }
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn queue_interleaves_new_high_priority_items() {
        let plan = SlicePlan::new(&[2, 4], 2, 1).unwrap();
        let mut q = SliceQueue::new();
        // last layer's gradients first (as backprop produces them) ...
        for s in plan.layer_slices(1) {
            q.push_slice(*s);
        }
        assert_eq!(q.pop().map(|s| (s.layer, s.offset)), Some((1, 0)));
        // ... then layer 0 arrives and overtakes at the next slice boundary
        for s in plan.layer_slices(0) {
            q.push_slice(*s);
        }
        assert_eq!(q.peek_priority(), Some(2));
        let order: Vec<(usize, u64)> = std::iter::from_fn(|| q.pop())
            .map(|s| (s.layer, s.offset))
            .collect();
        assert_eq!(order, vec![(0, 0), (1, 2)]);
        assert!(q.is_empty());
    }

    #[test]
    fn readiness_tracks_layers() {
        let plan = SlicePlan::new(&[4, 0, 2], 2, 2).unwrap();
        let mut r = LayerReadiness::new(&plan);
        assert!(!r.is_ready(0) && r.is_ready(1) && !r.is_ready(2));
        assert_eq!(r.ready_prefix(), 0);
        assert_eq!(r.mark_received(2), Ok(true)); // layer 2 has one slice
        assert!(r.is_ready(2));
        assert_eq!(r.mark_received(1), Ok(false));
        assert_eq!(r.mark_received(1), Ok(false)); // duplicate is harmless
        assert_eq!(r.missing(0), 1);
        assert_eq!(r.mark_received(0), Ok(true));
        assert_eq!(r.ready_prefix(), 3);
        assert!(r.all_ready());
        assert!(matches!(
            r.mark_received(3),
            Err(PlanError::UnknownSlice { id: 3, n_slices: 3 })
        ));
        r.reset_layer(0);
        assert_eq!((r.missing(0), r.ready_prefix()), (2, 0));
        assert!(r.is_ready(2));
        r.reset();
        assert!(!r.is_ready(2));
    }

    /// How a runtime uses a plan with a real network: every parameter tensor is a plan
    /// "layer", slices address `(tensor, offset, len)` of the flat views.
    #[test]
    fn plan_slices_a_real_network() {
        let mut net = petrel_ml::dnn::Sequential::mlp(&[6, 5, 3], 1).unwrap();
        let x = ndarray::ArrayD::from_elem(ndarray::IxDyn(&[2, 6]), 0.5f32);
        net.compute_gradients(&x, &[0, 2]).unwrap();
        let plan = SlicePlan::new(&net.param_counts(), 4, 3).unwrap();
        let grads: Vec<Vec<f32>> = net.grads().iter().map(|g| g.to_vec()).collect();
        let mut rebuilt: Vec<Vec<f32>> = grads.iter().map(|g| vec![0.0; g.len()]).collect();
        let mut q = SliceQueue::new();
        for l in (0..plan.n_layers()).rev() {
            for s in plan.layer_slices(l) {
                q.push_slice(*s);
            }
        }
        let mut ready = LayerReadiness::new(&plan);
        let mut last_prio = u32::MAX;
        while let Some(s) = q.pop() {
            assert!(s.priority <= last_prio);
            last_prio = s.priority;
            let (o, n) = (s.offset as usize, s.len as usize);
            rebuilt[s.layer][o..o + n].copy_from_slice(&grads[s.layer][o..o + n]);
            ready.mark_received(s.id).unwrap();
        }
        assert!(ready.all_ready());
        assert_eq!(rebuilt, grads);
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
    }

    /// Two layers, every compute step 1 s, each layer 1 s on the wire; timelines worked
    /// out by hand in the comments.
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
                let cfg = SimConfig::new(mode, slice, bw, 1e12, 8, 2);
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
