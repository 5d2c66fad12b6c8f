//! A standby node whose process starts as the job ends does not fail the run: the launcher
//! stops it once the coordinator's node finished, and the run succeeds at once instead of
//! failing after the joiner's 30 s join timeout.

use crate::common;

use common::{alive, example_binary, runtime};
use petrel::actors::{Cluster, NodeError, OnNodeDeath, Topology};
use petrel::launcher::{ChildCommand, LaunchOptions, start_cluster};
use std::time::{Duration, Instant};

/// A script running the node's program (`$1`); `w2`'s process first writes its pid to
/// `pid_file` and sleeps past the job's end, so it joins a job that has ended.
fn late_w2(pid_file: &std::path::Path) -> String {
    let pid_file = pid_file.display();
    format!(
        "bin=$1; shift\nif [ \"$2\" = w2 ]; then echo $$ > '{pid_file}'; sleep 20; fi\nexec \"$bin\" \"$@\""
    )
}

/// The elastic example on processes, its standby `w2` started by the plan at 300 ms but
/// joining only after the job ended (about 4 s of tasks).
#[test]
fn a_standby_node_joining_after_the_job_ended_does_not_fail_it() {
    let dir = tempfile::tempdir().unwrap();
    let w2_pid = dir.path().join("w2.pid");
    // The example's own topology: the launcher checks it, its processes run the example.
    let settings = Topology::builder("elastic")
        .node("boss", &["dealer"])
        .node("w0", &["worker"])
        .node("w1", &["worker"])
        .standby_node("w2", &["worker"])
        .with(|s| {
            s.cluster.scale = Some("at=300ms add w2; at=600ms remove w0".into());
            s.cluster.on_node_death = OnNodeDeath::Leave;
        })
        .build()
        .unwrap();
    let cluster = Cluster::new(settings)
        .role("dealer", |_| async { Ok::<(), NodeError>(()) })
        .role("worker", |_| async { Ok::<(), NodeError>(()) });
    let mut opts = LaunchOptions::new().unwrap();
    opts.child = ChildCommand::ReExec {
        program: "sh".into(),
        args: vec![
            "-c".into(),
            late_w2(&w2_pid).into(),
            "sh".into(),
            example_binary("elastic").into(),
        ],
    };
    opts.run_dir = Some(dir.path().join("run"));
    opts.progress = false;
    let started = Instant::now();
    let report = runtime(1)
        .block_on(async { start_cluster(&cluster, opts).await?.wait(None).await })
        .unwrap();
    let took = started.elapsed();
    let pid: u32 = std::fs::read_to_string(&w2_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "w2 ({pid}) outlived the run");
    let finished: Vec<&str> = report.nodes.iter().map(|(n, _)| n.as_str()).collect();
    assert!(!finished.contains(&"w2"), "{finished:?}");
    for node in ["boss", "w0", "w1"] {
        assert!(
            finished.contains(&node),
            "{node} not finished: {finished:?}"
        );
    }
    // The job's tasks take about 4 s; w2 would join after 20 s and fail after 30 more.
    assert!(took < Duration::from_secs(12), "the run took {took:?}");
}
