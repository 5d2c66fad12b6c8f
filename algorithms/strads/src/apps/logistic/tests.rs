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

#[test]
fn a_sparse_synthetic_problem_is_the_lasso_design_labelled_by_its_response() {
    let synthetic = SyntheticLasso {
        n_samples: 300,
        n_features: 2_000,
        nnz_per_column: 6,
        n_nonzero: 20,
        seed: 4,
        ..SyntheticLasso::default()
    };
    let job = LassoJob {
        synthetic: synthetic.clone(),
        lambda_fraction: 0.05,
        ..LassoJob::default()
    };
    job.validate().unwrap();
    let (x, labels) = load(&job).unwrap();
    let (lasso_x, y) = job.load_sparse().unwrap();
    assert_eq!(x, lasso_x);
    assert_eq!(x.row_indices.len(), 2_000 * 6);
    let positive = labels.iter().filter(|&&l| l == 1.0).count();
    assert!(
        labels
            .iter()
            .zip(&y)
            .all(|(&l, &v)| l == if v > 0.0 { 1.0 } else { 0.0 })
    );
    assert!((60..240).contains(&positive), "{positive} positive of 300");
    // The baseline fits it.
    let metrics = run_baseline(&job).unwrap();
    assert!(
        metrics.final_training_accuracy > 0.8,
        "accuracy {}",
        metrics.final_training_accuracy
    );
    // The same size as a dense design is refused before anything is built, naming the
    // key that makes it sparse.
    let dense = LassoJob {
        synthetic: SyntheticLasso {
            n_samples: 20_000,
            n_features: 20_000,
            nnz_per_column: 0,
            ..synthetic
        },
        ..LassoJob::default()
    };
    let err = dense.validate().unwrap_err().to_string();
    assert!(err.contains("synthetic.nnz_per_column"), "{err}");
    assert!(err.contains("400000000 values"), "{err}");
}
