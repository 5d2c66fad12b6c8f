//! `petrel bench chaos --faults join,leave`: a standby worker joins a running elastic
//! Lasso job, then (another run) a worker gets SIGTERM and drains and leaves. Both jobs
//! must finish, without a restart, with the objective of the uninterrupted elastic job to
//! 1e-6, the change recorded in their metrics, and no process left behind.

use crate::common::{PETREL, last_json_line, succeeded};
use std::process::Command;

#[test]
fn bench_chaos_joins_and_leaves_finish_within_tolerance_without_a_restart() {
    // Seed 5 draws a join of w2, then a leave of w0.
    let out = Command::new(PETREL)
        .args(["bench", "chaos", "--runs", "2", "--apps", "lasso"])
        .args(["--faults", "join,leave", "--seed", "5"])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json = last_json_line(&stdout);
    let faults: Vec<_> = (json["per_run"].as_array().unwrap().iter())
        .map(|r| (r["fault"].as_str().unwrap(), r["victim"].as_str().unwrap()))
        .collect();
    assert_eq!(faults, [("join", "w2"), ("leave", "w0")], "{stdout}");
    for (key, want) in [
        ("faults_injected", 2),
        ("jobs_completed", 2),
        ("outputs_within_tolerance", 2),
        ("restarts", 0),
        ("orphans", 0),
        ("hangs", 0),
    ] {
        assert_eq!(json[key].as_u64(), Some(want), "{key}: {stdout}");
    }
}
