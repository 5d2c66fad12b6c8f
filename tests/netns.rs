// Over 600 lines: every scenario on emulated hosts shares the set-up of this file.
//! Clusters across network namespaces joined by rate-limited veth links: real multi-host
//! runs on one machine. Needs root and iproute2; skips with a message otherwise.

use petrel::netns::{Hosts, LinkShape};
use petrel::train::p3::processes::Teardown;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::succeeded;

use common::{PETREL, drain, example_binary, netns_skip, wait_with_deadline};
const NAMES: [&str; 3] = ["hub", "w1", "w2"];

/// Starts the demo job on three hosts; returns each node with a thread reading its stderr.
fn start(hosts: &Hosts, dir: &std::path::Path, rounds: u64) -> Vec<(Child, JoinHandle<String>)> {
    start_with(hosts, dir, rounds, 2000, 0.0)
}

/// [`start`] with the failure timeout and the demo's duration limit (0 = none).
fn start_with(
    hosts: &Hosts,
    dir: &std::path::Path,
    rounds: u64,
    failure_timeout_ms: u64,
    duration_s: f64,
) -> Vec<(Child, JoinHandle<String>)> {
    let certs = dir.join("certs");
    let roles = ["demo-aggregator", "demo-worker", "demo-worker"];
    let mut cfg = format!(
        "[cluster]\nname = \"netns\"\ncerts_dir = \"{}\"\nheartbeat_interval_ms = 200\nfailure_timeout_ms = {failure_timeout_ms}\n",
        certs.display()
    );
    for i in 0..3 {
        cfg.push_str(&format!(
            "[[nodes]]\nname = \"{}\"\naddr = \"{}:7000\"\nroles = [\"{}\"]\n",
            NAMES[i],
            hosts.host_ip(i),
            roles[i]
        ));
    }
    cfg.push_str(&format!(
        "[app.demo]\nrounds = {rounds}\ntensor_len = 16384\nduration_s = {duration_s}\n"
    ));
    let cfg_path = dir.join("cluster.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    common::certs(&certs, &cfg_path, false);
    (0..3)
        .map(|i| {
            let child = hosts
                .command(i, PETREL)
                .args([
                    "node",
                    "--config",
                    cfg_path.to_str().unwrap(),
                    "--name",
                    NAMES[i],
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            drain(child)
        })
        .collect()
}

#[test]
fn three_node_cluster_across_network_namespaces() {
    if netns_skip("three_node_cluster_across_network_namespaces") {
        return;
    }
    let prefix = format!("pa{}", std::process::id() % 100_000);
    let shape = LinkShape {
        rate_mbit: Some(200.0),
        delay_ms: None,
        queue_ms: None,
    };
    let hosts = Hosts::up(&prefix, 3, &shape).expect("create namespaces");
    let _teardown = Teardown(hosts.clone());
    let dir = tempfile::tempdir().unwrap();
    for (i, (mut child, log)) in start(&hosts, dir.path(), 5).into_iter().enumerate() {
        let st = wait_with_deadline(&mut child, Duration::from_secs(90));
        let err = log.join().unwrap();
        assert!(st.success(), "{} failed:\n{err}", NAMES[i]);
        if i > 0 {
            assert!(err.contains("round=5 of=5"), "{}:\n{err}", NAMES[i]);
        }
    }
}

/// The link of host w2 goes down mid-run: the other hosts report w2 within the failure
/// timeout and stop; w2 reports the coordinator. Nothing hangs; the link is restored.
#[test]
fn cut_link_is_detected_across_namespaces() {
    if netns_skip("cut_link_is_detected_across_namespaces") {
        return;
    }
    let prefix = format!("pb{}", std::process::id() % 100_000);
    let hosts = Hosts::up(&prefix, 3, &LinkShape::default()).expect("create namespaces");
    let _teardown = Teardown(hosts.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(&hosts, dir.path(), 1_000_000);
    std::thread::sleep(Duration::from_secs(3));
    for (child, _) in &mut nodes {
        assert!(
            child.try_wait().unwrap().is_none(),
            "a node ended before the fault"
        );
    }
    let cut = Instant::now();
    hosts.set_link(2, false).expect("cut link");
    for (i, (child, log)) in nodes.iter_mut().enumerate() {
        let st = wait_with_deadline(child, Duration::from_secs(30));
        assert!(!st.success(), "{} should fail", NAMES[i]);
        let _ = log;
    }
    let detected = cut.elapsed();
    hosts.set_link(2, true).expect("restore link");
    let logs: Vec<String> = nodes
        .into_iter()
        .map(|(_, log)| log.join().unwrap())
        .collect();
    assert!(logs[0].contains("w2"), "hub must name w2:\n{}", logs[0]);
    assert!(logs[1].contains("w2"), "w1 must name w2:\n{}", logs[1]);
    assert!(
        logs[2].contains("hub"),
        "w2 must name the coordinator:\n{}",
        logs[2]
    );
    assert!(detected < Duration::from_secs(12), "took {detected:?}");
}

/// The link of host w2 goes down for 1.5 s, well under the 5 s failure timeout, and comes
/// back: QUIC retransmits, nobody is declared dead, and every round's mean still verifies
/// (the demo checks each reply against the closed form), so nothing was lost or reordered.
#[test]
fn short_link_cut_is_survived_across_namespaces() {
    if netns_skip("short_link_cut_is_survived_across_namespaces") {
        return;
    }
    let prefix = format!("pc{}", std::process::id() % 100_000);
    let hosts = Hosts::up(&prefix, 3, &LinkShape::default()).expect("create namespaces");
    let _teardown = Teardown(hosts.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start_with(&hosts, dir.path(), 1_000_000, 5000, 7.0);
    std::thread::sleep(Duration::from_secs(2));
    for (child, _) in &mut nodes {
        assert!(
            child.try_wait().unwrap().is_none(),
            "a node ended before the fault"
        );
    }
    hosts.set_link(2, false).expect("cut link");
    std::thread::sleep(Duration::from_millis(1500));
    hosts.set_link(2, true).expect("restore link");
    for (i, (mut child, log)) in nodes.into_iter().enumerate() {
        let st = wait_with_deadline(&mut child, Duration::from_secs(60));
        let err = log.join().unwrap();
        assert!(
            st.success(),
            "{} failed after a short cut:\n{err}",
            NAMES[i]
        );
        if i > 0 {
            assert!(err.contains("duration reached"), "{}:\n{err}", NAMES[i]);
        }
    }
}

/// Issues 11 and 18, multi-host: one config, `petrel certs --bundle`, one bundle copied to
/// each host, and every host started the same way with only its rank: `petrel node`
/// (built-in demo, 3 hosts) and the user program `examples/topology` (its roles composed in
/// code, left out of the config), each finding its node from `RANK` and its certificates
/// relative to the bundle's `cluster.toml`.
#[test]
fn hosts_run_from_one_config_and_their_bundles() {
    if netns_skip("hosts_run_from_one_config_and_their_bundles") {
        return;
    }
    let prefix = format!("pd{}", std::process::id() % 100_000);
    let hosts = Hosts::up(&prefix, 3, &LinkShape::default()).expect("create namespaces");
    let _teardown = Teardown(hosts.clone());
    let dir = tempfile::tempdir().unwrap();
    // (job, its nodes with the roles line of the config, the example that runs it).
    type Job<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);
    let jobs: [Job; 2] = [
        (
            "demo",
            &[
                ("hub", "roles = [\"demo-aggregator\"]\n"),
                ("w1", "roles = [\"demo-worker\"]\n"),
                ("w2", "roles = [\"demo-worker\"]\n"),
            ],
            None,
        ),
        (
            "topology",
            &[("station", ""), ("field", "")],
            Some("topology"),
        ),
    ];
    for (job, nodes, example) in jobs {
        let job_dir = dir.path().join(job);
        std::fs::create_dir_all(&job_dir).unwrap();
        let mut cfg = format!("[cluster]\nname = \"{job}\"\nheartbeat_interval_ms = 200\n");
        for (i, (name, roles)) in nodes.iter().enumerate() {
            cfg.push_str(&format!(
                "[[nodes]]\nname = \"{name}\"\naddr = \"{}:7100\"\n{roles}",
                hosts.host_ip(i)
            ));
        }
        if example.is_none() {
            cfg.push_str("[app.demo]\nrounds = 4\ntensor_len = 1024\n");
        }
        let cfg_path = job_dir.join("cluster.toml");
        std::fs::write(&cfg_path, cfg).unwrap();
        let ca = job_dir.join("ca");
        common::certs(&ca, &cfg_path, true);
        let program = match example {
            Some(e) => example_binary(e),
            None => PETREL.into(),
        };
        let children: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(rank, (name, _))| {
                // "Copy the bundle to the host": a directory of its own, nothing else.
                let host_dir = job_dir.join(format!("host{rank}"));
                std::fs::create_dir_all(&host_dir).unwrap();
                for e in std::fs::read_dir(ca.join("bundles").join(name)).unwrap() {
                    let e = e.unwrap();
                    std::fs::copy(e.path(), host_dir.join(e.file_name())).unwrap();
                }
                let mut cmd = hosts.command(rank, program.to_str().unwrap());
                if example.is_none() {
                    cmd.arg("node");
                }
                cmd.arg("--config")
                    .arg(host_dir.join("cluster.toml"))
                    .env("RANK", rank.to_string())
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut stdout = String::new();
        for (rank, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{job} rank {rank}:\n{err}");
            assert!(err.trim().is_empty(), "{job} rank {rank} warned:\n{err}");
            stdout.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        if example.is_some() {
            assert!(
                stdout.contains("sensor: monitor handled 200 readings and 1 alarm(s)"),
                "{stdout}"
            );
        }
    }
}

/// `petrel run --netns PREFIX`: node i of the job file runs inside host `PREFIX-hi` at
/// `198.18.0.{i+1}:7000` (the demo job across four emulated hosts finishes and every
/// node's result is checked by the job); hosts that do not exist are named at once with
/// the command that makes them, before any node starts.
#[test]
fn petrel_run_places_each_node_on_its_own_emulated_host() {
    if netns_skip("petrel_run_places_each_node_on_its_own_emulated_host") {
        return;
    }
    let prefix = format!("rn{}", std::process::id() % 10_000);
    let _hosts = Teardown(Hosts::up(&prefix, 4, &LinkShape::default()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let job = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster.toml");
    let run_dir = dir.path().join("run");
    let out = Command::new(PETREL)
        .args([
            "run",
            job,
            "--timeout-s",
            "120",
            "--netns",
            &prefix,
            "--run-dir",
        ])
        .arg(&run_dir)
        .env("PETREL_APP__DEMO__ROUNDS", "3")
        .output()
        .unwrap();
    succeeded(&out);
    let resolved = std::fs::read_to_string(run_dir.join("cluster.toml")).unwrap();
    for i in 1..=4 {
        assert!(
            resolved.contains(&format!("addr = \"198.18.0.{i}:7000\"")),
            "{resolved}"
        );
    }

    let missing = format!("{prefix}x");
    let out = Command::new(PETREL)
        .args(["run", job, "--netns", &missing])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("network namespace {missing}-h0 does not exist"))
            && stderr.contains(&format!("petrel netns up --prefix {missing} --hosts 4")),
        "{stderr}"
    );
}

#[test]
fn gauss_seidel_workers_across_hosts_make_the_loopback_model() {
    // Each worker on its own emulated host, and the model is the one the same job makes
    // on 127.0.0.1.
    if netns_skip("gauss_seidel_workers_across_hosts_make_the_loopback_model") {
        return;
    }
    let prefix = format!("gx{}", std::process::id() % 10_000);
    let _hosts = Teardown(Hosts::up(&prefix, 3, &LinkShape::default()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let job = |out: &std::path::Path| {
        let mut cfg = String::from("[cluster]\nname = \"gs-hosts\"\n");
        for (name, role) in [
            ("scheduler", "strads-lasso-scheduler"),
            ("w0", "strads-lasso-worker"),
            ("w1", "strads-lasso-worker"),
        ] {
            cfg.push_str(&format!(
                "[[nodes]]\nname = \"{name}\"\naddr = \"127.0.0.1:0\"\nroles = [\"{role}\"]\n"
            ));
        }
        cfg.push_str(&format!(
            "[app.lasso]\nsolver = \"gauss-seidel\"\n\
             gap_tolerance = 1e-8\nout_dir = \"{}\"\n[app.lasso.synthetic]\n\
             n_samples = 400\nn_features = 4000\nnnz_per_column = 10\nn_nonzero = 40\n",
            out.display()
        ));
        let path = out.with_extension("toml");
        std::fs::write(&path, cfg).unwrap();
        path
    };
    let run = |name: &str, netns: Option<&str>| -> String {
        let out = dir.path().join(name);
        let cfg = job(&out);
        let mut cmd = Command::new(PETREL);
        cmd.arg("run")
            .arg(&cfg)
            .args(["--timeout-s", "120", "--run-dir"]);
        cmd.arg(dir.path().join(format!("{name}-run")));
        if let Some(prefix) = netns {
            cmd.args(["--netns", prefix]);
        }
        let done = cmd.output().unwrap();
        assert!(
            done.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        let metrics = std::fs::read_to_string(out.join("metrics.json")).unwrap();
        assert!(metrics.contains("\"gauss-seidel\""), "{metrics}");
        std::fs::read_to_string(out.join("coefficients.tsv")).unwrap()
    };
    let across = run("hosts", Some(&prefix));
    let resolved = std::fs::read_to_string(dir.path().join("hosts-run/cluster.toml")).unwrap();
    assert!(resolved.contains("198.18.0.3"), "{resolved}");
    assert_eq!(across, run("loopback", None), "the hosts' model differs");
}

/// `petrel netns up --delay-ms` where the kernel lacks netem fails naming it and leaves no
/// namespace behind (where netem exists the set comes up and goes down cleanly).
#[test]
fn netns_up_with_a_delay_leaves_nothing_behind_when_it_fails() {
    if netns_skip("netns_up_with_a_delay_leaves_nothing_behind_when_it_fails") {
        return;
    }
    let prefix = format!("pn{}", std::process::id() % 100_000);
    let petrel = |args: &[&str]| Command::new(PETREL).args(args).output().unwrap();
    let up = petrel(&[
        "netns",
        "up",
        "--prefix",
        &prefix,
        "--hosts",
        "2",
        "--delay-ms",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&up.stderr);
    if up.status.success() {
        petrel(&["netns", "down", "--prefix", &prefix, "--hosts", "2"]);
    } else {
        assert!(stderr.contains("netem"), "{stderr}");
    }
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.starts_with(&prefix)),
        "left behind: {list}"
    );
}

/// The elastic example on four emulated hosts, each node started by hand as an operator
/// would: the standby `w2` joins the running job a moment after the others, the plan asks
/// `w0` to drain and leave, and the job ends with every task once, without `w0`.
#[test]
fn elastic_job_joins_and_leaves_across_network_namespaces() {
    if netns_skip("elastic_job_joins_and_leaves_across_network_namespaces") {
        return;
    }
    let prefix = format!("pe{}", std::process::id() % 100_000);
    let hosts = Hosts::up(&prefix, 4, &LinkShape::default()).expect("create namespaces");
    let _teardown = Teardown(hosts.clone());
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let names = ["boss", "w0", "w1", "w2"];
    let mut cfg = format!(
        "[cluster]\nname = \"elastic\"\ncerts_dir = \"{}\"\nscale = \"at=600ms remove w0\"\non_node_death = \"leave\"\n",
        certs.display()
    );
    for (i, name) in names.iter().enumerate() {
        let standby = if *name == "w2" {
            "standby = true\n"
        } else {
            ""
        };
        cfg.push_str(&format!(
            "[[nodes]]\nname = \"{name}\"\naddr = \"{}:7000\"\n{standby}",
            hosts.host_ip(i)
        ));
    }
    let cfg_path = dir.path().join("cluster.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    common::certs(&certs, &cfg_path, false);
    let start = |i: usize| {
        let child = hosts
            .command(i, example_binary("elastic").to_str().unwrap())
            .args(["--node", names[i], "--config", cfg_path.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (mut child, err) = drain(child);
        let out = common::read_all(child.stdout.take().unwrap());
        (child, out, err)
    };
    let mut nodes: Vec<_> = (0..3).map(start).collect();
    std::thread::sleep(Duration::from_millis(300));
    nodes.push(start(3));
    let mut boss_out = String::new();
    for (i, (mut child, out, err)) in nodes.into_iter().enumerate() {
        let st = wait_with_deadline(&mut child, Duration::from_secs(90));
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        assert!(st.success(), "{} failed:\n{out}\n{err}", names[i]);
        if i == 0 {
            boss_out = out;
        }
    }
    let expected: u64 = (0..400u64).map(|t| t * t).sum();
    let sum = format!("dealer: 400 tasks, sum {expected} (expected {expected})");
    assert!(boss_out.lines().any(|l| l == sum), "{boss_out}");
    assert!(
        boss_out
            .lines()
            .any(|l| l.starts_with("dealer: final members boss, w1, w2 ")),
        "{boss_out}"
    );
}

/// `petrel run <cfg> --run-dir <run_dir> <args>` to its end, which must succeed: the node
/// processes seen while it ran that are still alive (none, or they are orphans).
fn run_to_the_end(cfg: &std::path::Path, run_dir: &std::path::Path, args: &[&str]) -> Vec<u32> {
    let log = run_dir.with_extension("log");
    let mut child = Command::new(PETREL)
        .arg("run")
        .arg(cfg)
        .args(["--timeout-s", "60", "--run-dir"])
        .arg(run_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    let status = loop {
        seen.extend(common::children_of(child.id()));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "petrel run {args:?}: {status}\n{stderr}");
    seen.into_iter().filter(|&p| common::alive(p)).collect()
}

/// A job file: `[cluster]` with `cluster`'s lines, `nodes` (name, roles, standby) on
/// 127.0.0.1, then `app`.
fn job_file(path: &std::path::Path, cluster: &str, nodes: &[(&str, &str, bool)], app: &str) {
    let mut cfg = format!("[cluster]\n{cluster}");
    for (node, roles, standby) in nodes {
        cfg.push_str(&format!(
            "[[nodes]]\nname = \"{node}\"\naddr = \"127.0.0.1:0\"\nroles = {roles}\nstandby = {standby}\n"
        ));
    }
    cfg.push_str(app);
    std::fs::write(path, cfg).unwrap();
}

/// The scheduled Lasso with dynamic dealing, each node on its own emulated host under
/// `petrel run --netns --scale`: the standby `w2` joins at 200 ms and `w0` leaves at
/// 700 ms; both changes are in `metrics.json`, the objective is the one a fixed
/// membership reaches on loopback (to 1e-6, the gap stop), and no node process is left.
#[test]
fn scheduled_lasso_workers_join_and_leave_across_network_namespaces() {
    if netns_skip("scheduled_lasso_workers_join_and_leave_across_network_namespaces") {
        return;
    }
    let prefix = format!("el{}", std::process::id() % 10_000);
    let _hosts = Teardown(Hosts::up(&prefix, 4, &LinkShape::default()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, standby: bool, args: &[&str]| {
        let out = dir.path().join(name);
        let worker = "[\"strads-lasso-worker\"]";
        let mut nodes = vec![
            ("scheduler", "[\"strads-lasso-scheduler\"]", false),
            ("w0", worker, false),
            ("w1", worker, false),
        ];
        nodes.extend(standby.then_some(("w2", worker, true)));
        let app = format!(
            "[app.lasso]\nsolver = \"scheduled\"\nbalance = \"dynamic\"\nblock_size = 8\n\
             candidate_pool = 32\neval_every = 50\ngap_tolerance = 1e-6\nmax_rounds = 20000\n\
             out = \"{}\"\n[app.lasso.synthetic]\nn_samples = 300\nn_features = 300\n",
            out.display()
        );
        let cfg = out.with_extension("toml");
        job_file(&cfg, "name = \"lasso-hosts\"\n", &nodes, &app);
        let orphans = run_to_the_end(&cfg, &dir.path().join(format!("{name}-run")), args);
        assert!(orphans.is_empty(), "{name}: orphans {orphans:?}");
        common::metrics(&out)
    };
    let plan = "at=200ms add w2; at=700ms remove w0";
    // The fixed run beside the elastic one: the test's time is the longer of the two.
    let (m, fixed) = std::thread::scope(|scope| {
        let fixed = scope.spawn(|| run("loopback", false, &[]));
        let m = run("hosts", true, &["--netns", &prefix, "--scale", plan]);
        (m, fixed.join().unwrap())
    });
    let resolved = std::fs::read_to_string(dir.path().join("hosts-run/cluster.toml")).unwrap();
    assert!(resolved.contains("198.18.0.4:7000"), "{resolved}");
    let changes: Vec<_> = (m["balance"]["changes"].as_array().unwrap().iter())
        .map(|c| (c["joined"].to_string(), c["left"].to_string()))
        .collect();
    let want = [("[\"w2\"]", "[]"), ("[]", "[\"w0\"]")].map(|(j, l)| (j.into(), l.into()));
    assert_eq!(changes, want, "{m}");
    assert!(fixed["balance"].get("changes").is_none(), "{fixed}");
    let objective = |m: &serde_json::Value| m["final_objective"].as_f64().unwrap();
    let (across, fixed) = (objective(&m), objective(&fixed));
    assert!(
        (across - fixed).abs() <= 1e-6 * fixed.abs(),
        "objective {across} across hosts against {fixed} with a fixed membership on loopback"
    );
}

/// ps-lr on five emulated hosts under `petrel run --netns` with the plan in the job file
/// (`[cluster] scale`): the standby `shard-2` joins and `shard-1` leaves, handing its rows
/// over; both changes in `metrics.json`, every worker runs every clock, the held-out
/// figures are a fixed loopback run's within SGD's tolerances (those of
/// `tests/elastic_ps.rs`), and no node process is left.
#[test]
fn ps_lr_shards_join_and_leave_across_network_namespaces() {
    if netns_skip("ps_lr_shards_join_and_leave_across_network_namespaces") {
        return;
    }
    let prefix = format!("es{}", std::process::id() % 10_000);
    let _hosts = Teardown(Hosts::up(&prefix, 5, &LinkShape::default()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, elastic: bool, args: &[&str]| {
        let out = dir.path().join(name);
        let (shard, worker) = ("[\"ps-lr-shard\"]", "[\"ps-lr-worker\"]");
        let mut nodes = vec![
            ("shard-0", "[\"ps-lr-shard\", \"ps-lr-monitor\"]", false),
            ("shard-1", shard, false),
            ("worker-0", worker, false),
            ("worker-1", worker, false),
        ];
        nodes.extend(elastic.then_some(("shard-2", shard, true)));
        let mut cluster = String::from("name = \"ps-lr-hosts\"\n");
        if elastic {
            cluster.push_str("scale = \"at=300ms add shard-2; at=1200ms remove shard-1\"\n");
        }
        let app = format!(
            "[app.lr]\nclock_ms = 40.0\ncheckpoint_every = 0\nmax_clocks = 80\nout = \"{}\"\n",
            out.display()
        );
        let cfg = out.with_extension("toml");
        job_file(&cfg, &cluster, &nodes, &app);
        let orphans = run_to_the_end(&cfg, &dir.path().join(format!("{name}-run")), args);
        assert!(orphans.is_empty(), "{name}: orphans {orphans:?}");
        common::metrics(&out)
    };
    let (m, fixed) = std::thread::scope(|scope| {
        let fixed = scope.spawn(|| run("loopback", false, &[]));
        (
            run("hosts", true, &["--netns", &prefix]),
            fixed.join().unwrap(),
        )
    });
    let changes: Vec<_> = (m["changes"].as_array().unwrap().iter())
        .map(|c| (c["worker"].as_u64().unwrap(), c["change"].to_string()))
        .collect();
    let want = [(2, "\"shard joined\""), (1, "\"shard left\"")].map(|(s, c)| (s, c.to_string()));
    assert_eq!(changes, want, "{m}");
    assert_eq!(m["worker_clocks"], serde_json::json!([80, 80]), "{m}");
    for (key, tolerance) in [("test_log_loss", 0.05), ("test_accuracy", 0.02)] {
        let (e, f) = (
            m["final"][key].as_f64().unwrap(),
            fixed["final"][key].as_f64().unwrap(),
        );
        assert!(
            (e - f).abs() <= tolerance,
            "{key} {e} across hosts against {f} fixed"
        );
    }
}
