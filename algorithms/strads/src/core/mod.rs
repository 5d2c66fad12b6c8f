//! STRADS decision logic, sans-I/O: no actor runtime, no async runtime, no transport
//! (`.ci/check-cores` keeps it so); plain data with plain methods, unit-tested without
//! sockets. The contract an app implements ([`app`]), the round protocol ([`pipeline`],
//! [`ring`]), the coordinate scheduler ([`scheduler`]), the linear models' losses, solvers
//! and tuning ([`loss`], [`gauss_seidel`], [`baseline`], [`tuning`]) and the models
//! ([`lasso`], [`logistic`], [`mf`] (CCD++), [`lda`] (SparseLDA); their serial reference
//! runs are in their tests).

pub mod app;
pub mod balance;
pub mod baseline;
pub mod checkpoint;
pub mod gauss_seidel;
pub mod lasso;
pub mod lda;
pub mod logistic;
pub mod loss;
pub mod mf;
pub mod pipeline;
pub mod ring;
pub mod roster;
pub mod scheduler;
pub mod tuning;

use app::BlockId;
use ring::BlockOrigin;
use std::sync::Arc;

/// What a STRADS model, an app half or a round-protocol core rejects: caller mistakes
/// (shapes, parameters), a message that breaks the round protocol, a broken invariant, a
/// pipeline or ring worker that broke its rules, or an app's own failure (e.g. checkpoint
/// I/O) with its cause chain. Cheap to clone: a poisoned worker repeats its first error to
/// every later request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StradsModelError {
    /// Two inputs that must agree in size do not.
    #[error("dimension mismatch: {0}")]
    DimensionMismatch(String),
    /// A parameter is out of its range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A message does not fit the round protocol (wrong round, wrong kind of answer,
    /// coordinates out of range).
    #[error("protocol: {0}")]
    Protocol(String),
    /// A count invariant of the model does not hold.
    #[error("invariant: {0}")]
    Invariant(String),
    /// A checkpoint's saved state cannot be written, or does not read as this version's.
    #[error("checkpoint state: {0}")]
    CheckpointState(String),
    /// An app-specific failure, with its cause chain.
    #[error(transparent)]
    App(Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The app answered `Wait` with nothing in flight: it would wait forever.
    #[error("app waits at round {round} with nothing in flight")]
    WaitWithNothingInFlight {
        /// The round offered.
        round: u64,
    },
    /// A round committed before an older one.
    #[error("commit of round {round} out of order (expected {expected})")]
    CommitOutOfOrder {
        /// The round that committed.
        round: u64,
        /// The oldest round in flight.
        expected: u64,
    },
    /// The scheduler loop awaited a round, but none was in flight.
    #[error("pipeline empty while awaiting a round")]
    PipelineEmpty,
    /// Two initial blocks with one id.
    #[error("worker {worker}: initial block {block} given twice")]
    DuplicateInitialBlock {
        /// The worker.
        worker: u32,
        /// The block id.
        block: BlockId,
    },
    /// The worker index is not a ring position.
    #[error("worker index {worker} outside a ring of {ring}")]
    IndexOutsideRing {
        /// The worker index.
        worker: u32,
        /// The ring's size.
        ring: usize,
    },
    /// A block arrived that the worker already holds.
    #[error(
        "protocol error: worker {worker} already holds block {block} and {source_of} (round {round}): two workers would update one block"
    )]
    AlreadyHeld {
        /// The worker.
        worker: u32,
        /// The block id.
        block: BlockId,
        /// Where the second copy came from.
        source_of: BlockOrigin,
        /// The round that produced the second copy.
        round: u64,
    },
    /// The block version was produced in the dispatch's round or later.
    #[error(
        "protocol error: worker {worker} got block {block} produced in round {produced} for round {round}"
    )]
    StaleBlock {
        /// The worker.
        worker: u32,
        /// The block id.
        block: BlockId,
        /// Round that produced the held version.
        produced: u64,
        /// Round of the dispatch.
        round: u64,
    },
    /// A push returned a block although its task needed none.
    #[error(
        "worker {worker}: the push of round {round} returned a block for a task that needs none"
    )]
    BlockForNoTask {
        /// The worker.
        worker: u32,
        /// The round.
        round: u64,
    },
    /// A push passed its block to a worker outside the ring.
    #[error(
        "worker {worker}: round {round} passes block {block} to worker {to}, but the ring has {ring} workers"
    )]
    PassOutsideRing {
        /// The worker.
        worker: u32,
        /// The round.
        round: u64,
        /// The block id.
        block: BlockId,
        /// The receiving index.
        to: u32,
        /// The ring's size.
        ring: usize,
    },
    /// A ring worker's push failed (the block it held is gone).
    #[error("worker {worker} push of round {round}: {source}")]
    RingPush {
        /// The worker.
        worker: u32,
        /// The round.
        round: u64,
        /// The app's error.
        #[source]
        source: Box<StradsModelError>,
    },
    /// A ring worker's commit failed (its state is inconsistent).
    #[error("worker {worker} commit of round {round}: {source}")]
    RingCommit {
        /// The worker.
        worker: u32,
        /// The round.
        round: u64,
        /// The app's error.
        #[source]
        source: Box<StradsModelError>,
    },
    /// The shell could not hand a block to the next worker.
    #[error("worker {worker} handoff of block {block} to worker {to}: {reason}")]
    HandoffFailed {
        /// The worker.
        worker: u32,
        /// The block id.
        block: BlockId,
        /// The receiving index.
        to: u32,
        /// The transport's reason.
        reason: String,
    },
    /// The ring worker failed before this request.
    #[error("worker {worker} failed earlier: {first}")]
    FailedEarlier {
        /// The worker.
        worker: u32,
        /// Its first error.
        first: Box<StradsModelError>,
    },
}

impl PartialEq for StradsModelError {
    /// Equal variants with equal text (an app error compares by its message).
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

impl StradsModelError {
    /// Wraps an app's own error (keeping its `source()` chain).
    pub fn app(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        StradsModelError::App(Arc::new(error))
    }

    /// A protocol violation described by `what`.
    pub fn protocol(what: impl Into<String>) -> Self {
        StradsModelError::Protocol(what.into())
    }
}

/// Takes the oldest round a scheduler has in flight, which must be `round`: commits are
/// pulled strictly in round order, so anything else is a protocol violation.
pub fn pop_in_flight<T>(
    in_flight: &mut std::collections::VecDeque<(u64, T)>,
    round: u64,
) -> Result<T, StradsModelError> {
    match in_flight.pop_front() {
        None => Err(StradsModelError::protocol(format!(
            "pull of round {round} with nothing in flight"
        ))),
        Some((expected, _)) if expected != round => Err(StradsModelError::protocol(format!(
            "pull of round {round}, expected {expected}"
        ))),
        Some((_, item)) => Ok(item),
    }
}

/// The rounds given up after a worker died ([`crate::core::app::Schedule::lost`]): all
/// of `in_flight`, which must be `rounds`, taken out.
pub fn take_lost<T>(
    in_flight: &mut std::collections::VecDeque<(u64, T)>,
    rounds: &[u64],
) -> Result<Vec<T>, StradsModelError> {
    let ours: Vec<u64> = in_flight.iter().map(|(r, _)| *r).collect();
    if ours != rounds {
        return Err(StradsModelError::protocol(format!(
            "rounds {rounds:?} given up, {ours:?} in flight"
        )));
    }
    Ok(in_flight.drain(..).map(|(_, item)| item).collect())
}

/// A scheduler or worker half checkpoints only between rounds: refuses while `busy` (a
/// round in flight).
pub fn check_drained(busy: bool) -> Result<(), StradsModelError> {
    let what = "checkpoint with a round in flight";
    if busy {
        Err(StradsModelError::protocol(what))
    } else {
        Ok(())
    }
}

/// Refuses inputs (data, a commit, a checkpoint's state) whose sizes are not the ones this
/// half expects: `sizes` are `(what, given, expected)`; the error names the first that
/// differs.
pub fn check_sizes(sizes: &[(&str, usize, usize)]) -> Result<(), StradsModelError> {
    match sizes.iter().find(|(_, given, expected)| given != expected) {
        None => Ok(()),
        Some((what, given, expected)) => Err(StradsModelError::DimensionMismatch(format!(
            "{given} {what} where {expected} belong"
        ))),
    }
}

/// Splits `0..n` into `parts` contiguous ranges whose lengths differ by at most one.
pub fn split_evenly(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.max(1);
    (0..parts)
        .map(|p| (p * n / parts)..((p + 1) * n / parts))
        .collect()
}

#[cfg(test)]
mod pop_in_flight_tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn rounds_are_pulled_in_order_and_anything_else_is_a_protocol_error() {
        let mut q: VecDeque<(u64, &str)> = [(3, "a"), (4, "b")].into();
        assert!(matches!(
            pop_in_flight(&mut q, 4),
            Err(StradsModelError::Protocol(m)) if m.contains("expected 3")
        ));
        assert_eq!(pop_in_flight(&mut q, 4).ok(), Some("b"));
        assert!(matches!(
            pop_in_flight(&mut q, 5),
            Err(StradsModelError::Protocol(m)) if m.contains("nothing in flight")
        ));
    }
}
