use super::*;
use crate::apps::lasso::baseline::solve_baseline;
use crate::apps::lasso::metrics::LassoOutcome;
use crate::apps::lasso::{LassoSolver, SyntheticLasso};
use crate::core::gauss_seidel::Coords;
use crate::kit::StradsSettings;
use crate::kit::serial::Delivery;
use petrel_ml::data::SparseColumns;

fn job() -> LassoSettings {
    LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 300,
            n_features: 3000,
            nnz_per_column: 10,
            n_nonzero: 30,
            ..SyntheticLasso::default()
        },
        lambda_fraction: 0.1,
        gap_tolerance: Some(1e-8),
        solver: LassoSolver::GaussSeidel,
        ..LassoSettings::default()
    }
}

fn baseline(job: &LassoSettings) -> (f64, u64) {
    let (x, y) = job.load().unwrap();
    let outcome = solve_baseline(&x, &y, job).unwrap();
    (outcome.metrics.final_objective, outcome.metrics.updates)
}

fn assert_descends(m: &crate::apps::lasso::LassoMetrics, workers: usize) {
    for pair in m.objective.windows(2) {
        assert!(
            pair[1].objective <= pair[0].objective * (1.0 + 1e-9),
            "{workers} workers: objective rose {} -> {}",
            pair[0].objective,
            pair[1].objective
        );
    }
}

fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(f64::MIN_POSITIVE)
}

#[test]
fn one_worker_makes_the_baselines_updates_and_reaches_its_objective() {
    let job = job();
    let (f_base, base_updates) = baseline(&job);
    let out = run_without_actors(&job, 1).unwrap();
    let m = &out.metrics;
    assert_eq!(m.mode, "gauss-seidel");
    assert!(
        relative(m.final_objective, f_base) <= 1e-6,
        "{} vs {f_base}",
        m.final_objective
    );
    assert!(m.relative_gap() <= 1e-8, "certified: {}", m.relative_gap());
    let ratio = m.updates as f64 / base_updates as f64;
    assert!(
        (0.98..=1.02).contains(&ratio),
        "{} vs {base_updates}",
        m.updates
    );
    // A certification at the start, after every full sweep and at the end.
    assert!(m.evaluations.len() >= 3);
    assert_eq!(m.evaluations[0].updates, 0);
}

#[test]
fn the_start_is_certified_without_a_round_as_the_baseline_certifies_it() {
    let job = job();
    let (x, y) = job.load().unwrap();
    let base = solve_baseline(&x, &y, &job).unwrap();
    let start = &base.metrics.evaluations[0];
    assert_eq!(start.updates, 0);
    for workers in [1, 2] {
        let m = run_without_actors(&job, workers).unwrap().metrics;
        let first = &m.evaluations[0];
        assert_eq!((first.round, first.updates), (0, 0), "{workers} workers");
        assert!(relative(first.objective, start.objective) <= 1e-12);
        assert!(relative(first.duality_gap, start.duality_gap) <= 1e-9);
        assert!(relative(first.kkt_violation, start.kkt_violation) <= 1e-9);
        // Round 0 is already a sweep.
        assert_eq!(m.objective[0].round, 0, "{workers} workers");
    }
}

#[test]
fn full_sweep_chunks_grow_while_the_workers_sweeps_do_not_interfere() {
    // A round latency that asks for ~50 columns per worker and round; the same chunk
    // held fixed (`gs_chunk`) for comparison.
    let mut job = job();
    job.round_latency_ms = 0.002;
    let (f_base, _) = baseline(&job);
    let grown = run_without_actors(&job, 2).unwrap().metrics;
    let fixed_job = LassoSettings {
        gs_chunk: grown.block_size,
        ..job.clone()
    };
    let fixed = run_without_actors(&fixed_job, 2).unwrap().metrics;
    assert!(grown.block_size <= 60, "base chunk {}", grown.block_size);
    for m in [&grown, &fixed] {
        assert!(relative(m.final_objective, f_base) <= 1e-6);
        assert!(m.relative_gap() <= 1e-8);
    }
    assert!(
        grown.rounds * 2 < fixed.rounds,
        "{} rounds against {} with a fixed chunk",
        grown.rounds,
        fixed.rounds
    );
    assert!(
        (grown.updates as f64) <= 1.1 * fixed.updates as f64,
        "{} updates against {}",
        grown.updates,
        fixed.updates
    );
}

#[test]
fn every_certificate_after_a_full_sweep_rides_with_a_sweep_round() {
    let job = job();
    let (_, base_updates) = baseline(&job);
    for workers in [1, 2] {
        let m = run_without_actors(&job, workers).unwrap().metrics;
        let swept: Vec<u64> = m.objective.iter().map(|o| o.round).collect();
        // Certifications after a full sweep (not the start's, not the last): one
        // worker's in the round of its last chunk, several workers' in the first
        // active-set round.
        let inner = &m.evaluations[1..m.evaluations.len() - 1];
        assert!(!inner.is_empty());
        for e in inner {
            assert!(
                swept.contains(&e.round),
                "{workers} workers: certificate of round {} has a round of its own",
                e.round
            );
        }
        assert!(m.relative_gap() <= 1e-8);
        if workers == 1 {
            // The run stops at a full sweep's certificate, so the last one rides too:
            // every round swept, and the sweeps are the baseline's.
            assert_eq!(m.rounds as usize, swept.len());
            assert_eq!(m.updates, base_updates);
        }
    }
}

#[test]
fn two_and_three_workers_reach_the_baselines_objective_with_a_descending_trace() {
    let job = job();
    let (f_base, _) = baseline(&job);
    for workers in [2, 3] {
        let out = run_without_actors(&job, workers).unwrap();
        let m = &out.metrics;
        assert!(
            relative(m.final_objective, f_base) <= 1e-6,
            "{workers} workers: {} vs {f_base}",
            m.final_objective
        );
        assert!(m.relative_gap() <= 1e-8);
        // The step weights make every round a descent step.
        assert_descends(m, workers);
        assert_eq!(out.coefficients.len(), 3000);
    }
}

#[test]
fn a_target_objective_stops_the_run_and_is_recorded() {
    let mut job = job();
    let (f_base, _) = baseline(&job);
    job.target_objective = Some(f_base * 1.001);
    // Several workers stop their passes at their shares of what the target still needs;
    // the run still ends at the target (a round that falls short is followed by another).
    for workers in [1, 2, 3] {
        let m = run_without_actors(&job, workers).unwrap().metrics;
        assert!(m.target_updates.is_some(), "{workers} workers");
        assert!(m.final_objective <= f_base * 1.001 * (1.0 + 1e-9));
    }
}

#[test]
fn more_workers_than_features_is_refused_with_the_reason() {
    let mut job = job();
    job.synthetic.n_features = 3;
    job.synthetic.n_nonzero = 1;
    let err = run_without_actors(&job, 4).err().unwrap().to_string();
    assert!(err.contains("gauss-seidel"), "{err}");
}

#[test]
fn settings_the_solver_cannot_honour_are_refused_naming_the_key() {
    let refused = |edit: fn(&mut LassoSettings), words: &[&str]| {
        let mut refused = job();
        edit(&mut refused);
        let err = refused.validate().unwrap_err().to_string();
        assert!(words.iter().all(|w| err.contains(w)), "{err}");
    };
    refused(|j| j.schedulers = 2, &["schedulers", "gauss-seidel"]);
    // A scheduling knob with gauss-seidel asked for explicitly.
    refused(|j| j.block_size = 64, &["block_size", "scheduled"]);
    // And a gauss-seidel knob with the scheduled mode.
    refused(
        |j| {
            j.solver = LassoSolver::Scheduled;
            j.gs_chunk = 100;
        },
        &["gs_chunk"],
    );
    // Logistic regression has a Gauss-Seidel solver, but not the Lasso's chunks.
    <crate::apps::logistic::LogisticApp as StradsJob>::validate_config(&job()).unwrap();
    let logistic_chunk = LassoSettings {
        gs_chunk: 10,
        ..LassoSettings::default()
    };
    let err = <crate::apps::logistic::LogisticApp as StradsJob>::validate_config(&logistic_chunk)
        .unwrap_err()
        .to_string();
    assert!(err.contains("gs_chunk"), "{err}");
}

#[test]
fn auto_is_gauss_seidel_unless_a_scheduled_setting_is_given() {
    let auto = LassoSettings::default();
    assert_eq!(auto.solver, LassoSolver::Auto);
    assert_eq!(auto.resolved_solver(), LassoSolver::GaussSeidel);
    auto.validate().unwrap();
    for (key, job) in [
        (
            "schedulers",
            LassoSettings {
                schedulers: 2,
                ..LassoSettings::default()
            },
        ),
        (
            "block_size",
            LassoSettings {
                block_size: 8,
                ..LassoSettings::default()
            },
        ),
        (
            "rho",
            LassoSettings {
                rho: None,
                ..LassoSettings::default()
            },
        ),
        (
            "depth",
            LassoSettings {
                depth: 2,
                ..LassoSettings::default()
            },
        ),
    ] {
        assert_eq!(job.resolved_solver(), LassoSolver::Scheduled, "{key}");
        assert_eq!(job.scheduled_only_settings()[0].0, key);
        job.validate().unwrap();
    }
    // A gauss-seidel knob beside a scheduled one under auto: refused, saying why.
    let both = LassoSettings {
        block_size: 8,
        gs_chunk: 10,
        ..LassoSettings::default()
    };
    let err = both.validate().unwrap_err().to_string();
    assert!(
        err.contains("gs_chunk") && err.contains("block_size"),
        "{err}"
    );
}

/// `job` (with `fit_intercept`) on 1, 2 and 3 Gauss-Seidel workers: the centred
/// baseline's objective and a tight gap, one worker with the baseline's very updates, and
/// an objective that never rises.
fn reaches_the_centred_baseline(job: &LassoSettings) -> f64 {
    let (f_base, base_updates) = baseline(job);
    for workers in [1, 2, 3] {
        let out = run_without_actors(job, workers).unwrap();
        let m = &out.metrics;
        assert!(
            relative(m.final_objective, f_base) <= 1e-6,
            "{workers} workers: {} vs {f_base}",
            m.final_objective
        );
        assert!(m.relative_gap() <= 1e-9, "{workers}: {}", m.relative_gap());
        if workers == 1 {
            assert_eq!(m.updates, base_updates, "one worker: the baseline's sweeps");
        }
        assert_descends(m, workers);
    }
    f_base
}

/// A job with `fit_intercept` on the synthetic design `synthetic`.
fn centred_job(synthetic: SyntheticLasso) -> LassoSettings {
    LassoSettings {
        synthetic,
        fit_intercept: true,
        lambda_fraction: 0.1,
        gap_tolerance: Some(1e-9),
        solver: LassoSolver::GaussSeidel,
        ..LassoSettings::default()
    }
}

#[test]
fn fit_intercept_reaches_the_centred_baselines_objective_with_any_worker_count() {
    // A dense synthetic design with a shifted mean.
    reaches_the_centred_baseline(&centred_job(SyntheticLasso {
        n_samples: 120,
        n_features: 600,
        ..SyntheticLasso::default()
    }));
}

#[test]
fn fit_intercept_on_the_sparse_synthetic_design_reaches_the_centred_baseline() {
    // The sparse design is generated column by column; its columns' means are what a
    // worker centres by (implicitly: the design stays sparse).
    let job = centred_job(SyntheticLasso {
        n_samples: 300,
        n_features: 3_000,
        nnz_per_column: 8,
        n_nonzero: 15,
        ..SyntheticLasso::default()
    });
    job.validate().unwrap();
    let f_base = reaches_the_centred_baseline(&job);
    // Centring changes the problem: without it the optimum is another.
    let uncentred = LassoSettings {
        fit_intercept: false,
        ..job
    };
    let (f_plain, _) = baseline(&uncentred);
    assert!(relative(f_plain, f_base) > 1e-5, "{f_plain} vs {f_base}");
}

#[test]
fn two_workers_reach_a_tight_duality_gap_without_stalling() {
    // Residual deltas taken as `r_start - r_end` kept only a few digits of the steps near
    // the optimum, and the step weights then stalled above a relative gap of 1e-9.
    let mut job = job();
    job.gap_tolerance = Some(1e-11);
    job.max_rounds = 5000;
    let m = run_without_actors(&job, 2).unwrap().metrics;
    assert!(m.relative_gap() <= 1e-11, "stalled at {}", m.relative_gap());
    assert!(m.rounds < 5000);
}

#[test]
fn a_run_on_a_libsvm_file_is_the_run_on_the_same_synthetic_design() {
    // The file is read twice, keeping each worker's columns; the synthetic design is
    // generated column by column: the same design, the same run, bit for bit.
    let synthetic = job();
    let (x, y) = synthetic.load().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("design.svm");
    let mut rows = vec![String::new(); x.n_rows];
    for j in 0..x.n_columns() {
        let (r, v) = x.column(j);
        for (&i, &v) in r.iter().zip(v) {
            rows[i as usize].push_str(&format!(" {}:{v}", j + 1));
        }
    }
    let text: String = rows
        .iter()
        .zip(&y)
        .map(|(row, label)| format!("{label}{row}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    let file = LassoSettings {
        data: Some(path),
        ..synthetic.clone()
    };
    for workers in [1, 2] {
        let a = run_without_actors(&synthetic, workers).unwrap();
        let b = run_without_actors(&file, workers).unwrap();
        assert_eq!(a.coefficients, b.coefficients, "{workers} workers");
        assert_eq!(
            a.metrics.final_objective.to_bits(),
            b.metrics.final_objective.to_bits()
        );
        assert_eq!(a.metrics.updates, b.metrics.updates);
    }
}

#[test]
fn the_removed_gs_exchange_setting_is_refused_by_name() {
    let job = LassoSettings {
        gs_exchange: Some("peers".into()),
        ..job()
    };
    let err = job.validate().unwrap_err().to_string();
    assert!(err.contains("gs_exchange"), "{err}");
}

#[test]
fn a_worker_that_shares_the_residual_refuses_to_certify_its_own_sweep() {
    let (x, y) = job().load().unwrap();
    let order = SweepOrder {
        coords: Coords::Range { start: 0, end: 10 },
        max_passes: 1,
        settle: 0.0,
        target: None,
        decrease: None,
    };
    let task = GsTask::SweepThenCertify(order);
    let shared = GsWorkerCore::build(x.clone(), y.clone(), 0.1, true, false).unwrap();
    let err = GsWorker::new(shared, 0)
        .push(0, &task)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("lone worker"), "{err}");
    let alone = GsWorkerCore::build(x, y, 0.1, false, false).unwrap();
    let answer = GsWorker::new(alone, 0).push(0, &task).unwrap();
    assert!(matches!(answer, GsPartial::CertifiedAndSwept { .. }));
}

/// Runs a Gauss-Seidel job with both halves in this thread and no actors, in the message
/// order of the cluster run.
pub(crate) fn run_without_actors(
    job: &LassoSettings,
    workers: usize,
) -> Result<LassoOutcome, StradsError> {
    let (scheduler, _) = crate::kit::run_serial::<LassoGsApp>(job, workers, Delivery::Late)?;
    Ok(scheduler.outcome())
}

/// The column ranges of `workers` workers: contiguous, of about equal non-zeros (the same
/// on every node, so nobody sends the cut).
pub(crate) fn column_ranges(
    x: &SparseColumns,
    workers: usize,
) -> Result<Vec<Range<usize>>, StradsError> {
    column_ranges_of(&DesignShape::of(x), workers)
}
