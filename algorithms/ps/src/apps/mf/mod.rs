//! Matrix factorization by SGD on the parameter server ([`PsMf`], `petrel train ps-mf`,
//! roles `ps-shard`/`ps-worker`/`ps-monitor` with `[app.mf]`).
//!
//! Model: `rating ~ mean + u_user . v_item` (with `biases`: `+ b_user + b_item`). Two dense
//! tables of width `rank`, `users` (0) and `items` (1); a stored row is the offset from a
//! deterministic random initial value ([`init_value`]), so no initialisation round is
//! needed. The worker of rank `r` among the `n` current workers owns the users `u % n == r`
//! (only it writes them, so `users` is `Async`; with a fixed membership worker `w` owns
//! `u % n_workers == w`); after a join or a leave each worker takes its new users at its
//! next clock and reads their rows afresh from the shards, where their values live. `items`
//! has the job's consistency model. Per clock a worker reads the rows
//! of its next mini-batch, runs SGD on local copies (or sends gradients to a shard `rule`),
//! `batch_inc`s the differences and calls `clock()`; stragglers stretch a clock to
//! `clock_ms * factor`. Every `eval_every` clocks the monitor measures the held-out RMSE of
//! the model as of that clock and stops the workers at `target_rmse` or `max_seconds`.

use crate::core::managed::{SendPolicy, slice_ranges};
use crate::core::rules::{ServerRule, adarevision_delta};
use crate::core::server_push::ServerPushConfig;
use crate::core::stats::{ReadStats, StalenessReport};
use crate::core::straggler::StragglerModel;
use crate::core::types::{
    Consistency, ConsistencyModel, Row, RowId, TableId, TableSpec, UpdateRuleSpec,
};
use crate::error::PsError;
use crate::kit::settings::{
    ManagedSettings, RunFiles, StragglerSettings, check_history, check_step, eval_stride,
    history_points,
};
use crate::kit::{
    EvalMonitor, EvalPoint, MonitorCtx, PsApp, PsCheckpointing, PsStep, WorkerChange, WorkerCtx,
    WorkerDone, decode, encode, pad_to, write_run,
};
use crate::shells::{PsLayout, TablesBuilder};
use petrel_ml::data::ratings::{Ratings, load_ratings};
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use petrel_ml::job::{InvalidSetting, SettingChecks};
use petrel_ml::model::{FactorModel, ModelParams, SavedModel};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Instant;

/// The users table.
pub const USERS: TableId = TableId(0);
/// The items table.
pub const ITEMS: TableId = TableId(1);

mod config;
mod model;

pub use config::PsMfSettings;
pub use model::*;

/// The ps-mf app: its config and data.
pub struct PsMf {
    /// The settings.
    pub cfg: PsMfSettings,
    /// The ratings.
    pub data: PsMfData,
    tables: Vec<TableSpec>,
}

/// A ps-mf worker between clocks.
pub struct PsMfWorker {
    /// The current workers' ids when the batches were taken.
    members: Vec<u32>,
    batches: Vec<Vec<(u32, u32, f32)>>,
    /// Users it took over from another worker, whose rows it has not read since.
    taken_over: BTreeSet<u32>,
    stragglers: StragglerModel,
    compute_s: f64,
    wait_s: f64,
    started: Instant,
}

/// The ps-mf monitor between evaluations.
pub type PsMfMonitor = EvalMonitor<RmsePoint>;

impl PsMf {
    /// The global model from merged shard tables.
    fn model_from(&self, tables: &HashMap<TableId, HashMap<RowId, Row>>) -> PsMfModel {
        let empty = HashMap::new();
        let (ut, it) = (
            tables.get(&USERS).unwrap_or(&empty),
            tables.get(&ITEMS).unwrap_or(&empty),
        );
        let (rank, scale, biases) = (self.cfg.rank, self.cfg.init_scale, self.cfg.biases);
        let ids = self.data.train.id_mapping.as_ref();
        let rows = |table, stored: &HashMap<RowId, Row>, n: usize| -> Vec<Vec<f32>> {
            (0..n as u64)
                .map(|x| factor_row(table, x, stored.get(&RowId(x)), rank, biases, scale))
                .collect()
        };
        let (mut users, mut items) = (
            rows(USERS, ut, self.data.train.n_users),
            rows(ITEMS, it, self.data.train.n_items),
        );
        let (mut user_bias, mut item_bias) = (Vec::new(), Vec::new());
        if biases {
            let r = rank as usize;
            user_bias = users.iter().map(|v| v[r]).collect();
            item_bias = items.iter().map(|v| v[r + 1]).collect();
            users
                .iter_mut()
                .chain(items.iter_mut())
                .for_each(|v| v.truncate(r));
        }
        PsMfModel {
            rank,
            global_mean: self.data.mean,
            user_ids: ids.map(|m| m.user_ids.clone()),
            item_ids: ids.map(|m| m.item_ids.clone()),
            users,
            items,
            user_bias,
            item_bias,
        }
    }

    fn test_rmse(&self, m: &PsMfModel) -> f64 {
        // Biases as the augmented columns: users `[u, b, 1]`, items `[v, 1, b]`.
        let row = |rows: &[Vec<f32>], biases: &[f32], x: usize, pair: fn(f32) -> [f32; 2]| {
            let zero = || vec![0.0; self.cfg.rank as usize];
            let mut v = rows.get(x).cloned().unwrap_or_else(zero);
            if self.cfg.biases {
                v.extend(pair(biases.get(x).copied().unwrap_or(0.0)));
            }
            v
        };
        let user = |u: u32| row(&m.users, &m.user_bias, u as usize, |b| [b, 1.0]);
        let item = |i: u32| row(&m.items, &m.item_bias, i as usize, |b| [1.0, b]);
        rmse(&self.data.test.entries, user, item, self.data.mean)
    }
}

/// Sorted distinct ids of one column of `batch`.
fn distinct(batch: &[(u32, u32, f32)], column: impl Fn(&(u32, u32, f32)) -> u32) -> Vec<u32> {
    batch
        .iter()
        .map(column)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn row_ids(ids: &[u32]) -> Vec<RowId> {
    ids.iter().map(|&i| RowId(u64::from(i))).collect()
}

/// A worker's ratings in mini-batches.
type Batches = Vec<Vec<(u32, u32, f32)>>;

impl PsMf {
    /// Worker `ctx.worker()`'s share: the ratings of the users `u % n == rank` among the
    /// current workers, shuffled by its seed, in `batches_per_epoch` mini-batches.
    fn share(&self, ctx: &WorkerCtx<'_, WorkerDone>) -> (Vec<u32>, Batches) {
        let (w, members) = (ctx.worker(), ctx.current_workers());
        let n = members.len().max(1) as u32;
        let rank = (members.iter()).position(|&m| m == w).unwrap_or(0) as u32;
        let mut mine: Vec<(u32, u32, f32)> = (self.data.train.entries.iter())
            .copied()
            .filter(|e| e.0 % n == rank)
            .collect();
        mine.shuffle(&mut StdRng::seed_from_u64(self.cfg.seed + u64::from(w)));
        let nb = self.cfg.batches_per_epoch.max(1) as usize;
        let chunk = mine.len().div_ceil(nb).max(1);
        (members, mine.chunks(chunk).map(<[_]>::to_vec).collect())
    }

    /// Takes the worker's share again after a join or a leave; the users it gains are read
    /// afresh before their first use (its cached copies, if any, are from before).
    fn take_share(&self, st: &mut PsMfWorker, ctx: &WorkerCtx<'_, WorkerDone>) {
        let users = |b: &Batches| -> BTreeSet<u32> { b.iter().flatten().map(|e| e.0).collect() };
        let before = users(&st.batches);
        (st.members, st.batches) = self.share(ctx);
        st.taken_over = users(&st.batches).difference(&before).copied().collect();
        tracing::info!(worker = ctx.worker(), workers = ?st.members, taken_over = st.taken_over.len(), "ps-mf share taken again");
    }
}

impl PsApp for PsMf {
    type Config = PsMfSettings;
    type Worker = PsMfWorker;
    type Report = WorkerDone;
    type Monitor = PsMfMonitor;
    type Output = PsMfOutcome;

    const NAME: &'static str = "ps-mf";
    const SECTION: &'static str = "mf";
    const MONITOR_ACTOR: &'static str = "ps-mf-monitor";
    const ELASTIC: bool = true;

    fn validate_config(cfg: &PsMfSettings) -> Result<(), InvalidSetting> {
        cfg.validate()
    }

    fn new(cfg: PsMfSettings, _layout: &PsLayout) -> Result<Self, PsError> {
        let tables = cfg.tables()?;
        let data = PsMfData::load(&cfg)?;
        Ok(PsMf { cfg, data, tables })
    }

    fn tables(&self) -> Vec<TableSpec> {
        self.tables.clone()
    }

    fn server_push(&self) -> Option<ServerPushConfig> {
        let cfg = &self.cfg;
        cfg.server_push.map(|policy| {
            ServerPushConfig::at_rate(
                policy,
                cfg.comm.managed_bytes_per_s,
                cfg.server_push_tick_ms,
            )
        })
    }

    fn start_worker(&self, ctx: &WorkerCtx<'_, WorkerDone>) -> Result<PsMfWorker, PsError> {
        let (members, batches) = self.share(ctx);
        if let Some(manager) = self.cfg.comm.manager() {
            ctx.client.start_managed(manager);
        }
        Ok(PsMfWorker {
            members,
            batches,
            taken_over: BTreeSet::new(),
            stragglers: self.cfg.stragglers.model(self.cfg.seed),
            compute_s: 0.0,
            wait_s: 0.0,
            started: Instant::now(),
        })
    }

    async fn step(
        &self,
        st: &mut PsMfWorker,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<PsStep, PsError> {
        let (cfg, client, w) = (&self.cfg, ctx.client, ctx.worker());
        let c = client.current_clock();
        if c >= cfg.clocks() {
            return Ok(PsStep::Done);
        }
        if cfg.fail_worker_at == Some((w, c)) {
            return Err(PsError::InjectedFailure {
                worker: w,
                clock: c,
            });
        }
        if ctx.current_workers() != st.members {
            self.take_share(st, ctx);
        }
        let n_batches = st.batches.len().max(1);
        let batch: &[(u32, u32, f32)] = st.batches.get(c as usize % n_batches).map_or(&[], |b| b);
        let (users, items) = (distinct(batch, |e| e.0), distinct(batch, |e| e.1));
        let (item_ids, user_ids) = (row_ids(&items), row_ids(&users));
        let t_wait = Instant::now();
        if cfg.consistency == ConsistencyModel::Async {
            client.prefetch(ITEMS, &item_ids)?;
        }
        if cfg.rule.is_some_and(|r| !r.local_view_exact()) {
            // `users` is async, and the cache does not follow these rules' steps.
            client.prefetch(USERS, &user_ids)?;
        } else if !st.taken_over.is_empty() {
            // Users taken over: their rows as the shards hold them, not an old cached copy.
            let fresh: Vec<u32> = (users.iter().copied())
                .filter(|u| st.taken_over.remove(u))
                .collect();
            client.prefetch(USERS, &row_ids(&fresh))?;
        }
        let item_rows = client.get_many(ITEMS, &item_ids).await?;
        let user_rows = client.get_many(USERS, &user_ids).await?;
        st.wait_s += t_wait.elapsed().as_secs_f64();
        if !cfg.no_prefetch && c + 1 < cfg.clocks() {
            // The next clock's items, requested now: their round trip overlaps this compute.
            let next = st
                .batches
                .get((c as usize + 1) % n_batches)
                .map_or(&[][..], |b| b);
            client.prefetch_next_clock(ITEMS, &row_ids(&distinct(next, |e| e.1)))?;
        }
        let t0 = Instant::now();
        let (rank, scale, biases) = (cfg.rank, cfg.init_scale, cfg.biases);
        let local = |table, ids: &[u32], rows: &[Row]| -> HashMap<u32, Vec<f32>> {
            ids.iter()
                .zip(rows)
                .map(|(&x, r)| {
                    let v = factor_row(table, u64::from(x), Some(r), rank, biases, scale);
                    (x, v)
                })
                .collect()
        };
        let mut pu = local(USERS, &users, &user_rows);
        let mut qi = local(ITEMS, &items, &item_rows);
        let (mean, lr, reg) = (self.data.mean, cfg.learning_rate, cfg.regularization);
        let (fixed, per_clock) = (cfg.fixed_columns(), st.stragglers.clock_time(w, c));
        if let Some(rule) = cfg.rule {
            let (gu, gi) = batch_gradient(batch, &pu, &qi, mean, reg, fixed);
            for (table, grads, ids, rows) in [
                (USERS, &gu, &users, &user_rows),
                (ITEMS, &gi, &items, &item_rows),
            ] {
                for (id, read) in ids.iter().zip(rows) {
                    let Some(g) = grads.get(id) else { continue };
                    let delta = match rule {
                        ServerRule::AdaRevision => adarevision_delta(g, read),
                        ServerRule::Sgd | ServerRule::Adagrad => Row::Dense(g.clone()),
                    };
                    client.batch_inc(table, RowId(u64::from(*id)), &delta)?;
                }
            }
        } else {
            // The clock's compute in slices, whose changes managed communication may send early.
            let slices = cfg.comm.slices();
            let per_slice = per_clock / slices as u32;
            for (k, range) in slice_ranges(batch.len(), slices).into_iter().enumerate() {
                if slices > 1 {
                    // Reads go through the cache: the slice's rows, with what was pushed
                    // since the last slice and own writes; only they get deltas.
                    let t_read = Instant::now();
                    let slice = &batch[range.clone()];
                    let (su, si) = (distinct(slice, |e| e.0), distinct(slice, |e| e.1));
                    qi = local(ITEMS, &si, &client.get_many(ITEMS, &row_ids(&si)).await?);
                    pu = local(USERS, &su, &client.get_many(USERS, &row_ids(&su)).await?);
                    st.wait_s += t_read.elapsed().as_secs_f64();
                }
                let (old_u, old_i) = (pu.clone(), qi.clone());
                sgd_pass(&batch[range], &mut pu, &mut qi, mean, lr, reg, fixed);
                for (table, new, old) in [(USERS, &pu, &old_u), (ITEMS, &qi, &old_i)] {
                    for (&id, v) in new {
                        if let Some(o) = old.get(&id) {
                            let d: Vec<f32> = v.iter().zip(o).map(|(a, b)| a - b).collect();
                            client.batch_inc(table, RowId(u64::from(id)), &Row::Dense(d))?;
                        }
                    }
                }
                // The background sender uses the link while the slice's compute is emulated.
                pad_to(t0, per_slice * (k as u32 + 1)).await;
            }
        }
        pad_to(t0, per_clock).await;
        st.compute_s += t0.elapsed().as_secs_f64();
        Ok(PsStep::Clock)
    }

    fn finish_worker(
        &self,
        st: PsMfWorker,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<WorkerDone, PsError> {
        let run_s = st.started.elapsed().as_secs_f64();
        let done = ctx.measured(ITEMS, st.compute_s, st.wait_s, run_s);
        tracing::info!(
            worker = done.worker,
            clocks = done.clocks,
            mean_staleness = done.staleness.mean(),
            max_staleness = done.staleness.max(),
            "mf worker done"
        );
        Ok(done)
    }

    fn checkpointing(cfg: &PsMfSettings) -> Result<Option<PsCheckpointing>, PsError> {
        cfg.files.checkpointing(Self::NAME, cfg.checkpoint_every)
    }

    fn save_worker(
        &self,
        st: &PsMfWorker,
        _ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<Vec<u8>, PsError> {
        // Everything else follows from the seed and the clock.
        Ok(encode(&(st.compute_s, st.wait_s))?)
    }

    fn resume_worker(
        &self,
        saved: &[u8],
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<PsMfWorker, PsError> {
        let mut st = self.start_worker(ctx)?;
        (st.compute_s, st.wait_s) = decode("ps-mf worker checkpoint", saved)?;
        Ok(st)
    }

    fn eval_every(&self) -> u64 {
        eval_stride(self.cfg.eval_every, self.cfg.clocks())
    }

    fn progress_points(cfg: &PsMfSettings) -> Option<u64> {
        Some(history_points(cfg.eval_every, cfg.clocks()))
    }

    async fn observe(
        &self,
        m: &mut PsMfMonitor,
        ctx: &MonitorCtx<'_>,
        reports: Vec<WorkerDone>,
        all_done: bool,
    ) -> Result<Option<String>, PsError> {
        let point = |tables, seconds, clock| RmsePoint {
            seconds,
            clock,
            rmse: self.test_rmse(&self.model_from(&tables)),
        };
        m.observe(ctx, reports, all_done, self.cfg.max_seconds, point, |p| {
            self.cfg.target_rmse.is_some_and(|target| p.rmse <= target)
        })
        .await
    }

    async fn finish(
        &self,
        mut m: PsMfMonitor,
        ctx: &MonitorCtx<'_>,
    ) -> Result<PsMfOutcome, PsError> {
        let wall = ctx.elapsed_s();
        let (tables, _) = ctx.tables().await?;
        let model = self.model_from(&tables);
        let final_rmse = self.test_rmse(&model);
        let st = m.sorted_reports();
        let cfg = &self.cfg;
        let metrics = PsMfResult {
            consistency: cfg.consistency,
            staleness_bound: cfg.consistency().staleness_bound(),
            n_workers: ctx.layout.n_workers(),
            n_shards: ctx.layout.n_shards(),
            train_ratings: self.data.train.entries.len(),
            test_ratings: self.data.test.entries.len(),
            initial_rmse: m.curve.first().map_or(final_rmse, |p| p.rmse),
            final_rmse,
            target_rmse: cfg.target_rmse,
            reached_target: m.reached.is_some(),
            time_to_target_s: m.reached.map(|r| r.0),
            iterations: m.iterations(),
            wall_s: wall,
            worker_clocks: m.reports.iter().map(|r| r.clocks).collect(),
            staleness: st.report(),
            per_worker_staleness: m.reports.iter().map(|r| r.staleness.report()).collect(),
            content_staleness: m.content_staleness().report(),
            per_worker_wait_s: m.reports.iter().map(|r| r.wait_s).collect(),
            per_worker_sent_bytes: m.reports.iter().map(|r| r.sent_bytes).collect(),
            per_worker_received_bytes: m.reports.iter().map(|r| r.received_bytes).collect(),
            per_worker_compute_s: m.reports.iter().map(|r| r.compute_s).collect(),
            per_worker_reads: m.reports.iter().map(|r| r.reads).collect(),
            per_worker_run_s: m.reports.iter().map(|r| r.run_s).collect(),
            changes: ctx.changes(&m.reports),
            curve: m.curve,
        };
        tracing::info!(
            consistency = %metrics.consistency,
            final_rmse,
            reached = metrics.reached_target,
            "mf run done"
        );
        Ok(PsMfOutcome { metrics, model })
    }

    fn write_outputs(&self, out: &PsMfOutcome) -> Result<(), PsError> {
        write_run(
            self.cfg.files.out.as_deref(),
            || out.model.saved(&self.cfg),
            self.cfg.test_data.as_deref(),
            self.cfg.seed,
            &out.model,
            out.metrics.run_metrics(&self.cfg),
            "lower learning_rate (or raise regularization)",
        )
    }

    fn summary(cfg: &PsMfSettings, out: &PsMfOutcome) -> String {
        let r = &out.metrics;
        let dir = cfg.files.out_shown();
        format!(
            "mf ({}): {} train / {} test ratings, test rmse {:.4} -> {:.4} in {:.1}s; wrote {}/model.json and metrics.json",
            r.consistency,
            r.train_ratings,
            r.test_ratings,
            r.initial_rmse,
            r.final_rmse,
            r.wall_s,
            dir.display()
        )
    }
}

#[cfg(test)]
mod tests;
