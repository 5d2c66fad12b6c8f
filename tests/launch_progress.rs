//! The launcher's progress bar fed by its nodes: with `LaunchOptions::progress` the nodes
//! report their points on standard error (`petrel-progress v1 ...` lines) and the launcher
//! takes them for its bar; the last point shown is in the launch report. (Standard error
//! is not a terminal here, so indicatif draws nothing; the channel and state are real.)

use petrel::launcher;
use petrel_actors::Settings;
use std::time::Duration;

use crate::common;

use common::fixtures::lasso_section;

fn lasso_settings(out: &std::path::Path) -> Settings {
    let text = format!(
        r#"
[cluster]
name = "launch-progress"
failure_timeout_ms = 10000

[[nodes]]
name = "scheduler"
addr = "127.0.0.1:0"
roles = ["strads-lasso-scheduler"]

[[nodes]]
name = "w0"
addr = "127.0.0.1:0"
roles = ["strads-lasso-worker"]

[[nodes]]
name = "w1"
addr = "127.0.0.1:0"
roles = ["strads-lasso-worker"]
{lasso}"#,
        lasso = lasso_section(out, 300, 100, 200, 3)
    );
    Settings::from_toml(&text).unwrap()
}

fn run(dir: &std::path::Path, progress: bool) -> launcher::LaunchReport {
    let rt = common::runtime(1);
    rt.block_on(async {
        let mut opts =
            common::node_processes(dir.join(if progress { "run-bar" } else { "run-lines" }));
        opts.progress = progress;
        opts.progress_points = None;
        launcher::start(lasso_settings(dir), opts)
            .await
            .unwrap()
            .wait(Some(Duration::from_secs(120)))
            .await
            .unwrap()
    })
}

#[test]
fn the_launcher_bar_takes_the_schedulers_progress_reports() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(dir.path(), true);
    let (node, point) = report
        .progress
        .expect("no progress report reached the launcher");
    assert_eq!(node, "scheduler");
    assert_eq!(point.label, "strads-lasso-scheduler");
    assert!(point.points >= 2, "{point:?}");
    assert!(
        !point.metric.is_empty() && point.value.is_finite(),
        "{point:?}"
    );
    // The point shown is the scheduler's last one.
    let metrics: serde_json::Value = common::json_file(&dir.path().join("lasso/metrics.json"));
    // (Lasso publishes the objective after every round.) The relays are drained before
    // the launcher returns, so the final report is never lost.
    let curve = metrics["objective"].as_array().unwrap();
    assert_eq!(point.points, curve.len() as u64, "{point:?}");
    assert_eq!(point.metric, "objective");
    assert_eq!(
        Some(point.value),
        curve.last().and_then(|r| r["objective"].as_f64())
    );

    // Without the bar the nodes log INFO lines (relayed as before), and report nothing.
    let report = run(dir.path(), false);
    assert!(report.progress.is_none());
}
