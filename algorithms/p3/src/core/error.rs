//! [`P3CoreError`]: every error of P3's cores, each variant naming what was wrong: planning
//! and simulation, the shard and worker engines, and model profiles. The crate-level
//! [`crate::P3Error`] wraps it with the runtime's errors.

use std::path::PathBuf;

use petrel_ml::MlError;

use crate::core::cost::CostModel;

/// Errors of P3's cores: slicing, readiness, the cost model and the simulator; the shard
/// and worker engines ([`crate::core::SliceShardCore`], [`crate::core::SliceWorkerCore`]),
/// which refuse bad input from a peer or a caller, never panic; and reading, writing or
/// validating a model profile (each profile error names the file, or `<string>` for text
/// parsed from memory).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // fields: named in the variant's doc and message
pub enum P3CoreError {
    /// A P3 plan needs slices of at least one parameter.
    #[error("slice size must be at least 1 parameter")]
    ZeroSliceSize,
    /// A plan needs somewhere to put its slices.
    #[error("need at least one server shard")]
    ZeroShards,
    /// A slice id the plan does not have (a corrupt or foreign message).
    #[error("unknown slice id {id} (plan has {n_slices} slices)")]
    UnknownSlice { id: usize, n_slices: usize },
    /// A mode name that is not one of the three.
    #[error("unknown mode {value:?}; valid values: sequential, fifo, p3")]
    UnknownMode { value: String },
    /// A shard index beyond the plan's shards.
    #[error("shard {shard} of a plan with {n_shards} shards")]
    ShardOutOfRange { shard: usize, n_shards: usize },
    /// Rates and sizes must be positive and finite, the per-slice overhead finite and >= 0.
    #[error("invalid cost model (rates and sizes must be positive and finite): {0:?}")]
    InvalidCostModel(Box<CostModel>),
    /// A simulation needs at least one measured iteration.
    #[error("iterations must be >= 1")]
    ZeroIterations,
    /// A simulation needs at least one layer.
    #[error("profile has no layers")]
    EmptyProfile,
    /// The simulated iteration never completed (a bug in the simulator's schedule).
    #[error("simulation stalled after {iterations} iterations")]
    Stalled { iterations: usize },
    /// The automatic slice size was given nothing to choose from.
    #[error("no slice size candidates")]
    NoSliceCandidates,
    /// A gradient or init for a slice another shard owns.
    #[error("shard {shard} does not own slice {slice}")]
    NotOwned { shard: usize, slice: usize },
    /// A slice's values have the wrong length.
    #[error("slice {slice}: expected {expected} values, got {got}")]
    Length {
        slice: usize,
        expected: usize,
        got: usize,
    },
    /// A layer's tensor has the wrong length.
    #[error("layer {layer}: expected {expected} values, got {got}")]
    LayerLength {
        layer: usize,
        expected: usize,
        got: usize,
    },
    /// A different number of tensors than the plan has layers.
    #[error("{got} tensors for a plan of {expected} layers")]
    TensorCount { expected: usize, got: usize },
    /// A checkpoint holds a different number of slices than this shard owns.
    #[error("a checkpoint of {got} slices for a shard of {expected}")]
    SliceCount { expected: usize, got: usize },
    /// A gradient or reply for another iteration than the one being collected.
    #[error("slice {slice}: iteration {got}, expected iteration {expected}")]
    WrongIteration {
        slice: usize,
        expected: u64,
        got: u64,
    },
    /// The same worker pushed the same slice twice in one iteration.
    #[error("slice {slice}, iteration {iter}: worker {worker} pushed twice")]
    Duplicate {
        slice: usize,
        iter: u64,
        worker: usize,
    },
    /// A push from a worker that is not a member of the slice's iteration (it joins
    /// later, or it left), or a pull from one that left.
    #[error(
        "slice {slice}, iteration {iter}: worker {worker} is not one of the iteration's workers"
    )]
    NotAMember {
        slice: usize,
        iter: u64,
        worker: usize,
    },
    /// A worker index beyond the job's workers.
    #[error("worker {worker} out of range ({n_workers} workers)")]
    WorkerOutOfRange { worker: usize, n_workers: usize },
    /// A gradient for a slice whose initial values never arrived.
    #[error("slice {slice} received before it was initialised")]
    NotInitialised { slice: usize },
    /// A shard needs at least one worker to average over.
    #[error("need at least one worker")]
    NoWorkers,
    /// The optimiser rejected the update.
    #[error("optimiser step")]
    Optimizer(#[source] MlError),
    /// The file could not be read or written.
    #[error("{}: cannot read/write profile: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid TOML profile (unknown keys included).
    #[error("{origin}: invalid TOML profile: {source}")]
    Toml {
        origin: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The text is not a valid JSON profile (unknown keys included).
    #[error("{origin}: invalid JSON profile: {source}")]
    Json {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    /// A well-formed file with impossible content (no layers, negative FLOPs, ...).
    #[error("{origin}: {detail}")]
    Invalid { origin: String, detail: String },
    /// A file name that is neither `.toml` nor `.json`.
    #[error("{}: unknown profile format (use .toml or .json)", .path.display())]
    UnknownFormat { path: PathBuf },
    /// A built-in profile name that does not exist.
    #[error("unknown built-in profile {0:?}; valid values: vgg19, resnet50, sockeye")]
    UnknownModel(String),
}
