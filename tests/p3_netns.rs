//! `petrel bench p3 --netns`: the P3 benchmark with every node a `petrel node` process in its
//! own network namespace and the links limited by `tc` in the kernel. Needs root and
//! iproute2; skips with a message otherwise.

use std::process::Command;

const PETREL: &str = env!("CARGO_BIN_EXE_petrel");

#[test]
fn p3_bench_across_network_namespaces() {
    let test = "p3_bench_across_network_namespaces";
    if let Err(why) = petrel::netns::available() {
        eprintln!("SKIPPED {test}: {why}");
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
    }
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
