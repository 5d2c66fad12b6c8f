//! A restart names the checkpoint its nodes will actually resume from: when the newest one
//! is damaged, the launcher checks it as the nodes do and names the older one they use.

use crate::common;

use common::{PETREL, kill_node_after_a_checkpoint};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The job checkpoints' clocks in `dir`, ascending.
fn clocks(dir: &Path) -> Vec<u64> {
    let mut c: Vec<u64> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("ps-round-")?
                        .strip_suffix(".manifest")?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    c.sort_unstable();
    c
}

#[test]
fn a_restart_past_a_damaged_checkpoint_names_the_one_the_nodes_use() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mf");
    let ckpt = out.join("checkpoints");
    let child = Command::new(PETREL)
        .args([
            "train",
            "ps-mf",
            "--transport",
            "processes",
            "--consistency",
            "bsp",
        ])
        .args([
            "--max-clocks",
            "80",
            "--clock-ms",
            "60",
            "--checkpoint-every",
            "10",
        ])
        .args(["--max-restarts", "1", "--out"])
        .arg(&out)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Two checkpoints; then the newest one's shard part is damaged just before the kill.
    let damaged = std::cell::Cell::new(0);
    let result = kill_node_after_a_checkpoint(child, "worker-1", Duration::from_secs(120), || {
        let c = clocks(&ckpt);
        if c.len() < 2 {
            return false;
        }
        let newest = c[c.len() - 1];
        let part = ckpt.join(format!("ps-round-{newest}-shard-0.bin"));
        let mut bytes = std::fs::read(&part).unwrap();
        bytes.push(0);
        std::fs::write(&part, bytes).unwrap();
        damaged.set(newest);
        true
    });
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    assert!(result.status.success(), "{stdout}{stderr}");
    let damaged = damaged.get();
    let line = stdout
        .lines()
        .find(|l| l.contains("restart 1 resumes from"))
        .unwrap_or_else(|| panic!("no restart line: {stdout}"));
    let at: u64 = line
        .split_once("newest checkpoint (clock ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no clock in: {line}"));
    eprintln!("{line}");
    // A checkpoint newer than the damaged one can only come from the run before the kill.
    if at <= damaged {
        assert!(
            at < damaged,
            "resumes from the damaged clock {damaged}: {line}"
        );
        assert!(
            line.contains(&format!("skipping clock {damaged}")),
            "the damaged checkpoint is not named: {line}"
        );
    }
    let metrics = common::metrics(&out);
    assert_eq!(
        metrics["worker_clocks"],
        serde_json::json!([80, 80]),
        "{metrics}"
    );
}
