//! STRADS model-parallel cores (sans-I/O): schedulers, worker states and aggregation for
//! Lasso, sparse logistic regression, CCD++ matrix factorisation and LDA. Every type that
//! crosses the network derives serde; the serial drivers here simulate the rounds
//! in-process for tests and benchmarks.

pub mod lasso;
pub mod lda;
pub mod logistic;
pub mod mf;
pub mod scheduler;

/// Errors of the STRADS cores: all of them are caller mistakes (shapes, parameters).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StradsError {
    #[error("dimension mismatch: {0}")]
    DimensionMismatch(String),
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
}

/// Splits `0..n` into `parts` contiguous ranges whose lengths differ by at most one.
pub fn split_evenly(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.max(1);
    (0..parts)
        .map(|p| (p * n / parts)..((p + 1) * n / parts))
        .collect()
}
