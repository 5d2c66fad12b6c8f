//! Matrix factorization by SGD on the parameter server ([`PsMf`], `petrel train ps-mf`,
//! roles `ps-shard`/`ps-worker`/`ps-monitor` with `[app.mf]`).
// Long because one file per app: settings, state and the `PsApp` impl share private types.
//!
//! One file per app on purpose (about 1200 lines; tests in `mf/tests.rs`): the job's
//! settings and their validation, the data, the SGD math, the worker, monitor and checkpoint
//! state and the [`PsApp`] impl that binds them share private types; the
//! pieces other apps reuse live in `kit` and `core`.
//!
//! Model: `rating ~ mean + u_user . v_item` (with `biases`: `+ b_user + b_item`). Two dense PS tables of width `rank`: `users`
//! (table 0) and `items` (table 1). A stored row is the *offset* from a deterministic random
//! initial value (`init_value`), so no initialisation round is needed and every node agrees.
//! Worker `w` owns the users `u % n_workers == w` (their ratings and their rows: only it writes
//! them, so the users table is `Async` and read-my-writes gives the exact value); the items
//! table has the job's consistency model (BSP, SSP, ESSP or async) and is shared by everyone.
//!
//! Per clock a worker takes the next mini-batch of its ratings, reads the rows it touches
//! (`get_many`; under async it also prefetches fresh copies without waiting), runs sequential
//! SGD on local copies, `batch_inc`s the differences and calls `clock()`. Stragglers are
//! emulated by stretching a worker's clock to `clock_ms * factor` (sleeping for the difference
//! between that and the real compute time): a persistent straggler (`straggler`) and transient
//! ones (`transient_probability`), both a `StragglerModel`.
//!
//! The monitor snapshots the shards every `eval_ms`, computes the held-out RMSE of the global
//! model, records the convergence curve, and tells every worker to stop once the target RMSE
//! is reached or `max_seconds` passed (workers stop by themselves after `max_clocks`). It
//! then collects the workers' staleness statistics and writes `model.json` and
//! `metrics.json`.
// Long (about 900 lines before its tests): the app's settings, validation, worker step,
// managed-communication slicing and monitor share the same row layout; splitting them would
// spread one app over files that each need all of it.

use crate::core::managed::{BandwidthManager, ManagedSettings, SendPolicy, slice_ranges};
use crate::core::rules::{ServerRule, adarevision_delta};
use crate::core::server_push::ServerPushConfig;
use crate::core::stats::{ReadStats, StalenessReport, StalenessStats};
use crate::core::straggler::StragglerModel;
use crate::core::types::{Consistency, ConsistencyModel, Row, RowId, TableId, TableSpec};
use crate::error::PsError;
use crate::kit::{MonitorCtx, PsApp, PsStep, WorkerCtx, WorkerDone, write_model_and_metrics};
use crate::shells::{PsLayout, TablesBuilder};
use petrel_ml::data::ratings::{Ratings, load_ratings};
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use petrel_ml::job::{InvalidSetting, SettingChecks};
use petrel_ml::model::{FactorModel, MODEL_FILE, ModelParams, SavedModel};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The users table.
pub const USERS: TableId = TableId(0);
/// The items table.
pub const ITEMS: TableId = TableId(1);

/// The settings of ps-mf: `[app.mf]` in TOML and the flags of `petrel train ps-mf`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct PsMfConfig {
    /// Ratings file: `user item rating` triplets (tab/space/comma; MovieLens `u.data` works)
    /// or a MatrixMarket coordinate file. Synthetic low-rank data when unset.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out ratings file (MovieLens `u1.test` beside `u1.base`): replaces the
    /// `test_fraction` split as the test set of the RMSE curve (pairs whose user or item
    /// has no training rating are left to the final evaluation, `heldout_*` in metrics.json).
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// Synthetic data: users.
    #[arg(long, default_value_t = 600)]
    pub synthetic_users: usize,
    /// Synthetic data: items.
    #[arg(long, default_value_t = 300)]
    pub synthetic_items: usize,
    /// Synthetic data: rank of the true model.
    #[arg(long, default_value_t = 5)]
    pub synthetic_rank: usize,
    /// Synthetic data: fraction of the matrix observed.
    #[arg(long, default_value_t = 0.1)]
    pub synthetic_observed: f64,
    /// Synthetic data: noise standard deviation.
    #[arg(long, default_value_t = 0.1)]
    pub synthetic_noise: f32,
    /// Seed of the data, the split and the batch order.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Fraction of the ratings held out for the RMSE (unused with `test_data`).
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    /// Factor rank of the model.
    #[arg(long, default_value_t = 16)]
    pub rank: u32,
    /// Fit a bias per user and per item: `rating ~ mean + b_user + b_item + u . v` (the
    /// biases are regularised by `regularization` too). Rows carry two more columns:
    /// users `[u, b_user, 1]`, items `[v, 1, b_item]`, the constant 1s never updated.
    #[arg(long)]
    pub biases: bool,
    /// SGD step size (with `rule`: the shards' `alpha`).
    #[arg(long, default_value_t = 0.02)]
    pub learning_rate: f32,
    /// Optimizer on the shards instead of local SGD: workers send the mini-batch gradient at
    /// the rows they read and the shards apply sgd (fixed step), adagrad or adarevision.
    /// Unset: sequential SGD on local copies, differences summed on the shards.
    #[arg(long, value_enum)]
    pub rule: Option<ServerRule>,
    /// L2 regularization, applied with every rating's step (SGD and the `rule` gradients
    /// alike), so a user's row is pulled towards zero `n_u` times per pass: the objective's
    /// L2 term is already weighted by rating counts, `regularization * n_u` per user and
    /// `* n_i` per item (ALS-WR's weighted lambda, strads-mf's `weighted_lambda`).
    #[arg(long, default_value_t = 0.05)]
    pub regularization: f32,
    /// Scale of the random initial factors.
    #[arg(long, default_value_t = 0.1)]
    pub init_scale: f32,
    /// Consistency model of the items table.
    #[arg(long, value_enum, ignore_case = true, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Staleness bound of SSP and ESSP.
    #[arg(long, default_value_t = 3)]
    pub staleness: u32,
    /// Clocks per pass over a worker's ratings.
    #[arg(long, default_value_t = 4)]
    pub batches_per_epoch: u32,
    /// Passes over the data (`epochs * batches_per_epoch` clocks, unless `max_clocks`).
    #[arg(long, default_value_t = 20)]
    pub epochs: u64,
    /// Clocks per worker (overrides `epochs`).
    #[arg(long)]
    pub max_clocks: Option<u64>,
    /// The monitor stops the workers after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub max_seconds: f64,
    /// Stop once the held-out RMSE is at or below this.
    #[arg(long)]
    pub target_rmse: Option<f64>,
    /// Milliseconds between evaluations of the monitor.
    #[arg(long, default_value_t = 250)]
    pub eval_ms: u64,
    /// Emulated compute time per clock (0: just the real compute).
    #[arg(long, default_value_t = 0.0)]
    pub clock_ms: f64,
    /// Worker slowed down by `straggler_factor` (its clocks take `clock_ms * factor`).
    #[arg(long)]
    pub straggler: Option<u32>,
    /// How much slower the straggler's clocks are.
    #[arg(long, default_value_t = 1.0)]
    pub straggler_factor: f64,
    /// Transient stragglers: probability that a clock of a worker is slowed (seeded by
    /// `seed`, the same slowdowns for every consistency model).
    #[arg(long, default_value_t = 0.0)]
    pub transient_probability: f64,
    /// How much slower a transiently slowed clock is.
    #[arg(long, default_value_t = 1.0)]
    pub transient_factor: f64,
    /// Managed communication (Bösen): while a clock computes, send the pending updates early
    /// in this order (fifo, random, relative-magnitude) within `managed_bytes_per_s`. Unset:
    /// updates leave only at the clock boundary.
    #[arg(long, value_enum)]
    pub managed: Option<SendPolicy>,
    /// Slices a clock's compute is cut into (updates become pending slice by slice; managed
    /// communication gets one tick per slice).
    #[arg(long, default_value_t = 4)]
    pub compute_slices: u32,
    /// Bandwidth budget of managed communication, bytes per second per worker (and, for
    /// `server_push`, per shard).
    #[arg(long, default_value_t = 1_000_000)]
    pub managed_bytes_per_s: u64,
    /// Server push (Bösen's managed communication from shards to workers): every
    /// `server_push_tick_ms` each shard pushes the changed rows the workers hold, in this
    /// order (fifo, random, relative-magnitude), within `managed_bytes_per_s`. Unset: a
    /// worker sees others' updates only on a miss.
    #[arg(long, value_enum)]
    pub server_push: Option<SendPolicy>,
    /// Time between two server-push ticks of a shard, ms.
    #[arg(long, default_value_t = 10)]
    pub server_push_tick_ms: u64,
    /// Do not request the next clock's item rows during a clock (`prefetch_next_clock`). The
    /// prefetch hides the read round trip behind the compute but refreshes rows a little more
    /// often: on a bandwidth-bound link the extra replies can cost more than it saves.
    #[arg(long)]
    pub no_prefetch: bool,
    /// Output directory for `model.json` and `metrics.json` (required by `petrel train`;
    /// settings without it write no files).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a checkpoint of the whole job (tables, worker clocks and state, the history)
    /// into this directory every `checkpoint_every` clocks (every node must see it;
    /// `petrel train` defaults it to `<out>/checkpoints`).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Clocks between two checkpoints (0 = never write; needs no `rule` or `rule = sgd`).
    #[arg(long, default_value_t = 20)]
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in `checkpoint_dir`.
    #[arg(long)]
    pub resume: bool,
    /// Test hook: worker `w` fails at clock `c` (`[w, c]`).
    #[arg(skip)]
    pub fail_worker_at: Option<(u32, u64)>,
}

// Every default is written once, on its flag.
impl Default for PsMfConfig {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl PsMfConfig {
    /// Every value in range (keys as in `[app.mf]`), checked before any node starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        if self.data.is_none() {
            c.at_least("synthetic_users", self.synthetic_users, 1);
            c.at_least("synthetic_items", self.synthetic_items, 1);
            c.at_least("synthetic_rank", self.synthetic_rank, 1);
            c.require(
                self.synthetic_observed > 0.0 && self.synthetic_observed <= 1.0,
                "synthetic_observed",
                self.synthetic_observed,
                "must be in (0, 1]",
            );
            c.non_negative("synthetic_noise", self.synthetic_noise);
        }
        c.fraction("test_fraction", self.test_fraction);
        c.at_least("rank", self.rank, 1);
        // SGD on unit-scale ratings diverges long before a step of 1; Adagrad's and
        // AdaRevision's alpha is a length (the first step of a coordinate), not a rate.
        let (max_step, range) = match self.rule {
            Some(ServerRule::Adagrad | ServerRule::AdaRevision) => (100.0, "must be in (0, 100]"),
            _ => (1.0, "must be in (0, 1]"),
        };
        c.require(
            self.learning_rate.is_finite()
                && self.learning_rate > 0.0
                && self.learning_rate <= max_step,
            "learning_rate",
            self.learning_rate,
            range,
        );
        c.non_negative("regularization", self.regularization);
        c.non_negative("init_scale", self.init_scale);
        c.at_least("batches_per_epoch", self.batches_per_epoch, 1);
        c.at_least("epochs", self.epochs, 1);
        if let Some(m) = self.max_clocks {
            c.at_least("max_clocks", m, 1);
        }
        c.positive("max_seconds", self.max_seconds);
        if let Some(t) = self.target_rmse {
            c.non_negative("target_rmse", t);
        }
        c.at_least("eval_ms", self.eval_ms, 1);
        c.non_negative("clock_ms", self.clock_ms);
        c.at_least("server_push_tick_ms", self.server_push_tick_ms, 1);
        self.managed_settings().check(&mut c);
        c.require(
            !(self.checkpoint_dir.is_some() && self.checkpoint_every > 0)
                || self.checkpoints_possible(),
            "checkpoint_every",
            self.checkpoint_every,
            "checkpoints need no rule or rule sgd (adagrad and adarevision keep state on the shards); set 0",
        );
        c.require(
            self.straggler_factor.is_finite() && self.straggler_factor >= 1.0,
            "straggler_factor",
            self.straggler_factor,
            "must be a finite number >= 1",
        );
        c.finish()
    }

    /// Whether the tables can be checkpointed: their shard rules keep no state besides
    /// the rows (no `rule`, or `sgd`).
    pub fn checkpoints_possible(&self) -> bool {
        matches!(self.rule, None | Some(ServerRule::Sgd))
    }

    /// The items table's consistency.
    pub fn consistency(&self) -> Consistency {
        Consistency::new(self.consistency, self.staleness)
    }

    /// `managed`, `managed_bytes_per_s` and `compute_slices`.
    pub fn managed_settings(&self) -> ManagedSettings {
        ManagedSettings {
            policy: self.managed,
            bytes_per_s: self.managed_bytes_per_s,
            compute_slices: self.compute_slices,
        }
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

    /// Clocks each worker runs: `max_clocks`, else `epochs * batches_per_epoch`.
    pub fn clocks(&self) -> u64 {
        self.max_clocks.unwrap_or_else(|| {
            self.epochs
                .saturating_mul(u64::from(self.batches_per_epoch.max(1)))
        })
    }

    /// Model columns of a row: the rank, plus the bias and constant columns with `biases`.
    pub fn row_width(&self) -> u32 {
        if self.biases {
            self.rank + 2
        } else {
            self.rank
        }
    }

    /// The columns SGD leaves alone (`(users', items')`): the constant 1s of [`Self::biases`].
    pub fn fixed_columns(&self) -> Option<(usize, usize)> {
        self.biases
            .then(|| (self.rank as usize + 1, self.rank as usize))
    }

    /// The tables: `users` (async, owned by one worker each) and `items`.
    pub fn tables(&self) -> Result<Vec<TableSpec>, PsError> {
        if self.rank == 0 {
            return Err(PsError::InvalidConfig {
                app: PsMf::NAME,
                reason: "rank must be >= 1".into(),
            });
        }
        let model_width = self.row_width();
        let Some(rule) = self.rule else {
            return Ok(TablesBuilder::new()
                .dense("users", model_width, Consistency::Async)
                .dense("items", model_width, self.consistency())
                .build()?);
        };
        let (width, spec) = (
            rule.row_width(model_width),
            rule.spec(self.learning_rate, model_width),
        );
        Ok(TablesBuilder::new()
            .dense("users", width, Consistency::Async)
            .rule(spec.clone())
            .dense("items", width, self.consistency())
            .rule(spec)
            .build()?)
    }
}

/// Train/test ratings and the global mean of the training ratings.
#[derive(Debug, Clone)]
pub struct PsMfData {
    /// Training ratings.
    pub train: Ratings,
    /// Held-out ratings.
    pub test: Ratings,
    /// Mean training rating.
    pub mean: f32,
}

impl PsMfData {
    /// The typical size of one coordinate of a rank-`rank` model of these ratings,
    /// `sqrt(sd) * rank^(-1/4)` with `sd` the standard deviation of the training ratings
    /// around their mean.
    /// Two factor vectors whose `rank` coordinates have that size and random signs have dot
    /// products spread like the ratings (`sqrt(rank) * size^2 = sd`). It is the scale of the
    /// solution that AdaRevision's and Adagrad's `alpha` refers to
    /// ([`alpha_for_radius`](crate::core::rules::alpha_for_radius)), taken from the data, not
    /// tuned.
    pub fn factor_scale(&self, rank: u32) -> f64 {
        let n = self.train.entries.len().max(1) as f64;
        let mean = f64::from(self.mean);
        let var = self
            .train
            .entries
            .iter()
            .map(|e| (f64::from(e.2) - mean).powi(2))
            .sum::<f64>()
            / n;
        var.sqrt().sqrt() * f64::from(rank.max(1)).powf(-0.25)
    }

    /// Loads (or generates) the ratings and splits them.
    pub fn load(cfg: &PsMfConfig) -> Result<PsMfData, PsError> {
        let all = match &cfg.data {
            Some(p) => load_ratings(p)?,
            None => {
                low_rank_ratings(&LowRankParams {
                    n_users: cfg.synthetic_users,
                    n_items: cfg.synthetic_items,
                    rank: cfg.synthetic_rank,
                    observed_fraction: cfg.synthetic_observed,
                    noise_std: cfg.synthetic_noise,
                    seed: cfg.seed,
                })?
                .ratings
            }
        };
        if all.entries.is_empty() {
            return Err(PsError::InvalidConfig {
                app: PsMf::NAME,
                reason: "no ratings".into(),
            });
        }
        let (train, test) = match &cfg.test_data {
            // Pairs whose user or item has no training rating are left to the final
            // evaluation of the saved model.
            Some(path) => {
                let (test, _left_out) = all.held_out_from(path)?;
                (all, test)
            }
            None => all.train_test_split(cfg.test_fraction, cfg.seed ^ 0x5eed)?,
        };
        let mean = if train.entries.is_empty() {
            0.0
        } else {
            (train.entries.iter().map(|e| f64::from(e.2)).sum::<f64>() / train.entries.len() as f64)
                as f32
        };
        Ok(PsMfData { train, test, mean })
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
    factor_row(table, row, stored, rank, false, scale)
}

/// [`factor`] with `biases`: users `[u, b_user, 1]`, items `[v, 1, b_item]`, the biases
/// starting at 0.
pub fn factor_row(
    table: TableId,
    row: u64,
    stored: Option<&Row>,
    rank: u32,
    biases: bool,
    scale: f32,
) -> Vec<f32> {
    let mut v: Vec<f32> = (0..rank)
        .map(|c| init_value(table, row, c, scale))
        .collect();
    if biases {
        let constant_last = table == USERS;
        v.extend(if constant_last {
            [0.0, 1.0]
        } else {
            [1.0, 0.0]
        });
    }
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
    fixed: Option<(usize, usize)>,
) {
    let (fixed_u, fixed_i) = fixed.unwrap_or((usize::MAX, usize::MAX));
    for &(u, i, r) in batch {
        let (Some(pu), Some(qi)) = (users.get_mut(&u), items.get_mut(&i)) else {
            continue;
        };
        let e = r - mean - dot(pu, qi);
        for k in 0..pu.len().min(qi.len()) {
            let (p, q) = (pu[k], qi[k]);
            if k != fixed_u {
                pu[k] += lr * (e * q - reg * p);
            }
            if k != fixed_i {
                qi[k] += lr * (e * p - reg * q);
            }
        }
    }
}

/// The gradient of the squared error plus L2 over `batch` at fixed factors (summed over the
/// ratings, as the steps of one SGD pass are): `(d/d users, d/d items)` per id.
pub fn batch_gradient(
    batch: &[(u32, u32, f32)],
    users: &HashMap<u32, Vec<f32>>,
    items: &HashMap<u32, Vec<f32>>,
    mean: f32,
    reg: f32,
    fixed: Option<(usize, usize)>,
) -> (HashMap<u32, Vec<f32>>, HashMap<u32, Vec<f32>>) {
    let (fixed_u, fixed_i) = fixed.unwrap_or((usize::MAX, usize::MAX));
    let (mut gu, mut gi): (HashMap<u32, Vec<f32>>, HashMap<u32, Vec<f32>>) = Default::default();
    for &(u, i, r) in batch {
        let (Some(pu), Some(qi)) = (users.get(&u), items.get(&i)) else {
            continue;
        };
        let e = r - mean - dot(pu, qi);
        let k = pu.len().min(qi.len());
        let a = gu.entry(u).or_insert_with(|| vec![0.0; k]);
        for c in (0..k).filter(|&c| c != fixed_u) {
            a[c] += -e * qi[c] + reg * pu[c];
        }
        let b = gi.entry(i).or_insert_with(|| vec![0.0; k]);
        for c in (0..k).filter(|&c| c != fixed_i) {
            b[c] += -e * pu[c] + reg * qi[c];
        }
    }
    (gu, gi)
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

/// One point of the convergence curve.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct RmsePoint {
    /// Seconds since the monitor started.
    pub seconds: f64,
    /// Min clock over shards (every worker completed this many clocks).
    pub clock: u64,
    /// Held-out RMSE.
    pub rmse: f64,
}

/// What a run measured (`metrics.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsMfResult {
    /// The items table's consistency model.
    pub consistency: ConsistencyModel,
    /// Its staleness bound (0 for BSP, none for async).
    pub staleness_bound: Option<u32>,
    /// Workers.
    pub n_workers: u32,
    /// Shards.
    pub n_shards: u32,
    /// Training ratings.
    pub train_ratings: usize,
    /// Held-out ratings.
    pub test_ratings: usize,
    /// RMSE of the initial model (step 0 of the curve).
    pub initial_rmse: f64,
    /// RMSE of the final model.
    pub final_rmse: f64,
    /// The target, if any.
    pub target_rmse: Option<f64>,
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
    /// Observed staleness of the items reads.
    pub staleness: StalenessReport,
    /// The same per worker (in worker order).
    #[serde(default)]
    pub per_worker_staleness: Vec<StalenessReport>,
    /// Seconds each worker waited for rows.
    pub per_worker_wait_s: Vec<f64>,
    /// Bytes each worker's node sent over the whole run.
    #[serde(default)]
    pub per_worker_sent_bytes: Vec<u64>,
    /// Bytes each worker's node received over the whole run (replies, server pushes).
    #[serde(default)]
    pub per_worker_received_bytes: Vec<u64>,
    /// Seconds each worker spent in a clock's compute (emulated time included).
    #[serde(default)]
    pub per_worker_compute_s: Vec<f64>,
    /// What each worker's reads cost (round trips, time blocked).
    #[serde(default)]
    pub per_worker_reads: Vec<ReadStats>,
    /// Seconds each worker ran (first step to its report).
    #[serde(default)]
    pub per_worker_run_s: Vec<f64>,
    /// The convergence curve.
    pub curve: Vec<RmsePoint>,
}

impl PsMfResult {
    /// The one metrics format: a record per evaluation of the monitor (step: the slowest
    /// worker's clock); `converged` when `target_rmse` was reached.
    pub fn run_metrics(&self, cfg: &PsMfConfig) -> petrel_ml::job::RunMetrics {
        let mut m = petrel_ml::job::RunMetrics::new(PsMf::NAME, cfg, self, self.wall_s);
        for p in &self.curve {
            m.record(p.clock, p.seconds, &[("test_rmse", p.rmse)]);
        }
        m.finals(&[
            ("test_rmse", self.final_rmse),
            ("clocks", self.iterations as f64),
        ]);
        m.converged = self.reached_target;
        m.stop_reason = match (self.target_rmse, self.reached_target) {
            (Some(t), true) => format!("test RMSE reached target_rmse {t}"),
            (Some(t), false) => format!(
                "stopped at the clock or time limit before target_rmse {t}: test RMSE {:.4}",
                self.final_rmse
            ),
            (None, _) => format!("ran {} clocks", cfg.clocks()),
        };
        m
    }
}

/// The learned model (`model.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsMfModel {
    /// Factor rank.
    pub rank: u32,
    /// Mean training rating.
    pub global_mean: f32,
    /// Original user ids (data files only).
    pub user_ids: Option<Vec<String>>,
    /// Original item ids (data files only).
    pub item_ids: Option<Vec<String>>,
    /// User factors.
    pub users: Vec<Vec<f32>>,
    /// Item factors.
    pub items: Vec<Vec<f32>>,
    /// User biases (with `biases`; absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_bias: Vec<f32>,
    /// Item biases (with `biases`; absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_bias: Vec<f32>,
}

impl PsMfModel {
    /// The saved model `petrel eval` and `petrel predict` read: `rating = global_mean +
    /// p_u . q_i`, ids as in the training file (dense indices for synthetic data).
    pub fn saved(&self, cfg: &PsMfConfig) -> SavedModel {
        let labels = |given: &Option<Vec<String>>, n: usize| {
            given
                .clone()
                .unwrap_or_else(|| (0..n).map(|i| i.to_string()).collect())
        };
        SavedModel::new(
            PsMf::NAME,
            cfg,
            ModelParams::Factors(FactorModel {
                global_mean: self.global_mean,
                user_ids: labels(&self.user_ids, self.users.len()),
                item_ids: labels(&self.item_ids, self.items.len()),
                user_factors: self.users.clone(),
                item_factors: self.items.clone(),
                user_bias: self.user_bias.clone(),
                item_bias: self.item_bias.clone(),
            }),
        )
    }
}

/// What an in-process run returns: the metrics and the model.
#[derive(Debug, Clone)]
pub struct PsMfOutcome {
    /// `metrics.json`.
    pub metrics: PsMfResult,
    /// `model.json`.
    pub model: PsMfModel,
}

/// The ps-mf app: its config and data.
pub struct PsMf {
    /// The settings.
    pub cfg: PsMfConfig,
    /// The ratings.
    pub data: PsMfData,
    tables: Vec<TableSpec>,
}

/// A ps-mf worker between clocks.
pub struct PsMfWorker {
    batches: Vec<Vec<(u32, u32, f32)>>,
    stragglers: StragglerModel,
    manager: Option<BandwidthManager>,
    compute_s: f64,
    wait_s: f64,
    started: Instant,
}

/// The ps-mf monitor between evaluations.
#[derive(Default, Serialize, Deserialize)]
pub struct PsMfMonitor {
    curve: Vec<RmsePoint>,
    reached: Option<(f64, u64)>,
    initial: Option<f64>,
    #[serde(skip)]
    reports: Vec<WorkerDone>,
}

/// What a ps-mf worker saves at a checkpoint: its batches, straggler model and bandwidth
/// manager follow from the seed and its clock, so only its timings.
#[derive(Serialize, Deserialize)]
struct PsMfWorkerSaved {
    compute_s: f64,
    wait_s: f64,
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, PsError> {
    rmp_serde::to_vec(value)
        .map_err(|e| crate::core::error::PsCoreError::Encode(e.to_string()).into())
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, PsError> {
    rmp_serde::from_slice(bytes).map_err(|e| {
        crate::core::error::PsCoreError::Checkpoint {
            path: what.to_string(),
            reason: format!("decode: {e}"),
        }
        .into()
    })
}

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
        let zero = vec![0.0; self.cfg.rank as usize];
        let row = |rows: &[Vec<f32>], x: u32| rows.get(x as usize).cloned();
        // Biases as the augmented columns: users `[u, b, 1]`, items `[v, 1, b]`.
        let bias = |b: &[f32], x: u32| b.get(x as usize).copied().unwrap_or(0.0);
        let with_bias = |mut v: Vec<f32>, pair: [f32; 2]| {
            if self.cfg.biases {
                v.extend(pair);
            }
            v
        };
        rmse(
            &self.data.test.entries,
            |u| {
                let v = row(&m.users, u).unwrap_or_else(|| zero.clone());
                with_bias(v, [bias(&m.user_bias, u), 1.0])
            },
            |i| {
                let v = row(&m.items, i).unwrap_or_else(|| zero.clone());
                with_bias(v, [1.0, bias(&m.item_bias, i)])
            },
            self.data.mean,
        )
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

impl PsApp for PsMf {
    type Config = PsMfConfig;
    type Worker = PsMfWorker;
    type Report = WorkerDone;
    type Monitor = PsMfMonitor;
    type Output = PsMfOutcome;

    const NAME: &'static str = "ps-mf";
    const SECTION: &'static str = "mf";
    const MONITOR_ACTOR: &'static str = "ps-mf-monitor";

    fn validate_config(cfg: &PsMfConfig) -> Result<(), InvalidSetting> {
        cfg.validate()
    }

    fn new(cfg: PsMfConfig, _layout: &PsLayout) -> Result<Self, PsError> {
        if cfg.resume && cfg.checkpoint_dir.is_none() {
            return Err(PsError::InvalidConfig {
                app: PsMf::NAME,
                reason: "resume needs checkpoint_dir".into(),
            });
        }
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
                cfg.managed_bytes_per_s,
                cfg.server_push_tick_ms,
                cfg.seed,
            )
        })
    }

    fn start_worker(&self, ctx: &WorkerCtx<'_, WorkerDone>) -> Result<PsMfWorker, PsError> {
        let (w, n_workers) = (ctx.worker(), ctx.n_workers());
        let mut mine: Vec<(u32, u32, f32)> = (self.data.train.entries.iter())
            .copied()
            .filter(|e| e.0 % n_workers == w)
            .collect();
        mine.shuffle(&mut StdRng::seed_from_u64(self.cfg.seed + u64::from(w)));
        let nb = self.cfg.batches_per_epoch.max(1) as usize;
        let chunk = mine.len().div_ceil(nb).max(1);
        Ok(PsMfWorker {
            batches: mine.chunks(chunk).map(<[_]>::to_vec).collect(),
            stragglers: self.cfg.straggler_model(),
            // The budget of one tick: the bandwidth times an emulated compute slice.
            manager: self.cfg.managed_settings().manager(
                self.cfg.clock_ms / 1000.0 / f64::from(self.cfg.compute_slices.max(1)),
                self.cfg.seed + u64::from(w),
            ),
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
        let n_batches = st.batches.len().max(1);
        let batch: &[(u32, u32, f32)] = st.batches.get(c as usize % n_batches).map_or(&[], |b| b);
        let (users, items) = (distinct(batch, |e| e.0), distinct(batch, |e| e.1));
        let item_ids: Vec<RowId> = items.iter().map(|&i| RowId(u64::from(i))).collect();
        let user_ids: Vec<RowId> = users.iter().map(|&u| RowId(u64::from(u))).collect();
        let t_wait = Instant::now();
        if cfg.consistency == ConsistencyModel::Async {
            client.prefetch(ITEMS, &item_ids)?;
        }
        if cfg.rule.is_some_and(|r| !r.local_view_exact()) {
            // `users` is async: a copy never expires, and under these rules the cache does
            // not follow the shard's steps (see `ServerRule::local_view_exact`).
            client.prefetch(USERS, &user_ids)?;
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
            let next_items: Vec<RowId> = distinct(next, |e| e.1)
                .into_iter()
                .map(|i| RowId(u64::from(i)))
                .collect();
            client.prefetch_next_clock(ITEMS, &next_items)?;
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
        if let Some(rule) = cfg.rule {
            let (gu, gi) = batch_gradient(
                batch,
                &pu,
                &qi,
                self.data.mean,
                cfg.regularization,
                cfg.fixed_columns(),
            );
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
            let spent = t0.elapsed();
            let per_clock = st.stragglers.clock_time(w, c);
            if spent < per_clock {
                tokio::time::sleep(per_clock - spent).await;
            }
            st.compute_s += t0.elapsed().as_secs_f64();
            return Ok(PsStep::Clock);
        }
        let (lr, reg) = (cfg.learning_rate, cfg.regularization);
        // The clock's compute in slices: each slice's SGD changes become pending updates
        // (oplog) when it ends, and managed communication may send some of them at once.
        let per_clock = st.stragglers.clock_time(w, c);
        // Without managed communication nothing leaves before the clock: one slice (and the
        // same float sums as ever).
        let slices = cfg.managed_settings().slices();
        let per_slice = per_clock / slices as u32;
        for (k, range) in slice_ranges(batch.len(), slices).into_iter().enumerate() {
            let part = &batch[range];
            let (old_u, old_i) = (pu.clone(), qi.clone());
            sgd_pass(
                part,
                &mut pu,
                &mut qi,
                self.data.mean,
                lr,
                reg,
                cfg.fixed_columns(),
            );
            for (table, new, old) in [(USERS, &pu, &old_u), (ITEMS, &qi, &old_i)] {
                for (&id, v) in new {
                    if let Some(o) = old.get(&id) {
                        let d: Vec<f32> = v.iter().zip(o).map(|(a, b)| a - b).collect();
                        client.batch_inc(table, RowId(u64::from(id)), &Row::Dense(d))?;
                    }
                }
            }
            if let Some(manager) = st.manager.as_mut() {
                client.managed_tick(manager)?;
            }
            let due = per_slice * (k as u32 + 1);
            let spent = t0.elapsed();
            if spent < due {
                tokio::time::sleep(due - spent).await;
            }
        }
        let spent = t0.elapsed();
        if spent < per_clock {
            tokio::time::sleep(per_clock - spent).await;
        }
        st.compute_s += t0.elapsed().as_secs_f64();
        Ok(PsStep::Clock)
    }

    fn finish_worker(
        &self,
        st: PsMfWorker,
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<WorkerDone, PsError> {
        let done = WorkerDone {
            worker: ctx.worker(),
            clocks: ctx.client.current_clock(),
            staleness: ctx.client.table_stats(ITEMS),
            compute_s: st.compute_s,
            wait_s: st.wait_s,
            sent_bytes: ctx.node.net_stats().sent_bytes,
            received_bytes: ctx.node.net_stats().received_bytes,
            reads: ctx.client.read_stats(),
            run_s: st.started.elapsed().as_secs_f64(),
        };
        tracing::info!(
            worker = done.worker,
            clocks = done.clocks,
            mean_staleness = done.staleness.mean(),
            max_staleness = done.staleness.max(),
            "mf worker done"
        );
        Ok(done)
    }

    fn checkpointing(&self) -> Option<crate::kit::PsCheckpointing> {
        Some(crate::kit::PsCheckpointing {
            dir: self.cfg.checkpoint_dir.clone()?,
            every: self.cfg.checkpoint_every,
            resume: self.cfg.resume,
        })
    }

    fn save_worker(
        &self,
        st: &PsMfWorker,
        _ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<Vec<u8>, PsError> {
        encode(&PsMfWorkerSaved {
            compute_s: st.compute_s,
            wait_s: st.wait_s,
        })
    }

    fn resume_worker(
        &self,
        saved: &[u8],
        ctx: &WorkerCtx<'_, WorkerDone>,
    ) -> Result<PsMfWorker, PsError> {
        let saved: PsMfWorkerSaved = decode("ps-mf worker checkpoint", saved)?;
        let mut st = self.start_worker(ctx)?;
        st.compute_s = saved.compute_s;
        st.wait_s = saved.wait_s;
        Ok(st)
    }

    fn save_monitor(&self, m: &PsMfMonitor, clock: u64) -> Result<Vec<u8>, PsError> {
        // The curve up to the checkpoint: the resumed run evaluates later clocks again.
        let kept = PsMfMonitor {
            curve: m
                .curve
                .iter()
                .copied()
                .filter(|p| p.clock <= clock)
                .collect(),
            reached: m.reached.filter(|r| r.1 <= clock),
            initial: m.initial,
            reports: Vec::new(),
        };
        encode(&kept)
    }

    fn resume_monitor(&self, saved: &[u8]) -> Result<PsMfMonitor, PsError> {
        decode("ps-mf monitor checkpoint", saved)
    }

    fn eval_interval(&self) -> Duration {
        Duration::from_millis(self.cfg.eval_ms.max(1))
    }

    async fn observe(
        &self,
        m: &mut PsMfMonitor,
        ctx: &MonitorCtx<'_>,
        reports: Vec<WorkerDone>,
        all_done: bool,
    ) -> Result<Option<String>, PsError> {
        m.reports.extend(reports);
        if m.curve.is_empty() {
            // Step 0: the model before any update (every stored offset zero: the initial
            // values), whatever the workers did before this first snapshot.
            let r0 = self.test_rmse(&self.model_from(&HashMap::new()));
            m.initial = Some(r0);
            m.curve.push(RmsePoint {
                seconds: 0.0,
                clock: 0,
                rmse: r0,
            });
        }
        let (tables, clock) = ctx.tables().await?;
        let r = self.test_rmse(&self.model_from(&tables));
        let t = ctx.elapsed_s();
        ctx.progress("rmse", r);
        m.curve.push(RmsePoint {
            seconds: t,
            clock,
            rmse: r,
        });
        if m.reached.is_none() && self.cfg.target_rmse.is_some_and(|target| r <= target) {
            m.reached = Some((t, clock));
        }
        Ok(if all_done {
            None
        } else if m.reached.is_some() {
            Some(format!(
                "target rmse reached (rmse {r:.4} at clock {clock})"
            ))
        } else if t >= self.cfg.max_seconds {
            Some(format!("max_seconds {} passed", self.cfg.max_seconds))
        } else {
            None
        })
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
        m.reports.sort_by_key(|r| r.worker);
        let mut st = StalenessStats::new();
        for r in &m.reports {
            st.merge(&r.staleness);
        }
        let cfg = &self.cfg;
        let metrics = PsMfResult {
            consistency: cfg.consistency,
            staleness_bound: cfg.consistency().staleness_bound(),
            n_workers: ctx.layout.n_workers(),
            n_shards: ctx.layout.n_shards(),
            train_ratings: self.data.train.entries.len(),
            test_ratings: self.data.test.entries.len(),
            initial_rmse: m.initial.unwrap_or(final_rmse),
            final_rmse,
            target_rmse: cfg.target_rmse,
            reached_target: m.reached.is_some(),
            time_to_target_s: m.reached.map(|r| r.0),
            iterations: m
                .reached
                .map_or(m.curve.last().map_or(0, |p| p.clock), |r| r.1),
            wall_s: wall,
            worker_clocks: m.reports.iter().map(|r| r.clocks).collect(),
            staleness: st.report(),
            per_worker_staleness: m.reports.iter().map(|r| r.staleness.report()).collect(),
            per_worker_wait_s: m.reports.iter().map(|r| r.wait_s).collect(),
            per_worker_sent_bytes: m.reports.iter().map(|r| r.sent_bytes).collect(),
            per_worker_received_bytes: m.reports.iter().map(|r| r.received_bytes).collect(),
            per_worker_compute_s: m.reports.iter().map(|r| r.compute_s).collect(),
            per_worker_reads: m.reports.iter().map(|r| r.reads).collect(),
            per_worker_run_s: m.reports.iter().map(|r| r.run_s).collect(),
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
        let mut run = out.metrics.run_metrics(&self.cfg);
        if let Some(dir) = &self.cfg.out {
            let saved = out.model.saved(&self.cfg);
            saved.add_heldout(&mut run, self.cfg.test_data.as_deref(), self.cfg.seed)?;
            crate::kit::write_json(dir, MODEL_FILE, &saved, false)?;
        }
        write_model_and_metrics(
            self.cfg.out.as_deref(),
            &out.model,
            &run,
            "lower learning_rate (or raise regularization)",
        )
    }

    fn summary(cfg: &PsMfConfig, out: &PsMfOutcome) -> String {
        let r = &out.metrics;
        let dir = cfg.out.as_deref().unwrap_or(std::path::Path::new("-"));
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
