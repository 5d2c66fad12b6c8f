use super::*;
use crate::core::scheduler::{ColumnCorrelationCache, DependencyFilter, LassoScheduler};
use crate::core::scheduler::{ScheduleMode, SchedulerConfig};
use petrel_ml::data::synthetic::{CorrelatedLassoParams, correlated_lasso};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;

// Partials the serial cluster and the tests need beyond the workers' own.
impl LassoWorkerState {
    /// Partial `||x_j||^2` over this worker's rows, for every column.
    pub(crate) fn column_sq_norm_partials(&self) -> Vec<f64> {
        match &self.centring {
            Some(c) => (0..self.x.n_columns())
                .map(|j| c.sq_norm(j, self.x.column(j).1))
                .collect(),
            None => self.x.column_sq_norms(),
        }
    }

    /// Partials `(||y||^2, ||y - s r||^2)` for the duality gap with dual point `s r`.
    pub(crate) fn dual_partials(&self, scale: f64) -> (f64, f64) {
        let offset = self.centring.as_ref().map_or(0.0, |c| c.offset);
        self.y
            .iter()
            .zip(&self.residual)
            .fold((0.0, 0.0), |(yy, d), (&y, &r)| {
                let (y, r) = (f64::from(y), r + offset);
                (yy + y * y, d + (y - scale * r).powi(2))
            })
    }
}

// The serial cluster the tests (here and of the apps) compare with.

/// Scheduler -> workers: the variables of this round and their current values (aligned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LassoDispatch {
    /// The round.
    pub(crate) round: u64,
    /// Coordinates.
    pub(crate) vars: Vec<usize>,
    /// Their current values.
    pub(crate) values: Vec<f32>,
}

/// Aggregator -> workers and scheduler: committed `(var, new - old)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CoordinateChanges {
    /// The round.
    pub(crate) round: u64,
    /// `(coordinate, new - old)`.
    pub(crate) changes: Vec<(usize, f32)>,
}

/// Configuration of the in-process driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LassoConfig {
    /// The L1 weight.
    pub(crate) lambda: f32,
    /// Workers (row blocks).
    pub(crate) n_workers: usize,
    /// Rounds to run.
    pub(crate) rounds: usize,
    /// The coordinate scheduler.
    pub(crate) scheduler: SchedulerConfig,
    /// `Some(rho)` enables the dependency filter with correlations from the data.
    pub(crate) filter_rho: Option<f32>,
}

/// Every worker plus the coefficient vector: a whole STRADS Lasso job in one process.
#[derive(Debug, Clone)]
pub(crate) struct LassoCluster {
    /// The workers' states.
    pub(crate) workers: Vec<LassoWorkerState>,
    /// The coefficients.
    pub(crate) coefficients: Vec<f32>,
    /// `||x_j||^2` per column.
    pub(crate) col_sq_norms: Vec<f64>,
    /// The L1 weight.
    pub(crate) lambda: f32,
    round: u64,
}

impl LassoCluster {
    /// Splits the rows of `x` into `n_workers` contiguous blocks.
    pub(crate) fn new(
        x: &SparseColumns,
        y: &[f32],
        lambda: f32,
        n_workers: usize,
    ) -> Result<Self, StradsModelError> {
        crate::core::baseline::check_shape(x, y.len(), "y")?;
        if n_workers == 0 || lambda.is_nan() || lambda < 0.0 {
            return Err(StradsModelError::InvalidConfig(
                "need n_workers >= 1 and lambda >= 0".into(),
            ));
        }
        let workers = crate::core::split_evenly(x.n_rows, n_workers)
            .into_iter()
            .map(|rows: Range<usize>| {
                LassoWorkerState::new(x.row_block(rows.clone()), y[rows].to_vec())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut col_sq_norms = vec![0.0; x.n_columns()];
        for worker in &workers {
            for (total, part) in col_sq_norms
                .iter_mut()
                .zip(worker.column_sq_norm_partials())
            {
                *total += part;
            }
        }
        Ok(LassoCluster {
            workers,
            coefficients: vec![0.0; x.n_columns()],
            col_sq_norms,
            lambda,
            round: 0,
        })
    }

    /// One push -> pull -> apply round for `vars`; returns the committed changes.
    pub(crate) fn round(&mut self, vars: &[usize]) -> CoordinateChanges {
        let dispatch = LassoDispatch {
            round: self.round,
            values: vars.iter().map(|&j| self.coefficients[j]).collect(),
            vars: vars.to_vec(),
        };
        let mut summed = vec![0.0f32; vars.len()];
        for worker in &self.workers {
            for (s, z) in summed
                .iter_mut()
                .zip(worker.push(&dispatch.vars, &dispatch.values))
            {
                *s += z;
            }
        }
        let new_values = pull(vars, &summed, &self.col_sq_norms, self.lambda);
        let mut changes = Vec::with_capacity(vars.len());
        for (&j, &value) in vars.iter().zip(&new_values) {
            let delta = value - self.coefficients[j];
            self.coefficients[j] = value;
            // Zero changes are kept: the scheduler needs them to lower priorities.
            changes.push((j, delta));
        }
        for worker in &mut self.workers {
            worker.apply_deltas(&changes);
        }
        self.round += 1;
        CoordinateChanges {
            round: self.round - 1,
            changes,
        }
    }

    /// `1/2 ||r||^2 + lambda ||b||_1` now.
    pub(crate) fn objective(&self) -> f64 {
        let sq: f64 = self
            .workers
            .iter()
            .map(LassoWorkerState::squared_residual)
            .sum();
        objective(sq, &self.coefficients, self.lambda)
    }

    /// `X^T r` for all coordinates, summed over workers.
    pub(crate) fn x_t_residual(&self) -> Vec<f64> {
        let all: Vec<usize> = (0..self.coefficients.len()).collect();
        let mut total = vec![0.0; all.len()];
        for worker in &self.workers {
            for (t, p) in total.iter_mut().zip(worker.correlation_with_residual(&all)) {
                *t += p;
            }
        }
        total
    }

    /// Max KKT violation now.
    pub(crate) fn kkt_violation(&self) -> f64 {
        kkt_violation(&self.x_t_residual(), &self.coefficients, self.lambda)
    }

    /// Duality gap now.
    pub(crate) fn duality_gap(&self) -> f64 {
        let scale = dual_scale(&self.x_t_residual(), self.lambda);
        let (y_sq, diff_sq) = self
            .workers
            .iter()
            .map(|w| w.dual_partials(scale))
            .fold((0.0, 0.0), |(a, b), (c, d)| (a + c, b + d));
        duality_gap(self.objective(), y_sq, diff_sq)
    }
}

/// Reference optimum by serial cyclic coordinate descent (one coordinate per round, one
/// worker) until the KKT violation is below `kkt_tolerance` or `max_sweeps` full sweeps.
pub(crate) fn reference_optimum(
    x: &SparseColumns,
    y: &[f32],
    lambda: f32,
    max_sweeps: usize,
    kkt_tolerance: f64,
) -> Result<f64, StradsModelError> {
    let mut cluster = LassoCluster::new(x, y, lambda, 1)?;
    let d = x.n_columns();
    for _ in 0..max_sweeps {
        for j in 0..d {
            cluster.round(&[j]);
        }
        if cluster.kkt_violation() < kkt_tolerance {
            break;
        }
    }
    Ok(cluster.objective())
}

/// Convenience: a [`LassoConfig`] with the given mode and parallelism.
pub(crate) fn lasso_config(
    mode: ScheduleMode,
    lambda: f32,
    block_size: usize,
    n_workers: usize,
    rounds: usize,
    filter_rho: Option<f32>,
    seed: u64,
) -> LassoConfig {
    let mut scheduler = SchedulerConfig::new(mode, block_size);
    scheduler.seed = seed;
    LassoConfig {
        lambda,
        n_workers,
        rounds,
        scheduler,
        filter_rho,
    }
}

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

/// Scheduler + P in-process workers for up to `config.rounds` rounds; after each round
/// `after` sees the cluster and the updates so far, and stops the run by returning `true`.
fn drive_rounds(
    x: &SparseColumns,
    y: &[f32],
    config: &LassoConfig,
    mut after: impl FnMut(&LassoCluster, u64) -> bool,
) -> Result<LassoCluster, StradsModelError> {
    let mut cluster = LassoCluster::new(x, y, config.lambda, config.n_workers)?;
    let mut scheduler = build_scheduler(x, config)?;
    let mut updates = 0u64;
    for _ in 0..config.rounds {
        let vars = scheduler.next_round();
        updates += vars.len() as u64;
        let committed = cluster.round(&vars);
        scheduler.commit(&committed.changes);
        if after(&cluster, updates) {
            break;
        }
    }
    Ok(cluster)
}

/// Serial driver: scheduler + P in-process workers for `config.rounds` rounds.
fn run_lasso(
    x: &SparseColumns,
    y: &[f32],
    config: &LassoConfig,
) -> Result<LassoRun, StradsModelError> {
    let mut objective_per_round = Vec::with_capacity(config.rounds);
    let mut updates_per_round = Vec::with_capacity(config.rounds);
    let cluster = drive_rounds(x, y, config, |cluster, updates| {
        objective_per_round.push(cluster.objective());
        updates_per_round.push(updates);
        false
    })?;
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
    let target = optimum_objective + relative_tolerance * optimum_objective.abs();
    let mut reached = None;
    drive_rounds(x, y, config, |cluster, updates| {
        let f = cluster.objective();
        if f <= target {
            reached = Some(updates);
        }
        !f.is_finite() || f <= target
    })?;
    Ok(reached)
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

// The objective and the duality gap of the serial cluster's state.

/// `1/2 ||r||^2 + lambda ||b||_1` given the summed squared residual.
pub(crate) fn objective(squared_residual: f64, b: &[f32], lambda: f32) -> f64 {
    0.5 * squared_residual + f64::from(lambda) * b.iter().map(|v| f64::from(v.abs())).sum::<f64>()
}

/// Duality gap `P(b) - D(theta)` with `D(theta) = 1/2||y||^2 - 1/2||y - theta||^2`; an upper
/// bound on `P(b) - P*`, so it certifies convergence without knowing the optimum.
pub(crate) fn duality_gap(primal: f64, y_sq: f64, y_minus_theta_sq: f64) -> f64 {
    primal - (0.5 * y_sq - 0.5 * y_minus_theta_sq)
}

#[cfg(test)]
mod benchmark {
    use super::{LassoCluster, lasso_config, reference_optimum, updates_to_tolerance};
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
