//! Tiny hostile files fed to every command that reads them, each run under a 512 MiB data
//! limit: a header or a single id claiming a huge dimension, or a saved network declaring
//! a huge architecture, must end in a clean error naming the file (exit code 1, no signal,
//! no panic, no failed allocation), never in an allocation by what the file claims.

use crate::common::PETREL;
use crate::common::succeeded;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

/// The address space a hostile input may make the process use for data.
const DATA_LIMIT: libc::rlim_t = 512 << 20;

/// `petrel <args>` under [`DATA_LIMIT`], to its end.
fn limited(args: &[&str]) -> Output {
    let mut cmd = Command::new(PETREL);
    cmd.args(args).env("RUST_LOG", "warn");
    // SAFETY: setrlimit is async-signal-safe and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: DATA_LIMIT,
                rlim_max: DATA_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("run petrel")
}

/// `petrel <args>` under the limit must fail cleanly: exit code 1, an error naming `file`
/// on one line, no panic and no failed allocation.
fn refused(args: &[&str], file: &Path, what: &str) {
    let out = limited(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = file.display().to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: {} ({})",
        out.status,
        stderr.chars().take(2000).collect::<String>()
    );
    for bad in ["panicked", "memory allocation", "RUST_BACKTRACE"] {
        assert!(!stderr.contains(bad), "{args:?}: {stderr}");
    }
    let line = stderr
        .lines()
        .find(|l| l.contains(&shown))
        .unwrap_or_else(|| panic!("{args:?}: no line names {shown}: {stderr}"));
    assert!(line.contains(what), "{args:?}: {what:?} not in {line:?}");
}

/// `petrel train <app> --workers 1 [--shards 1] --transport memory <flag> <file>`.
fn train_args<'a>(app: &'a str, flag: &'a str, file: &'a str, out: &'a str) -> Vec<&'a str> {
    let mut args = vec!["train", app, "--workers", "1"];
    if app.starts_with("ps-") {
        args.extend(["--shards", "1"]);
    }
    args.extend(["--transport", "memory", flag, file, "--out", out]);
    args
}

/// 74 bytes of Matrix Market declaring 2^26 x 2^26 with 2 entries.
#[test]
fn a_matrix_market_header_claiming_2_pow_26_squared_is_refused_by_both_mf_apps() {
    let dir = tempfile::tempdir().unwrap();
    let mtx = dir.path().join("huge.mtx");
    let text = "%%MatrixMarket matrix coordinate real general\n67108864 67108864 2\n1 1 5\n2 2 4\n";
    std::fs::write(&mtx, text).unwrap();
    let file = mtx.to_str().unwrap();
    for app in ["ps-mf", "strads-mf"] {
        let out = dir.path().join(app);
        let out = out.to_str().unwrap();
        refused(
            &train_args(app, "--data", file, out),
            &mtx,
            "row count 67108864",
        );
    }
}

/// A 2-row LIBSVM file with feature index 2^26.
#[test]
fn a_single_feature_index_of_2_pow_26_is_refused_by_every_libsvm_app() {
    let dir = tempfile::tempdir().unwrap();
    let svm = dir.path().join("wide.svm");
    std::fs::write(&svm, "1 1:1\n0 67108864:1\n").unwrap();
    let file = svm.to_str().unwrap();
    for app in ["ps-lr", "lasso", "logistic"] {
        let out = dir.path().join(app);
        let out = out.to_str().unwrap();
        refused(
            &train_args(app, "--data", file, out),
            &svm,
            "feature index 67108864",
        );
    }
}

/// 26 bytes of docword declaring D = 20,000,000.
#[test]
fn a_docword_header_claiming_20_million_documents_is_refused_by_both_lda_apps() {
    let dir = tempfile::tempdir().unwrap();
    let docword = dir.path().join("docword.huge.txt");
    std::fs::write(&docword, "20000000\n1\n1\n1 1 1\n").unwrap();
    let file = docword.to_str().unwrap();
    for app in ["lda", "ps-lda"] {
        let out = dir.path().join(app);
        let out = out.to_str().unwrap();
        refused(
            &train_args(app, "--docword", file, out),
            &docword,
            "document count D 20000000",
        );
    }
}

/// A P3 model file of a few hundred bytes whose declared architecture (a width of 10^9,
/// a width of 0) would be built before its tensors were compared with it.
#[cfg(feature = "candle")]
#[test]
fn a_p3_model_declaring_a_huge_or_empty_architecture_is_refused_by_eval_and_predict() {
    let dir = tempfile::tempdir().unwrap();
    // Two CIFAR-10 records (a label byte, then 3x32x32 pixels): data the models take.
    let cifar = dir.path().join("two.bin");
    std::fs::write(&cifar, vec![0u8; 2 * (1 + 3 * 32 * 32)]).unwrap();
    let cifar = cifar.to_str().unwrap();
    for (name, net, width) in [
        ("wide.json", "mlp", 1_000_000_000u64),
        ("empty.json", "resnet18", 0),
    ] {
        let model = dir.path().join(name);
        let json = serde_json::json!({
            "format": "petrel-model",
            "version": 1,
            "app": "p3",
            "settings": {},
            "params": {
                "kind": "network",
                "net": net,
                "input": [3, 32, 32],
                "width": width,
                "classes": 10,
                "tensors": [[0.5, 0.25], [0.125]],
            },
        });
        std::fs::write(&model, json.to_string()).unwrap();
        let m = model.to_str().unwrap();
        for command in ["eval", "predict"] {
            refused(
                &[command, "p3", "--model", m, "--data", cifar],
                &model,
                "field `width`",
            );
        }
    }
}

/// What the size rule lets through: a small file may declare up to a million ids, and a
/// file pays with its bytes for more; such files train.
#[test]
fn small_files_within_the_allowance_still_train() {
    let dir = tempfile::tempdir().unwrap();
    let svm = dir.path().join("sparse.svm");
    let mut text = String::new();
    for i in 0..40 {
        text.push_str(&format!("{} {}:1 1000000:0.5\n", i % 2, i + 1));
    }
    std::fs::write(&svm, text).unwrap();
    let out = dir.path().join("ps-lr");
    let mut args = train_args(
        "ps-lr",
        "--data",
        svm.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    args.extend(["--clocks", "5"]);
    let run = limited(&args);
    succeeded(&run);
}
