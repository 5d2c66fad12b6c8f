//! The STRADS kit: a job is one [`StradsJob`] impl, and the kit turns it into cluster roles
//! (star or ring routing, [`register`]) and into a serial run ([`run_serial`]):
//!
//! ```text
//! [app.<SECTION>] -> J::Config
//! scheduler node: J::scheduler(config) -> ready barrier -> run_scheduler -> J::finish(config, scheduler)
//! worker node i:  J::worker(config, i) -> StarHalf(Push) or RingHalf(RingPush, blocks)
//!                 -> ready barrier
//! ```

pub mod dealing;
mod elastic;
pub mod serial;

pub use elastic::register_elastic_ring;

use crate::core::app::{BlockId, Push, RingApp, RingPush, Schedule, StradsApp};
use crate::error::StradsError;
use crate::shells::ring::start_ring_worker_with;
use crate::shells::{
    ElasticWorkers, RosterNotice, RoundCheckpointSettings, RoundCheckpointer, RunStats,
    SchedulerOptions, WorkerSet, ring_members, run_scheduler, run_scheduler_checkpointed,
    run_scheduler_elastic, start_elastic_worker, start_ring_worker, start_worker, starting_workers,
};
use petrel_actors::{Cluster, Node, NodeContext};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serial::{Delivery, SerialOptions, SerialRun};
use std::marker::PhantomData;
use std::path::Path;

/// How many nodes a job runs on (what the halves need to know to split the data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobShape {
    /// Worker nodes.
    pub workers: usize,
    /// Nodes running the job's scheduler role.
    pub schedulers: usize,
}

impl JobShape {
    /// Worker `index`'s contiguous share of `n` rows (the shares differ by at most one).
    pub fn share(&self, n: usize, index: usize) -> Result<std::ops::Range<usize>, StradsError> {
        crate::core::split_evenly(n, self.workers)
            .into_iter()
            .nth(index)
            .ok_or(StradsError::NoShare {
                index,
                workers: self.workers,
            })
    }
}

/// What [`StradsJob::finish`] learns about the run.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRun {
    /// Rounds and wall time.
    pub stats: RunStats,
    /// Bytes the scheduler node sent and received during the run (0 in a serial run).
    pub scheduler_bytes: u64,
}

/// What the kit reads from a job's settings (each defaults to nothing); [`StradsJob`]'s
/// hooks of the same names answer with these unless an app overrides them.
pub trait StradsSettings {
    /// Checks the values (ranges, finiteness); the error names the key.
    fn validate(&self) -> Result<(), petrel_ml::job::InvalidSetting> {
        Ok(())
    }

    /// Round checkpoints, if the settings ask for them.
    fn round_checkpoints(&self) -> Option<RoundCheckpointSettings> {
        None
    }

    /// Depth, timeout and priority of the scheduler.
    fn scheduler_options(&self) -> SchedulerOptions {
        SchedulerOptions::default()
    }
}

/// No settings (`[app.<SECTION>]` has nothing to set).
impl StradsSettings for () {}

/// A model-parallel job: its wire types, its settings section and how to build its halves
/// (implemented on the app's marker type).
pub trait StradsJob: StradsApp + Sized {
    /// The settings section: the job reads `[app.<SECTION>]`.
    const SECTION: &'static str;
    /// The scheduler's role name.
    const SCHEDULER_ROLE: &'static str;
    /// The workers' role name (also the worker actor's name).
    const WORKER_ROLE: &'static str;
    /// The job's settings (one struct for flags and TOML; a missing section is `default()`).
    type Config: StradsSettings + DeserializeOwned + Default + Clone + Send + Sync + 'static;
    /// The scheduler half.
    type Scheduler: Schedule<Self> + Send + 'static;
    /// The worker half and its routing: [`StarHalf`] or [`RingHalf`].
    type Worker: WorkerHalf<Self>;

    /// Whether the job's handlers return within milliseconds, so that its nodes may run
    /// the transport on their own thread (`[net] threads = 0`: no thread wake-up per hop,
    /// but heartbeats wait for the handlers). Default `false`.
    fn latency_bound(config: &Self::Config) -> bool {
        let _ = config;
        false
    }

    /// Depth, timeout and priority of the scheduler (default: the settings').
    fn scheduler_options(config: &Self::Config) -> SchedulerOptions {
        config.scheduler_options()
    }

    /// Round checkpoints of this job (default: the settings'); its halves then implement
    /// `snapshot_state` and `restore_state`.
    fn round_checkpoints(config: &Self::Config) -> Option<RoundCheckpointSettings> {
        config.round_checkpoints()
    }

    /// Checks the settings before any node starts (default: the settings' own checks).
    fn validate_config(config: &Self::Config) -> Result<(), petrel_ml::job::InvalidSetting> {
        config.validate()
    }

    /// Loads what the scheduler needs and builds its half (runs off the event loop).
    fn scheduler(config: &Self::Config, shape: &JobShape) -> Result<Self::Scheduler, StradsError>;

    /// Loads worker `index`'s share and builds its half (runs off the event loop).
    fn worker(
        config: &Self::Config,
        index: usize,
        shape: &JobShape,
    ) -> Result<Self::Worker, StradsError>;

    /// Builds the half of worker `index` as a standby node that joins a running job: the
    /// change that admits it deals it its share, so an app may load less now. The
    /// default: [`Self::worker`].
    fn joiner(
        config: &Self::Config,
        index: usize,
        shape: &JobShape,
    ) -> Result<Self::Worker, StradsError> {
        Self::worker(config, index, shape)
    }

    /// Writes the outputs once every round committed.
    fn finish(
        config: &Self::Config,
        scheduler: Self::Scheduler,
        run: &FinishedRun,
    ) -> Result<(), StradsError>;
}

/// A worker of an elastic job, started: the receiver fires when it may leave.
pub type StartedElastic = Result<futures::channel::oneshot::Receiver<()>, StradsError>;

/// A worker half with its routing (as an actor and in the serial driver).
pub trait WorkerHalf<A: StradsApp>: Send + Sized + 'static {
    /// Starts worker `index` of `workers` (node names, in order) as actor `actor`.
    fn start(
        self,
        node: &Node,
        actor: &str,
        index: u32,
        workers: &[String],
    ) -> Result<(), StradsError>;

    /// Runs `scheduler` against these workers in one thread.
    fn run_serial<S: Schedule<A>>(
        scheduler: &mut S,
        workers: Vec<Self>,
        opts: &SerialOptions,
    ) -> Result<SerialRun, StradsError>;

    /// The digest of the data this half loaded, compared with the scheduler's
    /// ([`Schedule::data_digest`]) at the ready barrier.
    fn data_digest(&self) -> Option<u64>;

    /// Starts worker `index` of `workers` in a job whose workers join and leave; the
    /// receiver fires once it was asked to leave and holds no work. The default refuses:
    /// the app keeps its members.
    fn start_elastic(self, node: &Node, actor: &str, at: (u32, &[String])) -> StartedElastic {
        let _ = (node, at);
        Err(StradsError::FixedMembership {
            role: actor.to_string(),
        })
    }
}

/// Star routing: every task and partial goes through the scheduler ([`Push`]).
pub struct StarHalf<W>(pub W);

impl<A: StradsApp, W: Push<A> + Send> WorkerHalf<A> for StarHalf<W> {
    fn start(
        self,
        node: &Node,
        actor: &str,
        index: u32,
        _workers: &[String],
    ) -> Result<(), StradsError> {
        start_worker::<A, W>(node, actor, index, self.0)?;
        Ok(())
    }

    fn run_serial<S: Schedule<A>>(
        scheduler: &mut S,
        workers: Vec<Self>,
        opts: &SerialOptions,
    ) -> Result<SerialRun, StradsError> {
        let mut workers: Vec<W> = workers.into_iter().map(|h| h.0).collect();
        serial::run_star(scheduler, &mut workers, opts)
    }

    fn data_digest(&self) -> Option<u64> {
        self.0.data_digest()
    }

    fn start_elastic(
        self,
        node: &Node,
        actor: &str,
        (index, _): (u32, &[String]),
    ) -> StartedElastic {
        Ok(start_elastic_worker::<A, W>(node, actor, index, self.0)?)
    }
}

/// Ring routing: the blocks travel worker to worker ([`RingPush`]); `initial` are the
/// blocks this worker holds before the first round.
pub struct RingHalf<A: RingApp, W> {
    /// The worker half.
    pub logic: W,
    /// The blocks held at the start.
    pub initial: Vec<(BlockId, A::Block)>,
    /// The digest of the data it loaded ([`WorkerHalf::data_digest`]), if the app keeps one.
    pub data_digest: Option<u64>,
    _app: PhantomData<fn() -> A>,
}

impl<A: RingApp, W> RingHalf<A, W> {
    /// A ring worker half holding `initial`.
    pub fn new(logic: W, initial: Vec<(BlockId, A::Block)>) -> Self {
        RingHalf {
            logic,
            initial,
            data_digest: None,
            _app: PhantomData,
        }
    }

    /// This half with the digest of the data it loaded.
    pub fn with_data_digest(mut self, digest: u64) -> Self {
        self.data_digest = Some(digest);
        self
    }
}

impl<A: RingApp, W: RingPush<A> + Send> WorkerHalf<A> for RingHalf<A, W> {
    fn start(
        self,
        node: &Node,
        actor: &str,
        index: u32,
        workers: &[String],
    ) -> Result<(), StradsError> {
        let ring = ring_members(node, workers, actor)?;
        start_ring_worker::<A, W>(node, actor, index, ring, self.logic, self.initial)?;
        Ok(())
    }

    fn run_serial<S: Schedule<A>>(
        scheduler: &mut S,
        workers: Vec<Self>,
        opts: &SerialOptions,
    ) -> Result<SerialRun, StradsError> {
        let (mut logic, initial): (Vec<W>, Vec<_>) =
            workers.into_iter().map(|h| (h.logic, h.initial)).unzip();
        serial::run_ring(scheduler, &mut logic, initial, opts.delivery)
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    /// A joiner starts in a ring of its own view; the change's round that admits it
    /// gives it its place ([`RingPush::rering`]).
    fn start_elastic(self, node: &Node, actor: &str, at: (u32, &[String])) -> StartedElastic {
        let (index, workers) = at;
        let ring = ring_members(node, workers, actor)?;
        let (tx, rx) = futures::channel::oneshot::channel();
        let (logic, initial) = (self.logic, self.initial);
        start_ring_worker_with::<A, W>(node, actor, (index, ring), logic, initial, Some(tx))?;
        Ok(rx)
    }
}

/// The barrier every node of job `J` passes once its half is ready.
pub fn ready_barrier<J: StradsJob>() -> String {
    format!("strads.{}.ready", J::SECTION)
}

fn config_of<J: StradsJob>(ctx: &NodeContext) -> Result<J::Config, StradsError> {
    Ok(ctx.settings.app::<J::Config>(J::SECTION)?)
}

fn shape_of<J: StradsJob>(ctx: &NodeContext, workers: &[String]) -> JobShape {
    JobShape {
        workers: workers.len(),
        schedulers: ctx.nodes_with_role(J::SCHEDULER_ROLE).len(),
    }
}

/// The barrier every member of an elastic job `J` enters once the scheduler finished:
/// the workers' roles wait there (or leave earlier).
pub fn done_barrier<J: StradsJob>() -> String {
    format!("strads.{}.done", J::SECTION)
}

/// The scheduler role of job `J`: builds the scheduler half, waits until every worker is
/// ready, runs the rounds and writes the outputs. In a cluster whose members may change it
/// starts with the non-standby workers and follows their joins and leaves
/// ([`run_scheduler_elastic`]).
pub async fn scheduler_role<J: StradsJob>(ctx: NodeContext) -> Result<(), StradsError> {
    let config = config_of::<J>(&ctx)?;
    let elastic = ctx.settings.allows_membership_changes();
    let workers = match elastic {
        true => starting_workers(&ctx.settings, J::WORKER_ROLE),
        false => ctx.nodes_with_role(J::WORKER_ROLE),
    };
    if workers.is_empty() {
        return Err(StradsError::NoWorkers {
            role: J::WORKER_ROLE,
        });
    }
    let mut roster = match elastic {
        true => Some(ElasticWorkers::start(
            &ctx,
            J::WORKER_ROLE,
            workers.clone(),
        )?),
        false => None,
    };
    let shape = shape_of::<J>(&ctx, &workers);
    let loader = config.clone();
    let mut scheduler = off_loop(move || J::scheduler(&loader, &shape)).await?;
    tracing::info!(app = J::SECTION, workers = shape.workers, "scheduler ready");
    let opts = J::scheduler_options(&config);
    match roster.as_mut() {
        Some(roster) => {
            let digest = scheduler.data_digest();
            roster.starting_workers_ready(digest, opts.timeout).await?;
        }
        None => {
            ctx.barrier_agreeing(&ready_barrier::<J>(), scheduler.data_digest())
                .await?;
        }
    }
    let set = WorkerSet::<J>::resolve(&ctx.node, &workers, J::WORKER_ROLE)?;
    let before = ctx.node.net_stats();
    let stats = match (J::round_checkpoints(&config), roster.as_mut()) {
        (_, Some(roster)) => run_scheduler_elastic(&mut scheduler, &set, &opts, roster).await?,
        (Some(settings), None) => {
            let mut checkpoints = RoundCheckpointer::new(J::SECTION, settings);
            run_scheduler_checkpointed(&mut scheduler, &set, &opts, &mut checkpoints).await?
        }
        (None, None) => run_scheduler(&mut scheduler, &set, &opts).await?,
    };
    let after = ctx.node.net_stats();
    let scheduler_bytes = (after.sent_bytes + after.received_bytes)
        .saturating_sub(before.sent_bytes + before.received_bytes);
    tracing::info!(
        app = J::SECTION,
        rounds = stats.rounds,
        seconds = format!("{:.2}", stats.elapsed.as_secs_f64()),
        "scheduler finished"
    );
    let run = FinishedRun {
        stats,
        scheduler_bytes,
    };
    J::finish(&config, scheduler, &run)?;
    if roster.is_some() {
        ctx.barrier(&done_barrier::<J>()).await?;
    }
    Ok(())
}

/// The worker role of job `J`: builds this node's worker half, starts it and passes the
/// ready barrier.
pub async fn worker_role<J: StradsJob>(ctx: NodeContext) -> Result<(), StradsError> {
    if ctx.settings.allows_membership_changes() {
        return elastic_worker_role::<J>(ctx).await;
    }
    let config = config_of::<J>(&ctx)?;
    let workers = ctx.nodes_with_role(J::WORKER_ROLE);
    let index = workers
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or_else(|| StradsError::NotInRole {
            node: ctx.spec.name.clone(),
            role: J::WORKER_ROLE,
        })?;
    let shape = shape_of::<J>(&ctx, &workers);
    let half = off_loop(move || J::worker(&config, index, &shape)).await?;
    let digest = half.data_digest();
    half.start(&ctx.node, J::WORKER_ROLE, index as u32, &workers)?;
    tracing::info!(app = J::SECTION, worker = index, "worker ready");
    Ok(ctx.barrier_agreeing(&ready_barrier::<J>(), digest).await?)
}

/// The worker role of job `J` in a cluster whose members may change. Every worker, starting
/// or joining, announces itself ready to the scheduler (no ready barrier: a standby node
/// that joins during start-up would hold it up). Asked to leave, it says so and keeps
/// serving until a change's round dealt it nothing, then leaves; otherwise it waits for
/// the scheduler to finish.
async fn elastic_worker_role<J: StradsJob>(ctx: NodeContext) -> Result<(), StradsError> {
    let config = config_of::<J>(&ctx)?;
    let name = ctx.spec.name.clone();
    let workers = match ctx.spec.standby {
        true => ctx.nodes_with_role(J::WORKER_ROLE),
        false => starting_workers(&ctx.settings, J::WORKER_ROLE),
    };
    let index = workers
        .iter()
        .position(|n| *n == name)
        .ok_or_else(|| StradsError::NotInRole {
            node: name.clone(),
            role: J::WORKER_ROLE,
        })?;
    let shape = shape_of::<J>(&ctx, &workers);
    let half = match ctx.spec.standby {
        true => off_loop(move || J::joiner(&config, index, &shape)).await?,
        false => off_loop(move || J::worker(&config, index, &shape)).await?,
    };
    let digest = half.data_digest();
    let released = half.start_elastic(&ctx.node, J::WORKER_ROLE, (index as u32, &workers))?;
    let scheduler = ctx
        .nodes_with_role(J::SCHEDULER_ROLE)
        .into_iter()
        .next()
        .ok_or(StradsError::NoWorkers {
            role: J::SCHEDULER_ROLE,
        })?;
    let roster = ctx
        .node
        .actor_at::<RosterNotice>(&scheduler, crate::shells::elastic::ROSTER_ACTOR)?;
    let timeout = J::scheduler_options(&config_of::<J>(&ctx)?).timeout;
    let notice = |leaving| {
        let roster = roster.clone();
        let worker = name.clone();
        async move {
            let mut attempts = 0;
            loop {
                let msg = RosterNotice {
                    worker: worker.clone(),
                    leaving,
                    digest,
                };
                match roster
                    .ask(msg, petrel_messages::Priority::NORMAL, timeout)
                    .await
                {
                    Ok(()) => return Ok(()),
                    // The scheduler registers its roster as its role starts: an early
                    // notice may find none yet.
                    Err(e) if attempts < 250 => {
                        attempts += 1;
                        tracing::debug!(error = %e, "roster not reachable yet; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    Err(source) => {
                        return Err(StradsError::Worker {
                            round: 0,
                            worker: index,
                            source,
                        });
                    }
                }
            }
        }
    };
    notice(false).await?;
    tracing::info!(app = J::SECTION, worker = %name, "worker ready");
    let done_name = done_barrier::<J>();
    let done = ctx.barrier(&done_name);
    tokio::pin!(done);
    tokio::select! {
        r = &mut done => return Ok(r.map(|_| ())?),
        () = ctx.node.leave_requested() => {}
    }
    notice(true).await?;
    tokio::select! {
        r = &mut done => Ok(r.map(|_| ())?),
        _ = released => {
            tracing::info!(app = J::SECTION, worker = %name, "worker drained; leaving");
            ctx.node.leave_when_done();
            Ok(())
        }
    }
}

/// Registers job `J`'s scheduler and worker roles.
pub fn register<J: StradsJob>(cluster: Cluster) -> Cluster {
    cluster
        .app_section_checked::<J::Config, _>(J::SECTION, J::validate_config)
        .role(J::SCHEDULER_ROLE, scheduler_role::<J>)
        .role(J::WORKER_ROLE, worker_role::<J>)
}

/// Runs job `J` with `workers` worker halves in this thread (no actors), in the message
/// order of the cluster run; returns the scheduler half for inspection and the run.
pub fn run_serial<J: StradsJob>(
    config: &J::Config,
    workers: usize,
    delivery: Delivery,
) -> Result<(J::Scheduler, SerialRun), StradsError> {
    let shape = JobShape {
        workers,
        schedulers: 1,
    };
    let mut scheduler = J::scheduler(config, &shape)?;
    let halves = (0..workers)
        .map(|i| J::worker(config, i, &shape))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = SerialOptions {
        depth: J::scheduler_options(config).depth,
        delivery,
        ..SerialOptions::default()
    };
    let run = J::Worker::run_serial(&mut scheduler, halves, &opts)?;
    Ok((scheduler, run))
}

/// [`run_serial`] (handoffs delivered late), then [`StradsJob::finish`]: `--transport none`.
pub fn run_serial_and_finish<J: StradsJob>(
    config: &J::Config,
    workers: usize,
) -> Result<(), StradsError> {
    let started = std::time::Instant::now();
    let (scheduler, run) = run_serial::<J>(config, workers, Delivery::Late)?;
    let finished = FinishedRun {
        stats: RunStats {
            rounds: run.rounds,
            elapsed: started.elapsed(),
        },
        scheduler_bytes: 0,
    };
    J::finish(config, scheduler, &finished)
}

/// Runs blocking work (data loading) off the node's event loop, so heartbeats keep flowing.
pub async fn off_loop<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StradsError> + Send + 'static,
) -> Result<T, StradsError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(StradsError::Loader)?
}

/// Writes `contents` to `dir/name` atomically, creating `dir`.
pub fn write_output(dir: &Path, name: &str, contents: &[u8]) -> Result<(), StradsError> {
    let path = dir.join(name);
    petrel_ml::job::write_atomic(&path, contents).map_err(|source| StradsError::write(path, source))
}

/// Writes the saved model ([`petrel_ml::model::MODEL_FILE`]) that `petrel eval` and
/// `petrel predict` read.
pub fn write_saved_model(
    dir: &Path,
    model: &petrel_ml::model::SavedModel,
) -> Result<(), StradsError> {
    let json = model.to_json().map_err(|source| StradsError::Encode {
        what: petrel_ml::model::MODEL_FILE,
        source,
    })?;
    write_output(dir, petrel_ml::model::MODEL_FILE, &json)
}

/// Writes a run's `history.csv`, then its `metrics.json` (the mark of a finished run),
/// after checking that no figure diverged.
pub fn write_run_metrics(
    dir: &Path,
    metrics: &petrel_ml::job::RunMetrics,
) -> Result<(), StradsError> {
    write_output(dir, "history.csv", metrics.history_csv().as_bytes())?;
    write_json(dir, "metrics.json", metrics)
}

/// Writes `value` as pretty JSON to `dir/name` (e.g. `metrics.json`).
pub fn write_json<T: Serialize>(
    dir: &Path,
    name: &'static str,
    value: &T,
) -> Result<(), StradsError> {
    let json = serde_json::to_vec_pretty(value)
        .map_err(|source| StradsError::Encode { what: name, source })?;
    write_output(dir, name, &json)
}

/// Size of `value` as a message body (0 if it does not encode).
pub fn encoded_len<T: Serialize>(value: &T) -> u64 {
    let mut bytes = Vec::new();
    match petrel_messages::encode_body(value, &mut bytes) {
        Ok(()) => bytes.len() as u64,
        Err(_) => 0,
    }
}
