//! STRADS Lasso on the actor runtime: KKT optimality of the distributed solution, and the
//! same seed giving bit-identical coefficients with no actors at all, with actors over QUIC
//! in one process, and with the scheduler and workers in separate processes.

use petrel::train::run_lasso_job;
use petrel_actors::JobTransport;
use petrel_strads::apps::lasso::run_without_actors;
use std::path::Path;

use crate::common::fixtures::converging_lasso as job;
use crate::common::{assert_dealt_off_worker_0, coefficients, metrics, petrel_cmd, train_balanced};

#[test]
fn distributed_lasso_is_optimal_and_matches_the_local_reference() {
    let dir = tempfile::tempdir().unwrap();
    let quic = dir.path().join("quic");
    let m = run_lasso_job(&job(&quic, 1), 3, JobTransport::Quic, false).unwrap();
    let lambda = f64::from(m.lambda);
    assert!(
        m.final_kkt_violation < 1e-3 * lambda,
        "KKT violation {} (lambda {lambda})",
        m.final_kkt_violation
    );
    assert!(m.final_duality_gap >= -1e-6 && m.final_duality_gap < 1e-5 * m.final_objective);
    // The per-round objective trace falls overall.
    let first = m.objective.first().unwrap().objective;
    let last = m.objective.last().unwrap().objective;
    assert!(last < 0.6 * first, "{first} -> {last}");
    // Same seed, no actors at all: bit-identical coefficients and update count.
    let local = run_without_actors(&job(&quic, 1), 3).unwrap();
    assert_eq!(
        coefficients::<f32>(&quic),
        local.coefficients,
        "actors over QUIC differ from the local run"
    );
    assert_eq!(m.updates, local.metrics.updates);
}

#[test]
fn memory_transport_gives_the_same_coefficients() {
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("memory");
    run_lasso_job(&job(&mem, 1), 3, JobTransport::Memory, false).unwrap();
    let local = run_without_actors(&job(&mem, 1), 3).unwrap();
    let text: String = local
        .coefficients
        .iter()
        .enumerate()
        .map(|(j, v)| format!("{}\t{v}\n", j + 1))
        .collect();
    assert_eq!(
        std::fs::read_to_string(mem.join("coefficients.tsv")).unwrap(),
        text
    );
}

#[test]
fn pipelined_lasso_converges() {
    let dir = tempfile::tempdir().unwrap();
    let m = run_lasso_job(&job(dir.path(), 3), 2, JobTransport::Quic, false).unwrap();
    assert!(
        m.final_kkt_violation < 1e-3 * f64::from(m.lambda),
        "KKT violation {}",
        m.final_kkt_violation
    );
    assert_eq!(m.depth, 3);
    // Dispatches leave eagerly, so three rounds in flight are as reproducible as one:
    // the same coefficients as the serial driver's fixed message order.
    let local = run_without_actors(&job(dir.path(), 3), 2).unwrap();
    assert_eq!(
        coefficients::<f32>(dir.path()),
        local.coefficients,
        "pipelined run differs"
    );
    assert_eq!(m.updates, local.metrics.updates);
}

#[test]
fn separate_processes_give_the_same_coefficients() {
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("in-process");
    // Two rounds in flight (the default): pipelined runs are reproducible across
    // processes too.
    run_lasso_job(&job(&mem, 2), 2, JobTransport::Quic, false).unwrap();
    let procs = dir.path().join("procs");
    let status = petrel_cmd([
        "train",
        "lasso",
        "--out",
        procs.to_str().unwrap(),
        "--workers",
        "2",
        "--transport",
        "processes",
    ])
    .args([
        "--block-size",
        "8",
        "--candidate-pool",
        "32",
        "--max-rounds",
        "4000",
        "--depth",
        "2",
    ])
    .args([
        "--eval-every",
        "100",
        "--gap-tolerance",
        "1e-6",
        "--seed",
        "5",
    ])
    .args(["--synthetic-samples", "150", "--synthetic-features", "300"])
    .args(["--synthetic-nonzero", "6", "--synthetic-seed", "7"])
    .status()
    .unwrap();
    assert!(status.success());
    let a = std::fs::read_to_string(mem.join("coefficients.tsv")).unwrap();
    let b = std::fs::read_to_string(procs.join("coefficients.tsv")).unwrap();
    assert_eq!(a, b, "one process and separate processes differ");
}

fn train_none(app: &str, out: &Path, extra: &[&str]) {
    train_on(app, out, &["--transport", "none"], extra);
}

/// `petrel train <app>` on a small correlated sparse design, to a tight tolerance.
fn train_on(app: &str, out: &Path, cluster: &[&str], extra: &[&str]) {
    let status = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
        .args(cluster)
        .args(["--gap-tolerance", "1e-9"])
        .args(["--synthetic-samples", "150", "--synthetic-features", "300"])
        .args(["--synthetic-nonzero", "6", "--synthetic-seed", "7"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .status()
        .unwrap();
    assert!(status.success(), "petrel train {app} {cluster:?}: {status}");
}

/// Logistic regression's default solver is the Gauss-Seidel one. One worker
/// makes the baseline's model byte for byte; two worker processes reach its optimum and
/// stop on the baseline's rule (converged), not on a round limit.
#[test]
fn logistic_gauss_seidel_makes_the_baselines_model_and_reaches_its_optimum_over_processes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    train_none("logistic", &d.join("none"), &[]);
    train_on(
        "logistic",
        &d.join("one"),
        &["--transport", "memory", "--workers", "1"],
        &[],
    );
    assert_eq!(
        std::fs::read(d.join("one/coefficients.tsv")).unwrap(),
        std::fs::read(d.join("none/coefficients.tsv")).unwrap()
    );
    let (none, one) = (metrics(&d.join("none")), metrics(&d.join("one")));
    assert_eq!(one["mode"], "gauss-seidel", "{one}");
    assert_eq!(one["updates"], none["updates"]);
    train_on(
        "logistic",
        &d.join("two"),
        &["--transport", "processes", "--workers", "2"],
        &[],
    );
    let two = metrics(&d.join("two"));
    assert_eq!(two["converged"], true, "{two}");
    let (a, b) = (
        two["final_objective"].as_f64().unwrap(),
        none["final_objective"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-6 * b, "{a} against {b}");
    // Round checkpoints: a run resumed from the newest ends with the same model.
    let ckpt = d.join("ckpt");
    let flags = [
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--checkpoint-every",
        "2",
    ];
    let memory = ["--transport", "memory", "--workers", "2"];
    train_on("logistic", &d.join("plain"), &memory, &flags);
    let round = petrel::recovery::newest_checkpoint_round(&ckpt);
    assert!(round.is_some_and(|r| r > 0), "{round:?}");
    let resumed: Vec<&str> = flags.iter().copied().chain(["--resume"]).collect();
    train_on("logistic", &d.join("resumed"), &memory, &resumed);
    assert_eq!(
        std::fs::read(d.join("plain/coefficients.tsv")).unwrap(),
        std::fs::read(d.join("resumed/coefficients.tsv")).unwrap()
    );
    // It resumed rather than ran again: the trace up to the checkpoint is the plain run's,
    // wall-clock times included.
    let (plain, resumed) = (metrics(&d.join("plain")), metrics(&d.join("resumed")));
    assert_eq!(plain["trace"][1], resumed["trace"][1]);
    assert!(plain["trace"][1]["elapsed_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        std::fs::read(d.join("plain/coefficients.tsv")).unwrap(),
        std::fs::read(d.join("two/coefficients.tsv")).unwrap(),
        "two workers as threads and as processes"
    );
}

#[test]
fn transport_none_solves_lasso_and_logistic_in_one_thread_to_the_same_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline");
    train_none("lasso", &baseline, &[]);
    let m: petrel_strads::apps::lasso::LassoMetrics =
        petrel::train::read_json(&baseline.join("metrics.json")).unwrap();
    assert_eq!(m.mode, petrel_strads::apps::lasso::baseline::BASELINE_MODE);
    let lambda = f64::from(m.lambda);
    assert!(
        m.final_kkt_violation < 1e-4 * lambda,
        "{}",
        m.final_kkt_violation
    );
    assert!(m.final_duality_gap <= 1e-9 * m.final_objective);
    // STRADS on the same design reaches the same optimum.
    let strads = dir.path().join("strads");
    let s = run_lasso_job(&job(&strads, 1), 2, JobTransport::Memory, false).unwrap();
    let relative = (s.final_objective - m.final_objective) / m.final_objective;
    assert!(
        (-1e-9..1e-5).contains(&relative),
        "relative difference {relative}"
    );
    assert!(baseline.join("coefficients.tsv").exists());
    // Logistic: a descent to a sweep that no longer lowers the objective.
    let logistic = dir.path().join("logistic");
    train_none("logistic", &logistic, &[]);
    let l: petrel_strads::apps::logistic::LogisticMetrics =
        petrel::train::read_json(&logistic.join("metrics.json")).unwrap();
    assert!(
        l.final_training_accuracy > 0.9,
        "{}",
        l.final_training_accuracy
    );
    assert!(l.updates > 0 && l.nonzeros > 0);
    // The baseline refuses what it cannot do.
    let status = petrel_cmd([
        "train",
        "lasso",
        "--out",
        dir.path().join("x").to_str().unwrap(),
    ])
    .args(["--transport", "none", "--schedulers", "2"])
    .status()
    .unwrap();
    assert!(!status.success());
}

#[test]
fn bad_libsvm_file_fails_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bad.libsvm");
    std::fs::write(&data, "1 1:0.5\n2 x:1\n").unwrap();
    let mut j = job(&dir.path().join("out"), 1);
    j.data = Some(data);
    let err = run_lasso_job(&j, 1, JobTransport::Quic, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.libsvm:2"), "{err}");
}

/// Static and dynamic dealing's objectives are within 1e-6 relative; the dynamic run
/// re-dealt, and its slow worker 0 ended with fewer of the `rows` rows.
fn assert_rows_moved_and_model_kept(
    fixed: &serde_json::Value,
    dynamic: &serde_json::Value,
    rows: u64,
) {
    assert!(fixed.get("balance").is_none(), "{fixed}");
    let (f_static, f_dynamic) = (
        fixed["final_objective"].as_f64().unwrap(),
        dynamic["final_objective"].as_f64().unwrap(),
    );
    let rel = (f_dynamic - f_static).abs() / f_static;
    assert!(
        rel < 1e-6,
        "objectives {f_static} and {f_dynamic}: {rel:e} apart"
    );
    assert_dealt_off_worker_0(dynamic, rows);
}

/// `petrel train lasso --balance dynamic` with worker 0 slowed: rows move off it, and the
/// model is static dealing's to 1e-6 of the objective (both stop on a duality gap of 1e-6
/// relative, which bounds each one's distance to the optimum).
#[test]
fn dynamic_dealing_moves_rows_off_a_slow_worker_and_keeps_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let args = "--synthetic-samples 150 --synthetic-features 300 --block-size 8 \
                --candidate-pool 32 --eval-every 50 --gap-tolerance 1e-6 --max-rounds 4000";
    let fixed = train_balanced(dir.path(), "lasso", "static", "3", args);
    let dynamic = train_balanced(dir.path(), "lasso", "dynamic", "3", args);
    for m in [&fixed, &dynamic] {
        let gap = m["final_duality_gap"].as_f64().unwrap();
        let objective = m["final_objective"].as_f64().unwrap();
        assert!(gap <= 1e-6 * objective, "stopped on the round limit: {gap}");
    }
    assert_rows_moved_and_model_kept(&fixed, &dynamic, 150);
}

/// `petrel train logistic --balance dynamic --straggler 0 --straggler-factor 2`: as many
/// update rounds as static dealing (the deal rounds come on top), enough for both to be at
/// the optimum to 1e-6 (the partial sums group differently after a re-deal, so the
/// coordinates chosen part on the way).
#[test]
fn logistic_dynamic_dealing_moves_rows_off_a_slow_worker_and_keeps_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let args = "--solver scheduled --synthetic-samples 400 --synthetic-features 200 \
                --block-size 8 --candidate-pool 32 --max-rounds 1500";
    let fixed = train_balanced(dir.path(), "logistic", "static", "2", args);
    let dynamic = train_balanced(dir.path(), "logistic", "dynamic", "2", args);
    assert_eq!(fixed["updates"], dynamic["updates"], "{fixed}\n{dynamic}");
    assert_rows_moved_and_model_kept(&fixed, &dynamic, 400);
}
