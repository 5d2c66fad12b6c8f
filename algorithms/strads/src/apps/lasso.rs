//! Lasso by scheduled coordinate descent on the STRADS actor runtime.
//!
//! - Scheduler node (role `strads-lasso-scheduler`): loads the data to know the column
//!   norms and correlations, runs [`LassoScheduling`] (priority sampling + dependency filter
//!   from [`crate::core::scheduler`], soft-threshold `pull`, metrics) through
//!   [`crate::shells::run_scheduler`], and writes `coefficients.tsv` and
//!   `metrics.json` to the output directory.
//! - Worker nodes (role `strads-lasso-worker`): each loads the data, keeps its contiguous
//!   row block and residual ([`LassoWorkerState`]) and serves push/commit as a
//!   [`crate::shells::StradsWorker`].
//!
//! - Several schedulers (`schedulers = S`, roles `strads-lasso-scheduler-<s>`) split the
//!   coefficients into column ranges and synchronise at evaluations: see [`multi`].
//!
//! Every `eval_every` update rounds (and at the end) the scheduler drains the pipeline and
//! runs an `Evaluate` round: workers return `X^T r` and `(y.y, y.r, r.r)` partials, from
//! which it computes the KKT violation and the duality gap exactly. The objective itself is
//! tracked every round from the squared-residual partials that come with each push.
//!
//! Checkpoint and resume (`checkpoint_dir`, `checkpoint_every`, `resume`) live in
//! [`checkpoint`]: save/restore rounds run by a wrapper around [`LassoScheduling`].

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::shells::{
    Plan, Push, Schedule, SchedulerOptions, Step, StradsApp, WorkerSet, run_scheduler, start_worker,
};
use petrel_actors::{Cluster, NodeContext};
use petrel_messages::Priority;
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

use crate::core::lasso::{LassoWorkerState, dual_scale, kkt_violation, pull};
use crate::core::scheduler::{
    ColumnCorrelationCache, DependencyFilter, LassoScheduler, ScheduleMode, SchedulerConfig,
};
use crate::kit::{AppError, write_output};
use petrel_messages::tensor::f64_bytes;
use petrel_ml::data::SparseColumns;
use petrel_ml::data::synthetic::{CorrelatedLassoParams, correlated_lasso};

pub const SCHEDULER_ROLE: &str = "strads-lasso-scheduler";
pub const WORKER_ROLE: &str = "strads-lasso-worker";
const WORKER_ACTOR: &str = "strads-lasso-worker";
const READY_BARRIER: &str = "strads.lasso.ready";

/// Synthetic correlated design (see [`correlated_lasso`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyntheticLasso {
    pub n_samples: usize,
    pub n_features: usize,
    pub group_size: usize,
    pub correlation: f32,
    pub n_nonzero: usize,
    pub noise_std: f32,
    pub seed: u64,
}

impl Default for SyntheticLasso {
    fn default() -> Self {
        SyntheticLasso {
            n_samples: 400,
            n_features: 5000,
            group_size: 10,
            correlation: 0.8,
            n_nonzero: 10,
            noise_std: 0.1,
            seed: 42,
        }
    }
}

/// `[app.lasso]`: the whole job's settings (every node reads the same section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LassoJob {
    /// LIBSVM file (label = y); when unset, the synthetic design below is used.
    pub data: Option<PathBuf>,
    pub synthetic: SyntheticLasso,
    /// Absolute lambda; when unset, `lambda_fraction * max_j |x_j^T y|`.
    pub lambda: Option<f32>,
    pub lambda_fraction: f64,
    /// "dynamic", "random" or "cyclic".
    pub mode: String,
    /// U: coordinates per round.
    pub block_size: usize,
    /// U': candidates drawn before the dependency filter.
    pub candidate_pool: usize,
    /// Dependency-check threshold; `None` disables the filter.
    pub rho: Option<f32>,
    pub eta: f64,
    /// Priority `|delta|^p + eta`.
    pub priority_exponent: f64,
    pub initial_priority: f64,
    pub seed: u64,
    /// Rounds in flight (pipeline depth).
    pub depth: usize,
    pub max_rounds: u64,
    /// Update rounds between two exact evaluations (KKT, duality gap); 0 = only at the end.
    pub eval_every: u64,
    /// Stop once the relative duality gap (gap / objective) is below this.
    pub gap_tolerance: Option<f64>,
    /// Stop once the objective is at or below this (benchmarks pass `f* (1 + tol)`).
    pub target_objective: Option<f64>,
    /// Where the scheduler writes `coefficients.tsv` and `metrics.json`.
    pub out_dir: Option<PathBuf>,
    pub timeout_s: u64,
    /// Schedulers splitting the coefficients (see [`multi`]); 1 = one scheduler.
    pub schedulers: usize,
    /// Checkpoints (see [`checkpoint`]): directory shared by the scheduler and the workers;
    /// unset = no checkpoints.
    pub checkpoint_dir: Option<PathBuf>,
    /// Update rounds between two checkpoints (0 = never write, but `resume` may still read).
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in `checkpoint_dir`.
    pub resume: bool,
    /// Fault injection for tests: the scheduler fails right after writing this many
    /// checkpoints in this run.
    pub fail_after_checkpoints: Option<u64>,
}

impl Default for LassoJob {
    fn default() -> Self {
        LassoJob {
            data: None,
            synthetic: SyntheticLasso::default(),
            lambda: None,
            lambda_fraction: 0.2,
            mode: "dynamic".into(),
            block_size: 16,
            candidate_pool: 64,
            rho: Some(0.3),
            eta: 1e-6,
            priority_exponent: 1.0,
            initial_priority: 1.0,
            seed: 0,
            depth: 1,
            max_rounds: 20_000,
            eval_every: 200,
            gap_tolerance: Some(1e-5),
            target_objective: None,
            out_dir: None,
            timeout_s: 60,
            schedulers: 1,
            checkpoint_dir: None,
            checkpoint_every: 500,
            resume: false,
            fail_after_checkpoints: None,
        }
    }
}

impl LassoJob {
    pub fn schedule_mode(&self) -> Result<ScheduleMode, AppError> {
        match self.mode.as_str() {
            "dynamic" => Ok(ScheduleMode::Dynamic),
            "random" => Ok(ScheduleMode::Random),
            "cyclic" => Ok(ScheduleMode::Cyclic),
            other => Err(AppError::Config(format!(
                "mode {other:?}: expected dynamic, random or cyclic"
            ))),
        }
    }

    /// Loads the design (LIBSVM file or synthetic): `(X by columns, y)`.
    pub fn load(&self) -> Result<(SparseColumns, Vec<f32>), AppError> {
        match &self.data {
            Some(path) => {
                let ds = petrel_ml::data::load_libsvm(path)?;
                if ds.n_rows() == 0 || ds.n_features == 0 {
                    return Err(AppError::Config(format!(
                        "{}: no rows or no features",
                        path.display()
                    )));
                }
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
            None => (self.lambda_fraction * lambda_max(x, y)) as f32,
        }
    }

    fn scheduler_config(&self) -> Result<SchedulerConfig, AppError> {
        let mut c = SchedulerConfig::new(self.schedule_mode()?, self.block_size.max(1));
        c.candidate_pool = self.candidate_pool.max(self.block_size);
        c.eta = self.eta;
        c.priority_exponent = self.priority_exponent;
        c.initial_priority = self.initial_priority;
        c.seed = self.seed;
        Ok(c)
    }
}

/// `max_j |x_j^T y|`: the smallest lambda with an all-zero solution.
pub fn lambda_max(x: &SparseColumns, y: &[f32]) -> f64 {
    (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            rows.iter()
                .zip(vals)
                .map(|(&i, &v)| f64::from(v) * f64::from(y[i as usize]))
                .sum::<f64>()
                .abs()
        })
        .fold(0.0, f64::max)
}

/// Marker type binding the Lasso wire types to the runtime.
pub struct LassoApp;

/// What a worker is asked to do in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LassoTask {
    /// Push `z_jp` for these coordinates at these (current) values.
    Update {
        vars: Vec<u32>,
        #[serde(with = "f32_bytes")]
        values: Vec<f32>,
    },
    /// Report `X^T r` and `(y.y, y.r, r.r)` on the worker's rows.
    Evaluate,
    /// Save or restore the worker's state ([`checkpoint`]).
    Control(checkpoint::ControlTask),
}

/// A worker's answer; `applied` is the number of commits its state reflects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LassoPartial {
    Z {
        #[serde(with = "f32_bytes")]
        z: Vec<f32>,
        sq_residual: f64,
        applied: u64,
    },
    Eval {
        #[serde(with = "f64_bytes")]
        x_t_residual: Vec<f64>,
        yy: f64,
        yr: f64,
        rr: f64,
        applied: u64,
    },
    Control(checkpoint::ControlReply),
}

/// Committed `new - old` per coordinate (empty after an evaluation round).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LassoCommit {
    pub vars: Vec<u32>,
    #[serde(with = "f32_bytes")]
    pub deltas: Vec<f32>,
}

impl StradsApp for LassoApp {
    const DISPATCH_NAME: &'static str = "petrel.strads.lasso.dispatch";
    const COMMIT_NAME: &'static str = "petrel.strads.lasso.commit";
    type Task = LassoTask;
    type Partial = LassoPartial;
    type Commit = LassoCommit;
}

/// Worker half: a row block with its residual. It serves every scheduler of the job and
/// counts the commits it applied per scheduler (`applied[s]`), since each scheduler's
/// bookkeeping is indexed by its own commits.
pub struct LassoWorker {
    state: LassoWorkerState,
    applied: Vec<u64>,
    checkpoint: Option<checkpoint::WorkerSlot>,
}

impl LassoWorker {
    pub fn new(state: LassoWorkerState) -> Self {
        Self::with_schedulers(state, 1)
    }

    /// A worker serving `schedulers` schedulers (indices `0..schedulers`).
    pub fn with_schedulers(state: LassoWorkerState, schedulers: usize) -> Self {
        LassoWorker {
            state,
            applied: vec![0; schedulers.max(1)],
            checkpoint: None,
        }
    }

    /// Lets the worker save and restore its state in `slot.dir`.
    pub fn with_checkpoints(mut self, slot: checkpoint::WorkerSlot) -> Self {
        self.checkpoint = Some(slot);
        self
    }

    fn applied_of(&self, scheduler: u32) -> Result<u64, String> {
        self.applied
            .get(scheduler as usize)
            .copied()
            .ok_or_else(|| {
                format!(
                    "scheduler index {scheduler} out of range ({} schedulers)",
                    self.applied.len()
                )
            })
    }
}

impl Push<LassoApp> for LassoWorker {
    fn push(&mut self, round: u64, task: &LassoTask) -> Result<LassoPartial, String> {
        self.push_from(0, round, task)
    }

    fn commit(&mut self, round: u64, commit: &LassoCommit) -> Result<(), String> {
        self.commit_from(0, round, commit)
    }

    fn push_from(
        &mut self,
        scheduler: u32,
        _round: u64,
        task: &LassoTask,
    ) -> Result<LassoPartial, String> {
        let applied = self.applied_of(scheduler)?;
        let n = self.state.n_features();
        match task {
            LassoTask::Update { vars, values } => {
                if vars.len() != values.len() {
                    return Err(format!("{} vars but {} values", vars.len(), values.len()));
                }
                if let Some(&bad) = vars.iter().find(|&&j| j as usize >= n) {
                    return Err(format!("coordinate {bad} out of range ({n} features)"));
                }
                let vars: Vec<usize> = vars.iter().map(|&j| j as usize).collect();
                Ok(LassoPartial::Z {
                    z: self.state.push(&vars, values),
                    sq_residual: self.state.squared_residual(),
                    applied,
                })
            }
            LassoTask::Evaluate => {
                let all: Vec<usize> = (0..n).collect();
                let (yy, yr, rr) = self.state.dot_partials();
                Ok(LassoPartial::Eval {
                    x_t_residual: self.state.correlation_with_residual(&all),
                    yy,
                    yr,
                    rr,
                    applied,
                })
            }
            LassoTask::Control(task) => checkpoint::worker_control(self, task),
        }
    }

    fn commit_from(
        &mut self,
        scheduler: u32,
        _round: u64,
        commit: &LassoCommit,
    ) -> Result<(), String> {
        self.applied_of(scheduler)?;
        if commit.vars.len() != commit.deltas.len() {
            return Err(format!(
                "{} vars but {} deltas",
                commit.vars.len(),
                commit.deltas.len()
            ));
        }
        let n = self.state.n_features();
        if let Some(&bad) = commit.vars.iter().find(|&&j| j as usize >= n) {
            return Err(format!("coordinate {bad} out of range ({n} features)"));
        }
        let changes: Vec<(usize, f32)> = commit
            .vars
            .iter()
            .zip(&commit.deltas)
            .map(|(&j, &d)| (j as usize, d))
            .collect();
        self.state.apply_deltas(&changes);
        self.applied[scheduler as usize] += 1;
        Ok(())
    }
}

/// One point of the objective trace: the state after `updates` coordinate updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectivePoint {
    pub round: u64,
    pub updates: u64,
    pub elapsed_s: f64,
    pub objective: f64,
}

/// An exact evaluation (pipeline drained).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub round: u64,
    pub updates: u64,
    pub elapsed_s: f64,
    pub objective: f64,
    pub kkt_violation: f64,
    pub duality_gap: f64,
    pub nonzeros: usize,
}

/// `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LassoMetrics {
    pub mode: String,
    pub lambda: f32,
    pub n_samples: usize,
    pub n_features: usize,
    pub workers: usize,
    pub block_size: usize,
    pub rho: Option<f32>,
    pub depth: usize,
    pub rounds: u64,
    pub updates: u64,
    pub elapsed_s: f64,
    pub final_objective: f64,
    pub final_kkt_violation: f64,
    pub final_duality_gap: f64,
    /// Updates / seconds at which `target_objective` was first reached.
    pub target_objective: Option<f64>,
    pub target_updates: Option<u64>,
    pub target_s: Option<f64>,
    pub objective: Vec<ObjectivePoint>,
    pub evaluations: Vec<Evaluation>,
    /// Rounds at which checkpoints were written (including before a resume).
    #[serde(default)]
    pub checkpoints: Vec<u64>,
    /// The checkpoint round this run resumed from.
    #[serde(default)]
    pub resumed_from_round: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
enum InFlight {
    Update(Vec<usize>),
    Evaluate,
}

/// Scheduler half: priorities, dependency filter, coefficients, pull and metrics.
pub struct LassoScheduling {
    scheduler: LassoScheduler,
    coefficients: Vec<f32>,
    col_sq_norms: Vec<f64>,
    lambda: f32,
    job: LassoJob,
    in_flight: VecDeque<(u64, InFlight)>,
    busy: HashSet<usize>,
    /// After commit `a`: L1 norm and cumulative updates (index = commits applied).
    l1_after: Vec<f64>,
    updates_after: Vec<u64>,
    l1: f64,
    updates: u64,
    update_rounds_since_eval: u64,
    rounds_scheduled: u64,
    stopping: bool,
    final_eval_sent: bool,
    metrics: LassoMetrics,
}

impl LassoScheduling {
    /// `x` is the full design (for norms and correlations), `workers` the worker count.
    pub fn new(
        x: &SparseColumns,
        y: &[f32],
        job: &LassoJob,
        workers: usize,
    ) -> Result<Self, AppError> {
        if x.n_rows != y.len() {
            return Err(AppError::Config(format!(
                "X has {} rows, y has {}",
                x.n_rows,
                y.len()
            )));
        }
        let lambda = job.resolve_lambda(x, y);
        let x = Arc::new(x.clone());
        let filter = job.rho.map(|rho| DependencyFilter {
            rho,
            oracle: Box::new(ColumnCorrelationCache::new(x.clone(), 1 << 20)),
        });
        let scheduler = LassoScheduler::new(x.n_columns(), job.scheduler_config()?, filter)?;
        Ok(LassoScheduling {
            scheduler,
            coefficients: vec![0.0; x.n_columns()],
            col_sq_norms: x.column_sq_norms(),
            lambda,
            in_flight: VecDeque::new(),
            busy: HashSet::new(),
            l1_after: vec![0.0],
            updates_after: vec![0],
            l1: 0.0,
            updates: 0,
            update_rounds_since_eval: 0,
            rounds_scheduled: 0,
            stopping: false,
            final_eval_sent: false,
            metrics: LassoMetrics {
                mode: job.mode.clone(),
                lambda,
                n_samples: x.n_rows,
                n_features: x.n_columns(),
                workers,
                block_size: job.block_size,
                rho: job.rho,
                depth: job.depth,
                rounds: 0,
                updates: 0,
                elapsed_s: 0.0,
                final_objective: f64::NAN,
                final_kkt_violation: f64::NAN,
                final_duality_gap: f64::NAN,
                target_objective: job.target_objective,
                target_updates: None,
                target_s: None,
                objective: Vec::new(),
                evaluations: Vec::new(),
                checkpoints: Vec::new(),
                resumed_from_round: None,
            },
            job: job.clone(),
        })
    }

    pub fn lambda(&self) -> f32 {
        self.lambda
    }

    pub fn coefficients(&self) -> &[f32] {
        &self.coefficients
    }

    pub fn metrics(&self) -> &LassoMetrics {
        &self.metrics
    }

    fn evaluate(&mut self, round: u64) -> Step<LassoTask> {
        self.in_flight.push_back((round, InFlight::Evaluate));
        self.update_rounds_since_eval = 0;
        self.rounds_scheduled += 1;
        Step::Run(Plan::All(LassoTask::Evaluate))
    }

    fn record_objective(&mut self, round: u64, applied: u64, sq: f64, elapsed: Duration) {
        let Some(&l1) = self.l1_after.get(applied as usize) else {
            return;
        };
        let objective = 0.5 * sq + f64::from(self.lambda) * l1;
        let updates = self.updates_after[applied as usize];
        let elapsed_s = elapsed.as_secs_f64();
        self.metrics.objective.push(ObjectivePoint {
            round,
            updates,
            elapsed_s,
            objective,
        });
        if let Some(target) = self.job.target_objective
            && objective <= target
            && self.metrics.target_updates.is_none()
        {
            self.metrics.target_updates = Some(updates);
            self.metrics.target_s = Some(elapsed_s);
            self.stopping = true;
        }
        if !objective.is_finite() {
            tracing::warn!(round, "objective is not finite: diverged");
            self.stopping = true;
        }
    }

    fn after_commit(&mut self) {
        self.l1_after.push(self.l1);
        self.updates_after.push(self.updates);
    }
}

/// All workers must report the same `applied` count (they see the same message sequence).
fn common_applied(applied: impl Iterator<Item = u64>) -> Result<u64, String> {
    let all: Vec<u64> = applied.collect();
    match all.first() {
        Some(&a) if all.iter().all(|&b| b == a) => Ok(a),
        _ => Err(format!("workers report different commit counts {all:?}")),
    }
}

impl Schedule<LassoApp> for LassoScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LassoTask> {
        if !self.stopping && self.rounds_scheduled >= self.job.max_rounds {
            self.stopping = true;
        }
        if self.stopping {
            return if in_flight > 0 {
                Step::Wait
            } else if !self.final_eval_sent {
                self.final_eval_sent = true;
                self.evaluate(round)
            } else {
                Step::Done
            };
        }
        if self.job.eval_every > 0 && self.update_rounds_since_eval >= self.job.eval_every {
            return if in_flight > 0 {
                Step::Wait
            } else {
                self.evaluate(round)
            };
        }
        let vars: Vec<usize> = self
            .scheduler
            .next_round()
            .into_iter()
            .filter(|j| !self.busy.contains(j))
            .collect();
        if vars.is_empty() {
            return if in_flight > 0 {
                Step::Wait
            } else {
                // Cannot happen (nothing busy), but never dispatch an empty round.
                self.stopping = true;
                self.schedule(round, in_flight)
            };
        }
        self.busy.extend(vars.iter().copied());
        let values = vars.iter().map(|&j| self.coefficients[j]).collect();
        let task = LassoTask::Update {
            vars: vars.iter().map(|&j| j as u32).collect(),
            values,
        };
        self.in_flight.push_back((round, InFlight::Update(vars)));
        self.update_rounds_since_eval += 1;
        self.rounds_scheduled += 1;
        Step::Run(Plan::All(task))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LassoPartial>,
        elapsed: Duration,
    ) -> Result<LassoCommit, String> {
        let Some((expected, kind)) = self.in_flight.pop_front() else {
            return Err(format!("pull of round {round} with nothing in flight"));
        };
        if expected != round {
            return Err(format!("pull of round {round}, expected {expected}"));
        }
        self.metrics.rounds = round + 1;
        self.metrics.elapsed_s = elapsed.as_secs_f64();
        let commit = match kind {
            InFlight::Update(vars) => {
                let mut summed = vec![0.0f32; vars.len()];
                let mut sq = 0.0;
                let mut applied = Vec::with_capacity(partials.len());
                for p in &partials {
                    let LassoPartial::Z {
                        z,
                        sq_residual,
                        applied: a,
                    } = p
                    else {
                        return Err(format!("round {round}: evaluation answer to an update"));
                    };
                    if z.len() != vars.len() {
                        return Err(format!(
                            "round {round}: {} partials for {} vars",
                            z.len(),
                            vars.len()
                        ));
                    }
                    summed.iter_mut().zip(z).for_each(|(s, v)| *s += v);
                    sq += sq_residual;
                    applied.push(*a);
                }
                let applied = common_applied(applied.into_iter())?;
                self.record_objective(round, applied, sq, elapsed);
                let new_values = pull(&vars, &summed, &self.col_sq_norms, self.lambda);
                let mut changes = Vec::with_capacity(vars.len());
                for (&j, &value) in vars.iter().zip(&new_values) {
                    let old = self.coefficients[j];
                    self.l1 += f64::from(value.abs()) - f64::from(old.abs());
                    self.coefficients[j] = value;
                    changes.push((j, value - old));
                    self.busy.remove(&j);
                }
                self.scheduler.commit(&changes);
                self.updates += vars.len() as u64;
                LassoCommit {
                    vars: vars.iter().map(|&j| j as u32).collect(),
                    deltas: changes.iter().map(|c| c.1).collect(),
                }
            }
            InFlight::Evaluate => {
                let d = self.coefficients.len();
                let mut xtr = vec![0.0f64; d];
                let (mut yy, mut yr, mut rr) = (0.0, 0.0, 0.0);
                let mut applied = Vec::with_capacity(partials.len());
                for p in &partials {
                    let LassoPartial::Eval {
                        x_t_residual,
                        yy: a,
                        yr: b,
                        rr: c,
                        applied: n,
                    } = p
                    else {
                        return Err(format!("round {round}: update answer to an evaluation"));
                    };
                    if x_t_residual.len() != d {
                        return Err(format!(
                            "round {round}: X^T r of length {} for {d} features",
                            x_t_residual.len()
                        ));
                    }
                    xtr.iter_mut().zip(x_t_residual).for_each(|(s, v)| *s += v);
                    yy += a;
                    yr += b;
                    rr += c;
                    applied.push(*n);
                }
                common_applied(applied.into_iter())?;
                // Exact: evaluation rounds are only dispatched with the pipeline drained.
                self.l1 = self.coefficients.iter().map(|v| f64::from(v.abs())).sum();
                let lambda = f64::from(self.lambda);
                let objective = 0.5 * rr + lambda * self.l1;
                let s = dual_scale(&xtr, self.lambda);
                let y_minus_theta = yy - 2.0 * s * yr + s * s * rr;
                let gap = objective - (0.5 * yy - 0.5 * y_minus_theta);
                let kkt = kkt_violation(&xtr, &self.coefficients, self.lambda);
                let nonzeros = self.coefficients.iter().filter(|v| **v != 0.0).count();
                let eval = Evaluation {
                    round,
                    updates: self.updates,
                    elapsed_s: elapsed.as_secs_f64(),
                    objective,
                    kkt_violation: kkt,
                    duality_gap: gap,
                    nonzeros,
                };
                tracing::info!(
                    round,
                    updates = self.updates,
                    objective = format!("{objective:.6}"),
                    kkt = format!("{kkt:.3e}"),
                    gap = format!("{gap:.3e}"),
                    nonzeros,
                    "lasso evaluation"
                );
                self.metrics.final_objective = objective;
                self.metrics.final_kkt_violation = kkt;
                self.metrics.final_duality_gap = gap;
                self.metrics.evaluations.push(eval);
                if let Some(tol) = self.job.gap_tolerance
                    && gap <= tol * objective.abs().max(f64::MIN_POSITIVE)
                {
                    self.stopping = true;
                }
                if !objective.is_finite() {
                    self.stopping = true;
                }
                LassoCommit {
                    vars: Vec::new(),
                    deltas: Vec::new(),
                }
            }
        };
        self.metrics.updates = self.updates;
        self.after_commit();
        Ok(commit)
    }
}

/// The finished model.
#[derive(Debug, Clone, PartialEq)]
pub struct LassoOutcome {
    pub coefficients: Vec<f32>,
    pub metrics: LassoMetrics,
}

impl LassoOutcome {
    /// Writes `coefficients.tsv` (`feature<TAB>value` for every feature, numbered 1-based
    /// like LIBSVM indices) and `metrics.json`.
    pub fn write(&self, dir: &std::path::Path) -> Result<(), AppError> {
        let mut text = String::with_capacity(self.coefficients.len() * 12);
        for (j, v) in self.coefficients.iter().enumerate() {
            text.push_str(&format!("{}\t{v}\n", j + 1));
        }
        write_output(dir, "coefficients.tsv", text.as_bytes())?;
        let json = serde_json::to_vec_pretty(&self.metrics)
            .map_err(|e| AppError::Config(format!("metrics: {e}")))?;
        write_output(dir, "metrics.json", &json)
    }
}

/// Runs a job with both halves in this thread and no actors, in exactly the message order
/// of [`run_scheduler`] (dispatch r, ..., commit r in round order): the reference the
/// distributed runs must reproduce bit for bit.
pub fn run_without_actors(job: &LassoJob, workers: usize) -> Result<LassoOutcome, AppError> {
    use crate::shells::{PipelineAction, PipelineCore};
    let (x, y) = job.load()?;
    let mut sched = LassoScheduling::new(&x, &y, job, workers)?;
    let mut ws = crate::core::split_evenly(x.n_rows, workers)
        .into_iter()
        .map(|r| LassoWorkerState::new(x.row_block(r.clone()), y[r].to_vec()).map(LassoWorker::new))
        .collect::<Result<Vec<_>, _>>()?;
    let mut core = PipelineCore::new(job.depth);
    let mut pending: VecDeque<(u64, Vec<LassoPartial>)> = VecDeque::new();
    let mut waiting = false;
    let app_err = |e: String| AppError::Config(e);
    loop {
        let action = if core.must_await(waiting) {
            PipelineAction::AwaitOldest
        } else {
            core.next_action()
        };
        match action {
            PipelineAction::Schedule(r) => {
                let step = sched.schedule(r, core.in_flight());
                waiting = matches!(step, Step::Wait);
                core.scheduled(&step).map_err(app_err)?;
                if let Step::Run(Plan::All(task)) = step {
                    let parts = ws
                        .iter_mut()
                        .map(|w| w.push(r, &task))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(app_err)?;
                    pending.push_back((r, parts));
                }
            }
            PipelineAction::AwaitOldest => {
                waiting = false;
                let Some((r, parts)) = pending.pop_front() else {
                    return Err(AppError::Config("pipeline empty".into()));
                };
                let c = sched.pull(r, parts, Duration::ZERO).map_err(app_err)?;
                core.committed(r).map_err(app_err)?;
                for w in &mut ws {
                    w.commit(r, &c).map_err(app_err)?;
                }
            }
            PipelineAction::Stop => break,
        }
    }
    Ok(LassoOutcome {
        coefficients: sched.coefficients().to_vec(),
        metrics: sched.metrics().clone(),
    })
}

fn job_of(ctx: &NodeContext) -> Result<LassoJob, String> {
    ctx.settings
        .app::<LassoJob>("lasso")
        .map_err(|e| e.to_string())
}

async fn scheduler_role(ctx: NodeContext) -> Result<(), String> {
    let job = job_of(&ctx)?;
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    if workers.is_empty() {
        return Err(format!("no node runs {WORKER_ROLE}"));
    }
    let n_workers = workers.len();
    let ckpt = checkpoint::CheckpointSettings::of(&job, ctx.nodes_with_role(SCHEDULER_ROLE).len())
        .map_err(|e| e.to_string())?;
    let loader = job.clone();
    let (x, mut app) = crate::kit::off_loop(move || {
        let (x, y) = loader.load()?;
        let app = LassoScheduling::new(&x, &y, &loader, n_workers)?;
        let shape = checkpoint::ClusterShape::of(&x, &y, app.lambda(), loader.seed, n_workers);
        let app = checkpoint::Resumable::new(app, ckpt, shape)?;
        Ok((x, app))
    })
    .await?;
    tracing::info!(
        rows = x.n_rows,
        features = x.n_columns(),
        workers = workers.len(),
        lambda = app.inner().lambda(),
        mode = %job.mode,
        "lasso scheduler ready"
    );
    ctx.barrier(READY_BARRIER)
        .await
        .map_err(|e| e.to_string())?;
    let set = WorkerSet::<LassoApp>::resolve(&ctx.node, &workers, WORKER_ACTOR)
        .map_err(|e| e.to_string())?;
    let opts = SchedulerOptions {
        depth: job.depth.max(1),
        scheduler: 0,
        timeout: Duration::from_secs(job.timeout_s.max(1)),
        priority: Priority::NORMAL,
    };
    let stats = run_scheduler(&mut app, &set, &opts)
        .await
        .map_err(|e| e.to_string())?;
    let app = app.into_inner();
    tracing::info!(
        rounds = stats.rounds,
        seconds = format!("{:.2}", stats.elapsed.as_secs_f64()),
        objective = app.metrics().final_objective,
        "lasso finished"
    );
    let outcome = LassoOutcome {
        coefficients: app.coefficients().to_vec(),
        metrics: app.metrics().clone(),
    };
    if let Some(dir) = &job.out_dir {
        outcome.write(dir).map_err(|e| e.to_string())?;
        tracing::info!(dir = %dir.display(), "wrote coefficients.tsv and metrics.json");
    }
    Ok(())
}

async fn worker_role(ctx: NodeContext) -> Result<(), String> {
    let job = job_of(&ctx)?;
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    let index = workers
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or("worker not in its own role list")?;
    let n_workers = workers.len();
    let loader = job.clone();
    let (rows, worker) = crate::kit::off_loop(move || {
        let (x, y) = loader.load()?;
        let rows = crate::core::split_evenly(x.n_rows, n_workers)
            .into_iter()
            .nth(index)
            .ok_or_else(|| AppError::Config("worker index out of range".into()))?;
        let (block, y_block) = (x.row_block(rows.clone()), y[rows.clone()].to_vec());
        let slot = loader
            .checkpoint_dir
            .clone()
            .map(|dir| checkpoint::WorkerSlot {
                dir,
                index: index as u32,
                n_workers: n_workers as u32,
                rows: rows.clone(),
                n_features: block.n_columns(),
                block_fnv64: checkpoint::data_fingerprint(&block, &y_block),
            });
        let mut worker =
            LassoWorker::with_schedulers(LassoWorkerState::new(block, y_block)?, loader.schedulers);
        if let Some(slot) = slot {
            worker = worker.with_checkpoints(slot);
        }
        Ok((rows, worker))
    })
    .await?;
    start_worker::<LassoApp, _>(&ctx.node, WORKER_ACTOR, index as u32, worker)
        .map_err(|e| e.to_string())?;
    tracing::info!(worker = index, rows = ?rows, "lasso worker ready");
    ctx.barrier(READY_BARRIER).await.map_err(|e| e.to_string())
}

/// Registers the Lasso roles: the worker, scheduler 0 (`strads-lasso-scheduler`) and the
/// further scheduler roles of a job with several schedulers ([`multi::scheduler_role_name`]).
pub fn register(cluster: Cluster) -> Cluster {
    let cluster = (0..multi::MAX_SCHEDULERS).fold(cluster, |c, index| {
        c.role(&multi::scheduler_role_name(index), move |ctx| {
            Box::pin(multi::scheduler_entry(ctx, index))
        })
    });
    cluster.role(WORKER_ROLE, |ctx| Box::pin(worker_role(ctx)))
}

pub mod checkpoint;
pub mod multi;

#[cfg(test)]
mod tests;
