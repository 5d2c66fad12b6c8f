//! `petrel train p3` end to end: a candle MLP on 2 worker + 2 shard processes on
//! 127.0.0.1, per-epoch progress, test accuracy and a saved model that loads back, that
//! `petrel eval p3` scores exactly as training did and `petrel predict p3` applies.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

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
use crate::common::succeeded;

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
    let model = dir.path().join("model.safetensors");
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
    assert!(stderr.contains("model.safetensors"), "{stderr}");
}

#[test]
fn train_p3_runs_processes_and_saves_a_loadable_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.safetensors");
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
        &dir.path().join("model.safetensors.checkpoints")
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
    let launcher = Command::new(common::PETREL)
        .args(["train", "p3", "--net", "mlp", "--epochs", "400"])
        .args(["--width", "2", "--batch", "8", "--checkpoint-every", "4"])
        .args([
            "--train-data",
            "synthetic:64",
            "--test-data",
            "synthetic:32",
        ])
        .args(["--max-restarts", "0", "--out", "m.safetensors"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-run, once a checkpoint exists: a node dies and no restart is allowed.
    let checkpoints = dir.path().join("m.safetensors.checkpoints");
    common::wait_until(Duration::from_secs(120), "a first checkpoint", || {
        petrel::recovery::has_checkpoint(&checkpoints)
    });
    let nodes = common::children_of(launcher.id());
    assert!(!nodes.is_empty());
    assert!(common::signal(nodes[0], "KILL"));
    let out = launcher.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!dir.path().join("m.safetensors").exists(), "{stderr}");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter().all(|name| name == "m.safetensors.checkpoints"),
        "left behind: {left:?}"
    );
}

/// Trains the tiny MLP of the model-file tests into `dir/name`; returns the file.
fn train_tiny_mlp(dir: &Path, name: &str) -> std::path::PathBuf {
    let model = dir.join(name);
    let (ok, stdout, stderr) = petrel(&[
        "train",
        "p3",
        "--net",
        "mlp",
        "--width",
        "2",
        "--batch",
        "8",
        "--epochs",
        "1",
        "--train-data",
        "synthetic:64",
        "--test-data",
        "synthetic:32",
        "--out",
        model.to_str().unwrap(),
        "--run-dir",
        dir.join("run").to_str().unwrap(),
    ]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    model
}

/// The rows of `petrel predict p3` output: the class, then the probabilities.
fn predicted_rows(tsv: &str) -> Vec<(usize, Vec<f64>)> {
    let mut lines = tsv.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("example\tclass\tp_0\t"), "{header}");
    lines
        .enumerate()
        .map(|(i, line)| {
            let cells: Vec<&str> = line.split('\t').collect();
            assert_eq!(cells[0], (i + 1).to_string(), "{line}");
            let p = cells[2..].iter().map(|c| c.parse().unwrap()).collect();
            (cells[1].parse().unwrap(), p)
        })
        .collect()
}

/// `train p3 --out m.safetensors` writes safetensors that the safetensors crate, candle's
/// `VarBuilder` and (when installed) Python read: candle's tensor names and shapes, the
/// architecture and training settings as metadata, no paths; the net candle builds from
/// it predicts what `petrel predict p3` prints, probabilities summing to 1.
#[test]
fn p3_model_file_is_safetensors_that_candle_and_python_load() {
    use candle_core::{DType, Device, Module, Tensor};
    use safetensors::{Dtype, SafeTensors};

    let dir = tempfile::tempdir().unwrap();
    let model = train_tiny_mlp(dir.path(), "m.safetensors");

    // (a) The safetensors crate: names, dtypes, shapes, metadata.
    let bytes = std::fs::read(&model).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = file.names();
    names.sort();
    assert_eq!(
        names,
        [
            "dense0.bias",
            "dense0.weight",
            "dense1.bias",
            "dense1.weight"
        ]
    );
    let expected: [(&str, &[usize]); 4] = [
        ("dense0.weight", &[16, 3 * 32 * 32]),
        ("dense0.bias", &[16]),
        ("dense1.weight", &[10, 16]),
        ("dense1.bias", &[10]),
    ];
    for (name, shape) in expected {
        let t = file.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        assert_eq!(t.shape(), shape, "{name}");
    }
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta: std::collections::BTreeMap<String, String> =
        header.metadata().clone().unwrap().into_iter().collect();
    let want: std::collections::BTreeMap<String, String> = [
        ("app", "p3"),
        ("format", "petrel-p3-model"),
        ("format_version", "1"),
        ("net", "mlp"),
        ("width", "2"),
        ("input", "[3,32,32]"),
        ("classes", "10"),
        ("seed", "1"),
        ("batch", "8"),
        ("workers", "2"),
        // 64 examples / (2 workers x 8) per epoch.
        ("iterations", "4"),
        ("lr", "0.02"),
        ("momentum", "0.9"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(meta, want);

    // (d) predict p3: per example the arg-max class and probabilities summing to 1.
    let (_, test) = write_cifar_pair(dir.path(), 1, 24);
    let (ok, tsv, stderr) = petrel(&[
        "predict",
        "p3",
        "--model",
        model.to_str().unwrap(),
        "--data",
        &format!("cifar:{test}"),
    ]);
    assert!(ok, "{stderr}");
    let rows = predicted_rows(&tsv);
    assert_eq!(rows.len(), 24);
    for (class, p) in &rows {
        assert_eq!(p.len(), 10);
        let sum: f64 = p.iter().sum();
        assert!((sum - 1.0).abs() < 1e-4, "{p:?} sums to {sum}");
        let best = (0..10).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap();
        assert!(p[best] - p[*class] < 1e-6, "class {class} of {p:?}");
    }

    // (b) candle: the same net built from the file by VarBuilder predicts the same.
    let examples = petrel::ml::dnn::cifar::read_cifar10(&test).unwrap();
    let shape = examples.x.shape().to_vec();
    let x = Tensor::from_vec(examples.x.iter().copied().collect(), shape, &Device::Cpu).unwrap();
    // SAFETY: the file is not modified while mapped.
    let vb = unsafe {
        candle_nn::VarBuilder::from_mmaped_safetensors(&[&model], DType::F32, &Device::Cpu)
    }
    .unwrap();
    let net = petrel::p3::models::nets::by_name("mlp", &[3, 32, 32], 2, 10).unwrap();
    let logits = net.build(vb).unwrap().forward(&x).unwrap();
    let probs = candle_nn::ops::softmax(&logits, 1)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert_eq!(probs.len(), rows.len());
    for (mine, (class, printed)) in probs.iter().zip(&rows) {
        for (a, b) in mine.iter().zip(printed) {
            assert!((f64::from(*a) - b).abs() < 2e-6, "{mine:?} vs {printed:?}");
        }
        let best = (0..10)
            .max_by(|&a, &b| mine[a].total_cmp(&mine[b]))
            .unwrap();
        assert_eq!(best, *class, "{mine:?}");
    }

    // (c) Python's safetensors.numpy, where installed.
    let python = Command::new("python3")
        .args(["-c", "import safetensors.numpy, numpy"])
        .output();
    if !python.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: python3 with safetensors and numpy is not importable");
        return;
    }
    let script = "import sys, json\n\
        from safetensors.numpy import load_file\n\
        from safetensors import safe_open\n\
        t = load_file(sys.argv[1])\n\
        with safe_open(sys.argv[1], framework='np') as f: meta = f.metadata()\n\
        print(json.dumps({'tensors': {k: [list(v.shape), str(v.dtype), float(v.astype('float64').sum())] for k, v in t.items()}, 'net': meta['net']}))";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&model)
        .output()
        .unwrap();
    succeeded(&out);
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["net"], "mlp");
    for (name, shape) in expected {
        let t = &seen["tensors"][name];
        assert_eq!(t[0], serde_json::json!(shape), "{name}");
        assert_eq!(t[1], "float32", "{name}");
        let sum: f64 = file
            .tensor(name)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
            .sum();
        assert!((t[2].as_f64().unwrap() - sum).abs() < 1e-9, "{name}");
    }
}

/// A `.json` `--out` is refused before any process starts, with a hint; a JSON model of an
/// earlier version still evaluates and predicts as its safetensors twin.
#[test]
fn p3_refuses_a_json_out_and_still_reads_json_models() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = petrel(&["train", "p3", "--net", "mlp", "--out", "m.json"]);
    assert!(!ok);
    assert!(
        stderr.contains("--out m.json") && stderr.contains(".safetensors"),
        "{stderr}"
    );

    let model = train_tiny_mlp(dir.path(), "m.safetensors");
    // The JSON layout earlier versions wrote (`petrel_ml::model::SavedModel`).
    let saved = petrel::p3::model_file::read(&model).unwrap();
    let json = dir.path().join("old.json");
    std::fs::write(&json, saved.to_json().unwrap()).unwrap();
    let (_, test) = write_cifar_pair(dir.path(), 1, 16);
    let run = |cmd: &str, m: &Path| {
        let (ok, stdout, stderr) = petrel(&[
            cmd,
            "p3",
            "--model",
            m.to_str().unwrap(),
            "--data",
            &format!("cifar:{test}"),
        ]);
        assert!(ok, "{stderr}");
        stdout
    };
    let figures = |stdout: String| {
        let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        v["figures"].clone()
    };
    assert_eq!(figures(run("eval", &json)), figures(run("eval", &model)));
    assert_eq!(run("predict", &json), run("predict", &model));
}
