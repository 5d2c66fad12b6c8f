//! One node of the cluster in this process (`--node`): its name, credentials, signals, and
//! the peak memory and failure it leaves for its launcher.

use super::{LAUNCH_DIR_ENV, LaunchError, RANK_VARIABLES, SHUTDOWN_GRACE, STOPPED_BY_PEER};
use petrel_actors::topology::Wiring;
use petrel_actors::{Cluster, NodeError, Settings, Transport, error_chain, validate_node_name};
use petrel_net::ClusterCredentials;
use petrel_observe::process;
use std::io::Write;
use std::path::{Path, PathBuf};

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
pub(super) fn record_peak(dir: &Path, node: &str, startup_file_mb: Option<f64>) {
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
pub(super) fn recorded_peak(dir: &Path, node: &str) -> Option<NodePeak> {
    serde_json::from_slice(&std::fs::read(peak_file(dir, node)).ok()?).ok()
}

/// A node under a launcher leaves its error in the run directory for the launcher to print;
/// returns the exit code ([`STOPPED_BY_PEER`] when a peer's failure stopped it).
pub(super) fn report_failure(dir: &Path, node: Option<&str>, error: &LaunchError) -> u8 {
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
pub(super) const FAILURES: &str = "failures";
/// Where it leaves an error that another node's handler caused.
pub(super) const REQUEST_FAILURES: &str = "request-failures";

/// Runs one node of the cluster in `config`; returns its name (in the error, once known).
pub(super) fn run_one_node(
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
pub(super) fn merge_topology(code: &Settings, mut file: Settings) -> Result<Settings, LaunchError> {
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

pub(super) async fn wait_for_signal() -> String {
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
