//! A 3-node cluster across network namespaces joined by rate-limited veth links: a real
//! multi-host run on one machine. Needs root and iproute2; skips with a message otherwise.

use petrel::netns::{Hosts, LinkShape};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PETREL: &str = env!("CARGO_BIN_EXE_petrel");

struct Teardown(Hosts);
impl Drop for Teardown {
    fn drop(&mut self) {
        self.0.down();
    }
}

#[test]
fn three_node_cluster_across_network_namespaces() {
    if let Err(why) = petrel::netns::available() {
        eprintln!("SKIPPED three_node_cluster_across_network_namespaces: {why}");
        return;
    }
    let prefix = format!("pt{}", std::process::id() % 100_000);
    let hosts = Hosts::up(
        &prefix,
        3,
        &LinkShape {
            rate_mbit: Some(200.0),
            delay_ms: None,
        },
    )
    .expect("create namespaces");
    let _teardown = Teardown(hosts.clone());
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let names = ["hub", "w1", "w2"];
    let roles = ["demo-aggregator", "demo-worker", "demo-worker"];
    let mut cfg = format!(
        "[cluster]\nname = \"netns\"\ncerts_dir = \"{}\"\nheartbeat_interval_ms = 200\nfailure_timeout_ms = 3000\n",
        certs.display()
    );
    for i in 0..3 {
        cfg.push_str(&format!(
            "[[nodes]]\nname = \"{}\"\naddr = \"{}:7000\"\nroles = [\"{}\"]\n",
            names[i],
            hosts.host_ip(i),
            roles[i]
        ));
    }
    cfg.push_str("[app.demo]\nrounds = 5\ntensor_len = 65536\n");
    let cfg_path = dir.path().join("cluster.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let st = Command::new(PETREL)
        .args([
            "certs",
            "--dir",
            certs.to_str().unwrap(),
            "--config",
            cfg_path.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let mut children: Vec<_> = (0..3)
        .map(|i| {
            hosts
                .command(i, PETREL)
                .args([
                    "node",
                    "--config",
                    cfg_path.to_str().unwrap(),
                    "--name",
                    names[i],
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let mut outputs = Vec::new();
    for (i, child) in children.drain(..).enumerate() {
        let mut child = child;
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() > Duration::from_secs(90) {
                let _ = child.kill();
                panic!("{} did not finish", names[i]);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        outputs.push((names[i], child.wait_with_output().unwrap()));
    }
    for (name, out) in outputs {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name} failed:\n{err}");
        if name != "hub" {
            assert!(err.contains("round=5 of=5"), "{name}:\n{err}");
        }
    }
}
