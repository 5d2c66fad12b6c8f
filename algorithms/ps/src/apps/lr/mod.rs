//! Multinomial logistic regression by mini-batch SGD on the parameter server ([`PsLr`],
//! `petrel train ps-lr`).
//!
//! One table `weights` (id 0): row `j` holds the `n_classes` weights of feature `j`, row
//! `n_features` the biases. The optimizer runs on the shards (`--rule`: `Sgd`, `Adagrad` or
//! `AdaRevision`, whose rows also carry the gradient sums `z`), so workers send raw
//! gradients. The worker of rank `r` among the `n` current workers owns the samples
//! `i % n == r` (with a fixed membership, worker `w` owns `i % n_workers == w`; after a join
//! or a leave each worker takes its new share at its next clock); per clock it reads the rows
//! of its next mini-batch's features, sends the softmax cross-entropy gradient and calls
//! `clock()`. Every `eval_every` clocks the monitor records held-out accuracy and log-loss.
//! Data: LIBSVM files (labels mapped in sorted order to classes) or synthetic classes.

use crate::core::rules::{ServerRule, adarevision_delta};
use crate::core::stats::{ReadStats, StalenessReport};
use crate::core::types::{Consistency, ConsistencyModel, Row, RowId, TableId, TableSpec};
use crate::error::PsError;
use crate::kit::settings::{
    RunFiles, StragglerSettings, check_history, check_step, eval_stride, history_points,
};
use crate::kit::{
    EvalMonitor, EvalPoint, MonitorCtx, PsApp, PsCheckpointing, PsRoles, PsStep, WorkerChange,
    WorkerCtx, WorkerDone, pad_to, write_run,
};
use crate::shells::{PsLayout, TablesBuilder};
use petrel_actors::Settings;
use petrel_ml::data::libsvm::{SparseDataset, SparseRow, load_libsvm};
use petrel_ml::data::synthetic::{
    ClassificationParams, power_law_classification, separable_classification,
};
use petrel_ml::job::{InvalidSetting, SettingChecks};
use petrel_ml::model::{ModelParams, SavedModel, SoftmaxModel};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Instant;

/// The weights table.
pub const WEIGHTS: TableId = TableId(0);

mod config;
mod model;

pub use config::PsLrSettings;
pub use model::*;

/// The ps-lr app: its config and data.
pub struct PsLr {
    /// The settings.
    pub cfg: PsLrSettings,
    /// The samples.
    pub data: PsLrData,
    tables: Vec<TableSpec>,
}

/// The ps-lr monitor between evaluations.
pub type PsLrMonitor = EvalMonitor<PsLrPoint>;

impl PsLr {
    fn bias(&self) -> u32 {
        self.data.n_features as u32
    }

    /// The weight rows of a snapshot.
    fn weights(&self, mut tables: crate::kit::Tables) -> HashMap<u32, Vec<f32>> {
        let k = self.data.n_classes();
        (tables.remove(&WEIGHTS).unwrap_or_default().into_iter())
            .map(|(r, row)| (r.0 as u32, row.to_dense(k)))
            .collect()
    }

    fn point(&self, seconds: f64, clock: u64, weights: &HashMap<u32, Vec<f32>>) -> PsLrPoint {
        let k = self.data.n_classes();
        let (accuracy, log_loss) = evaluate(&self.data.test, weights, self.bias(), k);
        PsLrPoint {
            seconds,
            clock,
            accuracy,
            log_loss,
        }
    }

    /// The mini-batch of clock `clock` from samples `mine`, and the sorted rows it reads.
    fn batch_of<'a>(
        &'a self,
        mine: &[usize],
        clock: u64,
    ) -> (Vec<&'a (SparseRow, usize)>, Vec<u32>) {
        let b = self.cfg.batch_size.max(1);
        let start = (clock as usize * b) % mine.len().max(1);
        let batch: Vec<&(SparseRow, usize)> = (0..b.min(mine.len()))
            .map(|i| &self.data.train[mine[(start + i) % mine.len()]])
            .collect();
        let feats: Vec<u32> = batch
            .iter()
            .flat_map(|s| s.0.indices.iter().copied())
            .chain(std::iter::once(self.bias()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        (batch, feats)
    }
}

/// A worker's samples, and the current workers they are its share of.
#[derive(Debug, Clone)]
pub struct LrShare {
    /// The current workers' ids when the share was taken.
    members: Vec<u32>,
    /// Its samples (indices into the training set).
    mine: Vec<usize>,
}

impl PsLr {
    /// Worker `ctx.worker()`'s share of the samples: `i % n == rank` among the current workers.
    fn share(&self, ctx: &WorkerCtx<'_, WorkerDone>) -> LrShare {
        let members = ctx.current_workers();
        let n = members.len().max(1);
        let rank = (members.iter())
            .position(|&w| w == ctx.worker())
            .unwrap_or(0);
        let mine = (0..self.data.train.len())
            .filter(|i| i % n == rank)
            .collect();
        LrShare { members, mine }
    }
}

impl PsApp for PsLr {
    type Config = PsLrSettings;
    type Worker = LrShare;
    type Report = WorkerDone;
    type Monitor = PsLrMonitor;
    type Output = PsLrOutcome;

    const NAME: &'static str = "ps-lr";
    const SECTION: &'static str = "lr";
    const BUILTIN_ROLES: PsRoles = PsRoles {
        shard: "ps-lr-shard",
        worker: "ps-lr-worker",
        monitor: "ps-lr-monitor",
    };
    const MONITOR_ACTOR: &'static str = "ps-lr-monitor";
    const ELASTIC: bool = true;

    fn validate_config(cfg: &PsLrSettings) -> Result<(), InvalidSetting> {
        cfg.validate()
    }

    fn new(cfg: PsLrSettings, _layout: &PsLayout) -> Result<Self, PsError> {
        let data = PsLrData::load(&cfg)?;
        let k = data.n_classes() as u32;
        let tables = TablesBuilder::new()
            .dense(
                "weights",
                cfg.rule.row_width(k),
                Consistency::new(cfg.consistency, cfg.staleness),
            )
            .rule(cfg.rule.spec(cfg.learning_rate, k))
            .build()?
            .into_iter()
            .map(|t| (t.with_update_delay(cfg.update_delay)).with_content_clocks(true))
            .collect();
        Ok(PsLr { cfg, data, tables })
    }

    fn tables(&self) -> Vec<TableSpec> {
        self.tables.clone()
    }

    fn tune_local(settings: &mut Settings) {
        settings.cluster.failure_timeout_ms = 10_000;
    }

    /// A worker's samples and batch follow from its id and clock: nothing to save.
    fn checkpointing(cfg: &PsLrSettings) -> Result<Option<PsCheckpointing>, PsError> {
        cfg.files.checkpointing(Self::NAME, cfg.checkpoint_every)
    }

    fn start_worker(&self, ctx: &WorkerCtx<'_, WorkerDone>) -> Result<LrShare, PsError> {
        Ok(self.share(ctx))
    }

    async fn step(
        &self,
        share: &mut LrShare,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<PsStep, PsError> {
        if ctx.current_workers() != share.members {
            *share = self.share(ctx);
            tracing::info!(worker = ctx.worker(), workers = ?share.members, samples = share.mine.len(), "ps-lr share taken again");
        }
        let mine = &share.mine;
        let c = ctx.client;
        if c.current_clock() >= self.cfg.max_clocks || mine.is_empty() {
            return Ok(PsStep::Done);
        }
        let (k, bias, clock) = (self.data.n_classes(), self.bias(), c.current_clock());
        let (batch, feats) = self.batch_of(mine, clock);
        let ids: Vec<RowId> = feats.iter().map(|&j| RowId(u64::from(j))).collect();
        if self.cfg.consistency == ConsistencyModel::Async {
            // An async table's cached rows never expire: refresh them.
            c.prefetch(WEIGHTS, &ids)?;
        }
        let got = c.get_many(WEIGHTS, &ids).await?;
        if clock + 1 < self.cfg.max_clocks {
            // The next clock's rows, requested now: their round trip overlaps this compute.
            let (_, next) = self.batch_of(mine, clock + 1);
            let next: Vec<RowId> = next.into_iter().map(|j| RowId(u64::from(j))).collect();
            c.prefetch_next_clock(WEIGHTS, &next)?;
        }
        let t0 = Instant::now();
        let rows: HashMap<u32, Vec<f32>> = feats
            .iter()
            .zip(&got)
            .map(|(&j, r)| (j, r.to_dense(k)))
            .collect();
        let read: HashMap<u32, &Row> = feats.iter().copied().zip(&got).collect();
        for (j, g) in gradient(&batch, &rows, bias, k) {
            let delta = match (self.cfg.rule, read.get(&j)) {
                (ServerRule::AdaRevision, Some(r)) => adarevision_delta(&g, r),
                _ => Row::Dense(g),
            };
            c.batch_inc(WEIGHTS, RowId(u64::from(j)), &delta)?;
        }
        let stragglers = self.cfg.stragglers.model(self.cfg.seed);
        pad_to(t0, stragglers.clock_time(ctx.worker(), clock)).await;
        Ok(PsStep::Clock)
    }

    fn finish_worker(
        &self,
        _share: LrShare,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<WorkerDone, PsError> {
        Ok(ctx.done(WEIGHTS))
    }

    fn eval_every(&self) -> u64 {
        eval_stride(self.cfg.eval_every, self.cfg.max_clocks)
    }

    fn progress_points(cfg: &PsLrSettings) -> Option<u64> {
        Some(history_points(cfg.eval_every, cfg.max_clocks))
    }

    async fn observe(
        &self,
        m: &mut PsLrMonitor,
        ctx: &MonitorCtx<'_>,
        reports: Vec<WorkerDone>,
        all_done: bool,
    ) -> Result<Option<String>, PsError> {
        m.observe(
            ctx,
            reports,
            all_done,
            self.cfg.max_seconds,
            |tables, t, clock| self.point(t, clock, &self.weights(tables)),
            |p| self.cfg.target_log_loss.is_some_and(|x| p.log_loss <= x),
        )
        .await
    }

    async fn finish(
        &self,
        mut m: PsLrMonitor,
        ctx: &MonitorCtx<'_>,
    ) -> Result<PsLrOutcome, PsError> {
        let (k, bias) = (self.data.n_classes(), self.bias());
        let st = m.sorted_reports();
        let (first, last) = (m.curve.first().copied(), m.curve.last().copied());
        let metrics = PsLrResult {
            consistency: self.cfg.consistency,
            n_workers: ctx.layout.n_workers(),
            n_shards: ctx.layout.n_shards(),
            train_samples: self.data.train.len(),
            test_samples: self.data.test.len(),
            n_features: self.data.n_features,
            n_classes: k,
            initial_log_loss: first.map_or(0.0, |p| p.log_loss),
            final_log_loss: last.map_or(0.0, |p| p.log_loss),
            final_accuracy: last.map_or(0.0, |p| p.accuracy),
            target_log_loss: self.cfg.target_log_loss,
            reached_target: m.reached.is_some(),
            time_to_target_s: m.reached.map(|r| r.0),
            iterations: m.iterations(),
            wall_s: ctx.elapsed_s(),
            worker_clocks: m.reports.iter().map(|r| r.clocks).collect(),
            staleness: st.report(),
            content_staleness: m.content_staleness().report(),
            per_worker_reads: m.reports.iter().map(|r| r.reads).collect(),
            changes: ctx.changes(&m.reports),
            curve: m.curve,
        };
        // The final weights: every worker left, so they are those of the last evaluation.
        let weights = self.weights(ctx.tables().await?.0);
        let model = PsLrModel {
            class_labels: self.data.class_labels.clone(),
            weights: (0..=bias)
                .map(|j| weights.get(&j).cloned().unwrap_or_else(|| vec![0.0; k]))
                .collect(),
        };
        Ok(PsLrOutcome { metrics, model })
    }

    fn write_outputs(&self, out: &PsLrOutcome) -> Result<(), PsError> {
        let saved = || {
            let model = ModelParams::Softmax(out.model.clone());
            SavedModel::new(PsLr::NAME, &self.cfg, model)
        };
        write_run(
            self.cfg.files.out.as_deref(),
            saved,
            self.cfg.test_data.as_deref(),
            self.cfg.seed,
            &out.model,
            out.metrics.run_metrics(&self.cfg),
            "lower learning_rate",
        )
    }

    fn summary(cfg: &PsLrSettings, out: &PsLrOutcome) -> String {
        let r = &out.metrics;
        let dir = cfg.files.out_shown();
        format!(
            "logistic regression ({}): {} classes, {} train / {} test samples, test log-loss {:.4} -> {:.4}, accuracy {:.4}; wrote {}/model.json and metrics.json",
            r.consistency,
            r.n_classes,
            r.train_samples,
            r.test_samples,
            r.initial_log_loss,
            r.final_log_loss,
            r.final_accuracy,
            dir.display()
        )
    }
}
