//! No orphans, however the launcher ends: SIGTERM (what timeout(1), systemd and docker
//! send), SIGINT and SIGKILL of `petrel run` in the middle of a run leave no node process
//! behind within 2 s. Linux only (reads /proc).
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PETREL: &str = env!("CARGO_BIN_EXE_petrel");

/// A demo job that would run for a minute.
const LONG_DEMO: &str = r#"
[cluster]
name = "orphans"
heartbeat_interval_ms = 100
failure_timeout_ms = 1500
[[nodes]]
name = "hub"
roles = ["demo-aggregator"]
[[nodes]]
name = "w1"
roles = ["demo-worker"]
[[nodes]]
name = "w2"
roles = ["demo-worker"]
[app.demo]
rounds = 100000000
tensor_len = 64
duration_s = 60.0
"#;

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` still runs (a zombie waiting for its new parent to reap it does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        !matches!(state, Some("Z") | Some("X"))
    })
}

fn launcher_dies_and_takes_its_nodes(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cluster.toml");
    std::fs::write(&cfg, LONG_DEMO).unwrap();
    let mut launcher = Command::new(PETREL)
        .arg("run")
        .arg(&cfg)
        // A SIGKILLed launcher cannot remove its run directory: keep it in the test's.
        .env("TMPDIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let nodes = loop {
        let nodes = children_of(launcher.id());
        if nodes.len() == 3 {
            break nodes;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the launcher did not start 3 nodes: {nodes:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Mid-run: the nodes have joined and exchange rounds.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        launcher.try_wait().unwrap().is_none(),
        "the run ended early"
    );
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &launcher.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let signalled = Instant::now();
    while nodes.iter().any(|&p| alive(p)) && signalled.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = nodes.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
    assert!(
        left.is_empty(),
        "SIGTERM/SIGKILL of the launcher ({signal}) left nodes {left:?} running after 2 s"
    );
    let status = launcher.wait().unwrap();
    assert!(!status.success(), "{status}");
}

#[test]
fn sigterm_of_the_launcher_stops_every_node() {
    launcher_dies_and_takes_its_nodes("TERM");
}

#[test]
fn sigint_of_the_launcher_stops_every_node() {
    launcher_dies_and_takes_its_nodes("INT");
}

#[test]
fn sigkill_of_the_launcher_kills_every_node() {
    launcher_dies_and_takes_its_nodes("KILL");
}

/// A node interrupted on its own (SIGTERM to `petrel node`) stops its cluster at once, and
/// the launcher names it and the signal.
#[test]
fn sigterm_of_one_node_is_reported_once_by_the_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cluster.toml");
    std::fs::write(&cfg, LONG_DEMO).unwrap();
    let launcher = Command::new(PETREL)
        .arg("run")
        .arg(&cfg)
        .env("TMPDIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let nodes = loop {
        let nodes = children_of(launcher.id());
        if nodes.len() == 3 {
            break nodes;
        }
        assert!(started.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(1500));
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
    let st = Command::new("kill")
        .args(["-TERM", &w1.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
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
