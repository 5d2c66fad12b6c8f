// Over 600 lines: one settings struct with its checks and loaders (stats, shares split out).
//! `[app.lasso]` (and `[app.logistic]`): one settings struct, read from TOML by the roles
//! and from the flags of `petrel train lasso` / `petrel train logistic`. The design's
//! statistics are in `config/stats.rs`, a node's share of the design in `config/share.rs`.

use crate::core::StradsModelError;
use crate::core::scheduler::{
    ColumnCorrelationCache, DependencyFilter, LassoScheduler, ScheduleMode, SchedulerConfig,
};
use crate::error::StradsError;
use crate::kit::StradsSettings;
use crate::shells::{RoundCheckpointSettings, SchedulerOptions};
use petrel_ml::data::SparseColumns;
use petrel_ml::data::synthetic::{
    CorrelatedLassoParams, SparseLassoParams, correlated_lasso, sparse_correlated_lasso,
};
use petrel_ml::job::{InvalidSetting, SettingChecks};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// Synthetic correlated design (see [`correlated_lasso`]), used when no data file is given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticLasso {
    /// Synthetic design (without --data): rows.
    #[arg(long = "synthetic-samples", default_value_t = 400)]
    pub n_samples: usize,
    /// Synthetic design: features.
    #[arg(long = "synthetic-features", default_value_t = 5000)]
    pub n_features: usize,
    /// Synthetic design: features per correlated group.
    #[arg(long = "synthetic-group", default_value_t = 10)]
    pub group_size: usize,
    /// Synthetic design: correlation inside a group.
    #[arg(long = "synthetic-correlation", default_value_t = 0.8)]
    pub correlation: f32,
    /// Synthetic design: true non-zero coefficients.
    #[arg(long = "synthetic-nonzero", default_value_t = 10)]
    pub n_nonzero: usize,
    /// Synthetic design: noise of y.
    #[arg(skip = 0.1)]
    pub noise_std: f32,
    /// Synthetic design: non-zeros per column (0 = dense Gaussian; > 0 = sparse, each
    /// worker generating only its rows).
    #[arg(long = "synthetic-nnz-per-column", default_value_t = 0)]
    pub nnz_per_column: usize,
    /// Synthetic design: seed.
    #[arg(long = "synthetic-seed", id = "synthetic.seed", default_value_t = 42)]
    pub seed: u64,
}

// Every default is written once, on its flag.
impl Default for SyntheticLasso {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

/// The most values a dense synthetic design may have (`synthetic.nnz_per_column = 0`): 2^28,
/// a 1 GiB matrix of f32 before its column copy. Larger designs are sparse ones.
pub const MAX_DENSE_SYNTHETIC_VALUES: usize = 1 << 28;

/// The whole job's settings (every node reads the same section). Field docs are the
/// flags' help.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct LassoSettings {
    /// LIBSVM file (the label is the response y). Without it: a synthetic design.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out LIBSVM file: the model's figures on it go to every history record and to
    /// the final figures, as `heldout_*`.
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// The synthetic design used without a data file.
    #[command(flatten)]
    pub synthetic: SyntheticLasso,
    /// Absolute lambda (default: --lambda-fraction of lambda_max = max |x_j^T y|) of
    /// `1/2 ||y - Xb||^2 + lambda ||b||_1` (scikit-learn's `alpha` times `n_samples`).
    #[arg(long)]
    pub lambda: Option<f32>,
    /// Lasso only: fit an unpenalised intercept (scikit-learn's `fit_intercept=True`),
    /// solving the centred problem exactly with an implicit centring (the design stays
    /// sparse); the saved intercept is `mean(y) - mean(X) . b`.
    #[arg(long)]
    pub fit_intercept: bool,
    /// lambda = fraction * lambda_max when --lambda is unset.
    #[arg(long, default_value_t = 0.2)]
    pub lambda_fraction: f64,
    /// `gauss-seidel` (column-holding workers sweep their coordinates sequentially),
    /// `scheduled` (the scheduler picks blocks of coordinates, row-holding workers return
    /// partial sums) or `auto`: `gauss-seidel` unless a knob only `scheduled` has is set
    /// ([`LassoSettings::scheduled_only_settings`]), which explicit `gauss-seidel` refuses.
    #[arg(long, value_enum, default_value_t = LassoSolver::Auto)]
    pub solver: LassoSolver,
    /// `petrel train logistic` only: the loss, `logistic` (unset) or `squared-hinge` (an
    /// L1-regularised L2-loss SVM; `solver = "gauss-seidel"` only). The Lasso job's loss is
    /// the squared loss: it refuses the setting.
    #[arg(long, value_enum)]
    pub loss: Option<ClassifierLoss>,
    /// `gauss-seidel`: columns a worker sweeps per round in a full sweep (0 = automatic,
    /// from --round-latency-ms at [`NS_PER_NONZERO`]; a whole sweep with one worker).
    #[arg(long, default_value_t = 0)]
    pub gs_chunk: usize,
    /// `gauss-seidel`: active-set passes a worker makes per round between full sweeps
    /// (0 = automatic: until settled with one worker, else `SHARED_ACTIVE_PASSES`).
    #[arg(long, default_value_t = 0)]
    pub gs_active_passes: u32,
    /// Removed setting, refused with its name: the Gauss-Seidel workers' residual deltas
    /// always combine at the scheduler.
    #[arg(long, hide = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gs_exchange: Option<String>,
    /// How coordinates are chosen.
    #[arg(long, value_enum, default_value_t = ScheduleMode::Dynamic)]
    pub mode: ScheduleMode,
    /// U: coordinates updated per round (0 = automatic from the data and
    /// --round-latency-ms, see `LassoSettings::resolved_for`).
    #[arg(long, default_value_t = 0)]
    pub block_size: usize,
    /// U': candidates before the dependency check (0 = automatic: 2 U).
    #[arg(long, default_value_t = 0)]
    pub candidate_pool: usize,
    /// Dependency-check threshold on |corr(x_j, x_k)|; unset (`rho = false` in TOML,
    /// `--no-filter`) disables the check.
    #[arg(long, default_value = "0.3")]
    #[serde(with = "rho_setting")]
    pub rho: Option<f32>,
    /// Bound on a block's aggregate interference (each shared row's load
    /// `sum_k |x_ik| ||x_k||_1 / ||x_k||^2`, which bounds the block's normalised Gram
    /// eigenvalues); also caps the automatic block size. 0 disables it; see
    /// [`RECOMMENDED_SPARSE_INTERFERENCE_BOUND`].
    #[arg(long, default_value_t = DEFAULT_INTERFERENCE_BOUND)]
    pub interference_bound: f32,
    /// Priority floor of dynamic scheduling.
    #[arg(long, default_value_t = 1e-6)]
    pub eta: f64,
    /// Dynamic priority is |delta b_j|^p + eta.
    #[arg(long, default_value_t = 1.0)]
    pub priority_exponent: f64,
    /// Priority of a coordinate never updated.
    #[arg(long, default_value_t = 1.0)]
    pub initial_priority: f64,
    /// Scheduler seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Rounds in flight (pipeline depth; the dependency check keeps a new round away from
    /// the in-flight coordinates). 1 by default: a run resumed at depth 2 does not yet
    /// continue bit for bit.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// At most this many update rounds (0 = automatic: AUTO_SWEEPS sweeps' worth of
    /// updates; the duality gap normally stops the job long before).
    #[arg(long, default_value_t = 0)]
    pub max_rounds: u64,
    /// Update rounds between exact KKT / duality-gap evaluations (0 = by work, see
    /// --eval-work-ratio).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u64,
    /// With eval_every = 0: evaluate once the updates since the last evaluation cost this
    /// many evaluations (passes over X). 0 = only at the end.
    #[arg(long, default_value_t = 4.0)]
    pub eval_work_ratio: f64,
    /// Per-round latency the automatic block size assumes, in milliseconds (not measured,
    /// so a run stays deterministic).
    #[arg(long, default_value_t = 1.0)]
    pub round_latency_ms: f64,
    /// Stop when duality gap / objective falls below this.
    #[arg(long, default_value = "1e-5")]
    pub gap_tolerance: Option<f64>,
    /// Stop once the objective is at or below this (benchmarks pass `f* (1 + tol)`).
    #[arg(long)]
    pub target_objective: Option<f64>,
    /// Where the scheduler writes `coefficients.tsv` and `metrics.json` (`--out`).
    #[arg(skip)]
    #[serde(rename = "out", alias = "out_dir")]
    pub out_dir: Option<PathBuf>,
    /// Timeout of one round's requests, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
    /// Schedulers splitting the coefficients (contiguous column ranges of equal weight).
    #[arg(long, default_value_t = 1)]
    pub schedulers: usize,
    /// Round checkpoint directory, shared by all nodes (`petrel train`: `<out>/checkpoints`).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Update rounds between two checkpoints (0 = never write, `resume` may still read).
    #[arg(long, default_value_t = 500)]
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
    /// Fault injection for tests: fail after writing this many checkpoints (TOML only).
    #[arg(skip)]
    pub fail_after_checkpoints: Option<u64>,
    /// Scheduled solver (Lasso, logistic): how rows are dealt to the workers, `static`
    /// (once, evenly) or `dynamic` (re-dealt between rounds by each worker's measured time
    /// per row; every worker then holds the whole design).
    #[arg(long, value_enum, default_value_t = Balance::Static)]
    pub balance: Balance,
    /// Emulated slow worker (benches, tests): this worker's compute takes
    /// `straggler_factor` times as long.
    #[arg(long)]
    pub straggler: Option<u32>,
    /// How many times as long the straggler's compute takes.
    #[arg(long, default_value_t = 1.0)]
    pub straggler_factor: f64,
}

// Every default is written once, on its flag.
impl Default for LassoSettings {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl LassoSettings {
    /// Worker `index`'s emulated slowness (`straggler`, `straggler_factor`).
    pub fn slowness(&self, index: usize) -> crate::kit::dealing::Straggler {
        crate::kit::dealing::Straggler::of(self.straggler, self.straggler_factor, index)
    }

    /// The settings only `solver = "scheduled"` has that this job sets away from their
    /// defaults, as `(key, value)`.
    pub fn scheduled_only_settings(&self) -> Vec<(&'static str, String)> {
        let d = LassoSettings::default();
        let mut set = Vec::new();
        // `(key, differs from the default, value)` for each scheduling knob.
        macro_rules! knobs {
            ($($key:ident: $value:expr),* $(,)?) => {
                $(if self.$key != d.$key {
                    set.push((stringify!($key), $value));
                })*
            };
        }
        knobs!(
            schedulers: self.schedulers.to_string(),
            mode: format!("{:?}", self.mode),
            block_size: self.block_size.to_string(),
            candidate_pool: self.candidate_pool.to_string(),
            rho: format!("{:?}", self.rho),
            interference_bound: self.interference_bound.to_string(),
            eta: self.eta.to_string(),
            priority_exponent: self.priority_exponent.to_string(),
            initial_priority: self.initial_priority.to_string(),
            seed: self.seed.to_string(),
            depth: self.depth.to_string(),
            eval_every: self.eval_every.to_string(),
            eval_work_ratio: self.eval_work_ratio.to_string(),
            balance: self.balance.to_string(),
            straggler: format!("{:?}", self.straggler),
            straggler_factor: self.straggler_factor.to_string(),
        );
        set
    }

    /// The solver this job runs: `solver`, with `auto` resolved (see [`LassoSolver::Auto`]).
    pub fn resolved_solver(&self) -> LassoSolver {
        match self.solver {
            LassoSolver::Auto if self.scheduled_only_settings().is_empty() => {
                LassoSolver::GaussSeidel
            }
            LassoSolver::Auto => LassoSolver::Scheduled,
            chosen => chosen,
        }
    }

    /// The rows `rows` of the design, renumbered from 0, with their `y`. A sparse synthetic
    /// design generates only those rows; anything else loads the whole design first.
    pub fn load_rows(
        &self,
        mut rows: impl FnMut(usize) -> Result<std::ops::Range<usize>, StradsError>,
    ) -> Result<(SparseColumns, Vec<f32>), StradsError> {
        if let (None, Some(params)) = (&self.data, self.sparse_params()) {
            let p = sparse_correlated_lasso(&params, Some(rows(params.n_samples)?))?;
            return Ok((p.x, p.y));
        }
        let (x, y) = self.load()?;
        let rows = rows(x.n_rows)?;
        Ok((x.row_block(rows.clone()), y[rows].to_vec()))
    }

    fn sparse_params(&self) -> Option<SparseLassoParams> {
        let s = &self.synthetic;
        (s.nnz_per_column > 0).then_some(SparseLassoParams {
            n_samples: s.n_samples,
            n_features: s.n_features,
            group_size: s.group_size,
            nnz_per_column: s.nnz_per_column,
            correlation: s.correlation,
            n_nonzero: s.n_nonzero,
            noise_std: s.noise_std,
            seed: s.seed,
        })
    }

    /// Loads the design (LIBSVM file or synthetic): `(X by columns, y)`, as
    /// [`Self::load_sparse`].
    pub fn load(&self) -> Result<(SparseColumns, Vec<f32>), StradsError> {
        self.load_sparse()
    }

    /// The column means of the whole design `x` when `fit_intercept` (what a worker's
    /// implicit centring needs besides its row block).
    pub fn design_means(&self, x: &SparseColumns) -> Option<Vec<f64>> {
        self.fit_intercept.then(|| column_means(x, &[]).0)
    }

    /// The design as stored (never densified, every solver centres its columns implicitly)
    /// and `y`, centred with `fit_intercept`.
    pub fn load_sparse(&self) -> Result<(SparseColumns, Vec<f32>), StradsError> {
        let (x, y) = self.load_uncentred()?;
        if !self.fit_intercept {
            return Ok((x, y));
        }
        let (_, y_mean) = column_means(&x, &y);
        let y = y.iter().map(|v| v - y_mean).collect();
        Ok((x, y))
    }

    /// The intercept of coefficients `b` fitted on the centred design:
    /// `mean(y) - mean(X) . b` (0 without `fit_intercept`).
    pub fn intercept(&self, b: &[f32]) -> Result<f64, StradsError> {
        Ok(self.intercept_terms()?.map_or(0.0, |t| t.intercept(b)))
    }

    /// What the intercept of any coefficients depends on (the column means and mean label),
    /// read without holding the design; `None` without `fit_intercept`.
    pub fn intercept_terms(&self) -> Result<Option<InterceptTerms>, StradsError> {
        if !self.fit_intercept {
            return Ok(None);
        }
        let (means, y_mean) = self.streamed_column_means()?;
        Ok(Some(InterceptTerms { means, y_mean }))
    }

    pub(crate) fn load_uncentred(&self) -> Result<(SparseColumns, Vec<f32>), StradsError> {
        if let (None, Some(params)) = (&self.data, self.sparse_params()) {
            let p = sparse_correlated_lasso(&params, None)?;
            return Ok((p.x, p.y));
        }
        match &self.data {
            Some(path) => {
                let ds = petrel_ml::data::load_libsvm(path)?;
                check_nonempty(path, ds.n_rows(), ds.n_features)?;
                Ok((ds.to_columns(), ds.labels))
            }
            None => {
                let s = &self.synthetic;
                let p = correlated_lasso(&CorrelatedLassoParams {
                    n_samples: s.n_samples,
                    n_features: s.n_features,
                    group_size: s.group_size,
                    correlation: s.correlation,
                    n_nonzero: s.n_nonzero,
                    noise_std: s.noise_std,
                    seed: s.seed,
                })?;
                Ok((p.columns(), p.y))
            }
        }
    }

    /// The lambda this job uses on `(x, y)`.
    pub fn resolve_lambda(&self, x: &SparseColumns, y: &[f32]) -> f32 {
        match self.lambda {
            Some(l) => l,
            None => self.lambda_from_max(self.lambda_max(x, y)),
        }
    }

    /// `max_j |x_j^T y|` of this job's problem ([`centred_lambda_max`] with
    /// `fit_intercept`, else [`lambda_max`]): also the largest correlation at `b = 0`.
    pub fn lambda_max(&self, x: &SparseColumns, y: &[f32]) -> f64 {
        if self.fit_intercept {
            centred_lambda_max(x, y)
        } else {
            lambda_max(x, y)
        }
    }

    /// [`Self::resolve_lambda`] given the problem's [`Self::lambda_max`].
    pub fn lambda_from_max(&self, lambda_max: f64) -> f32 {
        self.lambda
            .unwrap_or((self.lambda_fraction * lambda_max) as f32)
    }

    /// This job with every automatic (0) schedule knob chosen for the design `x` run by
    /// `workers` workers:
    /// - block size U: `round_latency / (per-update cost)` ([`auto_block_size`]), capped
    ///   by what the `interference_bound` lets a block hold ([`interference_capacity`]);
    /// - candidate pool U' = 2 U;
    /// - round limit: [`AUTO_SWEEPS`] sweeps' worth of updates (`AUTO_SWEEPS * d / U`).
    pub fn resolved_for(&self, x: &SparseColumns, workers: usize) -> LassoSettings {
        let d = x.n_columns().max(1);
        let mut job = self.clone();
        if job.block_size == 0 {
            job.block_size = auto_block_size(
                d,
                x.values.len() as f64 / d as f64,
                workers,
                self.round_latency_ms,
            );
            if self.rho.is_some() && self.interference_bound > 0.0 {
                job.block_size = job
                    .block_size
                    .min(interference_capacity(x, self.interference_bound));
            }
        }
        if job.candidate_pool == 0 {
            job.candidate_pool = 2 * job.block_size;
        }
        if job.max_rounds == 0 {
            job.max_rounds = (AUTO_SWEEPS * d as u64).div_ceil(job.block_size as u64);
        }
        job
    }

    /// A multi-scheduler job's automatic knobs (it runs in epochs of `eval_every` rounds):
    /// U = 16, U' = 64, 20,000 rounds, epochs of 200 rounds.
    pub fn with_multi_defaults(&self) -> LassoSettings {
        let mut job = self.clone();
        if job.block_size == 0 {
            job.block_size = 16;
        }
        if job.candidate_pool == 0 {
            job.candidate_pool = 64;
        }
        if job.max_rounds == 0 {
            job.max_rounds = 20_000;
        }
        if job.eval_every == 0 {
            job.eval_every = 200;
        }
        job
    }

    /// The coordinate scheduler's parameters.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        let mut c = SchedulerConfig::new(self.mode, self.block_size.max(1));
        c.candidate_pool = self.candidate_pool.max(self.block_size);
        c.eta = self.eta;
        c.priority_exponent = self.priority_exponent;
        c.initial_priority = self.initial_priority;
        c.seed = self.seed;
        c
    }

    /// The coordinate scheduler over the design `x`: priority sampling plus, unless `rho`
    /// is unset, the `|corr| < rho` dependency filter with the `interference_bound`.
    pub fn coordinate_scheduler(
        &self,
        x: Arc<SparseColumns>,
    ) -> Result<LassoScheduler, StradsModelError> {
        let n = x.n_columns();
        let filter = self.rho.map(|rho| DependencyFilter {
            rho,
            oracle: Box::new(
                ColumnCorrelationCache::new(x, 1 << 20)
                    .with_row_load_bound(self.interference_bound),
            ),
        });
        LassoScheduler::new(n, self.scheduler_config(), filter)
    }
}

impl StradsSettings for LassoSettings {
    /// Every value in range (keys as in `[app.lasso]`), checked before any node starts,
    /// a dense synthetic design of at most [`MAX_DENSE_SYNTHETIC_VALUES`] values among them.
    fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        if self.data.is_none() {
            let s = &self.synthetic;
            c.at_least("synthetic.n_samples", s.n_samples, 1);
            c.at_least("synthetic.n_features", s.n_features, 1);
            c.at_least("synthetic.group_size", s.group_size, 1);
            c.within("synthetic.correlation", s.correlation, 0.0, 0.999);
            c.at_most(
                "synthetic.n_nonzero",
                s.n_nonzero,
                s.n_features,
                "synthetic.n_features",
            );
            c.non_negative("synthetic.noise_std", s.noise_std);
            c.at_most(
                "synthetic.nnz_per_column",
                s.nnz_per_column,
                s.n_samples,
                "synthetic.n_samples",
            );
            let values = s.n_samples.saturating_mul(s.n_features);
            c.require(
                s.nnz_per_column > 0 || values <= MAX_DENSE_SYNTHETIC_VALUES,
                "synthetic.nnz_per_column",
                s.nnz_per_column,
                &format!(
                    "0 asks for a dense design of {} x {} = {values} values, over the {} a \
                     dense design may have (it is built whole, several bytes per value); set \
                     synthetic.nnz_per_column > 0 for a sparse design of any size",
                    s.n_samples, s.n_features, MAX_DENSE_SYNTHETIC_VALUES
                ),
            );
        }
        if let Some(l) = self.lambda {
            c.non_negative("lambda", l);
        }
        c.within("lambda_fraction", self.lambda_fraction, 0.0, 1.0);
        // 0 = automatic for block_size, candidate_pool and max_rounds.
        if self.block_size > 0 && self.candidate_pool > 0 {
            c.at_least("candidate_pool", self.candidate_pool, self.block_size);
        }
        c.non_negative("eval_work_ratio", self.eval_work_ratio);
        c.non_negative("round_latency_ms", self.round_latency_ms);
        c.non_negative("interference_bound", self.interference_bound);
        if let Some(rho) = self.rho {
            c.within("rho", rho, 0.0, 1.0);
        }
        c.non_negative("eta", self.eta);
        c.positive("priority_exponent", self.priority_exponent);
        c.positive("initial_priority", self.initial_priority);
        c.at_least("depth", self.depth, 1);
        if let Some(g) = self.gap_tolerance {
            // 0: run to max_rounds (TOML has no way to unset an option).
            c.non_negative("gap_tolerance", g);
        }
        if let Some(t) = self.target_objective {
            c.finite("target_objective", t);
        }
        c.at_least("timeout_s", self.timeout_s, 1);
        c.at_least("schedulers", self.schedulers, 1);
        self.check_balance(&mut c);
        c.require(
            self.gs_exchange.is_none(),
            "gs_exchange",
            self.gs_exchange.as_deref().unwrap_or_default(),
            "was removed: the Gauss-Seidel workers' residual deltas always combine at the \
             scheduler; drop the setting",
        );
        let scheduled_only = self.scheduled_only_settings();
        if self.solver == LassoSolver::GaussSeidel
            && let Some((key, value)) = scheduled_only.first()
        {
            c.require(
                false,
                key,
                value,
                "applies to solver = \"scheduled\" only (solver = \"gauss-seidel\" was \
                 asked for; leave the solver unset or \"auto\" to run the scheduled mode)",
            );
        }
        if self.resolved_solver() == LassoSolver::Scheduled {
            let gs = match scheduled_only.first() {
                Some((key, _)) if self.solver == LassoSolver::Auto => format!(
                    "applies to solver = \"gauss-seidel\" only (solver = \"auto\" runs the \
                     scheduled mode because {key} is set)"
                ),
                _ => "applies to solver = \"gauss-seidel\" only".to_string(),
            };
            c.require(self.gs_chunk == 0, "gs_chunk", self.gs_chunk, &gs);
            c.require(
                self.gs_active_passes == 0,
                "gs_active_passes",
                self.gs_active_passes,
                &gs,
            );
        }
        c.at_most(
            "schedulers",
            self.schedulers,
            crate::apps::lasso::multi::MAX_SCHEDULERS,
            "the supported maximum",
        );
        // The logistic job checks its own `loss` and these checks without it.
        c.require(
            self.loss.is_none(),
            "loss",
            self.loss.map_or("", ClassifierLoss::name),
            "applies to petrel train logistic only (the Lasso's loss is the squared loss); \
             drop the setting",
        );
        c.finish()
    }

    /// Round checkpoints every `checkpoint_every` rounds into `checkpoint_dir`.
    fn round_checkpoints(&self) -> Option<RoundCheckpointSettings> {
        let settings =
            RoundCheckpointSettings::of(&self.checkpoint_dir, self.checkpoint_every, self.resume)?;
        Some(RoundCheckpointSettings {
            fail_after: self.fail_after_checkpoints,
            ..settings
        })
    }

    /// Depth 1, the Gauss-Seidel solvers': a sweep must start from every earlier commit
    /// (the scheduled solvers keep `depth` rounds in flight).
    fn scheduler_options(&self) -> SchedulerOptions {
        SchedulerOptions::with_depth_and_timeout(1, self.timeout_s)
    }
}

impl LassoSettings {
    /// `balance = "dynamic"` moves rows between workers: one scheduler, and no round
    /// checkpoints (a checkpoint's residuals are per static row block).
    fn check_balance(&self, c: &mut SettingChecks) {
        crate::kit::dealing::check_dealing(
            c,
            self.balance,
            self.straggler_factor,
            &self.checkpoint_dir,
            self.resume,
        );
        let dynamic = self.balance == Balance::Dynamic;
        let why = crate::kit::dealing::STATIC_ONLY;
        c.require(
            !dynamic || self.schedulers == 1,
            "schedulers",
            self.schedulers,
            why,
        );
    }
}

/// Refuses a data file of no rows or no features.
fn check_nonempty(path: &std::path::Path, rows: usize, features: usize) -> Result<(), StradsError> {
    if rows == 0 || features == 0 {
        let what = format!("{}: no rows or no features", path.display());
        return Err(StradsModelError::InvalidConfig(what).into());
    }
    Ok(())
}

/// `rho` in a job file: a number, or `false` for no dependency check (`None`).
mod rho_setting {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(rho: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
        match rho {
            Some(v) => s.serialize_f32(*v),
            None => s.serialize_bool(false),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Rho {
        Value(f32),
        Flag(bool),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f32>, D::Error> {
        match Rho::deserialize(d)? {
            Rho::Value(v) => Ok(Some(v)),
            Rho::Flag(false) => Ok(None),
            Rho::Flag(true) => Err(serde::de::Error::custom(
                "rho = true: give the threshold (a number in [0, 1]) or false for no dependency check",
            )),
        }
    }
}

pub use crate::core::tuning::{
    AUTO_SWEEPS, DEFAULT_INTERFERENCE_BOUND, MIN_AUTO_BLOCK, NS_PER_COORDINATE, NS_PER_NONZERO,
    RECOMMENDED_SPARSE_INTERFERENCE_BOUND,
};

/// How many columns a block can hold under the row-load `bound` (at least 1):
/// `bound * rows / mean_k(||x_k||_1^2 / ||x_k||_2^2)`, the rows' total load capacity over
/// a column's total load (empty columns count as load 1).
pub fn interference_capacity(x: &SparseColumns, bound: f32) -> usize {
    let d = x.n_columns().max(1);
    let total_load: f64 = (0..x.n_columns())
        .map(|k| {
            let (_, vals) = x.column(k);
            let l1: f64 = vals.iter().map(|v| f64::from(v.abs())).sum();
            let sq: f64 = vals.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            if sq > 0.0 { l1 * l1 / sq } else { 1.0 }
        })
        .sum();
    let capacity = f64::from(bound) * x.n_rows as f64 / (total_load / d as f64);
    if capacity.is_finite() {
        (capacity.ceil() as usize).clamp(1, d)
    } else {
        d
    }
}

/// The automatic block size: a round should cost at least its latency in compute (an
/// update [`NS_PER_NONZERO`] per non-zero on the busiest worker plus [`NS_PER_COORDINATE`]),
/// clamped to `[MIN_AUTO_BLOCK, max(MIN_AUTO_BLOCK, d / 16)]`.
pub fn auto_block_size(d: usize, nnz_per_column: f64, workers: usize, latency_ms: f64) -> usize {
    let per_update_ns = NS_PER_NONZERO * nnz_per_column / workers.max(1) as f64 + NS_PER_COORDINATE;
    let wanted = (latency_ms.max(0.0) * 1e6 / per_update_ns).ceil();
    let wanted = if wanted.is_finite() {
        wanted as usize
    } else {
        0
    };
    wanted
        .clamp(MIN_AUTO_BLOCK, (d / 16).max(MIN_AUTO_BLOCK))
        .min(d.max(1))
}

mod stats;

#[cfg(test)]
pub(crate) use stats::centred;
pub use stats::{InterceptTerms, centred_lambda_max, design_sq_norms, lambda_max};
pub(crate) use stats::{column_correlation, finish_correlation};
use stats::{column_means, label_mean};

mod share;
mod solver;

pub(crate) use share::check_pick;
pub use share::{ColumnShare, DesignShape};
pub use solver::{Balance, ClassifierLoss, LassoSolver};

#[cfg(test)]
mod tests;
