//! `petrel bench chaos --faults hostile-member`: a member's own node goes bad mid-job (it
//! stalls frames, trickles frames and floods at control priority, from its own socket with
//! its own certificate, so its victim admits it). The victim must disconnect it for the
//! stalls and the trickle within seconds, and the job must finish with the uninterrupted
//! model, no restart and no process left behind.

use std::process::Command;

use crate::common::{PETREL, last_json_line, succeeded};

#[test]
fn bench_chaos_hostile_member_is_disconnected_and_the_job_finishes_identical() {
    let out = Command::new(PETREL)
        .args([
            "bench",
            "chaos",
            "--apps",
            "lasso",
            "--faults",
            "hostile-member",
        ])
        // The default Lasso: its stall and trickle attacks end well before it does.
        .args(["--runs", "1"])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json = last_json_line(&stdout);
    for (key, want) in [
        ("faults_injected", 1),
        ("jobs_completed", 1),
        ("outputs_identical", 1),
        ("restarts", 0),
        // The stall and the trickle, each disconnected.
        ("hostile_member_disconnected", 2),
        ("orphans", 0),
        ("hangs", 0),
    ] {
        assert_eq!(json[key].as_u64(), Some(want), "{key}: {stdout}");
    }
    assert!(json["hostile_member_attacks"].as_u64() >= Some(2), "{json}");
    assert_eq!(json["per_run"][0]["fault"], "hostile-member", "{json}");
}
