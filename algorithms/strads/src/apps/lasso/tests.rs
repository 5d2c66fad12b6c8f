use super::*;
use crate::core::app::Push;
use crate::core::lasso::tests::reference_optimum;
use crate::core::scheduler::ScheduleMode;

/// The small scheduled job the Lasso tests share, evaluated every `eval_every` rounds.
pub(crate) fn small_scheduled_job(eval_every: u64) -> LassoSettings {
    LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 120,
            n_features: 200,
            group_size: 10,
            correlation: 0.8,
            n_nonzero: 5,
            noise_std: 0.1,
            nnz_per_column: 0,
            seed: 3,
        },
        block_size: 8,
        candidate_pool: 32,
        max_rounds: 20_000,
        eval_every,
        gap_tolerance: Some(1e-7),
        ..LassoSettings::default()
    }
}

fn small_job(mode: &str) -> LassoSettings {
    LassoSettings {
        mode: mode.parse().unwrap(),
        ..small_scheduled_job(100)
    }
}

fn drive(job: &LassoSettings, workers: usize) -> (Vec<f32>, LassoMetrics) {
    let out = run_without_actors(job, workers).unwrap();
    (out.coefficients, out.metrics)
}

#[test]
fn scheduled_lasso_reaches_kkt_point_for_every_mode() {
    for mode in ["dynamic", "random", "cyclic"] {
        let mut job = small_job(mode);
        if mode != "dynamic" {
            job.priority_exponent = 2.0;
        }
        let (x, y) = job.load().unwrap();
        let lambda = job.resolve_lambda(&x, &y);
        let optimum = reference_optimum(&x, &y, lambda, 2000, 1e-7).unwrap();
        let (b, m) = drive(&job, 3);
        assert!(
            m.final_kkt_violation < 1e-3 * f64::from(lambda),
            "{mode}: kkt {} lambda {lambda}",
            m.final_kkt_violation
        );
        assert!(
            m.final_duality_gap >= -1e-6,
            "{mode}: gap {}",
            m.final_duality_gap
        );
        assert!(
            (m.final_objective - optimum) / optimum < 1e-4,
            "{mode}: {} vs {optimum}",
            m.final_objective
        );
        assert!(b.iter().any(|v| *v != 0.0));
        // The per-round objective trace is exact: its last point matches the evaluation.
        let last = m.objective.last().unwrap();
        assert!(last.objective >= m.final_objective - 1e-6);
        assert!(m.objective.len() > 10);
    }
}

#[test]
fn pipelined_rounds_stay_consistent() {
    let mut job = small_job("dynamic");
    job.depth = 3;
    let (_, m) = drive(&job, 2);
    assert!(m.final_kkt_violation < 1e-3 * f64::from(m.lambda), "{m:?}");
    // The objective recorded every round is non-increasing up to round-off (coordinate
    // descent on disjoint uncorrelated blocks) except for tiny overshoot.
    let first = m.objective.first().unwrap().objective;
    assert!(m.final_objective < first);
}

#[test]
fn target_objective_stops_early_and_records_updates() {
    let mut job = small_job("dynamic");
    let (x, y) = job.load().unwrap();
    let lambda = job.resolve_lambda(&x, &y);
    let optimum = reference_optimum(&x, &y, lambda, 2000, 1e-7).unwrap();
    job.target_objective = Some(optimum * (1.0 + 1e-3));
    job.gap_tolerance = None;
    let (_, m) = drive(&job, 2);
    let updates = m.target_updates.unwrap();
    assert!(updates > 0 && updates <= m.updates);
    assert!(m.final_objective <= optimum * (1.0 + 1e-3) + 1e-9);
}

#[test]
fn worker_rejects_bad_tasks() {
    let job = small_job("dynamic");
    let (x, y) = job.load().unwrap();
    let mut w = LassoWorker::with_schedulers(LassoWorkerState::new(x, y).unwrap(), 1);
    let bad = LassoTask::Update {
        vars: vec![10_000],
        values: vec![0.0],
    };
    assert!(
        w.push(0, &bad)
            .unwrap_err()
            .to_string()
            .contains("out of range")
    );
    let short = LassoCommit {
        vars: vec![1, 2],
        deltas: vec![0.5],
    };
    assert!(w.commit(0, &short).is_err());
}

#[test]
fn unknown_mode_is_a_clear_error() {
    let err = "greedy".parse::<ScheduleMode>().unwrap_err().to_string();
    assert!(
        err.contains("greedy") && err.contains("dynamic, random, cyclic"),
        "{err}"
    );
}

#[test]
fn libsvm_input_and_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.libsvm");
    std::fs::write(&data, "1.0 1:1 2:0.5\n-1 2:1 3:2\n0.5 1:0.3 3:1\n2 1:2\n").unwrap();
    let job = LassoSettings {
        data: Some(data.clone()),
        lambda: Some(0.01),
        rho: None,
        block_size: 1,
        mode: ScheduleMode::Cyclic,
        eval_every: 10,
        max_rounds: 3000,
        ..LassoSettings::default()
    };
    let (b, m) = drive(&job, 2);
    assert_eq!(b.len(), 3);
    assert!(m.final_kkt_violation < 1e-4, "{}", m.final_kkt_violation);
    let out = dir.path().join("out");
    LassoOutcome {
        coefficients: b,
        metrics: m,
    }
    .write(&out, &job)
    .unwrap();
    let coef = std::fs::read_to_string(out.join("coefficients.tsv")).unwrap();
    assert_eq!(coef.lines().count(), 3);
    assert!(coef.starts_with("1\t"), "{coef}");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    assert!(!metrics["evaluations"].as_array().unwrap().is_empty());
    // A malformed file names its line.
    std::fs::write(&data, "1.0 1:1\nnot-a-number 2:1\n").unwrap();
    let err = job.load().unwrap_err().to_string();
    assert!(err.contains(":2"), "{err}");
}

#[test]
fn fit_intercept_on_a_cluster_centres_implicitly_and_matches_the_explicit_centring() {
    // A sparse design with non-zero column means and labels far from zero.
    let (n, d) = (60usize, 10usize);
    let mut text = String::new();
    let mut nnz = 0;
    for i in 0..n {
        let mut line = String::new();
        let mut y = 20.0 + ((i * 5 % 7) as f64 - 3.0) * 0.3;
        for j in 0..d {
            if (i * 7 + j * 13 + i * j) % 3 == 0 {
                let v = ((i * 3 + j * 5 + i * j) % 7 + 1) as f64;
                line.push_str(&format!(" {}:{v}", j + 1));
                y += [1.5, 0.0, 0.0, -2.0, 0.0, 0.7, 0.0, 0.0, 0.0, 0.0][j] * v;
                nnz += 1;
            }
        }
        text.push_str(&format!("{y}{line}\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("means.libsvm");
    std::fs::write(&data, text).unwrap();
    let job = LassoSettings {
        data: Some(data),
        lambda: Some(5.0),
        fit_intercept: true,
        rho: None,
        block_size: 2,
        mode: ScheduleMode::Cyclic,
        eval_every: 50,
        max_rounds: 20_000,
        // About what f32 coefficients can certify.
        gap_tolerance: Some(1e-5),
        ..LassoSettings::default()
    };
    // Every node loads the design as stored: its non-zeros, nothing densified.
    let (x, y_c) = job.load().unwrap();
    assert_eq!(x.values.len(), nnz);
    // The reference: the old path, the design centred explicitly (every cell stored).
    let means = job.design_means(&x).unwrap();
    let dense = super::config::centred(&x, &means);
    assert_eq!(dense.values.len(), n * d);
    let explicit = LassoSettings {
        lambda: Some(5.0),
        fit_intercept: false,
        gap_tolerance: Some(1e-14),
        ..LassoSettings::default()
    };
    let reference = baseline::solve_baseline(&dense, &y_c, &explicit)
        .unwrap()
        .coefficients;
    let scale = reference.iter().fold(0.0f32, |m, b| m.max(b.abs()));
    assert!(scale > 0.1, "{reference:?}");
    let close = |b: &[f32], what: &str| {
        for (got, want) in b.iter().zip(&reference) {
            // f32 coefficients and an f32 explicitly centred design: 1e-5 of the largest.
            assert!(
                (got - want).abs() <= 1e-5 * scale,
                "{what}: {b:?} vs {reference:?}"
            );
        }
    };
    let (b, m) = drive(&job, 2);
    assert!(m.relative_gap() <= 1e-5, "{}", m.relative_gap());
    close(&b, "one scheduler");
    let multi = LassoSettings {
        schedulers: 2,
        ..job.clone()
    };
    let (b, _) = multi::tests::run_multi_without_actors(&multi, 2).unwrap();
    close(&b, "two schedulers");
    let baseline = baseline::run_baseline(&job).unwrap();
    close(&baseline.coefficients, "baseline");
}

/// Every solver on a LIBSVM file (Gauss-Seidel, scheduled, logistic): the scheduler and
/// every worker digest the file alike, an edited file differently, so nodes holding
/// different copies stop at the ready barrier.
#[test]
fn every_solver_digests_one_file_alike_on_every_node() {
    use crate::apps::logistic::LogisticApp;
    use crate::kit::serial::tests::common_digest;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.svm");
    let mut text = String::new();
    for i in 0..24u32 {
        let label = if i % 3 == 0 { 1.0 } else { -1.0 };
        let (a, b) = (f64::from(i % 5) + 0.5, f64::from(i % 4) - 1.5);
        text.push_str(&format!("{label} 1:{a} 2:{b} 3:{}\n", f64::from(i) * 0.1));
    }
    let edited = text.replacen("1:0.5 ", "1:0.75 ", 1);
    assert_ne!(edited, text);
    let job = LassoSettings {
        data: Some(path.clone()),
        ..LassoSettings::default()
    };
    let scheduled = LassoSettings {
        solver: LassoSolver::Scheduled,
        ..job.clone()
    };
    let mut per_file = Vec::new();
    for content in [&text, &edited] {
        std::fs::write(&path, content).unwrap();
        per_file.push([
            common_digest::<gs::LassoGsApp>(&job, 2),
            common_digest::<LassoApp>(&scheduled, 2),
            common_digest::<LogisticApp>(&scheduled, 2),
        ]);
    }
    for (solver, (a, b)) in ["gauss-seidel", "scheduled", "logistic"]
        .iter()
        .zip(per_file[0].iter().zip(&per_file[1]))
    {
        assert!(a.is_some() && b.is_some(), "{solver}");
        assert_ne!(a, b, "{solver}");
    }
}

#[test]
fn dynamic_dealing_moves_rows_off_a_slow_worker_and_keeps_the_model() {
    for fit_intercept in [false, true] {
        let fixed = LassoSettings {
            straggler: Some(0),
            straggler_factor: 4.0,
            fit_intercept,
            ..small_scheduled_job(50)
        };
        let dynamic = LassoSettings {
            balance: Balance::Dynamic,
            ..fixed.clone()
        };
        let (b_static, m_static) = drive(&fixed, 2);
        let (b_dynamic, m_dynamic) = drive(&dynamic, 2);
        assert_eq!(m_static.balance, None);
        let dealing = m_dynamic.balance.clone().unwrap();
        assert!(dealing.deals >= 1, "{dealing:?}");
        assert_eq!(dealing.rows.iter().sum::<u64>(), 120);
        assert!(dealing.rows[0] < dealing.rows[1], "{dealing:?}");
        // The rows' partial sums group differently after a re-deal, so the trajectories
        // part in the last bits; both stop at the same optimum.
        let rel = (m_static.final_objective - m_dynamic.final_objective).abs()
            / m_static.final_objective.abs();
        assert!(rel < 1e-6, "objective {rel:e} apart");
        let max_diff = b_static
            .iter()
            .zip(&b_dynamic)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(max_diff < 1e-3, "coefficients {max_diff} apart");
    }
}

#[test]
fn dynamic_dealing_refuses_what_moving_rows_breaks() {
    let dynamic = LassoSettings {
        balance: Balance::Dynamic,
        ..small_scheduled_job(50)
    };
    assert_eq!(dynamic.resolved_solver(), LassoSolver::Scheduled);
    dynamic.validate().unwrap();
    for (job, key) in [
        (
            LassoSettings {
                schedulers: 2,
                ..dynamic.clone()
            },
            "schedulers",
        ),
        (
            LassoSettings {
                checkpoint_dir: Some("ck".into()),
                ..dynamic.clone()
            },
            "checkpoint_dir",
        ),
        (
            LassoSettings {
                straggler_factor: 0.5,
                ..dynamic.clone()
            },
            "straggler_factor",
        ),
    ] {
        let err = job.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{err}");
    }
}

/// Runs job `J` on `workers` workers at depth 1 as the actor loop would, except that the
/// last worker dies with round `death` in flight (`on_node_death = "leave"`): the round is
/// given up ([`Schedule::lost`]) and the change that deals its rows to the others runs
/// before the work goes on. Returns the scheduler half.
pub(crate) fn run_with_a_death<J, W>(config: &J::Config, workers: usize, death: u64) -> J::Scheduler
where
    J: StradsJob<Worker = StarHalf<W>>,
    W: Push<J>,
{
    use crate::core::app::{Schedule, Step};
    use crate::core::roster::Roster;
    let shape = JobShape {
        workers,
        schedulers: 1,
    };
    let mut app = J::scheduler(config, &shape).unwrap();
    let mut halves: Vec<W> = (0..workers)
        .map(|i| J::worker(config, i, &shape).unwrap().0)
        .collect();
    let names: Vec<String> = (0..workers).map(|i| format!("w{i}")).collect();
    let mut roster = Roster::new(names.clone());
    let mut round = 0;
    loop {
        let step = match app.schedule(round, 0) {
            Step::Run(plan) if round == death => {
                // Dispatched, then the last worker dies before it answers.
                drop(plan);
                app.lost(&[round]).unwrap();
                halves.pop();
                assert!(roster.lose(&names[workers - 1]));
                let change = roster.reshape(&names[..workers - 1]).unwrap();
                round += 1;
                roster.adopt(&change);
                app.reshape(round, &change).unwrap().unwrap()
            }
            step => step,
        };
        let plan = match step {
            Step::Run(plan) => plan,
            Step::Done => return app,
            Step::Wait => panic!("round {round}: a wait with nothing in flight"),
        };
        let tasks = plan.into_tasks(halves.len()).unwrap();
        let partials = (halves.iter_mut().zip(&tasks))
            .map(|(w, task)| w.push(round, task).unwrap())
            .collect();
        let commit = app
            .pull(round, partials, std::time::Duration::ZERO)
            .unwrap();
        halves
            .iter_mut()
            .for_each(|w| w.commit(round, &commit).unwrap());
        round += 1;
    }
}

#[test]
fn a_worker_that_dies_with_a_round_in_flight_leaves_its_rows_to_the_others() {
    let job = LassoSettings {
        balance: Balance::Dynamic,
        ..small_scheduled_job(50)
    };
    let (_, fixed) = drive(&job, 3);
    let outcome = run_with_a_death::<LassoApp, _>(&job, 3, 40).outcome();
    let dealing = outcome.metrics.balance.unwrap();
    let change = &dealing.changes[0];
    assert_eq!(
        (change.round, change.died.as_slice()),
        (41, ["w2".to_string()].as_slice())
    );
    assert_eq!(change.workers, ["w0", "w1"]);
    assert_eq!(dealing.rows.iter().sum::<u64>(), 120);
    // The given-up round's update is scheduled again; the stop is the same gap.
    let rel = (outcome.metrics.final_objective - fixed.final_objective).abs()
        / fixed.final_objective.abs();
    assert!(rel < 1e-6, "objective {rel:e} apart");
}
