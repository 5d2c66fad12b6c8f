//! Errors of the sans-I/O parameter-server core (shards, clients, rules, checkpoints, LDA).

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
    /// A consistency name that is not one of `bsp`, `ssp`, `essp`, `async`.
    #[error("unknown consistency {0:?} (expected bsp, ssp, essp or async)")]
    UnknownConsistency(String),
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
    /// Reading or writing a checkpoint file failed (the file is named).
    #[error("checkpoint file {path}: {source}")]
    CheckpointIo {
        /// The file or directory.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    // The data-parallel LDA core's (`crate::core::lda`).
    #[error(
        "the corpus has {tokens} tokens; parameter-server LDA keeps counts in f32 rows, exact \
         only up to 2^24 = {max} per entry, so it accepts at most {max} tokens"
    )]
    /// The corpus is too large for exact f32 counts.
    TooManyTokens {
        /// Tokens in the corpus.
        tokens: u64,
        /// The limit.
        max: u64,
    },
    #[error("word id {word} >= vocabulary size {vocab_size}")]
    /// A word id outside the vocabulary.
    WordOutOfRange {
        /// The word id.
        word: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    #[error("row {row}: {reason}")]
    /// A row that is not valid counts.
    BadRow {
        /// The row.
        row: u64,
        /// What is wrong.
        reason: String,
    },
    #[error("{0} rows given for {1} words and the totals row")]
    /// Rows given, and words expected.
    RowCount(usize, usize),
    /// A worker's doc-topic counts disagree with its topic assignments.
    #[error("doc-topic counts: {0}")]
    DocCounts(String),
    /// The word rows of the final table do not sum to the word frequencies.
    #[error("word {word}: counts sum to {sum} but the word has {frequency} tokens")]
    WordSum {
        /// The word.
        word: usize,
        /// What its row sums to.
        sum: u64,
        /// Its frequency in the corpus.
        frequency: usize,
    },
    /// The totals row is not the column sums of the word rows.
    #[error("topic totals row {totals:?} != column sums of the word rows {column_sums:?}")]
    Totals {
        /// The stored totals row.
        totals: Vec<i64>,
        /// The column sums of the word rows.
        column_sums: Vec<i64>,
    },
    /// The table does not sum to the number of tokens.
    #[error("table sums to {sum}, the corpus has {tokens} tokens")]
    TableSum {
        /// The sum of the totals row.
        sum: i64,
        /// Tokens in the corpus.
        tokens: usize,
    },
}
