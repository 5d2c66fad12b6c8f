//! The examples are part of the product: each custom-app example (one per paradigm) and the
//! topology example must run to completion, with every node a thread of one process
//! (`--in-process`) and with one process per node (`--processes`, the program re-executing
//! itself), printing the same results both ways. `cargo test` builds the examples before it
//! runs any test, so this test starts the built binaries (`target/<profile>/examples/<name>`).

use crate::common;

use common::{child_process, example_binary, read_all, signal, wait_with_deadline};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs example `name` with `args`; returns its standard output and standard error.
fn run_example(name: &str, args: &[&str]) -> (String, String) {
    run_example_with(name, args, |_| {})
}

/// [`run_example`], calling `meanwhile` with the example's pid once it started.
fn run_example_with(name: &str, args: &[&str], meanwhile: impl FnOnce(u32)) -> (String, String) {
    let bin = example_binary(name);
    assert!(
        bin.exists(),
        "{} is missing: build the examples first (`cargo test` does; `cargo build --examples`)",
        bin.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(&bin)
        .args(args)
        .env("RUST_LOG", "warn")
        // Run directories of --processes go here, so the test sees they are removed.
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let out = read_all(child.stdout.take().unwrap());
    let err = read_all(child.stderr.take().unwrap());
    meanwhile(child.id());
    let status = wait_with_deadline(&mut child, Duration::from_secs(120));
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        status.success(),
        "example {name} {args:?} failed: {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "{name} {args:?} left {left:?} in TMPDIR");
    (out, err)
}

/// Runs the example both ways; every expected line starts a line of both outputs, and
/// neither run logs a warning or an error (`RUST_LOG=warn`).
fn in_process_and_as_processes(name: &str, expected: &[&str]) {
    for mode in ["--in-process", "--processes"] {
        let (out, err) = run_example(name, &[mode]);
        assert!(
            err.trim().is_empty(),
            "{name} {mode} logged warnings or errors:\n{err}"
        );
        for e in expected {
            assert!(
                out.lines().any(|l| l.starts_with(e)),
                "{name} {mode}: no line starting {e:?} in:\n{out}\nstderr:\n{err}"
            );
        }
    }
}

#[test]
fn ps_custom_example_runs_in_process_and_as_processes() {
    in_process_and_as_processes(
        "ps_custom",
        &["k-means: 10 rounds per worker", "centroids: "],
    );
}

#[test]
fn strads_custom_example_runs_in_process_and_as_processes() {
    in_process_and_as_processes(
        "strads_custom",
        &["serial: 300 rounds", "cluster: 300 rounds"],
    );
}

#[test]
fn p3_custom_example_runs_in_process_and_as_processes() {
    in_process_and_as_processes(
        "p3_custom",
        &[
            "p3_custom: worker 0: 80 iterations",
            "p3_custom: worker 1: 80 iterations",
        ],
    );
}

#[test]
fn topology_example_runs_in_process_and_as_processes() {
    in_process_and_as_processes(
        "topology",
        &[
            "monitor: alarm 1 (overheating)",
            "sensor: monitor handled 200 readings and 1 alarm(s)",
            "done",
        ],
    );
}

/// The example's own flags reach every node: `--rounds` is read by the children too.
#[test]
fn ps_custom_passes_its_own_flags_to_the_nodes() {
    let (out, _) = run_example("ps_custom", &["--processes", "--rounds", "12"]);
    assert!(out.contains("k-means: 12 rounds per worker"), "{out}");
}

/// Bad use is refused before any node starts, with one error.
#[test]
fn bad_launch_flags_are_refused_before_start() {
    let dir = tempfile::tempdir().unwrap();
    // A --node with a config naming other nodes than the program's topology.
    let cfg = dir.path().join("cluster.toml");
    std::fs::write(&cfg, "[[nodes]]\nname = \"x\"\naddr = \"127.0.0.1:7\"\n").unwrap();
    let out = Command::new(example_binary("topology"))
        .args(["--node", "station", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("names nodes x but this program's topology has field, station"),
        "{err}"
    );
    // --processes and --node together.
    let out = Command::new(example_binary("topology"))
        .args(["--processes", "--node", "station", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// A program that calls `launch` logs without asking: its `--processes` children's node
/// lines (metrics addresses among them) reach stderr.
#[test]
fn a_launched_program_logs_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(example_binary("ps_custom"))
        .arg("--processes")
        .env_remove("RUST_LOG")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(" INFO "), "no log line in:\n{stderr}");
}

/// The elastic example's standby worker joins the running job and a worker drains and
/// leaves, as threads and as processes: every task is counted once, the newcomer and the
/// leaver both did some, and the final members are the ones left.
#[test]
fn elastic_example_survives_a_join_and_a_leave_both_ways() {
    let expected: u64 = (0..400u64).map(|t| t * t).sum();
    for mode in ["--in-process", "--processes"] {
        let (out, err) = run_example("elastic", &[mode]);
        assert!(err.trim().is_empty(), "elastic {mode} logged:\n{err}");
        let sum_line = format!("dealer: 400 tasks, sum {expected} (expected {expected})");
        assert!(out.lines().any(|l| l == sum_line), "elastic {mode}:\n{out}");
        let shares = out
            .lines()
            .find_map(|l| l.strip_prefix("dealer: tasks by worker: "))
            .unwrap_or_else(|| panic!("elastic {mode}: no shares in:\n{out}"));
        for worker in ["w0", "w1", "w2"] {
            let done: u64 = shares
                .split(", ")
                .find_map(|s| s.strip_prefix(&format!("{worker}=")))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            assert!(done > 0, "elastic {mode}: {worker} did no task: {shares}");
        }
        // On a loaded machine the standby node may start before the cluster formed, and
        // then joins with it: the epochs differ, the final members do not.
        for line in ["w0: drained; leaving", "dealer: final members boss, w1, w2"] {
            assert!(
                out.lines().any(|l| l.starts_with(line)),
                "elastic {mode}: no {line:?}:\n{out}"
            );
        }
    }
}

/// Under `on_node_death = "leave"`, a worker process that aborts mid-task counts as having
/// left: the dealer hands its task to the others and the job ends with every task once.
#[test]
fn elastic_example_hands_a_dead_workers_task_to_the_others() {
    let expected: u64 = (0..400u64).map(|t| t * t).sum();
    let (out, err) = run_example("elastic", &["--processes", "--crash-after", "20"]);
    let sum_line = format!("dealer: 400 tasks, sum {expected} (expected {expected})");
    assert!(out.lines().any(|l| l == sum_line), "{out}\n{err}");
    assert!(
        out.lines().any(|l| l.starts_with("w1: crashing with task")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("dealer: task ")
            && l.ends_with(" handed back from a member that left")),
        "{out}"
    );
    assert!(out.contains("w1=20") || out.contains("w1=19"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("dealer: final members boss, w2 ")),
        "{out}"
    );
    assert!(
        err.contains("node died; the job carries on without it"),
        "{err}"
    );
    assert!(
        err.contains("member died; the job carries on without it"),
        "{err}"
    );
}

/// In a job whose members may change, SIGTERM to a worker's process drains it and it
/// leaves (a StatefulSet scaling down): the job ends with every task once, without it.
#[test]
fn elastic_example_worker_drains_and_leaves_on_sigterm() {
    let expected: u64 = (0..400u64).map(|t| t * t).sum();
    let (out, err) = run_example_with("elastic", &["--processes"], |pid| {
        let w1 = child_process(pid, "w1").expect("w1's process");
        // SIGTERM before the node handles it would just kill the process.
        common::wait_until(Duration::from_secs(20), "w1 handles SIGTERM", || {
            common::catches_signal(w1, 15)
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(signal(w1, "TERM"), "SIGTERM to w1");
    });
    let sum_line = format!("dealer: 400 tasks, sum {expected} (expected {expected})");
    assert!(out.lines().any(|l| l == sum_line), "{out}\n{err}");
    assert!(out.lines().any(|l| l == "w1: drained; leaving"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("dealer: final members boss, w2 ")),
        "{out}"
    );
    assert!(err.trim().is_empty(), "{err}");
}
