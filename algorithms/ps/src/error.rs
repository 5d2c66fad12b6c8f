//! Error type of the parameter-server logic.

use crate::core::types::{Clock, RowId, TableId, WorkerId};

/// Every fallible operation of `crate` returns this error.
#[derive(Debug, thiserror::Error)]
pub enum PsError {
    #[error("unknown table {0:?}")]
    UnknownTable(TableId),
    #[error("unknown worker {0:?}")]
    UnknownWorker(WorkerId),
    #[error("worker {0:?} was removed (declared dead)")]
    DeadWorker(WorkerId),
    #[error("clock mismatch for worker {worker:?}: shard expects {expected}, got {got}")]
    ClockMismatch {
        worker: WorkerId,
        expected: Clock,
        got: Clock,
    },
    #[error("delta for table {table:?} row {row:?} does not fit the table: {reason}")]
    RowMismatch {
        table: TableId,
        row: RowId,
        reason: String,
    },
    #[error("duplicate table id {0:?}")]
    DuplicateTable(TableId),
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    #[error("unknown update rule {0:?}")]
    UnknownRule(String),
    #[error("malformed row encoding: {0}")]
    MalformedRow(String),
    #[error("encode error: {0}")]
    Encode(String),
    #[error("decode error: {0}")]
    Decode(String),
    #[error("invalid checkpoint in {path}: {reason}")]
    Checkpoint { path: String, reason: String },
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, PsError>;
