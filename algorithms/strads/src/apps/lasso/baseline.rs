//! `--transport none`: the job's data solved in this thread by the Gauss-Seidel solver with
//! one worker ([`super::gs`]): single-threaded cyclic coordinate descent with an exact
//! active set (the glmnet recipe), with the outputs of a STRADS run. The scheduling flags
//! do not apply. The run stops once a full sweep's duality gap is within `gap_tolerance` of
//! the objective (1e-7 when unset), at `target_objective`, or after
//! [`BASELINE_MAX_SWEEPS`] full sweeps.

use super::config::LassoSettings;
use super::gs::{GsScheduling, GsWorker, LassoGsApp};
use super::metrics::LassoOutcome;
use crate::core::gauss_seidel::GsWorkerCore;
use crate::error::StradsError;
use crate::kit::serial::{SerialOptions, run_star};
use petrel_ml::data::SparseColumns;

pub use crate::core::tuning::MAX_FULL_SWEEPS as BASELINE_MAX_SWEEPS;

/// The mode name a baseline run writes into `metrics.json`.
pub const BASELINE_MODE: &str = "cyclic-cd-baseline";

/// Solves `(x, y)` (with `fit_intercept`, `y` centred and `x` as stored: the solver
/// centres the columns implicitly) with the job's lambda and stop rule: the Gauss-Seidel
/// schedule with one worker holding every column. The metrics carry the time the solve
/// took (building the halves excluded) and the certified history of the run.
pub fn solve_baseline(
    x: &SparseColumns,
    y: &[f32],
    job: &LassoSettings,
) -> Result<LassoOutcome, StradsError> {
    let mut scheduler = GsScheduling::new(x, y, job, 1)?;
    let lambda = f64::from(scheduler.lambda());
    let core = GsWorkerCore::build(x.clone(), y.to_vec(), lambda, false, job.fit_intercept)?;
    let mut worker = [GsWorker::new(core, 0)];
    let timed = SerialOptions {
        timed: true,
        ..SerialOptions::default()
    };
    run_star::<LassoGsApp, _, _>(&mut scheduler, &mut worker, &timed)?;
    let mut outcome = scheduler.outcome();
    outcome.metrics.mode = BASELINE_MODE.into();
    outcome.metrics.workers = 0;
    tracing::info!(
        updates = outcome.metrics.updates,
        seconds = outcome.metrics.elapsed_s,
        objective = outcome.metrics.final_objective,
        gap = outcome.metrics.final_duality_gap,
        "lasso baseline finished"
    );
    Ok(outcome)
}

/// Loads the job's data, solves it and writes the outputs to `out_dir` (when set).
pub fn run_baseline(job: &LassoSettings) -> Result<LassoOutcome, StradsError> {
    let (x, y) = job.load_sparse()?;
    let outcome = solve_baseline(&x, &y, job)?;
    if let Some(dir) = &job.out_dir {
        outcome.write(dir, job)?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests;
