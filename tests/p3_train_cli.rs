//! `petrel train p3` end to end: a candle MLP on 2 worker + 2 shard processes on
//! 127.0.0.1, per-epoch progress, test accuracy and a saved model that loads back, that
//! `petrel eval p3` scores exactly as training did and `petrel predict p3` applies.

use std::path::Path;
use std::process::Command;

use petrel::ml::dnn::cifar::{synthetic_cifar, write_cifar10};
use petrel::ml::dnn::data::Dataset;

/// Writes `train` and `test` CIFAR-10 binary files drawn from the same classes.
fn write_cifar_pair(dir: &Path, train: usize, test: usize) -> (String, String) {
    let all = synthetic_cifar(train + test, 10, 0.35, 3).unwrap();
    let part = |range: std::ops::Range<usize>, name: &str| {
        let (x, y) = all.select(&range.collect::<Vec<_>>());
        let path = dir.join(name);
        write_cifar10(
            &path,
            &Dataset {
                x,
                y,
                n_classes: 10,
            },
        )
        .unwrap();
        path.display().to_string()
    };
    (
        part(0..train, "train.bin"),
        part(train..train + test, "test.bin"),
    )
}

use crate::common;

fn petrel(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::PETREL).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn trained_p3_model_evaluates_and_predicts_as_training_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test) = write_cifar_pair(dir.path(), 64, 40);
    let model = dir.path().join("model.json");
    let model = model.to_str().unwrap();
    let run = dir.path().join("run");
    let (ok, stdout, stderr) = petrel(&[
        "train",
        "p3",
        "--net",
        "mlp",
        "--mode",
        "fifo",
        "--epochs",
        "2",
        "--width",
        "2",
        "--batch",
        "8",
        "--lr",
        "0.05",
        "--workers",
        "1",
        "--shards",
        "1",
        "--train-data",
        &format!("cifar:{train}"),
        "--test-data",
        &format!("cifar:{test}"),
        "--out",
        model,
        "--run-dir",
        run.to_str().unwrap(),
    ]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let trained: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let trained_accuracy = trained["test_accuracy"].as_f64().unwrap();

    // The saved model scores the test file exactly as worker 0 did after training.
    let (ok, stdout, stderr) = petrel(&["eval", "p3", "--model", model, "--data", &test]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let eval: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(eval["figures"]["examples"].as_f64(), Some(40.0));
    let accuracy = eval["figures"]["accuracy"].as_f64().unwrap();
    assert!(
        (accuracy - trained_accuracy).abs() < 1e-6,
        "{accuracy} vs {trained_accuracy}"
    );

    // predict: one row per example, probabilities summing to 1, the arg-max as class, and
    // as many right as the accuracy says.
    let predictions = dir.path().join("pred.tsv");
    let (ok, stdout, stderr) = petrel(&[
        "predict",
        "p3",
        "--model",
        model,
        "--data",
        &format!("cifar:{test}"),
        "--out",
        predictions.to_str().unwrap(),
    ]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let text = std::fs::read_to_string(&predictions).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("example\tclass\tp_0"));
    let labels = petrel::ml::dnn::cifar::read_cifar10(&test).unwrap().y;
    let mut right = 0;
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 40);
    for (row, label) in rows.iter().zip(labels.iter()) {
        let cols: Vec<f64> = row.split('\t').map(|c| c.parse().unwrap()).collect();
        assert_eq!(cols.len(), 2 + 10);
        let sum: f64 = cols[2..].iter().sum();
        assert!((sum - 1.0).abs() < 1e-3, "{row}");
        right += usize::from(cols[1] as usize == *label);
    }
    assert!(
        (right as f64 / 40.0 - accuracy).abs() < 1e-6,
        "{right}/40 vs {accuracy}"
    );

    // A model of another app is refused, naming the file.
    let (ok, _, stderr) = petrel(&["eval", "lasso", "--model", model, "--data", &test]);
    assert!(!ok);
    assert!(stderr.contains("model.json"), "{stderr}");
}

#[test]
fn train_p3_runs_processes_and_saves_a_loadable_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.json");
    let out = Command::new(common::PETREL)
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
        // A relative run directory, as a user types it (the node configs inside must
        // still find their certificates).
        .args(["--run-dir", "run"])
        .current_dir(dir.path())
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

    // Checkpoints are on by default, beside the model (`<out>.checkpoints`); --resume
    // without one is refused.
    assert!(petrel::recovery::has_checkpoint(
        &dir.path().join("model.json.checkpoints")
    ));
    let none = Command::new(common::PETREL)
        .args([
            "train",
            "p3",
            "--net",
            "mlp",
            "--resume",
            "--checkpoint-dir",
        ])
        .arg(dir.path().join("empty"))
        .output()
        .unwrap();
    assert!(!none.status.success());
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("no valid P3 checkpoint"), "{err}");

    // A bad data spec is refused before any process starts, naming the flag's setting.
    let bad = Command::new(common::PETREL)
        .args(["train", "p3", "--train-data", "csv:x"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("train_data"), "{err}");
}

/// A job that fails leaves no model at `--out`, and by default no run directory (nor
/// certificates, nor keys) in the working directory.
#[test]
fn a_failed_p3_job_leaves_no_model_and_no_run_files_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::PETREL)
        .args(["train", "p3", "--net", "mlp", "--epochs", "1"])
        .args(["--width", "2", "--batch", "8", "--lr", "1e30"])
        .args([
            "--train-data",
            "synthetic:64",
            "--test-data",
            "synthetic:32",
        ])
        .args(["--max-restarts", "0", "--out", "m.json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!dir.path().join("m.json").exists(), "{stderr}");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter().all(|name| name == "m.json.checkpoints"),
        "left behind: {left:?}"
    );
}
