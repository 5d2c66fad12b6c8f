//! One P3 job as `petrel node` processes on 127.0.0.1 or network namespaces.

use crate::CliError;
use crate::netns::Hosts;
use crate::train::Membership;
use petrel_actors::{JobTransport, Topology};
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
    let fixed = Membership::default();
    run_job_with(hosts, cfg, net, dir, limit, &fixed, JobTransport::Processes)
}

/// [`run_job`] with `membership`'s standby workers (after the starting ones, `w{n}`...),
/// standby shards (`s{n}`...) and
/// scale plan, on `transport` (memory or QUIC: the nodes are threads of this process).
/// Returns the report of every worker that ran, in worker order (a standby worker that
/// never started has none).
pub fn run_job_with(
    hosts: Option<&Hosts>,
    cfg: &P3Settings,
    net: &NetConfig,
    dir: &Path,
    limit: Duration,
    membership: &Membership,
    transport: JobTransport,
) -> Result<(Vec<WorkerReportFile>, f64), CliError> {
    // Before the settings are written for the nodes: a NaN would not survive TOML.
    cfg.validate().map_err(CliError::P3Setting)?;
    let mut topo = Topology::builder("p3");
    for (name, role) in node_names(cfg) {
        topo = topo.node(&name, &[role]);
    }
    let all_workers = cfg.workers + membership.plan.standby_workers;
    for w in cfg.workers..all_workers {
        topo = topo.standby_node(&format!("w{w}"), &[WORKER_ROLE]);
    }
    for s in cfg.shards..cfg.shards + membership.plan.standby_shards {
        topo = topo.standby_node(&format!("s{s}"), &[SHARD_ROLE]);
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
            s.cluster.scale.clone_from(&membership.plan.scale);
            if *membership != Membership::default() {
                // The coordinator's node, which cannot leave, is shard 0 (it keeps slice
                // 0), so any worker and any other shard may.
                s.cluster.coordinator = Some("s0".into());
            }
            s.cluster.transport = transport.cluster_transport();
            s.app.insert("p3".into(), app);
        })
        .build()?;
    petrel_p3::roles::check_membership(&settings, cfg)?;
    let cluster = crate::roles::builtin(settings);
    let cpu = match transport {
        JobTransport::Processes => crate::netns::run_nodes(&cluster, hosts, dir, limit)?.1,
        JobTransport::Memory | JobTransport::Quic => {
            cluster.run_in_process()?;
            0.0
        }
    };
    let mut reports = Vec::with_capacity(all_workers);
    for w in 0..all_workers {
        match WorkerReportFile::read(&cfg.report_dir, w) {
            Ok(r) => reports.push(r),
            Err(_) if w >= cfg.workers => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((reports, cpu))
}
