//! P3 survives a standby worker and a standby shard joining and a worker and a shard
//! leaving mid-run (`petrel train p3 --net emulated --standby-workers 1 --standby-shards 1
//! --scale ...`) on processes: the changes at iteration boundaries in the output, the fixed
//! run's parameters bit for bit (the emulated model's gradients are equal, so their mean
//! over any workers is the same, and a slice's update does not depend on the shard that
//! applies it), no node process left behind. A standby worker that never starts is not
//! waited for; checkpoints with changes are refused before any node starts.

use crate::common::{alive, children_of, failure, last_json_line, petrel_cmd};
use std::path::Path;
use std::time::Duration;

/// 96 iterations of the emulated VGG-19 at 1/1000, one sample each, on 2 workers and 2
/// shards: about 2 s on threads of a debug build, 4 s on processes.
const JOB: &str =
    "--net emulated --train-data synthetic:192 --batch 1 --epochs 1 --workers 2 --shards 2";

/// `w2` and `s2` start 600 ms after the nodes, `w0` and `s1` are asked to leave at 1 s (the
/// coordinator runs on `s0`).
const PLAN: &str = "at=600ms add w2; at=600ms add s2; at=1000ms remove w0; at=1000ms remove s1";

/// `petrel train p3` on `transport` with `args`: its final JSON line and the child
/// processes seen while it ran.
fn train(out: &Path, transport: &str, args: &[&str]) -> (serde_json::Value, Vec<u32>) {
    let model = out.join("model.safetensors");
    let child = petrel_cmd(["train", "p3", "--out", model.to_str().unwrap()])
        .args(["--transport", transport])
        .args(JOB.split_whitespace())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut seen = Vec::new();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        for p in children_of(pid) {
            if !seen.contains(&p) {
                seen.push(p);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = waiter.join().unwrap();
    let what = format!("petrel train p3 {transport} {args:?}");
    assert!(output.status.success(), "{what}: {}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    (last_json_line(&stdout), seen)
}

/// `m`, a run whose `list` of changes has `joiner` joining then `leaver` leaving mid-run,
/// ends with `fixed`'s parameters, saw at least 5 node processes and left none alive.
fn joined_then_left(
    m: &serde_json::Value,
    fixed: &serde_json::Value,
    nodes: Vec<u32>,
    list: &str,
    (joiner, leaver): (u64, u64),
) {
    let at = |key: &str, id: u64| {
        m[list]
            .as_array()?
            .iter()
            .find(|c| c[key] == serde_json::json!([id]))
            .and_then(|c| c["iteration"].as_u64())
    };
    let (Some(joined), Some(left)) = (at("joined", joiner), at("left", leaver)) else {
        panic!("no join of {joiner} and leave of {leaver} in {list}: {m}");
    };
    let iterations = m["iterations"].as_u64().unwrap();
    assert!(
        0 < joined && joined < left && left < iterations,
        "not a join then a leave mid-run: {m}"
    );
    assert_eq!(
        m["params_digest"], fixed["params_digest"],
        "{m} against {fixed}"
    );
    // Two workers, two shards and the joiner.
    assert!(nodes.len() >= 5, "node processes seen: {nodes:?}");
    let orphans: Vec<u32> = nodes.into_iter().filter(|&p| alive(p)).collect();
    assert!(orphans.is_empty(), "orphans {orphans:?}");
}

#[test]
fn p3_workers_and_shards_join_and_leave_on_processes_ending_with_the_fixed_runs_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let (fixed, _) = train(&dir.path().join("fixed"), "memory", &[]);
    assert_eq!(fixed["changes"], serde_json::json!([]), "{fixed}");
    assert_eq!(fixed["shard_changes"], serde_json::json!([]), "{fixed}");
    let args = [
        "--standby-workers",
        "1",
        "--standby-shards",
        "1",
        "--scale",
        PLAN,
    ];
    let (m, nodes) = train(&dir.path().join("elastic"), "processes", &args);
    assert_eq!(m["final_workers"], serde_json::json!([1, 2]), "{m}");
    assert_eq!(m["final_shards"], serde_json::json!([0, 2]), "{m}");
    // w0, w1, w2, s0, s1 and s2.
    assert!(nodes.len() >= 6, "node processes seen: {nodes:?}");
    joined_then_left(&m, &fixed, nodes.clone(), "changes", (2, 0));
    joined_then_left(&m, &fixed, nodes, "shard_changes", (2, 1));
}

#[test]
fn a_standby_p3_worker_that_never_starts_is_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = train(dir.path(), "memory", &["--standby-workers", "1"]);
    assert_eq!(m["changes"], serde_json::json!([]), "{m}");
    assert_eq!(m["final_workers"], serde_json::json!([0, 1]), "{m}");
}

#[test]
fn p3_refuses_checkpoints_with_joins_and_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let mut args = vec!["train", "p3", "--out", out.to_str().unwrap()];
    args.extend(JOB.split_whitespace());
    args.extend(["--standby-workers", "1", "--checkpoint-every", "2"]);
    let err = failure(&args);
    assert!(err.contains("checkpoint_every = 0"), "{err}");
}
