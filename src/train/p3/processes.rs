//! One P3 job as `petrel node` processes on 127.0.0.1 or network namespaces.

use crate::CliError;
use crate::netns::Hosts;
use petrel_actors::Topology;
use petrel_net::NetConfig;
use petrel_p3::roles::{P3Settings, WorkerReportFile};
use petrel_p3::shells::{SHARD_ROLE, WORKER_ROLE};
use std::path::Path;
use std::time::Duration;

pub use crate::netns::Teardown;

/// A namespace prefix unique to this process (interface names stay within 15 chars).
pub fn prefix() -> String {
    crate::netns::process_prefix("p3n")
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
    let cluster = crate::roles::builtin(settings);
    let (_, cpu) = crate::netns::run_nodes(&cluster, hosts, dir, limit)?;
    let reports = (0..cfg.workers)
        .map(|w| WorkerReportFile::read(&cfg.report_dir, w))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((reports, cpu))
}
