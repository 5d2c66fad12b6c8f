//! Errors of the sans-I/O parameter-server core (shards, clients, rules, checkpoints).

use crate::core::types::{Clock, RowId, TableId, WorkerId};

/// Every fallible operation of [`crate::core`] (and of [`crate::checkpoint`]) returns this
/// error; the crate-level [`crate::PsError`] wraps it.
#[derive(Debug, thiserror::Error)]
pub enum PsCoreError {
    /// A message names a table the job does not have.
    #[error("unknown table {0:?}")]
    UnknownTable(TableId),
    /// A message names a worker outside `0..n_workers`.
    #[error("unknown worker {0:?}")]
    UnknownWorker(WorkerId),
    /// A message from a worker that already left or was declared dead.
    #[error("worker {0:?} was removed (declared dead)")]
    DeadWorker(WorkerId),
    /// An update batch whose clock is not the one the shard expects (a protocol violation).
    #[error("clock mismatch for worker {worker:?}: shard expects {expected}, got {got}")]
    ClockMismatch {
        /// The sender.
        worker: WorkerId,
        /// The clock the shard expected.
        expected: Clock,
        /// The clock the batch carried.
        got: Clock,
    },
    /// A delta whose shape does not fit its table.
    #[error("delta for table {table:?} row {row:?} does not fit the table: {reason}")]
    RowMismatch {
        /// The table.
        table: TableId,
        /// The row.
        row: RowId,
        /// What does not fit.
        reason: String,
    },
    /// Two tables with the same id.
    #[error("duplicate table id {0:?}")]
    DuplicateTable(TableId),
    /// Settings that cannot work (no tables, a shard id out of range, ...).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A table names a custom update rule that is not registered.
    #[error("unknown update rule {0:?}")]
    UnknownRule(String),
    /// A row whose wire encoding is malformed.
    #[error("malformed row encoding: {0}")]
    MalformedRow(String),
    /// Serializing a checkpoint failed.
    #[error("encode error: {0}")]
    Encode(String),
    /// Deserializing a checkpoint failed.
    #[error("decode error: {0}")]
    Decode(String),
    /// A checkpoint file that is missing, torn or inconsistent.
    #[error("invalid checkpoint in {path}: {reason}")]
    Checkpoint {
        /// The file or directory.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading or writing a checkpoint failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// Reading or writing a checkpoint file failed (the file is named).
    #[error("checkpoint file {path}: {source}")]
    CheckpointIo {
        /// The file or directory.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand for results of the core.
pub type Result<T> = std::result::Result<T, PsCoreError>;
