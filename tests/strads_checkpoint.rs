//! STRADS Lasso checkpoint/resume on the actor runtime, in one process: a run that fails
//! right after a checkpoint and is resumed ends with exactly the coefficients of an
//! uninterrupted run. (The multi-process SIGKILL version is in `tests/cli.rs`.)

use petrel::train::{lasso_settings, read_json, run_cluster};
use petrel_actors::JobTransport;
use petrel_strads::apps::lasso::{LassoMetrics, LassoSettings};
use petrel_strads::core::scheduler::ScheduleMode;
use std::path::Path;

use crate::common::fixtures::small_lasso;
use crate::common::succeeded;

/// Runs the job on an in-process cluster (memory transport). A role that fails makes the
/// other nodes stop after the failure timeout, kept short here so the failing run is quick.
fn run_lasso_job(
    job: &LassoSettings,
    workers: usize,
    transport: JobTransport,
) -> Result<LassoMetrics, String> {
    let out = job.out_dir.clone().unwrap();
    let mut settings = lasso_settings(job, workers, transport, false).map_err(|e| e.to_string())?;
    settings.cluster.failure_timeout_ms = 3000;
    run_cluster(settings, transport, &out.join("run")).map_err(|e| e.to_string())?;
    read_json(&out.join("metrics.json")).map_err(|e| e.to_string())
}

/// The rounds of the checkpoint manifests in `dir`, ascending.
fn manifest_rounds(dir: &Path) -> Vec<u64> {
    let mut rounds: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix("strads-round-")?
                .strip_suffix(".manifest")?
                .parse()
                .ok()
        })
        .collect();
    rounds.sort_unstable();
    rounds
}

fn job(out: &Path) -> LassoSettings {
    LassoSettings {
        max_rounds: 400,
        gap_tolerance: None,
        ..small_lasso(out, 120, 240)
    }
}

#[test]
fn failed_run_resumed_from_its_checkpoint_matches_the_uninterrupted_run() {
    // Also with an implicitly centred design (the workers save the residual's stored part
    // and the centring's running sums), for every sampling mode, and pipelined.
    for (fit_intercept, mode, depth) in [
        (false, ScheduleMode::Dynamic, 1),
        (true, ScheduleMode::Dynamic, 1),
        (false, ScheduleMode::Random, 2),
        (false, ScheduleMode::Cyclic, 1),
    ] {
        resume_matches_the_uninterrupted_run(fit_intercept, mode, depth);
    }
}

fn resume_matches_the_uninterrupted_run(fit_intercept: bool, mode: ScheduleMode, depth: usize) {
    let dir = tempfile::tempdir().unwrap();
    let job = |out: &Path| LassoSettings {
        fit_intercept,
        mode,
        depth,
        ..job(out)
    };
    let plain_out = dir.path().join("plain");
    let mut plain_job = job(&plain_out);
    if depth > 1 {
        // A checkpoint drains the pipeline, which changes a pipelined schedule
        // (deterministically): compare with an uninterrupted checkpointed run.
        plain_job.checkpoint_dir = Some(dir.path().join("plain-ckpt"));
        plain_job.checkpoint_every = 70;
    }
    let plain = run_lasso_job(&plain_job, 3, JobTransport::Memory).unwrap();
    assert!(plain.resumed_from_round.is_none());
    assert_eq!(plain.checkpoints.is_empty(), depth == 1);

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
        "{mode} depth {depth} intercept {fit_intercept}: resumed model differs from the uninterrupted one"
    );
    assert_eq!(m.updates, plain.updates);
    assert_eq!(m.final_objective.to_bits(), plain.final_objective.to_bits());

    // A damaged newest checkpoint (a worker's file truncated) is skipped: the run resumes
    // from the older one and still ends identical.
    let rounds = manifest_rounds(&ckpt);
    let f = ckpt.join(format!("strads-round-{}-worker-1.bin", rounds[1]));
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    let m = run_lasso_job(&j, 3, JobTransport::Memory).unwrap();
    assert_eq!(m.resumed_from_round, Some(rounds[0]));
    assert_eq!(
        std::fs::read(out.join("coefficients.tsv")).unwrap(),
        std::fs::read(plain_out.join("coefficients.tsv")).unwrap(),
        "{mode}: the model resumed past a damaged checkpoint differs"
    );
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
    succeeded(&out);
    let first: LassoMetrics = read_json(&a.join("metrics.json")).unwrap();
    assert_eq!(first.checkpoints.len(), 4, "{:?}", first.checkpoints);
    let out = train(
        &[
            &["lasso", "--out", b.to_str().unwrap(), "--resume"][..],
            &ck[..],
        ]
        .concat(),
    );
    succeeded(&out);
    let second: LassoMetrics = read_json(&b.join("metrics.json")).unwrap();
    assert_eq!(second.resumed_from_round, first.checkpoints.last().copied());
    assert_eq!(
        std::fs::read(a.join("coefficients.tsv")).unwrap(),
        std::fs::read(b.join("coefficients.tsv")).unwrap()
    );
    // A checkpoint of another lambda is refused, naming the difference.
    let out = train(
        &[
            &[
                "lasso",
                "--out",
                b.to_str().unwrap(),
                "--resume",
                "--lambda",
                "0.5",
            ][..],
            &ck[..],
        ]
        .concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("lambda is"), "{err}");
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
    // Logistic regression takes the same flags (the kit's round checkpoints): a resumed
    // run continues from the newest and ends with the same coefficients.
    let lck = dir.path().join("logistic-ckpt");
    let lck_flags = [
        "--checkpoint-dir",
        lck.to_str().unwrap(),
        "--checkpoint-every",
        "120",
    ];
    let (c, e) = (dir.path().join("c"), dir.path().join("e"));
    for (out_dir, resume) in [(&c, false), (&e, true)] {
        let mut args = vec!["logistic", "--out", out_dir.to_str().unwrap()];
        args.extend(lck_flags);
        if resume {
            args.push("--resume");
        }
        let out = train(&args);
        succeeded(&out);
        assert!(petrel::recovery::newest_checkpoint_round(&lck).is_some_and(|r| r > 0));
    }
    assert_eq!(
        std::fs::read(c.join("coefficients.tsv")).unwrap(),
        std::fs::read(e.join("coefficients.tsv")).unwrap()
    );
}

/// The STRADS kit's round checkpoints (strads-mf and LDA, ring apps whose
/// blocks travel worker to worker). A finished run leaves its newest two checkpoints; a run
/// resumed from them (in another output directory) re-runs only the tail and writes
/// byte-identical models. When the newest checkpoint is damaged (a worker file truncated),
/// the resumed run falls back to the older one and still ends identical; with every
/// checkpoint damaged it fails, naming the files.
#[test]
fn ring_apps_resume_from_round_checkpoints_with_the_uninterrupted_model() {
    use petrel::train::run_job;
    use petrel_strads::apps::lda::LdaApp;
    use petrel_strads::apps::lda::LdaSettings;
    use petrel_strads::apps::mf::MfApp;
    use petrel_strads::apps::mf::StradsMfSettings;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mf = |out: &str, resume: bool| StradsMfSettings {
        outer_iterations: 2,
        rank: 4,
        seed: 1,
        checkpoint_dir: Some(d.join("mf-ckpt")),
        checkpoint_every: 9,
        resume,
        out_dir: Some(d.join(out)),
        ..StradsMfSettings::default()
    };
    let lda = |out: &str, resume: bool| LdaSettings {
        iterations: 6,
        n_topics: 5,
        seed: 1,
        checkpoint_dir: Some(d.join("lda-ckpt")),
        checkpoint_every: 3,
        resume,
        out_dir: Some(d.join(out)),
        ..LdaSettings::default()
    };
    let same = |a: &str, b: &str, files: &[&str]| {
        for f in files {
            assert_eq!(
                std::fs::read(d.join(a).join(f)).unwrap(),
                std::fs::read(d.join(b).join(f)).unwrap(),
                "{b}/{f} differs from {a}/{f}"
            );
        }
    };
    let mf_files = ["user_factors.tsv", "item_factors.tsv"];
    let lda_files = ["topic_word.tsv", "topics.txt"];
    let rounds = |ckpt: &str| manifest_rounds(&d.join(ckpt));

    run_job::<MfApp>(&mf("mf-plain", false), 2, JobTransport::Memory).unwrap();
    run_job::<LdaApp>(&lda("lda-plain", false), 2, JobTransport::Memory).unwrap();
    let (mf_rounds, lda_rounds) = (rounds("mf-ckpt"), rounds("lda-ckpt"));
    assert_eq!(mf_rounds.len(), 2, "the newest two are kept: {mf_rounds:?}");
    assert_eq!(
        lda_rounds.len(),
        2,
        "the newest two are kept: {lda_rounds:?}"
    );

    run_job::<MfApp>(&mf("mf-resumed", true), 2, JobTransport::Memory).unwrap();
    same("mf-plain", "mf-resumed", &mf_files);
    run_job::<LdaApp>(&lda("lda-resumed", true), 2, JobTransport::Memory).unwrap();
    same("lda-plain", "lda-resumed", &lda_files);

    // Damage worker 1's file of the newest checkpoint: the older one is used.
    for (ckpt, newest) in [("mf-ckpt", mf_rounds[1]), ("lda-ckpt", lda_rounds[1])] {
        let f = d
            .join(ckpt)
            .join(format!("strads-round-{newest}-worker-1.bin"));
        let bytes = std::fs::read(&f).unwrap();
        std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    }
    run_job::<MfApp>(&mf("mf-fallback", true), 2, JobTransport::Memory).unwrap();
    same("mf-plain", "mf-fallback", &mf_files);
    run_job::<LdaApp>(&lda("lda-fallback", true), 2, JobTransport::Memory).unwrap();
    same("lda-plain", "lda-fallback", &lda_files);

    // Every checkpoint damaged (the resumed runs wrote their own since): resuming fails and
    // says why, naming each refused manifest.
    let manifests: Vec<_> = std::fs::read_dir(d.join("mf-ckpt"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "manifest"))
        .collect();
    assert!(!manifests.is_empty());
    for m in &manifests {
        std::fs::write(m, b"garbage").unwrap();
    }
    let err = run_job::<MfApp>(&mf("mf-none", true), 2, JobTransport::Memory)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("holds no valid checkpoint") && err.contains(".manifest"),
        "{err}"
    );
}
