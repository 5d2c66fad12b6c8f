//! The [`PsApp`] trait: what a parameter-server app is.

use std::time::Duration;

use petrel_actors::Settings;
use petrel_messages::RemoteMessage;

use crate::core::rules::RuleRegistry;
use crate::core::server_push::ServerPushConfig;
use crate::core::types::TableSpec;
use crate::error::PsError;
use crate::kit::{MonitorCtx, PsCheckpointing, WorkerCtx};
use crate::shells::PsLayout;

/// The role names of a job: which nodes host shards, workers and the monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsRoles {
    /// Nodes that host shards.
    pub shard: &'static str,
    /// Nodes that host workers.
    pub worker: &'static str,
    /// The one node that hosts the monitor.
    pub monitor: &'static str,
}

impl PsRoles {
    /// `ps-shard`, `ps-worker`, `ps-monitor`: in-process runs, and ps-mf's under `petrel node`.
    pub const GENERIC: PsRoles = PsRoles {
        shard: "ps-shard",
        worker: "ps-worker",
        monitor: "ps-monitor",
    };
}

/// How a worker ends a clock (see [`PsApp::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsStep {
    /// `clock()`: flush the updates and go on.
    Clock,
    /// `barrier()`: flush, and wait until every worker completed this clock.
    Barrier,
    /// The worker is done; no clock is ended.
    Done,
}

/// A monitor's state, as a checkpoint keeps it (`()`: nothing).
pub trait MonitorState: Default {
    /// The state as of checkpoint clock `clock` (later evaluations left out).
    fn save(&self, clock: u64) -> Result<Vec<u8>, PsError>;
    /// The state from [`MonitorState::save`]'s bytes (`what` names them in an error).
    fn resume(what: &str, saved: &[u8]) -> Result<Self, PsError>;
}

impl MonitorState for () {
    fn save(&self, _clock: u64) -> Result<Vec<u8>, PsError> {
        Ok(Vec::new())
    }

    fn resume(_what: &str, _saved: &[u8]) -> Result<(), PsError> {
        Ok(())
    }
}

/// A parameter-server app: its tables and rules, the worker's step per clock, the monitor's
/// evaluation and stop rule, and its outputs. One value is built per process
/// ([`PsApp::new`]) and shared by its roles; worker and monitor code runs on the node's
/// thread (the client is not `Send`), hence `async fn`s without `Send` bounds.
#[allow(async_fn_in_trait)] // the futures run on one node thread; no Send bound is wanted
pub trait PsApp: Sized + Send + Sync + 'static {
    /// The settings: `[app.<SECTION>]` in TOML and the flags of `petrel train <NAME>` alike.
    type Config: serde::de::DeserializeOwned + Default + clap::Args + Clone + Send + Sync + 'static;
    /// A worker's state between clocks.
    type Worker;
    /// What a worker sends the monitor (progress and/or the final report).
    type Report: RemoteMessage<Reply = ()> + Clone;
    /// The monitor's state between evaluations (starts as `Default`).
    type Monitor: MonitorState;
    /// What a run produces (in-process callers get it back from [`crate::kit::run_local`]).
    type Output: Send + 'static;

    /// The app's name: the cluster name of local runs and the `petrel train` subcommand.
    const NAME: &'static str;
    /// Its settings section: `[app.<SECTION>]`.
    const SECTION: &'static str;
    /// The roles it registers in `petrel node` ([`crate::kit::register_builtin`]).
    const BUILTIN_ROLES: PsRoles = PsRoles::GENERIC;
    /// The registry name of its monitor's report inbox.
    const MONITOR_ACTOR: &'static str;
    /// Default request timeout (s) of `petrel train` runs; `None`: the cluster default.
    const TRAIN_REQUEST_TIMEOUT_S: Option<u64> = None;
    /// Whether workers and shards may join and leave a running job (standby nodes, a scale
    /// plan): its workers take their data by rank among the current ones
    /// ([`WorkerCtx::current_workers`](crate::kit::WorkerCtx::current_workers)); the kit
    /// moves a joining or leaving shard's rows at a clock boundary.
    const ELASTIC: bool = false;

    /// Checks the settings' values before any node starts (the error names the key).
    fn validate_config(cfg: &Self::Config) -> Result<(), petrel_ml::job::InvalidSetting> {
        let _ = cfg;
        Ok(())
    }

    /// Loads the data and checks the config, once per process.
    fn new(cfg: Self::Config, layout: &PsLayout) -> Result<Self, PsError>;

    /// The tables (identical on every node).
    fn tables(&self) -> Vec<TableSpec>;

    /// Custom update rules the tables name (`UpdateRuleSpec::Custom`).
    fn rules(&self) -> RuleRegistry {
        RuleRegistry::new()
    }

    /// Server push from the shards to the workers ([`crate::core::server_push`]); default none.
    fn server_push(&self) -> Option<ServerPushConfig> {
        None
    }

    /// Adjusts the settings of in-process runs (failure timeouts of busy apps).
    fn tune_local(_settings: &mut Settings) {}

    /// A worker's state before its first clock.
    fn start_worker(&self, ctx: &WorkerCtx<'_, Self::Report>) -> Result<Self::Worker, PsError>;

    /// One clock of a worker: read rows, compute, `inc` the updates; say how the clock ends.
    async fn step(
        &self,
        worker: &mut Self::Worker,
        ctx: &WorkerCtx<'_, Self::Report>,
    ) -> Result<PsStep, PsError>;

    /// Called once when the worker's node was asked to leave and it drained at a clock
    /// boundary, before it leaves the shards: `true` when it sent updates (with
    /// `batch_inc`) that one more clock must flush. By default nothing.
    fn leave_worker(
        &self,
        worker: &mut Self::Worker,
        ctx: &WorkerCtx<'_, Self::Report>,
    ) -> Result<bool, PsError> {
        let _ = (worker, ctx);
        Ok(false)
    }

    /// The worker's final report, after it left the shards.
    fn finish_worker(
        &self,
        worker: Self::Worker,
        ctx: &WorkerCtx<'_, Self::Report>,
    ) -> Result<Self::Report, PsError>;

    /// Whether `report` is a worker's final one (the monitor ends after one per worker).
    fn is_final(_report: &Self::Report) -> bool {
        true
    }

    /// How long the monitor waits for a report before evaluating again.
    fn eval_interval(&self) -> Duration {
        Duration::from_millis(100)
    }

    /// Clocks between two history points, at which every shard keeps its tables for the
    /// monitor ([`MonitorCtx::eval_cuts`]); 0 (the default): none.
    fn eval_every(&self) -> u64 {
        0
    }

    /// The progress points a full run with `cfg` records, when known before the run.
    fn progress_points(cfg: &Self::Config) -> Option<u64> {
        let _ = cfg;
        None
    }

    /// One evaluation with the reports that arrived since the last one (`all_done`: the last
    /// call). `Some(reason)` asks every worker to stop.
    async fn observe(
        &self,
        monitor: &mut Self::Monitor,
        ctx: &MonitorCtx<'_>,
        reports: Vec<Self::Report>,
        all_done: bool,
    ) -> Result<Option<String>, PsError> {
        let _ = (monitor, ctx, reports, all_done);
        Ok(None)
    }

    /// The output, once every worker is done (the tables are final).
    async fn finish(
        &self,
        monitor: Self::Monitor,
        ctx: &MonitorCtx<'_>,
    ) -> Result<Self::Output, PsError>;

    /// Writes the output files (where the config says; nothing when it names no place).
    fn write_outputs(&self, output: &Self::Output) -> Result<(), PsError> {
        let _ = output;
        Ok(())
    }

    /// Where and how often the job checkpoints ([`crate::kit::checkpoints`]); default never.
    fn checkpointing(cfg: &Self::Config) -> Result<Option<PsCheckpointing>, PsError> {
        let _ = cfg;
        Ok(None)
    }

    /// What a worker needs to start clock `c` besides the tables and its clock (a data
    /// cursor, an RNG, timings), for [`PsApp::resume_worker`].
    fn save_worker(
        &self,
        worker: &Self::Worker,
        ctx: &WorkerCtx<'_, Self::Report>,
    ) -> Result<Vec<u8>, PsError> {
        let _ = (worker, ctx);
        Ok(Vec::new())
    }

    /// A worker's state from [`PsApp::save_worker`]'s bytes.
    fn resume_worker(
        &self,
        saved: &[u8],
        ctx: &WorkerCtx<'_, Self::Report>,
    ) -> Result<Self::Worker, PsError> {
        let _ = saved;
        self.start_worker(ctx)
    }

    /// One line for `petrel train` to print.
    fn summary(cfg: &Self::Config, output: &Self::Output) -> String {
        let _ = (cfg, output);
        format!("{} done", Self::NAME)
    }
}
