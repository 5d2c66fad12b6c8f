//! `petrel run`: launches a whole cluster on this machine as separate processes.
//!
//! It resolves free ports, generates the cluster's certificates (unless the settings name
//! a `certs_dir`), writes the resolved settings next to them, and spawns one
//! `petrel node --config … --name …` child per node. Child output is forwarded line by line
//! with a `[node]` prefix. The first child that fails (or Ctrl-C) stops all the others,
//! and the launcher returns an error naming it.

use indicatif::{ProgressBar, ProgressStyle};
use petrel_actors::topology::reserve_ports;
use petrel_actors::{NodeError, Settings, Transport};
use petrel_net::tls::ClusterCa;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Exit code of `petrel node` when another node's failure stopped it (it only followed).
pub const STOPPED_BY_PEER: u8 = 3;

/// How long `wait` looks for the node where a failure started once only followers exited.
const ROOT_CAUSE_GRACE: Duration = Duration::from_secs(1);

/// Why a launched cluster could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The settings could not be read, resolved or written.
    #[error(transparent)]
    Settings(#[from] NodeError),
    /// `petrel run` starts one process per node, which needs QUIC between them.
    #[error(
        "petrel run starts one process per node, which needs cluster.transport = \"quic\" (got \"{0}\")"
    )]
    NeedsQuic(Transport),
    /// Spawning, waiting for or writing for a child failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The cluster's certificates could not be made.
    #[error(transparent)]
    Tls(#[from] petrel_net::TlsError),
    /// A node exited with an error (the one where the failure started).
    #[error("node {name} failed ({status}); its roles: {roles}")]
    NodeFailed {
        /// The node.
        name: String,
        /// Its roles, comma separated.
        roles: String,
        /// Its exit status.
        status: String,
    },
    /// Ctrl-C.
    #[error("interrupted; all nodes stopped")]
    Interrupted,
    /// The `--timeout-s` passed.
    #[error("cluster did not finish within {0:?}; all nodes stopped")]
    Timeout(Duration),
}

/// How [`start`] launches the nodes.
pub struct LaunchOptions {
    /// The binary that runs `node` (default: this executable).
    pub binary: PathBuf,
    /// Where certificates and resolved settings go (default: a fresh temporary directory).
    pub run_dir: Option<PathBuf>,
    /// Stop everything after this long.
    pub timeout: Option<Duration>,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
}

impl LaunchOptions {
    /// Runs this executable's `node` command, in a temporary directory, without a timeout.
    pub fn new() -> Result<Self, LaunchError> {
        Ok(Self {
            binary: std::env::current_exe()?,
            run_dir: None,
            timeout: None,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        })
    }
}

/// What a finished run reports.
#[derive(Debug)]
pub struct LaunchReport {
    /// Each node and when it finished, since the launch.
    pub nodes: Vec<(String, Duration)>,
    /// Where the certificates and resolved settings are.
    pub run_dir: PathBuf,
}

/// Resolves ports and certificates for `settings` and writes `cluster.toml` into `dir`.
pub fn prepare(mut settings: Settings, dir: &Path) -> Result<PathBuf, LaunchError> {
    std::fs::create_dir_all(dir)?;
    if settings.cluster.transport != Transport::Quic {
        return Err(LaunchError::NeedsQuic(settings.cluster.transport));
    }
    reserve_ports(&mut settings)?;
    reserve_metrics_ports(&mut settings)?;
    if settings.cluster.certs_dir.is_none() {
        let certs = dir.join("certs");
        let ca = ClusterCa::generate()?;
        ca.write(&certs)?;
        for n in &settings.nodes {
            ca.issue(&n.name)?.write(&certs, &n.name)?;
        }
        settings.cluster.certs_dir = Some(certs);
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, settings.to_toml()?)?;
    Ok(path)
}

/// Gives every node without a `metrics_addr` a free loopback port for `/metrics` (and a
/// port of 0 a free port), so the launcher knows where to scrape each node.
fn reserve_metrics_ports(settings: &mut Settings) -> Result<(), LaunchError> {
    for n in &mut settings.nodes {
        let addr = n
            .metrics_addr
            .clone()
            .unwrap_or_else(|| "127.0.0.1:0".into());
        let mut parsed: std::net::SocketAddr = addr.parse().map_err(|_| {
            NodeError::Config(format!("node {}: bad metrics_addr {addr:?}", n.name))
        })?;
        if parsed.port() == 0 {
            // Bound and released: the window for a race is tiny and only on this host.
            parsed.set_port(std::net::TcpListener::bind(parsed)?.local_addr()?.port());
        }
        n.metrics_addr = Some(parsed.to_string());
    }
    Ok(())
}

/// Runs the cluster described by `config` to completion.
pub async fn run(config: &Path, opts: LaunchOptions) -> Result<LaunchReport, LaunchError> {
    let settings = Settings::load(config)?;
    let timeout = opts.timeout;
    start(settings, opts).await?.wait(timeout).await
}

/// A launched cluster whose nodes are running.
pub struct Running {
    children: Vec<(String, Child)>,
    /// Where each node serves `/metrics`, by node name.
    metrics: Vec<(String, String)>,
    /// Roles of each node (for error messages), by node name.
    roles: Vec<(String, String)>,
    started: Instant,
    run_dir: PathBuf,
    bar: ProgressBar,
}

/// Launches one process per node of `settings` and returns at once.
pub async fn start(settings: Settings, opts: LaunchOptions) -> Result<Running, LaunchError> {
    // Unknown roles and bad `[app.*]` values fail here, before any process starts.
    crate::roles::builtin(settings.clone()).check_settings()?;
    let run_dir = match &opts.run_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!(
            "petrel-run-{}-{}",
            settings.cluster.name,
            std::process::id()
        )),
    };
    let resolved = prepare(settings.clone(), &run_dir)?;
    let metrics = Settings::load(&resolved)?
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.metrics_addr.clone().unwrap_or_default()))
        .collect();
    let names: Vec<String> = settings.nodes.iter().map(|n| n.name.clone()).collect();
    let bar = if opts.progress {
        let b = ProgressBar::new(names.len() as u64);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed_precise} nodes finished {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        ProgressBar::hidden()
    };
    let mut children: Vec<(String, Child)> = Vec::new();
    for name in &names {
        let mut cmd = Command::new(&opts.binary);
        cmd.arg("node")
            .arg("--config")
            .arg(&resolved)
            .arg("--name")
            .arg(name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        forward(name, child.stdout.take(), bar.clone());
        forward(name, child.stderr.take(), bar.clone());
        children.push((name.clone(), child));
    }
    tracing::info!(nodes = names.len(), dir = %run_dir.display(), "cluster launched");
    let roles = settings
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.roles.join(", ")))
        .collect();
    Ok(Running {
        children,
        metrics,
        roles,
        started: Instant::now(),
        run_dir,
        bar,
    })
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

    /// Each node's roles (comma separated), by node name.
    pub fn roles(&self) -> &[(String, String)] {
        &self.roles
    }

    /// Where the certificates and resolved settings are.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Waits until every node exited successfully, or stops them all at the first failure,
    /// naming the node where it started: nodes that exit with [`STOPPED_BY_PEER`] only
    /// followed another node's failure, so a root cause is awaited briefly before one of
    /// them is named. Also stops them all on Ctrl-C, or after `timeout`.
    pub async fn wait(mut self, timeout: Option<Duration>) -> Result<LaunchReport, LaunchError> {
        let deadline = timeout.map(|t| self.started + t);
        let mut finished: Vec<(String, Duration)> = Vec::new();
        // Nodes that exited non-zero: (name, status, stopped only because of a peer).
        let mut failed: Vec<(String, String, bool)> = Vec::new();
        let mut first_failure_at: Option<Instant> = None;
        let outcome = loop {
            for (name, child) in &mut self.children {
                if finished.iter().any(|(n, _)| n == name) || failed.iter().any(|f| &f.0 == name) {
                    continue;
                }
                if let Some(status) = child.try_wait()? {
                    if status.success() {
                        finished.push((name.clone(), self.started.elapsed()));
                        self.bar.inc(1);
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
                let roles = self
                    .roles
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_default();
                break Err(LaunchError::NodeFailed {
                    name: name.clone(),
                    roles,
                    status: status.clone(),
                });
            }
            if finished.len() == self.children.len() {
                break Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                break Err(LaunchError::Timeout(timeout.unwrap_or_default()));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = tokio::signal::ctrl_c() => break Err(LaunchError::Interrupted),
            }
        };
        self.bar.finish_and_clear();
        if outcome.is_err() {
            stop_all(&mut self.children).await;
        }
        outcome.map(|()| LaunchReport {
            nodes: finished,
            run_dir: self.run_dir,
        })
    }
}

/// SIGTERM-free stop: children are killed (they hold no state worth a graceful exit that
/// a dead peer would not also lose), then reaped.
async fn stop_all(children: &mut [(String, Child)]) {
    for (name, child) in children.iter_mut() {
        if matches!(child.try_wait(), Ok(None)) {
            tracing::info!(node = %name, "stopping");
            let _ = child.start_kill();
        }
    }
    for (_, child) in children.iter_mut() {
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    }
}

fn forward<R>(name: &str, stream: Option<R>, bar: ProgressBar)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let Some(stream) = stream else { return };
    let prefix = format!("[{name}]");
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if bar.is_hidden() {
                eprintln!("{prefix} {line}");
            } else {
                bar.println(format!("{prefix} {line}"));
            }
        }
    });
}
