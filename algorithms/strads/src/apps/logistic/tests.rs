use super::*;
use crate::apps::lasso::SyntheticLasso;
use crate::kit::serial::Delivery;

/// The scheduled solver on a small separable problem, `max_rounds` rounds at `depth`.
fn separable_job(max_rounds: u64, depth: usize) -> LassoSettings {
    LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 200,
            n_features: 30,
            seed: 5,
            ..SyntheticLasso::default()
        },
        lambda: Some(0.01),
        block_size: 4,
        candidate_pool: 16,
        max_rounds,
        depth,
        ..LassoSettings::default()
    }
}

#[test]
fn sparse_logistic_fits_separable_data() {
    let job = separable_job(600, 2);
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
    let job = LassoSettings {
        synthetic: synthetic.clone(),
        lambda_fraction: 0.05,
        ..LassoSettings::default()
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
    let dense = LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 20_000,
            n_features: 20_000,
            nnz_per_column: 0,
            ..synthetic
        },
        ..LassoSettings::default()
    };
    let err = dense.validate().unwrap_err().to_string();
    assert!(err.contains("synthetic.nnz_per_column"), "{err}");
    assert!(err.contains("400000000 values"), "{err}");
}

#[test]
fn a_share_is_the_whole_designs_columns_signs_and_lambda_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classes.libsvm");
    std::fs::write(
        &path,
        "1 1:0.5 3:1.25\n0 2:2 3:-1\n1 1:-0.75 4:3\n0 2:0.1 4:0.2\n1 3:0.3\n",
    )
    .unwrap();
    let sparse = LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 200,
            n_features: 500,
            nnz_per_column: 5,
            n_nonzero: 10,
            seed: 2,
            ..SyntheticLasso::default()
        },
        ..LassoSettings::default()
    };
    let dense = LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 60,
            n_features: 40,
            ..SyntheticLasso::default()
        },
        ..LassoSettings::default()
    };
    let file = LassoSettings {
        data: Some(path.clone()),
        ..LassoSettings::default()
    };
    for job in [sparse, dense, file] {
        let (x, labels) = load(&job).unwrap();
        let d = x.n_columns();
        let share = load_share(&job, |_| Ok(1..d)).unwrap();
        assert_eq!(share.x, x.columns(1..d));
        let signs: Vec<f32> = labels
            .iter()
            .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
            .collect();
        assert_eq!(share.y, signs);
        assert_eq!(
            logistic_lambda_from_max(&job, share.lambda_max).to_bits(),
            logistic_lambda(&x, &labels, &job).to_bits()
        );
    }
    // A file with a regression target is refused, naming the row.
    std::fs::write(&path, "1 1:0.5\n2.5 2:1\n").unwrap();
    let err = load_share(
        &LassoSettings {
            data: Some(path),
            ..LassoSettings::default()
        },
        |_| Ok(0..1),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("row 2"), "{err}");
}

#[test]
fn dynamic_dealing_moves_rows_off_a_slow_worker_and_keeps_the_model() {
    // At depth 2 the pipeline drains for a deal.
    for depth in [1, 2] {
        let fixed = LassoSettings {
            straggler: Some(0),
            straggler_factor: 4.0,
            ..separable_job(1_000, depth)
        };
        let dynamic = LassoSettings {
            balance: crate::apps::lasso::Balance::Dynamic,
            ..fixed.clone()
        };
        LogisticApp::validate_config(&dynamic).unwrap();
        let (s_static, _) =
            crate::kit::run_serial::<LogisticApp>(&fixed, 2, Delivery::Late).unwrap();
        let (s_dynamic, _) =
            crate::kit::run_serial::<LogisticApp>(&dynamic, 2, Delivery::Late).unwrap();
        let (m_static, m_dynamic) = (s_static.metrics(), s_dynamic.metrics());
        assert_eq!(m_static.balance, None);
        let dealing = m_dynamic.balance.clone().unwrap();
        assert!(dealing.deals >= 1, "{dealing:?}");
        assert_eq!(dealing.rows.iter().sum::<u64>(), 200);
        assert!(dealing.rows[0] < dealing.rows[1], "{dealing:?}");
        if depth == 1 {
            // The same update rounds: the deal rounds come on top.
            assert_eq!(m_static.updates, m_dynamic.updates);
            assert_eq!(m_dynamic.rounds, m_static.rounds + dealing.deals);
        }
        let rel = (m_static.final_objective - m_dynamic.final_objective).abs()
            / m_static.final_objective.abs();
        // At depth 1 the updates are the static run's, summed in other groups; at depth 2
        // a drained round picks its coordinates with none in flight, so the trajectories
        // part (both still descending on separable data).
        let bound = if depth == 1 { 1e-6 } else { 1e-2 };
        assert!(rel < bound, "depth {depth}: objective {rel:e} apart");
    }
}

#[test]
fn a_worker_that_dies_with_a_round_in_flight_leaves_its_rows_to_the_others() {
    let job = LassoSettings {
        balance: crate::apps::lasso::Balance::Dynamic,
        ..separable_job(1_000, 1)
    };
    let (fixed, _) = crate::kit::run_serial::<LogisticApp>(&job, 2, Delivery::Late).unwrap();
    let died = crate::apps::lasso::tests::run_with_a_death::<LogisticApp, _>(&job, 2, 100);
    let (fixed, died) = (fixed.metrics(), died.metrics());
    let change = &died.balance.as_ref().unwrap().changes[0];
    assert_eq!(
        (change.died.as_slice(), change.workers.as_slice()),
        (["w1".to_string()].as_slice(), ["w0".to_string()].as_slice())
    );
    // The given-up round is scheduled again: as many updates as the fixed run.
    assert_eq!(died.updates, fixed.updates);
    let rel = (fixed.final_objective - died.final_objective).abs() / fixed.final_objective.abs();
    assert!(rel < 1e-2, "objective {rel:e} apart");
}
