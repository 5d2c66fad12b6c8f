//! The errors of P3's cores, one enum per concern, each naming what was wrong: planning and
//! simulation ([`PlanError`]), the shard and worker engines ([`EngineError`], which wraps a
//! [`PlanError`] as its source) and model profiles ([`ProfileError`]). The crate-level
//! [`crate::P3Error`] wraps all three with the runtime's errors.

use std::path::PathBuf;

use petrel_ml::dnn::DnnError;

use crate::core::cost::CostModel;

/// Slicing, readiness, cost-model and simulator errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A P3 plan needs slices of at least one parameter.
    #[error("slice size must be at least 1 parameter")]
    ZeroSliceSize,
    /// A plan needs somewhere to put its slices.
    #[error("need at least one server shard")]
    ZeroShards,
    /// A slice id the plan does not have (a corrupt or foreign message).
    #[error("unknown slice id {id} (plan has {n_slices} slices)")]
    UnknownSlice {
        /// The id given.
        id: usize,
        /// Slices in the plan.
        n_slices: usize,
    },
    /// A mode name that is not one of the three.
    #[error("unknown mode {value:?}; valid values: sequential, fifo, p3")]
    UnknownMode {
        /// The name given.
        value: String,
    },
    /// A shard index beyond the plan's shards.
    #[error("shard {shard} of a plan with {n_shards} shards")]
    ShardOutOfRange {
        /// The shard asked for.
        shard: usize,
        /// Shards in the plan.
        n_shards: usize,
    },
    /// Rates and sizes must be positive and finite, the per-slice overhead finite and >= 0.
    #[error("invalid cost model (rates and sizes must be positive and finite): {0:?}")]
    InvalidCostModel(CostModel),
    /// A simulation needs at least one measured iteration.
    #[error("iterations must be >= 1")]
    ZeroIterations,
    /// A simulation needs at least one layer.
    #[error("profile has no layers")]
    EmptyProfile,
    /// The simulated iteration never completed (a bug in the simulator's schedule).
    #[error("simulation stalled after {iterations} iterations")]
    Stalled {
        /// Iterations that did start.
        iterations: usize,
    },
    /// The automatic slice size was given nothing to choose from.
    #[error("no slice size candidates")]
    NoSliceCandidates,
}

/// Errors of the shard and worker engines ([`crate::core::SliceShardCore`],
/// [`crate::core::SliceWorkerCore`]): bad input from a peer or a caller, never a panic.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The plan rejected the input.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A gradient or init for a slice another shard owns.
    #[error("shard {shard} does not own slice {slice}")]
    NotOwned {
        /// This shard.
        shard: usize,
        /// The slice named.
        slice: usize,
    },
    /// A slice's values have the wrong length.
    #[error("slice {slice}: expected {expected} values, got {got}")]
    Length {
        /// The slice.
        slice: usize,
        /// Its length in the plan.
        expected: usize,
        /// The length received.
        got: usize,
    },
    /// A layer's tensor has the wrong length.
    #[error("layer {layer}: expected {expected} values, got {got}")]
    LayerLength {
        /// The plan layer.
        layer: usize,
        /// Its length in the plan.
        expected: usize,
        /// The length received.
        got: usize,
    },
    /// A different number of tensors than the plan has layers.
    #[error("{got} tensors for a plan of {expected} layers")]
    TensorCount {
        /// Layers in the plan.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// A checkpoint holds a different number of slices than this shard owns.
    #[error("a checkpoint of {got} slices for a shard of {expected}")]
    SliceCount {
        /// Slices this shard owns.
        expected: usize,
        /// Slices in the checkpoint.
        got: usize,
    },
    /// A gradient or reply for another iteration than the one being collected.
    #[error("slice {slice}: iteration {got}, expected iteration {expected}")]
    WrongIteration {
        /// The slice.
        slice: usize,
        /// The iteration being collected.
        expected: u64,
        /// The iteration received.
        got: u64,
    },
    /// The same worker pushed the same slice twice in one iteration.
    #[error("slice {slice}, iteration {iter}: worker {worker} pushed twice")]
    Duplicate {
        /// The slice.
        slice: usize,
        /// The iteration.
        iter: u64,
        /// The worker.
        worker: usize,
    },
    /// A worker index beyond the job's workers.
    #[error("worker {worker} out of range ({n_workers} workers)")]
    WorkerOutOfRange {
        /// The worker named.
        worker: usize,
        /// Workers in the job.
        n_workers: usize,
    },
    /// A gradient for a slice whose initial values never arrived.
    #[error("slice {slice} received before it was initialised")]
    NotInitialised {
        /// The slice.
        slice: usize,
    },
    /// A shard needs at least one worker to average over.
    #[error("need at least one worker")]
    NoWorkers,
    /// The optimiser rejected the update.
    #[error("optimiser step")]
    Optimizer(#[from] DnnError),
}

/// Errors reading, writing or validating a model profile; each names the file (or origin).
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read or written.
    #[error("{}: cannot read/write profile: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid TOML profile (unknown keys included).
    #[error("{origin}: invalid TOML profile: {source}")]
    Toml {
        /// The file, or `<string>` for text parsed from memory.
        origin: String,
        /// The parser's error.
        #[source]
        source: toml::de::Error,
    },
    /// The text is not a valid JSON profile (unknown keys included).
    #[error("{origin}: invalid JSON profile: {source}")]
    Json {
        /// The file, or `<string>` for text parsed from memory.
        origin: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The profile could not be rendered as TOML.
    #[error("cannot write profile as TOML")]
    TomlWrite(#[source] toml::ser::Error),
    /// The profile could not be rendered as JSON.
    #[error("cannot write profile as JSON")]
    JsonWrite(#[source] serde_json::Error),
    /// A well-formed file with impossible content (no layers, negative FLOPs, ...).
    #[error("{origin}: {detail}")]
    Invalid {
        /// The file, or `<string>` for text parsed from memory.
        origin: String,
        /// What is wrong, naming the layer.
        detail: String,
    },
    /// A file name that is neither `.toml` nor `.json`.
    #[error("{}: unknown profile format (use .toml or .json)", .path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// A built-in profile name that does not exist.
    #[error("unknown built-in profile {0:?}; valid values: vgg19, resnet50, sockeye")]
    UnknownModel(String),
}
