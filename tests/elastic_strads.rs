//! The scheduled Lasso with dynamic dealing survives a standby worker joining and a worker
//! leaving mid-run (`petrel train lasso --standby-workers 1 --scale ...`): the same objective as the fixed-membership run to 1e-6, the join and the
//! leave in `metrics.json`, no node process left behind; so does logistic regression,
//! which shares the dealing. Under `--on-node-death leave` a killed worker is a leave whose
//! rows the others rebuild. strads-mf takes a join and a leave on processes by re-forming
//! its ring (train and test RMSE of the fixed run to 1e-4), and so does LDA (log-likelihood
//! per token of the fixed run to 2e-2). Apps that keep a fixed membership refuse the
//! flags.

use crate::common::{
    alive, catches_signal, child_process, children_of, data, metrics, petrel_cmd, signal,
    wait_until,
};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

const JOB: &str = "--solver scheduled --balance dynamic --synthetic-samples 300 \
                   --synthetic-features 300 --block-size 8 --candidate-pool 32 --workers 2";

/// The Lasso stops on a duality gap of 1e-6 relative, which bounds its distance to the
/// optimum; the scheduled logistic regression has no convergence test, so it runs long
/// enough for its objective to settle.
fn stop(app: &str) -> &'static str {
    match app {
        "lasso" => "--eval-every 50 --gap-tolerance 1e-6 --max-rounds 20000",
        _ => "--max-rounds 3000",
    }
}

/// `w2` joins after 200 ms, `w0` is asked to leave after 700 ms (from the cluster forming);
/// the run takes a few seconds in a debug build.
const PLAN: &str = "at=200ms add w2; at=700ms remove w0";

/// The job of `app`: the Lasso's and logistic regression's on synthetic data, strads-mf's
/// on the example ratings (a few seconds in a debug build).
fn job(app: &str) -> Vec<String> {
    let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    match app {
        "strads-mf" => {
            let file = |name: &str| data(name).to_str().unwrap().to_string();
            let mut args = words("--balance dynamic --workers 2 --iterations 25");
            args.extend(["--data".into(), file("ratings.base")]);
            args.extend(["--test-data".into(), file("ratings.test")]);
            args
        }
        "lda" => {
            let mut args = words("--balance dynamic --workers 2 --topics 4 --iterations 400");
            args.extend([
                "--docword".into(),
                data("docs.train").to_str().unwrap().into(),
            ]);
            args
        }
        _ => [words(JOB), words(stop(app))].concat(),
    }
}

/// `petrel train <app>` with `args` into `out`; returns its `metrics.json` and every
/// process the launcher started (polled while it ran).
fn train(
    app: &str,
    out: &Path,
    transport: &str,
    args: &[&str],
) -> (serde_json::Value, BTreeSet<u32>) {
    let mut child = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
        .args(["--transport", transport])
        .args(job(app))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut nodes = BTreeSet::new();
    let status = loop {
        nodes.extend(children_of(child.id()));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "petrel train {app} {args:?}: {status}");
    (metrics(out), nodes)
}

/// The run's changes: `w2` joined, then `w0` left mid-run, and the rows end on `w1, w2`
/// (`rows` of them in all).
fn assert_join_and_leave(m: &serde_json::Value, rows: u64) {
    let changes = m["balance"]["changes"].as_array().unwrap();
    let names = |c: &serde_json::Value, key: &str| -> Vec<String> {
        serde_json::from_value(c[key].clone()).unwrap()
    };
    let joined = changes.iter().position(|c| names(c, "joined") == ["w2"]);
    let left = changes.iter().position(|c| names(c, "left") == ["w0"]);
    let (Some(joined), Some(left)) = (joined, left) else {
        panic!("no join of w2 and leave of w0: {changes:?}");
    };
    assert!(joined <= left, "{changes:?}");
    let left_round = changes[left]["round"].as_u64().unwrap();
    assert!(
        left_round > 0 && left_round < m["rounds"].as_u64().unwrap(),
        "w0 did not leave mid-run: {changes:?}"
    );
    let last = changes.last().unwrap();
    assert_eq!(names(last, "workers"), ["w1", "w2"]);
    let dealt: Vec<u64> = serde_json::from_value(m["balance"]["rows"].clone()).unwrap();
    assert_eq!(
        (dealt.len(), dealt.iter().sum::<u64>()),
        (2, rows),
        "{dealt:?}"
    );
}

#[test]
fn the_scheduled_lasso_survives_a_join_and_a_leave() {
    // On processes: `bench elastic --quick` (bench/tests/bench_quick.rs) with this plan, and
    // `tests/chaos_membership.rs` with a join and a SIGTERM.
    survives_a_join_and_a_leave("lasso", &["memory"]);
}

#[test]
fn scheduled_logistic_regression_survives_a_join_and_a_leave() {
    survives_a_join_and_a_leave("logistic", &["memory"]);
}

/// strads-mf re-forms its ring at a rotation boundary for each change. Its train and test
/// RMSE agree with the fixed run's to 1e-4 relative: the same CCD++ updates, but the
/// changed workers rebuild their residuals from the data against the gathered factors
/// (`r - w.h` afresh rather than updated in place), so the figures differ in rounding.
#[test]
fn strads_mf_survives_a_join_and_a_leave_on_processes() {
    survives_a_join_and_a_leave("strads-mf", &["processes"]);
}

/// LDA re-forms its ring at a pass boundary for each change, the documents dealt with
/// their topic assignments. Gibbs sampling then follows another chain (other generators
/// draw other tokens), so its log-likelihood per token agrees with the fixed run's to
/// 2e-2 relative, the tolerance of `bench balance`.
#[test]
fn lda_survives_a_join_and_a_leave_on_processes() {
    survives_a_join_and_a_leave("lda", &["processes"]);
}

/// What `app`'s elastic run must match of its fixed run, to what relative tolerance; and
/// the rows (users for strads-mf and documents for LDA: the example files have 80 each)
/// dealt in all.
fn figures(app: &str) -> (&'static [&'static str], f64, u64) {
    match app {
        "strads-mf" => (&["final_train_rmse", "final_test_rmse"], 1e-4, 80),
        "lda" => (&["final_loglik_per_token"], 2e-2, 80),
        _ => (&["final_objective"], 1e-6, 300),
    }
}

/// App `app` with a join and a leave on each of `transports` against its fixed run.
fn survives_a_join_and_a_leave(app: &str, transports: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (fixed, _) = train(app, &dir.path().join("fixed"), "memory", &[]);
    assert!(fixed["balance"].get("changes").is_none(), "{fixed}");
    let (keys, tolerance, rows) = figures(app);
    for &transport in transports {
        let out = dir.path().join(transport);
        let args = ["--standby-workers", "1", "--scale", PLAN];
        let (m, nodes) = train(app, &out, transport, &args);
        assert_join_and_leave(&m, rows);
        for key in keys {
            let (f, e) = (fixed[key].as_f64().unwrap(), m[key].as_f64().unwrap());
            assert!(
                (e - f).abs() <= tolerance * f.abs(),
                "{app} {transport}: {key} {e} against {f} with a fixed membership"
            );
        }
        if transport == "processes" {
            // The scheduler, w0, w1 and the joiner w2.
            assert!(nodes.len() >= 4, "node processes seen: {nodes:?}");
        }
        let left: Vec<u32> = nodes.into_iter().filter(|&p| alive(p)).collect();
        assert!(left.is_empty(), "{transport}: orphans {left:?}");
    }
}

/// Under `--on-node-death leave`, SIGKILL to worker `w1`'s process mid-run is a leave:
/// the rounds in flight to it are redone, its rows go to `w0` (rebuilt from the committed
/// coefficients), and the Lasso stops at the fixed run's objective (to 1e-6, its gap
/// stop); `metrics.json` names `w1` as died; no node process is left. The death is noticed
/// after the failure timeout (10 s), most of the test's time.
#[test]
fn the_scheduled_lasso_takes_a_killed_worker_as_a_leave() {
    let dir = tempfile::tempdir().unwrap();
    let (fixed, _) = train("lasso", &dir.path().join("fixed"), "memory", &[]);
    let out = dir.path().join("killed");
    let mut child = petrel_cmd(["train", "lasso", "--out", out.to_str().unwrap()])
        .args(["--transport", "processes", "--on-node-death", "leave"])
        .args(JOB.split_whitespace())
        .args(stop("lasso").split_whitespace())
        // A slow w1 keeps the run going past the kill; w0 finishes it alone.
        .args(["--straggler", "1", "--straggler-factor", "3"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let w1 = child_process(child.id(), "w1").expect("w1's process");
    wait_until(Duration::from_secs(20), "w1 starts", || {
        catches_signal(w1, 15)
    });
    std::thread::sleep(Duration::from_millis(800));
    let mut nodes: BTreeSet<u32> = children_of(child.id()).into_iter().collect();
    assert!(signal(w1, "KILL"), "SIGKILL to w1");
    let status = loop {
        nodes.extend(children_of(child.id()));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "petrel train lasso with w1 killed: {status}"
    );
    let m = metrics(&out);
    let changes = m["balance"]["changes"].as_array().unwrap();
    let died = changes
        .iter()
        .find(|c| c["died"] == serde_json::json!(["w1"]));
    let Some(died) = died else {
        panic!("no death of w1: {changes:?}");
    };
    assert_eq!(died["left"], serde_json::json!(["w1"]), "{died}");
    assert_eq!(died["workers"], serde_json::json!(["w0"]), "{died}");
    assert_eq!(m["balance"]["rows"], serde_json::json!([300]), "{m}");
    let (objective, killed) = (
        fixed["final_objective"].as_f64().unwrap(),
        m["final_objective"].as_f64().unwrap(),
    );
    assert!(
        (killed - objective).abs() <= 1e-6 * objective.abs(),
        "objective {killed} against {objective} with a fixed membership"
    );
    let left: Vec<u32> = nodes.into_iter().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "orphans {left:?}");
}

#[test]
fn apps_and_solvers_that_keep_a_fixed_membership_refuse_joins_and_leaves() {
    let dir = tempfile::tempdir().unwrap();
    for (app, args) in [
        (
            "lasso",
            "--solver gauss-seidel --workers 2 --transport memory",
        ),
        ("lasso", "--solver scheduled --workers 2 --transport memory"),
        (
            "logistic",
            "--solver gauss-seidel --workers 2 --transport memory",
        ),
        ("lda", "--workers 2 --transport memory"),
        (
            "strads-mf",
            "--workers 2 --transport memory --on-node-death leave",
        ),
        ("strads-mf", "--workers 2 --transport memory"),
    ] {
        let out = dir.path().join(app);
        // Each flag alone asks for a changing membership: --on-node-death leave too.
        let membership = match args.contains("--on-node-death") {
            true => vec![],
            false => vec!["--standby-workers", "1", "--scale", PLAN],
        };
        let output = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
            .args(args.split_whitespace())
            .args(membership)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{app} {args}: ran");
        assert!(
            stderr.contains("keeps a fixed membership"),
            "{app} {args}: {stderr}"
        );
    }
    // strads-mf and LDA take joins and leaves, not deaths: a dead worker's block is lost.
    for app in ["strads-mf", "lda"] {
        let out = dir.path().join(format!("{app}-death"));
        let output = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
            .args(
                "--workers 2 --transport memory --balance dynamic --on-node-death leave".split(' '),
            )
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains("not deaths"),
            "{app}: {stderr}"
        );
    }
    // STRADS jobs have no shard nodes: a standby shard is refused, elastic job or not.
    for app in ["strads-mf", "lda", "lasso"] {
        let out = dir.path().join(format!("{app}-shards"));
        let output = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
            .args("--workers 2 --transport memory --balance dynamic --standby-shards 1".split(' '))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success()
                && stderr.contains("--standby-shards: ")
                && stderr.contains("has no shard nodes"),
            "{app}: {stderr}"
        );
    }
}
