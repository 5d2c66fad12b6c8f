//! STRADS Lasso checkpoint/resume on the actor runtime, in one process: a run that fails
//! right after a checkpoint and is resumed ends with exactly the coefficients of an
//! uninterrupted run. (The multi-process SIGKILL version is in `tests/cli.rs`.)

use petrel::train::{lasso_settings, read_json, run_cluster};
use petrel_actors::JobTransport;
use petrel_strads::apps::lasso::{LassoJob, LassoMetrics, SyntheticLasso};
use petrel_strads::core::scheduler::ScheduleMode;
use std::path::Path;

/// Runs the job on an in-process cluster (memory transport). A role that fails makes the
/// other nodes stop after the failure timeout, kept short here so the failing run is quick.
fn run_lasso_job(
    job: &LassoJob,
    workers: usize,
    transport: JobTransport,
) -> Result<LassoMetrics, String> {
    let out = job.out_dir.clone().unwrap();
    let mut settings = lasso_settings(job, workers, transport, false).map_err(|e| e.to_string())?;
    settings.cluster.failure_timeout_ms = 3000;
    run_cluster(settings, transport, &out.join("run")).map_err(|e| e.to_string())?;
    read_json(&out.join("metrics.json")).map_err(|e| e.to_string())
}

fn job(out: &Path) -> LassoJob {
    LassoJob {
        synthetic: SyntheticLasso {
            n_samples: 120,
            n_features: 240,
            group_size: 10,
            correlation: 0.8,
            n_nonzero: 6,
            noise_std: 0.1,
            nnz_per_column: 0,
            seed: 7,
        },
        mode: ScheduleMode::Dynamic,
        block_size: 8,
        candidate_pool: 32,
        max_rounds: 600,
        eval_every: 100,
        gap_tolerance: None,
        seed: 5,
        out_dir: Some(out.to_path_buf()),
        ..LassoJob::default()
    }
}

#[test]
fn failed_run_resumed_from_its_checkpoint_matches_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let plain_out = dir.path().join("plain");
    let plain = run_lasso_job(&job(&plain_out), 3, JobTransport::Memory).unwrap();
    assert!(plain.checkpoints.is_empty() && plain.resumed_from_round.is_none());

    let ckpt = dir.path().join("ckpt");
    let out = dir.path().join("ckpt-out");
    let mut j = job(&out);
    j.checkpoint_dir = Some(ckpt.clone());
    j.checkpoint_every = 70;
    j.fail_after_checkpoints = Some(3);
    let err = run_lasso_job(&j, 3, JobTransport::Memory).unwrap_err();
    assert!(err.contains("fault injection"), "{err}");
    assert!(!out.join("coefficients.tsv").exists());
    let manifests = std::fs::read_dir(&ckpt)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".manifest")
        })
        .count();
    assert_eq!(manifests, 2, "only the newest two checkpoints are kept");

    j.fail_after_checkpoints = None;
    j.resume = true;
    let m = run_lasso_job(&j, 3, JobTransport::Memory).unwrap();
    assert!(
        m.resumed_from_round.unwrap() > 0,
        "{:?}",
        m.resumed_from_round
    );
    assert_eq!(
        std::fs::read(out.join("coefficients.tsv")).unwrap(),
        std::fs::read(plain_out.join("coefficients.tsv")).unwrap(),
        "resumed model differs from the uninterrupted one"
    );
    assert_eq!(m.updates, plain.updates);
    assert_eq!(m.final_objective.to_bits(), plain.final_objective.to_bits());
}

fn train(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_petrel"))
        .args(["train"])
        .args(args)
        .args([
            "--workers",
            "2",
            "--transport",
            "memory",
            "--block-size",
            "8",
        ])
        .args([
            "--max-rounds",
            "500",
            "--eval-every",
            "100",
            "--gap-tolerance",
            "0",
        ])
        .args(["--synthetic-samples", "100", "--synthetic-features", "200"])
        .output()
        .unwrap()
}

/// The CLI flags: `--checkpoint-dir/--checkpoint-every` write checkpoints, `--resume`
/// continues from the newest (here the last one of a finished run, so the tail is re-run)
/// and ends with the same model.
#[test]
fn cli_flags_checkpoint_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let ck = [
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--checkpoint-every",
        "120",
    ];
    let out = train(&[&["lasso", "--out", a.to_str().unwrap()][..], &ck[..]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: LassoMetrics = read_json(&a.join("metrics.json")).unwrap();
    assert_eq!(first.checkpoints.len(), 4, "{:?}", first.checkpoints);
    let out = train(
        &[
            &["lasso", "--out", b.to_str().unwrap(), "--resume"][..],
            &ck[..],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second: LassoMetrics = read_json(&b.join("metrics.json")).unwrap();
    assert_eq!(second.resumed_from_round, first.checkpoints.last().copied());
    assert_eq!(
        std::fs::read(a.join("coefficients.tsv")).unwrap(),
        std::fs::read(b.join("coefficients.tsv")).unwrap()
    );
    // Resuming from an empty directory is an error naming it, not a fresh start.
    let empty = dir.path().join("empty");
    let out = train(&[
        "lasso",
        "--out",
        b.to_str().unwrap(),
        "--resume",
        "--checkpoint-dir",
        empty.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no valid checkpoint") && err.contains("empty"),
        "{err}"
    );
    // Logistic regression does not checkpoint: a clear error rather than ignored flags.
    let out = train(&[&["logistic", "--out", b.to_str().unwrap()][..], &ck[..]].concat());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lasso only"));
}
