//! The bench's node roles: shards serving the table, workers timing push, clock and pull
//! (and the same bytes through the echo actor), each leaving its report in the run directory.

use super::{DELTA, ECHO_ACTOR, SECTION, SHARD_ROLE, TABLE, WORKER_ROLE};
use actix::prelude::*;
use petrel_actors::{ActorRef, Cluster, HandlerError, Msg, NodeContext};
use petrel_messages::{Priority, Tensor, remote_message};
use petrel_ps::core::types::shard_of;
use petrel_ps::shells::{self, PsLayout};
use petrel_ps::{Consistency, PsClient, RowId, TableKind, TableSpec};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What the launched nodes read from `[app.ps_bench]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct PsBenchConfig {
    /// Bytes of the (split) row every worker pushes and pulls per iteration.
    pub(super) bytes: usize,
    pub(super) iters: u32,
    pub(super) warmup: u32,
    /// Where each node writes its report (`<node>.json`).
    pub(super) report_dir: Option<PathBuf>,
    pub(super) no_read_my_writes: bool,
}

/// Why a benchmark node failed (messages start with `ps bench:`).
type PsBenchError = petrel_actors::RoleError;

fn config_error(what: String) -> PsBenchError {
    format!("ps bench: {what}").into()
}

/// A transport-ceiling message from worker `worker` (the echo answers to its inbox).
#[derive(Serialize, Deserialize)]
struct PsBenchEcho {
    worker: u32,
    tensor: Tensor,
}
remote_message!(PsBenchEcho, "petrel.bench.ps_echo");

fn echo_inbox_name(worker: u32) -> String {
    format!("ps-bench-echo-inbox-{worker}")
}

/// Sends every echo straight back to its worker's inbox (on the worker's node).
struct EchoActor {
    /// Worker `w`'s inbox at index `w`.
    back: Vec<ActorRef<PsBenchEcho>>,
}

impl Actor for EchoActor {
    type Context = Context<Self>;
}

impl Handler<Msg<PsBenchEcho>> for EchoActor {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<PsBenchEcho>, _: &mut Context<Self>) -> Self::Result {
        let w = msg.body.worker as usize;
        let back = self
            .back
            .get(w)
            .ok_or_else(|| HandlerError::new(format!("no worker {w}")))?;
        back.tell(msg.body, Priority::NORMAL)
            .map_err(|e| HandlerError::new(e.to_string()))
    }
}

/// Hands echoes back to the worker's loop.
struct EchoInbox {
    tx: mpsc::UnboundedSender<Tensor>,
}

impl Actor for EchoInbox {
    type Context = Context<Self>;
}

impl Handler<Msg<PsBenchEcho>> for EchoInbox {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<PsBenchEcho>, _: &mut Context<Self>) -> Self::Result {
        let _ = self.tx.send(msg.body.tensor);
        Ok(())
    }
}

/// One node's report.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct NodeReport {
    pub(super) node: String,
    pub(super) peak_rss_mb: f64,
    /// Workers only: seconds per timed iteration of the echo, the PS loop and its `push` +
    /// `clock()`.
    pub(super) echo_iter_s: Vec<f64>,
    pub(super) echo_total_s: f64,
    pub(super) ps_iter_s: Vec<f64>,
    pub(super) ps_total_s: f64,
    pub(super) push_iter_s: Vec<f64>,
    #[serde(default)]
    pub(super) shm_messages: u64,
}

fn layout_of(ctx: &NodeContext) -> PsLayout {
    PsLayout {
        shard_nodes: ctx.nodes_with_role(SHARD_ROLE),
        worker_nodes: ctx.nodes_with_role(WORKER_ROLE),
    }
}

/// Width of each shard's row and the row ids (one per shard, on that shard).
pub(super) fn rows_for(bytes: usize, shards: u32) -> Result<(u32, Vec<RowId>), PsBenchError> {
    let unit = 4 * shards.max(1) as usize;
    if bytes == 0 || !bytes.is_multiple_of(unit) {
        return Err(config_error(format!(
            "size {bytes} is not a positive multiple of 4 x {shards} shards"
        )));
    }
    let width =
        u32::try_from(bytes / unit).map_err(|_| config_error(format!("size {bytes} too large")))?;
    let rows = (0..shards)
        .map(|s| {
            (0..4096u64)
                .map(RowId)
                .find(|&r| shard_of(TABLE, r, shards) == s)
                .ok_or_else(|| config_error(format!("no row maps to shard {s}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((width, rows))
}

pub(super) fn table_for(width: u32, read_my_writes: bool) -> TableSpec {
    TableSpec::new(0, "bench", TableKind::Dense { width }, Consistency::Bsp)
        .with_read_my_writes(read_my_writes)
}

fn write_report(cfg: &PsBenchConfig, report: &NodeReport) -> Result<(), PsBenchError> {
    if let Some(dir) = &cfg.report_dir {
        let path = dir.join(format!("{}.json", report.node));
        let text = serde_json::to_string(report)?;
        std::fs::write(&path, text)
            .map_err(|e| config_error(format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}

async fn shard_role(ctx: NodeContext) -> Result<(), PsBenchError> {
    let cfg: PsBenchConfig = ctx.settings.app(SECTION)?;
    let layout = layout_of(&ctx);
    let (width, _) = rows_for(cfg.bytes, layout.n_shards())?;
    let back = (layout.worker_nodes.iter().enumerate())
        .map(|(w, n)| {
            ctx.node
                .actor_at::<PsBenchEcho>(n, &echo_inbox_name(w as u32))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let echo = EchoActor { back }.start();
    ctx.node.register(ECHO_ACTOR, echo)?.accept::<PsBenchEcho>();
    ctx.barrier("ps-bench.echo").await?;
    let mut handles = Vec::new();
    for s in layout.shards_on(&ctx.spec.name) {
        handles.push(shells::start_shard(
            &ctx.node,
            &layout,
            s,
            vec![table_for(width, !cfg.no_read_my_writes)],
            &petrel_ps::RuleRegistry::new(),
            None,
        )?);
    }
    ctx.barrier("ps-bench.ps").await?;
    for h in handles {
        h.wait().await?;
    }
    write_report(
        &cfg,
        &NodeReport {
            node: ctx.spec.name.clone(),
            peak_rss_mb: petrel_observe::process::peak_rss_mb(None).unwrap_or(0.0),
            shm_messages: ctx.node.net_stats().shared_memory_messages,
            ..NodeReport::default()
        },
    )
}

async fn worker_role(ctx: NodeContext) -> Result<(), PsBenchError> {
    let cfg: PsBenchConfig = ctx.settings.app(SECTION)?;
    let layout = layout_of(&ctx);
    let me = layout
        .worker_nodes
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or_else(|| config_error(format!("{} is not a worker", ctx.spec.name)))?
        as u32;
    let shards = layout.n_shards();
    let (width, rows) = rows_for(cfg.bytes, shards)?;
    let mut report = NodeReport {
        node: ctx.spec.name.clone(),
        ..NodeReport::default()
    };

    // The transport ceiling: the same bytes, one tell each way, no PS layer.
    let (tx, mut rx) = mpsc::unbounded_channel();
    ctx.node
        .register(&echo_inbox_name(me), EchoInbox { tx }.start())?
        .accept::<PsBenchEcho>();
    ctx.barrier("ps-bench.echo").await?;
    let echoes = layout
        .shard_nodes
        .iter()
        .map(|n| ctx.node.actor_at::<PsBenchEcho>(n, ECHO_ACTOR))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tensors: Vec<Tensor> = (0..shards)
        .map(|_| Tensor::from_vec(vec![DELTA; width as usize]))
        .collect();
    let timeout = ctx.node.default_timeout();
    // quinn's MTU discovery probes only while a connection is idle: one untimed echo opens
    // every connection, then a pause lets the MTU climb before anything is timed.
    let priming = 1;
    let mut started = Instant::now();
    for step in 0..priming + cfg.warmup + cfg.iters {
        if step == priming {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let timed = step >= priming + cfg.warmup;
        if step == priming + cfg.warmup {
            started = Instant::now();
        }
        let t = Instant::now();
        for (e, tensor) in echoes.iter().zip(tensors.drain(..)) {
            e.tell(PsBenchEcho { worker: me, tensor }, Priority::NORMAL)?;
        }
        for _ in 0..shards {
            let back = tokio::time::timeout(timeout, rx.recv())
                .await
                .ok()
                .flatten()
                .ok_or_else(|| config_error("the echo stopped answering".into()))?;
            tensors.push(back);
        }
        if timed {
            report.echo_iter_s.push(t.elapsed().as_secs_f64());
        }
    }
    report.echo_total_s = started.elapsed().as_secs_f64();
    drop(tensors);

    // The parameter server.
    ctx.barrier("ps-bench.ps").await?;
    shells::wait_for_shards(&ctx.node, &layout, Duration::from_secs(30)).await?;
    let client = PsClient::start(
        &ctx.node,
        &layout,
        me,
        vec![table_for(width, !cfg.no_read_my_writes)],
    )?;
    let workers = layout.n_workers() as f32;
    let mut started = Instant::now();
    for i in 0..cfg.warmup + cfg.iters {
        if i == cfg.warmup {
            started = Instant::now();
        }
        let t = Instant::now();
        for &r in &rows {
            client.push(TABLE, r, petrel_ps::Row::Dense(vec![DELTA; width as usize]))?;
        }
        client.clock()?;
        let pushed = t.elapsed();
        let got = client.get_many_shared(TABLE, &rows).await?;
        let elapsed = t.elapsed();
        let value = got.first().map_or(f32::NAN, |r| r.get(width - 1));
        if let Err((lowest, highest)) = check_pull(value, i + 1, workers, DELTA) {
            return Err(config_error(format!(
                "pulled value {value} after {} pushes of every worker, expected {lowest} to {highest}",
                i + 1
            )));
        }
        if i >= cfg.warmup {
            report.ps_iter_s.push(elapsed.as_secs_f64());
            report.push_iter_s.push(pushed.as_secs_f64());
        }
    }
    report.ps_total_s = started.elapsed().as_secs_f64();
    client.leave()?;
    report.peak_rss_mb = petrel_observe::process::peak_rss_mb(None).unwrap_or(0.0);
    report.shm_messages = ctx.node.net_stats().shared_memory_messages;
    write_report(&cfg, &report)
}

/// Checks a BSP pull after `pushes` clocks of `workers` workers, each pushing `delta`: it
/// holds every push so far, and at most one more of each other worker (`Err`: the range).
pub(super) fn check_pull(
    value: f32,
    pushes: u32,
    workers: f32,
    delta: f32,
) -> Result<(), (f32, f32)> {
    let lowest = delta * workers * pushes as f32;
    let highest = lowest + delta * (workers - 1.0);
    let steps = (value - lowest) / delta;
    if value >= lowest && value <= highest && steps == steps.round() {
        Ok(())
    } else {
        Err((lowest, highest))
    }
}

/// Adds the roles `ps-bench-shard` and `ps-bench-worker`.
pub(crate) fn register(cluster: Cluster) -> Cluster {
    cluster
        .app_section::<PsBenchConfig>(SECTION)
        .role(SHARD_ROLE, shard_role)
        .role(WORKER_ROLE, worker_role)
}
