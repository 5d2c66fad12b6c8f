//! End-to-end tests of the `petrel` binary: multi-process clusters on 127.0.0.1.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PETREL: &str = env!("CARGO_BIN_EXE_petrel");

fn write_config(dir: &Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("cluster.toml");
    std::fs::write(&p, body).unwrap();
    p
}

const DEMO: &str = r#"
[cluster]
name = "t"
heartbeat_interval_ms = 100
failure_timeout_ms = 1000
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
rounds = 3
tensor_len = 1024
"#;

#[test]
fn petrel_run_brings_up_and_tears_down_a_multiprocess_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), DEMO);
    let out = Command::new(PETREL)
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--timeout-s",
            "60",
            "--run-dir",
        ])
        .arg(dir.path().join("run"))
        // Environment overrides reach every node through the config crate.
        .env("PETREL_APP__DEMO__ROUNDS", "5")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "petrel run failed:\n{err}");
    for node in ["hub", "w1", "w2"] {
        assert!(
            err.contains(&format!("[{node}]")),
            "no output from {node}:\n{err}"
        );
        assert!(
            err.contains(&format!("node finished node={node}")),
            "{node} did not finish:\n{err}"
        );
    }
    assert!(
        err.contains("round=5 of=5"),
        "env override not applied:\n{err}"
    );
    // The run directory holds the generated certificates and the resolved settings.
    assert!(dir.path().join("run/certs/ca.pem").exists());
    assert!(dir.path().join("run/cluster.toml").exists());
}

#[test]
fn petrel_run_fails_and_names_the_failing_node() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        r#"
[cluster]
name = "bad"
join_timeout_ms = 20000
[[nodes]]
name = "hub"
roles = ["demo-aggregator"]
[[nodes]]
name = "broken"
roles = ["no-such-role"]
"#,
    );
    let started = Instant::now();
    let out = Command::new(PETREL)
        .args(["run", cfg.to_str().unwrap(), "--timeout-s", "60"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no-such-role"), "{err}");
    assert!(
        err.contains("node broken failed") || err.contains("node hub failed"),
        "{err}"
    );
    // The healthy node was stopped rather than left waiting for the broken one.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

/// How a chaos test hurts one node.
enum Fault {
    /// SIGKILL: the process vanishes.
    Kill,
    /// SIGSTOP past the failure timeout: the process is alive but silent.
    Pause,
}

/// Three `petrel node` processes; one is hurt mid-run. The survivors must notice within
/// the failure timeout, name the hurt node, and exit with an error (no hang).
fn chaos(fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let cfg_text = format!(
        r#"
[cluster]
name = "chaos"
certs_dir = "{}"
heartbeat_interval_ms = 100
failure_timeout_ms = 1000
[[nodes]]
name = "hub"
addr = "127.0.0.1:{}"
roles = ["demo-aggregator"]
[[nodes]]
name = "w1"
addr = "127.0.0.1:{}"
roles = ["demo-worker"]
[[nodes]]
name = "w2"
addr = "127.0.0.1:{}"
roles = ["demo-worker"]
[app.demo]
rounds = 1000000
tensor_len = 256
"#,
        certs.display(),
        free_port(),
        free_port(),
        free_port()
    );
    let cfg = write_config(dir.path(), &cfg_text);
    let st = Command::new(PETREL)
        .args([
            "certs",
            "--dir",
            certs.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let spawn = |name: &str| {
        Command::new(PETREL)
            .args(["node", "--config", cfg.to_str().unwrap(), "--name", name])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let hub = drain(spawn("hub"));
    let w1 = drain(spawn("w1"));
    let mut w2 = spawn("w2");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        w2.try_wait().unwrap().is_none(),
        "w2 ended before the fault"
    );
    let hurt = Instant::now();
    match fault {
        Fault::Kill => w2.kill().unwrap(),
        Fault::Pause => {
            let st = Command::new("kill")
                .args(["-STOP", &w2.id().to_string()])
                .status()
                .unwrap();
            assert!(st.success());
        }
    }
    for (name, (child, log)) in [("hub", hub), ("w1", w1)] {
        let status = wait_with_deadline(child, Duration::from_secs(20));
        let detected = hurt.elapsed();
        let err = log.join().unwrap();
        let err = err.lines().rev().take(30).collect::<Vec<_>>().join("\n");
        assert!(!status.success(), "{name} should fail:\n{err}");
        assert!(err.contains("w2"), "{name} must name the hurt node:\n{err}");
        // Reported within the failure timeout (1 s) plus scheduling slack.
        assert!(
            detected < Duration::from_secs(8),
            "{name} took {detected:?}"
        );
    }
    let _ = w2.kill();
    let _ = w2.wait();
}

#[test]
fn killed_node_is_detected_by_the_other_processes() {
    chaos(Fault::Kill);
}

#[test]
fn paused_node_is_detected_by_the_other_processes() {
    chaos(Fault::Pause);
}

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Reads a child's stderr on a thread, so a chatty child never blocks on a full pipe.
fn drain(mut child: std::process::Child) -> (std::process::Child, std::thread::JoinHandle<String>) {
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    (child, reader)
}

fn wait_with_deadline(mut child: std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
