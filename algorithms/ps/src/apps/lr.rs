//! Multinomial logistic regression by mini-batch SGD on the parameter server ([`PsLr`],
//! `petrel train ps-lr`).
// Long because one file per app: settings, state and the `PsApp` impl share private types.
//!
//! One file per app on purpose (about 820 lines): settings, data, gradient, monitor and
//! checkpoint state and the [`PsApp`] impl share private types.
//!
//! One PS table `weights` (id 0): row `j` holds the `n_classes` weights of feature `j`, row
//! `n_features` the biases. The optimizer lives on the shards: the table uses a server-side
//! rule (`--rule`: fixed-step `Sgd`, `Adagrad` or `AdaRevision`), so workers send raw
//! gradients (`batch_inc`) and read-my-writes applies `-learning_rate * gradient` locally.
//! Under AdaRevision a row also carries the gradient sums `z` of its weights (`2 * n_classes`
//! wide) and a worker sends the `z` it read beside its gradient. Worker `w` owns the training samples
//! `i % n_workers == w`; per clock it takes its next mini-batch, reads the rows of the features
//! present in it (`get_many`, under the job's consistency model), computes the softmax
//! cross-entropy gradient and calls `clock()`. The monitor snapshots the shards every
//! `eval_ms` and records held-out accuracy and log-loss; at the end it writes `model.json`
//! (weights `n_features + 1` rows x `n_classes`, and the class labels) and `metrics.json`.
//!
//! Data: LIBSVM files (`label idx:val ...`; labels may be any numbers, mapped in sorted order to
//! classes) or synthetic separable classes.

use crate::core::rules::{ServerRule, adarevision_delta};
use crate::core::stats::{ReadStats, StalenessReport, StalenessStats};
use crate::core::straggler::StragglerModel;
use crate::core::types::{Consistency, ConsistencyModel, Row, RowId, TableId, TableSpec};
use crate::error::PsError;
use crate::kit::{
    MonitorCtx, PsApp, PsRoles, PsStep, WorkerCtx, WorkerDone, write_model_and_metrics,
};
use crate::shells::{PsLayout, TablesBuilder};
use petrel_actors::Settings;
use petrel_ml::data::libsvm::{SparseDataset, SparseRow, load_libsvm};
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};
use petrel_ml::job::{InvalidSetting, SettingChecks};
use petrel_ml::model::{MODEL_FILE, ModelParams, SavedModel, SoftmaxModel};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The weights table.
pub const WEIGHTS: TableId = TableId(0);

/// The settings of ps-lr: the flags of `petrel train ps-lr` (serde, so a caller can read
/// them from TOML).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct PsLrConfig {
    /// LIBSVM file (`label idx:val ...`); synthetic separable classes when unset.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out LIBSVM file: replaces the `test_fraction` split as the test set of the
    /// accuracy and log-loss curve; the final figures go to metrics.json as `heldout_*`.
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// Synthetic data: samples.
    #[arg(long, default_value_t = 2000)]
    pub synthetic_samples: usize,
    /// Synthetic data: features.
    #[arg(long, default_value_t = 20)]
    pub synthetic_features: usize,
    /// Synthetic data: classes.
    #[arg(long, default_value_t = 3)]
    pub synthetic_classes: usize,
    /// Seed of the data and the split.
    #[arg(long, default_value_t = 11)]
    pub seed: u64,
    /// Fraction of the samples held out (unused with `test_data`).
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,
    /// Step size of the shards' rule (AdaRevision's and Adagrad's `alpha`).
    #[arg(long, default_value_t = 0.5)]
    pub learning_rate: f32,
    /// The shards' update rule: sgd (fixed step), adagrad or adarevision.
    #[arg(long, value_enum, default_value_t = ServerRule::Sgd)]
    pub rule: ServerRule,
    /// Samples per clock and worker.
    #[arg(long, default_value_t = 50)]
    pub batch_size: usize,
    /// Consistency model of the weights table.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Staleness bound of SSP and ESSP.
    #[arg(long, default_value_t = 2)]
    pub staleness: u32,
    /// Clocks per worker.
    #[arg(long = "clocks", default_value_t = 200)]
    pub max_clocks: u64,
    /// Milliseconds between evaluations of the monitor.
    #[arg(long, default_value_t = 250)]
    pub eval_ms: u64,
    /// Stop once the held-out log-loss is at or below this.
    #[arg(long)]
    pub target_log_loss: Option<f64>,
    /// The monitor stops the workers after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub max_seconds: f64,
    /// Emulated compute time per clock (0: just the real compute).
    #[arg(long, default_value_t = 0.0)]
    pub clock_ms: f64,
    /// Worker slowed down by `straggler_factor` on every clock.
    #[arg(long)]
    pub straggler: Option<u32>,
    /// How much slower the persistent straggler's clocks are.
    #[arg(long, default_value_t = 1.0)]
    pub straggler_factor: f64,
    /// Transient stragglers: probability that a clock of a worker is slowed (seeded by
    /// `seed`).
    #[arg(long, default_value_t = 0.0)]
    pub transient_probability: f64,
    /// How much slower a transiently slowed clock is.
    #[arg(long, default_value_t = 1.0)]
    pub transient_factor: f64,
    /// Output directory for `model.json` and `metrics.json` (required by `petrel train`;
    /// settings without it write no files).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a checkpoint of the whole job (the weights, worker clocks, the history) into
    /// this directory every `checkpoint_every` clocks (every node must see it; `petrel
    /// train` defaults it to `<out>/checkpoints`).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Clocks between two checkpoints (0 = never write; needs `rule = sgd`: adagrad and
    /// adarevision keep state on the shards).
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in `checkpoint_dir`.
    #[arg(long)]
    pub resume: bool,
}

impl PsLrConfig {
    /// Whether the weights can be checkpointed: the shards' rule keeps no state besides the
    /// rows (`sgd`).
    pub fn checkpoints_possible(&self) -> bool {
        self.rule == ServerRule::Sgd
    }

    /// The emulated compute time of every clock of every worker.
    pub fn straggler_model(&self) -> StragglerModel {
        StragglerModel {
            clock_ms: self.clock_ms,
            persistent: self.straggler,
            persistent_factor: self.straggler_factor,
            transient_probability: self.transient_probability,
            transient_factor: self.transient_factor,
            seed: self.seed,
        }
    }
}

// Every default is written once, on its flag.
impl Default for PsLrConfig {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl PsLrConfig {
    /// Every value in range (keys as in `[app.lr]`), checked before any node starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        if self.data.is_none() {
            c.at_least("synthetic_samples", self.synthetic_samples, 2);
            c.at_least("synthetic_features", self.synthetic_features, 1);
            c.at_least("synthetic_classes", self.synthetic_classes, 2);
        }
        c.fraction("test_fraction", self.test_fraction);
        c.require(
            self.learning_rate.is_finite()
                && self.learning_rate > 0.0
                && self.learning_rate <= 100.0,
            "learning_rate",
            self.learning_rate,
            "must be in (0, 100]",
        );
        c.at_least("batch_size", self.batch_size, 1);
        c.at_least("max_clocks", self.max_clocks, 1);
        c.at_least("eval_ms", self.eval_ms, 1);
        c.require(
            !(self.checkpoint_dir.is_some() && self.checkpoint_every > 0)
                || self.checkpoints_possible(),
            "checkpoint_every",
            self.checkpoint_every,
            "checkpoints need rule sgd (adagrad and adarevision keep state on the shards); set 0",
        );
        c.finish()
    }
}

/// Samples as sparse rows with class indices.
#[derive(Debug, Clone)]
pub struct PsLrData {
    /// Features per sample (the bias row is row `n_features`).
    pub n_features: usize,
    /// Original label of class `c`.
    pub class_labels: Vec<f32>,
    /// Training samples.
    pub train: Vec<(SparseRow, usize)>,
    /// Held-out samples.
    pub test: Vec<(SparseRow, usize)>,
}

impl PsLrData {
    /// Loads (or generates) the samples, maps labels to classes and splits them.
    pub fn load(cfg: &PsLrConfig) -> Result<PsLrData, PsError> {
        let invalid = |reason: String| PsError::InvalidConfig {
            app: PsLr::NAME,
            reason,
        };
        let ds: SparseDataset = match &cfg.data {
            Some(p) => load_libsvm(p)?,
            None => {
                separable_classification(&ClassificationParams {
                    n_samples: cfg.synthetic_samples,
                    n_features: cfg.synthetic_features,
                    n_classes: cfg.synthetic_classes,
                    margin: 0.5,
                    seed: cfg.seed,
                })?
                .dataset
            }
        };
        if ds.rows.is_empty() {
            return Err(invalid("no samples".into()));
        }
        if let Some((row, l)) = ds.labels.iter().enumerate().find(|(_, l)| l.fract() != 0.0) {
            return Err(invalid(format!(
                "row {}: label {l} is not a class id; ps-lr needs integer class labels (regression targets belong to lasso)",
                row + 1
            )));
        }
        let mut labels: Vec<f32> = ds.labels.clone();
        labels.sort_by(f32::total_cmp);
        labels.dedup();
        if labels.len() < 2 {
            return Err(invalid(format!(
                "need at least 2 classes, found {}",
                labels.len()
            )));
        }
        let class_of = |l: f32| labels.iter().position(|&x| x == l).unwrap_or(0);
        let mut all: Vec<(SparseRow, usize)> = ds
            .rows
            .iter()
            .cloned()
            .zip(ds.labels.iter().map(|&l| class_of(l)))
            .collect();
        all.shuffle(&mut StdRng::seed_from_u64(cfg.seed ^ 0x1f));
        let test = match &cfg.test_data {
            Some(path) => {
                let held = load_libsvm(path)?;
                let mut test = Vec::with_capacity(held.rows.len());
                for (row, (x, l)) in held.rows.into_iter().zip(held.labels).enumerate() {
                    let class = labels.iter().position(|&c| c == l).ok_or_else(|| {
                        invalid(format!(
                            "{} row {}: label {l} is not one of the training classes {labels:?}",
                            path.display(),
                            row + 1
                        ))
                    })?;
                    test.push((x, class));
                }
                test
            }
            None => {
                let n_test =
                    ((cfg.test_fraction.clamp(0.0, 0.9)) * all.len() as f64).round() as usize;
                all.split_off(all.len() - n_test)
            }
        };
        Ok(PsLrData {
            n_features: ds.n_features,
            class_labels: labels,
            train: all,
            test,
        })
    }

    /// Number of classes.
    pub fn n_classes(&self) -> usize {
        self.class_labels.len()
    }
}

/// Softmax probabilities of a sample given the weight rows (`bias` = the bias row).
pub fn probabilities(
    x: &SparseRow,
    rows: &HashMap<u32, Vec<f32>>,
    bias: u32,
    k: usize,
) -> Vec<f64> {
    let mut z: Vec<f64> = rows.get(&bias).map_or_else(
        || vec![0.0; k],
        |b| b.iter().map(|&v| f64::from(v)).collect(),
    );
    for (&j, &v) in x.indices.iter().zip(&x.values) {
        if let Some(w) = rows.get(&j) {
            for (zc, wc) in z.iter_mut().zip(w) {
                *zc += f64::from(v) * f64::from(*wc);
            }
        }
    }
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut s = 0.0;
    for zc in z.iter_mut() {
        *zc = (*zc - m).exp();
        s += *zc;
    }
    z.iter().map(|e| e / s).collect()
}

/// Mean softmax cross-entropy gradient of `batch`, per weight row.
pub fn gradient(
    batch: &[&(SparseRow, usize)],
    rows: &HashMap<u32, Vec<f32>>,
    bias: u32,
    k: usize,
) -> HashMap<u32, Vec<f32>> {
    let mut g: HashMap<u32, Vec<f32>> = HashMap::new();
    let n = batch.len().max(1) as f32;
    for (x, y) in batch.iter().map(|s| (&s.0, s.1)) {
        let p = probabilities(x, rows, bias, k);
        let err: Vec<f32> = (0..k)
            .map(|c| (p[c] - if c == y { 1.0 } else { 0.0 }) as f32 / n)
            .collect();
        for (&j, &v) in x
            .indices
            .iter()
            .zip(&x.values)
            .chain(std::iter::once((&bias, &1.0)))
        {
            let e = g.entry(j).or_insert_with(|| vec![0.0; k]);
            for (gc, ec) in e.iter_mut().zip(&err) {
                *gc += v * ec;
            }
        }
    }
    g
}

/// (accuracy, mean log-loss) on `samples`.
pub fn evaluate(
    samples: &[(SparseRow, usize)],
    rows: &HashMap<u32, Vec<f32>>,
    bias: u32,
    k: usize,
) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let (mut correct, mut loss) = (0usize, 0.0f64);
    for (x, y) in samples {
        let p = probabilities(x, rows, bias, k);
        let best = (0..k).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap_or(0);
        correct += usize::from(best == *y);
        loss -= p[*y].max(1e-12).ln();
    }
    (
        correct as f64 / samples.len() as f64,
        loss / samples.len() as f64,
    )
}

/// One point of the convergence curve.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PsLrPoint {
    /// Seconds since the monitor started.
    pub seconds: f64,
    /// Min clock over the shards.
    pub clock: u64,
    /// Held-out accuracy.
    pub accuracy: f64,
    /// Held-out mean log-loss.
    pub log_loss: f64,
}

/// What a run measured (`metrics.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsLrResult {
    /// The weights table's consistency model.
    pub consistency: ConsistencyModel,
    /// Workers.
    pub n_workers: u32,
    /// Shards.
    pub n_shards: u32,
    /// Training samples.
    pub train_samples: usize,
    /// Held-out samples.
    pub test_samples: usize,
    /// Features.
    pub n_features: usize,
    /// Classes.
    pub n_classes: usize,
    /// Log-loss of the initial model (step 0 of the curve: all weights zero).
    pub initial_log_loss: f64,
    /// Log-loss at the last evaluation.
    pub final_log_loss: f64,
    /// Accuracy at the last evaluation.
    pub final_accuracy: f64,
    /// The target log-loss, if any.
    pub target_log_loss: Option<f64>,
    /// Whether the target was reached.
    pub reached_target: bool,
    /// Seconds until it was.
    pub time_to_target_s: Option<f64>,
    /// Min clock when the target was reached (or at the end).
    pub iterations: u64,
    /// Seconds of the whole run.
    pub wall_s: f64,
    /// Clocks each worker completed.
    pub worker_clocks: Vec<u64>,
    /// Observed staleness of the weight reads.
    pub staleness: StalenessReport,
    /// What each worker's reads cost (round trips, time blocked).
    #[serde(default)]
    pub per_worker_reads: Vec<ReadStats>,
    /// The convergence curve.
    pub curve: Vec<PsLrPoint>,
}

impl PsLrResult {
    /// The one metrics format: a record per evaluation of the monitor (step: the slowest
    /// worker's clock); SGD runs its clocks (no convergence test).
    pub fn run_metrics(&self, cfg: &PsLrConfig) -> petrel_ml::job::RunMetrics {
        let mut m = petrel_ml::job::RunMetrics::new(PsLr::NAME, cfg, self, self.wall_s);
        for p in &self.curve {
            m.record(
                p.clock,
                p.seconds,
                &[("test_accuracy", p.accuracy), ("test_log_loss", p.log_loss)],
            );
        }
        m.finals(&[
            ("test_accuracy", self.final_accuracy),
            ("test_log_loss", self.final_log_loss),
        ]);
        m.converged = false;
        m.stop_reason = format!(
            "ran max_clocks = {} (SGD has no convergence test)",
            cfg.max_clocks
        );
        m
    }
}

/// The learned model (`model.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsLrModel {
    /// Original label of each class.
    pub class_labels: Vec<f32>,
    /// `n_features` weight rows then the bias row, each `n_classes` wide.
    pub weights: Vec<Vec<f32>>,
}

/// What an in-process run returns: the metrics and the model.
#[derive(Debug, Clone)]
pub struct PsLrOutcome {
    /// `metrics.json`.
    pub metrics: PsLrResult,
    /// `model.json`.
    pub model: PsLrModel,
}

/// The ps-lr app: its config and data.
pub struct PsLr {
    /// The settings.
    pub cfg: PsLrConfig,
    /// The samples.
    pub data: PsLrData,
    tables: Vec<TableSpec>,
    stragglers: StragglerModel,
}

/// The ps-lr monitor between evaluations (a checkpoint keeps the curve; the weights are
/// read again at the next evaluation).
#[derive(Default, Serialize, Deserialize)]
pub struct PsLrMonitor {
    curve: Vec<PsLrPoint>,
    reached: Option<(f64, u64)>,
    #[serde(skip)]
    weights: HashMap<u32, Vec<f32>>,
    #[serde(skip)]
    reports: Vec<WorkerDone>,
}

impl PsLr {
    fn bias(&self) -> u32 {
        self.data.n_features as u32
    }

    /// The mini-batch of clock `clock` of the worker owning samples `mine`, and the sorted
    /// weight rows it reads (its features and the bias row).
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

impl PsApp for PsLr {
    type Config = PsLrConfig;
    /// The worker's samples (indices into the training set).
    type Worker = Vec<usize>;
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

    fn validate_config(cfg: &PsLrConfig) -> Result<(), InvalidSetting> {
        cfg.validate()
    }

    fn new(cfg: PsLrConfig, _layout: &PsLayout) -> Result<Self, PsError> {
        if cfg.resume && cfg.checkpoint_dir.is_none() {
            return Err(PsError::InvalidConfig {
                app: PsLr::NAME,
                reason: "resume needs checkpoint_dir".into(),
            });
        }
        let data = PsLrData::load(&cfg)?;
        let k = data.n_classes() as u32;
        let tables = TablesBuilder::new()
            .dense(
                "weights",
                cfg.rule.row_width(k),
                Consistency::new(cfg.consistency, cfg.staleness),
            )
            .rule(cfg.rule.spec(cfg.learning_rate, k))
            .build()?;
        let stragglers = cfg.straggler_model();
        Ok(PsLr {
            cfg,
            data,
            tables,
            stragglers,
        })
    }

    fn tables(&self) -> Vec<TableSpec> {
        self.tables.clone()
    }

    fn tune_local(settings: &mut Settings) {
        settings.cluster.failure_timeout_ms = 10_000;
    }

    /// A worker's samples and batch follow from its id and clock: nothing to save but the
    /// weights (the shards') and the clock (the kit's).
    fn checkpointing(&self) -> Option<crate::kit::PsCheckpointing> {
        Some(crate::kit::PsCheckpointing {
            dir: self.cfg.checkpoint_dir.clone()?,
            every: self.cfg.checkpoint_every,
            resume: self.cfg.resume,
        })
    }

    fn save_monitor(&self, m: &PsLrMonitor, clock: u64) -> Result<Vec<u8>, PsError> {
        // The curve up to the checkpoint: the resumed run evaluates later clocks again.
        let kept = PsLrMonitor {
            curve: m
                .curve
                .iter()
                .copied()
                .filter(|p| p.clock <= clock)
                .collect(),
            reached: m.reached.filter(|r| r.1 <= clock),
            ..PsLrMonitor::default()
        };
        rmp_serde::to_vec(&kept)
            .map_err(|e| crate::core::error::PsCoreError::Encode(e.to_string()).into())
    }

    fn resume_monitor(&self, saved: &[u8]) -> Result<PsLrMonitor, PsError> {
        rmp_serde::from_slice(saved).map_err(|e| {
            crate::core::error::PsCoreError::Checkpoint {
                path: "ps-lr monitor checkpoint".into(),
                reason: format!("decode: {e}"),
            }
            .into()
        })
    }

    fn start_worker(&self, ctx: &WorkerCtx<'_, WorkerDone>) -> Result<Vec<usize>, PsError> {
        let (w, nw) = (ctx.worker() as usize, ctx.n_workers() as usize);
        Ok((0..self.data.train.len()).filter(|i| i % nw == w).collect())
    }

    async fn step(
        &self,
        mine: &mut Vec<usize>,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<PsStep, PsError> {
        let c = ctx.client;
        if c.current_clock() >= self.cfg.max_clocks || mine.is_empty() {
            return Ok(PsStep::Done);
        }
        let (k, bias, clock) = (self.data.n_classes(), self.bias(), c.current_clock());
        let (batch, feats) = self.batch_of(mine, clock);
        let ids: Vec<RowId> = feats.iter().map(|&j| RowId(u64::from(j))).collect();
        if self.cfg.consistency == ConsistencyModel::Async {
            // An async table's cached rows never expire: without a refresh every later
            // gradient would be taken at the first read's values (as ps-mf and ps-lda do).
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
        let per_clock = self.stragglers.clock_time(ctx.worker(), c.current_clock());
        let spent = t0.elapsed();
        if spent < per_clock {
            tokio::time::sleep(per_clock - spent).await;
        }
        Ok(PsStep::Clock)
    }

    fn finish_worker(
        &self,
        _mine: Vec<usize>,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<WorkerDone, PsError> {
        Ok(WorkerDone::of(ctx.client, WEIGHTS))
    }

    fn eval_interval(&self) -> Duration {
        Duration::from_millis(self.cfg.eval_ms.max(1))
    }

    async fn observe(
        &self,
        m: &mut PsLrMonitor,
        ctx: &MonitorCtx<'_>,
        reports: Vec<WorkerDone>,
        all_done: bool,
    ) -> Result<Option<String>, PsError> {
        m.reports.extend(reports);
        let k = self.data.n_classes();
        if m.curve.is_empty() {
            // Step 0: the model before any update (all weights zero), whatever the workers
            // did before this first snapshot.
            let (accuracy, log_loss) = evaluate(&self.data.test, &HashMap::new(), self.bias(), k);
            m.curve.push(PsLrPoint {
                seconds: 0.0,
                clock: 0,
                accuracy,
                log_loss,
            });
        }
        let (mut tables, clock) = ctx.tables().await?;
        m.weights = (tables.remove(&WEIGHTS).unwrap_or_default().into_iter())
            .map(|(r, row)| (r.0 as u32, row.to_dense(k)))
            .collect();
        let (accuracy, log_loss) = evaluate(&self.data.test, &m.weights, self.bias(), k);
        ctx.progress("log_loss", log_loss);
        let t = ctx.elapsed_s();
        m.curve.push(PsLrPoint {
            seconds: t,
            clock,
            accuracy,
            log_loss,
        });
        if m.reached.is_none() && self.cfg.target_log_loss.is_some_and(|x| log_loss <= x) {
            m.reached = Some((t, clock));
        }
        Ok(if all_done {
            None
        } else if m.reached.is_some() {
            Some(format!(
                "target log-loss reached ({log_loss:.4} at clock {clock})"
            ))
        } else if t >= self.cfg.max_seconds {
            Some(format!("max_seconds {} passed", self.cfg.max_seconds))
        } else {
            None
        })
    }

    async fn finish(
        &self,
        mut m: PsLrMonitor,
        ctx: &MonitorCtx<'_>,
    ) -> Result<PsLrOutcome, PsError> {
        let (k, bias) = (self.data.n_classes(), self.bias());
        m.reports.sort_by_key(|r| r.worker);
        let mut st = StalenessStats::new();
        for r in &m.reports {
            st.merge(&r.staleness);
        }
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
            iterations: m.reached.map_or(last.map_or(0, |p| p.clock), |r| r.1),
            wall_s: ctx.elapsed_s(),
            worker_clocks: m.reports.iter().map(|r| r.clocks).collect(),
            staleness: st.report(),
            per_worker_reads: m.reports.iter().map(|r| r.reads).collect(),
            curve: m.curve,
        };
        // The weights of the last evaluation, taken after every worker was done.
        let model = PsLrModel {
            class_labels: self.data.class_labels.clone(),
            weights: (0..=bias)
                .map(|j| m.weights.get(&j).cloned().unwrap_or_else(|| vec![0.0; k]))
                .collect(),
        };
        Ok(PsLrOutcome { metrics, model })
    }

    fn write_outputs(&self, out: &PsLrOutcome) -> Result<(), PsError> {
        let mut run = out.metrics.run_metrics(&self.cfg);
        if let Some(dir) = &self.cfg.out {
            let saved = SavedModel::new(
                PsLr::NAME,
                &self.cfg,
                ModelParams::Softmax(SoftmaxModel {
                    class_labels: out.model.class_labels.clone(),
                    weights: out.model.weights.clone(),
                }),
            );
            saved.add_heldout(&mut run, self.cfg.test_data.as_deref(), self.cfg.seed)?;
            crate::kit::write_json(dir, MODEL_FILE, &saved, false)?;
        }
        write_model_and_metrics(
            self.cfg.out.as_deref(),
            &out.model,
            &run,
            "lower learning_rate",
        )
    }

    fn summary(cfg: &PsLrConfig, out: &PsLrOutcome) -> String {
        let r = &out.metrics;
        let dir = cfg.out.as_deref().unwrap_or(std::path::Path::new("-"));
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
