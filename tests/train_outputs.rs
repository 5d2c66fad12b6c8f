//! One metrics format for every app (`metrics.json`: app, settings, final figures,
//! `converged`, `stop_reason`, `history` of records with the same fields; `history.csv`),
//! written last and atomically; a run stopped by its iteration limit says so; a full disk
//! leaves no file that looks finished.

use crate::common;

use common::metrics;
use std::path::Path;
use std::process::{Command, Output};

fn petrel(args: &[&str], dir: &Path) -> Output {
    Command::new(common::PETREL)
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run petrel")
}

/// Every app's `metrics.json` has the common fields and a history whose records share
/// their names with `history.csv`'s columns.
#[test]
fn every_app_writes_the_one_metrics_format() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let memory = ["--transport", "memory", "--workers", "2"];
    let apps: [(&str, &[&str], &str); 7] = [
        (
            "lasso",
            &[
                "--synthetic-samples",
                "60",
                "--synthetic-features",
                "80",
                "--eval-every",
                "10",
                "--max-rounds",
                "50",
            ],
            "objective",
        ),
        (
            "logistic",
            &[
                "--synthetic-samples",
                "60",
                "--synthetic-features",
                "40",
                "--max-rounds",
                "30",
            ],
            "objective",
        ),
        (
            "strads-mf",
            &["--iterations", "2", "--rank", "3"],
            "train_rmse",
        ),
        (
            "lda",
            &["--iterations", "3", "--topics", "4"],
            "loglik_per_token",
        ),
        (
            "ps-mf",
            &["--epochs", "2", "--shards", "1", "--eval-every", "1"],
            "test_rmse",
        ),
        (
            "ps-lr",
            &["--clocks", "20", "--shards", "1", "--eval-every", "1"],
            "test_log_loss",
        ),
        (
            "ps-lda",
            &["--iterations", "2", "--topics", "4", "--shards", "1"],
            "loglik_per_token",
        ),
    ];
    for (app, args, figure) in apps {
        let out = d.join(app);
        let mut full = vec!["train", app];
        full.extend(memory);
        full.extend(args);
        full.extend(["--out", out.to_str().unwrap()]);
        let o = petrel(&full, d);
        assert!(
            o.status.success(),
            "{app}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let m = metrics(&out);
        assert_eq!(m["app"], app);
        assert!(m["settings"].is_object(), "{app}: settings");
        assert!(m["converged"].is_boolean(), "{app}: converged");
        assert!(
            m["stop_reason"].as_str().is_some_and(|s| !s.is_empty()),
            "{app}"
        );
        assert!(
            m["final"][figure].as_f64().is_some_and(f64::is_finite),
            "{app}: final {figure}"
        );
        let history = m["history"].as_array().unwrap();
        assert!(!history.is_empty(), "{app}: history");
        for r in history {
            assert!(r["step"].is_u64() && r["seconds"].is_f64(), "{app}: {r}");
            assert!(r[figure].is_f64(), "{app}: {r} lacks {figure}");
        }
        let csv = std::fs::read_to_string(out.join("history.csv")).unwrap();
        let header = csv.lines().next().unwrap();
        assert!(
            header.starts_with("step,seconds,") && header.contains(figure),
            "{app}: {header}"
        );
        assert_eq!(
            csv.lines().count(),
            history.len() + 1,
            "{app}: one line per record"
        );
        let leftovers: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{app}: temporary files left: {leftovers:?}"
        );
    }
}

/// Stopping at `max_rounds` before `gap_tolerance` is not success in disguise: the metrics
/// say `converged: false` with the final gap, and the summary says so.
#[test]
fn a_run_stopped_by_its_iteration_limit_says_so() {
    let dir = tempfile::tempdir().unwrap();
    // A small Lasso stopping at `limits` (rounds, evaluation interval, gap), into `out`.
    let lasso = |limits: [&str; 3], out: &str| {
        let [rounds, every, gap] = limits;
        let design = ["--synthetic-samples", "80", "--synthetic-features", "200"];
        let stops = [
            "--max-rounds",
            rounds,
            "--eval-every",
            every,
            "--gap-tolerance",
            gap,
        ];
        let args = [
            &["train", "lasso", "--transport", "memory"][..],
            &design,
            &stops,
        ];
        let o = petrel(&[&args.concat()[..], &["--out", out]].concat(), dir.path());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let o = lasso(["20", "10", "1e-9"], "out");
    let m = metrics(&dir.path().join("out"));
    assert_eq!(m["converged"], false);
    assert!(
        m["stop_reason"]
            .as_str()
            .unwrap()
            .contains("iteration limit"),
        "{m}"
    );
    assert!(m["final"]["relative_gap"].as_f64().unwrap() > 1e-9);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("did not converge") && stdout.contains("iteration limit"),
        "{stdout}"
    );
    // With a reachable tolerance the same job converges.
    lasso(["20000", "50", "1e-3"], "out2");
    assert_eq!(metrics(&dir.path().join("out2"))["converged"], true);
}

/// A full disk (a 32 KiB tmpfs; needs root, skipped otherwise) fails the run and leaves no
/// file under a final name: neither a truncated model nor a `metrics.json`.
#[test]
fn a_full_disk_leaves_nothing_that_looks_finished() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=32k",
            "petrel-test",
            mnt.to_str().unwrap(),
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    // 20,000 coefficients need about 200 KiB.
    let o = petrel(
        &[
            "train",
            "lasso",
            "--transport",
            "memory",
            "--synthetic-samples",
            "40",
            "--synthetic-features",
            "20000",
            "--max-rounds",
            "5",
            "--out",
            mnt.to_str().unwrap(),
        ],
        dir.path(),
    );
    let listing: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(!o.status.success(), "a full disk must fail the run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("coefficients.tsv"), "{err}");
    assert!(
        listing.is_empty(),
        "files left on the full disk: {listing:?}"
    );
}

/// A small Lasso or logistic job runs in this process (the serial solver, no cluster) and
/// says so in one line; `--transport` or `--workers` on the command line asks for the
/// cluster, which reaches the same objective.
#[test]
fn small_linear_jobs_run_serially_unless_a_cluster_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    for (app, data) in [("logistic", "classes.train"), ("lasso", "regression.train")] {
        let serial = dir.path().join(format!("{app}-serial"));
        let said = common::train_data(app, &serial, &[("--data", data)], &[]);
        assert!(
            said.contains("small problem") && said.contains("no cluster"),
            "{app}: {said}"
        );
        assert_eq!(metrics(&serial)["mode"], "cyclic-cd-baseline", "{app}");
        let mut objectives = vec![metrics(&serial)["final_objective"].as_f64().unwrap()];
        for asked in [&["--transport", "memory"][..], &["--workers", "2"]] {
            let out = dir
                .path()
                .join(format!("{app}-{}", asked[0].trim_start_matches('-')));
            let said = common::train_data(app, &out, &[("--data", data)], asked);
            assert!(!said.contains("small problem"), "{app} {asked:?}: {said}");
            assert_eq!(metrics(&out)["mode"], "gauss-seidel", "{app} {asked:?}");
            objectives.push(metrics(&out)["final_objective"].as_f64().unwrap());
        }
        for o in &objectives[1..] {
            assert!(
                (o - objectives[0]).abs() <= 1e-4 * objectives[0].abs(),
                "{app}: {objectives:?}"
            );
        }
    }
}
