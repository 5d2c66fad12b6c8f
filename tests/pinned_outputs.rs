//! Every built-in training app, run through the CLI on a small fixed input and seed, must
//! write exactly the model files it wrote before the code was restructured. The expected
//! SHA-256 sums were taken from the release before the one-home-per-system layout; a
//! change here means a user would get a different model, so it must be deliberate (update
//! the sum in the same commit and say why).
//!
//! Only deterministic settings are pinned: STRADS apps are deterministic by construction
//! (commits apply in round order); PS apps run one worker under BSP; P3's shards sum the
//! workers' slices in a fixed order, so its parameters are pinned (its settings name the
//! run's paths). `metrics.json` holds wall-clock timings, so it is not pinned.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

fn train(out: &Path, app: &str, args: &[&str]) {
    let status = Command::new(env!("CARGO_BIN_EXE_petrel"))
        .arg("train")
        .arg(app)
        .args(args)
        .arg("--out")
        .arg(out)
        .env("RUST_LOG", "warn")
        .status()
        .expect("run petrel");
    assert!(status.success(), "petrel train {app} failed: {status}");
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn check(out: &Path, expected: &[(&str, &str)]) {
    for (file, sum) in expected {
        assert_eq!(&sha256(&out.join(file)), sum, "{file} changed");
    }
}

#[test]
fn strads_apps_write_the_pinned_models() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lasso_like = |n: &str, f: &str, rounds: &str| -> Vec<String> {
        [
            "--workers",
            "2",
            "--transport",
            "memory",
            "--synthetic-samples",
            n,
            "--synthetic-features",
            f,
            "--max-rounds",
            rounds,
            "--seed",
            "1",
        ]
        .map(String::from)
        .to_vec()
    };
    // `--max-rounds` is a scheduling knob, so `auto` runs the scheduled solver here.
    let args = lasso_like("200", "400", "300");
    train(
        &d.join("lasso"),
        "lasso",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    check(
        &d.join("lasso"),
        &[(
            "coefficients.tsv",
            "1729caff362cba61c6046f1df2ec6184640b50b0c731c790a2a536ac5e4f2a07",
        )],
    );
    let args = lasso_like("200", "300", "200");
    train(
        &d.join("logistic"),
        "logistic",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    check(
        &d.join("logistic"),
        &[(
            "coefficients.tsv",
            "a38b3d9a7758704a85a2dbbfb42dad7fb9602633016f91c12b26c55d13f411ea",
        )],
    );
    train(
        &d.join("strads-mf"),
        "strads-mf",
        &[
            "--workers",
            "2",
            "--transport",
            "memory",
            "--iterations",
            "2",
            "--seed",
            "1",
        ],
    );
    // W is seeded per user, not per worker, so runs with any worker count start from the
    // same model.
    check(
        &d.join("strads-mf"),
        &[
            (
                "item_factors.tsv",
                "60293dc26a2e4e78c514a131e046dd4d5351d28611f75f7ac63d98618d67b111",
            ),
            (
                "user_factors.tsv",
                "a443256afb3b1b6214456d1c500bdf56dc799deaf1318c7ff099f903bc9289dc",
            ),
        ],
    );
    train(
        &d.join("lda"),
        "lda",
        &[
            "--workers",
            "2",
            "--transport",
            "memory",
            "--iterations",
            "3",
            "--topics",
            "5",
            "--seed",
            "1",
        ],
    );
    check(
        &d.join("lda"),
        &[
            (
                "topic_word.tsv",
                "d9ea962eb56a7998851fe4d1826bfe6d4535016ad17046813ba71c686066e1bf",
            ),
            (
                "topics.txt",
                "145bfcfbe786946fd1089ca14b57b7b5600d1e99b6794214853909b654c7b7e0",
            ),
        ],
    );
}

#[test]
fn gauss_seidel_solvers_and_their_baseline_write_the_pinned_models() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The Gauss-Seidel solver (the default without scheduling knobs) with two workers, and
    // the single-threaded baseline it becomes with one worker and no cluster.
    for (app, features, workers, transport, sum) in [
        (
            "lasso",
            "400",
            "2",
            "memory",
            "3459648888664ea8bcc97a0fe7e81e50ecc64c4d73148f0798f2d87b666a79ef",
        ),
        (
            "logistic",
            "300",
            "2",
            "memory",
            "ecb3d3f678a1d7534c3a0f5e86d8536b2047153e4da5d868b6abd20784b0733b",
        ),
        (
            "lasso",
            "400",
            "1",
            "none",
            "336f4cf68da878b636c3543622a2554f2e478a25d557f573a564d7d601de2da6",
        ),
        (
            "logistic",
            "300",
            "1",
            "none",
            "de883acec756bb22ea634421d327befa4bc2b63bc3e95aadd3eb874d5c3fc01c",
        ),
    ] {
        let out = d.join(format!("{app}-gs-{transport}"));
        train(
            &out,
            app,
            &[
                "--solver",
                "gauss-seidel",
                "--workers",
                workers,
                "--transport",
                transport,
                "--synthetic-samples",
                "200",
                "--synthetic-features",
                features,
                "--synthetic-seed",
                "1",
            ],
        );
        check(&out, &[("coefficients.tsv", sum)]);
    }
}

#[test]
fn parameter_server_apps_write_the_pinned_models() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one_worker = [
        "--workers",
        "1",
        "--shards",
        "2",
        "--consistency",
        "bsp",
        "--transport",
        "memory",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        one_worker.iter().chain(extra).copied().collect()
    };
    train(
        &d.join("ps-mf"),
        "ps-mf",
        &with(&["--epochs", "2", "--seed", "1"]),
    );
    check(
        &d.join("ps-mf"),
        &[(
            "model.json",
            "8edc903d5a34bfca973c2c982610427199092e2c619caa0854f59577fdfd9ded",
        )],
    );
    train(&d.join("ps-lr"), "ps-lr", &with(&["--clocks", "20"]));
    check(
        &d.join("ps-lr"),
        &[(
            "model.json",
            "2cafa6e813340a5b4131949ab88bc83e200cacf49df4273fc5b304f38dda1130",
        )],
    );
    train(
        &d.join("ps-lda"),
        "ps-lda",
        &with(&["--iterations", "2", "--topics", "5", "--seed", "1"]),
    );
    check(
        &d.join("ps-lda"),
        &[
            (
                "topic_word.tsv",
                "43a437da648076a3eb41c29cace63a60092f52aad3594a63c466dcc32c893cb4",
            ),
            (
                "topics.txt",
                "e20072edc3575ce5518ca576c88d537a8df17f83ff09a2d51419ca882e0594ce",
            ),
        ],
    );
}

#[test]
fn p3_writes_the_pinned_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.safetensors");
    let status = Command::new(env!("CARGO_BIN_EXE_petrel"))
        .args(["train", "p3", "--net", "mlp", "--epochs", "1", "--out"])
        .arg(&model)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .env("RUST_LOG", "warn")
        .status()
        .expect("run petrel");
    assert!(status.success(), "petrel train p3 failed: {status}");
    // The pin is over the tensors in forward order, as the JSON model file of earlier
    // versions wrote them from its `"params":` on, so the same parameters keep the same
    // pin across the change of file format.
    let saved = petrel::p3::model_file::read(&model).unwrap();
    let mut pinned = b"\"params\":".to_vec();
    pinned.extend(serde_json::to_vec(&saved.params).unwrap());
    pinned.push(b'}');
    let sum: String = Sha256::digest(&pinned)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sum, "bff49365b4b2d7173414a6a0fcb380ed17d23e5a71940d03b3b6486715cf4623",
        "the P3 model's parameters changed"
    );
}
