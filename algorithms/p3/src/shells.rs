//! The P3 propagation engine on petrel actors: thin shells around the sans-I/O cores of
//! [`crate::core::engine`] and [`crate::core::plan`].
//!
//! - [`ShardActor`] (role `p3-shard`): holds the parameter slices its shard owns. A worker
//!   *asks* it with [`PushGrad`] at the slice's priority; the shard queues the work in a
//!   [`PriorityInbox`] (highest priority first), and once every worker's gradient of that
//!   slice and iteration is in, applies SGD with momentum and answers every waiting worker
//!   with the new [`SliceValues`]. Replies travel at the request's priority, so the pull
//!   of a slice is prioritised exactly like its push.
//! - The worker (role `p3-worker`) runs a [`StageModel`] stage by stage. Forward stage `k`
//!   starts when the plan layers (parameter tensors) of stage `k` are back
//!   ([`WorkerCore::is_ready`]); backward stage `k` produces its gradients, which are
//!   pushed at once (`fifo`, `p3`) or after the whole backward pass (`sequential`).
//!   Pushes go through the node's priority outbox onto per-message QUIC streams whose
//!   priority is the slice's priority.
//!
//! [`run_cluster`] runs a whole job (`n_workers` + `n_shards` nodes) in this process over
//! QUIC on 127.0.0.1 (or the memory transport) and returns each worker's report.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use ndarray::{ArrayD, Ix2};
use petrel_actors::{
    ActorRef, AskError, Cluster, HandlerError, Msg, NodeContext, PriorityActor, PriorityInbox,
    Topology,
};
use petrel_messages::tensor::f32_bytes;
use petrel_messages::{Priority, remote_message};
use petrel_net::NetConfig;
use serde::{Deserialize, Serialize};

use crate::core::engine::{ShardCore, WorkerCore};
use crate::core::plan::{Mode, SlicePlan};
use crate::core::profile::ModelProfile;
use petrel_ml::dnn::data::Dataset;
use petrel_ml::dnn::{DnnError, Sequential, SgdMomentum, SoftmaxCrossEntropy};

pub const WORKER_ROLE: &str = "p3-worker";
pub const SHARD_ROLE: &str = "p3-shard";
pub const SHARD_ACTOR: &str = "p3-shard";

/// One worker's gradient for one slice of one iteration. Reply: the slice's new values.
#[derive(Serialize, Deserialize)]
pub struct PushGrad {
    pub iter: u64,
    pub worker: u32,
    pub slice: u32,
    #[serde(with = "f32_bytes")]
    pub grad: Vec<f32>,
}

/// A slice's parameters after the update of iteration `iter`.
#[derive(Serialize, Deserialize)]
pub struct SliceValues {
    pub iter: u64,
    pub slice: u32,
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

remote_message!(PushGrad => SliceValues, "petrel.p3.push");

/// Initial values of a slice (sent once by worker 0 before training).
#[derive(Serialize, Deserialize)]
pub struct InitSlice {
    pub slice: u32,
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

remote_message!(InitSlice => u32, "petrel.p3.init");

type Waiter = futures::channel::oneshot::Sender<Result<SliceValues, HandlerError>>;

/// A server shard: a [`ShardCore`] behind a priority mailbox.
pub struct ShardActor {
    core: ShardCore,
    inbox: PriorityInbox<Self>,
    waiters: HashMap<usize, Vec<Waiter>>,
    first_arrival: HashMap<usize, Instant>,
}

impl ShardActor {
    pub fn new(core: ShardCore) -> Self {
        ShardActor {
            core,
            inbox: PriorityInbox::default(),
            waiters: HashMap::new(),
            first_arrival: HashMap::new(),
        }
    }

    fn push(&mut self, m: PushGrad, tx: Waiter) {
        let slice = m.slice as usize;
        let iter = m.iter;
        match self.core.contribute(iter, m.worker as usize, slice, m.grad) {
            Err(e) => {
                let _ = tx.send(Err(HandlerError::new(format!(
                    "shard {}: {e}",
                    self.core.shard()
                ))));
            }
            Ok(None) => {
                self.first_arrival.entry(slice).or_insert_with(Instant::now);
                self.waiters.entry(slice).or_default().push(tx)
            }
            Ok(Some(values)) => {
                if let Some(t) = self.first_arrival.remove(&slice) {
                    tracing::trace!(
                        shard = self.core.shard(),
                        slice,
                        iter,
                        spread_ms = t.elapsed().as_secs_f64() * 1e3,
                        "slice aggregated"
                    );
                }
                for w in self.waiters.remove(&slice).unwrap_or_default() {
                    let _ = w.send(Ok(SliceValues {
                        iter,
                        slice: m.slice,
                        values: values.clone(),
                    }));
                }
                let _ = tx.send(Ok(SliceValues {
                    iter,
                    slice: m.slice,
                    values,
                }));
            }
        }
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;
}

impl PriorityActor for ShardActor {
    fn inbox(&mut self) -> &mut PriorityInbox<Self> {
        &mut self.inbox
    }
}

impl Handler<Msg<PushGrad>> for ShardActor {
    type Result = ResponseFuture<Result<SliceValues, HandlerError>>;

    fn handle(&mut self, msg: Msg<PushGrad>, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = futures::channel::oneshot::channel();
        let queued = PriorityInbox::defer(self, ctx, msg.priority, move |act, _| {
            act.push(msg.body, tx);
            Ok(())
        });
        Box::pin(async move {
            queued.await?;
            rx.await
                .unwrap_or_else(|_| Err(HandlerError::new("shard stopped")))
        })
    }
}

impl Handler<Msg<InitSlice>> for ShardActor {
    type Result = Result<u32, HandlerError>;

    fn handle(&mut self, msg: Msg<InitSlice>, _: &mut Context<Self>) -> Self::Result {
        self.core
            .init_slice(msg.body.slice as usize, msg.body.values)
            .map_err(|e| HandlerError::new(format!("shard {}: {e}", self.core.shard())))?;
        Ok(msg.body.slice)
    }
}

/// A model a worker runs stage by stage. A *stage* is what must run in order (a network
/// layer); a *unit* is a plan layer (one parameter tensor). Methods may compute for real
/// (returning `Duration::ZERO`) or return a duration of emulated compute the engine waits.
pub trait StageModel {
    fn n_stages(&self) -> usize;
    /// Units (plan layers) whose parameters stage `stage` needs.
    fn stage_units(&self, stage: usize) -> Range<usize>;
    /// Installs the new values of one unit.
    fn set_unit(&mut self, unit: usize, values: &[f32]) -> Result<(), String>;
    fn forward_stage(&mut self, iter: u64, stage: usize) -> Result<Duration, String>;
    fn backward_stage(&mut self, stage: usize) -> Result<Duration, String>;
    /// Gradient of one unit after the backward pass of its stage.
    fn unit_grad(&self, unit: usize) -> Result<Vec<f32>, String>;
    /// (loss, accuracy) of the last forward pass, if the model computes them.
    fn stats(&self) -> Option<(f32, f32)> {
        None
    }
}

/// Builds worker `w`'s model (called on the worker's own thread).
pub type ModelFactory = Arc<dyn Fn(usize) -> Result<Box<dyn StageModel>, String> + Send + Sync>;
/// Called by every worker after every iteration: (worker, iteration, loss/accuracy).
pub type Progress = Arc<dyn Fn(usize, u64, Option<(f32, f32)>) + Send + Sync>;

/// Everything a P3 job needs besides the model.
#[derive(Clone)]
pub struct P3Job {
    pub mode: Mode,
    /// Parameters per slice in `p3` mode.
    pub slice_size: u64,
    pub n_workers: usize,
    pub n_shards: usize,
    pub iterations: u64,
    pub opt: SgdMomentum,
    /// Parameters of every unit (plan layer), in forward order.
    pub unit_counts: Vec<u64>,
    /// Initial values of every unit (all workers and shards start from them).
    pub initial: Arc<Vec<Vec<f32>>>,
    /// Transport settings of every node (the shaper goes here).
    pub net: NetConfig,
    /// How the in-process cluster's nodes reach each other.
    pub transport: petrel_actors::Transport,
    pub ask_timeout: Duration,
}

impl P3Job {
    /// The plan every node derives: P3 slices, or whole layers split evenly over shards.
    pub fn plan(&self) -> Result<SlicePlan, String> {
        SlicePlan::layerwise_split(self.mode, &self.unit_counts, self.slice_size, self.n_shards)
            .map_err(|e| e.to_string())
    }
}

/// What a worker measured.
#[derive(Debug, Clone)]
pub struct WorkerReport {
    pub worker: usize,
    /// `marks[i]`: when forward stage 0 of iteration `i` started; the last entry: when
    /// the parameters of the last iteration were all back.
    pub marks: Vec<Instant>,
    /// Final parameters, one vector per unit.
    pub params: Vec<Vec<f32>>,
    /// (loss, accuracy) per iteration, when the model reports them.
    pub stats: Vec<Option<(f32, f32)>>,
    /// Gradient bytes this worker pushed.
    pub bytes_pushed: u64,
}

impl WorkerReport {
    /// Mean seconds per iteration over iterations `skip..` (warm-up excluded).
    pub fn secs_per_iter(&self, skip: usize) -> Option<f64> {
        let n = self.marks.len().checked_sub(1)?;
        if skip >= n {
            return None;
        }
        let span = self.marks[n].duration_since(self.marks[skip]).as_secs_f64();
        Some(span / (n - skip) as f64)
    }
}

fn index_in(ctx: &NodeContext, role: &str) -> Result<usize, String> {
    ctx.nodes_with_role(role)
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or_else(|| format!("node {} is not in role {role}", ctx.spec.name))
}

/// The `p3-shard` role for `job` (also run by the built-in roles of the `petrel` binary).
pub async fn shard_role(ctx: NodeContext, job: Arc<P3Job>) -> Result<(), String> {
    let me = index_in(&ctx, SHARD_ROLE)?;
    let plan = job.plan()?;
    let core = ShardCore::new(&plan, me, job.n_workers, job.opt).map_err(|e| e.to_string())?;
    tracing::debug!(shard = me, slices = core.n_slices(), "p3 shard ready");
    let addr = ShardActor::new(core).start();
    ctx.node
        .register(SHARD_ACTOR, addr)
        .map_err(|e| e.to_string())?
        .accept::<PushGrad>()
        .accept::<InitSlice>();
    ctx.barrier("p3.ready").await.map_err(|e| e.to_string())?;
    ctx.barrier("p3.init").await.map_err(|e| e.to_string())
}

type Arrival = (usize, u64, Result<SliceValues, AskError>);

struct Pusher {
    shards: Vec<ActorRef<PushGrad>>,
    tx: tokio::sync::mpsc::UnboundedSender<Arrival>,
    worker: u32,
    timeout: Duration,
    bytes: u64,
}

impl Pusher {
    /// Sends every slice of `unit`'s gradient to its shard at the slice's priority; the
    /// reply (new values) comes back through the channel.
    fn push(
        &mut self,
        core: &WorkerCore,
        iter: u64,
        unit: usize,
        grad: &[f32],
    ) -> Result<(), String> {
        for (s, values) in core.grad_slices(unit, grad).map_err(|e| e.to_string())? {
            let target = self
                .shards
                .get(s.shard)
                .ok_or_else(|| format!("slice {} on unknown shard {}", s.id, s.shard))?
                .clone();
            self.bytes += values.len() as u64 * 4;
            let msg = PushGrad {
                iter,
                worker: self.worker,
                slice: s.id as u32,
                grad: values,
            };
            let tx = self.tx.clone();
            let timeout = self.timeout;
            let priority = Priority(s.priority.min(i32::MAX as u32) as i32);
            tracing::trace!(slice = s.id, iter, at = ?Instant::now(), "slice pushed");
            actix::spawn(async move {
                let r = target.ask(msg, priority, timeout).await;
                let _ = tx.send((s.id, iter, r));
            });
        }
        Ok(())
    }
}

fn accept(
    core: &mut WorkerCore,
    model: &mut dyn StageModel,
    arrival: Arrival,
) -> Result<(), String> {
    let (slice, iter, result) = arrival;
    let v = result.map_err(|e| format!("push of slice {slice} (iteration {iter}): {e}"))?;
    tracing::trace!(slice, iter, at = ?Instant::now(), "slice back");
    if v.slice as usize != slice {
        return Err(format!("asked for slice {slice}, got slice {}", v.slice));
    }
    // The shard answers with the iteration it aggregated; the worker waits for iter + 1.
    if let Some(unit) = core
        .receive(v.iter + 1, slice, &v.values)
        .map_err(|e| e.to_string())?
    {
        let values = core
            .layer_params(unit)
            .ok_or_else(|| format!("no buffer for unit {unit}"))?;
        model.set_unit(unit, values)?;
    }
    Ok(())
}

async fn wait_for(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Arrival>,
    core: &mut WorkerCore,
    model: &mut dyn StageModel,
    ready: impl Fn(&WorkerCore) -> bool,
) -> Result<bool, String> {
    let mut waited = false;
    while !ready(core) {
        waited = true;
        let a = rx
            .recv()
            .await
            .ok_or("reply channel closed while waiting for parameters")?;
        accept(core, model, a)?;
    }
    Ok(waited)
}

async fn sleep_to(vt: Instant) {
    if vt > Instant::now() {
        tokio::time::sleep_until(tokio::time::Instant::from_std(vt)).await;
    }
}

/// The `p3-worker` role: trains `job`, then pushes its report into `sink`.
pub async fn worker_role(
    ctx: NodeContext,
    job: Arc<P3Job>,
    factory: ModelFactory,
    progress: Option<Progress>,
    sink: Arc<Mutex<Vec<WorkerReport>>>,
) -> Result<(), String> {
    let me = index_in(&ctx, WORKER_ROLE)?;
    let plan = job.plan()?;
    let shard_nodes = ctx.nodes_with_role(SHARD_ROLE);
    if shard_nodes.len() != job.n_shards {
        return Err(format!(
            "job has {} shards, cluster runs {} p3-shard nodes",
            job.n_shards,
            shard_nodes.len()
        ));
    }
    let mut model = factory(me)?;
    let mut core =
        WorkerCore::new(plan.clone(), job.initial.to_vec()).map_err(|e| e.to_string())?;
    for (u, v) in job.initial.iter().enumerate() {
        model.set_unit(u, v)?;
    }
    ctx.barrier("p3.ready").await.map_err(|e| e.to_string())?;
    let shards: Vec<ActorRef<PushGrad>> = shard_nodes
        .iter()
        .map(|n| ctx.node.actor_at::<PushGrad>(n, SHARD_ACTOR))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if me == 0 {
        let inits = plan.slices().iter().map(|s| {
            let a = s.offset as usize;
            let values = job.initial[s.layer][a..a + s.len as usize].to_vec();
            let target = ctx
                .node
                .actor_at::<InitSlice>(&shard_nodes[s.shard], SHARD_ACTOR);
            let timeout = job.ask_timeout;
            async move {
                target
                    .map_err(|e| e.to_string())?
                    .ask(
                        InitSlice {
                            slice: s.id as u32,
                            values,
                        },
                        Priority::NORMAL,
                        timeout,
                    )
                    .await
                    .map_err(|e| e.to_string())
            }
        });
        for r in futures::future::join_all(inits).await {
            r?;
        }
    }
    ctx.barrier("p3.init").await.map_err(|e| e.to_string())?;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Arrival>();
    let mut pusher = Pusher {
        shards,
        tx,
        worker: me as u32,
        timeout: job.ask_timeout,
        bytes: 0,
    };
    let n_stages = model.n_stages();
    let mut marks = Vec::with_capacity(job.iterations as usize + 1);
    let mut stats = Vec::with_capacity(job.iterations as usize);
    // Emulated-device clock: compute of a stage ends at vt; waiting for parameters moves
    // it to the arrival time, so timer lag does not accumulate.
    let mut vt = Instant::now();
    for iter in 0..job.iterations {
        for stage in 0..n_stages {
            let units = model.stage_units(stage);
            let wait_start = Instant::now();
            let waited = wait_for(&mut rx, &mut core, model.as_mut(), |c| {
                units.clone().all(|u| c.is_ready(u))
            })
            .await?;
            if waited {
                tracing::debug!(
                    worker = me,
                    iter,
                    stage,
                    waited_ms = wait_start.elapsed().as_secs_f64() * 1e3,
                    lag_ms = (Instant::now() - vt.min(Instant::now())).as_secs_f64() * 1e3,
                    "forward waited for parameters"
                );
            }
            if waited || (iter == 0 && stage == 0) {
                vt = vt.max(Instant::now());
            }
            if stage == 0 {
                marks.push(Instant::now());
            }
            let d = model.forward_stage(iter, stage)?;
            if !d.is_zero() {
                vt += d;
                sleep_to(vt).await;
            }
        }
        stats.push(model.stats());
        core.begin_round(iter + 1);
        let mut stash = Vec::new();
        for stage in (0..n_stages).rev() {
            let d = model.backward_stage(stage)?;
            if !d.is_zero() {
                vt += d;
                sleep_to(vt).await;
            }
            let units = model.stage_units(stage);
            for u in units.rev() {
                let g = model.unit_grad(u)?;
                if job.mode.pushes_during_backward() {
                    pusher.push(&core, iter, u, &g)?;
                } else {
                    stash.push((u, g));
                }
            }
            if job.mode.pushes_during_backward() {
                // Let the spawned pushes hand their frames to the outbox now.
                tokio::task::yield_now().await;
            }
        }
        for (u, g) in stash {
            pusher.push(&core, iter, u, &g)?;
        }
        if let Some(p) = &progress {
            p(me, iter, model.stats());
        }
    }
    wait_for(&mut rx, &mut core, model.as_mut(), |c| c.all_ready()).await?;
    marks.push(Instant::now());
    let report = WorkerReport {
        worker: me,
        marks,
        params: core.params().to_vec(),
        stats,
        bytes_pushed: pusher.bytes,
    };
    sink.lock()
        .map_err(|_| "report sink poisoned")?
        .push(report);
    Ok(())
}

/// Runs one job on an in-process cluster: nodes `w0..` (role `p3-worker`) and `s0..`
/// (role `p3-shard`), each on its own thread with its own transport. Returns the workers'
/// reports in worker order.
pub fn run_cluster(
    job: &P3Job,
    factory: ModelFactory,
    progress: Option<Progress>,
) -> Result<Vec<WorkerReport>, String> {
    if job.n_workers == 0 || job.n_shards == 0 {
        return Err("need at least one worker and one shard".into());
    }
    job.plan()?;
    let mut topo = Topology::builder("p3").transport(job.transport);
    for w in 0..job.n_workers {
        topo = topo.node(&format!("w{w}"), &[WORKER_ROLE]);
    }
    for s in 0..job.n_shards {
        topo = topo.node(&format!("s{s}"), &[SHARD_ROLE]);
    }
    let net = job.net.clone();
    let timeout_ms = job.ask_timeout.as_millis() as u64;
    let settings = topo
        .with(|s| {
            s.net = net;
            s.cluster.request_timeout_ms = timeout_ms;
            // Heartbeats share the shaped links with a full model's worth of traffic; on a
            // slow link and a loaded machine 2 s of silence is not yet a dead peer.
            s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
        })
        .build()
        .map_err(|e| e.to_string())?;
    let job = Arc::new(job.clone());
    let sink: Arc<Mutex<Vec<WorkerReport>>> = Arc::new(Mutex::new(Vec::new()));
    let (j1, j2, s2) = (job.clone(), job.clone(), sink.clone());
    let cluster = Cluster::new(settings)
        .role(SHARD_ROLE, move |ctx| Box::pin(shard_role(ctx, j1.clone())))
        .role(WORKER_ROLE, move |ctx| {
            Box::pin(worker_role(
                ctx,
                j2.clone(),
                factory.clone(),
                progress.clone(),
                s2.clone(),
            ))
        });
    cluster.run_in_process().map_err(|e| e.to_string())?;
    let mut reports = std::mem::take(&mut *sink.lock().map_err(|_| "report sink poisoned")?);
    reports.sort_by_key(|r| r.worker);
    if reports.len() != job.n_workers {
        return Err(format!(
            "{} of {} workers reported",
            reports.len(),
            job.n_workers
        ));
    }
    Ok(reports)
}

/// A real network trained stage by stage: stage = network layer, unit = parameter tensor.
/// Worker `w` of `n` takes rows `[(iter * n + w) * batch, ..)` (wrapping) of its dataset.
pub struct DnnStageModel {
    net: Sequential,
    ranges: Vec<Range<usize>>,
    data: Dataset,
    batch: usize,
    worker: usize,
    n_workers: usize,
    act: Option<ArrayD<f32>>,
    labels: Vec<usize>,
    grad: Option<ArrayD<f32>>,
    last: Option<(f32, f32)>,
}

impl DnnStageModel {
    pub fn new(
        net: Sequential,
        data: Dataset,
        batch: usize,
        worker: usize,
        n_workers: usize,
    ) -> Result<Self, String> {
        if data.is_empty() || batch == 0 || n_workers == 0 {
            return Err("DnnStageModel needs data, batch > 0 and workers > 0".into());
        }
        Ok(DnnStageModel {
            ranges: net.layer_param_ranges(),
            net,
            data,
            batch,
            worker,
            n_workers,
            act: None,
            labels: Vec::new(),
            grad: None,
            last: None,
        })
    }

    pub fn unit_counts(net: &Sequential) -> Vec<u64> {
        net.param_counts()
    }

    pub fn initial(net: &Sequential) -> Vec<Vec<f32>> {
        net.params().iter().map(|p| p.to_vec()).collect()
    }
}

fn dnn(e: DnnError) -> String {
    e.to_string()
}

impl StageModel for DnnStageModel {
    fn n_stages(&self) -> usize {
        self.ranges.len()
    }

    fn stage_units(&self, stage: usize) -> Range<usize> {
        self.ranges.get(stage).cloned().unwrap_or(0..0)
    }

    fn set_unit(&mut self, unit: usize, values: &[f32]) -> Result<(), String> {
        let mut params = self.net.params_mut();
        let dst = params
            .get_mut(unit)
            .ok_or_else(|| format!("no parameter tensor {unit}"))?;
        if dst.len() != values.len() {
            return Err(format!(
                "tensor {unit}: {} values for {} parameters",
                values.len(),
                dst.len()
            ));
        }
        dst.copy_from_slice(values);
        Ok(())
    }

    fn forward_stage(&mut self, iter: u64, stage: usize) -> Result<Duration, String> {
        if stage == 0 {
            let n = self.data.len();
            let start = (iter as usize * self.n_workers + self.worker) * self.batch;
            let idx: Vec<usize> = (0..self.batch).map(|i| (start + i) % n).collect();
            let (x, y) = self.data.select(&idx);
            self.act = Some(x);
            self.labels = y;
        }
        let x = self.act.take().ok_or("forward stage without input")?;
        let layer = self
            .net
            .layer_mut(stage)
            .ok_or_else(|| format!("no layer {stage}"))?;
        let out = layer.forward(&x).map_err(dnn)?;
        if stage + 1 == self.ranges.len() {
            let logits = out
                .into_dimensionality::<Ix2>()
                .map_err(|e| format!("logits: {e}"))?;
            let (loss, acc) = SoftmaxCrossEntropy::loss_and_accuracy(&logits.view(), &self.labels)
                .map_err(dnn)?;
            let (_, g) =
                SoftmaxCrossEntropy::loss_and_grad(&logits.view(), &self.labels).map_err(dnn)?;
            self.last = Some((loss, acc));
            self.grad = Some(g.into_dyn());
        } else {
            self.act = Some(out);
        }
        Ok(Duration::ZERO)
    }

    fn backward_stage(&mut self, stage: usize) -> Result<Duration, String> {
        let g = self.grad.take().ok_or("backward stage without gradient")?;
        let layer = self
            .net
            .layer_mut(stage)
            .ok_or_else(|| format!("no layer {stage}"))?;
        self.grad = Some(layer.backward(&g).map_err(dnn)?);
        Ok(Duration::ZERO)
    }

    fn unit_grad(&self, unit: usize) -> Result<Vec<f32>, String> {
        self.net
            .grads()
            .get(unit)
            .map(|g| g.to_vec())
            .ok_or_else(|| format!("no gradient tensor {unit}"))
    }

    fn stats(&self) -> Option<(f32, f32)> {
        self.last
    }
}

/// A profiled model with emulated compute: stage = unit = profile layer; forward and
/// backward take the profiled time on a device of `device_flops_per_s`; gradients are real
/// buffers of the layer's size (so real bytes cross the network).
pub struct EmulatedModel {
    fwd: Vec<Duration>,
    bwd: Vec<Duration>,
    counts: Vec<usize>,
    grad_value: f32,
}

impl EmulatedModel {
    pub fn new(profile: &ModelProfile, device_flops_per_s: f64, batch: usize) -> Self {
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
        EmulatedModel {
            fwd: profile
                .layers
                .iter()
                .map(|l| secs(l.fwd_seconds(device_flops_per_s, batch)))
                .collect(),
            bwd: profile
                .layers
                .iter()
                .map(|l| secs(l.bwd_seconds(device_flops_per_s, batch)))
                .collect(),
            counts: profile.layers.iter().map(|l| l.params as usize).collect(),
            grad_value: 1e-3,
        }
    }
}

impl StageModel for EmulatedModel {
    fn n_stages(&self) -> usize {
        self.counts.len()
    }
    fn stage_units(&self, stage: usize) -> Range<usize> {
        stage..stage + 1
    }
    fn set_unit(&mut self, unit: usize, values: &[f32]) -> Result<(), String> {
        match self.counts.get(unit) {
            Some(&n) if n == values.len() => Ok(()),
            _ => Err(format!("unit {unit}: unexpected {} values", values.len())),
        }
    }
    fn forward_stage(&mut self, _iter: u64, stage: usize) -> Result<Duration, String> {
        self.fwd
            .get(stage)
            .copied()
            .ok_or_else(|| format!("no stage {stage}"))
    }
    fn backward_stage(&mut self, stage: usize) -> Result<Duration, String> {
        self.bwd
            .get(stage)
            .copied()
            .ok_or_else(|| format!("no stage {stage}"))
    }
    fn unit_grad(&self, unit: usize) -> Result<Vec<f32>, String> {
        self.counts
            .get(unit)
            .map(|&n| vec![self.grad_value; n])
            .ok_or_else(|| format!("no unit {unit}"))
    }
}
