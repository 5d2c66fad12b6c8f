use super::*;
use crate::core::lasso::lasso_config;
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
