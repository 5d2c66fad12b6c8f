//! The stop rule of the cyclic coordinate-descent yardstick, and its margin-loss kernel
//! ([`CyclicMargin`], in `baseline/logistic.rs`, for the logistic and the squared-hinge
//! loss), whose full sweep and active phase the Gauss-Seidel classifier workers run on their
//! blocks. The yardstick of either model is the
//! Gauss-Seidel solver with one worker (`apps::lasso::baseline`,
//! `apps::logistic::run_baseline`).
//!
//! What makes the coordinate descent tight (the glmnet recipe):
//! - **Maintained residual** (`r = y - X b`, Lasso) or margins (`m = X b`, logistic) in
//!   f64, so one coordinate update costs `O(nnz(x_j))` ([`crate::core::loss::cd_step`]).
//! - **Precomputed column norms** (`||x_j||^2`), computed once.
//! - **Covariance-free updates**: no Gram matrix, nothing quadratic in the features.
//! - **Active set** (exact): after every full sweep, sweep only the non-zero coordinates
//!   until they settle, then go back to a full sweep. The run only stops after a full sweep
//!   whose duality gap (Lasso) or objective decrease (logistic) meets the tolerance, so the
//!   shortcut never changes the answer, only how fast it is reached.
//!
//! Plain data, no clock: callers time the solve themselves.

use super::StradsModelError;
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// When a baseline run stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CdStop {
    /// Lasso: stop once `duality gap <= gap_tolerance * |objective|` after a full sweep.
    /// Logistic: stop once a full sweep lowers the objective by at most this fraction.
    pub tolerance: f64,
    /// At most this many full sweeps (active-set sweeps are not counted).
    pub max_sweeps: usize,
    /// Stop as soon as the objective is at or below this (checked after every update).
    pub target_objective: Option<f64>,
    /// Use the active-set strategy (exact either way; off for ablations and tests).
    pub active_set: bool,
}

impl Default for CdStop {
    fn default() -> Self {
        CdStop {
            tolerance: 1e-7,
            max_sweeps: 10_000,
            target_objective: None,
            active_set: true,
        }
    }
}

/// Why a baseline run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CdOutcome {
    /// The tolerance was met after a full sweep.
    Converged,
    /// The objective reached `target_objective`.
    ReachedTarget,
    /// `max_sweeps` full sweeps ran out.
    SweepLimit,
}

/// Refuses a design whose rows are not `n` (the length of `what`) or whose column
/// storage is inconsistent.
pub(crate) fn check_shape(x: &SparseColumns, n: usize, what: &str) -> Result<(), StradsModelError> {
    super::check_sizes(&[(&format!("values of {what}"), n, x.n_rows)])?;
    if x.column_starts.last().copied() != Some(x.row_indices.len())
        || x.values.len() != x.row_indices.len()
        || x.row_indices.iter().any(|&i| i as usize >= x.n_rows)
    {
        return Err(StradsModelError::InvalidConfig(
            "column storage is inconsistent (row index out of range or lengths differ)".into(),
        ));
    }
    Ok(())
}

mod logistic;
pub use logistic::{ACTIVE_SWEEPS, CyclicMargin, LogisticPhase};

#[cfg(test)]
pub(crate) mod tests;
