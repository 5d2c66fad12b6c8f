//! `--transport none` for logistic regression: the single-threaded yardstick, writing the
//! outputs of a STRADS run.

use super::super::lasso::LassoJob;
use super::super::lasso::heldout::LinearHeldout;
use super::{LogisticMetrics, LogisticPoint, load, logistic_lambda};
use crate::core::baseline::{CdOutcome, CdStop, CyclicLogistic};
use crate::error::StradsError;

/// `--transport none`: the job's data solved by single-threaded cyclic coordinate descent
/// ([`CyclicLogistic`]: proximal Newton steps with a bound-step fallback), no scheduler and
/// no workers. It stops once a full sweep lowers the objective by less than
/// `gap_tolerance / 100` relative (1e-7 when unset) or after
/// [`BASELINE_MAX_SWEEPS`](super::super::lasso::baseline::BASELINE_MAX_SWEEPS) sweeps, and
/// writes the outputs of a STRADS run (when `out_dir` is set).
pub fn run_baseline(job: &LassoJob) -> Result<LogisticMetrics, StradsError> {
    let (x, labels) = load(job)?;
    let lambda = logistic_lambda(&x, &labels, job);
    let heldout = LinearHeldout::of(
        job,
        petrel_ml::model::LinearTask::BinaryClassification,
        lambda,
    )?;
    let started = std::time::Instant::now();
    let mut cd = CyclicLogistic::new(&x, &labels, lambda)?;
    // A point at the start and after every full sweep (O(rows) for the objective and
    // accuracy, O(test non-zeros) for the held-out figures: small against a sweep).
    let point = |cd: &CyclicLogistic<'_>, elapsed_s: f64| LogisticPoint {
        round: cd.updates(),
        updates: cd.updates(),
        elapsed_s,
        objective: cd.objective(),
        training_accuracy: cd.training_accuracy(),
        heldout: heldout
            .as_ref()
            .map(|h| h.figures_of_solver(cd.coefficients_f64()))
            .unwrap_or_default(),
    };
    let mut trace = Vec::new();
    let mut observe = |cd: &CyclicLogistic<'_>| {
        trace.push(point(cd, started.elapsed().as_secs_f64()));
    };
    let report = cd.solve_observed(
        &CdStop {
            tolerance: job.gap_tolerance.map_or(1e-7, |t| t / 100.0),
            max_sweeps: super::super::lasso::baseline::BASELINE_MAX_SWEEPS,
            target_objective: job.target_objective,
            active_set: true,
        },
        Some(&mut observe),
    );
    let elapsed_s = started.elapsed().as_secs_f64();
    let coefficients = cd.coefficients();
    let accuracy = cd.training_accuracy();
    // The last point is the final state (the final figures' model).
    if trace.last().is_some_and(|p| p.updates == report.updates) {
        trace.pop();
    }
    trace.push(point(&cd, elapsed_s));
    let metrics = LogisticMetrics {
        mode: super::super::lasso::baseline::BASELINE_MODE.into(),
        lambda,
        n_samples: x.n_rows,
        n_features: x.n_columns(),
        workers: 0,
        rounds: report.updates,
        updates: report.updates,
        elapsed_s,
        final_objective: report.objective,
        final_training_accuracy: accuracy,
        nonzeros: coefficients.iter().filter(|b| **b != 0.0).count(),
        trace,
    };
    if let Some(dir) = &job.out_dir {
        let mut run = metrics.run_metrics(job);
        // The baseline has a stopping rule of its own.
        run.converged = report.outcome != CdOutcome::SweepLimit;
        run.stop_reason = stop_reason(report.outcome, report.gap, report.full_sweeps);
        super::write_model(dir, job, lambda, &coefficients, run)?;
    }
    Ok(metrics)
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
