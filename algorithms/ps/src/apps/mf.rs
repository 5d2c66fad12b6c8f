//! Matrix factorization by SGD on the parameter server.
//!
//! Model: `rating ~ mean + u_user . v_item`. Two dense PS tables of width `rank`: `users`
//! (table 0) and `items` (table 1). A stored row is the *offset* from a deterministic random
//! initial value (`init_value`), so no initialisation round is needed and every node agrees.
//! Worker `w` owns the users `u % n_workers == w` (their ratings and their rows: only it writes
//! them, so the users table is `Async` and read-my-writes gives the exact value); the items
//! table has the job's consistency model (BSP, SSP, ESSP or async) and is shared by everyone.
//!
//! Per clock a worker takes the next mini-batch of its ratings, reads the rows it touches
//! (`get_many`; under async it also prefetches fresh copies without waiting), runs sequential
//! SGD on local copies, `batch_inc`s the differences and calls `clock()`. A straggler is
//! emulated by stretching a worker's clock to `clock_ms * factor` (sleeping for the difference
//! between that and the real compute time; the other workers' clocks take `clock_ms`).
//!
//! A monitor (role `ps-monitor`) snapshots the shards every `eval_ms`, computes the held-out
//! RMSE of the global model, records the convergence curve, and tells every worker to stop
//! once the target RMSE is reached, `max_clocks` completed or `max_seconds` passed. It then
//! collects the workers' staleness statistics and writes `model.json` and `metrics.json`.
//!
//! Roles: `ps-shard` (one shard per listing node), `ps-worker` (one worker per listing node),
//! `ps-monitor` (exactly one node). Settings: `[app.mf]` ([`MfConfig`]).

use crate::core::rules::RuleRegistry;
use crate::core::stats::{StalenessReport, StalenessStats};
use crate::core::types::{Consistency, Row, RowId, TableId, TableSpec};
use crate::shells::{
    self, PsClient, PsLayout, ShardQuery, TablesBuilder, ToClient, client_actor_name,
};
use actix::prelude::*;
use petrel_actors::{Cluster, HandlerError, Msg, Node, NodeContext, Settings};
use petrel_messages::{Priority, remote_message};
use petrel_ml::data::ratings::{Ratings, load_ratings};
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const USERS: TableId = TableId(0);
pub const ITEMS: TableId = TableId(1);

/// `[app.mf]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct MfConfig {
    /// Ratings file (`user item rating` triplets or MatrixMarket); synthetic data when unset.
    pub data: Option<PathBuf>,
    pub synthetic_users: usize,
    pub synthetic_items: usize,
    pub synthetic_rank: usize,
    pub synthetic_observed: f64,
    pub synthetic_noise: f32,
    pub seed: u64,
    pub test_fraction: f64,
    /// Factor rank of the model.
    pub rank: u32,
    pub learning_rate: f32,
    pub regularization: f32,
    /// Scale of the random initial factors.
    pub init_scale: f32,
    /// "bsp", "ssp", "essp" or "async" (items table).
    pub consistency: String,
    pub staleness: u32,
    /// Clocks per pass over a worker's ratings.
    pub batches_per_epoch: u32,
    pub max_clocks: u64,
    pub max_seconds: f64,
    /// Stop once the held-out RMSE is at or below this.
    pub target_rmse: Option<f64>,
    pub eval_ms: u64,
    /// Emulated compute time per clock (0: just the real compute).
    pub clock_ms: f64,
    /// Worker slowed down by `straggler_factor` (its clocks take `clock_ms * factor`).
    pub straggler: Option<u32>,
    pub straggler_factor: f64,
    /// Output directory for `model.json` and `metrics.json`.
    pub out: Option<PathBuf>,
    /// Test hook: worker `w` fails at clock `c` (`[w, c]`).
    pub fail_worker_at: Option<(u32, u64)>,
}

impl Default for MfConfig {
    fn default() -> Self {
        Self {
            data: None,
            synthetic_users: 600,
            synthetic_items: 300,
            synthetic_rank: 5,
            synthetic_observed: 0.1,
            synthetic_noise: 0.1,
            seed: 7,
            test_fraction: 0.1,
            rank: 8,
            learning_rate: 0.05,
            regularization: 0.02,
            init_scale: 0.3,
            consistency: "ssp".into(),
            staleness: 3,
            batches_per_epoch: 4,
            max_clocks: 200,
            max_seconds: 60.0,
            target_rmse: None,
            eval_ms: 100,
            clock_ms: 0.0,
            straggler: None,
            straggler_factor: 1.0,
            out: None,
            fail_worker_at: None,
        }
    }
}

impl MfConfig {
    pub fn consistency(&self) -> Result<Consistency, String> {
        Consistency::from_name(&self.consistency, self.staleness)
    }

    pub fn tables(&self) -> Result<Vec<TableSpec>, String> {
        if self.rank == 0 {
            return Err("rank must be >= 1".into());
        }
        TablesBuilder::new()
            .dense("users", self.rank, Consistency::Async)
            .dense("items", self.rank, self.consistency()?)
            .build()
            .map_err(|e| e.to_string())
    }
}

/// Train/test ratings and the global mean of the training ratings.
#[derive(Debug, Clone)]
pub struct MfData {
    pub train: Ratings,
    pub test: Ratings,
    pub mean: f32,
}

impl MfData {
    pub fn load(cfg: &MfConfig) -> Result<MfData, String> {
        let all = match &cfg.data {
            Some(p) => load_ratings(p).map_err(|e| e.to_string())?,
            None => {
                low_rank_ratings(&LowRankParams {
                    n_users: cfg.synthetic_users,
                    n_items: cfg.synthetic_items,
                    rank: cfg.synthetic_rank,
                    observed_fraction: cfg.synthetic_observed,
                    noise_std: cfg.synthetic_noise,
                    seed: cfg.seed,
                })
                .map_err(|e| e.to_string())?
                .ratings
            }
        };
        if all.entries.is_empty() {
            return Err("no ratings".into());
        }
        let (train, test) = all
            .train_test_split(cfg.test_fraction, cfg.seed ^ 0x5eed)
            .map_err(|e| e.to_string())?;
        let mean = if train.entries.is_empty() {
            0.0
        } else {
            (train.entries.iter().map(|e| f64::from(e.2)).sum::<f64>() / train.entries.len() as f64)
                as f32
        };
        Ok(MfData { train, test, mean })
    }
}

/// Deterministic initial value of `(table, row, col)`: uniform in `[-scale, scale]`.
pub fn init_value(table: TableId, row: u64, col: u32, scale: f32) -> f32 {
    let mut z = row
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(col).wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(u64::from(table.0) << 56);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    ((2.0 * u - 1.0) as f32) * scale
}

/// The model value of a row: initial value plus the stored offset.
pub fn factor(table: TableId, row: u64, stored: Option<&Row>, rank: u32, scale: f32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..rank)
        .map(|c| init_value(table, row, c, scale))
        .collect();
    if let Some(r) = stored {
        for (c, x) in v.iter_mut().enumerate() {
            *x += r.get(c as u32);
        }
    }
    v
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One sequential SGD pass over `batch` on local factor copies.
pub fn sgd_pass(
    batch: &[(u32, u32, f32)],
    users: &mut HashMap<u32, Vec<f32>>,
    items: &mut HashMap<u32, Vec<f32>>,
    mean: f32,
    lr: f32,
    reg: f32,
) {
    for &(u, i, r) in batch {
        let (Some(pu), Some(qi)) = (users.get_mut(&u), items.get_mut(&i)) else {
            continue;
        };
        let e = r - mean - dot(pu, qi);
        for k in 0..pu.len().min(qi.len()) {
            let (p, q) = (pu[k], qi[k]);
            pu[k] += lr * (e * q - reg * p);
            qi[k] += lr * (e * p - reg * q);
        }
    }
}

/// Root mean squared error of `mean + p_u . q_i` on `entries`.
pub fn rmse(
    entries: &[(u32, u32, f32)],
    user: impl Fn(u32) -> Vec<f32>,
    item: impl Fn(u32) -> Vec<f32>,
    mean: f32,
) -> f64 {
    if entries.is_empty() {
        return 0.0;
    }
    let mut uc: HashMap<u32, Vec<f32>> = HashMap::new();
    let mut ic: HashMap<u32, Vec<f32>> = HashMap::new();
    let mut se = 0.0f64;
    for &(u, i, r) in entries {
        let p = uc.entry(u).or_insert_with(|| user(u));
        let q = ic.entry(i).or_insert_with(|| item(i));
        let e = f64::from(r - mean - dot(p, q));
        se += e * e;
    }
    (se / entries.len() as f64).sqrt()
}

/// A worker's final report to the monitor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerDone {
    pub worker: u32,
    pub clocks: u64,
    /// Staleness of the reads of the shared (items) table.
    pub staleness: StalenessStats,
    pub compute_s: f64,
    pub wait_s: f64,
}
remote_message!(WorkerDone => (), "petrel.ps.mf.worker_done");

/// One point of the convergence curve.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct CurvePoint {
    pub seconds: f64,
    /// Min clock over shards (every worker completed this many clocks).
    pub clock: u64,
    pub rmse: f64,
}

/// What a run produced (also written to `metrics.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MfResult {
    pub consistency: String,
    pub staleness_bound: Option<u32>,
    pub n_workers: u32,
    pub n_shards: u32,
    pub train_ratings: usize,
    pub test_ratings: usize,
    pub initial_rmse: f64,
    pub final_rmse: f64,
    pub target_rmse: Option<f64>,
    pub reached_target: bool,
    pub time_to_target_s: Option<f64>,
    /// Min clock when the target was reached (or at the end).
    pub iterations: u64,
    pub wall_s: f64,
    pub worker_clocks: Vec<u64>,
    pub staleness: StalenessReport,
    pub per_worker_wait_s: Vec<f64>,
    pub curve: Vec<CurvePoint>,
}

/// The learned model (`model.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MfModel {
    pub rank: u32,
    pub global_mean: f32,
    pub user_ids: Option<Vec<String>>,
    pub item_ids: Option<Vec<String>>,
    pub users: Vec<Vec<f32>>,
    pub items: Vec<Vec<f32>>,
}

/// A PS app's monitor inbox: collects the workers' reports of type `M` (replies `()`).
struct MonitorInbox<M> {
    reports: Rc<RefCell<Vec<M>>>,
    notify: Rc<tokio::sync::Notify>,
}

impl<M: 'static> Actor for MonitorInbox<M> {
    type Context = Context<Self>;
}

impl<M: petrel_messages::RemoteMessage<Reply = ()>> Handler<Msg<M>> for MonitorInbox<M> {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<M>, _: &mut Context<Self>) -> Self::Result {
        self.reports.borrow_mut().push(msg.body);
        self.notify.notify_waiters();
        Ok(())
    }
}

/// The reports a monitor has received, and a signal for each new one.
pub(crate) type MonitorReports<M> = (Rc<RefCell<Vec<M>>>, Rc<tokio::sync::Notify>);

/// Starts a monitor inbox registered as `actor` on this node for reports of type `M`.
pub(crate) fn open_monitor<M: petrel_messages::RemoteMessage<Reply = ()>>(
    node: &petrel_actors::Node,
    actor: &str,
) -> Result<MonitorReports<M>, String> {
    let reports = Rc::new(RefCell::new(Vec::new()));
    let notify = Rc::new(tokio::sync::Notify::new());
    let inbox = MonitorInbox {
        reports: reports.clone(),
        notify: notify.clone(),
    }
    .start();
    node.register(actor, inbox)
        .map_err(|e| e.to_string())?
        .accept::<M>();
    Ok((reports, notify))
}

const MONITOR_ACTOR: &str = "ps-mf-monitor";

/// The shared pieces of a job, built once per process.
pub struct MfJob {
    pub cfg: MfConfig,
    pub data: MfData,
    pub layout: PsLayout,
    pub monitor_node: String,
    /// Filled by the monitor when the run ends (in-process callers read it).
    pub result: Mutex<Option<MfResult>>,
}

impl MfJob {
    pub fn new(settings: &Settings, cfg: MfConfig) -> Result<MfJob, String> {
        let with = |role: &str| -> Vec<String> {
            settings
                .nodes
                .iter()
                .filter(|n| n.roles.iter().any(|r| r == role))
                .map(|n| n.name.clone())
                .collect()
        };
        let layout = PsLayout {
            shard_nodes: with("ps-shard"),
            worker_nodes: with("ps-worker"),
        };
        if layout.shard_nodes.is_empty() || layout.worker_nodes.is_empty() {
            return Err("an mf job needs nodes with roles ps-shard and ps-worker".into());
        }
        let monitors = with("ps-monitor");
        let [monitor_node] = monitors.as_slice() else {
            return Err(format!(
                "an mf job needs exactly one ps-monitor node, found {}",
                monitors.len()
            ));
        };
        cfg.tables()?;
        let data = MfData::load(&cfg)?;
        Ok(MfJob {
            monitor_node: monitor_node.clone(),
            cfg,
            data,
            layout,
            result: Mutex::new(None),
        })
    }
}

async fn shard_role(ctx: NodeContext, job: Arc<MfJob>) -> Result<(), String> {
    serve_shards(&ctx, &job.layout, job.cfg.tables()?).await
}

/// The shard role of the PS apps: starts this node's shards of `layout` with the built-in
/// rules and serves them until the job ends.
pub async fn serve_shards(
    ctx: &NodeContext,
    layout: &PsLayout,
    tables: Vec<TableSpec>,
) -> Result<(), String> {
    let mut handles = Vec::new();
    for s in layout.shards_on(&ctx.spec.name) {
        handles.push(
            shells::start_shard(
                &ctx.node,
                layout,
                s,
                tables.clone(),
                &RuleRegistry::new(),
                None,
            )
            .map_err(|e| e.to_string())?,
        );
    }
    for r in futures::future::join_all(handles.into_iter().map(|h| h.wait())).await {
        r?;
    }
    Ok(())
}

fn emulated_clock(cfg: &MfConfig, worker: u32) -> Duration {
    let factor = if cfg.straggler == Some(worker) {
        cfg.straggler_factor.max(1.0)
    } else {
        1.0
    };
    Duration::from_secs_f64((cfg.clock_ms * factor).max(0.0) / 1000.0)
}

async fn worker_role(ctx: NodeContext, job: Arc<MfJob>) -> Result<(), String> {
    let cfg = &job.cfg;
    shells::wait_for_shards(&ctx.node, &job.layout, Duration::from_secs(30)).await?;
    let mut workers = Vec::new();
    for w in job.layout.workers_on(&ctx.spec.name) {
        let client =
            PsClient::start(&ctx.node, &job.layout, w, cfg.tables()?).map_err(|e| e.to_string())?;
        workers.push(run_worker(ctx.node.clone(), job.clone(), client));
    }
    for r in futures::future::join_all(workers).await {
        r?;
    }
    Ok(())
}

async fn run_worker(node: Node, job: Arc<MfJob>, client: PsClient) -> Result<(), String> {
    let cfg = &job.cfg;
    let w = client.worker();
    let n_workers = job.layout.n_workers();
    let mut mine: Vec<(u32, u32, f32)> = job
        .data
        .train
        .entries
        .iter()
        .copied()
        .filter(|e| e.0 % n_workers == w)
        .collect();
    mine.shuffle(&mut StdRng::seed_from_u64(cfg.seed + u64::from(w)));
    let nb = cfg.batches_per_epoch.max(1) as usize;
    let chunk = mine.len().div_ceil(nb).max(1);
    let batches: Vec<&[(u32, u32, f32)]> = mine.chunks(chunk).collect();
    let is_async = cfg.consistency()? == Consistency::Async;
    let per_clock = emulated_clock(cfg, w);
    let (mut compute_s, mut wait_s) = (0.0f64, 0.0f64);
    let scale = cfg.init_scale;
    let rank = cfg.rank;
    loop {
        let c = client.current_clock();
        if client.stop_requested().is_some() || c >= cfg.max_clocks {
            break;
        }
        if cfg.fail_worker_at == Some((w, c)) {
            return Err(format!("worker {w}: injected failure at clock {c}"));
        }
        let batch: &[(u32, u32, f32)] = batches
            .get(c as usize % batches.len().max(1))
            .copied()
            .unwrap_or(&[]);
        let users: Vec<u32> = batch
            .iter()
            .map(|e| e.0)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let items: Vec<u32> = batch
            .iter()
            .map(|e| e.1)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let item_ids: Vec<RowId> = items.iter().map(|&i| RowId(u64::from(i))).collect();
        let user_ids: Vec<RowId> = users.iter().map(|&u| RowId(u64::from(u))).collect();
        let t_wait = Instant::now();
        if is_async {
            client
                .prefetch(ITEMS, &item_ids)
                .map_err(|e| e.to_string())?;
        }
        let item_rows = client
            .get_many(ITEMS, &item_ids)
            .await
            .map_err(|e| e.to_string())?;
        let user_rows = client
            .get_many(USERS, &user_ids)
            .await
            .map_err(|e| e.to_string())?;
        wait_s += t_wait.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let mut pu: HashMap<u32, Vec<f32>> = users
            .iter()
            .zip(&user_rows)
            .map(|(&u, r)| (u, factor(USERS, u64::from(u), Some(r), rank, scale)))
            .collect();
        let mut qi: HashMap<u32, Vec<f32>> = items
            .iter()
            .zip(&item_rows)
            .map(|(&i, r)| (i, factor(ITEMS, u64::from(i), Some(r), rank, scale)))
            .collect();
        let (old_u, old_i) = (pu.clone(), qi.clone());
        sgd_pass(
            batch,
            &mut pu,
            &mut qi,
            job.data.mean,
            cfg.learning_rate,
            cfg.regularization,
        );
        for (table, new, old) in [(USERS, &pu, &old_u), (ITEMS, &qi, &old_i)] {
            for (&id, v) in new {
                if let Some(o) = old.get(&id) {
                    let d: Vec<f32> = v.iter().zip(o).map(|(a, b)| a - b).collect();
                    client
                        .batch_inc(table, RowId(u64::from(id)), &Row::Dense(d))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        let spent = t0.elapsed();
        if spent < per_clock {
            tokio::time::sleep(per_clock - spent).await;
        } else {
            // Cache hits complete without yielding: let the node's actors (heartbeats,
            // replies) run between clocks.
            tokio::task::yield_now().await;
        }
        compute_s += t0.elapsed().as_secs_f64();
        client.clock().map_err(|e| e.to_string())?;
    }
    client.leave().map_err(|e| e.to_string())?;
    let done = WorkerDone {
        worker: w,
        clocks: client.current_clock(),
        staleness: client.table_stats(ITEMS),
        compute_s,
        wait_s,
    };
    tracing::info!(
        worker = w,
        clocks = done.clocks,
        mean_staleness = done.staleness.mean(),
        max_staleness = done.staleness.max(),
        "mf worker done"
    );
    let monitor = node
        .actor_at::<WorkerDone>(&job.monitor_node, MONITOR_ACTOR)
        .map_err(|e| e.to_string())?;
    monitor
        .ask(done, Priority::HIGH, node.default_timeout())
        .await
        .map_err(|e| format!("worker {w}: report to monitor: {e}"))
}

/// The global model from merged shard tables.
fn model_from(job: &MfJob, states: &[shells::ShardState]) -> MfModel {
    let tables = shells::merge_tables(states);
    let empty = HashMap::new();
    let (ut, it) = (
        tables.get(&USERS).unwrap_or(&empty),
        tables.get(&ITEMS).unwrap_or(&empty),
    );
    let (rank, scale) = (job.cfg.rank, job.cfg.init_scale);
    let ids = job.data.train.id_mapping.as_ref();
    MfModel {
        rank,
        global_mean: job.data.mean,
        user_ids: ids.map(|m| m.user_ids.clone()),
        item_ids: ids.map(|m| m.item_ids.clone()),
        users: (0..job.data.train.n_users as u64)
            .map(|u| factor(USERS, u, ut.get(&RowId(u)), rank, scale))
            .collect(),
        items: (0..job.data.train.n_items as u64)
            .map(|i| factor(ITEMS, i, it.get(&RowId(i)), rank, scale))
            .collect(),
    }
}

fn test_rmse(job: &MfJob, m: &MfModel) -> f64 {
    let zero = vec![0.0; job.cfg.rank as usize];
    rmse(
        &job.data.test.entries,
        |u| {
            m.users
                .get(u as usize)
                .cloned()
                .unwrap_or_else(|| zero.clone())
        },
        |i| {
            m.items
                .get(i as usize)
                .cloned()
                .unwrap_or_else(|| zero.clone())
        },
        job.data.mean,
    )
}

async fn monitor_role(ctx: NodeContext, job: Arc<MfJob>) -> Result<(), String> {
    let cfg = &job.cfg;
    let (reports, notify) = open_monitor::<WorkerDone>(&ctx.node, MONITOR_ACTOR)?;
    shells::wait_for_shards(&ctx.node, &job.layout, Duration::from_secs(30)).await?;
    let timeout = ctx.node.default_timeout();
    let start = Instant::now();
    let mut curve = Vec::new();
    let mut reached: Option<(f64, u64)> = None;
    let mut initial = None;
    let n_workers = job.layout.n_workers() as usize;
    let mut stop_sent = false;
    loop {
        let all_done = reports.borrow().len() >= n_workers;
        let states =
            shells::snapshot_all(&ctx.node, &job.layout, ShardQuery::Snapshot, timeout).await?;
        let clock = states.iter().map(|s| s.min_clock).min().unwrap_or(0);
        let model = model_from(&job, &states);
        let r = test_rmse(&job, &model);
        let t = start.elapsed().as_secs_f64();
        initial.get_or_insert(r);
        curve.push(CurvePoint {
            seconds: t,
            clock,
            rmse: r,
        });
        if reached.is_none() && cfg.target_rmse.is_some_and(|target| r <= target) {
            reached = Some((t, clock));
        }
        if all_done {
            break;
        }
        let why = if reached.is_some() {
            Some("target rmse reached".to_string())
        } else if t >= cfg.max_seconds {
            Some(format!("max_seconds {} passed", cfg.max_seconds))
        } else {
            None
        };
        if let Some(reason) = why
            && !stop_sent
        {
            tracing::info!(%reason, rmse = r, clock, "mf monitor stops the workers");
            for (w, n) in job.layout.worker_nodes.iter().enumerate() {
                let c = ctx
                    .node
                    .actor_at::<ToClient>(n, &client_actor_name(w as u32))
                    .map_err(|e| e.to_string())?;
                if let Err(e) = c.tell(
                    ToClient::Stop {
                        reason: reason.clone(),
                    },
                    Priority::HIGH,
                ) {
                    tracing::warn!(worker = w, error = %e, "stop not sent");
                }
            }
            stop_sent = true;
        }
        let n = notify.notified();
        let _ = tokio::time::timeout(Duration::from_millis(cfg.eval_ms.max(1)), n).await;
    }
    let wall = start.elapsed().as_secs_f64();
    let states =
        shells::snapshot_all(&ctx.node, &job.layout, ShardQuery::Snapshot, timeout).await?;
    let model = model_from(&job, &states);
    let final_rmse = test_rmse(&job, &model);
    let mut reps = reports.borrow().clone();
    reps.sort_by_key(|r| r.worker);
    let mut st = StalenessStats::new();
    for r in &reps {
        st.merge(&r.staleness);
    }
    let consistency = cfg.consistency()?;
    let result = MfResult {
        consistency: cfg.consistency.to_ascii_lowercase(),
        staleness_bound: match consistency {
            Consistency::Bsp => Some(0),
            Consistency::Ssp { staleness } | Consistency::Essp { staleness } => Some(staleness),
            Consistency::Async => None,
        },
        n_workers: job.layout.n_workers(),
        n_shards: job.layout.n_shards(),
        train_ratings: job.data.train.entries.len(),
        test_ratings: job.data.test.entries.len(),
        initial_rmse: initial.unwrap_or(final_rmse),
        final_rmse,
        target_rmse: cfg.target_rmse,
        reached_target: reached.is_some(),
        time_to_target_s: reached.map(|r| r.0),
        iterations: reached.map_or(curve.last().map_or(0, |p| p.clock), |r| r.1),
        wall_s: wall,
        worker_clocks: reps.iter().map(|r| r.clocks).collect(),
        staleness: st.report(),
        per_worker_wait_s: reps.iter().map(|r| r.wait_s).collect(),
        curve,
    };
    tracing::info!(
        consistency = %result.consistency,
        final_rmse,
        reached = result.reached_target,
        "mf run done"
    );
    if let Some(out) = &cfg.out {
        write_outputs(out, &model, &result)?;
    }
    if let Ok(mut slot) = job.result.lock() {
        *slot = Some(result);
    }
    Ok(())
}

/// Writes `model.json` and `metrics.json` into `out`.
pub fn write_outputs(
    out: &std::path::Path,
    model: &MfModel,
    result: &MfResult,
) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |name: &str, text: String| {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    write(
        "model.json",
        serde_json::to_string(model).map_err(|e| e.to_string())?,
    )?;
    write(
        "metrics.json",
        serde_json::to_string_pretty(result).map_err(|e| e.to_string())?,
    )
}

/// Registers the roles `ps-shard`, `ps-worker` and `ps-monitor` for `job`.
pub fn register(cluster: Cluster, job: Arc<MfJob>) -> Cluster {
    let (j1, j2, j3) = (job.clone(), job.clone(), job);
    cluster
        .role("ps-shard", move |ctx| Box::pin(shard_role(ctx, j1.clone())))
        .role("ps-worker", move |ctx| {
            Box::pin(worker_role(ctx, j2.clone()))
        })
        .role("ps-monitor", move |ctx| {
            Box::pin(monitor_role(ctx, j3.clone()))
        })
}

/// Registers the roles for `petrel node`/`petrel run`: the job is built from `[app.mf]` when a
/// role first runs in this process (so data is loaded only by processes that need it).
pub fn register_builtin(cluster: Cluster) -> Cluster {
    let get = petrel_actors::topology::lazy_job(cluster.settings().clone(), "mf", MfJob::new);
    let (g1, g2, g3) = (get.clone(), get.clone(), get);
    cluster
        .role("ps-shard", move |ctx| {
            let j = g1();
            async move { Ok::<(), petrel_actors::RoleError>(shard_role(ctx, j?).await?) }
        })
        .role("ps-worker", move |ctx| {
            let j = g2();
            async move { Ok::<(), petrel_actors::RoleError>(worker_role(ctx, j?).await?) }
        })
        .role("ps-monitor", move |ctx| {
            let j = g3();
            async move { Ok::<(), petrel_actors::RoleError>(monitor_role(ctx, j?).await?) }
        })
}

/// What a PS app's monitor left in its job's result slot once the in-process run ended.
pub fn take_monitor_result<T>(slot: &std::sync::Mutex<Option<T>>) -> Result<T, String> {
    slot.lock()
        .map_err(|_| "result lock poisoned".to_string())?
        .take()
        .ok_or_else(|| "the monitor produced no result".to_string())
}

/// Runs an MF job on an in-process cluster (QUIC on 127.0.0.1, or the memory transport):
/// `shards` shard nodes, `workers` worker nodes, the monitor on the first shard node.
pub fn run_local(
    cfg: MfConfig,
    shards: usize,
    workers: usize,
    transport: &str,
) -> Result<MfResult, String> {
    run_local_with(cfg, shards, workers, transport, |_| {})
}

/// The in-process layout both PS apps use: nodes `shard-0..` (the first also runs the
/// monitor) and `worker-0..`, with the roles `ps-shard`, `ps-monitor` and `ps-worker`.
pub fn local_topology(
    name: &str,
    shards: usize,
    workers: usize,
    transport: petrel_actors::Transport,
) -> petrel_actors::Topology {
    let mut topo = petrel_actors::Topology::builder(name).transport(transport);
    for s in 0..shards.max(1) {
        let roles: &[&str] = if s == 0 {
            &["ps-shard", "ps-monitor"]
        } else {
            &["ps-shard"]
        };
        topo = topo.node(&format!("shard-{s}"), roles);
    }
    for w in 0..workers.max(1) {
        topo = topo.node(&format!("worker-{w}"), &["ps-worker"]);
    }
    topo
}

/// `run_local` with a hook to adjust the cluster settings (timeouts, network shaping).
pub fn run_local_with(
    cfg: MfConfig,
    shards: usize,
    workers: usize,
    transport: &str,
    tweak: impl FnOnce(&mut Settings),
) -> Result<MfResult, String> {
    let settings = local_topology(
        "ps-mf",
        shards,
        workers,
        transport
            .parse()
            .map_err(|e: petrel_actors::NodeError| e.to_string())?,
    )
    .with(tweak)
    .build()
    .map_err(|e| e.to_string())?;
    let job = Arc::new(MfJob::new(&settings, cfg)?);
    let cluster = register(Cluster::new(settings), job.clone());
    cluster.run_in_process().map_err(|e| e.to_string())?;
    take_monitor_result(&job.result)
}

/// `petrel train ps-mf`.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
    /// Ratings file: `user item rating` triplets (tab/space/comma; MovieLens `u.data` works)
    /// or a MatrixMarket coordinate file. Synthetic low-rank data when omitted.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Output directory for model.json and metrics.json.
    #[arg(long, default_value = "out")]
    pub out: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// bsp, ssp, essp or async.
    #[arg(long, default_value = "ssp")]
    pub consistency: String,
    #[arg(long, default_value_t = 3)]
    pub staleness: u32,
    #[arg(long, default_value_t = 16)]
    pub rank: u32,
    #[arg(long, default_value_t = 0.02)]
    pub learning_rate: f32,
    #[arg(long, default_value_t = 0.05)]
    pub regularization: f32,
    /// Passes over the data.
    #[arg(long, default_value_t = 20)]
    pub epochs: u64,
    #[arg(long, default_value_t = 4)]
    pub batches_per_epoch: u32,
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    #[arg(long)]
    pub target_rmse: Option<f64>,
    #[arg(long, default_value_t = 600.0)]
    pub max_seconds: f64,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// "quic" (127.0.0.1) or "memory".
    #[arg(long, default_value = "quic")]
    pub transport: String,
}

/// Runs `petrel train ps-mf` on an in-process cluster and prints a summary.
pub fn train_cli(a: TrainArgs) -> Result<(), String> {
    let cfg = MfConfig {
        data: a.data.clone(),
        seed: a.seed,
        test_fraction: a.test_fraction,
        rank: a.rank,
        learning_rate: a.learning_rate,
        regularization: a.regularization,
        init_scale: 0.1,
        consistency: a.consistency.clone(),
        staleness: a.staleness,
        batches_per_epoch: a.batches_per_epoch,
        max_clocks: a
            .epochs
            .saturating_mul(u64::from(a.batches_per_epoch.max(1))),
        max_seconds: a.max_seconds,
        target_rmse: a.target_rmse,
        eval_ms: 250,
        out: Some(a.out.clone()),
        ..MfConfig::default()
    };
    let r = run_local(cfg, a.shards, a.workers, &a.transport)?;
    println!(
        "mf ({}): {} train / {} test ratings, test rmse {:.4} -> {:.4} in {:.1}s; wrote {}/model.json and metrics.json",
        r.consistency,
        r.train_ratings,
        r.test_ratings,
        r.initial_rmse,
        r.final_rmse,
        r.wall_s,
        a.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_deterministic_and_bounded() {
        for r in 0..100 {
            for c in 0..8 {
                let a = init_value(ITEMS, r, c, 0.3);
                assert_eq!(a, init_value(ITEMS, r, c, 0.3));
                assert!(a.abs() <= 0.3);
            }
        }
        assert_ne!(init_value(ITEMS, 1, 0, 1.0), init_value(USERS, 1, 0, 1.0));
    }

    #[test]
    fn serial_sgd_fits_low_rank_data() {
        let cfg = MfConfig::default();
        let data = MfData::load(&cfg).unwrap();
        let mut users: HashMap<u32, Vec<f32>> = (0..data.train.n_users as u32)
            .map(|u| {
                (
                    u,
                    factor(USERS, u64::from(u), None, cfg.rank, cfg.init_scale),
                )
            })
            .collect();
        let mut items: HashMap<u32, Vec<f32>> = (0..data.train.n_items as u32)
            .map(|i| {
                (
                    i,
                    factor(ITEMS, u64::from(i), None, cfg.rank, cfg.init_scale),
                )
            })
            .collect();
        let eval = |u: &HashMap<u32, Vec<f32>>, i: &HashMap<u32, Vec<f32>>| {
            rmse(
                &data.test.entries,
                |x| u[&x].clone(),
                |x| i[&x].clone(),
                data.mean,
            )
        };
        let before = eval(&users, &items);
        for _ in 0..30 {
            sgd_pass(
                &data.train.entries,
                &mut users,
                &mut items,
                data.mean,
                0.05,
                0.02,
            );
        }
        let after = eval(&users, &items);
        assert!(after < 0.6 * before, "rmse {before} -> {after}");
    }
}
