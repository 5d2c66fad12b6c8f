use super::*;
use crate::apps::lasso::SyntheticLasso;
use crate::kit::serial::Delivery;

#[test]
fn sparse_logistic_fits_separable_data() {
    let job = LassoJob {
        synthetic: SyntheticLasso {
            n_samples: 200,
            n_features: 30,
            seed: 5,
            ..SyntheticLasso::default()
        },
        lambda: Some(0.01),
        block_size: 4,
        candidate_pool: 16,
        max_rounds: 600,
        depth: 2,
        ..LassoJob::default()
    };
    let (sched, _) = crate::kit::run_serial::<LogisticApp>(&job, 2, Delivery::Late).unwrap();
    let m = sched.metrics();
    let first = m.trace.first().unwrap().objective;
    assert!(
        m.final_objective < 0.5 * first,
        "{first} -> {}",
        m.final_objective
    );
    assert!(
        m.final_training_accuracy > 0.95,
        "accuracy {}",
        m.final_training_accuracy
    );
    assert!(m.nonzeros > 0);
}
