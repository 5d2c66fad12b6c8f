//! `petrel bench p3 --netns`: the P3 benchmark with every node a `petrel node` process in its
//! own network namespace and the links limited by `tc` in the kernel. Needs root and
//! iproute2; skips with a message otherwise.

use std::process::Command;

use crate::common;

use common::{PETREL, netns_skip};

#[test]
fn p3_bench_across_network_namespaces() {
    let test = "p3_bench_across_network_namespaces";
    if netns_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(PETREL)
        .current_dir(dir.path())
        .args([
            "bench",
            "p3",
            "--netns",
            "--model",
            "vgg19",
            "--model-mb",
            "0.5",
            "--compute-ms",
            "100",
            "--workers",
            "2",
            "--shards",
            "2",
            "--iterations",
            "2",
            "--warmup",
            "1",
            "--netns-timeout-s",
            "60",
            "--probe-iterations",
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("p3n{}-", child.id() % 10_000);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let line = stdout.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["links"], "netns-tc");
    assert_eq!(v["workers"], 2);
    assert_eq!(v["shards"], 2);
    let modes = v["sweep"][0]["modes"].as_array().unwrap();
    let names: Vec<&str> = modes.iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["sequential", "fifo", "p3"]);
    for m in modes {
        let t = m["secs_per_iter"].as_f64().unwrap();
        assert!(t.is_finite() && t > 0.0, "{m}");
        // The links' tbf drop counters were read before and after the mode.
        assert!(m["qdisc_drops"].is_u64(), "{m}");
    }
    let probe = &v["sweep"][0];
    assert!(
        probe["probe_s"].as_f64().is_some_and(|t| t > 0.0),
        "{probe}"
    );
    assert!(probe["probe_qdisc_drops"].is_u64(), "{probe}");
    let seq = v["sequential_s"].as_f64().unwrap();
    let p3 = v["p3_s"].as_f64().unwrap();
    // One iteration's compute alone is 0.1 s: a mode below it did not really run.
    assert!(p3 >= 0.09, "p3 {p3} s/iter is below the compute time");
    assert!(p3 <= seq, "p3 {p3} s/iter slower than sequential {seq}");
    // The bench's namespaces are gone afterwards.
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.contains(&prefix),
        "namespaces {prefix}* left:\n{list}"
    );
}

/// The built-in `p3-worker` / `p3-shard` roles as separate processes on 127.0.0.1 (no root
/// needed): every worker writes a report with one mark per iteration plus the final one,
/// and pushed a full gradient per iteration.
#[test]
fn p3_builtin_roles_run_as_separate_processes() {
    let dir = tempfile::tempdir().unwrap();
    let reports = dir.path().join("reports");
    let cfg = dir.path().join("p3.toml");
    let mut text = String::from("[cluster]\nname = \"p3\"\n");
    for (name, role) in [
        ("w0", "p3-worker"),
        ("w1", "p3-worker"),
        ("s0", "p3-shard"),
        ("s1", "p3-shard"),
    ] {
        text.push_str(&format!(
            "[[nodes]]\nname = \"{name}\"\naddr = \"127.0.0.1:0\"\nroles = [\"{role}\"]\n"
        ));
    }
    text.push_str(&format!(
        "[app.p3]\nmode = \"p3\"\nmodel = \"resnet50\"\nscale = 0.002\ndevice_gflops = 50.0\n\
         batch = 4\nslice_size = 4096\nworkers = 2\nshards = 2\niterations = 3\n\
         report_dir = \"{}\"\n",
        reports.display()
    ));
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(PETREL)
        .args(["run", cfg.to_str().unwrap(), "--timeout-s", "60"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "petrel run failed:\n{err}");
    let params = petrel::p3::roles::load_profile("resnet50")
        .unwrap()
        .scaled(0.002)
        .total_params();
    for w in 0..2 {
        let r = petrel::p3::roles::WorkerReportFile::read(&reports, w).unwrap();
        assert_eq!(r.worker, w);
        assert_eq!(r.mode, petrel::p3::Mode::P3);
        assert_eq!(r.marks_s.len(), 4, "{r:?}");
        assert!(r.marks_s.windows(2).all(|m| m[1] >= m[0]), "{r:?}");
        assert_eq!(r.bytes_pushed, 3 * params * 4, "{r:?}");
        assert!(r.secs_per_iter(0).unwrap() > 0.0);
    }
}
