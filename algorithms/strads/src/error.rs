//! The crate's boundary error, [`StradsError`]: what a role, a job, an app's I/O, the
//! actor shells, round checkpoints, the serial driver and multi-scheduler Lasso jobs
//! fail with. The sans-I/O cores keep their own [`StradsModelError`] (shapes, parameters,
//! protocol violations, the pipeline's and the ring's rules, an app's own failure), which
//! [`StradsError::Model`] wraps; every variant keeps its `source()` chain.

use crate::apps::lasso::multi::MAX_SCHEDULERS;
use crate::core::StradsModelError;
use crate::core::app::BlockId;
use petrel_actors::NodeError;
use petrel_actors::checkpoint::CheckpointError;
use petrel_actors::error::AskError;
use std::path::PathBuf;

/// Everything a STRADS role, job or app can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StradsError {
    /// A model, an app half or a round-protocol core (pipeline, ring worker) rejected
    /// its input.
    #[error(transparent)]
    Model(#[from] StradsModelError),
    /// The node failed (settings, barrier, actor lookup).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// Input data did not load, or a figure became NaN or infinite (nothing was written).
    #[error(transparent)]
    Ml(#[from] petrel_ml::MlError),
    /// A setting's value cannot be right (names the key).
    #[error("invalid setting {0}")]
    InvalidSetting(#[from] petrel_ml::job::InvalidSetting),
    /// An output file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An output could not be encoded.
    #[error("encoding {what}: {source}")]
    Encode {
        /// What was encoded (e.g. `metrics.json`).
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A blocking loader task panicked or was cancelled.
    #[error("loader task: {0}")]
    Loader(#[source] tokio::task::JoinError),
    /// The cluster has no node running the workers' role.
    #[error("no node runs {role}")]
    NoWorkers {
        /// The worker role.
        role: &'static str,
    },
    /// This node runs a worker role but is not in the role's node list.
    #[error("node {node} is not among the nodes running {role}")]
    NotInRole {
        /// This node.
        node: String,
        /// The role.
        role: &'static str,
    },
    /// A worker index outside the job's workers.
    #[error("worker {index} of a job with {workers} workers")]
    NoShare {
        /// The index.
        index: usize,
        /// Workers in the job.
        workers: usize,
    },
    /// A worker's push failed or timed out.
    #[error("round {round}: worker {worker}: {source}")]
    Worker {
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// The ask's error (with the worker's reason).
        #[source]
        source: AskError,
    },
    /// A worker answered for another round.
    #[error("round {round}: worker {worker} answered for round {answered}")]
    WrongRound {
        /// The round asked.
        round: u64,
        /// The worker.
        worker: usize,
        /// The round answered.
        answered: u64,
    },
    /// A per-worker plan does not have one task per worker (actor shells).
    #[error("round {round}: plan has {tasks} tasks for {workers} workers")]
    PlanSize {
        /// The round.
        round: u64,
        /// Tasks in the plan.
        tasks: usize,
        /// Workers.
        workers: usize,
    },
    /// A commit could not be sent.
    #[error("round {round}: commit to worker {worker}: {source}")]
    Commit {
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// The send's error.
        #[source]
        source: AskError,
    },
    /// The scheduler half rejected the partials (actor shells).
    #[error("app: {0}")]
    Pull(#[source] StradsModelError),
    /// An elastic cluster (standby nodes, a scale plan, `on_node_death = "leave"`) runs a
    /// role or settings written for a fixed membership.
    #[error(
        "role {role} keeps a fixed membership: standby nodes, [cluster] scale and on_node_death = \"leave\" are for the scheduled Lasso and logistic regression with balance = \"dynamic\" (strads-mf: standby nodes and the scale plan, with balance = \"dynamic\")"
    )]
    FixedMembership {
        /// The role.
        role: String,
    },
    /// A scheduler was given no worker to dispatch to.
    #[error("no workers")]
    EmptyWorkerSet,
    /// A checkpoint file is missing, short, corrupt, of an older format or of another job,
    /// or none is valid to resume from.
    #[error("invalid checkpoint: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// A checkpoint file could not be encoded.
    #[error("checkpoint encode: {0}")]
    CheckpointEncode(#[from] rmp_serde::encode::Error),
    /// A worker could not save or restore its part of a checkpoint.
    #[error("checkpoint of round {round}: worker {worker} could not {what}: {source}")]
    CheckpointWorker {
        /// `save` or `restore`.
        what: &'static str,
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// The ask's error (with the worker's reason).
        #[source]
        source: AskError,
    },
    /// A worker answered a checkpoint request for another index.
    #[error("checkpoint of round {round}: worker {worker} answered as worker {answered}")]
    CheckpointWrongWorker {
        /// The round.
        round: u64,
        /// The worker asked.
        worker: usize,
        /// The index it answered with.
        answered: u32,
    },
    /// Ring blocks were still travelling after every checkpoint retry.
    #[error(
        "checkpoint of round {round}: blocks still in transit between ring workers after {attempts} attempts"
    )]
    CheckpointUnsettled {
        /// The round.
        round: u64,
        /// Attempts made.
        attempts: u32,
    },
    /// The app half could not snapshot or restore its state.
    #[error("checkpoint of round {round}: {source}")]
    CheckpointApp {
        /// The round.
        round: u64,
        /// The app's error.
        #[source]
        source: StradsModelError,
    },
    /// The `fail_after` fault injection fired (a test hook).
    #[error("fault injection: stopping after checkpoint of round {round} (fail_after = {limit})")]
    FaultInjection {
        /// The last checkpoint's round.
        round: u64,
        /// The limit.
        limit: u64,
    },
    /// The scheduler half rejected a round's partials (serial driver).
    #[error("round {round}: scheduler: {source}")]
    SerialPull {
        /// The round.
        round: u64,
        /// The app's error.
        #[source]
        source: StradsModelError,
    },
    /// A star worker half failed (serial driver).
    #[error("round {round}: worker {worker}: {source}")]
    SerialWorker {
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// The app's error.
        #[source]
        source: StradsModelError,
    },
    /// A per-worker plan does not have one task per worker (serial driver).
    #[error("round {round}: {tasks} tasks for {workers} workers")]
    SerialPlanSize {
        /// The round.
        round: u64,
        /// Tasks in the plan.
        tasks: usize,
        /// Workers.
        workers: usize,
    },
    /// No workers, or not one initial block list per worker (serial driver).
    #[error("{workers} workers with {lists} initial block lists")]
    SerialShape {
        /// Workers.
        workers: usize,
        /// Initial block lists.
        lists: usize,
    },
    /// A ring worker never answered a dispatch (serial driver).
    #[error("round {round}: worker {worker} {what}")]
    Deadlock {
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// What it waits for and where that is.
        what: String,
    },
    /// A block is in two places at once (serial driver, ring routing).
    #[error("block {block} is held twice: by {first} and by {second}")]
    HeldTwice {
        /// The block id.
        block: BlockId,
        /// One place.
        first: String,
        /// The other place.
        second: String,
    },
    /// A multi-scheduler Lasso job asked for `schedulers = 0`.
    #[error("schedulers = 0: need at least one")]
    NoSchedulers,
    /// More Lasso schedulers than columns.
    #[error("schedulers = {schedulers} but the design has only {features} features")]
    TooManySchedulers {
        /// Schedulers asked for.
        schedulers: usize,
        /// Columns of X.
        features: usize,
    },
    /// More Lasso schedulers than roles registered.
    #[error("schedulers = {schedulers}: at most {MAX_SCHEDULERS} are supported")]
    SchedulersAboveMax {
        /// Schedulers asked for.
        schedulers: usize,
    },
    /// A node runs a Lasso scheduler role beyond `schedulers`.
    #[error(
        "node {node} runs role {role}: scheduler index {index} out of range (schedulers = {schedulers})"
    )]
    SchedulerIndexOutOfRange {
        /// The node.
        node: String,
        /// The role.
        role: String,
        /// Its scheduler index.
        index: usize,
        /// Schedulers in the job.
        schedulers: usize,
    },
    /// Two nodes run one Lasso scheduler role.
    #[error("scheduler {index} is claimed by two nodes: {first} and {second}")]
    DuplicateScheduler {
        /// The scheduler index.
        index: usize,
        /// One node.
        first: String,
        /// The other.
        second: String,
    },
    /// No node runs a Lasso scheduler role the job needs.
    #[error("no node runs {role} (schedulers = {schedulers})")]
    MissingScheduler {
        /// The role.
        role: String,
        /// Schedulers in the job.
        schedulers: usize,
    },
    /// Checkpoints were asked for with several Lasso schedulers.
    #[error("checkpoint_dir / resume: checkpoints are implemented for one scheduler only")]
    CheckpointUnsupported,
    /// The Lasso schedulers' synchronisation broke down: a report or decision that does
    /// not fit the epoch, a peer that stopped or did not answer in time.
    #[error("{0}")]
    SchedulerSync(String),
}

impl StradsError {
    /// Wraps a file-write failure.
    pub fn write(path: PathBuf, source: std::io::Error) -> Self {
        StradsError::Write { path, source }
    }
}
