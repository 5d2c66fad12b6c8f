use super::*;
use crate::core::baseline::tests::{kkt_violation, solve};
use crate::core::baseline::{ACTIVE_SWEEPS, CdOutcome};
use crate::core::loss::{Logistic, SquaredHinge};
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};

fn problem(n: usize, d: usize, seed: u64) -> (SparseColumns, Vec<f32>) {
    let p = separable_classification(&ClassificationParams {
        n_samples: n,
        n_features: d,
        n_classes: 2,
        margin: 0.3,
        seed,
    })
    .unwrap();
    (p.dataset.to_columns(), p.dataset.labels)
}

/// The scheduler's side of a run, in plain code: blocks of about equal width, every
/// round combined with [`combination_step`]. Returns the objective after every round,
/// the updates and the coefficients.
fn run_blocks<L: MarginLoss>(
    x: &SparseColumns,
    labels: &[f32],
    lambda: f32,
    workers: usize,
    tolerance: f64,
) -> (Vec<f64>, u64, Vec<f64>) {
    let d = x.n_columns();
    let cuts: Vec<usize> = (0..=workers).map(|p| p * d / workers).collect();
    let mut cores: Vec<MarginGsWorkerCore<L>> = (0..workers)
        .map(|p| {
            MarginGsWorkerCore::new(
                x.columns(cuts[p]..cuts[p + 1]),
                labels,
                lambda,
                cuts[p],
                workers > 1,
            )
            .unwrap()
        })
        .collect();
    let y: Vec<f64> = labels
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
        .collect();
    let mut margins = vec![0.0; x.n_rows];
    let mut b = vec![0.0f64; d];
    let mut l1 = 0.0;
    let mut objective = y.iter().map(|&y| L::row_loss(y, 0.0)).sum::<f64>();
    let mut trace = vec![objective];
    for _ in 0..200 {
        let order = LogisticSweepOrder {
            full: true,
            active_sweeps: ACTIVE_SWEEPS as u32,
            objective,
            l1,
            tolerance,
            target: None,
        };
        let swept: Vec<LogisticSwept> =
            cores.iter_mut().map(|c| c.sweep(&order).unwrap()).collect();
        let settled = swept.iter().all(|s| s.phase.converged);
        if workers == 1 {
            let s = &swept[0];
            for (&j, &v) in s.changed.iter().zip(&s.values) {
                l1 += v.abs() - b[j as usize].abs();
                b[j as usize] = v;
            }
            objective = s.phase.objective;
            cores[0].commit(1.0, None).unwrap();
        } else {
            let deltas: Vec<&RowVector> = swept
                .iter()
                .map(|s| s.margin_delta.as_ref().unwrap())
                .collect();
            let omega = overlap(&deltas, x.n_rows).unwrap();
            assert!(omega <= workers);
            let mut sum = vec![0.0; x.n_rows];
            deltas
                .iter()
                .for_each(|u| u.add_scaled_to(1.0, &mut sum).unwrap());
            let moved: Vec<(f64, f64)> = swept
                .iter()
                .flat_map(|s| s.changed.iter().zip(&s.values))
                .map(|(&j, &v)| (b[j as usize], v))
                .collect();
            let (t, f, new_l1) = combination_step::<L>(
                &Combination {
                    labels: &y,
                    margins: &margins,
                    sum: &sum,
                    moved: &moved,
                    lambda: f64::from(lambda),
                    l1,
                },
                || omega,
            );
            // Never worse than the safeguard's guarantee.
            let own: f64 = swept.iter().map(|s| s.phase.objective - objective).sum();
            assert!(
                f <= objective + own / omega.max(1) as f64 + 1e-9 * objective.abs(),
                "{f} against {objective} + {own} / {omega}"
            );
            for s in &swept {
                for (&j, &v) in s.changed.iter().zip(&s.values) {
                    b[j as usize] = step_value(b[j as usize], v, t);
                }
            }
            let combined = RowVector::from_dense(sum);
            combined.add_scaled_to(t, &mut margins).unwrap();
            for c in &mut cores {
                c.commit(t, Some(&combined)).unwrap();
                assert_eq!(
                    c.solver().margins(),
                    &margins[..],
                    "every node's margins agree"
                );
            }
            objective = f;
            l1 = new_l1;
        }
        trace.push(objective);
        if settled {
            break;
        }
    }
    let updates = cores.iter().map(|c| c.solver().updates()).sum();
    (trace, updates, b)
}

#[test]
fn one_worker_makes_the_baselines_updates_and_model_bit_for_bit() {
    let (x, labels) = problem(120, 60, 7);
    let lambda = 0.5;
    let mut cd = CyclicMargin::<Logistic>::new(&x, &labels, lambda).unwrap();
    let stop = CdStop {
        tolerance: 1e-7,
        ..CdStop::default()
    };
    let report = solve(&mut cd, &stop);
    assert_eq!(report.outcome, CdOutcome::Converged);
    let (trace, updates, b) = run_blocks::<Logistic>(&x, &labels, lambda, 1, 1e-7);
    assert_eq!(updates, report.updates);
    assert_eq!(*trace.last().unwrap(), report.objective);
    assert_eq!(b, cd.coefficients_f64());
}

#[test]
fn several_workers_descend_every_round_to_the_baselines_optimum() {
    let (x, labels) = problem(150, 90, 3);
    let lambda = 0.3;
    let mut cd = CyclicMargin::<Logistic>::new(&x, &labels, lambda).unwrap();
    let optimum = solve(
        &mut cd,
        &CdStop {
            tolerance: 1e-12,
            ..CdStop::default()
        },
    )
    .objective;
    for workers in [2, 3] {
        let (trace, _, b) = run_blocks::<Logistic>(&x, &labels, lambda, workers, 1e-9);
        assert!(
            trace.windows(2).all(|w| w[1] <= w[0]),
            "{workers} workers: {trace:?}"
        );
        let last = *trace.last().unwrap();
        assert!(
            (last - optimum).abs() <= 1e-6 * optimum,
            "{workers} workers: {last} against {optimum}"
        );
        assert!(b.iter().any(|v| *v != 0.0));
    }
}

#[test]
fn the_squared_hinge_runs_on_the_same_kernel_to_its_optimum_with_one_or_three_workers() {
    let (x, labels) = problem(160, 60, 5);
    let signs: Vec<f32> = labels
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
        .collect();
    let lambda_max = SquaredHinge::SLOPE_AT_ZERO * crate::apps::lasso::lambda_max(&x, &signs);
    let lambda = (0.1 * lambda_max) as f32;
    let (lone, _, b1) = run_blocks::<SquaredHinge>(&x, &labels, lambda, 1, 1e-13);
    let (three, _, b3) = run_blocks::<SquaredHinge>(&x, &labels, lambda, 3, 1e-13);
    assert!(three.windows(2).all(|w| w[1] <= w[0]), "{three:?}");
    let (f1, f3) = (*lone.last().unwrap(), *three.last().unwrap());
    assert!((f1 - f3).abs() <= 1e-6 * f1, "one worker {f1}, three {f3}");
    assert!(b1.iter().any(|v| *v != 0.0) && b1.contains(&0.0));
    let lambda = f64::from(lambda);
    for b in [&b1, &b3] {
        let kkt = kkt_violation::<SquaredHinge>(&x, &labels, b, lambda);
        assert!(kkt <= 1e-3 * lambda, "kkt {kkt}, lambda {lambda}");
    }
    // Above lambda_max the optimum is b = 0.
    let zero = (1.01 * lambda_max) as f32;
    let (_, _, b0) = run_blocks::<SquaredHinge>(&x, &labels, zero, 3, 1e-13);
    assert!(b0.iter().all(|v| *v == 0.0));
}

#[test]
fn the_step_is_one_without_shared_rows_and_the_best_of_the_line_otherwise() {
    let y = [1.0, -1.0, 1.0];
    let margins = [0.0; 3];
    let sum = [4.0, -4.0, 4.0];
    let c = Combination {
        labels: &y,
        margins: &margins,
        sum: &sum,
        moved: &[(0.0, 2.0)],
        lambda: 0.1,
        l1: 0.0,
    };
    assert_eq!(combination_step::<Logistic>(&c, || 1).0, 1.0);
    let (t, f, l1) = combination_step::<Logistic>(&c, || 2);
    // Large margins lower the loss: the longest step is the best, and nothing beats it.
    assert_eq!(t, 1.0);
    assert_eq!((f, l1), combined_objective::<Logistic>(&c, 1.0));
    let at_one = objective_and_slope_at_one::<Logistic>(&c);
    assert_eq!(
        (at_one.0, at_one.1),
        combined_objective::<Logistic>(&c, 1.0)
    );
    // A step that overshoots: the loss along t has its minimum inside (0, 1).
    let over = [4.0, 4.0, 4.0];
    let c = Combination { sum: &over, ..c };
    let (t, f, _) = combination_step::<Logistic>(&c, || 2);
    assert!(t > 0.0 && t < 1.0, "{t}");
    for probe in [0.0, 0.25, 0.5, 0.75, 1.0] {
        assert!(f <= combined_objective::<Logistic>(&c, probe).0, "{probe}");
    }
    assert!(objective_and_slope_at_one::<Logistic>(&c).2 > 0.0);
}

#[test]
fn the_slope_at_one_is_the_objectives_left_derivative() {
    let y = [1.0, -1.0, 1.0, -1.0];
    let margins = [0.3, -0.2, 1.0, 0.5];
    let sum = [0.7, -1.1, 0.4, 0.9];
    // One coordinate moves away from zero, one onto zero (a kink at t = 1).
    let moved = [(0.2, 0.9), (-0.5, 0.0)];
    let c = Combination {
        labels: &y,
        margins: &margins,
        sum: &sum,
        moved: &moved,
        lambda: 0.7,
        l1: 0.7,
    };
    let h = 1e-6;
    let numeric = (combined_objective::<Logistic>(&c, 1.0).0
        - combined_objective::<Logistic>(&c, 1.0 - h).0)
        / h;
    let slope = objective_and_slope_at_one::<Logistic>(&c).2;
    assert!((numeric - slope).abs() < 1e-4, "{numeric} {slope}");
}

#[test]
fn overlap_counts_the_workers_touching_a_row_and_refuses_bad_rows() {
    let a = RowVector::from_dense(vec![1.0, 0.0, 2.0, 0.0]);
    let b = RowVector::Sparse {
        rows: vec![2, 3],
        values: vec![1.0, 1.0],
    };
    assert_eq!(overlap(&[&a, &b], 4).unwrap(), 2);
    assert_eq!(overlap(&[&a], 4).unwrap(), 1);
    let bad = RowVector::Sparse {
        rows: vec![9],
        values: vec![1.0],
    };
    assert!(overlap(&[&bad], 4).is_err());
}

#[test]
fn a_lone_worker_refuses_a_combined_commit_and_a_commit_without_a_round() {
    let (x, labels) = problem(40, 10, 1);
    let mut core = MarginGsWorkerCore::<Logistic>::new(x, &labels, 0.1, 0, false).unwrap();
    assert!(core.commit(1.0, None).is_err());
    let order = LogisticSweepOrder {
        full: true,
        active_sweeps: ACTIVE_SWEEPS as u32,
        objective: 40.0 * 2f64.ln(),
        l1: 0.0,
        tolerance: 1e-7,
        target: None,
    };
    core.sweep(&order).unwrap();
    assert!(
        core.sweep(&order).is_err(),
        "a second sweep before the commit"
    );
    assert!(core.commit(0.5, None).is_err());
}

// Only the tests read this.
impl<L: MarginLoss> MarginGsWorkerCore<L> {
    /// The block's solver (its coefficients, margins and counts).
    pub(crate) fn solver(&self) -> &CyclicMargin<L> {
        &self.cd
    }
}
