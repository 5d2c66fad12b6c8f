//! `petrel bench chaos --faults link-cut`: the nodes of a multi-process Lasso job on
//! emulated hosts (network namespaces), the victim's link cut once for less than the
//! failure timeout (the job goes on, no restart) and once for longer (a death: the cluster
//! restarts from its newest checkpoint). Both must finish with the uninterrupted model,
//! leave no process and no namespace behind. Needs root and iproute2; skips with a message
//! otherwise.

use std::process::Command;

use crate::common;
use crate::common::succeeded;

use common::{PETREL, last_json_line, netns_skip};

#[test]
fn bench_chaos_link_cuts_short_and_long_finish_identical() {
    let test = "bench_chaos_link_cuts_short_and_long_finish_identical";
    if netns_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(PETREL)
        .args([
            "bench", "chaos", "--apps", "lasso", "--faults", "link-cut", "--runs", "2", "--seed",
            "1",
        ])
        // Half the default Lasso: the long cut still lands before its end.
        .args(["--max-rounds", "1500", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json: serde_json::Value = last_json_line(&stdout);
    for (key, want) in [
        ("runs", 2),
        ("faults_injected", 2),
        ("jobs_completed", 2),
        ("outputs_identical", 2),
        ("runs_skipped", 0),
        ("orphans", 0),
        ("hangs", 0),
    ] {
        assert_eq!(json[key].as_u64(), Some(want), "{key}: {json}");
    }
    assert_eq!(json["netns_left"], false, "{json}");
    // Link cuts alternate short, long.
    let run = |i: usize| &json["per_run"][i];
    for (i, case) in ["short", "long"].into_iter().enumerate() {
        assert_eq!(run(i)["fault"], "link-cut", "{json}");
        assert_eq!(run(i)["cut"]["case"], case, "{json}");
        assert_eq!(run(i)["identical"], true, "{json}");
    }
    let timeout = run(0)["cut"]["failure_timeout_s"].as_f64().unwrap();
    // The short cut was survived: shorter than the failure timeout, no restart.
    assert!(
        run(0)["cut"]["down_s"].as_f64().unwrap() < timeout,
        "{json}"
    );
    assert_eq!(run(0)["restarts"], 0, "{json}");
    // The long cut was a death: the link stayed down past the timeout, one restart at least.
    assert!(
        run(1)["cut"]["down_s"].as_f64().unwrap() > timeout,
        "{json}"
    );
    assert!(run(1)["restarts"].as_u64() >= Some(1), "{json}");
    // The namespaces are gone.
    let prefix = json["link_cuts"]
        .as_str()
        .and_then(|l| l.strip_prefix("netns "))
        .unwrap_or_else(|| panic!("no netns prefix: {json}"))
        .to_string();
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.starts_with(&format!("{prefix}-"))),
        "namespaces {prefix}-* left behind:\n{list}"
    );
}

/// `petrel train --netns` places node processes, so it needs `--transport processes`, and
/// hosts that exist (`train p3`, always node processes, names the missing one, or says it
/// needs root); either is refused before any node runs.
#[test]
fn train_netns_needs_node_processes() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (
            vec!["train", "lasso", "--netns", "nohosts"],
            "--netns places node processes: add --transport processes",
        ),
        (
            vec!["train", "p3", "--netns", "nohosts"],
            "network namespace",
        ),
    ] {
        let out = Command::new(PETREL)
            .args(&args)
            .arg("--out")
            .arg(dir.path().join("o"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
