//! The crate-level error: what roles, jobs and in-process runs of the parameter server
//! return, the workers' clients ([`crate::PsClient`]) included. Core errors ([`PsCoreError`])
//! are wrapped with their source chain, so the launcher prints the root cause once
//! (`petrel_actors::error_chain`).

use std::path::PathBuf;
use std::time::Duration;

use petrel_actors::{AskError, NodeError};

use crate::core::error::PsCoreError;

/// Every fallible operation of the shells, the kit and the apps returns this error.
#[derive(Debug, thiserror::Error)]
pub enum PsError {
    /// A protocol or configuration error of the sans-I/O core.
    #[error(transparent)]
    Core(#[from] PsCoreError),
    /// A worker's client got a reply its core refused, or a send failed.
    #[error("worker {worker}: {what}")]
    ClientFailed {
        /// The worker.
        worker: u32,
        /// What failed.
        what: String,
    },
    /// A worker's read or barrier got no answer in time.
    #[error("worker {worker}: no answer from ps shard {shard} (node {node}) within {timeout:?}")]
    ClientTimeout {
        /// The waiting worker.
        worker: u32,
        /// The shard it waits for.
        shard: u32,
        /// That shard's node.
        node: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The actor runtime refused (registration, an unknown node, a failed cluster run), or
    /// a built-in role's job could not be built from its `[app.*]` section.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// Loading a data file or generating synthetic data failed, or a figure became NaN or
    /// infinite (nothing was written).
    #[error(transparent)]
    Ml(#[from] petrel_ml::MlError),
    /// A shard hit a fatal error (a protocol violation or a worker it cannot reach).
    #[error("ps shard {shard} on node {node} failed")]
    ShardFailed {
        /// The shard.
        shard: u32,
        /// Its node.
        node: String,
        /// Why.
        #[source]
        source: Box<PsError>,
    },
    /// A shard actor stopped before every worker left.
    #[error("ps shard {shard} stopped before every worker left")]
    ShardStopped {
        /// The shard.
        shard: u32,
    },
    /// A question to a shard (snapshot, ping, checkpoint) got no answer.
    #[error("ps shard {shard} on node {node}")]
    ShardQuery {
        /// The shard.
        shard: u32,
        /// Its node.
        node: String,
        /// The failed ask.
        #[source]
        source: AskError,
    },
    /// The shards did not all answer within the start-up timeout.
    #[error("ps shards not ready after {timeout:?}")]
    ShardsNotReady {
        /// How long we waited.
        timeout: Duration,
        /// The last failure.
        #[source]
        source: Box<PsError>,
    },
    /// The shards' min clock did not reach `clock` in time.
    #[error("ps shards did not reach clock {clock} within {timeout:?}")]
    ClockTimeout {
        /// The awaited clock.
        clock: u64,
        /// How long we waited.
        timeout: Duration,
    },
    /// Not every worker's `Leave` reached every shard in time.
    #[error("not every worker left every ps shard within {timeout:?}")]
    WorkersNotLeft {
        /// How long we waited.
        timeout: Duration,
    },
    /// A worker could not deliver a report to its monitor.
    #[error("worker {worker}: report to the monitor")]
    Report {
        /// The worker.
        worker: u32,
        /// The failed send.
        #[source]
        source: AskError,
    },
    /// A shard could not tell the coordinator of shard changes that it joins or leaves.
    #[error("shard {shard}: tell the coordinator of shard changes")]
    Placement {
        /// The shard.
        shard: u32,
        /// The failed send.
        #[source]
        source: AskError,
    },
    /// A checkpoint's piece could not be reported to the monitor.
    #[error("{what}: report to the monitor")]
    Checkpoint {
        /// Which piece.
        what: String,
        /// The failed send.
        #[source]
        source: AskError,
    },
    /// The job's nodes do not carry the roles it needs.
    #[error("a {app} job needs nodes with roles {shard} and {worker}")]
    MissingRoles {
        /// The app.
        app: &'static str,
        /// The shard role name.
        shard: &'static str,
        /// The worker role name.
        worker: &'static str,
    },
    /// Not exactly one node carries the monitor role.
    #[error("a {app} job needs exactly one {role} node, found {found}")]
    MonitorCount {
        /// The app.
        app: &'static str,
        /// The monitor role name.
        role: &'static str,
        /// How many nodes carry it.
        found: usize,
    },
    /// App settings that cannot work (a zero rank, no samples, ...).
    #[error("invalid {app} settings: {reason}")]
    InvalidConfig {
        /// The app.
        app: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A setting's value cannot be right (names the key).
    #[error("invalid {app} setting {source}")]
    InvalidSetting {
        /// The app.
        app: &'static str,
        /// The key, its value and what is allowed.
        #[source]
        source: petrel_ml::job::InvalidSetting,
    },
    /// A test hook made a worker fail on purpose.
    #[error("worker {worker}: injected failure at clock {clock}")]
    InjectedFailure {
        /// The worker.
        worker: u32,
        /// The clock it failed at.
        clock: u64,
    },
    /// Writing an output file failed.
    #[error("write {}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Encoding an output as JSON failed.
    #[error("encode {what} as JSON")]
    Json {
        /// What was encoded.
        what: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The monitor of an in-process run ended without a result.
    #[error("the {app} monitor produced no result")]
    NoResult {
        /// The app.
        app: &'static str,
    },
}
