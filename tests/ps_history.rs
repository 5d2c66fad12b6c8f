//! The parameter-server apps' history: one row per `--eval-every` clocks, each measured on
//! the tables as of its clock, no step twice, and a progress bar with a total.

use crate::common;
use crate::common::succeeded;

use common::{failure, petrel, train};
use std::path::Path;

/// `(step, value of column)` of `history.csv` in `out`.
fn history(out: &Path, column: &str) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(out.join("history.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = header.iter().position(|h| *h == column).unwrap();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            (cells[0].parse().unwrap(), cells[at].parse().unwrap())
        })
        .collect()
}

fn steps(rows: &[(u64, f64)]) -> Vec<u64> {
    rows.iter().map(|r| r.0).collect()
}

#[test]
fn ps_mf_history_has_one_row_per_stride_each_measured_at_its_clock() {
    let dir = tempfile::tempdir().unwrap();
    // Several workers under SSP: the default stride gives 10 to 80 rows, each step once.
    let out = dir.path().join("ssp");
    let args = ["--max-clocks", "80", "--workers", "2", "--shards", "2"];
    let run = petrel(
        &[
            &["train", "ps-mf", "--out", out.to_str().unwrap()][..],
            &args,
            &["--consistency", "ssp", "--staleness", "3"],
        ]
        .concat(),
    );
    succeeded(&run);
    let rows = history(&out, "test_rmse");
    let s = steps(&rows);
    assert!((10..=81).contains(&rows.len()), "{s:?}");
    assert!(
        s.windows(2).all(|w| w[0] < w[1]),
        "a step twice or out of order: {s:?}"
    );
    assert_eq!((s[0], s[s.len() - 1]), (0, 80), "{s:?}");

    // One worker under BSP is deterministic: every row is the model at its clock, so two
    // strides agree on the clocks they share, and the last clock always has a row.
    let run = |name: &str, every: &str| {
        let out = dir.path().join(name);
        let args = ["--max-clocks", "30", "--workers", "1", "--shards", "2"];
        let bsp = ["--consistency", "bsp", "--eval-every", every];
        train("ps-mf", &out, &[&args[..], &bsp].concat());
        history(&out, "test_rmse")
    };
    let (every4, every3) = (run("every4", "4"), run("every3", "3"));
    assert_eq!(steps(&every4), [0, 4, 8, 12, 16, 20, 24, 28, 30]);
    assert_eq!(steps(&every3), [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]);
    for (step, rmse) in &every4 {
        if let Some((_, other)) = every3.iter().find(|(s, _)| s == step) {
            assert_eq!(rmse, other, "step {step}: {every4:?} vs {every3:?}");
        }
    }
    let metrics = common::metrics(&dir.path().join("every4"));
    assert_eq!(
        metrics["final"]["test_rmse"],
        metrics["history"][8]["test_rmse"]
    );

    // The old time-based flag is refused with a hint.
    let e = failure(
        &["train", "ps-mf", "--eval-ms", "250", "--out"]
            .into_iter()
            .chain([dir.path().join("old").to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(e.contains("eval_ms") && e.contains("--eval-every"), "{e}");
}

#[test]
fn ps_lr_history_and_progress_have_a_known_length() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lr");
    let run = std::process::Command::new(common::PETREL)
        .args(["train", "ps-lr", "--clocks", "40", "--eval-every", "5"])
        .args(["--workers", "1", "--shards", "1", "--out"])
        .arg(&out)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let rows = history(&out, "test_log_loss");
    assert_eq!(steps(&rows), [0, 5, 10, 15, 20, 25, 30, 35, 40]);
    // Standard error is not a terminal: progress lines carry the total (the time left
    // appears on lines printed mid-run, which a fast run may not reach; the format is
    // unit-tested in `src/train/progress.rs`).
    assert!(stderr.contains("ps-lr progress: point 9/9"), "{stderr}");
}
