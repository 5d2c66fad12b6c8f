//! `petrel train APP --config job.toml`: one job schema per app shared with `petrel run`,
//! one set of defaults, precedence file < `PETREL_APP__*` < flags, unknown keys refused
//! with the valid ones listed, and every invalid value refused before any node starts.

use clap::Parser;
use std::path::Path;
use std::process::{Command, Output};

use crate::common;

fn petrel(args: &[&str], env: &[(&str, &str)], dir: &Path) -> Output {
    let mut cmd = Command::new(common::PETREL);
    cmd.args(args).current_dir(dir).env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run petrel")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[derive(Parser)]
struct Flags<C: clap::Args> {
    #[command(flatten)]
    job: C,
}

fn parsed_defaults<C: clap::Args + clap::FromArgMatches>() -> C {
    Flags::<C>::try_parse_from(["t"]).unwrap().job
}

#[test]
fn flags_and_settings_share_one_set_of_defaults() {
    use petrel::ps::{PsLdaSettings, PsLrSettings, PsMfSettings};
    use petrel::strads::apps::{lasso::LassoSettings, lda::LdaSettings, mf::StradsMfSettings};
    assert_eq!(parsed_defaults::<PsMfSettings>(), PsMfSettings::default());
    assert_eq!(parsed_defaults::<PsLrSettings>(), PsLrSettings::default());
    assert_eq!(parsed_defaults::<PsLdaSettings>(), PsLdaSettings::default());
    assert_eq!(parsed_defaults::<LassoSettings>(), LassoSettings::default());
    assert_eq!(
        parsed_defaults::<StradsMfSettings>(),
        StradsMfSettings::default()
    );
    assert_eq!(parsed_defaults::<LdaSettings>(), LdaSettings::default());
}

#[test]
fn the_file_then_the_environment_then_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.toml"),
        "[app.lasso]\nmax_rounds = 40\nblock_size = 4\neval_every = 7\ndepth = 2\n\
         [app.lasso.synthetic]\nn_samples = 30\nn_features = 40\nseed = 3\n",
    )
    .unwrap();
    let o = petrel(
        &[
            "train",
            "lasso",
            "--config",
            "job.toml",
            "--out",
            "out",
            "--max-rounds",
            "20",
            "--synthetic-seed",
            "9",
            "--print-job",
        ],
        &[
            ("PETREL_APP__LASSO__MAX_ROUNDS", "30"),
            ("PETREL_APP__LASSO__EVAL_EVERY", "5"),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let job: toml::Table = toml::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    let lasso = &job["app"]["lasso"];
    assert_eq!(
        lasso["max_rounds"].as_integer(),
        Some(20),
        "flag beats env and file"
    );
    assert_eq!(lasso["eval_every"].as_integer(), Some(5), "env beats file");
    assert_eq!(
        lasso["block_size"].as_integer(),
        Some(4),
        "file beats default"
    );
    assert_eq!(lasso["depth"].as_integer(), Some(2), "file beats default");
    // 0 = chosen from the data and the round latency when the job starts.
    assert_eq!(
        lasso["candidate_pool"].as_integer(),
        Some(0),
        "default (automatic)"
    );
    assert_eq!(
        lasso["synthetic"]["seed"].as_integer(),
        Some(9),
        "nested flag"
    );
    assert_eq!(lasso["synthetic"]["n_samples"].as_integer(), Some(30));
    let out = dir.path().join("out").canonicalize().unwrap();
    assert_eq!(lasso["out"].as_str(), out.to_str(), "--out, absolute");
}

#[test]
fn a_printed_job_is_a_job_file_for_train_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let o = petrel(
        &[
            "train",
            "ps-mf",
            "--out",
            "out",
            "--rank",
            "5",
            "--synthetic-users",
            "40",
            "--print-job",
        ],
        &[],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(dir.path().join("job.toml"), &o.stdout).unwrap();
    let again = petrel(
        &["train", "ps-mf", "--config", "job.toml", "--print-job"],
        &[],
        dir.path(),
    );
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        String::from_utf8_lossy(&o.stdout)
    );
    // The same section runs under `petrel run` (settings parse and check).
    let text = String::from_utf8_lossy(&o.stdout);
    let settings = petrel::actors::Settings::from_toml(&format!(
        "[[nodes]]\nname = 'a'\nroles = ['ps-shard', 'ps-monitor']\n\
         [[nodes]]\nname = 'b'\nroles = ['ps-worker']\n{text}"
    ))
    .unwrap();
    petrel::roles::builtin(settings).check_settings().unwrap();
}

#[test]
fn unknown_keys_are_refused_listing_the_valid_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("typo.toml"), "[app.mf]\nmax_clockz = 4\n").unwrap();
    std::fs::write(d.join("nested.toml"), "[app.lda.synthetic]\nn_docz = 4\n").unwrap();
    std::fs::write(d.join("table.toml"), "[clusterr]\nname = 'x'\n").unwrap();
    std::fs::write(d.join("other.toml"), "[app.lasso]\nmax_rounds = 4\n").unwrap();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 5] = [
        (
            &["train", "ps-mf", "--config", "typo.toml", "--out", "o"],
            &[],
            &["max_clockz", "max_clocks", "learning_rate"],
        ),
        (
            &["train", "lda", "--config", "nested.toml", "--out", "o"],
            &[],
            &["n_docz", "n_docs"],
        ),
        (
            &["train", "lasso", "--config", "table.toml", "--out", "o"],
            &[],
            &["clusterr", "[app.lasso]"],
        ),
        (
            &["train", "ps-mf", "--config", "other.toml", "--out", "o"],
            &[],
            &["[app.lasso]", "[app.mf]"],
        ),
        (
            &["train", "strads-mf", "--out", "o"],
            &[("PETREL_APP__STRADS_MF__RANKK", "3")],
            &["rankk", "rank"],
        ),
    ];
    for (args, env, needles) in cases {
        let o = petrel(args, env, d);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} was accepted");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {err} lacks {n}");
        }
        assert!(!err.contains("joined cluster"), "{args:?} started nodes");
    }
}

#[test]
fn unknown_keys_fail_petrel_run_before_any_node_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ps_mf_cluster.toml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("run.toml"),
        config.replace("max_clocks = 80", "max_clockz = 80"),
    )
    .unwrap();
    let o = petrel(&["run", "run.toml", "--in-process"], &[], dir.path());
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("max_clockz") && err.contains("max_clocks"),
        "{err}"
    );
    assert!(!err.contains("joined cluster"), "{err}");
    // A value out of range is refused the same way.
    std::fs::write(dir.path().join("run.toml"), &config).unwrap();
    let o = petrel(
        &["run", "run.toml", "--in-process"],
        &[("PETREL_APP__MF__LEARNING_RATE", "100")],
        dir.path(),
    );
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains("[app.mf] learning_rate = 100"), "{err}");
    assert!(!err.contains("joined cluster"), "{err}");
}

#[test]
fn every_invalid_value_is_refused_before_any_node_starts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("regression.libsvm"), "1.5 1:1\n0.2 1:2\n3 2:1\n").unwrap();
    std::fs::write(d.join("three.libsvm"), "1 1:1\n2 1:2\n0 2:1\n").unwrap();
    std::fs::write(d.join("tiny.libsvm"), "1 1:1\n0 1:2\n").unwrap();
    let small_lasso = ["--synthetic-samples", "30", "--synthetic-features", "40"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["lasso", "--lambda=-1"], "lambda = -1"),
        (vec!["lasso", "--lambda=NaN"], "lambda = NaN"),
        (vec!["lasso", "--lambda=inf"], "lambda = inf"),
        (
            vec!["lasso", "--block-size", "8", "--candidate-pool", "4"],
            "candidate_pool = 4",
        ),
        (vec!["lasso", "--depth", "0"], "depth = 0"),
        (vec!["lasso", "--workers", "0"], "workers = 0"),
        (vec!["lasso", "--rho", "2"], "rho = 2"),
        (
            vec!["lasso", "--synthetic-correlation", "1.5"],
            "correlation = 1.5",
        ),
        (vec!["logistic", "--schedulers", "2"], "schedulers = 2"),
        (vec!["logistic", "--data", "three.libsvm"], "label 2"),
        (vec!["logistic", "--data", "regression.libsvm"], "label 1.5"),
        // The scheduled mode's workers split the rows, Gauss-Seidel's the columns.
        (
            vec![
                "lasso",
                "--data",
                "tiny.libsvm",
                "--workers",
                "3",
                "--solver",
                "scheduled",
            ],
            "3 workers but only 2 rows",
        ),
        (
            vec!["lasso", "--data", "tiny.libsvm", "--workers", "3"],
            "3 workers but only 1 features",
        ),
        (
            vec!["ps-mf", "--learning-rate", "100"],
            "learning_rate = 100",
        ),
        (
            vec!["ps-mf", "--learning-rate", "NaN"],
            "learning_rate = NaN",
        ),
        (vec!["ps-mf", "--shards", "0"], "shards = 0"),
        (vec!["ps-mf", "--test-fraction", "1"], "test_fraction = 1"),
        (vec!["ps-mf", "--straggler", "5"], "straggler = 5"),
        (
            vec!["ps-mf", "--workers", "700"],
            "700 workers but only 600 users",
        ),
        (vec!["ps-lr", "--data", "regression.libsvm"], "label 1.5"),
        (vec!["ps-lr", "--batch-size", "0"], "batch_size = 0"),
        (vec!["ps-lda", "--alpha", "0"], "alpha = 0"),
        (vec!["strads-mf", "--rank", "0"], "rank = 0"),
        (vec!["strads-mf", "--lambda=-0.5"], "lambda = -0.5"),
        (vec!["lda", "--topics", "0"], "n_topics = 0"),
        (vec!["lda", "--beta", "NaN"], "beta = NaN"),
    ];
    for (args, needle) in cases {
        let mut full = vec!["train"];
        full.extend(&args);
        if args[0] == "lasso" || args[0] == "logistic" {
            full.extend(small_lasso);
        }
        full.extend(["--out", "out"]);
        let o = petrel(&full, &[], d);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(err.contains(needle), "{args:?}: {err} lacks {needle}");
        assert!(!err.contains("joined cluster"), "{args:?} started nodes");
        assert!(
            !d.join("out/metrics.json").exists(),
            "{args:?} wrote metrics"
        );
    }
}

#[test]
fn the_output_directory_is_checked_before_training() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), "x").unwrap();
    for out in ["/proc/petrel-out", "a-file/sub"] {
        let o = petrel(&["train", "ps-mf", "--out", out], &[], dir.path());
        let err = stderr(&o);
        assert!(!o.status.success(), "--out {out} was accepted");
        assert!(err.contains("output directory"), "{err}");
        assert!(!err.contains("joined cluster"), "{err}");
    }
    let o = petrel(&["train", "ps-lda"], &[], dir.path());
    assert!(stderr(&o).contains("--out"), "{}", stderr(&o));
}
