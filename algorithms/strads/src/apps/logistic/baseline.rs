//! `--transport none` for logistic regression: the Gauss-Seidel solver with one worker
//! ([`super::gs`]) in this thread, no actors and no messages, writing the outputs of a
//! STRADS run.

use super::super::lasso::LassoSettings;
use super::super::lasso::baseline::BASELINE_MODE;
use super::LogisticMetrics;
use super::gs::LogisticGsApp;
use crate::core::baseline::CdOutcome;
use crate::error::StradsError;
use crate::kit::serial::{SerialOptions, run_star};
use crate::kit::{JobShape, StradsJob};

/// `--transport none`: single-threaded cyclic coordinate descent of the job's loss
/// ([`CyclicMargin`](crate::core::baseline::CyclicMargin)), the Gauss-Seidel solver with
/// one worker. It stops once a full sweep lowers the objective by less than
/// `gap_tolerance / 100` relative (1e-7 when unset) or after
/// [`BASELINE_MAX_SWEEPS`](super::super::lasso::baseline::BASELINE_MAX_SWEEPS) sweeps, and
/// writes the outputs of a STRADS run (when `out_dir` is set).
pub fn run_baseline(job: &LassoSettings) -> Result<LogisticMetrics, StradsError> {
    let shape = JobShape {
        workers: 1,
        schedulers: 1,
    };
    let mut scheduler = LogisticGsApp::scheduler(job, &shape)?;
    let mut worker = [LogisticGsApp::worker(job, 0, &shape)?.0];
    let timed = SerialOptions {
        timed: true,
        ..SerialOptions::default()
    };
    run_star::<LogisticGsApp, _, _>(&mut scheduler, &mut worker, &timed)?;
    scheduler.relabel(BASELINE_MODE, 0);
    if let Some(dir) = &job.out_dir {
        scheduler.write(dir, job)?;
    }
    Ok(scheduler.metrics().clone())
}

/// Why a run of the baseline's stopping rule stopped (the baseline's and the
/// Gauss-Seidel solver's `stop_reason`).
pub(super) fn stop_reason(outcome: CdOutcome, gap: f64, full_sweeps: usize) -> String {
    match outcome {
        CdOutcome::Converged => format!(
            "a full sweep lowered the objective by at most {gap:e} (relative) after {full_sweeps} sweeps"
        ),
        CdOutcome::ReachedTarget => "reached target_objective".to_string(),
        CdOutcome::SweepLimit => format!(
            "stopped at the sweep limit ({full_sweeps} full sweeps) before the objective settled"
        ),
    }
}
