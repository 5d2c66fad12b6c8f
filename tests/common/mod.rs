//! What the integration tests share: the `petrel` binary and the shipped data, command
//! builders and the train helper, node processes (children, kills, deadlines, stderr
//! readers), small JSON accessors and, in [`fixtures`], the jobs several files run.

pub mod fixtures;

use std::borrow::BorrowMut;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The `petrel` binary that cargo built for these tests.
pub const PETREL: &str = env!("CARGO_BIN_EXE_petrel");

/// A tokio runtime with `threads` workers, for the tests that drive the launcher API.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

/// Launcher options whose nodes are `petrel node` processes of the tested binary, writing
/// under `run_dir`, with log lines instead of a progress bar.
pub fn node_processes(run_dir: PathBuf) -> petrel::launcher::LaunchOptions {
    let mut opts = petrel::launcher::LaunchOptions::new().unwrap();
    opts.child = petrel::launcher::ChildCommand::PetrelNode {
        program: PETREL.into(),
    };
    opts.run_dir = Some(run_dir);
    opts.progress = false;
    opts
}

/// A file of the shipped example data (`examples/data`).
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data")
        .join(name)
}

/// `petrel <args>` run to its end, with warnings and errors logged only.
pub fn petrel(args: &[&str]) -> Output {
    Command::new(PETREL)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run petrel")
}

/// `petrel <args>`, not yet run (the caller adds what else it needs).
pub fn petrel_cmd<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Command {
    let mut cmd = Command::new(PETREL);
    cmd.args(args);
    cmd
}

/// `petrel run <cfg> <args>` with its standard output and error piped, not yet run.
pub fn run_cmd(cfg: &Path, args: &[&str]) -> Command {
    let mut cmd = petrel_cmd(["run"]);
    cmd.arg(cfg)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The standard output of a finished command, which must have succeeded (else the test
/// fails showing its standard output and error).
pub fn succeeded(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The standard error of a finished command, which must have failed.
pub fn failed(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "succeeded: {stderr}");
    stderr
}

/// `petrel certs [--bundle] --dir <dir> --config <cfg>`, which must succeed.
pub fn certs(dir: &Path, cfg: &Path, bundle: bool) {
    let mut cmd = petrel_cmd(["certs"]);
    if bundle {
        cmd.arg("--bundle");
    }
    let st = cmd
        .arg("--dir")
        .arg(dir)
        .arg("--config")
        .arg(cfg)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "petrel certs failed");
}

/// The dashboard URL that `petrel run --dashboard` prints first on `stdout`, and a thread
/// that reads the rest of it (so the run never blocks on a full pipe).
pub fn dashboard_url(stdout: ChildStdout) -> (String, JoinHandle<Vec<String>>) {
    let mut lines = BufReader::new(stdout).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("dashboard: ").map(str::to_string))
        .expect("petrel run prints the dashboard URL");
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect());
    (url, rest)
}

/// The standard output and error of a job that lost a node and must have succeeded after
/// restarting its cluster once.
pub fn restarted_once(out: &Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("after 1 restart"), "{stdout}");
    assert!(
        stdout.contains("restarting the cluster from the newest checkpoint"),
        "{stdout}"
    );
    (stdout, stderr)
}

/// The standard output of `petrel <args>`, which must succeed.
pub fn ok(args: &[&str]) -> String {
    let out = petrel(args);
    assert!(
        out.status.success(),
        "petrel {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The standard error of `petrel <args>`, which must fail.
pub fn failure(args: &[&str]) -> String {
    let out = petrel(args);
    assert!(!out.status.success(), "petrel {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `petrel train <app> --out <out> <args>`, which must succeed and save a model; returns
/// its standard output.
pub fn train(app: &str, out: &Path, args: &[&str]) -> String {
    let out_arg = out.to_string_lossy();
    let mut all = vec!["train", app, "--out", &out_arg];
    all.extend_from_slice(args);
    let stdout = ok(&all);
    assert!(
        out.join("petrel-model.json").exists(),
        "{app} wrote no model"
    );
    stdout
}

/// [`train`] with shipped data files: `files` are (flag, name in `examples/data`) pairs,
/// such as `("--data", "regression.train")`, given before `args`.
pub fn train_data(app: &str, out: &Path, files: &[(&str, &str)], args: &[&str]) -> String {
    let paths: Vec<String> = files
        .iter()
        .map(|(_, name)| data(name).to_str().unwrap().to_string())
        .collect();
    let mut all: Vec<&str> = files
        .iter()
        .zip(&paths)
        .flat_map(|((flag, _), path)| [*flag, path.as_str()])
        .collect();
    all.extend_from_slice(args);
    train(app, out, &all)
}

/// The saved model (`petrel-model.json`) of the training run in `out`.
pub fn model(out: &Path) -> serde_json::Value {
    json_file(&out.join("petrel-model.json"))
}

/// The second column of `<out>/coefficients.tsv` (a Lasso's or a logistic model's).
pub fn coefficients<T: std::str::FromStr>(out: &Path) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    std::fs::read_to_string(out.join("coefficients.tsv"))
        .unwrap()
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap().parse().unwrap())
        .collect()
}

/// Writes `<dir>/cluster.toml`.
pub fn write_config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("cluster.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// A JSON file, parsed.
pub fn json_file(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A training run's `metrics.json`.
pub fn metrics(out: &Path) -> serde_json::Value {
    json_file(&out.join("metrics.json"))
}

/// The last line of a command's output, which the benches and `eval` print as JSON.
pub fn last_json_line(stdout: &str) -> serde_json::Value {
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {stdout}"))
}

/// The number `v[key]`.
pub fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// A UDP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Reads `from` to its end on a thread, so a chatty child never blocks on a full pipe.
pub fn read_all(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = from.read_to_string(&mut s);
        s
    })
}

/// A child with its piped standard error read on a thread.
pub fn drain(mut child: Child) -> (Child, JoinHandle<String>) {
    let stderr = child.stderr.take().expect("stderr is piped");
    (child, read_all(stderr))
}

/// Waits for `child` (owned or borrowed) to exit; kills it and fails the test after `limit`.
pub fn wait_with_deadline(mut child: impl BorrowMut<Child>, limit: Duration) -> ExitStatus {
    let child = child.borrow_mut();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `done` until it holds; fails the test with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `dir` holds a checkpoint manifest (a checkpoint is complete once it does).
pub fn has_manifest(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".manifest"))
    })
}

/// `pid`'s /proc stat fields after the parenthesised command (state, ppid, ...).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(String::from).collect())
}

/// The pids whose parent is `parent` (Linux /proc).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&pid| {
            stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse::<u32>().ok()))
                == Some(parent)
        })
        .collect()
}

/// Whether `pid` still runs (a zombie waiting for its new parent to reap it does not).
pub fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| !matches!(f.first().map(String::as_str), Some("Z" | "X")))
}

/// The pid of the child of `parent` whose command line has `--name <name>` (`petrel node`)
/// or `--node <name>` (a program re-executed by the launcher), waiting up to 5 s for it
/// to start.
pub fn child_process(parent: u32, name: &str) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        for pid in children_of(parent) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            if args
                .windows(2)
                .any(|w| (w[0] == b"--name" || w[0] == b"--node") && w[1] == name.as_bytes())
            {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Whether `pid` has a handler for signal number `signo` (Linux /proc: `SigCgt`).
pub fn catches_signal(pid: u32, signo: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signo - 1)) != 0)
}

/// Sends `signal` (`KILL`, `TERM`, `STOP`, ...) to `pid`; whether it was delivered.
pub fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits (up to `limit`) until `checkpointed()` holds, then SIGKILLs the node process
/// `node` of the job `child` and returns the job's output once it has exited.
pub fn kill_node_after_a_checkpoint(
    child: Child,
    node: &str,
    limit: Duration,
    checkpointed: impl Fn() -> bool,
) -> Output {
    wait_until(limit, "a checkpoint before the kill", checkpointed);
    let pid = child_process(child.id(), node).expect("the node's process");
    assert!(signal(pid, "KILL"), "{node} was gone before the kill");
    child.wait_with_output().unwrap()
}

/// The built binary of example `name` (`cargo test` builds the examples first).
pub fn example_binary(name: &str) -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Whether a test that needs network namespaces (root, iproute2) must skip; says why.
pub fn netns_skip(test: &str) -> bool {
    match petrel::netns::available() {
        Ok(()) => false,
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            true
        }
    }
}

/// Serves the shard `h` until every worker left, then asks it `query` (its final state).
pub async fn query_after_serving(
    h: petrel::ps::shells::ShardHandle,
    query: petrel::ps::shells::ShardQuery,
) -> Result<petrel::ps::shells::ShardState, String> {
    let addr = h.addr.clone();
    h.wait().await.map_err(|e| e.to_string())?;
    addr.send(petrel::actors::Msg {
        body: query,
        priority: petrel::messages::Priority::NORMAL,
        from: None,
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.0)
}

/// Waits up to 10 s for `lay`'s shards, then starts the client of the worker on `ctx`'s node,
/// at `clock`; returns the worker's id and its client.
pub async fn start_ps_worker(
    ctx: &petrel::actors::NodeContext,
    lay: &petrel::ps::shells::PsLayout,
    tables: Vec<petrel::ps::core::types::TableSpec>,
    clock: u64,
) -> Result<(u32, petrel::ps::shells::PsClient), String> {
    petrel::ps::shells::wait_for_shards(&ctx.node, lay, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let w = lay.workers_on(&ctx.spec.name)[0];
    let c = petrel::ps::shells::PsClient::start_at(&ctx.node, lay, w, tables, clock)
        .map_err(|e| e.to_string())?;
    Ok((w, c))
}

/// Trains `app` (`lasso`, `lda` or `strads-mf`) on its shipped training file with its nodes
/// in memory; returns its output directory, `<dir>/<app>`.
pub fn trained_in_memory(dir: &Path, app: &str) -> PathBuf {
    let out = dir.join(app);
    let (file, extra): ((&str, &str), &[&str]) = match app {
        "lasso" => (("--data", "regression.train"), &[]),
        "lda" => (("--docword", "docs.train"), &["--topics", "4"]),
        "strads-mf" => (("--data", "ratings.base"), &[]),
        _ => panic!("no shipped training file for {app}"),
    };
    train_data(
        app,
        &out,
        &[file],
        &[extra, &["--transport", "memory"]].concat(),
    );
    out
}

/// `petrel train <app> --balance <balance>` on 2 workers with worker 0 slowed `factor`
/// times, into `dir/<balance>`: its `metrics.json`.
pub fn train_balanced(
    dir: &Path,
    app: &str,
    balance: &str,
    factor: &str,
    args: &str,
) -> serde_json::Value {
    let out = dir.join(balance);
    let status = petrel_cmd(["train", app, "--out", out.to_str().unwrap()])
        .args(["--workers", "2", "--transport", "memory"])
        .args([
            "--balance",
            balance,
            "--straggler",
            "0",
            "--straggler-factor",
            factor,
        ])
        .args(args.split_whitespace())
        .env("RUST_LOG", "warn")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "petrel train {app} --balance {balance}: {status}"
    );
    metrics(&out)
}

/// A dynamic run's `metrics.json` re-dealt its `units` (rows, documents) at least once,
/// and the slow worker 0 ended with fewer than worker 1.
pub fn assert_dealt_off_worker_0(dynamic: &serde_json::Value, units: u64) {
    let dealt: Vec<u64> = dynamic["balance"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_u64().unwrap())
        .collect();
    assert_eq!(dealt.iter().sum::<u64>(), units);
    assert!(dealt[0] < dealt[1], "the slow worker kept {dealt:?}");
    assert!(dynamic["balance"]["deals"].as_u64().unwrap() >= 1);
}

/// `petrel bench chaos <args>` of one faulted run: its output and JSON line, after
/// checking that the fault struck and the job finished with the uninterrupted model,
/// without a restart, an orphan or a hang.
pub fn one_clean_chaos_run(args: &[&str]) -> (String, serde_json::Value) {
    let out = Command::new(PETREL)
        .args(["bench", "chaos", "--runs", "1"])
        .args(args)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json = last_json_line(&stdout);
    for (key, want) in [
        ("faults_injected", 1),
        ("jobs_completed", 1),
        ("outputs_identical", 1),
        ("restarts", 0),
        ("orphans", 0),
        ("hangs", 0),
    ] {
        assert_eq!(json[key].as_u64(), Some(want), "{key}: {stdout}");
    }
    (stdout, json)
}
