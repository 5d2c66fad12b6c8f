use super::*;
use crate::core::lasso::tests::LassoConfig;
use crate::core::scheduler::{ColumnCorrelationCache, DependencyFilter, LassoScheduler};

/// Result of [`run_sparse_logistic`], the scheduled solver's serial driver.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogisticRun {
    /// The coefficients.
    pub coefficients: Vec<f32>,
    /// Objective after each round.
    pub objective_per_round: Vec<f64>,
    /// Training accuracy at the end.
    pub training_accuracy: f64,
}

/// Serial driver sharing [`LassoConfig`] (lambda, workers, rounds, scheduler, filter).
pub(crate) fn run_sparse_logistic(
    x: &SparseColumns,
    labels: &[f32],
    config: &LassoConfig,
) -> Result<LogisticRun, StradsModelError> {
    if x.n_rows != labels.len() || config.n_workers == 0 {
        return Err(StradsModelError::DimensionMismatch(
            "labels must match rows and n_workers >= 1".into(),
        ));
    }
    let mut workers = crate::core::split_evenly(x.n_rows, config.n_workers)
        .into_iter()
        .map(|rows| LogisticWorkerState::new(x.row_block(rows.clone()), &labels[rows]))
        .collect::<Result<Vec<_>, _>>()?;
    let filter = config.filter_rho.map(|rho| DependencyFilter {
        rho,
        oracle: Box::new(ColumnCorrelationCache::new(
            std::sync::Arc::new(x.clone()),
            1 << 20,
        )),
    });
    let mut scheduler = LassoScheduler::new(x.n_columns(), config.scheduler.clone(), filter)?;
    let mut b = vec![0.0f32; x.n_columns()];
    let mut objective_per_round = Vec::with_capacity(config.rounds);
    for _ in 0..config.rounds {
        let vars = scheduler.next_round();
        let values: Vec<f32> = vars.iter().map(|&j| b[j]).collect();
        let mut gradient = vec![0.0f32; vars.len()];
        let mut curvature = vec![0.0f32; vars.len()];
        for worker in &workers {
            let (g, h) = worker.push(&vars);
            gradient.iter_mut().zip(g).for_each(|(a, v)| *a += v);
            curvature.iter_mut().zip(h).for_each(|(a, v)| *a += v);
        }
        let new_values = pull(&values, &gradient, &curvature, config.lambda);
        let changes: Vec<(usize, f32)> = vars
            .iter()
            .zip(new_values.iter().zip(&values))
            .map(|(&j, (&new, &old))| (j, new - old))
            .collect();
        for (&j, &new) in vars.iter().zip(&new_values) {
            b[j] = new;
        }
        workers.iter_mut().for_each(|w| w.apply_deltas(&changes));
        scheduler.commit(&changes);
        let loss: f64 = workers.iter().map(LogisticWorkerState::loss).sum();
        let l1: f64 = b.iter().map(|v| f64::from(v.abs())).sum();
        objective_per_round.push(loss + f64::from(config.lambda) * l1);
    }
    let correct: usize = workers.iter().map(LogisticWorkerState::correct).sum();
    Ok(LogisticRun {
        coefficients: b,
        objective_per_round,
        training_accuracy: correct as f64 / labels.len().max(1) as f64,
    })
}

use crate::core::lasso::tests::lasso_config;
use crate::core::scheduler::ScheduleMode;
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};

#[test]
fn stable_helpers() {
    assert!((log_one_plus_exp_neg(0.0) - 2f64.ln()).abs() < 1e-12);
    assert!(log_one_plus_exp_neg(1000.0) < 1e-300);
    assert!((log_one_plus_exp_neg(-1000.0) - 1000.0).abs() < 1e-9);
    assert!((sigmoid(-1000.0)).abs() < 1e-300 && (sigmoid(1000.0) - 1.0).abs() < 1e-12);
}

#[test]
fn learns_separable_binary_data() {
    let p = separable_classification(&ClassificationParams {
        n_samples: 200,
        n_features: 20,
        n_classes: 2,
        margin: 0.2,
        seed: 3,
    })
    .unwrap();
    let x = p.dataset.to_columns();
    for (mode, block, filter) in [
        (ScheduleMode::Cyclic, 1, None),
        (ScheduleMode::Dynamic, 4, Some(0.3)),
    ] {
        let config = lasso_config(mode, 0.1, block, 2, 1500 / block, filter, 1);
        let run = run_sparse_logistic(&x, &p.dataset.labels, &config).unwrap();
        let obj = &run.objective_per_round;
        if block == 1 {
            assert!(
                obj.windows(2).all(|w| w[1] <= w[0] + 1e-6),
                "serial QUB steps are monotone"
            );
        }
        assert!(
            *obj.last().unwrap() < 0.3 * obj[0],
            "{} -> {}",
            obj[0],
            obj.last().unwrap()
        );
        assert!(
            run.training_accuracy > 0.95,
            "accuracy {}",
            run.training_accuracy
        );
    }
}
