//! One P3 job as `petrel node` processes on 127.0.0.1 or network namespaces.

use crate::CliError;
use crate::launcher::{self, LaunchMode, LaunchOptions};
use crate::netns::Hosts;
use petrel_actors::Topology;
use petrel_net::NetConfig;
use petrel_p3::roles::{P3Settings, WorkerReportFile};
use petrel_p3::shells::{SHARD_ROLE, WORKER_ROLE};
use std::path::Path;
use std::time::{Duration, Instant};

/// Tears the namespaces down when dropped (also on error and panic).
pub struct Teardown(pub Hosts);

impl Drop for Teardown {
    fn drop(&mut self) {
        self.0.down();
    }
}

/// A namespace prefix unique to this process (interface names stay within 15 chars).
pub fn prefix() -> String {
    format!("p3n{}", std::process::id() % 10_000)
}

/// CPU seconds (user + system) of this process's waited-for children, from /proc.
pub fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // cutime is field 16, cstime 17; after ')' field 3 is index 0.
    let cu: f64 = f.get(13)?.parse().ok()?;
    let cs: f64 = f.get(14)?.parse().ok()?;
    Some((cu + cs) / 100.0)
}

fn node_names(cfg: &P3Settings) -> Vec<(String, &'static str)> {
    (0..cfg.workers)
        .map(|w| (format!("w{w}"), WORKER_ROLE))
        .chain((0..cfg.shards).map(|s| (format!("s{s}"), SHARD_ROLE)))
        .collect()
}

/// Runs one job as node processes, on 127.0.0.1 or one per namespace of `hosts` (shaped by
/// `tc`). Returns the workers' reports and the CPU cores the nodes used on average.
pub fn run_job(
    hosts: Option<&Hosts>,
    cfg: &P3Settings,
    net: &NetConfig,
    dir: &Path,
    limit: Duration,
) -> Result<(Vec<WorkerReportFile>, f64), CliError> {
    // Before the settings are written for the nodes: a NaN would not survive TOML.
    cfg.validate().map_err(CliError::P3Setting)?;
    let mut topo = Topology::builder("p3");
    for (name, role) in node_names(cfg) {
        topo = topo.node(&name, &[role]);
    }
    let net = NetConfig {
        shaper: net.shaper.clone().filter(|_| hosts.is_none()),
        ..net.clone()
    };
    let app = serde_json::to_value(cfg).map_err(CliError::JsonOutput)?;
    let settings = topo
        .with(|s| {
            s.net = net;
            s.cluster.request_timeout_ms = cfg.ask_timeout_ms;
            s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
            s.app.insert("p3".into(), app);
        })
        .build()?;
    let mut opts = LaunchOptions::new()?;
    opts.run_dir = Some(dir.to_path_buf());
    opts.timeout = Some(limit);
    opts.progress = false;
    opts.netns = hosts.map(|h| h.prefix.clone());
    let cpu0 = children_cpu_seconds();
    let t0 = Instant::now();
    launcher::launch_with(
        &crate::roles::builtin(settings),
        LaunchMode::Processes,
        opts,
    )?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, children_cpu_seconds()) {
        (Some(a), Some(b)) => (b - a) / wall.max(1e-9),
        _ => f64::NAN,
    };
    let reports = (0..cfg.workers)
        .map(|w| WorkerReportFile::read(&cfg.report_dir, w))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((reports, cpu))
}
