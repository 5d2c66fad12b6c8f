//! [`P3Error`]: every failure of a P3 job, from the cores' errors to the runtime's, each with its
//! cause as `source()` so the launcher prints the chain once (`petrel_actors::error_chain`). Roles
//! return it; `Cluster::role` turns it into the runtime's `RoleError`.

use std::path::PathBuf;

use petrel_actors::checkpoint::CheckpointError;
use petrel_actors::{AskError, NodeError};

use crate::core::P3CoreError;

/// Any error of a P3 job.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // fields: named in the variant's doc and message
pub enum P3Error {
    /// A checkpoint file could not be read or written, does not match its manifest or this
    /// job, or is of an older format.
    #[error(transparent)]
    Checkpoint(petrel_actors::checkpoint::CheckpointError),
    /// A checkpoint file could not be encoded.
    #[error("{}: cannot encode: {source}", path.display())]
    CheckpointEncode {
        path: PathBuf,
        #[source]
        source: rmp_serde::encode::Error,
    },
    /// Resuming was asked for and no checkpoint in the directory is valid.
    #[error("no valid P3 checkpoint to resume from in {}{}", dir.display(), reasons_list(reasons))]
    NoCheckpoint { dir: PathBuf, reasons: Vec<String> },
    /// A checkpoint round did not complete (a shard or worker did not save).
    #[error("checkpoint of round {round}: {detail}")]
    CheckpointRound { round: u64, detail: String },
    /// Planning or simulation failed, a shard or worker engine rejected a slice, or a model
    /// profile could not be read.
    #[error(transparent)]
    Core(#[from] P3CoreError),
    /// The node runtime (barriers, registration, addresses, the cluster).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A worker's model failed (the source is the model's own error).
    #[error("worker {worker}: model")]
    Model {
        worker: usize,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A gradient push (and its reply with the new values) failed.
    #[error("push of slice {slice} (iteration {iter})")]
    Push {
        slice: usize,
        iter: u64,
        #[source]
        source: AskError,
    },
    /// Telling a shard that serves no more that its last replies arrived failed.
    #[error("telling shard {shard} its replies of iteration {iter} arrived")]
    RepliesIn {
        shard: usize,
        iter: u64,
        #[source]
        source: AskError,
    },
    /// Sending a slice's initial values to its shard failed.
    #[error("initialising slice {slice}")]
    InitSlice {
        slice: usize,
        #[source]
        source: AskError,
    },
    /// A shard answered with another slice than the one pushed.
    #[error("asked for slice {asked}, got slice {got}")]
    WrongSlice { asked: usize, got: usize },
    /// The worker's reply channel closed while it waited for parameters.
    #[error("reply channel closed while waiting for parameters")]
    RepliesClosed,
    /// A plan slice names a shard the cluster does not run.
    #[error("slice {slice} on unknown shard {shard}")]
    UnknownShard { slice: usize, shard: usize },
    /// This node does not run the role it was started for.
    #[error("node {node} is not in role {role}")]
    NotInRole { node: String, role: &'static str },
    /// The job and the cluster disagree on the number of shards.
    #[error("job has {job} shards, cluster runs {cluster} p3-shard nodes")]
    ShardCount { job: usize, cluster: usize },
    /// The model's parameter counts per tensor differ from the job's.
    #[error("the model's parameter tensors {model:?} differ from the job's {job:?}")]
    Layout { job: Vec<u64>, model: Vec<u64> },
    /// `what` (the training loss or a parameter) became NaN or infinite (the learning rate
    /// is too large for the model): the job stops and no model is saved.
    #[error(
        "worker {worker}: training diverged at iteration {iter}: {what} became {value}; lower the learning rate (lr)"
    )]
    Diverged {
        worker: usize,
        iter: u64,
        what: &'static str,
        value: f32,
    },
    /// A value of the job or of `[app.p3]` (`field`, e.g. `[app.p3] scale`) out of its range.
    #[error("{field}: {detail}")]
    Config { field: &'static str, detail: String },
    /// Not every worker reported.
    #[error("{got} of {expected} workers reported")]
    MissingReports { got: usize, expected: usize },
    /// A file of the job (`what`: a worker report, a model file) could not be read or written.
    #[error("{}: {what}", .path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A file of the job (`what`: a worker report, a model file) is not valid JSON.
    #[error("{}: {what} JSON", .path.display())]
    Json {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A data set of a real model could not be read or made, a saved model file cannot be
    /// used (wrong format, version or app, or bad JSON), or the optimiser rejected a built-in
    /// model's tensor (lengths differ).
    #[error(transparent)]
    Ml(#[from] petrel_ml::MlError),
    /// A P3 model file (safetensors) cannot be written or read (the source says why).
    #[error("model file {}", .path.display())]
    ModelFormat {
        path: PathBuf,
        #[source]
        source: Box<P3Error>,
    },
    /// The safetensors layer refused a model file (bad header, offsets, sizes).
    #[error("safetensors")]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// A model file's header could not be re-encoded with sorted keys.
    #[error("header JSON")]
    ModelHeader(#[source] serde_json::Error),
    /// A model file's metadata entry is missing or has a bad value.
    #[error("metadata `{key}`: {detail}")]
    ModelMetadata { key: &'static str, detail: String },
    /// A tensor of a model file's network is missing or has another dtype or shape.
    #[error("tensor `{name}`: {detail}")]
    ModelTensor { name: String, detail: String },
    /// The tensors to write do not match their names.
    #[error("{names} tensor names for {tensors} tensors")]
    TensorNames { names: usize, tensors: usize },
    /// A real model's network or parameters were rejected (the source says why).
    #[error("model {name}")]
    RealModel {
        name: String,
        #[source]
        source: Box<P3Error>,
    },
    /// candle rejected a shape, a tensor or an operation.
    #[cfg(feature = "candle")]
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// A real network was asked of a build without the `candle` feature.
    #[error("real networks need the `candle` feature, which this build of petrel left out")]
    NoCandle,
    /// A saved network's declared architecture does not fit its tensors or its bounds:
    /// `field` of the network parameters (`width`, `input`, `classes`, `net`, `tensors`)
    /// and why.
    #[error("field `{field}`: {detail}")]
    Architecture { field: &'static str, detail: String },
    /// A model name [`crate::models::nets::by_name`] does not know.
    #[error("unknown model {0:?} (known: mlp, lenet, resnet18, vgg11)")]
    UnknownNet(String),
    /// A stage index the model does not have.
    #[error("no stage {0}")]
    NoStage(usize),
    /// A parameter tensor index the model does not have.
    #[error("no parameter tensor {0}")]
    NoTensor(usize),
    /// A tensor of the wrong length.
    #[error("tensor {tensor}: {got} values for {expected} parameters")]
    TensorLength {
        tensor: usize,
        expected: usize,
        got: usize,
    },
    /// A stage was run out of order (forward without input, backward without gradient).
    #[error("stage {stage}: {what}")]
    OutOfOrder { stage: usize, what: &'static str },
    /// A model that cannot train: no data, batch 0 or no workers.
    #[error("a stage model needs data, batch > 0 and workers > 0")]
    NothingToTrain,
}

impl From<CheckpointError> for P3Error {
    fn from(e: CheckpointError) -> Self {
        match e {
            CheckpointError::NoValid { dir, reasons } => P3Error::NoCheckpoint { dir, reasons },
            other => P3Error::Checkpoint(other),
        }
    }
}

fn reasons_list(reasons: &[String]) -> String {
    if reasons.is_empty() {
        " (there is none)".into()
    } else {
        format!(": {}", reasons.join("; "))
    }
}

impl P3Error {
    /// The real model `name` failed or cannot be built (`e`: the model's error).
    pub fn real_model(name: &str, e: P3Error) -> Self {
        P3Error::RealModel {
            name: name.to_string(),
            source: Box::new(e),
        }
    }

    /// A model error of worker `worker`.
    pub fn model(worker: usize, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        P3Error::Model {
            worker,
            source: Box::new(e),
        }
    }
}
