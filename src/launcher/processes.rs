//! `--processes`: the private run directory, one child process per node, and their relays.

use super::job_end::JobEnd;
use super::node::{FAILURES, NodePeak, REQUEST_FAILURES, recorded_peak, wait_for_signal};
use super::{
    ChildCommand, LAUNCH_DIR_ENV, LaunchError, LaunchOptions, LaunchReport, ROOT_CAUSE_GRACE,
    SHUTDOWN_GRACE, STOPPED_BY_PEER, place_on_hosts,
};
use crate::train::progress::{JobProgress, REPORTS_ENV};
use indicatif::{ProgressBar, ProgressStyle};
use petrel_actors::topology::pick_ports;
use petrel_actors::{Cluster, NodeError, Settings, Transport};
use petrel_net::tls::ClusterCa;
use petrel_observe::process;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

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
pub(super) fn reserve_metrics_ports(settings: &mut Settings) -> Result<(), LaunchError> {
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
pub(super) fn node_failure(
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
