//! `bench managed --netns`: every node a `petrel node` process of its own in a network
//! namespace of its own, each link limited by `tc` at `--mbit` on both ends. The monitor
//! is a node of its own too, so its evaluations do not queue behind a shard's server push.

use super::ManagedBenchArgs;
use crate::BenchError;
use petrel::launcher::{LaunchError, NodePeak};
use petrel::netns::{Hosts, LinkShape, Teardown};
use petrel_actors::{Settings, Topology};
use petrel_ps::kit::PsApp;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The node names of a run: the shards, the monitor, the workers (host `i` is node `i`).
pub(super) fn node_names(args: &ManagedBenchArgs) -> Vec<String> {
    let shards = (0..args.cluster.shards.max(1)).map(|s| format!("shard-{s}"));
    let workers = (0..args.cluster.workers.max(1)).map(|w| format!("worker-{w}"));
    shards
        .chain(std::iter::once("monitor".to_string()))
        .chain(workers)
        .collect()
}

/// The emulated hosts of every run (torn down when dropped), or a clear error when this
/// machine cannot make them.
pub(super) fn hosts(args: &ManagedBenchArgs) -> Result<Teardown, BenchError> {
    petrel::netns::available().map_err(|e| BenchError::Launch(LaunchError::Netns(e)))?;
    let shape = LinkShape {
        rate_mbit: Some(args.mbit),
        ..LinkShape::default()
    };
    let prefix = petrel::netns::process_prefix("pmn");
    let hosts = Hosts::up(&prefix, node_names(args).len(), &shape)
        .map_err(|e| BenchError::Launch(LaunchError::Netns(e)))?;
    Ok(Teardown(hosts))
}

/// The cluster settings of `A` on the run's nodes, `cfg` as its `[app.*]` section.
fn settings<A: PsApp>(args: &ManagedBenchArgs, cfg: &A::Config) -> Result<Settings, BenchError>
where
    A::Config: serde::Serialize,
{
    let roles = A::BUILTIN_ROLES;
    let mut topo = Topology::builder(A::NAME);
    for name in node_names(args) {
        let role = match name.split('-').next() {
            Some("shard") => roles.shard,
            Some("worker") => roles.worker,
            _ => roles.monitor,
        };
        topo = topo.node(&name, &[role]);
    }
    let app = petrel::train::section_value(cfg)
        .map_err(|e| BenchError::Incomplete(format!("{} settings: {e}", A::NAME)))?;
    let settings = topo
        .with(|s| {
            // The kernel shapes the links; a slow sampling sweep must not look like death.
            s.net.shaper = None;
            s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
            s.cluster.request_timeout_ms = s.cluster.request_timeout_ms.max(120_000);
            s.app.insert(A::SECTION.into(), app);
        })
        .build()?;
    Ok(settings)
}

/// A fresh directory for one run's certificates, settings and outputs.
pub(super) fn run_dir() -> PathBuf {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    std::env::temp_dir().join(format!("petrel-managed-netns-{pid}-{run}"))
}

/// What a run's node processes used: each node's CPU seconds and seconds waiting for a
/// core, and the cores all nodes used on average.
pub(super) struct NodeFigures {
    pub cpu_s_by_node: BTreeMap<String, f64>,
    pub runqueue_wait_s_by_node: BTreeMap<String, f64>,
    pub cpu_cores: f64,
}

/// Runs `A` with `cfg` (whose outputs go to `out`, inside `dir`) as one process per node on
/// `hosts` and reads the monitor's `metrics.json` as `T`; the run directory is removed
/// afterwards.
pub(super) fn run<A: PsApp, T: DeserializeOwned>(
    args: &ManagedBenchArgs,
    hosts: &Hosts,
    cfg: &A::Config,
    (dir, out): (&Path, &Path),
) -> Result<(T, NodeFigures), BenchError>
where
    A::Config: serde::Serialize,
{
    let cluster = petrel::roles::builtin(settings::<A>(args, cfg)?);
    let limit = Duration::from_secs_f64(args.netns_timeout_s.max(1.0));
    let ran = petrel::netns::run_nodes(&cluster, Some(hosts), dir, limit);
    let read = ran
        .map_err(BenchError::from)
        .and_then(|(report, cpu_cores)| {
            let path = out.join("metrics.json");
            let text = std::fs::read(&path).map_err(BenchError::io(path.display().to_string()))?;
            let by_node = |f: fn(&NodePeak) -> Option<f64>| {
                (report.peaks.iter())
                    .filter_map(|(node, peak)| Some((node.clone(), f(peak)?)))
                    .collect()
            };
            let nodes = NodeFigures {
                cpu_s_by_node: by_node(|p| p.cpu_s),
                runqueue_wait_s_by_node: by_node(|p| p.runqueue_wait_s),
                cpu_cores,
            };
            Ok((serde_json::from_slice(&text)?, nodes))
        });
    let _ = std::fs::remove_dir_all(dir);
    read
}
