// Over 600 lines: the three launch modes share the run directory, the children and their relays.
//! The one launcher: a [`Cluster`] composed in code runs the same `main` three ways, chosen
//! on the command line ([`LaunchArgs`]):
//!
//! - `--in-process` (the default): every node is a thread of this process.
//! - `--processes`: the program re-executes itself once per node on this host, from a
//!   private run directory (0700) with a fresh CA whose key is never written. Each child
//!   runs in its own process group with a parent-death signal, so none outlives the
//!   launcher; its logs are prefixed with `[node]`, its stdout passed through, and its
//!   [`ProgressReport`] lines feed the launcher's bar. The first failure is reported once,
//!   naming the node, its roles and the cause; the others are stopped.
//! - `--node NAME --config FILE`: one node of a multi-host cluster (name from `--node`,
//!   `RANK`/`SLURM_PROCID` or the host name).
//!
//! `petrel run` and `petrel node` are this launcher for the built-in roles. SIGINT,
//! SIGTERM and SIGHUP stop a node within [`SHUTDOWN_GRACE`]; the launcher then stops its
//! children (SIGTERM to each group, SIGKILL after the grace) and fails with
//! [`LaunchError::Interrupted`].

use crate::train::progress::{JobProgress, ProgressReport, REPORTS_ENV};
use indicatif::{ProgressBar, ProgressStyle};
use petrel_actors::topology::{Wiring, pick_ports};
use petrel_actors::{Cluster, NodeError, Settings, Transport, error_chain, validate_node_name};
use petrel_net::ClusterCredentials;
use petrel_net::tls::ClusterCa;
use petrel_observe::process;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod job_end;
use job_end::JobEnd;

/// Exit code of a node when another node's failure stopped it (it only followed).
pub const STOPPED_BY_PEER: u8 = 3;

/// How long a node or launcher may take to stop after SIGINT/SIGTERM before it is forced.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);

/// How long `wait` looks for the node where a failure started once only followers exited.
const ROOT_CAUSE_GRACE: Duration = Duration::from_secs(1);

/// The run directory, in every child's environment: a failing node leaves its error there.
const LAUNCH_DIR_ENV: &str = "PETREL_LAUNCH_DIR";

/// Variables that give a node its rank (its position in the settings' `[[nodes]]`).
pub const RANK_VARIABLES: [&str; 2] = ["RANK", "SLURM_PROCID"];

/// Why a cluster could not start or did not finish; its `Debug` is [`error_chain`].
#[derive(thiserror::Error)]
pub enum LaunchError {
    /// The settings could not be read, resolved or written, or a node failed in process.
    #[error(transparent)]
    Settings(NodeError),
    /// A role returned an error (in this process). `source` is the role's own error.
    #[error("role {role} on {node}: {source}")]
    Role {
        /// The node.
        node: String,
        /// The role.
        role: String,
        /// The role's error, with its cause chain.
        source: petrel_actors::RoleErrorSource,
    },
    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(String),
    /// Spawning, waiting for or writing for a child failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The cluster's certificates could not be made or read, or are not this node's.
    #[error(transparent)]
    Tls(#[from] petrel_net::NetError),
    /// A node exited with an error (the one where the failure started).
    #[error("node {name} failed ({cause}); its roles: {roles}")]
    NodeFailed {
        /// The node.
        name: String,
        /// Its roles, comma separated.
        roles: String,
        /// Its error and causes, or its exit status when it left no error.
        cause: String,
    },
    /// A node's request failed in another node's actor (`cause` names both).
    #[error("{cause}")]
    RequestFailed {
        /// The node whose request failed.
        caller: String,
        /// Its roles, comma separated.
        roles: String,
        /// Its error and causes.
        cause: String,
    },
    /// SIGINT, SIGTERM or SIGHUP.
    #[error("interrupted ({0}); all nodes stopped")]
    Interrupted(String),
    /// The `--timeout-s` passed.
    #[error("cluster did not finish within {0:?}; all nodes stopped")]
    Timeout(Duration),
    /// `--netns`: the emulated hosts are missing or unusable.
    #[error("--netns: {0}")]
    Netns(#[from] crate::netns::NetnsError),
    /// The run directory cannot be made private or cleaned.
    #[error("run directory {}: {source}", .path.display())]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl From<NodeError> for LaunchError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::Role { node, role, source } => LaunchError::Role { node, role, source },
            other => LaunchError::Settings(other),
        }
    }
}

impl std::fmt::Debug for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&error_chain(self))
    }
}

/// How a program runs its cluster: flatten into a `clap` parser or [`LaunchArgs::from_env`].
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LaunchArgs {
    /// Run every node as a thread of this process (the default).
    #[arg(long, conflicts_with_all = ["processes", "node", "config"])]
    pub in_process: bool,
    /// Run one process per node on this host (this program, re-executed per node).
    #[arg(long, conflicts_with_all = ["node", "config"])]
    pub processes: bool,
    /// Run only this node of a multi-host cluster (needs --config; default: from RANK or
    /// SLURM_PROCID, or the host name).
    #[arg(long, value_name = "NAME", requires = "config")]
    pub node: Option<String>,
    /// The multi-host cluster's settings: addresses and `certs_dir` of every node.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Keep the run's certificates and resolved settings here (--processes; default: a
    /// private temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Stop every node and fail after this many seconds (--processes).
    #[arg(long, value_name = "SECONDS")]
    pub timeout_s: Option<u64>,
}

#[derive(clap::Parser)]
struct LaunchOnly {
    #[command(flatten)]
    launch: LaunchArgs,
}

impl LaunchArgs {
    /// Parses a command line of launch flags only (a bad flag prints usage and exits).
    pub fn from_env() -> Self {
        <LaunchOnly as clap::Parser>::parse().launch
    }

    /// The mode these flags ask for.
    pub fn mode(&self) -> LaunchMode {
        match (&self.config, self.processes) {
            (Some(config), _) => LaunchMode::Node {
                name: self.node.clone(),
                config: config.clone(),
            },
            (None, true) => LaunchMode::Processes,
            (None, false) => LaunchMode::InProcess,
        }
    }

    /// Children re-execute this program minus the launcher's flags plus `--node`/`--config`.
    pub fn options(&self) -> Result<LaunchOptions, LaunchError> {
        let mut opts = LaunchOptions::new()?;
        opts.child = ChildCommand::ReExec {
            program: std::env::current_exe()?,
            args: strip_launch_flags(std::env::args_os().skip(1)),
        };
        opts.run_dir = self.run_dir.clone();
        opts.timeout = self.timeout_s.map(Duration::from_secs);
        Ok(opts)
    }
}

/// The arguments without the launcher's own flags (a child runs one node).
fn strip_launch_flags(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        let text = a.to_string_lossy();
        match text.as_ref() {
            "--processes" | "--in-process" => {}
            "--run-dir" | "--timeout-s" => {
                args.next();
            }
            t if t.starts_with("--run-dir=") || t.starts_with("--timeout-s=") => {}
            _ => out.push(a),
        }
    }
    out
}

/// How a cluster runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchMode {
    /// Every node is a thread of this process.
    InProcess,
    /// One child process per node on this host.
    Processes,
    /// One node of a cluster described by `config`.
    Node {
        /// The node; `None`: from a rank variable or the host name.
        name: Option<String>,
        /// The settings file.
        config: PathBuf,
    },
}

/// What a child process runs for one node.
#[derive(Clone, Debug)]
pub enum ChildCommand {
    /// `program ARGS… --node NAME --config FILE` (a user program re-executed).
    ReExec {
        /// The executable.
        program: PathBuf,
        /// Its arguments before the launcher's.
        args: Vec<OsString>,
    },
    /// `program node --config FILE --name NAME` (the `petrel` binary).
    PetrelNode {
        /// The `petrel` executable.
        program: PathBuf,
    },
}

impl ChildCommand {
    /// The program and arguments of node `node`'s process.
    fn argv(&self, node: &str, config: &Path) -> (OsString, Vec<OsString>) {
        match self {
            ChildCommand::ReExec { program, args } => {
                let mut a = args.clone();
                a.extend([
                    "--node".into(),
                    node.into(),
                    "--config".into(),
                    config.into(),
                ]);
                (program.into(), a)
            }
            ChildCommand::PetrelNode { program } => (
                program.into(),
                vec![
                    "node".into(),
                    "--config".into(),
                    config.into(),
                    "--name".into(),
                    node.into(),
                ],
            ),
        }
    }

    /// Node `node`'s process, in namespace `netns` when given (`ip netns exec` keeps the pid).
    fn command(&self, node: &str, config: &Path, netns: Option<&str>) -> Command {
        let (mut program, mut args) = self.argv(node, config);
        if let Some(ns) = netns {
            args.splice(0..0, ["netns".into(), "exec".into(), ns.into(), program]);
            program = "ip".into();
        }
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

/// The prefix `petrel train --netns` sets for every launch of this process.
static DEFAULT_NETNS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes [`LaunchOptions::new`] place nodes on the emulated hosts `prefix` (first call wins).
pub fn set_default_netns(prefix: &str) {
    let _ = DEFAULT_NETNS.set(prefix.to_string());
}

/// The prefix [`set_default_netns`] set, if any.
pub fn default_netns() -> Option<String> {
    DEFAULT_NETNS.get().cloned()
}

/// Gives node `i` of `settings` the address of emulated host `i`.
pub fn place_on_hosts(
    settings: &mut Settings,
    hosts: &crate::netns::Hosts,
) -> Result<(), LaunchError> {
    if settings.nodes.len() > hosts.count {
        return Err(LaunchError::Usage(format!(
            "--netns {}: {} nodes but {} hosts",
            hosts.prefix,
            settings.nodes.len(),
            hosts.count
        )));
    }
    for (i, n) in settings.nodes.iter_mut().enumerate() {
        n.addr = hosts.node_addr(i);
    }
    Ok(())
}

/// How [`start`] launches the nodes.
pub struct LaunchOptions {
    /// What each child runs (default: this executable's `petrel node`).
    pub child: ChildCommand,
    /// Where certificates and resolved settings go (default: a temporary directory).
    pub run_dir: Option<PathBuf>,
    /// Stop everything after this long.
    pub timeout: Option<Duration>,
    /// Show a progress bar fed by the nodes' [`ProgressReport`]s (else their INFO lines).
    pub progress: bool,
    /// The points a full run records, when known: the bar's length and the time left.
    pub progress_points: Option<u64>,
    /// Run node `i` in network namespace `PREFIX-h{i}` (default: [`set_default_netns`]'s).
    pub netns: Option<String>,
}

impl LaunchOptions {
    /// Runs this executable's `node` command, in a temporary directory, without a timeout.
    pub fn new() -> Result<Self, LaunchError> {
        Ok(Self {
            child: ChildCommand::PetrelNode {
                program: std::env::current_exe()?,
            },
            run_dir: None,
            timeout: None,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            progress_points: crate::train::progress::expected_points(),
            netns: DEFAULT_NETNS.get().cloned(),
        })
    }
}

/// What a finished `--processes` run reports.
#[derive(Debug)]
pub struct LaunchReport {
    /// Each node and when it finished, since the launch.
    pub nodes: Vec<(String, Duration)>,
    /// Where the certificates and resolved settings were (removed if it was temporary).
    pub run_dir: PathBuf,
    /// With [`LaunchOptions::progress`]: the last point the bar showed, and its node.
    pub progress: Option<(String, ProgressReport)>,
    /// Each node process's peak memory (recorded by the node, else sampled every 50 ms).
    pub peaks: BTreeMap<String, NodePeak>,
}

/// What [`launch`] did in this process.
#[derive(Debug)]
pub struct Launched {
    /// The nodes whose roles ran in this process.
    pub hosted: Vec<String>,
    /// The children's report, in the parent of `--processes`.
    pub report: Option<LaunchReport>,
    single_node: bool,
}

impl Launched {
    /// Whether node `name` ran in this process (so results its roles left here exist).
    pub fn hosts(&self, name: &str) -> bool {
        self.hosted.iter().any(|n| n == name)
    }

    /// Whether this process ran one node of a larger run (whole-run output is elsewhere).
    pub fn runs_one_node(&self) -> bool {
        self.single_node
    }
}

/// Runs `cluster` as the command line says ([`LaunchArgs`]); a failing node under
/// `--processes` exits here (its launcher reports the error).
pub fn launch(cluster: &Cluster, args: &LaunchArgs) -> Result<Launched, LaunchError> {
    crate::init_tracing();
    launch_with(cluster, args.mode(), args.options()?)
}

/// [`launch`] with the mode and options given directly (`petrel run` and `petrel node`).
pub fn launch_with(
    cluster: &Cluster,
    mode: LaunchMode,
    opts: LaunchOptions,
) -> Result<Launched, LaunchError> {
    let (hosted, report, single_node) = match mode {
        LaunchMode::InProcess => {
            cluster.run_in_process()?;
            let names = cluster.settings().nodes.iter().map(|n| n.name.clone());
            (names.collect(), None, false)
        }
        LaunchMode::Processes => {
            let timeout = opts.timeout;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            let run = async { start_cluster(cluster, opts).await?.wait(timeout).await };
            (Vec::new(), Some(runtime.block_on(run)?), false)
        }
        LaunchMode::Node { name, config } => {
            let launched = std::env::var_os(LAUNCH_DIR_ENV).map(PathBuf::from);
            // Read before the node loads anything: what is file-backed now is the binary.
            let startup_file_mb = process::resident_file_mb(None);
            let ran = run_one_node(cluster, name.as_deref(), &config);
            let node = match &ran {
                Ok(name) => Some(name.as_str()),
                Err((node, _)) => node.as_deref(),
            };
            if let (Some(dir), Some(node)) = (&launched, node) {
                record_peak(dir, node, startup_file_mb);
            }
            match (ran, launched) {
                (Ok(name), _) => (vec![name], None, true),
                (Err((node, e)), Some(dir)) => {
                    std::process::exit(report_failure(&dir, node.as_deref(), &e).into())
                }
                (Err((_, e)), None) => return Err(e),
            }
        }
    };
    Ok(Launched {
        hosted,
        report,
        single_node,
    })
}

/// Where a node leaves its peak memory (the launcher's samples can miss its last moments).
fn peak_file(dir: &Path, node: &str) -> PathBuf {
    dir.join("peaks").join(node)
}

/// A node process's peak memory, MB, and the CPU it used.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodePeak {
    /// Peak resident memory (`VmHWM`).
    pub rss_mb: f64,
    /// The peak less the file-backed pages resident at start (the shared binary).
    pub private_mb: Option<f64>,
    /// The most the node had allocated at once ([`petrel_observe::heap`]).
    #[serde(default)]
    pub heap_mb: Option<f64>,
    /// CPU seconds (user + system) the node process used, recorded as it ended.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// Seconds its threads (those alive at the end) were ready to run but waited for a core:
    /// the CPU contention it met.
    #[serde(default)]
    pub runqueue_wait_s: Option<f64>,
}

/// The second field of `/proc/self/task/*/schedstat` (nanoseconds runnable on a run queue),
/// summed over this process's threads, in seconds.
fn runqueue_wait_s() -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let text = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        ns += text.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    }
    Some(ns as f64 / 1e9)
}

/// Best effort: a node that cannot write its peak leaves the launcher's sampled one.
fn record_peak(dir: &Path, node: &str, startup_file_mb: Option<f64>) {
    let Some(rss_mb) = process::peak_rss_mb(None) else {
        return;
    };
    let peak = NodePeak {
        rss_mb,
        private_mb: startup_file_mb.map(|f| (rss_mb - f).max(0.0)),
        heap_mb: petrel_observe::heap::peak_mb(),
        cpu_s: petrel_observe::process::read().map(|p| p.cpu_s),
        runqueue_wait_s: runqueue_wait_s(),
    };
    let path = peak_file(dir, node);
    let written = path
        .parent()
        .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
        && serde_json::to_vec(&peak).is_ok_and(|json| std::fs::write(&path, json).is_ok());
    if !written {
        tracing::debug!(path = %path.display(), "could not record this node's peak memory");
    }
}

/// The peak a node recorded when it ended ([`record_peak`]), if any.
fn recorded_peak(dir: &Path, node: &str) -> Option<NodePeak> {
    serde_json::from_slice(&std::fs::read(peak_file(dir, node)).ok()?).ok()
}

/// A node under a launcher leaves its error in the run directory for the launcher to print;
/// returns the exit code ([`STOPPED_BY_PEER`] when a peer's failure stopped it).
fn report_failure(dir: &Path, node: Option<&str>, error: &LaunchError) -> u8 {
    let follower = matches!(
        error,
        LaunchError::Settings(NodeError::PeerFailed { .. } | NodeError::RunFailed { .. })
    );
    let text = error_chain(error);
    let kind = match petrel_actors::handler_failure(error) {
        Some(_) => REQUEST_FAILURES,
        None => FAILURES,
    };
    let written = node.is_some_and(|n| {
        let failures = dir.join(kind);
        std::fs::create_dir_all(&failures).is_ok()
            && std::fs::write(failures.join(n), &text).is_ok()
    });
    if !written {
        let _ = writeln!(std::io::stderr(), "error: {text}");
    }
    if follower { STOPPED_BY_PEER } else { 1 }
}

/// Where a failed node leaves its error in the run directory ([`report_failure`]).
const FAILURES: &str = "failures";
/// Where it leaves an error that another node's handler caused.
const REQUEST_FAILURES: &str = "request-failures";

/// Runs one node of the cluster in `config`; returns its name (in the error, once known).
fn run_one_node(
    cluster: &Cluster,
    name: Option<&str>,
    config: &Path,
) -> Result<String, (Option<String>, LaunchError)> {
    let no_name = |e: LaunchError| (None, e);
    let file = Settings::load(config).map_err(|e| no_name(e.into()))?;
    let settings = merge_topology(cluster.settings(), file).map_err(no_name)?;
    let name = node_name(name, &settings).map_err(no_name)?;
    let named = |e: LaunchError| (Some(name.clone()), e);
    let cluster = cluster.with_settings(settings);
    cluster.check_settings().map_err(|e| named(e.into()))?;
    let creds = node_credentials(cluster.settings(), &name, config).map_err(named)?;
    // Under a launcher this node's progress points go to the launcher.
    let progress = std::env::var_os(LAUNCH_DIR_ENV).map(|_| {
        let roles = cluster
            .settings()
            .nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.roles.join("+"))
            .unwrap_or_else(|| name.clone());
        crate::train::progress::TrainProgress::for_launched_node(roles)
    });
    let ran = cluster.run_node_until(&name, Wiring::Quic(creds), stop_signal());
    drop(progress);
    ran.map_err(|e| named(e.into()))?;
    Ok(name)
}

/// The file's settings, checked against the program's topology (same nodes and roles).
fn merge_topology(code: &Settings, mut file: Settings) -> Result<Settings, LaunchError> {
    let names = |s: &Settings| {
        let mut v: Vec<String> = s.nodes.iter().map(|n| n.name.clone()).collect();
        v.sort();
        v
    };
    if names(code) != names(&file) {
        return Err(LaunchError::Usage(format!(
            "the settings file names nodes {} but this program's topology has {}",
            names(&file).join(", "),
            names(code).join(", ")
        )));
    }
    for n in &mut file.nodes {
        let Some(c) = code.nodes.iter().find(|c| c.name == n.name) else {
            continue;
        };
        if n.roles.is_empty() {
            n.roles = c.roles.clone();
        } else if n.roles != c.roles {
            return Err(LaunchError::Usage(format!(
                "node {}: the settings file gives roles [{}] but this program's topology has [{}]",
                n.name,
                n.roles.join(", "),
                c.roles.join(", ")
            )));
        }
    }
    if file.app.is_empty() {
        file.app = code.app.clone();
    }
    Ok(file)
}

/// This node's name: given, else at position `RANK`/`SLURM_PROCID`, else like this host.
pub fn node_name(given: Option<&str>, settings: &Settings) -> Result<String, LaunchError> {
    let known = || {
        settings
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(name) = given {
        validate_node_name(name)?;
        return match settings.node_index(name) {
            Some(_) => Ok(name.to_string()),
            None => Err(LaunchError::Usage(format!(
                "node {name} is not in the topology (nodes: {})",
                known()
            ))),
        };
    }
    for var in RANK_VARIABLES {
        let Ok(text) = std::env::var(var) else {
            continue;
        };
        let rank: usize = text.trim().parse().map_err(|_| {
            LaunchError::Usage(format!("{var}={text:?} is not a rank (a number from 0)"))
        })?;
        return match settings.nodes.get(rank) {
            Some(n) => Ok(n.name.clone()),
            None => Err(LaunchError::Usage(format!(
                "{var}={rank} but the settings have only {} nodes ({})",
                settings.nodes.len(),
                known()
            ))),
        };
    }
    let host = host_name();
    let short = host.split('.').next().unwrap_or_default();
    match settings
        .nodes
        .iter()
        .find(|n| n.name == host || n.name == short)
    {
        Some(n) => Ok(n.name.clone()),
        None => Err(LaunchError::Usage(format!(
            "which node is this? give --node NAME, or set RANK or SLURM_PROCID, or name a node like this host ({host}); nodes: {}",
            known()
        ))),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// This node's credentials from `cluster.certs_dir`, checked against its CA.
fn node_credentials(
    settings: &Settings,
    name: &str,
    config: &Path,
) -> Result<ClusterCredentials, LaunchError> {
    if settings.cluster.transport != Transport::Quic {
        return Err(LaunchError::Usage(format!(
            "{}: a node in its own process needs cluster.transport = \"quic\"",
            config.display()
        )));
    }
    let Some(dir) = &settings.cluster.certs_dir else {
        return Err(LaunchError::Usage(format!(
            "{}: cluster.certs_dir is not set; create certificates with `petrel certs --bundle`",
            config.display()
        )));
    };
    let creds = ClusterCredentials::load(dir, name)?;
    creds.verify_node(name)?;
    Ok(creds)
}

/// Resolves at the first SIGINT, SIGTERM or SIGHUP; exits after [`SHUTDOWN_GRACE`] anyway.
async fn stop_signal() -> String {
    let cause = wait_for_signal().await;
    tracing::debug!(signal = %cause, "stopping");
    let _ = std::thread::Builder::new()
        .name("petrel-shutdown-watchdog".into())
        .spawn(|| {
            std::thread::sleep(SHUTDOWN_GRACE);
            std::process::exit(130);
        });
    cause
}

async fn wait_for_signal() -> String {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::debug!("cannot listen for signals");
        return std::future::pending().await;
    };
    let name = tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
    };
    name.to_string()
}

/// Resolves ports and certificates and writes `cluster.toml` (never the CA key) to `dir`.
fn prepare(mut settings: Settings, dir: &Path) -> Result<PathBuf, LaunchError> {
    create_private_dir(dir)?;
    crate::leftovers::mark_run_dir(dir)?;
    // Every node is its own process: QUIC whatever the topology's transport.
    settings.cluster.transport = Transport::Quic;
    pick_ports(&mut settings)?;
    reserve_metrics_ports(&mut settings)?;
    if settings.cluster.certs_dir.is_none() {
        let certs = dir.join("certs");
        // A new CA per launch; key files are never overwritten.
        if std::fs::symlink_metadata(&certs).is_ok() {
            std::fs::remove_dir_all(&certs).map_err(|source| LaunchError::RunDir {
                path: certs.clone(),
                source,
            })?;
        }
        let ca = ClusterCa::generate()?;
        for n in &settings.nodes {
            ca.issue(&n.name)?.write(&certs, &n.name)?;
        }
        settings.cluster.certs_dir = Some(certs);
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, settings.to_toml()?)?;
    Ok(path)
}

/// Gives every node a concrete `/metrics` address (default a free loopback port).
fn reserve_metrics_ports(settings: &mut Settings) -> Result<(), LaunchError> {
    let mut taken: Vec<std::net::SocketAddr> = settings
        .nodes
        .iter()
        .filter_map(|n| n.metrics_addr.as_deref()?.parse().ok())
        .collect();
    for n in &mut settings.nodes {
        let addr = n
            .metrics_addr
            .clone()
            .unwrap_or_else(|| "127.0.0.1:0".into());
        let mut parsed: std::net::SocketAddr = addr.parse().map_err(|_| {
            NodeError::Config(format!("node {}: bad metrics_addr {addr:?}", n.name))
        })?;
        if parsed.port() == 0 {
            // Outside the ephemeral range, distinct from the other nodes' picks.
            let ip = parsed.ip();
            let picked =
                petrel_net::ports::pick_distinct(&taken, || petrel_net::ports::pick_free_tcp(ip))?;
            parsed.set_port(picked.port());
            taken.push(parsed);
        }
        n.metrics_addr = Some(parsed.to_string());
    }
    Ok(())
}

/// The run directory, created 0700 or checked to be this user's own.
fn create_private_dir(dir: &Path) -> Result<(), LaunchError> {
    petrel_net::private_files::create_private_dir(dir).map_err(|source| LaunchError::RunDir {
        path: dir.to_path_buf(),
        source,
    })
}

/// A launched cluster whose nodes are running.
pub struct Running {
    children: Vec<(String, Child)>,
    /// Standby nodes the scale plan starts later: when, after the launch, and their index.
    standby: Vec<(Duration, usize)>,
    /// A node killed by a signal has left the job (`on_node_death = "leave"`).
    death_is_leave: bool,
    /// Whether the job has ended, for the standby nodes.
    job_end: JobEnd,
    spawner: NodeSpawner,
    /// Where each node serves `/metrics`, by node name.
    metrics: Vec<(String, String)>,
    /// Roles of each node (for error messages), by node name.
    roles: Vec<(String, String)>,
    started: Instant,
    run_dir: PathBuf,
    /// The temporary run directory, removed when the run ends.
    _temp: Option<tempfile::TempDir>,
    bar: ProgressBar,
    /// The tasks relaying the children's output (awaited once they all exited).
    relays: Vec<Relay>,
    /// What the bar shows (with `progress`), fed by the nodes' progress reports.
    job: Option<SharedProgress>,
}

type SharedProgress = std::sync::Arc<std::sync::Mutex<JobProgress>>;
/// A task relaying a child's output.
type Relay = tokio::task::JoinHandle<()>;

/// The job's progress, even if a thread panicked while holding it.
fn lock(job: &SharedProgress) -> std::sync::MutexGuard<'_, JobProgress> {
    job.lock().unwrap_or_else(|e| e.into_inner())
}

/// Launches one process per node of `settings` (built-in roles) and returns at once.
pub async fn start(settings: Settings, opts: LaunchOptions) -> Result<Running, LaunchError> {
    start_cluster(&crate::roles::builtin(settings), opts).await
}

/// Launches one process per node of `cluster` (checked first) and returns at once.
pub async fn start_cluster(cluster: &Cluster, opts: LaunchOptions) -> Result<Running, LaunchError> {
    cluster.check_settings()?;
    let mut settings = cluster.settings().clone();
    crate::leftovers::clean_up(settings.net.shared_memory_dir.as_deref());
    let hosts = match &opts.netns {
        Some(prefix) => {
            let hosts = crate::netns::Hosts::existing(prefix, settings.nodes.len())?;
            place_on_hosts(&mut settings, &hosts)?;
            Some(hosts)
        }
        None => None,
    };
    let (run_dir, temp) = match &opts.run_dir {
        Some(d) => (d.clone(), None),
        None => {
            // tempfile creates it 0700 with a unique name.
            let t = tempfile::Builder::new()
                .prefix(&format!("petrel-run-{}-", settings.cluster.name))
                .tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let resolved = prepare(settings.clone(), &run_dir)?;
    let metrics: Vec<(String, String)> = Settings::load(&resolved)?
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.metrics_addr.clone().unwrap_or_default()))
        .collect();
    // A dashboard of this process (`--dashboard`) scrapes the children from now on.
    petrel_observe::scrape::announce_targets(
        settings
            .nodes
            .iter()
            .zip(&metrics)
            .map(|(n, (_, addr))| petrel_observe::scrape::Target {
                node: n.name.clone(),
                roles: n.roles.clone(),
                addr: addr.clone(),
            })
            .collect(),
    );
    let names: Vec<String> = settings.nodes.iter().map(|n| n.name.clone()).collect();
    let job = opts.progress.then(|| {
        std::sync::Arc::new(std::sync::Mutex::new(JobProgress::new(
            names.len(),
            opts.progress_points,
        )))
    });
    let bar = match &job {
        Some(job) => {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{spinner} {elapsed_precise} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_message(lock(job).message(Duration::ZERO));
            b.enable_steady_tick(Duration::from_millis(200));
            b
        }
        None => ProgressBar::hidden(),
    };
    let spawner = NodeSpawner {
        child: opts.child.clone(),
        config: resolved,
        run_dir: run_dir.clone(),
        netns: names
            .iter()
            .enumerate()
            .map(|(i, _)| hosts.as_ref().map(|h| h.host_ns(i)))
            .collect(),
        job: job.clone(),
        bar: bar.clone(),
    };
    // Standby nodes start when the scale plan adds them, if it does.
    let plan = settings.scale_plan()?;
    let mut standby = Vec::new();
    let mut children: Vec<(String, Child)> = Vec::new();
    let mut relays = Vec::new();
    for (i, spec) in settings.nodes.iter().enumerate() {
        if spec.standby {
            if let Some((at, _)) = plan.added().find(|(_, n)| *n == spec.name) {
                standby.push((at, i));
            }
            continue;
        }
        match spawner.spawn(i, &spec.name, &mut relays) {
            Ok(child) => children.push((spec.name.clone(), child)),
            Err(e) => {
                stop_all(&mut children).await;
                return Err(e);
            }
        }
    }
    tracing::debug!(nodes = names.len(), dir = %run_dir.display(), "cluster launched");
    let roles = settings
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.roles.join(", ")))
        .collect();
    let job_end = JobEnd::new(
        settings.coordinator_name(),
        children.iter().map(|(name, _)| name.clone()),
    );
    Ok(Running {
        children,
        standby,
        job_end,
        death_is_leave: settings.cluster.on_node_death == petrel_actors::OnNodeDeath::Leave,
        spawner,
        metrics,
        roles,
        started: Instant::now(),
        run_dir,
        _temp: temp,
        bar,
        relays,
        job,
    })
}

/// Starts node processes: now for the cluster, later for standby nodes a plan adds.
struct NodeSpawner {
    child: ChildCommand,
    config: PathBuf,
    run_dir: PathBuf,
    /// The network namespace of each node, by index, when on emulated hosts.
    netns: Vec<Option<String>>,
    job: Option<SharedProgress>,
    bar: ProgressBar,
}

impl NodeSpawner {
    /// Starts node `i`, relaying its output.
    fn spawn(&self, i: usize, name: &str, relays: &mut Vec<Relay>) -> Result<Child, LaunchError> {
        let netns = self.netns.get(i).cloned().flatten();
        let mut cmd = self.child.command(name, &self.config, netns.as_deref());
        cmd.env(LAUNCH_DIR_ENV, &self.run_dir);
        // Nodes report their points for the bar only when there is one.
        match self.job {
            Some(_) => cmd.env(REPORTS_ENV, "1"),
            None => cmd.env_remove(REPORTS_ENV),
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn()?;
        relays.extend(forward(
            name,
            child.stdout.take(),
            self.bar.clone(),
            Stream::Out,
        ));
        let logs = Stream::Err(self.job.clone());
        relays.extend(forward(name, child.stderr.take(), self.bar.clone(), logs));
        Ok(child)
    }
}

/// Each child gets its own process group and, on Linux, SIGKILL when the launcher dies.
fn die_with_parent(cmd: &mut Command) {
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid).
        let parent = std::process::id() as libc::pid_t;
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launcher died before prctl took effect: do not start at all.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("launcher exited"));
                }
                Ok(())
            });
        }
    }
}

impl Running {
    /// Process ids of the nodes still known to the launcher.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.children
            .iter()
            .filter_map(|(n, c)| c.id().map(|id| (n.clone(), id)))
            .collect()
    }

    /// Each node's `/metrics` address (`host:port`), by node name.
    pub fn metrics_addrs(&self) -> &[(String, String)] {
        &self.metrics
    }

    /// Starts the standby nodes whose time in the scale plan has come.
    fn start_due_standby(&mut self) -> Result<(), LaunchError> {
        let elapsed = self.started.elapsed();
        let (due, later) = self.standby.iter().partition(|(at, _)| *at <= elapsed);
        self.standby = later;
        for (_, i) in due {
            let Some((name, _)) = self.roles.get(i).cloned() else {
                continue;
            };
            tracing::info!(node = %name, "scale plan: starting a standby node");
            let child = self.spawner.spawn(i, &name, &mut self.relays)?;
            self.children.push((name, child));
        }
        Ok(())
    }

    /// Waits for every node; stops all at the first failure (naming its root), a signal or timeout.
    pub async fn wait(mut self, timeout: Option<Duration>) -> Result<LaunchReport, LaunchError> {
        let deadline = timeout.map(|t| self.started + t);
        let mut finished: Vec<(String, Duration)> = Vec::new();
        // Nodes that exited non-zero: (name, status, stopped only because of a peer).
        let mut failed: Vec<(String, String, bool)> = Vec::new();
        let mut first_failure_at: Option<Instant> = None;
        // Nodes killed under `on_node_death = "leave"`.
        let mut lost: Vec<String> = Vec::new();
        let mut peaks: BTreeMap<String, NodePeak> = BTreeMap::new();
        let signal = wait_for_signal();
        tokio::pin!(signal);
        let outcome = loop {
            if let Err(e) = self.start_due_standby() {
                break Err(e);
            }
            for (name, child) in &mut self.children {
                let exited = finished.iter().any(|(n, _)| n == name)
                    || failed.iter().any(|f| &f.0 == name)
                    || lost.contains(name);
                if exited {
                    continue;
                }
                // VmHWM only grows: the last reading is the peak but for the last 50 ms.
                if let Some(mb) = child.id().and_then(|pid| process::peak_rss_mb(Some(pid))) {
                    let peak = peaks.entry(name.clone()).or_default();
                    peak.rss_mb = peak.rss_mb.max(mb);
                }
                if let Some(status) = child.try_wait()? {
                    if let Some(recorded) = recorded_peak(&self.run_dir, name) {
                        let sampled = peaks.get(name).map_or(0.0, |p| p.rss_mb);
                        let rss_mb = recorded.rss_mb.max(sampled);
                        peaks.insert(name.clone(), NodePeak { rss_mb, ..recorded });
                    }
                    self.job_end.exited(name, status.success(), Instant::now());
                    if status.success() {
                        finished.push((name.clone(), self.started.elapsed()));
                        if let Some(job) = &self.job {
                            lock(job).node_finished();
                        }
                    } else if self.death_is_leave && status.code().is_none() {
                        // Killed: under `on_node_death = "leave"` the others carry on.
                        tracing::warn!(node = %name, %status, "node died; the job carries on without it");
                        lost.push(name.clone());
                    } else {
                        let follower = status.code() == Some(i32::from(STOPPED_BY_PEER));
                        failed.push((name.clone(), status.to_string(), follower));
                        first_failure_at.get_or_insert_with(Instant::now);
                    }
                }
            }
            let root = failed.iter().find(|f| !f.2);
            let waited_enough = first_failure_at.is_some_and(|t| t.elapsed() >= ROOT_CAUSE_GRACE);
            if let Some((name, status, _)) = root.or(failed.first().filter(|_| waited_enough)) {
                break Err(node_failure(&self.run_dir, &self.roles, name, status));
            }
            if !self.job_end.may_start_standby() {
                for (at, i) in self.standby.drain(..) {
                    let name = self.roles.get(i).map_or("?", |(n, _)| n.as_str());
                    tracing::info!(node = %name, at = ?at, "the job finished before the scale plan started this node");
                }
            }
            if finished.len() + lost.len() == self.children.len() {
                break Ok(());
            }
            if self.job_end.standby_missed_the_job(Instant::now()) {
                // Only standby nodes still run: joiners whose coordinator already left.
                for (name, child) in &mut self.children {
                    if matches!(child.try_wait(), Ok(None)) {
                        tracing::info!(node = %name, "the job ended before this standby node joined; stopping it");
                    }
                }
                stop_all(&mut self.children).await;
                break Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                break Err(LaunchError::Timeout(timeout.unwrap_or_default()));
            }
            if let Some(job) = &self.job {
                self.bar
                    .set_message(lock(job).message(self.started.elapsed()));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                cause = &mut signal => break Err(LaunchError::Interrupted(cause)),
            }
        };
        if outcome.is_ok() {
            // The nodes' last lines may still be in the pipes.
            let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
            for relay in self.relays.drain(..) {
                let _ = tokio::time::timeout_at(deadline, relay).await;
            }
        }
        self.bar.finish_and_clear();
        if outcome.is_err() {
            stop_all(&mut self.children).await;
        }
        let progress = self.job.as_ref().and_then(|job| {
            lock(job)
                .current()
                .map(|(node, r)| (node.to_string(), r.clone()))
        });
        outcome.map(|()| LaunchReport {
            nodes: finished,
            run_dir: self.run_dir.clone(),
            progress,
            peaks,
        })
    }
}

/// How node `name` failed: the error it left in `run_dir`, else its exit status.
fn node_failure(
    run_dir: &Path,
    roles: &[(String, String)],
    name: &str,
    status: &str,
) -> LaunchError {
    let roles = roles
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, r)| r.clone())
        .unwrap_or_default();
    let left = |kind: &str| {
        std::fs::read_to_string(run_dir.join(kind).join(name))
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    };
    if let Some(cause) = left(REQUEST_FAILURES) {
        return LaunchError::RequestFailed {
            caller: name.to_string(),
            roles,
            cause,
        };
    }
    LaunchError::NodeFailed {
        name: name.to_string(),
        roles,
        cause: left(FAILURES).unwrap_or_else(|| status.to_string()),
    }
}

/// Stops every child: SIGTERM to its group, SIGKILL after [`SHUTDOWN_GRACE`]; reaps them.
async fn stop_all(children: &mut [(String, Child)]) {
    let running: Vec<usize> = (0..children.len())
        .filter(|&i| matches!(children[i].1.try_wait(), Ok(None)))
        .collect();
    for &i in &running {
        tracing::debug!(node = %children[i].0, "stopping");
        signal_group(&mut children[i].1, libc::SIGTERM);
    }
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    for &i in &running {
        let child = &mut children[i].1;
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, child.wait()).await.is_err() {
            signal_group(child, libc::SIGKILL);
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, child.wait()).await;
        }
    }
}

/// Sends `signal` to the child's process group, else (no group to signal) kills the child.
fn signal_group(child: &mut Child, signal: libc::c_int) {
    // SAFETY: killpg only sends a signal; the group is the child's own (process_group(0)).
    let sent = child
        .id()
        .is_some_and(|pid| unsafe { libc::killpg(pid as libc::pid_t, signal) } == 0);
    if !sent {
        let _ = child.start_kill();
    }
}

/// A child's output: stdout, or stderr with the job that takes its progress reports.
enum Stream {
    Out,
    Err(Option<SharedProgress>),
}

/// Forwards a child's stdout unchanged and its stderr prefixed `[node]` (minus reports).
fn forward<R>(name: &str, stream: Option<R>, bar: ProgressBar, which: Stream) -> Option<Relay>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let stream = stream?;
    let node = name.to_string();
    Some(tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Stream::Err(Some(job)) = &which
                && lock(job).offer(&node, &line)
            {
                continue;
            }
            bar.suspend(|| {
                let _ = match which {
                    Stream::Out => writeln!(std::io::stdout().lock(), "{line}"),
                    Stream::Err(_) => writeln!(std::io::stderr().lock(), "[{node}] {line}"),
                };
            });
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use petrel_actors::Topology;

    #[test]
    fn launch_flags_are_stripped_for_children() {
        let args = [
            "--rounds",
            "5",
            "--processes",
            "--run-dir",
            "/x",
            "--timeout-s=9",
            "--verbose",
        ]
        .map(OsString::from);
        assert_eq!(
            strip_launch_flags(args.into_iter()),
            ["--rounds", "5", "--verbose"].map(OsString::from)
        );
    }

    #[test]
    fn nodes_on_emulated_hosts_get_one_host_each_and_run_inside_it() {
        let mut s = topo();
        let hosts = crate::netns::Hosts {
            prefix: "pc7".into(),
            count: 2,
        };
        place_on_hosts(&mut s, &hosts).unwrap();
        let addrs: Vec<&str> = s.nodes.iter().map(|n| n.addr.as_str()).collect();
        assert_eq!(addrs, ["198.18.0.1:7000", "198.18.0.2:7000"]);
        let e = place_on_hosts(
            &mut s,
            &crate::netns::Hosts {
                prefix: "pc7".into(),
                count: 1,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("2 nodes but 1 hosts"), "{e}");
        let child = ChildCommand::PetrelNode {
            program: "/bin/petrel".into(),
        };
        let cmd = child.command("b", Path::new("/r/cluster.toml"), Some("pc7-h1"));
        let std = cmd.as_std();
        assert_eq!(std.get_program(), "ip");
        let args: Vec<&std::ffi::OsStr> = std.get_args().collect();
        assert_eq!(
            args,
            [
                "netns",
                "exec",
                "pc7-h1",
                "/bin/petrel",
                "node",
                "--config",
                "/r/cluster.toml",
                "--name",
                "b"
            ]
        );
        let plain = child.command("b", Path::new("/r/cluster.toml"), None);
        assert_eq!(plain.as_std().get_program(), "/bin/petrel");
    }

    /// A node whose request failed in another node's handler leaves that failure, and the
    /// launcher reports it as it is, not as a failure of the caller.
    #[test]
    fn a_handler_failure_elsewhere_is_reported_as_that_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let remote = NodeError::Ask(petrel_actors::AskError::Remote {
            actor: "mapper".into(),
            node: "map-1".into(),
            from: "driver".into(),
            error: "boom".into(),
        });
        let role_failed = LaunchError::from(NodeError::Role {
            node: "driver".into(),
            role: "drive".into(),
            source: Box::new(remote),
        });
        assert_eq!(report_failure(dir.path(), Some("driver"), &role_failed), 1);
        let roles = [("driver".to_string(), "drive".to_string())];
        let e = node_failure(dir.path(), &roles, "driver", "exit status: 1");
        assert!(matches!(e, LaunchError::RequestFailed { .. }), "{e}");
        assert_eq!(
            format!("{e:?}"),
            "role drive on driver: actor mapper on node map-1 failed to handle a request from driver: boom"
        );
        // A failure of the node's own stays its own.
        let own = LaunchError::from(NodeError::Config("bad".into()));
        assert_eq!(report_failure(dir.path(), Some("w1"), &own), 1);
        let e = node_failure(dir.path(), &[], "w1", "exit status: 1");
        assert!(matches!(e, LaunchError::NodeFailed { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("node w1 failed (configuration: bad)"),
            "{e}"
        );
    }

    #[test]
    fn modes_follow_the_flags() {
        let mut a = LaunchArgs::default();
        assert_eq!(a.mode(), LaunchMode::InProcess);
        a.processes = true;
        assert_eq!(a.mode(), LaunchMode::Processes);
        let a = LaunchArgs {
            config: Some("c.toml".into()),
            ..LaunchArgs::default()
        };
        assert!(matches!(a.mode(), LaunchMode::Node { name: None, .. }));
    }

    fn topo() -> Settings {
        Topology::builder("t")
            .node("a", &["x"])
            .node("b", &["y"])
            .build()
            .unwrap()
    }

    #[test]
    fn every_node_gets_a_port_and_a_metrics_port_of_its_own() {
        // Ports are picked and released at once; with 400 nodes two random picks of the
        // same port were likely (and a restarted job once failed on one).
        let mut builder = Topology::builder("many");
        let names: Vec<String> = (0..400).map(|i| format!("n{i}")).collect();
        for name in &names {
            builder = builder.node(name, &["x"]);
        }
        let mut settings = builder.build().unwrap();
        pick_ports(&mut settings).unwrap();
        reserve_metrics_ports(&mut settings).unwrap();
        let addrs: std::collections::HashSet<_> =
            settings.nodes.iter().map(|n| n.addr.clone()).collect();
        let metrics: std::collections::HashSet<_> = settings
            .nodes
            .iter()
            .map(|n| n.metrics_addr.clone().unwrap())
            .collect();
        assert_eq!(addrs.len(), 400);
        assert_eq!(metrics.len(), 400);
    }

    #[test]
    fn node_names_come_from_the_flag_and_must_exist() {
        let s = topo();
        assert_eq!(node_name(Some("b"), &s).unwrap(), "b");
        let e = node_name(Some("c"), &s).unwrap_err().to_string();
        assert!(
            e.contains("node c is not in the topology (nodes: a, b)"),
            "{e}"
        );
        assert!(node_name(Some("../a"), &s).is_err());
    }

    #[test]
    fn a_file_must_describe_the_programs_topology() {
        let code = topo();
        let mut file = code.clone();
        for n in &mut file.nodes {
            n.roles.clear();
        }
        let merged = merge_topology(&code, file.clone()).unwrap();
        assert_eq!(merged.nodes, code.nodes);
        file.nodes[1].roles = vec!["x".into()];
        let e = merge_topology(&code, file.clone()).unwrap_err().to_string();
        assert!(e.contains("node b"), "{e}");
        file.nodes.pop();
        let e = merge_topology(&code, file).unwrap_err().to_string();
        assert!(e.contains("names nodes a but"), "{e}");
    }
}
