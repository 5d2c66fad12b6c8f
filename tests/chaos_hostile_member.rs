//! `petrel bench chaos --faults hostile-member`: a member's own node goes bad mid-job (it
//! stalls frames, trickles frames and floods at control priority, from its own socket with
//! its own certificate, so its victim admits it). The victim must disconnect it for the
//! stalls and the trickle within seconds, and the job must finish with the uninterrupted
//! model, no restart and no process left behind.

use crate::common::one_clean_chaos_run;

#[test]
fn bench_chaos_hostile_member_is_disconnected_and_the_job_finishes_identical() {
    // The default Lasso: its stall and trickle attacks end well before it does.
    let (stdout, json) = one_clean_chaos_run(&["--apps", "lasso", "--faults", "hostile-member"]);
    // The stall and the trickle, each disconnected.
    let disconnected = json["hostile_member_disconnected"].as_u64();
    assert_eq!(disconnected, Some(2), "{stdout}");
    assert!(json["hostile_member_attacks"].as_u64() >= Some(2), "{json}");
    assert_eq!(json["per_run"][0]["fault"], "hostile-member", "{json}");
}
