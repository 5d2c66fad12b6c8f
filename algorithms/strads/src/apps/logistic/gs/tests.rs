use super::super::{load, logistic_lambda};
use super::*;
use crate::apps::lasso::SyntheticLasso;
use crate::core::baseline::tests::solve;
use crate::core::baseline::{CdStop, CyclicMargin};
use crate::core::loss::{Logistic, SquaredHinge};
use crate::kit::StradsSettings;
use crate::kit::serial::Delivery;

fn job(nnz_per_column: usize) -> LassoSettings {
    LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 300,
            n_features: 600,
            nnz_per_column,
            n_nonzero: 20,
            seed: 4,
            ..SyntheticLasso::default()
        },
        lambda_fraction: 0.05,
        ..LassoSettings::default()
    }
}

#[test]
fn the_default_solver_is_gauss_seidel_and_a_scheduling_knob_keeps_the_scheduled_one() {
    assert_eq!(
        job(0).resolved_solver(),
        crate::apps::lasso::LassoSolver::GaussSeidel
    );
    let scheduled = LassoSettings {
        block_size: 8,
        ..job(0)
    };
    assert_eq!(
        scheduled.resolved_solver(),
        crate::apps::lasso::LassoSolver::Scheduled
    );
}

#[test]
fn one_worker_is_the_baseline_update_for_update() {
    for nnz in [0, 6] {
        let job = job(nnz);
        let (x, labels) = load(&job).unwrap();
        let lambda = logistic_lambda(&x, &labels, &job);
        let mut cd = CyclicMargin::<Logistic>::new(&x, &labels, lambda).unwrap();
        let report = solve(&mut cd, &CdStop::default());
        let (sched, _) = crate::kit::run_serial::<LogisticGsApp>(&job, 1, Delivery::Late).unwrap();
        let m = sched.metrics();
        assert_eq!(m.updates, report.updates, "nnz {nnz}");
        assert_eq!(m.final_objective, report.objective, "nnz {nnz}");
        assert_eq!(sched.coefficients(), cd.coefficients_f64(), "nnz {nnz}");
        assert_eq!(m.rounds as usize, report.full_sweeps);
        let run = sched.run_metrics(&job);
        assert!(run.converged, "{}", run.stop_reason);
        assert!(
            run.stop_reason.contains("full sweep"),
            "{}",
            run.stop_reason
        );
    }
}

#[test]
fn several_workers_lower_the_objective_every_round_to_the_baselines_optimum() {
    for nnz in [0, 6] {
        let job = job(nnz);
        let (x, labels) = load(&job).unwrap();
        let lambda = logistic_lambda(&x, &labels, &job);
        let mut cd = CyclicMargin::<Logistic>::new(&x, &labels, lambda).unwrap();
        let optimum = solve(&mut cd, &CdStop::default()).objective;
        for workers in [2, 4] {
            let (sched, _) =
                crate::kit::run_serial::<LogisticGsApp>(&job, workers, Delivery::Late).unwrap();
            let m = sched.metrics();
            let trace: Vec<f64> = m.trace.iter().map(|p| p.objective).collect();
            assert!(
                trace.windows(2).all(|w| w[1] <= w[0]),
                "nnz {nnz}, {workers} workers: {trace:?}"
            );
            assert!(
                (m.final_objective - optimum).abs() <= 1e-5 * optimum,
                "nnz {nnz}, {workers} workers: {} against {optimum}",
                m.final_objective
            );
            assert!(sched.run_metrics(&job).converged);
            let accuracy = cd.training_accuracy();
            assert!(
                (m.final_training_accuracy - accuracy).abs() < 0.02,
                "{} against {accuracy}",
                m.final_training_accuracy
            );
        }
    }
}

#[test]
fn the_round_limit_stops_a_run_and_says_it_did_not_converge() {
    let job = LassoSettings {
        max_rounds: 2,
        ..job(0)
    };
    let (sched, _) = crate::kit::run_serial::<LogisticGsApp>(&job, 2, Delivery::Late).unwrap();
    assert_eq!(sched.metrics().rounds, 2);
    let run = sched.run_metrics(&job);
    assert!(!run.converged);
    assert!(
        run.stop_reason.contains("round limit"),
        "{}",
        run.stop_reason
    );
}

#[test]
fn a_scheduler_refuses_answers_that_do_not_fit_the_design() {
    let job = job(6);
    let design = load_share(&job, |_| Ok(0..0)).unwrap();
    let mut sched = LogisticGsScheduling::new(&design, &job, 1).unwrap();
    assert!(matches!(sched.schedule(1, 0), Step::Run(_)));
    let phase = crate::core::baseline::LogisticPhase {
        after_full: 1.0,
        gap: 0.0,
        converged: false,
        active_sweeps: 0,
        objective: 1.0,
    };
    let bad = LogisticSwept {
        changed: vec![600],
        values: vec![1.0],
        margin_delta: None,
        phase,
        updates: 1,
        correct: 0,
    };
    let err = sched.pull(1, vec![bad], Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("600 features"), "{err}");
}

#[test]
fn the_loss_setting_picks_the_kernels_loss_and_only_the_logistic_job_takes_it() {
    let hinge: LassoSettings = toml::from_str("loss = \"squared-hinge\"").unwrap();
    assert_eq!(hinge.loss, Some(ClassifierLoss::SquaredHinge));
    <LogisticApp as StradsJob>::validate_config(&hinge).unwrap();
    // The Lasso's loss is the squared loss.
    let err = hinge.validate().unwrap_err().to_string();
    assert!(
        err.contains("loss") && err.contains("logistic only"),
        "{err}"
    );
    // The scheduled solver is logistic only: refused naming both settings.
    let scheduled = LassoSettings {
        solver: crate::apps::lasso::LassoSolver::Scheduled,
        ..hinge.clone()
    };
    let err = <LogisticApp as StradsJob>::validate_config(&scheduled)
        .unwrap_err()
        .to_string();
    assert!(err.contains("loss") && err.contains("solver"), "{err}");
    // One worker runs the kernel's squared-hinge baseline, update for update, at the
    // squared hinge's lambda_max (4 times the logistic one).
    let job = LassoSettings {
        loss: Some(ClassifierLoss::SquaredHinge),
        ..job(6)
    };
    let (x, labels) = load(&job).unwrap();
    let lambda = logistic_lambda(&x, &labels, &job);
    assert_eq!(
        lambda,
        4.0 * logistic_lambda(
            &x,
            &labels,
            &LassoSettings {
                loss: None,
                ..job.clone()
            }
        )
    );
    let mut cd = CyclicMargin::<SquaredHinge>::new(&x, &labels, lambda).unwrap();
    let report = solve(&mut cd, &CdStop::default());
    let (sched, _) = crate::kit::run_serial::<LogisticGsApp>(&job, 1, Delivery::Late).unwrap();
    assert_eq!(sched.metrics().final_objective, report.objective);
    assert_eq!(sched.coefficients(), cd.coefficients_f64());
    assert!(sched.metrics().nonzeros > 0);
}
