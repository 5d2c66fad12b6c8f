//! Held-out curves during training for the STRADS apps, through the CLI: with
//! `--test-data`, every record of `metrics.json`'s history (step 0, before any update,
//! included) carries the held-out figures, they improve from step 0 to the end, the last
//! record's agree with the final figures, and `history.csv` / `--plot` have them too.

use crate::common;

use common::{f, metrics, train_data};
use std::path::Path;

/// The history's records, after checking that every one has each of `keys` and that the
/// first is step 0.
fn history<'a>(m: &'a serde_json::Value, keys: &[&str]) -> &'a [serde_json::Value] {
    let h = m["history"].as_array().unwrap();
    assert!(h.len() >= 2, "{h:?}");
    assert_eq!(h[0]["step"], 0, "the first record is before any update");
    for r in h {
        for k in keys {
            assert!(r[*k].as_f64().is_some_and(f64::is_finite), "{k} in {r}");
        }
    }
    h
}

/// `a` and `b` agree to `rel` of their size.
fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12)
}

/// The held-out figures a Lasso history must carry.
const LASSO_HELDOUT: [&str; 4] = [
    "heldout_mse",
    "heldout_rmse",
    "heldout_r2",
    "heldout_objective",
];

/// The first and last records of Lasso run `name`'s history (metrics `m`), after checking
/// that step 0 is the untrained model (R^2 near 0), training at least halves the held-out
/// MSE to an R^2 above 0.8, and the last record has the final figures.
fn lasso_heldout<'a>(
    m: &'a serde_json::Value,
    name: &str,
) -> (&'a serde_json::Value, &'a serde_json::Value) {
    let h = history(m, &LASSO_HELDOUT);
    let (first, last) = (&h[0], &h[h.len() - 1]);
    assert!(f(first, "heldout_r2").abs() < 0.1, "{name}: {first}");
    assert!(
        f(last, "heldout_mse") < 0.5 * f(first, "heldout_mse"),
        "{name}: {first} {last}"
    );
    assert!(f(last, "heldout_r2") > 0.8, "{name}: {last}");
    // The last record is the final model: the final figures, to rounding (1e-9 relative).
    for k in LASSO_HELDOUT {
        assert!(
            close(f(last, k), f(&m["final"], k), 1e-9),
            "{name} {k}: {last} vs {}",
            m["final"]
        );
    }
    (first, last)
}

/// Trains logistic regression into `out` with `args` on the shipped class files and checks
/// its held-out history: a record per round, the first with zero weights (log-loss ln 2).
fn logistic_heldout(out: &Path, args: &[&str]) {
    let files = [("--data", "classes.train"), ("--test-data", "classes.test")];
    train_data("logistic", out, &files, args);
    let m = metrics(out);
    let keys = ["heldout_accuracy", "heldout_log_loss", "heldout_objective"];
    let h = history(&m, &keys);
    let (first, last) = (&h[0], &h[h.len() - 1]);
    assert!(
        (f(first, "heldout_log_loss") - std::f64::consts::LN_2).abs() < 1e-9,
        "{first}"
    );
    assert!(
        f(last, "heldout_log_loss") < 0.8 * std::f64::consts::LN_2,
        "{last}"
    );
    assert!(f(last, "heldout_accuracy") > 0.8, "{last}");
    // Accuracy and log-loss are computed exactly as the final ones; the objective's L1
    // term is the scheduler's running norm (1e-9 relative).
    for k in keys {
        assert!(close(f(last, k), f(&m["final"], k), 1e-9), "{k}: {last}");
    }
}

#[test]
fn lasso_and_logistic_histories_carry_heldout_figures_from_step_0() {
    let dir = tempfile::tempdir().unwrap();
    // Lasso with its nodes as processes: the scheduler's process scores the test file.
    let out = dir.path().join("lasso");
    let svg = dir.path().join("lasso.svg");
    let files = [
        ("--data", "regression.train"),
        ("--test-data", "regression.test"),
    ];
    let processes = ["--transport", "processes", "--workers", "2", "--plot"];
    let stdout = train_data(
        "lasso",
        &out,
        &files,
        &[&processes[..], &[svg.to_str().unwrap()]].concat(),
    );
    // Step 0 is the untrained model: the intercept alone (the training mean).
    lasso_heldout(&metrics(&out), "processes");
    let csv = std::fs::read_to_string(out.join("history.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.contains("heldout_mse") && header.contains("heldout_r2"),
        "{header}"
    );
    assert!(
        stdout.contains("plotted objective, heldout_objective to"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("heldout_objective"));

    let memory = ["--transport", "memory", "--workers", "2"];
    logistic_heldout(&dir.path().join("logistic"), &memory);
}

#[test]
fn strads_mf_history_carries_the_test_rmse_of_every_rotation() {
    let dir = tempfile::tempdir().unwrap();
    for transport in ["memory", "processes"] {
        let out = dir.path().join(transport);
        let files = [("--data", "ratings.base"), ("--test-data", "ratings.test")];
        train_data(
            "strads-mf",
            &out,
            &files,
            &[
                "--global-mean",
                "--biases",
                "--iterations",
                "2",
                "--workers",
                "2",
                "--transport",
                transport,
            ],
        );
        let m = metrics(&out);
        let h = history(&m, &["train_rmse", "test_rmse"]);
        let (first, last) = (&h[0], &h[h.len() - 1]);
        // Step 0: the global mean, zero biases and H at zero: the test ratings' RMSE about
        // their training mean, close to the one of their own mean.
        let baseline = f(&m["final"], "heldout_baseline_rmse");
        assert!(
            close(f(first, "test_rmse"), baseline, 0.05),
            "{first} vs {baseline}"
        );
        assert!(f(last, "test_rmse") < 0.9 * f(first, "test_rmse"), "{last}");
        // The workers' sum over a rotation is the final model's RMSE on the test set
        // (every test pair has a training user and item here, so the file's too), to
        // f32 rounding of the predictions summed in another order (1e-6 relative).
        assert_eq!(f(&m["final"], "heldout_unknown_pairs"), 0.0);
        for fin in ["test_rmse", "heldout_rmse"] {
            assert!(
                close(f(last, "test_rmse"), f(&m["final"], fin), 1e-6),
                "{fin}: {last} vs {}",
                m["final"]
            );
        }
    }
}

#[test]
fn lasso_with_several_schedulers_or_no_cluster_has_the_same_heldout_history() {
    let dir = tempfile::tempdir().unwrap();
    let runs: [(&str, &[&str]); 3] = [
        (
            "two-schedulers",
            &[
                "--schedulers",
                "2",
                "--transport",
                "memory",
                "--workers",
                "2",
            ],
        ),
        (
            "two-schedulers-processes",
            &[
                "--schedulers",
                "2",
                "--transport",
                "processes",
                "--workers",
                "2",
            ],
        ),
        ("none", &["--transport", "none"]),
    ];
    for (name, extra) in runs {
        let out = dir.path().join(name);
        let files = [
            ("--data", "regression.train"),
            ("--test-data", "regression.test"),
        ];
        train_data("lasso", &out, &files, extra);
        let m = metrics(&out);
        let (first, last) = lasso_heldout(&m, name);
        // Step 0 is the untrained model, as on the single-scheduler path.
        assert_eq!(f(first, "nonzeros"), 0.0, "{name}: {first}");
        // The objective of the records is the run's own (the training objective).
        assert!(
            close(f(last, "objective"), f(&m["final"], "objective"), 1e-9),
            "{name}: {last}"
        );
    }
}

#[test]
fn logistic_without_a_cluster_has_a_heldout_history_from_step_0() {
    let dir = tempfile::tempdir().unwrap();
    logistic_heldout(&dir.path().join("logistic-none"), &["--transport", "none"]);
}

#[test]
fn lda_history_carries_the_heldout_perplexity_of_every_pass() {
    let dir = tempfile::tempdir().unwrap();
    let keys = ["heldout_perplexity", "heldout_loglik_per_token"];
    let mut histories = Vec::new();
    for transport in ["memory", "none"] {
        let out = dir.path().join(transport);
        let files = [
            ("--docword", "docs.train"),
            ("--vocab", "vocab.txt"),
            ("--test-data", "docs.test"),
        ];
        train_data(
            "lda",
            &out,
            &files,
            &[
                "--topics",
                "4",
                "--iterations",
                "8",
                "--workers",
                "2",
                "--transport",
                transport,
            ],
        );
        let m = metrics(&out);
        let h = history(&m, &keys);
        // Step 0 (the random initial assignments) and one record per pass.
        assert_eq!(h.len(), 9, "{transport}");
        let (first, last) = (&h[0], &h[h.len() - 1]);
        assert!(
            f(last, "heldout_perplexity") < 0.9 * f(first, "heldout_perplexity"),
            "{transport}: {first} {last}"
        );
        // The estimator of the final figures (same sweeps, same seed) on the same counts.
        for k in keys {
            assert!(
                close(f(last, k), f(&m["final"], k), 1e-9),
                "{transport} {k}: {last} vs {}",
                m["final"]
            );
        }
        assert!(f(&m["final"], "test_set_scoring_s") >= 0.0);
        let curve: Vec<(f64, f64)> = h
            .iter()
            .map(|r| (f(r, "heldout_perplexity"), f(r, "heldout_loglik_per_token")))
            .collect();
        histories.push(curve);
    }
    // Deterministic for a seed: the cluster and the serial driver sample the same counts.
    assert_eq!(histories[0], histories[1]);
}
