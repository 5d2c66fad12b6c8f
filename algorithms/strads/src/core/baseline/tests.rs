use super::*;
use crate::core::loss::{Logistic, MarginLoss};

// The logistic yardstick's loop (full sweeps, each followed by its active phase), as the
// one-worker Gauss-Seidel solver runs it: what the tests compare with.

/// A baseline run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CdReport {
    /// Why it stopped.
    pub(crate) outcome: CdOutcome,
    /// Coordinate updates (every coordinate visited counts, moved or not).
    pub(crate) updates: u64,
    /// Full sweeps.
    pub(crate) full_sweeps: usize,
    /// Active-set sweeps.
    pub(crate) active_sweeps: usize,
    /// The objective at the end.
    pub(crate) objective: f64,
    /// Lasso: the duality gap of the last full sweep (NaN when stopped on the target).
    /// Logistic: the last full sweep's relative objective decrease.
    pub(crate) gap: f64,
    /// `(updates, objective)` after every full sweep (and at the end).
    pub(crate) trace: Vec<(u64, f64)>,
}

/// Runs full sweeps (each followed by active-set sweeps) until a full sweep lowers the
/// objective by at most `tolerance` relative, or the target is met (checked after every
/// sweep: the logistic objective costs O(rows)).
pub(crate) fn solve<L: MarginLoss>(cd: &mut CyclicMargin<L>, stop: &CdStop) -> CdReport {
    let mut objective = cd.objective();
    let mut report = CdReport {
        outcome: CdOutcome::SweepLimit,
        updates: 0,
        full_sweeps: 0,
        active_sweeps: 0,
        objective,
        gap: f64::NAN,
        trace: vec![(0, objective)],
    };
    let reached = |f: f64| stop.target_objective.is_some_and(|t| f <= t);
    while report.full_sweeps < stop.max_sweeps && !reached(objective) {
        let phase = cd.full_then_active(stop, objective, ACTIVE_SWEEPS);
        report.full_sweeps += 1;
        report.active_sweeps += phase.active_sweeps;
        report.gap = phase.gap;
        report.trace.push((cd.updates(), phase.after_full));
        objective = phase.objective;
        if phase.converged {
            report.outcome = CdOutcome::Converged;
            break;
        }
    }
    if reached(objective) {
        report.outcome = CdOutcome::ReachedTarget;
    }
    report.updates = cd.updates();
    report.objective = objective;
    report
}

fn classification() -> (SparseColumns, Vec<f32>) {
    two_classes(300, 40, 0.2, 9)
}

/// A separable two-class problem of `n_samples x n_features`, by columns.
fn two_classes(
    n_samples: usize,
    n_features: usize,
    margin: f32,
    seed: u64,
) -> (SparseColumns, Vec<f32>) {
    let p = petrel_ml::data::synthetic::separable_classification(
        &petrel_ml::data::synthetic::ClassificationParams {
            n_samples,
            n_features,
            n_classes: 2,
            margin,
            seed,
        },
    )
    .unwrap();
    (p.dataset.to_columns(), p.dataset.labels)
}

/// The largest violation of the L1 optimality conditions of `sum_i loss(y_i, x_i^T b) +
/// lambda ||b||_1`: `|g_j| <= lambda` where `b_j = 0`, `g_j = -lambda sign(b_j)` elsewhere.
pub(crate) fn kkt_violation<L: MarginLoss>(
    x: &SparseColumns,
    labels: &[f32],
    b: &[f64],
    lambda: f64,
) -> f64 {
    let y: Vec<f64> = labels
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
        .collect();
    let mut m = vec![0.0f64; x.n_rows];
    for (j, &bj) in b.iter().enumerate() {
        let (rows, vals) = x.column(j);
        for (&i, &v) in rows.iter().zip(vals) {
            m[i as usize] += f64::from(v) * bj;
        }
    }
    (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            let g: f64 = rows
                .iter()
                .zip(vals)
                .map(|(&i, &v)| f64::from(v) * L::row_loss_slope(y[i as usize], m[i as usize]).1)
                .sum();
            if b[j] != 0.0 {
                (g + lambda * b[j].signum()).abs()
            } else {
                (g.abs() - lambda).max(0.0)
            }
        })
        .fold(0.0, f64::max)
}

#[test]
fn logistic_reaches_the_optimality_conditions_and_beats_the_bound_steps() {
    let (x, labels) = classification();
    // At b = 0 the gradient is -X^T y / 2: lambda_max is its largest entry.
    let lambda_max = (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            rows.iter()
                .zip(vals)
                .map(|(&i, &v)| {
                    let y = if labels[i as usize] > 0.0 { 1.0 } else { -1.0 };
                    0.5 * y * f64::from(v)
                })
                .sum::<f64>()
                .abs()
        })
        .fold(0.0, f64::max);
    // Above lambda_max the known solution is b = 0.
    let mut zero = CyclicMargin::<Logistic>::new(&x, &labels, (1.01 * lambda_max) as f32).unwrap();
    solve(&mut zero, &CdStop::default());
    assert!(zero.coefficients().iter().all(|&b| b == 0.0));
    let lambda = 0.05 * lambda_max;
    let mut cd = CyclicMargin::<Logistic>::new(&x, &labels, lambda as f32).unwrap();
    let report = solve(
        &mut cd,
        &CdStop {
            tolerance: 1e-12,
            ..CdStop::default()
        },
    );
    assert_eq!(report.outcome, CdOutcome::Converged, "{report:?}");
    let b = cd.coefficients();
    assert!(b.iter().any(|&v| v != 0.0));
    let b64: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
    let kkt = kkt_violation::<Logistic>(&x, &labels, &b64, lambda);
    assert!(kkt < 1e-3 * lambda, "kkt {kkt} lambda {lambda}");
    assert!(cd.training_accuracy() > 0.9);
    // The STRADS core's bound steps, one coordinate a round, do not get lower.
    let config = crate::core::lasso::tests::lasso_config(
        crate::core::scheduler::ScheduleMode::Cyclic,
        lambda as f32,
        1,
        1,
        40 * x.n_columns(),
        None,
        0,
    );
    let strads = crate::core::logistic::tests::run_sparse_logistic(&x, &labels, &config).unwrap();
    let strads_final = strads.objective_per_round.last().copied().unwrap();
    assert!(report.objective <= strads_final + 1e-9 * strads_final.abs());
}

#[test]
fn logistic_active_passes_shrink_to_the_same_optimum_in_fewer_updates() {
    // A design where the active set changes between passes: more features than rows.
    let (x, labels) = two_classes(200, 400, 0.1, 21);
    let lambda = 0.5f32;
    let stop = CdStop {
        tolerance: 1e-9,
        ..CdStop::default()
    };
    let mut shrinking = CyclicMargin::<Logistic>::new(&x, &labels, lambda).unwrap();
    let report = solve(&mut shrinking, &stop);
    assert_eq!(report.outcome, CdOutcome::Converged, "{report:?}");
    // The same schedule with the active set fixed between full sweeps.
    let mut fixed = CyclicMargin::<Logistic>::new(&x, &labels, lambda).unwrap();
    let d = x.n_columns();
    let mut objective = fixed.objective();
    for _ in 0..stop.max_sweeps {
        (0..d).for_each(|j| {
            fixed.update(j);
        });
        let after = fixed.objective();
        let gap = (objective - after) / after.abs();
        objective = after;
        if gap <= stop.tolerance {
            break;
        }
        let active: Vec<usize> = (0..d)
            .filter(|&j| fixed.coefficients_f64()[j] != 0.0)
            .collect();
        let mut previous = objective;
        for _ in 0..1000 {
            active.iter().for_each(|&j| {
                fixed.update(j);
            });
            let now = fixed.objective();
            let settled = previous - now <= 0.1 * stop.tolerance * now.abs();
            previous = now;
            if settled {
                break;
            }
        }
        objective = previous;
    }
    let b64: Vec<f64> = shrinking
        .coefficients()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let kkt = kkt_violation::<Logistic>(&x, &labels, &b64, f64::from(lambda));
    assert!(kkt < 1e-3 * f64::from(lambda), "kkt {kkt}");
    assert!(
        (report.objective - objective).abs() <= 1e-6 * objective,
        "{} vs {objective}",
        report.objective
    );
    assert!(
        report.updates < fixed.updates(),
        "{} updates shrinking, {} fixed",
        report.updates,
        fixed.updates()
    );
}

impl<L: MarginLoss> CyclicMargin<L> {
    /// A solver of a copy of `x`, at `b = 0`.
    pub(crate) fn new(
        x: &SparseColumns,
        labels: &[f32],
        lambda: f32,
    ) -> Result<Self, StradsModelError> {
        Self::owning(x.clone(), labels, lambda)
    }
}
