//! No orphans, however the launcher ends: SIGTERM (what timeout(1), systemd and docker
//! send), SIGINT and SIGKILL of `petrel run`, `petrel train p3` or a bench's cluster in the
//! middle of a run leave no node process behind within 2 s. Linux only (reads /proc).
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::fixtures::demo_cluster;
use common::{PETREL, alive, children_of, signal, wait_until, write_config};

/// A demo job that would run for a minute.
fn long_demo() -> String {
    demo_cluster(
        "name = \"orphans\"\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 1500",
        "",
        "rounds = 100000000\ntensor_len = 64\nduration_s = 60.0",
    )
}

/// Starts `petrel <args>` (run directories in `dir`) and waits for its `nodes` node
/// processes to be mid-run; returns the launcher and the nodes' pids.
fn start_launcher(
    dir: &std::path::Path,
    args: &[&str],
    nodes: usize,
    stderr: Stdio,
) -> (std::process::Child, Vec<u32>) {
    let launcher = Command::new(PETREL)
        .args(args)
        .current_dir(dir)
        // A SIGKILLed launcher cannot remove its run directory: keep it in the test's.
        .env("TMPDIR", dir)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut pids = Vec::new();
    wait_until(
        Duration::from_secs(30),
        "the launcher starts its nodes",
        || {
            pids = children_of(launcher.id());
            pids.len() == nodes
        },
    );
    // Mid-run: the nodes have joined and exchange rounds.
    std::thread::sleep(Duration::from_millis(1500));
    (launcher, pids)
}

/// `petrel run` on [`long_demo`], mid-run.
fn start_long_demo(dir: &std::path::Path, stderr: Stdio) -> (std::process::Child, Vec<u32>) {
    let cfg = write_config(dir, &long_demo());
    let cfg = cfg.to_string_lossy();
    start_launcher(dir, &["run", &cfg], 3, stderr)
}

/// Signals the launcher `how`; its `nodes` must all be gone within 2 s.
fn launcher_dies_and_takes(mut launcher: std::process::Child, nodes: &[u32], how: &str) {
    assert!(
        launcher.try_wait().unwrap().is_none(),
        "the run ended early"
    );
    assert!(signal(launcher.id(), how));
    let signalled = Instant::now();
    while nodes.iter().any(|&p| alive(p)) && signalled.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = nodes.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        signal(p, "KILL");
    }
    assert!(
        left.is_empty(),
        "SIG{how} of the launcher left nodes {left:?} running after 2 s"
    );
    let status = launcher.wait().unwrap();
    assert!(!status.success(), "{status}");
}

fn launcher_dies_and_takes_its_nodes(how: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (launcher, nodes) = start_long_demo(dir.path(), Stdio::null());
    launcher_dies_and_takes(launcher, &nodes, how);
}

/// `petrel <args>` with `nodes` node processes, signalled `how` mid-run, leaves none.
fn command_dies_and_takes_its_nodes(args: &[&str], nodes: usize, how: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (launcher, pids) = start_launcher(dir.path(), args, nodes, Stdio::null());
    launcher_dies_and_takes(launcher, &pids, how);
}

/// `petrel train p3`: 2 workers and 2 shards as processes.
fn train_p3_dies_and_takes_its_nodes(how: &str) {
    let args = "train p3 --net mlp --epochs 200 --out m.safetensors";
    command_dies_and_takes_its_nodes(&args.split(' ').collect::<Vec<_>>(), 4, how);
}

/// A bench's cluster (`petrel bench soak`: an aggregator and 2 workers as processes,
/// started by the same launcher).
fn bench_dies_and_takes_its_nodes(how: &str) {
    let args = "bench soak --workers 2 --duration-s 60 --tensor-len 64";
    command_dies_and_takes_its_nodes(&args.split(' ').collect::<Vec<_>>(), 3, how);
}

#[test]
fn sigterm_of_a_bench_stops_every_node() {
    bench_dies_and_takes_its_nodes("TERM");
}

#[test]
fn sigint_of_a_bench_stops_every_node() {
    bench_dies_and_takes_its_nodes("INT");
}

#[test]
fn sigkill_of_a_bench_kills_every_node() {
    bench_dies_and_takes_its_nodes("KILL");
}

#[test]
fn sigterm_of_train_p3_stops_every_node() {
    train_p3_dies_and_takes_its_nodes("TERM");
}

#[test]
fn sigint_of_train_p3_stops_every_node() {
    train_p3_dies_and_takes_its_nodes("INT");
}

#[test]
fn sigkill_of_train_p3_kills_every_node() {
    train_p3_dies_and_takes_its_nodes("KILL");
}

#[test]
fn sigterm_of_the_launcher_stops_every_node() {
    launcher_dies_and_takes_its_nodes("TERM");
}

#[test]
fn sigint_of_the_launcher_stops_every_node() {
    launcher_dies_and_takes_its_nodes("INT");
}

/// SIGKILL: the nodes die with the launcher, and the next launch removes the run
/// directory (keys included) that the killed one could not, and says so.
#[test]
fn sigkill_of_the_launcher_kills_every_node_and_the_next_launch_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let (launcher, nodes) = start_long_demo(dir.path(), Stdio::null());
    launcher_dies_and_takes(launcher, &nodes, "KILL");
    let run_dirs = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("petrel-run-")
            })
            .collect()
    };
    let left = run_dirs();
    assert_eq!(left.len(), 1, "{left:?}");
    let short = long_demo().replace("rounds = 100000000", "rounds = 3");
    let cfg = write_config(
        dir.path(),
        &short.replace("duration_s = 60.0", "duration_s = 0.5"),
    );
    let next = Command::new(PETREL)
        .arg("run")
        .arg(&cfg)
        .env("TMPDIR", dir.path())
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&next.stderr);
    assert!(next.status.success(), "{stderr}");
    assert!(!left[0].exists(), "{stderr}");
    assert!(
        stderr.contains("removed what a killed launcher"),
        "{stderr}"
    );
    assert!(run_dirs().is_empty(), "{:?}", run_dirs());
}

/// A node interrupted on its own (SIGTERM to `petrel node`) stops its cluster at once, and
/// the launcher names it and the signal.
#[test]
fn sigterm_of_one_node_is_reported_once_by_the_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let (launcher, nodes) = start_long_demo(dir.path(), Stdio::piped());
    // The node whose command line names w1.
    let w1 = nodes
        .iter()
        .copied()
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .unwrap_or_default()
                .split(|&b| b == 0)
                .any(|a| a == b"w1")
        })
        .expect("node w1");
    assert!(signal(w1, "TERM"));
    let out = launcher.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("node w1 failed") && err.contains("SIGTERM"),
        "the launcher must name w1 and the signal:\n{err}"
    );
    assert_eq!(err.matches("error").count(), 1, "one error line:\n{err}");
    assert!(nodes.iter().all(|&p| !alive(p)));
    // The launcher removed its private run directory (certificates and keys included).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("petrel-run-"))
        .collect();
    assert!(left.is_empty(), "run directory left behind: {left:?}");
}
