use super::*;
use crate::core::lasso::soft_threshold;
use crate::core::lasso::{LassoCluster, reference_optimum};
use crate::core::logistic::sigmoid;
use petrel_ml::data::synthetic::{CorrelatedLassoParams, correlated_lasso};

fn correlated(seed: u64) -> (SparseColumns, Vec<f32>) {
    let p = correlated_lasso(&CorrelatedLassoParams {
        n_samples: 150,
        n_features: 80,
        group_size: 8,
        correlation: 0.8,
        n_nonzero: 6,
        noise_std: 0.05,
        seed,
    })
    .unwrap();
    (p.columns(), p.y)
}

/// Orthonormal columns with disjoint supports: the Lasso solution is known in closed
/// form, `b_j = S(x_j^T y, lambda)` (X^T X = I).
fn orthonormal() -> (SparseColumns, Vec<f32>, Vec<f64>) {
    let (n, d) = (40usize, 10usize);
    let mut dense = ndarray::Array2::<f32>::zeros((n, d));
    for j in 0..d {
        // Column j lives on rows 4j..4j+4 with unnormalised weights 1, 2, -1, 0.5.
        let weights = [1.0f32, 2.0, -1.0, 0.5];
        let norm = weights.iter().map(|w| w * w).sum::<f32>().sqrt();
        for (k, w) in weights.iter().enumerate() {
            dense[[4 * j + k, j]] = w / norm;
        }
    }
    let y: Vec<f32> = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.7).collect();
    let x = SparseColumns::from_dense(&dense);
    let lambda = 1.0;
    let exact = (0..d)
        .map(|j| {
            let (rows, vals) = x.column(j);
            let xty: f64 = rows
                .iter()
                .zip(vals)
                .map(|(&i, &v)| f64::from(v) * f64::from(y[i as usize]))
                .sum();
            soft_threshold(xty, lambda)
        })
        .collect();
    (x, y, exact)
}

#[test]
fn lasso_on_an_orthonormal_design_finds_the_closed_form_solution() {
    let (x, y, exact) = orthonormal();
    let mut cd = CyclicLasso::new(&x, &y, 1.0).unwrap();
    let report = cd.solve(&CdStop::default());
    assert_eq!(report.outcome, CdOutcome::Converged);
    // One sweep is exact on an orthonormal design; the second certifies it.
    assert!(report.full_sweeps <= 2, "{report:?}");
    for (b, e) in cd.coefficients().iter().zip(&exact) {
        assert!((f64::from(*b) - e).abs() < 1e-6, "{b} vs {e}");
    }
    assert!(exact.contains(&0.0) && exact.iter().any(|&e| e != 0.0));
}

#[test]
fn lasso_matches_the_reference_optimum_with_a_certified_gap() {
    let (x, y) = correlated(3);
    let lambda = 0.1 * crate::apps::lasso::lambda_max(&x, &y) as f32;
    let reference = reference_optimum(&x, &y, lambda, 3000, 1e-6).unwrap();
    for active_set in [true, false] {
        let mut cd = CyclicLasso::new(&x, &y, lambda).unwrap();
        let report = cd.solve(&CdStop {
            tolerance: 1e-10,
            active_set,
            ..CdStop::default()
        });
        assert_eq!(report.outcome, CdOutcome::Converged, "{report:?}");
        let (objective, gap, kkt) = cd.certify();
        assert!(gap >= -1e-9 && gap <= 1e-9 * objective, "gap {gap}");
        assert!(kkt < 1e-3 * f64::from(lambda), "kkt {kkt}");
        assert!(
            (objective - reference).abs() <= 1e-8 * reference,
            "{objective} vs {reference}"
        );
        // The running sums agree with the recomputed ones.
        assert!((report.objective - objective).abs() <= 1e-9 * objective);
        // The same coefficients as the STRADS core's serial reference (one worker).
        let mut cluster = LassoCluster::new(&x, &y, lambda, 1).unwrap();
        for _ in 0..1000 {
            for j in 0..x.n_columns() {
                cluster.round(&[j]);
            }
            if cluster.kkt_violation() < 1e-6 {
                break;
            }
        }
        for (a, b) in cd.coefficients().iter().zip(&cluster.coefficients) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
}

#[test]
fn lasso_active_set_needs_fewer_updates_for_the_same_optimum() {
    let (x, y) = correlated(5);
    let lambda = 0.2 * crate::apps::lasso::lambda_max(&x, &y) as f32;
    let run = |active_set| {
        let mut cd = CyclicLasso::new(&x, &y, lambda).unwrap();
        cd.solve(&CdStop {
            tolerance: 1e-9,
            active_set,
            ..CdStop::default()
        })
    };
    let (with, without) = (run(true), run(false));
    assert!((with.objective - without.objective).abs() <= 1e-8 * without.objective);
    assert!(
        with.updates < without.updates,
        "{} vs {}",
        with.updates,
        without.updates
    );
}

#[test]
fn lasso_stops_at_the_target_objective_after_the_update_that_reaches_it() {
    let (x, y) = correlated(4);
    let lambda = 0.2 * crate::apps::lasso::lambda_max(&x, &y) as f32;
    let mut full = CyclicLasso::new(&x, &y, lambda).unwrap();
    let optimum = full.solve(&CdStop::default()).objective;
    let target = optimum * (1.0 + 1e-3);
    let mut cd = CyclicLasso::new(&x, &y, lambda).unwrap();
    let report = cd.solve(&CdStop {
        target_objective: Some(target),
        ..CdStop::default()
    });
    assert_eq!(report.outcome, CdOutcome::ReachedTarget);
    assert!(report.objective <= target);
    // It stopped early: the run to convergence needed more updates.
    assert!(report.updates < full.updates());
    assert!(report.updates > 0);
}

#[test]
fn lasso_rejects_bad_shapes_and_lambda() {
    let (x, y) = correlated(1);
    assert!(CyclicLasso::new(&x, &y[1..], 0.1).is_err());
    assert!(CyclicLasso::new(&x, &y, -1.0).is_err());
    assert!(CyclicLasso::new(&x, &y, f32::NAN).is_err());
    let mut broken = x.clone();
    broken.row_indices[0] = 10_000;
    assert!(CyclicLasso::new(&broken, &y, 0.1).is_err());
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

/// Subgradient optimality of L1 logistic regression: `|g_j| <= lambda` where `b_j = 0`,
/// `g_j = -lambda sign(b_j)` elsewhere, with `g = X^T (-y sigmoid(-y m))`.
fn logistic_kkt(x: &SparseColumns, labels: &[f32], b: &[f32], lambda: f64) -> f64 {
    let y: Vec<f64> = labels
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
        .collect();
    let mut m = vec![0.0f64; x.n_rows];
    for (j, &bj) in b.iter().enumerate() {
        let (rows, vals) = x.column(j);
        for (&i, &v) in rows.iter().zip(vals) {
            m[i as usize] += f64::from(v) * f64::from(bj);
        }
    }
    (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            let g: f64 = rows
                .iter()
                .zip(vals)
                .map(|(&i, &v)| {
                    let (yi, mi) = (y[i as usize], m[i as usize]);
                    -yi * f64::from(v) * sigmoid(-yi * mi)
                })
                .sum();
            if b[j] != 0.0 {
                (g + lambda * f64::from(b[j].signum())).abs()
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
    let mut zero = CyclicLogistic::new(&x, &labels, (1.01 * lambda_max) as f32).unwrap();
    zero.solve(&CdStop::default());
    assert!(zero.coefficients().iter().all(|&b| b == 0.0));
    let lambda = 0.05 * lambda_max;
    let mut cd = CyclicLogistic::new(&x, &labels, lambda as f32).unwrap();
    let report = cd.solve(&CdStop {
        tolerance: 1e-12,
        ..CdStop::default()
    });
    assert_eq!(report.outcome, CdOutcome::Converged, "{report:?}");
    let b = cd.coefficients();
    assert!(b.iter().any(|&v| v != 0.0));
    let kkt = logistic_kkt(&x, &labels, &b, lambda);
    assert!(kkt < 1e-3 * lambda, "kkt {kkt} lambda {lambda}");
    assert!(cd.training_accuracy() > 0.9);
    // The STRADS core's bound steps, one coordinate a round, do not get lower.
    let config = crate::core::lasso::lasso_config(
        crate::core::scheduler::ScheduleMode::Cyclic,
        lambda as f32,
        1,
        1,
        40 * x.n_columns(),
        None,
        0,
    );
    let strads = crate::core::logistic::run_sparse_logistic(&x, &labels, &config).unwrap();
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
    let mut shrinking = CyclicLogistic::new(&x, &labels, lambda).unwrap();
    let report = shrinking.solve(&stop);
    assert_eq!(report.outcome, CdOutcome::Converged, "{report:?}");
    // The same schedule with the active set fixed between full sweeps.
    let mut fixed = CyclicLogistic::new(&x, &labels, lambda).unwrap();
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
    let kkt = logistic_kkt(&x, &labels, &shrinking.coefficients(), f64::from(lambda));
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

/// A sparse design whose columns have non-zero means (values 1..7 on about a third of the
/// rows; no two columns alike, so the solution is unique), and labels far from zero.
fn sparse_with_means() -> (SparseColumns, Vec<f32>) {
    let (n, d) = (60usize, 10usize);
    let mut dense = ndarray::Array2::<f32>::zeros((n, d));
    for i in 0..n {
        for j in 0..d {
            if (i * 7 + j * 13 + i * j) % 3 == 0 {
                dense[[i, j]] = ((i * 3 + j * 5 + i * j) % 7 + 1) as f32;
            }
        }
    }
    let y: Vec<f32> = (0..n)
        .map(|i| {
            20.0 + 1.5 * dense[[i, 0]] - 2.0 * dense[[i, 3]] + ((i * 5 % 7) as f32 - 3.0) * 0.3
        })
        .collect();
    (SparseColumns::from_dense(&dense), y)
}

/// The old path, kept as the reference: the design centred explicitly (every cell stored,
/// in f64) and solved by plain cyclic coordinate descent to machine precision.
fn explicitly_centred_reference(x: &SparseColumns, y: &[f32], lambda: f64) -> Vec<f64> {
    let (n, d) = (x.n_rows, x.n_columns());
    let mut columns = vec![vec![0.0f64; n]; d];
    for (j, column) in columns.iter_mut().enumerate() {
        let (rows, vals) = x.column(j);
        for (&i, &v) in rows.iter().zip(vals) {
            column[i as usize] = f64::from(v);
        }
        let mean = column.iter().sum::<f64>() / n as f64;
        column.iter_mut().for_each(|v| *v -= mean);
    }
    let y_mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
    let mut r: Vec<f64> = y.iter().map(|&v| f64::from(v) - y_mean).collect();
    let mut b = vec![0.0f64; d];
    for _ in 0..100_000 {
        let mut largest = 0.0f64;
        for j in 0..d {
            let norm: f64 = columns[j].iter().map(|v| v * v).sum();
            if norm <= 0.0 {
                continue; // an empty column stays at zero
            }
            let dot: f64 = columns[j].iter().zip(&r).map(|(a, b)| a * b).sum();
            let new = soft_threshold(dot + norm * b[j], lambda) / norm;
            let delta = new - b[j];
            columns[j]
                .iter()
                .zip(r.iter_mut())
                .for_each(|(a, r)| *r -= a * delta);
            b[j] = new;
            largest = largest.max(delta.abs());
        }
        if largest < 1e-15 {
            break;
        }
    }
    b
}

#[test]
fn implicit_centring_solves_the_explicitly_centred_problem_without_densifying() {
    let (x, y) = sparse_with_means();
    let n = x.n_rows as f64;
    let y_mean = (y.iter().map(|&v| f64::from(v)).sum::<f64>() / n) as f32;
    let y_c: Vec<f32> = y.iter().map(|v| v - y_mean).collect();
    for lambda in [0.5f32, 5.0, 40.0] {
        let mut cd = CyclicLasso::centred(&x, &y_c, lambda).unwrap();
        let stop = CdStop {
            tolerance: 1e-15,
            max_sweeps: 100_000,
            target_objective: None,
            active_set: true,
        };
        cd.solve(&stop);
        // The solver holds the design as given: the stored non-zeros, nothing more.
        assert_eq!(cd.x.values.len(), x.values.len());
        assert_eq!(cd.residual.len(), x.n_rows);
        let reference = explicitly_centred_reference(&x, &y_c, f64::from(lambda));
        let scale = reference.iter().fold(0.0f64, |m, b| m.max(b.abs()));
        assert!(scale > 0.1, "lambda {lambda}: {reference:?}");
        for (got, want) in cd.coefficients.iter().zip(&reference) {
            assert!(
                (got - want).abs() <= 1e-9 * scale,
                "lambda {lambda}: {:?} vs {reference:?}",
                cd.coefficients
            );
        }
        // scikit-learn's conditions for fit_intercept=True on the original design: with
        // b0 = mean(y) - mean(X) . b the residual y - X b - b0 sums to zero, and
        // |x_j^T r| <= lambda, with equality and the sign of b_j where b_j != 0.
        let b = &cd.coefficients;
        let means: Vec<f64> = (0..x.n_columns())
            .map(|j| x.column(j).1.iter().map(|&v| f64::from(v)).sum::<f64>() / n)
            .collect();
        let y_mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let b0 = y_mean - means.iter().zip(b).map(|(m, b)| m * b).sum::<f64>();
        let mut r: Vec<f64> = y.iter().map(|&v| f64::from(v) - b0).collect();
        for (j, bj) in b.iter().enumerate() {
            let (rows, vals) = x.column(j);
            for (&i, &v) in rows.iter().zip(vals) {
                r[i as usize] -= f64::from(v) * bj;
            }
        }
        assert!(r.iter().sum::<f64>().abs() < 1e-8, "lambda {lambda}");
        let lambda = f64::from(lambda);
        for (j, bj) in b.iter().enumerate() {
            let (rows, vals) = x.column(j);
            let g: f64 = rows
                .iter()
                .zip(vals)
                .map(|(&i, &v)| f64::from(v) * r[i as usize])
                .sum();
            if *bj != 0.0 {
                assert!((g - lambda * bj.signum()).abs() < 1e-7, "{j}: {g} {bj}");
            } else {
                assert!(g.abs() <= lambda + 1e-7, "{j}: {g}");
            }
        }
    }
}
