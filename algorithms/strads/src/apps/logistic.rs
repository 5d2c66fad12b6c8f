//! Sparse (L1) logistic regression by scheduled coordinate descent on the STRADS runtime:
//! the Lasso machinery (same [`LassoSettings`] settings under `[app.logistic]`, same scheduler and
//! dependency filter) with the logistic core's push (partial gradient and curvature bound)
//! and pull (`b_j <- S(h b_j - g, lambda) / h`). Labels `> 0` are the positive class.
//! Without a data file, a synthetic two-class problem is generated: the Lasso's sparse
//! correlated design labelled by its response's sign, or (dense) a separable one.
//!
//! `loss` ([`ClassifierLoss`]) picks the margin loss: `logistic` (the default) or
//! `squared-hinge` (an L1-regularised L2-loss SVM), both on the one Gauss-Seidel solver
//! ([`gs`], [`crate::core::loss::MarginLoss`]); the scheduled solver is logistic only. The
//! saved model records its loss, so `petrel eval` reports `log_loss` or `squared_hinge`
//! and the objective the job minimised.
//!
//! Roles `strads-logistic-scheduler` / `strads-logistic-worker`; outputs
//! `coefficients.tsv` (LIBSVM 1-based feature numbers) and `metrics.json`.

use std::ops::Range;
use std::time::Instant;

use crate::core::StradsModelError;
use crate::core::app::{Push, decode_state, encode_state, strads_app};
use crate::kit::dealing::{Fitted, WholeDesign, WorkerDealing};
use crate::kit::{FinishedRun, JobShape, StarHalf, StradsJob, StradsSettings};
use crate::shells::{RoundCheckpointSettings, SchedulerOptions};
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

use super::lasso::Balance;
use super::lasso::LassoSettings;
use super::lasso::checkpoint::data_fingerprint;
use super::lasso::wire::{LassoCommit, check_vars};
use crate::core::logistic::LogisticWorkerState;
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;

/// The scheduler's role.
pub const SCHEDULER_ROLE: &str = "strads-logistic-scheduler";
/// The workers' role (and actor).
pub const WORKER_ROLE: &str = "strads-logistic-worker";

mod baseline;
mod data;
pub mod gs;
mod scheduling;
pub(crate) use scheduling::write_model;
pub use scheduling::{LogisticMetrics, LogisticPoint, LogisticScheduling, write_outputs};

pub use super::lasso::config::ClassifierLoss;
pub use baseline::run_baseline;
pub use data::{check_binary_labels, load, load_share, logistic_lambda, logistic_lambda_from_max};

/// Marker type of the logistic wire types.
pub struct LogisticApp;

/// Scheduler -> worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LogisticTask {
    /// The coordinates of a round and their values.
    Update {
        /// Coordinates.
        #[serde(with = "petrel_messages::tensor::u32_bytes")]
        vars: Vec<u32>,
        /// Their current values.
        #[serde(with = "f32_bytes")]
        values: Vec<f32>,
    },
    /// Work on the rows `start..end` from now on (`balance = "dynamic"`).
    Deal {
        /// First row.
        start: u64,
        /// One past the last row.
        end: u64,
        /// For a worker that joins with this deal: the model so far.
        #[serde(default)]
        join: Option<super::lasso::wire::LassoJoin>,
    },
}

/// Worker -> scheduler: partial gradient and curvature bound on the worker's rows (none
/// in the answer to a deal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticPartial {
    /// Partial gradient per coordinate.
    #[serde(with = "f32_bytes")]
    pub gradient: Vec<f32>,
    /// Partial curvature bound per coordinate.
    #[serde(with = "f32_bytes")]
    pub curvature: Vec<f32>,
    /// Partial loss of the state after `applied` commits.
    pub loss: f64,
    /// Correctly classified rows.
    pub correct: u64,
    /// Rows of the worker.
    pub rows: u64,
    /// Commits applied.
    pub applied: u64,
    /// Seconds spent computing pushes and commits since the start (cumulative).
    pub busy_s: f64,
}

strads_app!(
    LogisticApp,
    "petrel.strads.logistic",
    LogisticTask,
    LogisticPartial,
    LassoCommit
);

/// Worker half: a row block and its margins.
pub struct LogisticWorker {
    state: LogisticWorkerState,
    n_features: usize,
    rows: u64,
    applied: u64,
    /// The digest of the whole data set it read (compared with every node's).
    data_digest: Option<u64>,
    /// Seconds of push and commit compute so far.
    busy_s: f64,
    /// Its side of the dealing: the whole design with `balance = "dynamic"`, slowness.
    dealing: WorkerDealing,
}

impl LogisticWorker {
    /// The worker of row block `x` with its labels.
    pub fn new(x: SparseColumns, labels: &[f32]) -> Result<Self, StradsModelError> {
        let (n_features, rows) = (x.n_columns(), x.n_rows as u64);
        Ok(LogisticWorker {
            state: LogisticWorkerState::new(x, labels)?,
            n_features,
            rows,
            applied: 0,
            data_digest: None,
            busy_s: 0.0,
            dealing: WorkerDealing::default(),
        })
    }

    /// Takes rows `rows` of the whole design, at the committed coefficients.
    fn deal(&mut self, rows: Range<usize>) -> Result<(), StradsModelError> {
        let block = self.dealing.whole()?.rows(rows.clone(), Fitted::Margin)?;
        self.rows = block.y.len() as u64;
        let mut state = LogisticWorkerState::new(block.x, &block.y)?;
        state.restore_margins(block.values)?;
        self.state = state;
        tracing::debug!(rows = ?rows, "logistic worker dealt new rows");
        Ok(())
    }
}

impl Push<LogisticApp> for LogisticWorker {
    fn push(
        &mut self,
        _round: u64,
        task: &LogisticTask,
    ) -> Result<LogisticPartial, StradsModelError> {
        let (gradient, curvature) = match task {
            LogisticTask::Update { vars, values } => {
                let started = Instant::now();
                let vars = check_vars(vars, values.len(), self.n_features)?;
                let pushed = self.state.push(&vars);
                self.dealing.slow_down(started);
                self.busy_s += started.elapsed().as_secs_f64();
                pushed
            }
            LogisticTask::Deal { start, end, join } => {
                if let Some(join) = join {
                    self.dealing.join(&join.coefficients)?;
                    self.applied = join.applied;
                }
                self.deal(*start as usize..*end as usize)?;
                (Vec::new(), Vec::new())
            }
        };
        Ok(LogisticPartial {
            gradient,
            curvature,
            loss: self.state.loss(),
            correct: self.state.correct() as u64,
            rows: self.rows,
            applied: self.applied,
            busy_s: self.busy_s,
        })
    }

    fn commit(&mut self, _round: u64, c: &LassoCommit) -> Result<(), StradsModelError> {
        let started = Instant::now();
        let vars = check_vars(&c.vars, c.deltas.len(), self.n_features)?;
        let changes: Vec<(usize, f32)> = vars.into_iter().zip(c.deltas.iter().copied()).collect();
        self.state.apply_deltas(&changes);
        self.dealing.apply(&changes);
        self.dealing.slow_down(started);
        self.applied += 1;
        self.busy_s += started.elapsed().as_secs_f64();
        Ok(())
    }

    /// The margins and the commit count (the rows and labels come from the data).
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        encode_state(&(self.state.margins(), self.applied))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let (margins, applied): (Vec<f64>, u64) = decode_state(state)?;
        self.state.restore_margins(margins)?;
        self.applied = applied;
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    fn holds_work(&self) -> bool {
        self.rows > 0
    }
}

impl StradsJob for LogisticApp {
    const SECTION: &'static str = "logistic";
    const SCHEDULER_ROLE: &'static str = SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = WORKER_ROLE;
    type Config = LassoSettings;
    type Scheduler = LogisticScheduling;
    type Worker = StarHalf<LogisticWorker>;

    /// The Lasso checks, and no Lasso-only setting (several schedulers, the checkpoint
    /// fault injection); a loss other than logistic runs on the Gauss-Seidel solver only.
    fn validate_config(job: &LassoSettings) -> Result<(), petrel_ml::job::InvalidSetting> {
        // `loss` is this job's setting, which the Lasso's checks refuse.
        LassoSettings {
            loss: None,
            ..job.clone()
        }
        .validate()?;
        let mut c = petrel_ml::job::SettingChecks::new();
        let loss = job.loss.unwrap_or_default();
        let solver = job.resolved_solver();
        c.require(
            loss == ClassifierLoss::Logistic || solver == super::lasso::LassoSolver::GaussSeidel,
            "loss",
            loss.name(),
            &format!(
                "runs on solver = \"gauss-seidel\" only, and this job's solver is \"{solver}\" \
                 (solver = \"{}\"{}); the scheduled solver is logistic only",
                job.solver,
                match job.scheduled_only_settings().first() {
                    Some((key, _)) => format!(", {key} is set"),
                    None => String::new(),
                }
            ),
        );
        let lasso_only = "applies to lasso only";
        c.require(
            job.schedulers == 1,
            "schedulers",
            job.schedulers,
            lasso_only,
        );
        c.require(job.gs_chunk == 0, "gs_chunk", job.gs_chunk, lasso_only);
        c.require(
            job.fail_after_checkpoints.is_none(),
            "fail_after_checkpoints",
            job.fail_after_checkpoints.unwrap_or_default(),
            lasso_only,
        );
        RoundCheckpointSettings::check_resume(&mut c, job.resume, &job.checkpoint_dir);
        // Centring the design gives a logistic model no exact intercept.
        c.require(
            !job.fit_intercept,
            "fit_intercept",
            job.fit_intercept,
            lasso_only,
        );
        c.finish()
    }

    /// The Gauss-Seidel solver's rounds are one short sweep each (the transport on the
    /// node's thread pays); the scheduled solver's rounds compute for long.
    fn latency_bound(job: &LassoSettings) -> bool {
        job.resolved_solver() == super::lasso::LassoSolver::GaussSeidel
    }

    fn scheduler_options(job: &LassoSettings) -> SchedulerOptions {
        SchedulerOptions::with_depth_and_timeout(job.depth, job.timeout_s)
    }

    fn scheduler(job: &LassoSettings, shape: &JobShape) -> Result<LogisticScheduling, StradsError> {
        let (x, labels) = load(job)?;
        let digest = data_fingerprint(&x, &labels);
        let mut half = LogisticScheduling::new(&x, &labels, job, shape.workers)?;
        half.data_digest = Some(digest);
        Ok(half)
    }

    fn worker(
        job: &LassoSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<StarHalf<LogisticWorker>, StradsError> {
        let (x, labels) = load(job)?;
        let digest = data_fingerprint(&x, &labels);
        let rows = shape.share(x.n_rows, index)?;
        let mut worker = LogisticWorker::new(x.row_block(rows.clone()), &labels[rows])?;
        worker.data_digest = Some(digest);
        let whole = (job.balance == Balance::Dynamic).then(|| WholeDesign::new(x, labels, None));
        worker.dealing = WorkerDealing::of(job.slowness(index), whole);
        Ok(StarHalf(worker))
    }

    fn finish(
        job: &LassoSettings,
        scheduler: LogisticScheduling,
        _run: &FinishedRun,
    ) -> Result<(), StradsError> {
        if let Some(dir) = &job.out_dir {
            write_outputs(dir, &scheduler, job)?;
        }
        Ok(())
    }
}

/// Registers the logistic-regression roles: the scheduled solver's or, with `solver =
/// "gauss-seidel"` (the default unless a scheduling knob is set), the column-holding one
/// ([`gs`]).
pub fn register(cluster: petrel_actors::Cluster) -> petrel_actors::Cluster {
    cluster
        .app_section_checked::<LassoSettings, _>(
            <LogisticApp as StradsJob>::SECTION,
            <LogisticApp as StradsJob>::validate_config,
        )
        .role(SCHEDULER_ROLE, scheduler_entry)
        .role(WORKER_ROLE, worker_entry)
}

async fn scheduler_entry(ctx: petrel_actors::NodeContext) -> Result<(), StradsError> {
    let job: LassoSettings = ctx.settings.app(<LogisticApp as StradsJob>::SECTION)?;
    super::lasso::check_membership(&ctx, &job, SCHEDULER_ROLE)?;
    super::lasso::solver_role::<gs::LogisticGsApp, LogisticApp>(ctx, &job, true).await
}

async fn worker_entry(ctx: petrel_actors::NodeContext) -> Result<(), StradsError> {
    let job: LassoSettings = ctx.settings.app(<LogisticApp as StradsJob>::SECTION)?;
    super::lasso::check_membership(&ctx, &job, WORKER_ROLE)?;
    super::lasso::solver_role::<gs::LogisticGsApp, LogisticApp>(ctx, &job, false).await
}

#[cfg(test)]
mod tests;
