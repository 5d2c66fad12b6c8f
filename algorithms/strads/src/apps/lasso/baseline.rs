//! `--transport none`: the job's data solved by the single-threaded cyclic coordinate
//! descent of [`crate::core::baseline`] (no scheduler, no workers, no messages), with the
//! same outputs as a STRADS run (`coefficients.tsv`, `metrics.json`).
//!
//! The scheduling flags (block size, candidate pool, rho, depth, round limit) do not apply.
//! The run stops once a full sweep's duality gap is within `gap_tolerance` of the objective
//! (1e-7 when unset), once the objective reaches `target_objective`, or after
//! [`BASELINE_MAX_SWEEPS`] full sweeps.

use super::config::LassoJob;
use super::heldout::LinearHeldout;
use super::metrics::{Evaluation, LassoMetrics, LassoOutcome, ObjectivePoint};
use crate::core::baseline::{CdReport, CdStop, CyclicLasso};
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;
use petrel_ml::model::LinearTask;
use std::time::Instant;

/// Full sweeps a baseline run may take.
pub const BASELINE_MAX_SWEEPS: usize = 10_000;

/// The mode name a baseline run writes into `metrics.json`.
pub const BASELINE_MODE: &str = "cyclic-cd-baseline";

/// The stop rule of a baseline run of `job`.
pub fn baseline_stop(job: &LassoJob) -> CdStop {
    CdStop {
        tolerance: job.gap_tolerance.unwrap_or(1e-7),
        max_sweeps: BASELINE_MAX_SWEEPS,
        target_objective: job.target_objective,
        active_set: true,
    }
}

/// Solves `(x, y)` with the job's lambda and stop rule; the metrics carry the time the
/// solve took (loading excluded; the trace's times are pro rata of the updates) and an
/// evaluation (objective, KKT violation, duality gap; held-out figures with `test_data`)
/// of the untrained model (step 0), after every full sweep, and of the final state.
pub fn solve_baseline(
    x: &SparseColumns,
    y: &[f32],
    job: &LassoJob,
) -> Result<(LassoOutcome, CdReport), StradsError> {
    let lambda = job.resolve_lambda(x, y);
    let heldout = LinearHeldout::of(job, LinearTask::Regression, lambda)?;
    let started = Instant::now();
    // With fit_intercept, `x` is the design as stored and `y` centred
    // ([`LassoJob::load_sparse`]): the solver centres the columns implicitly.
    let mut cd = if job.fit_intercept {
        CyclicLasso::centred(x, y, lambda)?
    } else {
        CyclicLasso::new(x, y, lambda)?
    };
    // A history record at the start and after every full sweep (the certification is
    // the sweep's own; the held-out figures cost O(test non-zeros)).
    // The start's record: at b = 0 its certificate is the largest correlation, which
    // resolving lambda computes and petrel's scheduler reuses; so the baseline's clock does
    // not count it either (it is timed and taken off).
    let certifying = Instant::now();
    let start = cd.certify();
    let uncounted = certifying.elapsed();
    let elapsed = || started.elapsed().saturating_sub(uncounted).as_secs_f64();
    let mut evaluations = vec![evaluation(
        cd.updates(),
        0.0,
        start,
        cd.coefficients_f64(),
        heldout.as_ref(),
    )];
    let mut record = |cd: &CyclicLasso<'_>, (objective, gap, kkt): (f64, f64, f64)| {
        evaluations.push(evaluation(
            cd.updates(),
            elapsed(),
            (objective, gap, kkt),
            cd.coefficients_f64(),
            heldout.as_ref(),
        ));
    };
    let report = cd.solve_after_start(&baseline_stop(job), Some(&mut record));
    let solve_s = elapsed();
    let (objective, gap, kkt) = cd.certify();
    // The last record is the final state, with the final certification.
    if evaluations
        .last()
        .is_some_and(|e| e.updates == report.updates)
    {
        evaluations.pop();
    }
    evaluations.push(evaluation(
        report.updates,
        solve_s,
        (objective, gap, kkt),
        cd.coefficients_f64(),
        heldout.as_ref(),
    ));
    let coefficients = cd.coefficients();
    let reached = job.target_objective.filter(|t| report.objective <= *t);
    tracing::info!(
        updates = report.updates,
        sweeps = report.full_sweeps,
        active_sweeps = report.active_sweeps,
        seconds = solve_s,
        objective,
        gap,
        "lasso baseline finished"
    );
    let metrics = LassoMetrics {
        mode: BASELINE_MODE.into(),
        lambda,
        n_samples: x.n_rows,
        n_features: x.n_columns(),
        workers: 0,
        block_size: 1,
        rho: None,
        depth: 1,
        rounds: report.updates,
        updates: report.updates,
        elapsed_s: solve_s,
        final_objective: objective,
        final_kkt_violation: kkt,
        final_duality_gap: gap,
        target_objective: job.target_objective,
        target_updates: reached.map(|_| report.updates),
        target_s: reached.map(|_| solve_s),
        objective: report
            .trace
            .iter()
            .map(|&(updates, objective)| ObjectivePoint {
                round: updates,
                updates,
                // Pro rata: the core has no clock, and every update costs about the same.
                elapsed_s: solve_s * updates as f64 / report.updates.max(1) as f64,
                objective,
            })
            .collect(),
        evaluations,
        checkpoints: Vec::new(),
        resumed_from_round: None,
        profile: Default::default(),
    };
    Ok((
        LassoOutcome {
            coefficients,
            metrics,
        },
        report,
    ))
}

/// The history record of the state after `updates` updates with `coefficients` and
/// certified `(objective, duality gap, KKT violation)`, scored on `heldout` when given
/// (the formulas of the final figures).
fn evaluation(
    updates: u64,
    elapsed_s: f64,
    (objective, gap, kkt): (f64, f64, f64),
    coefficients: &[f64],
    heldout: Option<&LinearHeldout>,
) -> Evaluation {
    Evaluation {
        round: updates,
        updates,
        elapsed_s,
        objective,
        kkt_violation: kkt,
        duality_gap: gap,
        // The model's (f32) non-zeros, counted without a copy: this runs on the clock.
        nonzeros: coefficients.iter().filter(|&&b| b as f32 != 0.0).count(),
        heldout: heldout
            .map(|h| h.figures_of_solver(coefficients))
            .unwrap_or_default(),
    }
}

/// Loads the job's data, solves it and writes the outputs to `out_dir` (when set).
pub fn run_baseline(job: &LassoJob) -> Result<LassoOutcome, StradsError> {
    let (x, y) = job.load_sparse()?;
    let (outcome, _) = solve_baseline(&x, &y, job)?;
    if let Some(dir) = &job.out_dir {
        outcome.write(dir, job)?;
    }
    Ok(outcome)
}
