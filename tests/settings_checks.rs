//! One settings check for every entry point: `petrel run`, `petrel node`, `petrel train`
//! and the launcher API refuse an unknown table or key and a value out of its range before
//! any node starts, with one line naming the key; a job whose training diverges fails and
//! leaves no model behind.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use petrel::actors::{Cluster, NodeContext, NodeError, Topology};
use petrel::launcher::{LaunchArgs, launch};

use crate::common;

/// A refusal comes back at once: nothing was started, so nothing is waited for.
const QUICK: Duration = Duration::from_secs(5);

/// Runs petrel in `dir` with node logs on, and how long it took.
fn petrel(args: &[&str], env: &[(&str, &str)], dir: &Path) -> (Output, Duration) {
    let mut cmd = Command::new(common::PETREL);
    cmd.args(args).current_dir(dir).env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let out = cmd.output().expect("run petrel");
    (out, t0.elapsed())
}

/// Asserts that `args` failed within [`QUICK`], started no node, and printed one error
/// line containing `needle`.
fn refused(args: &[&str], env: &[(&str, &str)], dir: &Path, needle: &str) {
    let (o, took) = petrel(args, env, dir);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let all = format!("{stdout}{stderr}");
    assert!(!o.status.success(), "{args:?} {env:?} was accepted: {all}");
    assert!(took < QUICK, "{args:?} {env:?} took {took:?}: {all}");
    let started = all
        .lines()
        .any(|l| l.starts_with('[') && l.contains("] 20"))
        || all.contains("petrel_actors::topology")
        || all.contains("joined cluster");
    assert!(!started, "{args:?} {env:?} started a node: {all}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{args:?} {env:?}: {stderr}");
    assert!(
        errors[0].contains(needle),
        "{args:?} {env:?}: {} lacks {needle}",
        errors[0]
    );
}

const DEMO: &str = "[cluster]\nname = \"demo\"\n\
    [[nodes]]\nname = \"hub\"\naddr = \"127.0.0.1:0\"\nroles = [\"demo-aggregator\"]\n\
    [[nodes]]\nname = \"w1\"\naddr = \"127.0.0.1:0\"\nroles = [\"demo-worker\"]\n\
    [app.demo]\nrounds = 2\ntensor_len = 16\n";

#[test]
fn run_and_node_refuse_a_misspelt_table_and_an_unknown_app_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("clustr.toml"), DEMO.replace("[cluster]", "[clustr]")).unwrap();
    std::fs::write(
        d.join("appkey.toml"),
        DEMO.replace("rounds = 2", "rounds = 2\nroundz = 3"),
    )
    .unwrap();
    std::fs::write(
        d.join("range.toml"),
        DEMO.replace("rounds = 2", "rounds = 0"),
    )
    .unwrap();
    for command in [vec!["run"], vec!["node", "--name", "hub", "--config"]] {
        let with = |file: &'static str| {
            let mut args = command.clone();
            args.push(file);
            args
        };
        refused(&with("clustr.toml"), &[], d, "unknown table [clustr]");
        refused(&with("appkey.toml"), &[], d, "unknown field `roundz`");
        refused(&with("range.toml"), &[], d, "[app.demo] rounds = 0");
    }
}

#[test]
fn net_knobs_that_would_stall_the_cluster_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = [
        (
            "max_message_bytes = 0",
            "[net] max_message_bytes = 0: must be at least 1024",
        ),
        (
            "max_concurrent_streams = 0",
            "[net] max_concurrent_streams = 0: must be at least 1",
        ),
        (
            "receive_window = 0",
            "[net] receive_window = 0: must be at least 1024",
        ),
        (
            "threads = 100000",
            "[net] threads = 100000: must be at most",
        ),
    ];
    for (knob, needle) in cases {
        std::fs::write(d.join("net.toml"), format!("{DEMO}[net]\n{knob}\n")).unwrap();
        refused(&["run", "net.toml"], &[], d, needle);
        refused(&["run", "net.toml", "--in-process"], &[], d, needle);
        refused(
            &["node", "--name", "w1", "--config", "net.toml"],
            &[],
            d,
            needle,
        );
    }
    // The environment's overrides are checked the same way.
    std::fs::write(d.join("demo.toml"), DEMO).unwrap();
    refused(
        &["run", "demo.toml"],
        &[("PETREL_NET__THREADS", "100000")],
        d,
        "[net] threads = 100000",
    );
    // So are the knobs of `petrel train`'s node processes.
    refused(
        &["train", "ps-lr", "--transport", "processes", "--out", "out"],
        &[("PETREL_NET__MAX_MESSAGE_BYTES", "0")],
        d,
        "[net] max_message_bytes = 0",
    );
}

#[test]
fn p3_flags_out_of_range_are_refused_before_any_process_starts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: [(&[&str], &str); 8] = [
        (
            &["--lr", "1e30"],
            "[app.p3] lr = 1000000000000000000000000000000",
        ),
        (
            &["--lr", "100"],
            "[app.p3] lr = 100: must be a finite number in (0, 10]",
        ),
        (&["--lr", "NaN"], "[app.p3] lr = NaN"),
        (&["--lr", "inf"], "[app.p3] lr = inf"),
        (&["--lr", "0"], "[app.p3] lr = 0"),
        (&["--momentum", "1"], "[app.p3] momentum = 1"),
        (&["--workers", "0"], "[app.p3] workers = 0: must be >= 1"),
        (&["--shards", "0"], "[app.p3] shards = 0: must be >= 1"),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["train", "p3", "--net", "mlp", "--epochs", "1"];
        args.extend(flags);
        args.extend(["--out", "m.safetensors"]);
        refused(&args, &[], d, needle);
        assert!(!d.join("m.safetensors").exists(), "{flags:?} wrote a model");
    }
}

#[test]
fn run_refuses_an_app_p3_section_with_an_unknown_key_or_a_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p3 = "[cluster]\nname = \"p3\"\n\
        [[nodes]]\nname = \"w0\"\naddr = \"127.0.0.1:0\"\nroles = [\"p3-worker\"]\n\
        [[nodes]]\nname = \"s0\"\naddr = \"127.0.0.1:0\"\nroles = [\"p3-shard\"]\n\
        [app.p3]\nworkers = 1\nshards = 1\n";
    for (extra, needle) in [
        ("lr = 100\n", "[app.p3] lr = 100"),
        ("momentum = 1.5\n", "[app.p3] momentum = 1.5"),
        ("workers_ = 2\n", "unknown field `workers_`"),
    ] {
        std::fs::write(d.join("p3.toml"), format!("{p3}{extra}")).unwrap();
        refused(&["run", "p3.toml"], &[], d, needle);
    }
}

#[test]
fn ps_lr_refuses_a_learning_rate_above_its_documented_bound() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        &["train", "ps-lr", "--learning-rate", "100", "--out", "out"],
        &[],
        d,
        "learning_rate = 100: must be in (0, 10] with rule sgd",
    );
    std::fs::write(d.join("job.toml"), "[app.lr]\nlearning_rate = 11\n").unwrap();
    refused(
        &["train", "ps-lr", "--config", "job.toml", "--out", "out"],
        &[],
        d,
        "learning_rate = 11",
    );
    assert!(!d.join("out/petrel-model.json").exists());
}

#[test]
fn train_refuses_worker_counts_no_host_can_run() {
    let dir = tempfile::tempdir().unwrap();
    for app in ["ps-lr", "lasso"] {
        refused(
            &["train", app, "--workers", "100000", "--out", "out"],
            &[],
            dir.path(),
            "workers = 100000: must be <= 1024",
        );
    }
}

/// A run whose loss becomes NaN fails naming the divergence and what to lower, and writes
/// no model.
#[test]
fn a_diverging_ps_job_fails_and_leaves_no_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (o, _) = petrel(
        &["train", "ps-mf", "--learning-rate", "1", "--out", "out"],
        &[],
        d,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("the run diverged"), "{stderr}");
    assert!(stderr.contains("lower learning_rate"), "{stderr}");
    assert!(!d.join("out/petrel-model.json").exists(), "{stderr}");
    assert!(!d.join("out/model.json").exists(), "{stderr}");
}

async fn never_runs(_: NodeContext) -> Result<(), NodeError> {
    panic!("a node started despite settings out of range")
}

/// Settings handed to `Cluster::new` without `Topology::build` are checked by the launcher
/// too.
#[test]
fn the_launcher_refuses_net_knobs_out_of_range_before_any_node_starts() {
    let mut settings = Topology::builder("api")
        .node("a", &["idle"])
        .node("b", &["idle"])
        .build()
        .unwrap();
    settings.net.max_concurrent_streams = 0;
    let cluster = Cluster::new(settings).role("idle", never_runs);
    for args in [
        LaunchArgs {
            in_process: true,
            ..LaunchArgs::default()
        },
        LaunchArgs {
            processes: true,
            ..LaunchArgs::default()
        },
    ] {
        let t0 = Instant::now();
        let e = launch(&cluster, &args).unwrap_err().to_string();
        assert!(t0.elapsed() < QUICK, "{e}");
        assert!(
            e.contains("[net] max_concurrent_streams = 0: must be at least 1"),
            "{e}"
        );
    }
}

/// A settings error quotes at most 200 bytes of the input, however long the bad value.
#[test]
fn a_megabyte_long_bad_value_is_quoted_in_at_most_200_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let huge = "x".repeat(1 << 20);
    let cfg = dir.path().join("huge.toml");
    std::fs::write(
        &cfg,
        DEMO.replace("rounds = 2", &format!("rounds = \"{huge}\"")),
    )
    .unwrap();
    let (o, _) = petrel(&["run", cfg.to_str().unwrap()], &[], dir.path());
    let stderr = String::from_utf8_lossy(&o.stderr);
    let start = petrel::messages::clip(&stderr, 400);
    assert!(!o.status.success(), "{start}");
    assert!(
        stderr.contains("app.demo") && stderr.contains("invalid type"),
        "{start}"
    );
    assert!(!stderr.contains(&"x".repeat(201)), "{start}");
}

/// The built-in roles deal their work to the members a job starts with: a standby node, a
/// scale plan or `on_node_death = "leave"` is refused before any node starts, and so is a
/// plan, in the file or given by `--scale`, that does not fit the cluster.
#[test]
fn membership_changes_are_refused_for_the_builtin_roles_and_bad_plans_for_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let standby = DEMO.replace(
        "roles = [\"demo-worker\"]\n",
        "roles = [\"demo-worker\"]\n[[nodes]]\nname = \"w2\"\naddr = \"127.0.0.1:0\"\nroles = [\"demo-worker\"]\nstandby = true\n",
    );
    std::fs::write(d.join("standby.toml"), standby).unwrap();
    let plan = |p: &str| {
        DEMO.replace(
            "name = \"demo\"\n",
            &format!("name = \"demo\"\nscale = \"{p}\"\n"),
        )
    };
    std::fs::write(d.join("plan.toml"), plan("at=1s remove w1")).unwrap();
    std::fs::write(d.join("badplan.toml"), plan("at=1s add w7")).unwrap();
    std::fs::write(
        d.join("leave.toml"),
        DEMO.replace(
            "name = \"demo\"\n",
            "name = \"demo\"\non_node_death = \"leave\"\n",
        ),
    )
    .unwrap();
    let fixed = "keeps the membership fixed";
    refused(
        &["run", "standby.toml"],
        &[],
        d,
        "node w2 runs role demo-worker, which keeps the membership fixed",
    );
    refused(&["run", "plan.toml"], &[], d, fixed);
    refused(&["run", "leave.toml"], &[], d, fixed);
    refused(
        &["run", "badplan.toml"],
        &[],
        d,
        "add w7: no standby node of that name or role",
    );
    // `--scale` stands in for the file's plan and is checked the same way.
    refused(
        &["run", "standby.toml", "--scale", "at=1s add w7"],
        &[],
        d,
        "add w7: no standby node of that name or role",
    );
}
