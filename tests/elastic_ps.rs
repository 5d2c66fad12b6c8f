//! ps-lr survives a standby worker joining and a worker leaving mid-run (`petrel train
//! ps-lr --standby-workers 1 --scale ...`), on threads and on processes: the held-out
//! log-loss and accuracy of the fixed-membership run within SGD's tolerance, the join and
//! the leave in `metrics.json`, no node process left behind. Apps that keep a fixed
//! membership refuse the flags, and so do checkpoints.

use crate::common::{alive, children_of, metrics, petrel_cmd};
use std::path::Path;
use std::time::Duration;

/// 80 clocks of at least 40 ms: a run of about 3.5 s, long enough for both changes.
const JOB: &str = "--clocks 80 --clock-ms 40 --checkpoint-every 0 --workers 2 --shards 2";

/// `worker-2` starts 300 ms after the cluster formed, `worker-0` is asked to leave at 1.2 s.
const PLAN: &str = "at=300ms add worker-2; at=1200ms remove worker-0";

/// SGD under SSP is not deterministic (update order, timing), and a change moves the number
/// of gradient steps per clock, so the model is not the fixed run's: its held-out figures
/// are, to the tolerance the restart tests give ps-lr.
const LOG_LOSS_TOLERANCE: f64 = 0.05;
const ACCURACY_TOLERANCE: f64 = 0.02;

/// `petrel train ps-lr` on `transport` with `args` into `out`: its `metrics.json` and the
/// child processes still alive once it returned (polled while it ran).
fn train(out: &Path, transport: &str, args: &[&str]) -> (serde_json::Value, Vec<u32>) {
    let mut child = petrel_cmd(["train", "ps-lr", "--out", out.to_str().unwrap()])
        .args(["--transport", transport])
        .args(JOB.split_whitespace())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let status = loop {
        for pid in children_of(child.id()) {
            if !seen.contains(&pid) {
                seen.push(pid);
            }
        }
        match child.try_wait().unwrap() {
            Some(status) => break status,
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(
        status.success(),
        "petrel train ps-lr {transport} {args:?}: {status}"
    );
    if transport == "processes" {
        // Both shards, worker-0, worker-1 and the joiner worker-2.
        assert!(seen.len() >= 5, "node processes seen: {seen:?}");
    }
    (
        metrics(out),
        seen.into_iter().filter(|&p| alive(p)).collect(),
    )
}

#[test]
fn ps_lr_survives_a_join_and_a_leave_on_threads_and_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (fixed, _) = train(&dir.path().join("fixed"), "memory", &[]);
    assert!(fixed.get("changes").is_none(), "{fixed}");
    let figure = |m: &serde_json::Value, k: &str| m["final"][k].as_f64().unwrap();
    for transport in ["memory", "processes"] {
        let args = ["--standby-workers", "1", "--scale", PLAN];
        let (m, orphans) = train(&dir.path().join(transport), transport, &args);
        assert!(orphans.is_empty(), "{transport}: orphans {orphans:?}");
        let changes: Vec<(u64, String, u64)> = (m["changes"].as_array().unwrap().iter())
            .map(|c| {
                let w = c["worker"].as_u64().unwrap();
                (
                    w,
                    c["change"].as_str().unwrap().to_string(),
                    c["clock"].as_u64().unwrap(),
                )
            })
            .collect();
        let [(2, joined, _), (0, left, at)] = changes.as_slice() else {
            panic!("{transport}: not a join of worker 2 and a leave of worker 0: {changes:?}");
        };
        assert_eq!((joined.as_str(), left.as_str()), ("joined", "left"));
        assert!(
            *at > 0 && *at < 80,
            "{transport}: worker 0 left at clock {at}"
        );
        // The leaver stopped at its clock; the others ran every clock.
        let clocks: Vec<u64> = serde_json::from_value(m["worker_clocks"].clone()).unwrap();
        assert_eq!(clocks.iter().filter(|&&c| c == 80).count(), 2, "{clocks:?}");
        for (key, tolerance) in [
            ("test_log_loss", LOG_LOSS_TOLERANCE),
            ("test_accuracy", ACCURACY_TOLERANCE),
        ] {
            let (e, f) = (figure(&m, key), figure(&fixed, key));
            assert!(
                (e - f).abs() <= tolerance,
                "{transport}: {key} {e} against {f} fixed"
            );
        }
    }
}

#[test]
fn fixed_membership_ps_apps_and_checkpoints_refuse_joins_and_leaves() {
    let dir = tempfile::tempdir().unwrap();
    for (app, args, why) in [
        (
            "ps-mf",
            "--transport memory",
            "workers are fixed at the start",
        ),
        (
            "ps-lda",
            "--transport processes",
            "workers are fixed at the start",
        ),
        (
            "ps-lr",
            "--transport processes --checkpoint-every 10",
            "do not mix",
        ),
    ] {
        let out = dir.path().join(app);
        let output = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
            .args(args.split_whitespace())
            .args(["--standby-workers", "1", "--scale", PLAN])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{app} {args}: ran");
        assert!(stderr.contains(why), "{app} {args}: {stderr}");
    }
}
