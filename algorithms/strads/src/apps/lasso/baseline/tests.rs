use super::*;
use crate::core::gauss_seidel::RowVector;
use crate::core::gauss_seidel::{Coords, SweepOrder};
use crate::core::lasso::soft_threshold;
use crate::core::lasso::tests::{LassoCluster, reference_optimum};
use petrel_ml::data::synthetic::{CorrelatedLassoParams, correlated_lasso};

/// The baseline of `x`, `y` at `lambda` to a relative duality gap of `tolerance`.
fn solve(x: &SparseColumns, y: &[f32], lambda: f32, tolerance: f64) -> LassoOutcome {
    let job = LassoSettings {
        lambda: Some(lambda),
        gap_tolerance: Some(tolerance),
        ..LassoSettings::default()
    };
    solve_baseline(x, y, &job).unwrap()
}

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
    let out = solve(&x, &y, 1.0, 1e-7);
    assert_eq!(out.metrics.mode, BASELINE_MODE);
    assert!(out.metrics.relative_gap() <= 1e-7, "{:?}", out.metrics);
    for (b, e) in out.coefficients.iter().zip(&exact) {
        assert!((f64::from(*b) - e).abs() < 1e-6, "{b} vs {e}");
    }
    assert!(exact.contains(&0.0) && exact.iter().any(|&e| e != 0.0));
}

#[test]
fn lasso_matches_the_reference_optimum_with_a_certified_gap() {
    let (x, y) = correlated(3);
    let lambda = 0.1 * crate::apps::lasso::lambda_max(&x, &y) as f32;
    let reference = reference_optimum(&x, &y, lambda, 3000, 1e-6).unwrap();
    let m = solve(&x, &y, lambda, 1e-10);
    let (objective, gap, kkt) = (
        m.metrics.final_objective,
        m.metrics.final_duality_gap,
        m.metrics.final_kkt_violation,
    );
    assert!(gap >= -1e-9 && gap <= 1e-9 * objective, "gap {gap}");
    assert!(kkt < 1e-3 * f64::from(lambda), "kkt {kkt}");
    assert!(
        (objective - reference).abs() <= 1e-8 * reference,
        "{objective} vs {reference}"
    );
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
    for (a, b) in m.coefficients.iter().zip(&cluster.coefficients) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn lasso_stops_at_the_target_objective_after_the_update_that_reaches_it() {
    let (x, y) = correlated(4);
    let lambda = 0.2 * crate::apps::lasso::lambda_max(&x, &y) as f32;
    let full = solve(&x, &y, lambda, 1e-7).metrics;
    let target = full.final_objective * (1.0 + 1e-3);
    let job = LassoSettings {
        lambda: Some(lambda),
        target_objective: Some(target),
        ..LassoSettings::default()
    };
    let m = solve_baseline(&x, &y, &job).unwrap().metrics;
    assert!(m.target_updates.is_some(), "{m:?}");
    assert!(m.final_objective <= target);
    // It stopped early: the run to convergence needed more updates.
    assert!(m.updates < full.updates);
    assert!(m.updates > 0);
}

#[test]
fn lasso_rejects_bad_shapes_and_lambda() {
    let (x, y) = correlated(1);
    let job = |lambda| LassoSettings {
        lambda: Some(lambda),
        ..LassoSettings::default()
    };
    assert!(solve_baseline(&x, &y[1..], &job(0.1)).is_err());
    assert!(solve_baseline(&x, &y, &job(-1.0)).is_err());
    assert!(solve_baseline(&x, &y, &job(f32::NAN)).is_err());
    let mut broken = x.clone();
    broken.row_indices[0] = 10_000;
    assert!(solve_baseline(&broken, &y, &job(0.1)).is_err());
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
    let d = x.n_columns();
    for lambda in [0.5f32, 5.0, 40.0] {
        // The baseline's worker, swept to machine precision.
        let mut cd =
            GsWorkerCore::build(x.clone(), y_c.clone(), f64::from(lambda), false, true).unwrap();
        let sweep = SweepOrder {
            coords: Coords::Range {
                start: 0,
                end: d as u32,
            },
            max_passes: 1,
            settle: 0.0,
            target: None,
            decrease: None,
        };
        for _ in 0..100_000 {
            let r = cd.sweep(&sweep).unwrap();
            cd.commit(1.0, &RowVector::zero(), 0.0).unwrap();
            if r.largest <= 1e-30 {
                break;
            }
        }
        // The solver holds the design as given: the stored non-zeros, nothing more.
        assert_eq!(cd.residual().len(), x.n_rows);
        let reference = explicitly_centred_reference(&x, &y_c, f64::from(lambda));
        let scale = reference.iter().fold(0.0f64, |m, b| m.max(b.abs()));
        assert!(scale > 0.1, "lambda {lambda}: {reference:?}");
        let b = cd.coefficients();
        for (got, want) in b.iter().zip(&reference) {
            assert!(
                (got - want).abs() <= 1e-9 * scale,
                "lambda {lambda}: {b:?} vs {reference:?}"
            );
        }
        // The baseline with fit_intercept runs that worker: the same model in f32.
        let job = LassoSettings {
            lambda: Some(lambda),
            fit_intercept: true,
            gap_tolerance: Some(1e-12),
            ..LassoSettings::default()
        };
        let out = solve_baseline(&x, &y_c, &job).unwrap();
        for (got, want) in out.coefficients.iter().zip(&reference) {
            assert!(
                (f64::from(*got) - want).abs() <= 1e-5 * scale,
                "lambda {lambda}"
            );
        }
        // scikit-learn's conditions for fit_intercept=True on the original design: with
        // b0 = mean(y) - mean(X) . b the residual y - X b - b0 sums to zero, and
        // |x_j^T r| <= lambda, with equality and the sign of b_j where b_j != 0.
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
