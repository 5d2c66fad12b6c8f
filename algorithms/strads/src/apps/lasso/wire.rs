//! The Lasso round protocol's wire types: update and evaluation rounds.

use crate::core::StradsModelError;
use crate::core::app::strads_app;
use petrel_messages::tensor::{f32_bytes, f64_bytes};
use serde::{Deserialize, Serialize};

/// Marker type binding the Lasso wire types to the runtime (and the job to the kit).
pub struct LassoApp;

/// What a worker is asked to do in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LassoTask {
    /// Push `z_jp` for these coordinates at these (current) values.
    Update {
        /// Coordinates.
        #[serde(with = "petrel_messages::tensor::u32_bytes")]
        vars: Vec<u32>,
        /// Their current values.
        #[serde(with = "f32_bytes")]
        values: Vec<f32>,
    },
    /// Report `X^T r` and `(y.y, y.r, r.r)` on the worker's rows.
    Evaluate,
    /// Work on the rows `start..end` from now on (`balance = "dynamic"`).
    Deal {
        /// First row.
        start: u64,
        /// One past the last row.
        end: u64,
        /// For a worker that joins with this deal: the model so far.
        #[serde(default)]
        join: Option<LassoJoin>,
    },
}

/// What a worker joining a running job takes with its first deal: the coefficients, summed
/// from the commits' changes as every worker's whole design sums them (so its rows are
/// rebuilt bit for bit as another worker would), and the number of commits they reflect
/// (the others' count, which its answers then carry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LassoJoin {
    /// The coefficients.
    #[serde(with = "f64_bytes")]
    pub coefficients: Vec<f64>,
    /// Commits applied.
    pub applied: u64,
}

/// A worker's answer; `applied` is the number of commits its state reflects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LassoPartial {
    /// Answer to an update.
    Z {
        /// Partial `z_j` per coordinate.
        #[serde(with = "f32_bytes")]
        z: Vec<f32>,
        /// `||r||^2` on the worker's rows.
        sq_residual: f64,
        /// Commits applied.
        applied: u64,
        /// The worker's compute so far (for the round-time breakdown).
        #[serde(default)]
        busy: WorkerBusy,
    },
    /// Answer to an evaluation.
    Eval {
        /// `X^T r` on the worker's rows.
        #[serde(with = "f64_bytes")]
        x_t_residual: Vec<f64>,
        /// `y.y`.
        yy: f64,
        /// `y.r`.
        yr: f64,
        /// `r.r`.
        rr: f64,
        /// Commits applied.
        applied: u64,
    },
    /// Answer to a deal: the worker holds its new rows.
    Dealt {
        /// Commits applied.
        applied: u64,
    },
}

/// Seconds a worker spent computing since it started, by kind of work (cumulative, so a
/// lost or reordered answer loses nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerBusy {
    /// Pushes of update rounds (`z_jp` gathers).
    pub push_s: f64,
    /// Applying commits (residual scatters).
    pub commit_s: f64,
    /// Evaluation rounds (`X^T r`).
    pub eval_s: f64,
    /// The worker process's peak resident memory so far, in MB (0 where unknown).
    #[serde(default)]
    pub peak_rss_mb: f64,
}

impl WorkerBusy {
    /// The larger of each figure of `self` and `other`.
    pub fn slowest(self, other: WorkerBusy) -> WorkerBusy {
        WorkerBusy {
            push_s: self.push_s.max(other.push_s),
            commit_s: self.commit_s.max(other.commit_s),
            eval_s: self.eval_s.max(other.eval_s),
            peak_rss_mb: self.peak_rss_mb.max(other.peak_rss_mb),
        }
    }
}

/// Committed `new - old` per coordinate (empty, the default, after a round that changed
/// no coefficient).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LassoCommit {
    /// Coordinates.
    #[serde(with = "petrel_messages::tensor::u32_bytes")]
    pub vars: Vec<u32>,
    /// Their changes.
    #[serde(with = "f32_bytes")]
    pub deltas: Vec<f32>,
}

strads_app!(
    LassoApp,
    "petrel.strads.lasso",
    LassoTask,
    LassoPartial,
    LassoCommit
);

/// A round's coordinates as indices, refused unless there is one value per coordinate and
/// each is below `n` (the features).
pub(crate) fn check_vars(
    vars: &[u32],
    values: usize,
    n: usize,
) -> Result<Vec<usize>, StradsModelError> {
    if vars.len() != values {
        return Err(StradsModelError::DimensionMismatch(format!(
            "{} vars but {values} values",
            vars.len()
        )));
    }
    vars.iter()
        .map(|&j| {
            (j as usize).lt(&n).then_some(j as usize).ok_or_else(|| {
                StradsModelError::protocol(format!("coordinate {j} out of range ({n} features)"))
            })
        })
        .collect()
}
