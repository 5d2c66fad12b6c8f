//! `petrel bench chaos --faults slow`: one node of a multi-process Lasso job runs at half
//! speed (stopped for 20 ms of every 40) from its first checkpoint to the end. The job must
//! finish with the uninterrupted model, without a restart, and leave no process behind.

use crate::common::one_clean_chaos_run;

#[test]
fn bench_chaos_slow_node_finishes_identical_without_a_restart() {
    let args = ["--apps", "lasso", "--faults", "slow", "--max-rounds", "600"];
    let (_, json) = one_clean_chaos_run(&args);
    assert_eq!(json["per_run"][0]["fault"], "slow", "{json}");
}
