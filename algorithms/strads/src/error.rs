//! The crate's error family. Each layer has its own enum and the crate-level
//! [`StradsError`] wraps them all, keeping every `source()` chain:
//!
//! - [`StradsModelError`]: what the cores and the app halves reject (shapes, parameters,
//!   protocol violations, an app's own failure);
//! - [`PipelineError`](crate::core::pipeline::PipelineError) and
//!   [`RingError`](crate::core::ring::RingError): the round protocol's cores;
//! - [`StradsRunError`]: the actor shells (a worker's ask, registering an actor);
//! - [`SerialRunError`]: the serial driver;
//! - [`MultiSchedulerError`]: multi-scheduler Lasso jobs;
//! - [`StradsError`]: what a role, a job or an app's I/O returns.

use crate::apps::lasso::multi::MultiSchedulerError;
use crate::core::StradsModelError;
use crate::kit::serial::SerialRunError;
use crate::shells::StradsRunError;
use petrel_actors::NodeError;
use std::path::PathBuf;

/// Everything a STRADS role, job or app can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StradsError {
    /// A model or an app half rejected its input.
    #[error(transparent)]
    Model(#[from] StradsModelError),
    /// The actor shells failed (a worker, the transport, an actor registration).
    #[error(transparent)]
    Run(#[from] StradsRunError),
    /// The serial driver stopped.
    #[error(transparent)]
    Serial(#[from] SerialRunError),
    /// The node failed (settings, barrier, actor lookup).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// Input data did not load.
    #[error(transparent)]
    Data(#[from] petrel_ml::data::DataError),
    /// A multi-scheduler Lasso job is misconfigured or lost a peer.
    #[error(transparent)]
    MultiScheduler(#[from] MultiSchedulerError),
    /// A figure became NaN or infinite; nothing was written.
    #[error(transparent)]
    Diverged(#[from] petrel_ml::job::Diverged),
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
}

impl StradsError {
    /// Wraps a file-write failure.
    pub fn write(path: PathBuf, source: std::io::Error) -> Self {
        StradsError::Write { path, source }
    }
}
