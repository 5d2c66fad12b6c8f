//! What ps-lda's workers report and what a run measures.

use super::*;

/// A worker finished pass `iteration` (0 = the initial assignments) at clock `clock`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsLdaIteration {
    /// The worker.
    pub worker: u32,
    /// The pass it finished.
    pub iteration: usize,
    /// Its clock after the pass.
    pub clock: u64,
    /// The document half of the log-likelihood for its documents.
    pub doc_loglik: f64,
    /// Tokens sampled so far.
    pub tokens: u64,
    /// Seconds since its sampling started (after the initial barrier).
    pub sampling_s: f64,
}

/// A worker's final report: the usual one (`compute_s`: sampling) and the sampler's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsLdaDone {
    /// Clocks, staleness of its reads, timings, bytes.
    pub base: WorkerDone,
    /// Tokens it sampled.
    pub tokens: u64,
    /// The document half of the log-likelihood for its documents.
    pub doc_loglik: f64,
    /// View entries it clamped.
    pub clamped: u64,
    /// Rows it fetched from the shards.
    pub rows_fetched: u64,
    /// Rows it sent before a clock boundary (managed communication).
    pub managed_rows: u64,
}

/// Worker -> monitor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PsLdaReport {
    /// A pass is done.
    Iteration(PsLdaIteration),
    /// The worker is done.
    Done(PsLdaDone),
}
remote_message!(PsLdaReport => (), "petrel.ps.lda.report");

/// `metrics.json`: the STRADS app's fields plus the parameter-server ones.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PsLdaMetrics {
    /// The fields shared with the STRADS app.
    #[serde(flatten)]
    pub lda: LdaMetrics,
    /// The table's consistency model.
    pub consistency: ConsistencyModel,
    /// SSP/ESSP bound (0 for BSP, none for async).
    pub staleness: Option<u32>,
    /// Shards.
    pub shards: u32,
    /// Clocks per pass.
    pub clocks_per_iteration: u32,
    /// Clocks each worker completed.
    pub worker_clocks: Vec<u64>,
    /// Seconds each worker spent waiting for rows (`get_many`).
    pub per_worker_wait_s: Vec<f64>,
    /// Seconds each worker spent sampling (the sweeps alone).
    pub per_worker_sweep_s: Vec<f64>,
    /// Observed staleness of the row reads (clocks).
    pub read_staleness: StalenessReport,
    /// Row fetches sent to the shards (cache misses).
    pub rows_fetched: u64,
    /// View entries clamped (negative or non-integer counts in a read row).
    pub clamped_entries: u64,
    /// The managed-communication order (`None`: updates only at clock boundaries).
    #[serde(default)]
    pub managed: Option<SendPolicy>,
    /// Rows the workers sent before a clock boundary (managed communication).
    #[serde(default)]
    pub managed_rows_sent: u64,
    /// Bytes each worker's node sent.
    #[serde(default)]
    pub per_worker_sent_bytes: Vec<u64>,
    /// Bytes each worker's node received.
    #[serde(default)]
    pub per_worker_received_bytes: Vec<u64>,
    /// Workers that joined or left the running job, by clock (none with a fixed membership).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<WorkerChange>,
}

/// What an in-process run returns: the metrics and the checked final table.
#[derive(Debug, Clone)]
pub struct PsLdaOutcome {
    /// `metrics.json`.
    pub metrics: PsLdaMetrics,
    /// The final word-topic table.
    pub table: FinalTable,
}
