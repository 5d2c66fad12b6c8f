use super::*;
use crate::core::scheduler::{ColumnCorrelationCache, DependencyFilter, LassoScheduler};
use petrel_ml::data::synthetic::{CorrelatedLassoParams, correlated_lasso};
use std::sync::Arc;

// The scheduled solver's serial drivers: a scheduler and in-process workers.

/// Result of [`run_lasso`].
#[derive(Debug, Clone, PartialEq)]
struct LassoRun {
    /// The coefficients.
    coefficients: Vec<f32>,
    /// Objective after each round.
    objective_per_round: Vec<f64>,
    /// Cumulative coordinate updates (vars dispatched) after each round.
    updates_per_round: Vec<u64>,
    /// KKT violation at the end.
    final_kkt_violation: f64,
    /// Duality gap at the end.
    final_duality_gap: f64,
}

fn build_scheduler(
    x: &SparseColumns,
    config: &LassoConfig,
) -> Result<LassoScheduler, StradsModelError> {
    let filter = config.filter_rho.map(|rho| DependencyFilter {
        rho,
        oracle: Box::new(ColumnCorrelationCache::new(Arc::new(x.clone()), 1 << 20)),
    });
    LassoScheduler::new(x.n_columns(), config.scheduler.clone(), filter)
}

/// Serial driver: scheduler + P in-process workers for `config.rounds` rounds.
fn run_lasso(
    x: &SparseColumns,
    y: &[f32],
    config: &LassoConfig,
) -> Result<LassoRun, StradsModelError> {
    let mut cluster = LassoCluster::new(x, y, config.lambda, config.n_workers)?;
    let mut scheduler = build_scheduler(x, config)?;
    let mut objective_per_round = Vec::with_capacity(config.rounds);
    let mut updates_per_round = Vec::with_capacity(config.rounds);
    let mut updates = 0u64;
    for _ in 0..config.rounds {
        let vars = scheduler.next_round();
        updates += vars.len() as u64;
        let committed = cluster.round(&vars);
        scheduler.commit(&committed.changes);
        objective_per_round.push(cluster.objective());
        updates_per_round.push(updates);
    }
    tracing::debug!(
        rounds = config.rounds,
        objective = objective_per_round.last().copied(),
        "lasso run finished"
    );
    Ok(LassoRun {
        final_kkt_violation: cluster.kkt_violation(),
        final_duality_gap: cluster.duality_gap(),
        coefficients: cluster.coefficients,
        objective_per_round,
        updates_per_round,
    })
}

/// Coordinate updates until the objective is within `relative_tolerance` of
/// `optimum_objective` (i.e. `f <= f* (1 + tol)`), or `None` if `config.rounds` rounds are
/// not enough (or the run diverges). Used to compare scheduling modes.
fn updates_to_tolerance(
    x: &SparseColumns,
    y: &[f32],
    config: &LassoConfig,
    optimum_objective: f64,
    relative_tolerance: f64,
) -> Result<Option<u64>, StradsModelError> {
    let mut cluster = LassoCluster::new(x, y, config.lambda, config.n_workers)?;
    let mut scheduler = build_scheduler(x, config)?;
    let target = optimum_objective + relative_tolerance * optimum_objective.abs();
    let mut updates = 0u64;
    for _ in 0..config.rounds {
        let vars = scheduler.next_round();
        updates += vars.len() as u64;
        let committed = cluster.round(&vars);
        scheduler.commit(&committed.changes);
        let f = cluster.objective();
        if !f.is_finite() {
            return Ok(None);
        }
        if f <= target {
            return Ok(Some(updates));
        }
    }
    Ok(None)
}

fn problem(correlation: f32, seed: u64) -> (SparseColumns, Vec<f32>) {
    let p = correlated_lasso(&CorrelatedLassoParams {
        n_samples: 200,
        n_features: 60,
        group_size: 6,
        correlation,
        n_nonzero: 6,
        noise_std: 0.05,
        seed,
    })
    .unwrap();
    (p.columns(), p.y)
}

#[test]
fn soft_threshold_and_pull() {
    assert_eq!(soft_threshold(3.0, 1.0), 2.0);
    assert_eq!(soft_threshold(-3.0, 1.0), -2.0);
    assert_eq!(soft_threshold(0.5, 1.0), 0.0);
    assert_eq!(
        pull(&[0, 1, 2], &[3.0, 0.5, 9.0], &[2.0, 1.0, 0.0], 1.0),
        vec![1.0, 0.0, 0.0]
    );
}

#[test]
fn push_matches_single_worker_exact_minimiser() {
    let x = ndarray::array![[1.0f32, 2.0], [3.0, 0.0], [0.0, 1.0]];
    let y = vec![1.0f32, 2.0, 3.0];
    let cols = SparseColumns::from_dense(&x);
    let whole = LassoWorkerState::new(cols.clone(), y.clone()).unwrap();
    let top = LassoWorkerState::new(cols.row_block(0..2), y[0..2].to_vec()).unwrap();
    let bottom = LassoWorkerState::new(cols.row_block(2..3), y[2..3].to_vec()).unwrap();
    let vars = [1, 0];
    let values = [0.5f32, 0.0];
    let mut whole_w = whole.clone();
    let mut top_w = top.clone();
    let mut bottom_w = bottom.clone();
    // Same residual everywhere: set b_1 = 0.5 first.
    for w in [&mut whole_w, &mut top_w, &mut bottom_w] {
        w.apply_deltas(&[(1, 0.5)]);
    }
    let full = whole_w.push(&vars, &values);
    let parts: Vec<f32> = top_w
        .push(&vars, &values)
        .iter()
        .zip(bottom_w.push(&vars, &values))
        .map(|(a, b)| a + b)
        .collect();
    for (a, b) in full.iter().zip(&parts) {
        assert!((a - b).abs() < 1e-5);
    }
    // z_1 = x_1^T (r + x_1 * 0.5) = x_1^T y = 2 + 3 = 5.
    assert!((full[0] - 5.0).abs() < 1e-5);
    assert!((whole_w.squared_residual() - (0.0 + 4.0 + 6.25)).abs() < 1e-9);
}

#[test]
fn serial_lasso_converges_to_kkt_point() {
    let (x, y) = problem(0.5, 11);
    let lambda = 0.05;
    let config = lasso_config(ScheduleMode::Cyclic, lambda, 1, 3, 60 * 60, None, 0);
    let run = run_lasso(&x, &y, &config).unwrap();
    let obj = &run.objective_per_round;
    assert!(
        obj.windows(2).all(|w| w[1] <= w[0] + 1e-9),
        "serial CD must be monotone"
    );
    assert!(
        run.final_kkt_violation < 1e-3 * f64::from(lambda),
        "kkt {}",
        run.final_kkt_violation
    );
    assert!(run.final_duality_gap >= -1e-6);
    assert!(
        run.final_duality_gap < 1e-3 * obj.last().unwrap(),
        "gap {}",
        run.final_duality_gap
    );
}

#[test]
fn parallel_dynamic_with_filter_converges_and_satisfies_kkt() {
    let (x, y) = problem(0.9, 5);
    let lambda = 0.05;
    let optimum = reference_optimum(&x, &y, lambda, 500, 1e-6).unwrap();
    let config = lasso_config(ScheduleMode::Dynamic, lambda, 4, 3, 3000, Some(0.3), 1);
    let run = run_lasso(&x, &y, &config).unwrap();
    let last = *run.objective_per_round.last().unwrap();
    println!(
        "last {last} opt {optimum} kkt {} gap {}",
        run.final_kkt_violation, run.final_duality_gap
    );
    assert!((last - optimum) / optimum < 1e-3, "{last} vs {optimum}");
    assert!(
        run.final_kkt_violation < 1e-3 * f64::from(lambda),
        "kkt {}",
        run.final_kkt_violation
    );
    assert!(
        run.final_duality_gap < 1e-3 * optimum,
        "gap {}",
        run.final_duality_gap
    );
    let reached = updates_to_tolerance(&x, &y, &config, optimum, 1e-3).unwrap();
    assert!(reached.is_some());
}

#[cfg(test)]
mod benchmark {
    use super::updates_to_tolerance;
    use crate::core::lasso::*;
    use crate::core::scheduler::ScheduleMode;
    use petrel_ml::data::synthetic::{CorrelatedLassoParams, correlated_lasso};

    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Coordinate updates to reach 1e-3 relative objective gap, per scheduling mode; run with
    /// `cargo test lasso_scheduling_benchmark -- --ignored --nocapture` (a few minutes in
    /// the dev profile). `None` = not reached within 200k updates (diverged or too slow).
    /// Settings via BENCH_N, BENCH_D, BENCH_GROUP, BENCH_CORR, BENCH_LAMBDA (fraction of
    /// lambda_max), BENCH_RHO, BENCH_U (comma list).
    #[test]
    #[ignore = "benchmark: prints a table, takes minutes in dev profile"]
    fn lasso_scheduling_benchmark() {
        let n_samples: usize = env_or("BENCH_N", 400);
        let n_features: usize = env_or("BENCH_D", 1000);
        let group_size: usize = env_or("BENCH_GROUP", 100);
        let correlation: f32 = env_or("BENCH_CORR", 0.95);
        let lambda_fraction: f64 = env_or("BENCH_LAMBDA", 0.05);
        let rho: f32 = env_or("BENCH_RHO", 0.3);
        let blocks: Vec<usize> = std::env::var("BENCH_U")
            .ok()
            .map(|v| v.split(',').filter_map(|b| b.parse().ok()).collect())
            .unwrap_or_else(|| vec![16, 64]);
        let p = correlated_lasso(&CorrelatedLassoParams {
            n_samples,
            n_features,
            group_size,
            correlation,
            n_nonzero: 10,
            noise_std: 0.1,
            seed: 42,
        })
        .unwrap();
        let (x, y) = (p.columns(), p.y);
        let cluster = LassoCluster::new(&x, &y, 0.0, 1).unwrap();
        let lambda_max = cluster
            .x_t_residual()
            .iter()
            .fold(0.0f64, |m, g| m.max(g.abs()));
        let lambda = (lambda_fraction * lambda_max) as f32;
        let optimum = reference_optimum(&x, &y, lambda, 5000, 1e-7).unwrap();
        println!(
            "n={n_samples} d={n_features} group={group_size} corr={correlation} \
             lambda={lambda} rho={rho} f*={optimum}"
        );
        for block in blocks {
            for (mode, filter) in [
                (ScheduleMode::Dynamic, Some(rho)),
                (ScheduleMode::Dynamic, None),
                (ScheduleMode::Random, None),
                (ScheduleMode::Random, Some(rho)),
                (ScheduleMode::Cyclic, None),
            ] {
                let counts: Vec<Option<u64>> = (0..3)
                    .map(|seed| {
                        let config =
                            lasso_config(mode, lambda, block, 4, 200_000 / block, filter, seed);
                        updates_to_tolerance(&x, &y, &config, optimum, 1e-3).unwrap()
                    })
                    .collect();
                println!("U={block:2} {mode:?} filter={filter:?}: {counts:?}");
            }
        }
    }
}
