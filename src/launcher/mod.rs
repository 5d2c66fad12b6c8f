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

mod job_end;
mod node;
mod processes;
#[cfg(test)]
mod tests;

use crate::train::progress::ProgressReport;
use petrel_actors::{Cluster, NodeError, Settings, error_chain};
use petrel_observe::process;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

pub use node::{NodePeak, node_name};
use node::{record_peak, report_failure, run_one_node};
pub use processes::{Running, start, start_cluster};

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
