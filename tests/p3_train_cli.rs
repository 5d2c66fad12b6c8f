//! `petrel train p3` end to end: a candle MLP on 2 worker + 2 shard processes on
//! 127.0.0.1, per-epoch progress, test accuracy and a saved model that loads back.

use std::process::Command;

#[test]
fn train_p3_runs_processes_and_saves_a_loadable_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.json");
    let out = Command::new(env!("CARGO_BIN_EXE_petrel"))
        .args([
            "train", "p3", "--net", "mlp", "--mode", "p3", "--epochs", "2",
        ])
        .args(["--width", "2", "--batch", "8", "--lr", "0.05"])
        .args([
            "--train-data",
            "synthetic:64",
            "--test-data",
            "synthetic:32",
        ])
        .arg("--out")
        .arg(&model)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("train loss"), "{stdout}");
    assert!(stdout.contains("test accuracy"), "{stdout}");
    let json = stdout.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["iterations"], 8);
    let (saved, net) = petrel::p3::roles::load_model(&model).unwrap();
    assert_eq!(saved.net, "mlp");
    assert_eq!(net.n_stages(), 2);

    // A bad data spec is refused before any process starts, naming the flag's setting.
    let bad = Command::new(env!("CARGO_BIN_EXE_petrel"))
        .args(["train", "p3", "--train-data", "csv:x"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("train_data"), "{err}");
}
