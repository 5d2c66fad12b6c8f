//! STRADS Lasso with its coefficients split over two schedulers: in one process over QUIC
//! (schedulers on separate nodes and on one node), across processes with `petrel run` and
//! the example TOML, and misconfigurations that must fail fast with a clear error.

use petrel::train::{lasso_scheduler_nodes, read_json, run_lasso_job, star_settings_with};
use petrel_actors::JobTransport;
use petrel_strads::apps::lasso::multi::MultiLassoMetrics;
use petrel_strads::apps::lasso::{LassoApp, LassoOutcome, LassoSettings, run_without_actors};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::fixtures::converging_lasso;

fn job(out: &Path, schedulers: usize, depth: usize) -> LassoSettings {
    LassoSettings {
        schedulers,
        ..converging_lasso(out, depth)
    }
}

fn coefficients(dir: &Path) -> Vec<f32> {
    crate::common::coefficients(dir)
}

/// The two-scheduler run `m`, whose coefficients `b` are, against the single scheduler's
/// `single`: the same lambda, KKT within tolerance, the objective within 1e-3 relative and
/// the coefficients within 1e-2 of their scale.
fn agrees_with_single(m: &MultiLassoMetrics, b: &[f32], single: &LassoOutcome) {
    let lambda = f64::from(m.base.lambda);
    let base = &single.metrics;
    assert_eq!(m.base.lambda, base.lambda);
    assert!(
        m.base.final_kkt_violation < 1e-3 * lambda,
        "KKT violation {} (lambda {lambda})",
        m.base.final_kkt_violation
    );
    let rel = (m.base.final_objective - base.final_objective).abs() / base.final_objective;
    assert!(
        rel < 1e-3,
        "objective {} vs single scheduler {}",
        m.base.final_objective,
        base.final_objective
    );
    assert_eq!(m.schedulers, 2);
    let scale = single
        .coefficients
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = b
        .iter()
        .zip(&single.coefficients)
        .fold(0.0f32, |m, (a, c)| m.max((a - c).abs()));
    assert!(
        diff < 1e-2 * scale,
        "coefficients differ by {diff} (scale {scale})"
    );
}

/// [`agrees_with_single`], each scheduler owning a contiguous half of the features, and the
/// whole model written.
fn check_against_single(m: &MultiLassoMetrics, dir: &Path) {
    let single = run_without_actors(&job(dir, 1, 1), 3).unwrap();
    let b = coefficients(dir);
    agrees_with_single(m, &b, &single);
    assert_eq!(m.per_scheduler.len(), 2);
    assert_eq!(m.per_scheduler[0].first_feature, 0);
    assert_eq!(
        m.per_scheduler[1].first_feature,
        m.per_scheduler[0].features
    );
    assert_eq!(
        m.per_scheduler[0].features + m.per_scheduler[1].features,
        300
    );
    assert!(m.per_scheduler.iter().all(|s| s.updates > 0));
    assert_eq!(
        m.base.updates,
        m.per_scheduler.iter().map(|s| s.updates).sum::<u64>()
    );
    assert_eq!(b.len(), 300);
    assert_eq!(
        b.iter().filter(|v| **v != 0.0).count(),
        m.base.evaluations.last().unwrap().nonzeros
    );
}

#[test]
fn two_schedulers_on_separate_nodes_over_quic() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sep");
    run_lasso_job(&job(&out, 2, 2), 3, JobTransport::Quic, false).unwrap();
    let m: MultiLassoMetrics = read_json(&out.join("metrics.json")).unwrap();
    check_against_single(&m, &out);
    assert_eq!(m.base.depth, 2);
}

#[test]
fn two_schedulers_sharing_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shared");
    run_lasso_job(&job(&out, 2, 1), 2, JobTransport::Quic, true).unwrap();
    let m: MultiLassoMetrics = read_json(&out.join("metrics.json")).unwrap();
    check_against_single(&m, &out);
}

#[test]
fn petrel_run_with_the_example_toml_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("procs");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/strads_lasso_2sched.toml");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_petrel"))
        .args(["run", example.to_str().unwrap(), "--timeout-s", "120"])
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        // The test's small design and settings, through environment overrides.
        .env("PETREL_APP__LASSO__OUT_DIR", &out)
        .env("PETREL_APP__LASSO__SYNTHETIC__N_SAMPLES", "150")
        .env("PETREL_APP__LASSO__SYNTHETIC__N_FEATURES", "300")
        .env("PETREL_APP__LASSO__SYNTHETIC__N_NONZERO", "6")
        .env("PETREL_APP__LASSO__SYNTHETIC__SEED", "7")
        .env("PETREL_APP__LASSO__BLOCK_SIZE", "8")
        .env("PETREL_APP__LASSO__CANDIDATE_POOL", "32")
        .env("PETREL_APP__LASSO__MAX_ROUNDS", "4000")
        .env("PETREL_APP__LASSO__LAMBDA_FRACTION", "0.2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "petrel run failed:\n{err}");
    for node in ["scheduler", "scheduler-1", "w0", "w1", "w2"] {
        assert!(
            err.contains(&format!("node finished node={node}")),
            "{node} did not finish:\n{err}"
        );
    }
    let m: MultiLassoMetrics = read_json(&out.join("metrics.json")).unwrap();
    let single_run = run_without_actors(
        &LassoSettings {
            eta: 1e-6,
            priority_exponent: 1.0,
            block_size: 8,
            candidate_pool: 32,
            gap_tolerance: Some(1e-6),
            ..job(&out, 1, 2)
        },
        3,
    )
    .unwrap();
    agrees_with_single(&m, &coefficients(&out), &single_run);
}

fn nodes(spec: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    spec.iter()
        .map(|(n, r)| (n.to_string(), r.iter().map(|r| r.to_string()).collect()))
        .collect()
}

/// Runs a Lasso cluster in this process with the given scheduler nodes; must fail fast.
fn misconfigured(schedulers: usize, features: usize, nodes: &[(String, Vec<String>)]) -> String {
    misconfigured_job(schedulers, features, nodes, |_| {})
}

fn misconfigured_job(
    schedulers: usize,
    features: usize,
    nodes: &[(String, Vec<String>)],
    tweak: impl FnOnce(&mut LassoSettings),
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut j = job(dir.path(), schedulers, 1);
    j.synthetic.n_features = features;
    j.synthetic.group_size = 1;
    j.synthetic.n_nonzero = 1;
    tweak(&mut j);
    let mut settings =
        star_settings_with::<LassoApp>(&j, nodes, 2, JobTransport::Quic, 30).unwrap();
    // A failing role is announced to every node at once; short heartbeats are a backstop.
    settings.cluster.heartbeat_interval_ms = 100;
    settings.cluster.failure_timeout_ms = 1000;
    // The scheduler fails while validating, often before every node joined. A node that
    // starts after the coordinator's node has already exited cannot be told and retries its
    // join until join_timeout_ms (30 s by default): seen under load (several test binaries
    // at once). Known limitation, noted in RELIABILITY.md; the join timeout bounds it here.
    settings.cluster.join_timeout_ms = 8000;
    let started = Instant::now();
    let err = petrel::roles::builtin(settings)
        .run_in_process()
        .unwrap_err()
        .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}: {err}",
        started.elapsed()
    );
    err
}

#[test]
fn misconfigured_schedulers_fail_fast_with_a_clear_error() {
    let err = misconfigured(3, 2, &lasso_scheduler_nodes(3, false));
    assert!(
        err.contains("schedulers = 3 but the design has only 2 features"),
        "{err}"
    );
    let err = misconfigured(
        2,
        50,
        &nodes(&[
            ("scheduler", &["strads-lasso-scheduler"]),
            ("s2", &["strads-lasso-scheduler-2"]),
        ]),
    );
    assert!(
        err.contains("scheduler index 2 out of range (schedulers = 2)"),
        "{err}"
    );
    let err = misconfigured(
        2,
        50,
        &nodes(&[
            (
                "scheduler",
                &["strads-lasso-scheduler", "strads-lasso-scheduler-1"],
            ),
            ("other", &["strads-lasso-scheduler-1"]),
        ]),
    );
    assert!(
        err.contains("scheduler 1 is claimed by two nodes: scheduler and other"),
        "{err}"
    );
    let err = misconfigured(2, 50, &nodes(&[("scheduler", &["strads-lasso-scheduler"])]));
    assert!(
        err.contains("no node runs strads-lasso-scheduler-1"),
        "{err}"
    );
    // Checkpoints are implemented for one scheduler only.
    let err = misconfigured_job(2, 50, &lasso_scheduler_nodes(2, true), |j| {
        j.checkpoint_dir = Some(std::env::temp_dir().join("petrel-multi-ckpt-refused"));
    });
    assert!(
        err.contains("checkpoints are implemented for one scheduler only"),
        "{err}"
    );
}
