// Over 600 lines: the CLI's end-to-end cases share the command builders of tests/common.
//! End-to-end tests of the `petrel` binary: multi-process clusters on 127.0.0.1.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::fixtures::demo_cluster;
use common::{
    PETREL, child_process, drain, failed, free_port, has_manifest, kill_node_after_a_checkpoint,
    restarted_once, run_cmd, signal, succeeded, wait_until, wait_with_deadline, write_config,
};

/// A short demo job on three nodes that detect a failure within a second.
fn demo() -> String {
    demo_cluster(
        "name = \"t\"\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 1000",
        "",
        "rounds = 3\ntensor_len = 1024",
    )
}

#[test]
fn petrel_run_brings_up_and_tears_down_a_multiprocess_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &demo());
    let out = Command::new(PETREL)
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--timeout-s",
            "60",
            "--run-dir",
        ])
        .arg(dir.path().join("run"))
        // Environment overrides reach every node through the config crate.
        .env("PETREL_APP__DEMO__ROUNDS", "5")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "petrel run failed:\n{err}");
    for node in ["hub", "w1", "w2"] {
        assert!(
            err.contains(&format!("[{node}]")),
            "no output from {node}:\n{err}"
        );
        assert!(
            err.contains(&format!("node finished node={node}")),
            "{node} did not finish:\n{err}"
        );
    }
    assert!(
        err.contains("round=5 of=5"),
        "env override not applied:\n{err}"
    );
    // The run directory holds the generated certificates and the resolved settings.
    assert!(dir.path().join("run/certs/ca.pem").exists());
    assert!(dir.path().join("run/cluster.toml").exists());
}

#[test]
fn petrel_run_fails_and_names_the_failing_node() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        r#"
[cluster]
name = "bad"
join_timeout_ms = 20000
[[nodes]]
name = "hub"
roles = ["demo-aggregator"]
[[nodes]]
name = "broken"
roles = ["no-such-role"]
"#,
    );
    let started = Instant::now();
    let out = Command::new(PETREL)
        .args(["run", cfg.to_str().unwrap(), "--timeout-s", "60"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no-such-role"), "{err}");
    // An unknown role is found before any process starts, naming the node that lists it.
    assert!(err.contains("node broken"), "{err}");
    assert_eq!(err.matches("error").count(), 1, "one error line: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

/// How a chaos test hurts one node.
enum Fault {
    /// SIGKILL: the process vanishes.
    Kill,
    /// SIGSTOP past the failure timeout: the process is alive but silent.
    Pause,
}

/// A cluster for a chaos test: node names with their roles, and the app sections.
struct Chaos<'a> {
    nodes: &'a [(&'a str, &'a str)],
    app: &'a str,
    victim: &'a str,
}

/// Starts every node as a `petrel node` process, hurts the victim mid-run, and checks that
/// every survivor notices within the failure timeout, names the victim, and exits with an
/// error (no hang).
fn chaos(c: Chaos, fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mut cfg_text = format!(
        "[cluster]\nname = \"chaos\"\ncerts_dir = \"{}\"\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 1000\n",
        certs.display()
    );
    for (name, roles) in c.nodes {
        cfg_text.push_str(&format!(
            "[[nodes]]\nname = \"{name}\"\naddr = \"127.0.0.1:{}\"\nroles = [{roles}]\n",
            free_port()
        ));
    }
    cfg_text.push_str(
        &c.app
            .replace("OUT_DIR", &dir.path().join("out").display().to_string()),
    );
    let cfg = write_config(dir.path(), &cfg_text);
    common::certs(&certs, &cfg, false);
    let spawn = |name: &str| {
        Command::new(PETREL)
            .args(["node", "--config", cfg.to_str().unwrap(), "--name", name])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut survivors = Vec::new();
    let mut victim = None;
    for (name, _) in c.nodes {
        if *name == c.victim {
            victim = Some(spawn(name));
        } else {
            survivors.push((*name, drain(spawn(name))));
        }
    }
    let mut victim = victim.expect("victim is one of the nodes");
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "{} ended before the fault",
        c.victim
    );
    for (name, (child, _)) in survivors.iter_mut() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{name} ended before the fault"
        );
    }
    let hurt = Instant::now();
    match fault {
        Fault::Kill => victim.kill().unwrap(),
        Fault::Pause => {
            assert!(signal(victim.id(), "STOP"));
        }
    }
    for (name, (child, log)) in survivors {
        let status = wait_with_deadline(child, Duration::from_secs(20));
        let detected = hurt.elapsed();
        let err = log.join().unwrap();
        let err = err.lines().rev().take(30).collect::<Vec<_>>().join("\n");
        assert!(!status.success(), "{name} should fail:\n{err}");
        assert!(
            err.contains(c.victim),
            "{name} must name {}:\n{err}",
            c.victim
        );
        // Reported within the failure timeout (1 s) plus scheduling slack.
        assert!(
            detected < Duration::from_secs(8),
            "{name} took {detected:?}"
        );
    }
    let _ = victim.kill();
    let _ = victim.wait();
}

const DEMO_NODES: &[(&str, &str)] = &[
    ("hub", "\"demo-aggregator\""),
    ("w1", "\"demo-worker\""),
    ("w2", "\"demo-worker\""),
];
const DEMO_APP: &str = "[app.demo]\nrounds = 1000000\ntensor_len = 256\n";

#[test]
fn killed_node_is_detected_by_the_other_processes() {
    let c = Chaos {
        nodes: DEMO_NODES,
        app: DEMO_APP,
        victim: "w2",
    };
    chaos(c, Fault::Kill);
}

#[test]
fn paused_node_is_detected_by_the_other_processes() {
    let c = Chaos {
        nodes: DEMO_NODES,
        app: DEMO_APP,
        victim: "w2",
    };
    chaos(c, Fault::Pause);
}

/// A parameter-server shard killed mid-training stops the run; everyone names it.
#[test]
fn killed_ps_shard_stops_the_run_naming_it() {
    let c = Chaos {
        nodes: &[
            ("shard-0", "\"ps-shard\", \"ps-monitor\""),
            ("shard-1", "\"ps-shard\""),
            ("worker-0", "\"ps-worker\""),
            ("worker-1", "\"ps-worker\""),
        ],
        app: "[app.mf]\nconsistency = \"ssp\"\nstaleness = 3\nrank = 4\nmax_clocks = 1000000\ntarget_rmse = 0.0\nout = \"OUT_DIR\"\n",
        victim: "shard-1",
    };
    chaos(c, Fault::Kill);
}

/// A STRADS scheduler (here also the coordinator) killed mid-run: every worker stops and
/// names it.
#[test]
fn killed_strads_scheduler_stops_the_workers_naming_it() {
    let c = Chaos {
        nodes: &[
            ("scheduler", "\"strads-lasso-scheduler\""),
            ("w0", "\"strads-lasso-worker\""),
            ("w1", "\"strads-lasso-worker\""),
        ],
        app: "[app.lasso]\nmode = \"dynamic\"\nmax_rounds = 100000000\ngap_tolerance = 0.0\neval_every = 1000000\nout_dir = \"OUT_DIR\"\n[app.lasso.synthetic]\nn_samples = 200\nn_features = 500\ngroup_size = 10\ncorrelation = 0.8\nn_nonzero = 5\nseed = 1\n",
        victim: "scheduler",
    };
    chaos(c, Fault::Kill);
}

/// A follower scheduler of a two-scheduler Lasso paused (SIGSTOP) while the others run
/// and then wait for it at a synchronisation point: the lead and the workers stop and name
/// it instead of waiting forever. (A negative gap tolerance: the job never converges.)
#[test]
fn paused_follower_scheduler_stops_the_lasso_naming_it() {
    let c = Chaos {
        nodes: &[
            ("scheduler", "\"strads-lasso-scheduler\""),
            ("scheduler-1", "\"strads-lasso-scheduler-1\""),
            ("w0", "\"strads-lasso-worker\""),
            ("w1", "\"strads-lasso-worker\""),
        ],
        app: "[app.lasso]\nschedulers = 2\nmode = \"dynamic\"\nmax_rounds = 100000000\ngap_tolerance = 0.0\neval_every = 50\nout_dir = \"OUT_DIR\"\n[app.lasso.synthetic]\nn_samples = 200\nn_features = 500\ngroup_size = 10\ncorrelation = 0.8\nn_nonzero = 5\nseed = 1\n",
        victim: "scheduler-1",
    };
    chaos(c, Fault::Pause);
}

/// The scheduled-mode knobs of the small Lasso jobs below (2,000 rounds of 8 coordinates,
/// run to the round limit).
const SMALL_SCHEDULED_LASSO: &str = "block_size = 8\ncandidate_pool = 32\nmax_rounds = 2000\neval_every = 400\ngap_tolerance = 0.0\nseed = 3\n";

/// Writes `<dir>/<name>.toml`: a Lasso job (a scheduler and `workers`) on a 150 x 300
/// synthetic design with `app_lines` in `[app.lasso]`, writing into `<dir>/<name>`.
fn small_lasso_job(
    dir: &Path,
    name: &str,
    cluster: &str,
    workers: &[&str],
    app_lines: &str,
) -> std::path::PathBuf {
    let mut text = format!(
        "[cluster]\nname = \"{cluster}\"\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 3000\n[[nodes]]\nname = \"scheduler\"\nroles = [\"strads-lasso-scheduler\"]\n"
    );
    for w in workers {
        text.push_str(&format!(
            "[[nodes]]\nname = \"{w}\"\nroles = [\"strads-lasso-worker\"]\n"
        ));
    }
    text.push_str(&format!(
        "[app.lasso]\n{app_lines}out_dir = \"{}\"\n[app.lasso.synthetic]\nn_samples = 150\nn_features = 300\nn_nonzero = 6\nseed = 7\n",
        dir.join(name).display()
    ));
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Checkpoint/resume under a crash: an uninterrupted STRADS Lasso run; then, for a worker
/// (`w1`) and for the scheduler (also the coordinator), the same job with checkpointing
/// whose victim is SIGKILLed once the first checkpoint manifest exists (the run must fail
/// fast naming the victim and its role), then a `resume = true` run that must end with a
/// byte-identical `coefficients.tsv` and report the round it resumed from.
#[test]
fn killed_lasso_node_then_resume_gives_the_uninterrupted_model() {
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, extra: &str| {
        let lines = format!("mode = \"dynamic\"\n{SMALL_SCHEDULED_LASSO}{extra}");
        small_lasso_job(dir.path(), name, "ckpt", &["w0", "w1", "w2"], &lines)
    };
    let launch = |cfg: &Path, name: &str| {
        drain(
            Command::new(PETREL)
                .args([
                    "run",
                    cfg.to_str().unwrap(),
                    "--timeout-s",
                    "60",
                    // The manual path: the kill stops the run, `resume` continues it.
                    "--max-restarts",
                    "0",
                    "--run-dir",
                ])
                .arg(dir.path().join(format!("run-{name}")))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };

    // 1. Uninterrupted, no checkpoints.
    let (child, log) = launch(&config("plain", ""), "plain");
    let status = wait_with_deadline(child, Duration::from_secs(60));
    assert!(status.success(), "{}", log.join().unwrap());
    let expected = std::fs::read(dir.path().join("plain/coefficients.tsv")).unwrap();

    // 2. For each victim: with checkpoints, SIGKILL the victim once the first manifest is
    //    on disk; 3. resume from the newest valid checkpoint and finish.
    for (victim, role) in [
        ("w1", "strads-lasso-worker"),
        ("scheduler", "strads-lasso-scheduler"),
    ] {
        let ckpt = dir.path().join(format!("ckpt-{victim}"));
        let ckpt_knobs = format!(
            "checkpoint_dir = \"{}\"\ncheckpoint_every = 150\n",
            ckpt.display()
        );
        let killed_name = format!("killed-{victim}");
        let (child, log) = launch(&config(&killed_name, &ckpt_knobs), &killed_name);
        wait_until(Duration::from_secs(30), "a checkpoint manifest", || {
            has_manifest(&ckpt)
        });
        let pid = child_process(child.id(), victim).expect("the launcher's child process");
        let killed = Instant::now();
        assert!(signal(pid, "KILL"));
        let status = wait_with_deadline(child, Duration::from_secs(20));
        let detected = killed.elapsed();
        let err = log.join().unwrap();
        let tail = err.lines().rev().take(30).collect::<Vec<_>>().join("\n");
        assert!(
            !status.success(),
            "the run survived killing {victim}:\n{tail}"
        );
        assert!(
            err.contains(&format!("node {victim} failed"))
                && err.contains(&format!("its roles: {role}")),
            "the error must name {victim} and its role {role}:\n{tail}"
        );
        // The launcher sees the exit at once, well within the 3 s failure timeout (slack for a
        // loaded machine).
        assert!(detected < Duration::from_secs(5), "took {detected:?}");
        assert!(
            !dir.path()
                .join(&killed_name)
                .join("coefficients.tsv")
                .exists()
        );

        let resumed_name = format!("resumed-{victim}");
        let (child, log) = launch(
            &config(&resumed_name, &format!("{ckpt_knobs}resume = true\n")),
            &resumed_name,
        );
        let status = wait_with_deadline(child, Duration::from_secs(60));
        let err = log.join().unwrap();
        assert!(status.success(), "{err}");
        assert!(err.contains("resuming from checkpoint"), "{err}");
        let out = dir.path().join(&resumed_name);
        assert!(
            std::fs::read(out.join("coefficients.tsv")).unwrap() == expected,
            "{victim}: resumed coefficients differ from the uninterrupted run"
        );
        let metrics: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
        let from = metrics["resumed_from_round"].as_u64().unwrap();
        assert!(from > 0, "{metrics}");
    }
}

/// Asserts that a job finished after one restart that resumed from a checkpoint, and
/// returns the checkpoint's `unit` number (stdout: `… resumes from the newest checkpoint
/// (<unit> N)`) with the stdout.
fn resumed_after_one_restart(out: &std::process::Output, unit: &str) -> (u64, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("after 1 restart"), "{stdout}");
    let at = stdout
        .split_once(&format!("resumes from the newest checkpoint ({unit} "))
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("the restart did not resume: {stdout}"));
    (at, stdout)
}

/// A bad `[app.*]` value or a misspelt section fails `petrel run` before any node starts,
/// with one error line that names the section and the valid values.
#[test]
fn petrel_run_rejects_bad_app_settings_before_starting_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[app.lasso]\nmode = \"bogus\"\n",
            &["[app.lasso]", "dynamic", "random", "cyclic"][..],
        ),
        (
            "[app.demoo]\nrounds = 3\n",
            &["unknown settings section [app.demoo]", "demo"][..],
        ),
    ];
    for (extra, expected) in cases {
        let body = format!(
            "{}{extra}",
            demo().replace("[app.demo]\nrounds = 3\ntensor_len = 1024\n", "")
        );
        let cfg = write_config(dir.path(), &body);
        let start = Instant::now();
        let out = Command::new(PETREL)
            .args(["run"])
            .arg(&cfg)
            .arg("--run-dir")
            .arg(dir.path().join("run"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        for e in expected {
            assert!(stderr.contains(e), "missing {e:?} in: {stderr}");
        }
        assert!(
            !dir.path().join("run").join("cluster.toml").exists()
                && start.elapsed() < Duration::from_secs(5),
            "nodes were started: {stderr}"
        );
        assert_eq!(
            stderr.matches("error").count(),
            1,
            "one error line: {stderr}"
        );
    }
}

/// `petrel certs` checks every name before it writes anything: a name with a path
/// separator or an empty name is refused and nothing lands outside (or inside) `--dir`.
#[test]
fn petrel_certs_refuses_bad_node_names() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    for bad in ["a,../escaped", "a,", "a,.hidden", "a,b/c"] {
        let out = Command::new(PETREL)
            .args(["certs", "--dir"])
            .arg(&certs)
            .args(["--nodes", bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {err}");
        assert!(err.contains("invalid node name"), "{bad}: {err}");
        assert!(!certs.exists(), "{bad}: wrote {certs:?}");
        assert!(!dir.path().join("escaped.key").exists());
    }
}

/// A cluster config with fixed ports and `certs_dir = "certs"` (relative to the file).
fn fixed_config(dir: &Path) -> std::path::PathBuf {
    let mut text = "[cluster]\nname = \"fixed\"\ncerts_dir = \"certs\"\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 1000\njoin_timeout_ms = 3000\n".to_string();
    for (name, role) in [("hub", "demo-aggregator"), ("w1", "demo-worker")] {
        text.push_str(&format!(
            "[[nodes]]\nname = \"{name}\"\naddr = \"127.0.0.1:{}\"\nroles = [\"{role}\"]\n",
            free_port()
        ));
    }
    text.push_str("[app.demo]\nrounds = 3\ntensor_len = 16\n");
    write_config(dir, &text)
}

/// `petrel node` refuses, before it binds or joins anything: a name that is not in the
/// settings, a missing certificate, another node's certificate, and a certificate from
/// another cluster's CA.
#[test]
fn petrel_node_refuses_bad_identity_before_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = fixed_config(dir.path());
    let node = |name: &str| {
        let out = Command::new(PETREL)
            .args(["node", "--config", cfg.to_str().unwrap(), "--name", name])
            .env_remove("RANK")
            .env_remove("SLURM_PROCID")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = node("nobody");
    assert!(
        err.contains("node nobody is not in the topology (nodes: hub, w1)"),
        "{err}"
    );
    let err = node("hub");
    assert!(
        err.contains("hub.pem") || err.contains("ca.pem"),
        "missing certificate: {err}"
    );
    // Certificates from `petrel certs`; then w1's files replaced by hub's.
    let certs = dir.path().join("certs");
    common::certs(&certs, &cfg, false);
    std::fs::copy(certs.join("hub.pem"), certs.join("w1.pem")).unwrap();
    std::fs::copy(certs.join("hub.key"), certs.join("w1.key")).unwrap();
    let err = node("w1");
    assert!(err.contains("not a certificate of node w1"), "{err}");
    // hub's certificate from another cluster.
    let other = dir.path().join("other");
    let st = Command::new(PETREL)
        .args(["certs", "--dir", other.to_str().unwrap(), "--nodes", "hub"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::copy(other.join("hub.pem"), certs.join("hub.pem")).unwrap();
    std::fs::copy(other.join("hub.key"), certs.join("hub.key")).unwrap();
    let err = node("hub");
    assert!(
        err.contains("not a certificate of node hub from the CA"),
        "{err}"
    );
    assert_eq!(err.matches("error").count(), 1, "one error line: {err}");
}

/// `petrel certs --bundle` writes one self-contained directory per node; each node runs from
/// its bundle alone, finding its name from RANK, with paths relative to the bundle's
/// settings file.
#[test]
fn bundles_run_a_cluster_with_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = fixed_config(dir.path());
    let certs = dir.path().join("ca");
    common::certs(&certs, &cfg, true);
    for (node, other) in [("hub", "w1"), ("w1", "hub")] {
        let b = certs.join("bundles").join(node);
        for f in [
            "ca.pem",
            &format!("{node}.pem"),
            &format!("{node}.key"),
            "cluster.toml",
        ] {
            assert!(b.join(f).exists(), "{node}: no {f}");
        }
        assert!(!b.join("ca.key").exists() && !b.join(format!("{other}.key")).exists());
    }
    // Copy the bundles elsewhere, as onto other hosts, and start each with its rank.
    let hosts = dir.path().join("hosts");
    let children: Vec<_> = ["hub", "w1"]
        .iter()
        .enumerate()
        .map(|(rank, node)| {
            let host = hosts.join(node);
            std::fs::create_dir_all(&host).unwrap();
            for e in std::fs::read_dir(certs.join("bundles").join(node)).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), host.join(e.file_name())).unwrap();
            }
            Command::new(PETREL)
                .args(["node", "--config"])
                .arg(host.join("cluster.toml"))
                .current_dir(dir.path())
                .env("RANK", rank.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
    }
}

/// One line of input must not decide how much a node allocates. A LIBSVM feature index of
/// 4e9 (which would abort lasso: "memory allocation of 32000000008 bytes failed", exit 134)
/// and a bag-of-words W of 10^9 (which would size the word tables) both fail at once with
/// an error naming the file, the line, the limit and the knob that raises it.
#[test]
fn huge_ids_in_input_files_fail_naming_file_line_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let svm = dir.path().join("huge.libsvm");
    std::fs::write(&svm, "1 1:1\n0.5 4000000000:0.1\n").unwrap();
    let docword = dir.path().join("docword.huge.txt");
    std::fs::write(&docword, "2\n1000000000\n1\n1 1 1\n").unwrap();
    let cases: [(&str, &str, &Path, String); 2] = [
        ("lasso", "--data", &svm, format!("{}:2", svm.display())),
        (
            "lda",
            "--docword",
            &docword,
            format!("{}:2", docword.display()),
        ),
    ];
    for (app, flag, file, location) in cases {
        let out = Command::new(PETREL)
            .args([
                "train",
                app,
                "--workers",
                "1",
                "--transport",
                "memory",
                flag,
            ])
            .arg(file)
            .arg("--out")
            .arg(dir.path().join(app))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{app}: {stderr}");
        for expected in [
            location.as_str(),
            "exceeds the limit 67108864",
            "PETREL_DATA__MAX_DIMENSION",
        ] {
            assert!(
                stderr.contains(expected),
                "{app}: missing {expected:?} in {stderr}"
            );
        }
    }
}

/// A clean run prints no WARN or ERROR (at shutdown peers leave and sends to them
/// fail, an ask can reach a node before its actor registered: neither is news), as
/// separate processes and in one process. The demo and the PS matrix factorisation example
/// configurations (the others take a minute each on a loaded machine; the custom examples
/// are checked in tests/examples_run.rs).
#[test]
fn clean_runs_print_no_warning_or_error() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let configs = [
        examples.join("cluster.toml"),
        examples.join("ps_mf_cluster.toml"),
    ];
    for cfg in &configs {
        for mode in [None, Some("--in-process")] {
            let dir = tempfile::tempdir().unwrap();
            let out = Command::new(PETREL)
                .arg("run")
                .arg(cfg)
                .args(mode)
                .args(["--timeout-s", "300"])
                // Relative output directories of the examples land in the temporary one.
                .current_dir(dir.path())
                .env("TMPDIR", dir.path())
                .env("RUST_LOG", "warn")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{cfg:?} {mode:?}:\n{err}");
            assert!(
                err.trim().is_empty(),
                "{cfg:?} {mode:?} logged warnings or errors:\n{err}"
            );
        }
    }
}

/// Recovery needs no person. `petrel train lasso` checkpoints by default
/// (in `<out>/checkpoints`); when a node is SIGKILLed mid-run the cluster is restarted
/// from the newest complete checkpoint (`--max-restarts`, default 2) and the job finishes
/// with exactly the model of an uninterrupted run. A job without restarts left fails,
/// naming the node.
#[test]
fn train_lasso_restarts_after_a_killed_node_and_writes_the_uninterrupted_model() {
    let dir = tempfile::tempdir().unwrap();
    let train = |out: &Path, extra: &[&str]| {
        let mut cmd = Command::new(PETREL);
        cmd.args([
            "train",
            "lasso",
            "--transport",
            "processes",
            "--workers",
            "2",
        ])
        .args([
            "--block-size",
            "8",
            "--candidate-pool",
            "32",
            "--max-rounds",
            "2500",
        ])
        .args(["--eval-every", "500", "--gap-tolerance", "0", "--seed", "3"])
        .args(["--synthetic-samples", "150", "--synthetic-features", "300"])
        .args(["--checkpoint-every", "150", "--out"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    };
    let plain = dir.path().join("plain");
    let out = train(&plain, &["--max-restarts", "0"]).output().unwrap();
    succeeded(&out);
    let expected = std::fs::read(plain.join("coefficients.tsv")).unwrap();
    assert!(
        plain.join("checkpoints").is_dir(),
        "checkpoints are on by default"
    );

    for (victim, restarts, succeeds) in [("w1", "2", true), ("scheduler", "0", false)] {
        let out_dir = dir.path().join(format!("killed-{victim}"));
        let child = train(&out_dir, &["--max-restarts", restarts])
            .spawn()
            .unwrap();
        let ckpt = out_dir.join("checkpoints");
        let out = kill_node_after_a_checkpoint(child, victim, Duration::from_secs(60), || {
            has_manifest(&ckpt)
        });
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if succeeds {
            assert!(out.status.success(), "{victim}: {stderr}");
            assert!(stdout.contains("after 1 restart"), "{stdout}");
            assert!(
                std::fs::read(out_dir.join("coefficients.tsv")).unwrap() == expected,
                "{victim}: the restarted job's model differs from the uninterrupted one"
            );
        } else {
            assert!(!out.status.success(), "{victim}: survived without restarts");
            assert!(
                stderr.contains(&format!("node {victim} failed"))
                    && stderr.contains("gave up after 0 restart(s)"),
                "{stderr}"
            );
        }
    }
}

/// `--solver gauss-seidel` keeps the kit's round checkpoints: a killed worker costs one
/// restart from the newest one, and the job still writes the uninterrupted model.
#[test]
fn gauss_seidel_lasso_restarts_after_a_killed_worker_with_the_uninterrupted_model() {
    let dir = tempfile::tempdir().unwrap();
    let train = |out: &Path, restarts: &str| {
        let mut cmd = Command::new(PETREL);
        cmd.args(["train", "lasso", "--solver", "gauss-seidel"])
            .args(["--transport", "processes", "--workers", "2"])
            .args(["--synthetic-samples", "400", "--synthetic-features", "4000"])
            .args([
                "--synthetic-nnz-per-column",
                "10",
                "--synthetic-nonzero",
                "40",
            ])
            .args(["--gap-tolerance", "1e-8", "--checkpoint-every", "20"])
            .args(["--max-restarts", restarts, "--out"])
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let plain = dir.path().join("plain");
    let out = train(&plain, "0").output().unwrap();
    succeeded(&out);
    let expected = std::fs::read(plain.join("coefficients.tsv")).unwrap();
    let killed = dir.path().join("killed");
    let ckpt = killed.join("checkpoints");
    let child = train(&killed, "2").spawn().unwrap();
    let out =
        kill_node_after_a_checkpoint(child, "w1", Duration::from_secs(60), || has_manifest(&ckpt));
    let (round, _) = resumed_after_one_restart(&out, "round");
    assert!(round > 0);
    assert!(
        std::fs::read(killed.join("coefficients.tsv")).unwrap() == expected,
        "the restarted job's model differs from the uninterrupted one"
    );
}

/// `petrel bench chaos` ends with one JSON line whose figures say every faulted run
/// finished with the uninterrupted model, left no process behind and did not hang. Seed 10
/// kills the Lasso scheduler (the coordinator), then a P3 shard (each costs a restart),
/// then attacks the Lasso scheduler with stalled 60 MiB frames from worker w0's stolen
/// certificate, which must cost nothing: every connection is refused (before certificates
/// were bound to addresses this attack held up w0's results and failed the job with "no
/// reply from node1/strads-lasso-worker within 60s"):
/// `bench::chaos::tests::seed_10_kills_the_coordinator_then_a_p3_shard_then_sends_a_hostile_member`.
#[test]
fn bench_chaos_recovers_every_faulted_run() {
    let out = Command::new(PETREL)
        .args([
            "bench",
            "chaos",
            "--apps",
            "lasso,p3",
            "--runs",
            "3",
            "--seed",
            "10",
            // Half the default Lasso: the faults still strike well before its end.
            "--max-rounds",
            "1500",
        ])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    for (key, want) in [
        ("runs", 3),
        ("faults_injected", 3),
        ("jobs_completed", 3),
        ("outputs_identical", 3),
        ("hostile_held", 0),
        ("orphans", 0),
        ("hangs", 0),
    ] {
        assert_eq!(json[key].as_u64(), Some(want), "{key}: {json}");
    }
    assert!(json["max_recovery_s"].as_f64().is_some(), "{json}");
    // Each kill lands after the first checkpoint and costs a restart; the hostile member
    // must cost none.
    let restarts: Vec<u64> = (0..3)
        .map(|i| json["per_run"][i]["restarts"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert!(restarts[0] >= 1 && restarts[1] >= 1, "{json}");
    assert_eq!(json["per_run"][2]["fault"], "hostile", "{json}");
    assert_eq!(json["per_run"][2]["victim"], "scheduler", "{json}");
    assert_eq!(restarts[2], 0, "{json}");
    // The stolen key was refused (it was never held open: `hostile_held` above).
    assert!(json["hostile_refused"].as_u64() >= Some(1), "{json}");
}

/// `petrel bench ps --shared-memory DIR` runs the push+pull loop twice per
/// size, over QUIC and with large rows through files in DIR between the co-located node
/// processes. Every pull is checked inside the bench (the pulled row must hold exactly
/// every push so far), so a lost or mangled row fails the run; the figures say the rows
/// went through shared memory, and no file is left behind.
#[test]
fn bench_ps_moves_large_rows_through_shared_memory_between_processes() {
    let shm = tempfile::tempdir().unwrap();
    let out = Command::new(PETREL)
        .args([
            "bench",
            "ps",
            "--topologies",
            "1x1",
            "--sizes",
            "1048576",
            "--bytes-per-phase",
            "1",
            "--min-iters",
            "4",
            "--warmup",
            "1",
            "--shared-memory",
        ])
        .arg(shm.path())
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let size = &json["sizes"][0];
    assert!(size["ps_mbps"].as_f64().is_some_and(|v| v > 0.0), "{json}");
    assert!(size["shm_mbps"].as_f64().is_some_and(|v| v > 0.0), "{json}");
    // The echo phase and the PS phase both send 1 MiB frames each way: at least one
    // per timed and untimed iteration went through a file.
    assert!(
        size["shm_messages"].as_u64().is_some_and(|n| n >= 10),
        "{json}"
    );
    assert_eq!(std::fs::read_dir(shm.path()).unwrap().count(), 0);
    // A directory that does not exist is refused before any node starts.
    let bad = Command::new(PETREL)
        .args(["bench", "ps", "--shared-memory", "/nonexistent/petrel-shm"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("/nonexistent/petrel-shm"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// Logistic regression, strads-mf and LDA checkpoint by default (the
/// STRADS kit's round checkpoints, in `<out>/checkpoints`) and restart automatically from
/// the newest one. Worker w1 is SIGKILLed once the first checkpoint is complete (a progress
/// condition, not a clock); the cluster is started again from that checkpoint and the job
/// finishes with a model byte-identical to an uninterrupted run's.
#[test]
fn logistic_resumes_from_a_checkpoint_after_a_killed_worker() {
    resumes_after_a_killed_worker(
        "logistic",
        &[
            "--block-size",
            "8",
            "--candidate-pool",
            "32",
            "--max-rounds",
            "1500",
            "--checkpoint-every",
            "200",
            "--seed",
            "3",
            "--synthetic-samples",
            "150",
            "--synthetic-features",
            "300",
        ],
        &["coefficients.tsv"],
    );
}

#[test]
fn strads_mf_resumes_from_a_checkpoint_after_a_killed_worker() {
    resumes_after_a_killed_worker(
        "strads-mf",
        &["--iterations", "15", "--seed", "1"],
        &["user_factors.tsv", "item_factors.tsv"],
    );
}

#[test]
fn lda_resumes_from_a_checkpoint_after_a_killed_worker() {
    resumes_after_a_killed_worker(
        "lda",
        &["--iterations", "24", "--topics", "5", "--seed", "1"],
        &["topic_word.tsv", "topics.txt"],
    );
}

fn resumes_after_a_killed_worker(app: &str, args: &[&str], files: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let train = |out: &Path, restarts: &str| {
        let mut cmd = Command::new(PETREL);
        cmd.args(["train", app, "--transport", "processes", "--workers", "2"])
            .args(args)
            .args(["--max-restarts", restarts, "--out"])
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let plain = dir.path().join(format!("{app}-plain"));
    let out = train(&plain, "0").output().unwrap();
    assert!(
        out.status.success(),
        "{app}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        petrel::recovery::newest_checkpoint_round(&plain.join("checkpoints")).is_some(),
        "{app}: checkpoints are on by default"
    );

    let killed = dir.path().join(format!("{app}-killed"));
    let ckpt = killed.join("checkpoints");
    let out = kill_node_after_a_checkpoint(
        train(&killed, "2").spawn().unwrap(),
        "w1",
        Duration::from_secs(120),
        || petrel::recovery::newest_checkpoint_round(&ckpt).is_some(),
    );
    let (resumed_round, stdout) = resumed_after_one_restart(&out, "round");
    assert!(resumed_round > 0, "{app}: {stdout}");
    for file in files {
        assert!(
            std::fs::read(killed.join(file)).unwrap() == std::fs::read(plain.join(file)).unwrap(),
            "{app}: {file} of the job resumed at round {resumed_round} differs from the uninterrupted one"
        );
    }
}

/// P3 recovery: `petrel train p3` (an MLP, 2 worker + 2 shard processes) checkpoints
/// every 4 iterations; worker w1 is SIGKILLed once the first checkpoint's manifest exists
/// (a progress condition, not a clock); the cluster restarts from the newest checkpoint
/// and the job ends with exactly the parameters, training-loss table and test figures of
/// an uninterrupted run. The saved models' tensors are compared, bit for bit.
#[test]
fn train_p3_restarts_after_a_killed_worker_and_saves_the_uninterrupted_model() {
    let dir = tempfile::tempdir().unwrap();
    let train = |name: &str, restarts: &str| {
        let mut cmd = Command::new(PETREL);
        cmd.args([
            "train", "p3", "--net", "mlp", "--mode", "p3", "--epochs", "3",
        ])
        .args([
            "--width", "2", "--batch", "8", "--lr", "0.05", "--seed", "2",
        ])
        .args([
            "--train-data",
            "synthetic:256",
            "--test-data",
            "synthetic:64",
        ])
        // Shaped links keep the run going long enough to be killed mid-way; they
        // change no value.
        .args(["--bandwidth-mbit", "40", "--checkpoint-every", "4"])
        .args(["--max-restarts", restarts, "--out"])
        .arg(dir.path().join(name).join("model.safetensors"))
        .arg("--run-dir")
        .arg(dir.path().join(name).join("run"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    };
    // Every tensor's name, shape and bytes, by name.
    let params = |name: &str| -> Vec<(String, Vec<usize>, Vec<u8>)> {
        let bytes = std::fs::read(dir.path().join(name).join("model.safetensors")).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut tensors: Vec<_> = file
            .iter()
            .map(|(n, t)| (n.to_string(), t.shape().to_vec(), t.data().to_vec()))
            .collect();
        tensors.sort();
        tensors
    };
    // The per-epoch table's rows and the test line (not the lines with wall times).
    let figures = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| {
                (l.starts_with(|c: char| c.is_ascii_digit()) && !l.contains(" iterations in "))
                    || l.starts_with("test loss")
            })
            .map(str::to_string)
            .collect()
    };
    let plain = train("plain", "0").output().unwrap();
    let plain_out = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(
        plain.status.success(),
        "{plain_out}{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let ckpt = dir
        .path()
        .join("plain")
        .join("model.safetensors.checkpoints");
    assert!(
        petrel::recovery::newest_checkpoint_round(&ckpt).is_some(),
        "a fresh run checkpoints"
    );

    let ckpt = dir
        .path()
        .join("killed")
        .join("model.safetensors.checkpoints");
    let out = kill_node_after_a_checkpoint(
        train("killed", "2").spawn().unwrap(),
        "w1",
        Duration::from_secs(120),
        || petrel::recovery::newest_checkpoint_round(&ckpt).is_some(),
    );
    let (resumed_round, stdout) = resumed_after_one_restart(&out, "round");
    assert!(
        resumed_round >= 4 && resumed_round.is_multiple_of(4),
        "{stdout}"
    );
    assert!(!params("plain").is_empty());
    assert!(params("killed") == params("plain"), "the parameters differ");
    assert_eq!(figures(&stdout), figures(&plain_out));
    assert!(!figures(&plain_out).is_empty(), "{plain_out}");
}

/// `petrel run --max-restarts` launches the cluster again when a node
/// dies, from the newest checkpoint when the job file names a `checkpoint_dir`. A strads-mf
/// cluster file; w1 is SIGKILLed once the first checkpoint is complete; the run restarts
/// from it and finishes with factors byte-identical to an uninterrupted run's. Without
/// restarts left the same kill fails the run, naming the node.
/// Writes to `path` a cluster file named `name` of `nodes` (name, quoted roles) on
/// ephemeral ports, running the job that `petrel train <args> --print-job` prints.
fn print_job_cluster(path: &Path, name: &str, nodes: &[(&str, &str)], args: &[&str]) {
    let job = common::petrel_cmd(args)
        .arg("--print-job")
        .output()
        .unwrap();
    let mut text = format!("[cluster]\nname = \"{name}\"\n");
    for (node, roles) in nodes {
        text.push_str(&format!(
            "[[nodes]]\nname = \"{node}\"\naddr = \"127.0.0.1:0\"\nroles = [{roles}]\n"
        ));
    }
    text.push_str(&succeeded(&job));
    std::fs::write(path, text).unwrap();
}

#[test]
fn petrel_run_restarts_a_cluster_whose_worker_was_killed() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = |out: &Path| {
        let path = out.with_extension("toml");
        let ckpt = out.join("ckpt");
        let nodes = [
            ("scheduler", "\"strads-mf-scheduler\""),
            ("w0", "\"strads-mf-worker\""),
            ("w1", "\"strads-mf-worker\""),
        ];
        let args = ["train", "strads-mf", "--iterations", "15", "--seed", "1"];
        let dirs = [
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        print_job_cluster(&path, "mf-restart", &nodes, &[&args[..], &dirs].concat());
        path
    };
    let run = |cfg: &Path, restarts: &str| {
        run_cmd(cfg, &["--timeout-s", "240", "--max-restarts", restarts])
    };
    let plain = dir.path().join("plain");
    succeeded(&run(&cluster(&plain), "0").output().unwrap());

    for (restarts, succeeds) in [("2", true), ("0", false)] {
        let killed = dir.path().join(format!("killed-{restarts}"));
        let child = run(&cluster(&killed), restarts).spawn().unwrap();
        let out = kill_node_after_a_checkpoint(child, "w1", Duration::from_secs(120), || {
            petrel::recovery::newest_checkpoint_round(&killed.join("ckpt")).is_some()
        });
        if succeeds {
            restarted_once(&out);
            for file in ["user_factors.tsv", "item_factors.tsv"] {
                assert!(
                    std::fs::read(killed.join(file)).unwrap()
                        == std::fs::read(plain.join(file)).unwrap(),
                    "{file} of the restarted run differs from the uninterrupted one"
                );
            }
        } else {
            let stderr = failed(&out);
            assert!(
                stderr.contains("node w1 failed") && stderr.contains("gave up after 0 restart(s)"),
                "{stderr}"
            );
        }
    }
}

/// Recovery for the parameter server: `petrel train ps-mf|ps-lr|ps-lda --transport
/// processes` checkpoints by default (tables as of a clock boundary, worker clocks and
/// state, the monitor's history; manifest last) and restarts the cluster when a node dies.
/// Worker `worker-1` of a BSP job is SIGKILLed once the first manifest exists (a progress
/// condition, not a clock): the job resumes from a checkpoint at a clock C > 0 (a multiple
/// of `every`) and `same_model(plain, killed)` compares its outputs with an uninterrupted
/// run's; every worker ran as many clocks as in the uninterrupted run. `--resume` without a
/// checkpoint is refused at once.
fn ps_job_restarts_after_a_killed_worker(
    app: &str,
    args: &[&str],
    every: u64,
    same_model: impl Fn(&Path, &Path),
) {
    let dir = tempfile::tempdir().unwrap();
    let train = |name: &str, restarts: &str| {
        let mut cmd = Command::new(PETREL);
        cmd.args([
            "train",
            app,
            "--transport",
            "processes",
            "--consistency",
            "bsp",
        ])
        .args(args)
        .args(["--checkpoint-every", &every.to_string()])
        .args(["--max-restarts", restarts, "--out"])
        .arg(dir.path().join(name))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    };
    let plain = train("plain", "0").output().unwrap();
    assert!(
        plain.status.success(),
        "{}{}",
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&plain.stderr)
    );
    let ckpt = dir.path().join("plain").join("checkpoints");
    assert!(
        !petrel::ps::checkpoint::job_manifest_clocks(&ckpt)
            .unwrap()
            .is_empty(),
        "a fresh run checkpoints"
    );

    let ckpt = dir.path().join("killed").join("checkpoints");
    let manifest = |ckpt: &Path| {
        petrel::ps::checkpoint::job_manifest_clocks(ckpt).is_ok_and(|c| !c.is_empty())
    };
    let out = kill_node_after_a_checkpoint(
        train("killed", "2").spawn().unwrap(),
        "worker-1",
        Duration::from_secs(120),
        || manifest(&ckpt),
    );
    let (clock, stdout) = resumed_after_one_restart(&out, "clock");
    assert!(clock >= every && clock.is_multiple_of(every), "{stdout}");
    same_model(&dir.path().join("plain"), &dir.path().join("killed"));
    if app == "ps-mf" {
        // Without restarts left the same kill stops the job at once, naming the node.
        let ckpt = dir.path().join("budget").join("checkpoints");
        let out = kill_node_after_a_checkpoint(
            train("budget", "0").spawn().unwrap(),
            "worker-1",
            Duration::from_secs(120),
            || manifest(&ckpt),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("node worker-1 failed")
                && stderr.contains("gave up after 0 restart(s)"),
            "{stderr}"
        );
    }
    let clocks = |name: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(dir.path().join(name).join("metrics.json")).unwrap();
        let m: serde_json::Value = serde_json::from_str(&text).unwrap();
        m["worker_clocks"].clone()
    };
    assert_eq!(clocks("killed"), clocks("plain"));
    assert_eq!(clocks("plain").as_array().map(Vec::len), Some(2));

    // Resuming without a checkpoint is refused at once, naming the directory.
    let none = Command::new(PETREL)
        .args(["train", app, "--resume", "--out"])
        .arg(dir.path().join("fresh"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(!none.status.success());
    assert!(
        stderr.contains("no checkpoint to resume from") && stderr.contains("checkpoints"),
        "{stderr}"
    );
}

/// `figure` of `final` in `dir/metrics.json`.
fn final_figure(dir: &Path, figure: &str) -> f64 {
    let text = std::fs::read_to_string(dir.join("metrics.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    m["final"][figure]
        .as_f64()
        .unwrap_or_else(|| panic!("no final {figure} in {text}"))
}

/// The resumed run's final `figure` is within `tolerance` (relative) of the uninterrupted
/// run's. Not byte equality: PS runs are not deterministic, interrupted or not. Under BSP a
/// read at clock c sees every update of clocks < c, and may also see another worker's
/// updates of clock c when they reach the shard first (Bösen's guarantee is a lower
/// bound): on a loaded machine a worker that is descheduled between its clock and its
/// next read does. Shards also sum float deltas in arrival order. Unloaded, two runs agree
/// to 3e-7 (ps-mf factors) and ps-lda's topics byte for byte; under the load of this suite
/// factors differed by up to 6e-3. The tolerance is on the figure each app reports.
/// That no clock was lost or run twice is checked exactly (`worker_clocks`; ps-lda's final
/// table check: every row sums to its word's frequency) and the cut is unit-tested
/// (`core/shard.rs`).
fn final_within(figure: &'static str, tolerance: f64) -> impl Fn(&Path, &Path) {
    move |plain, killed| {
        let (a, b) = (final_figure(plain, figure), final_figure(killed, figure));
        eprintln!("final {figure}: uninterrupted {a}, restarted {b}");
        assert!(
            (a - b).abs() <= tolerance * a.abs(),
            "final {figure}: {b} after the restart, {a} uninterrupted"
        );
    }
}

#[test]
fn train_ps_mf_restarts_after_a_killed_worker_and_ends_with_the_uninterrupted_model() {
    // Emulated compute keeps the run going long enough to be killed mid-way; it changes
    // no value.
    ps_job_restarts_after_a_killed_worker(
        "ps-mf",
        &["--max-clocks", "80", "--clock-ms", "40"],
        10,
        final_within("test_rmse", 0.02),
    );
}

#[test]
fn train_ps_lr_restarts_after_a_killed_worker_and_ends_with_the_uninterrupted_model() {
    ps_job_restarts_after_a_killed_worker(
        "ps-lr",
        &["--clocks", "80", "--clock-ms", "40"],
        10,
        final_within("test_log_loss", 0.05),
    );
}

#[test]
fn train_ps_lda_restarts_after_a_killed_worker_and_ends_with_the_uninterrupted_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        "[app.ps_lda.synthetic]\nn_docs = 600\nvocab_size = 1000\n",
    )
    .unwrap();
    let job = job.to_string_lossy().into_owned();
    ps_job_restarts_after_a_killed_worker(
        "ps-lda",
        &["--config", &job, "--iterations", "24", "--topics", "10"],
        3,
        final_within("loglik_per_token", 0.01),
    );
}

/// `petrel run` of a PS cluster whose `[app.mf]` names a `checkpoint_dir`: worker-1 is
/// SIGKILLed once the first checkpoint is complete; the cluster restarts from it (every
/// role resumes at its clock) and the job finishes with every worker at its last clock.
#[test]
fn petrel_run_resumes_a_ps_cluster_whose_worker_was_killed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let ckpt = dir.path().join("ckpt");
    let cfg = dir.path().join("cluster.toml");
    let nodes = [
        ("shard-0", "\"ps-shard\", \"ps-monitor\""),
        ("worker-0", "\"ps-worker\""),
        ("worker-1", "\"ps-worker\""),
    ];
    let job = [
        "train",
        "ps-mf",
        "--consistency",
        "bsp",
        "--max-clocks",
        "60",
    ];
    let every = ["--clock-ms", "40", "--checkpoint-every", "10"];
    let dirs = [
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    print_job_cluster(
        &cfg,
        "ps-restart",
        &nodes,
        &[&job[..], &every, &dirs].concat(),
    );
    let child = run_cmd(&cfg, &["--timeout-s", "240", "--max-restarts", "2"])
        .spawn()
        .unwrap();
    let done = kill_node_after_a_checkpoint(child, "worker-1", Duration::from_secs(120), || {
        petrel::ps::checkpoint::job_manifest_clocks(&ckpt).is_ok_and(|c| !c.is_empty())
    });
    let (_, stderr) = restarted_once(&done);
    assert!(stderr.contains("resuming from a checkpoint"), "{stderr}");
    let m = common::metrics(&out);
    assert_eq!(m["worker_clocks"], serde_json::json!([60, 60]));
}

/// `petrel run` checkpoints by default. A Lasso job file that names no
/// `checkpoint_dir` writes its checkpoints to `<run_dir>/checkpoints/lasso`; w1 is
/// SIGKILLed once the first one is complete, and the cluster restarts from it (not from
/// the start: the resumed run reports the round it resumed from) and writes the
/// coefficients of an uninterrupted run, byte for byte. `--no-checkpoints` turns the
/// default off.
#[test]
fn petrel_run_checkpoints_by_default_and_a_killed_node_rolls_back_to_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str| {
        let lines = format!("{SMALL_SCHEDULED_LASSO}checkpoint_every = 150\n");
        small_lasso_job(dir.path(), name, "ckpt-default", &["w0", "w1"], &lines)
    };
    let run = |name: &str, extra: &[&str]| {
        let mut cmd = run_cmd(&config(name), &["--timeout-s", "120", "--run-dir"]);
        cmd.arg(dir.path().join(format!("run-{name}"))).args(extra);
        cmd
    };

    // Uninterrupted, with the default turned off.
    succeeded(&run("plain", &["--no-checkpoints"]).output().unwrap());
    assert!(
        !dir.path().join("run-plain/checkpoints/lasso").exists(),
        "--no-checkpoints wrote checkpoints"
    );
    let expected = std::fs::read(dir.path().join("plain/coefficients.tsv")).unwrap();

    // Default checkpoints; w1 killed after the first one.
    let ckpt = dir.path().join("run-killed/checkpoints/lasso");
    let child = run("killed", &[]).spawn().unwrap();
    let done = kill_node_after_a_checkpoint(child, "w1", Duration::from_secs(60), || {
        petrel::recovery::newest_checkpoint_round(&ckpt).is_some()
    });
    restarted_once(&done);
    let out = dir.path().join("killed");
    assert!(
        std::fs::read(out.join("coefficients.tsv")).unwrap() == expected,
        "the restarted run's coefficients differ from the uninterrupted run's"
    );
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    assert!(
        metrics["resumed_from_round"].as_u64() > Some(0),
        "rolled back to the start, not to a checkpoint: {metrics}"
    );
}

/// `bench mf-scale` and `bench lda-scale` over node processes report the largest worker's
/// and the scheduler's peak memory (the launcher reads each node's `VmHWM` while it runs)
/// beside what one worker holds, and the run directory keeps every node's peak.
#[test]
fn scale_benches_over_processes_report_every_nodes_peak_memory() {
    let dir = tempfile::tempdir().unwrap();
    let benches: [(&str, &[&str], &str); 2] = [
        (
            "mf-scale",
            &[
                "--ratings",
                "8000",
                "--rank",
                "3",
                "--observed-fraction",
                "0.2",
                "--iterations",
                "16",
                "--target-rmse",
                "0.3",
            ],
            "r8000-p2",
        ),
        (
            "lda-scale",
            &[
                "--tokens",
                "3000",
                "--topics",
                "5",
                "--vocab",
                "200",
                "--doc-length",
                "50",
                "--iterations",
                "2",
            ],
            "t3000-p2",
        ),
    ];
    for (bench, flags, run_name) in benches {
        let out = dir.path().join(bench);
        let run = Command::new(PETREL)
            .args(["bench", bench, "--workers", "2", "--transport", "processes"])
            .args(flags)
            .arg("--out")
            .arg(&out)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{bench}: {stdout}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let json: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        let figures = match bench {
            "mf-scale" => json["sizes"][0].clone(),
            _ => json["sizes"][0]["per_workers"]["2"].clone(),
        };
        let worker = figures["worker_rss_mb"].as_f64().unwrap_or(0.0);
        let scheduler = figures["scheduler_rss_mb"].as_f64().unwrap_or(0.0);
        let holds = figures["worker_holds_mb"].as_f64().unwrap_or(0.0);
        let ratio = figures["worker_rss_over_holds"].as_f64().unwrap_or(0.0);
        // A petrel node process is several MB before it holds any data.
        assert!(worker > 1.0 && scheduler > 1.0, "{bench}: {figures}");
        assert!(
            holds > 0.0 && (ratio - worker / holds).abs() < 1e-9,
            "{figures}"
        );
        let nodes: std::collections::BTreeMap<String, serde_json::Value> = serde_json::from_slice(
            &std::fs::read(out.join(run_name).join("run").join("node_memory.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            nodes.keys().map(String::as_str).collect::<Vec<_>>(),
            ["scheduler", "w0", "w1"],
            "{bench}"
        );
        let f = |v: &serde_json::Value, key: &str| v[key].as_f64().unwrap_or(f64::NAN);
        let rss: Vec<f64> = nodes.values().map(|p| f(p, "rss_mb")).collect();
        // Every node recorded its own peak when it ended: a started node process holds
        // more than a few MB (a reading before it grew, the launcher's only one for a
        // node that ends within 50 ms, was 8.7 MB in a release build).
        assert!(rss.iter().all(|&mb| mb > 10.0), "{nodes:?}");
        // And what it adds to the binary's code pages: less than its peak, more than
        // nothing.
        for peak in nodes.values() {
            let private = f(peak, "private_mb");
            assert!(private > 0.5 && private < f(peak, "rss_mb"), "{peak}");
        }
        let recorded = std::fs::read_dir(out.join(run_name).join("run").join("peaks"))
            .unwrap()
            .count();
        assert_eq!(recorded, 3, "{bench}: one peak file per node");
        assert_eq!(
            rss.iter().copied().fold(0.0, f64::max),
            worker.max(scheduler)
        );
        let workers_private = ["w0", "w1"].map(|w| f(&nodes[w], "private_mb"));
        assert_eq!(
            figures["worker_private_mb"].as_f64(),
            Some(workers_private[0].max(workers_private[1])),
            "{figures}"
        );
        let private_ratio = figures["worker_private_over_holds"].as_f64().unwrap_or(0.0);
        assert!(
            (private_ratio - workers_private[0].max(workers_private[1]) / holds).abs() < 1e-9
                && private_ratio < ratio,
            "{figures}"
        );
        // Every node counted its heap: a worker allocated at least what the bench says it
        // holds (its share of the data and model), and the figures carry the larger
        // worker's peak.
        let workers_heap = ["w0", "w1"].map(|w| f(&nodes[w], "heap_mb"));
        assert!(f(&nodes["scheduler"], "heap_mb") > 0.1, "{nodes:?}");
        assert!(
            workers_heap.iter().all(|&h| h >= holds),
            "{bench}: {nodes:?} holds {holds}"
        );
        let heap = workers_heap[0].max(workers_heap[1]);
        assert_eq!(figures["worker_heap_mb"].as_f64(), Some(heap), "{figures}");
        assert!(
            (figures["worker_heap_over_holds"].as_f64().unwrap_or(0.0) - heap / holds).abs() < 1e-9,
            "{figures}"
        );
    }
}

/// Nodes that loaded different data stop before the first round, every one of them, naming
/// who read what, instead of training on a mix: here w1's copy of the design differs from
/// the others' in one value (a stale copy on another host, a file edited between reads).
/// The same copies everywhere run to the end.
#[test]
fn nodes_that_loaded_different_data_stop_before_the_first_round() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = String::new();
    for i in 0..60u32 {
        rows.push_str(&format!(
            "{} 1:{} 2:{} 3:{} 4:{}\n",
            f64::from(i % 7) * 0.5 - 1.0,
            f64::from(i % 5) + 1.0,
            f64::from(i % 3),
            f64::from((i * 7) % 11) * 0.1,
            f64::from(i % 2) * 2.0 - 1.0,
        ));
    }
    let same = dir.path().join("design.svm");
    std::fs::write(&same, &rows).unwrap();
    let stale = dir.path().join("stale.svm");
    std::fs::write(&stale, rows.replacen("1:1 ", "1:1.25 ", 1)).unwrap();
    assert_ne!(
        std::fs::read(&same).unwrap(),
        std::fs::read(&stale).unwrap()
    );
    let mut nodes = String::new();
    for (name, role) in [
        ("scheduler", "strads-lasso-scheduler"),
        ("w0", "strads-lasso-worker"),
        ("w1", "strads-lasso-worker"),
    ] {
        nodes.push_str(&format!(
            "[[nodes]]\nname = \"{name}\"\naddr = \"127.0.0.1:{}\"\nroles = [\"{role}\"]\n",
            free_port()
        ));
    }
    let config = |file: &str, data: &Path| {
        let text = format!(
            "[cluster]\nname = \"digest\"\ncerts_dir = \"certs\"\nheartbeat_interval_ms = 100\n\
             failure_timeout_ms = 3000\njoin_timeout_ms = 20000\n{nodes}[app.lasso]\n\
             data = \"{}\"\nmax_rounds = 50\n",
            data.display()
        );
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (cfg, cfg_stale) = (config("cluster.toml", &same), config("stale.toml", &stale));
    common::certs(&dir.path().join("certs"), &cfg, false);
    let run = |w1_config: &Path| {
        let spawn = |name: &str, config: &Path| {
            drain(
                Command::new(PETREL)
                    .args(["node", "--name", name, "--config"])
                    .arg(config)
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        };
        let children = [
            ("scheduler", spawn("scheduler", &cfg)),
            ("w0", spawn("w0", &cfg)),
            ("w1", spawn("w1", w1_config)),
        ];
        children.map(|(name, (child, log))| {
            let status = wait_with_deadline(child, Duration::from_secs(60));
            (name, status.success(), log.join().unwrap())
        })
    };
    for (name, ok, log) in run(&cfg) {
        assert!(ok, "{name} failed with the same data everywhere: {log}");
    }
    for (name, ok, log) in run(&cfg_stale) {
        assert!(!ok, "{name} went on with different data: {log}");
        if name == "scheduler" {
            // The coordinator's node names the barrier, the digests and who had which.
            assert!(
                log.contains("disagree on what they must share")
                    && log.contains("from scheduler, w0")
                    && log.contains("from w1"),
                "{log}"
            );
        }
    }
}
