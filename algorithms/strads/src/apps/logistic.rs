//! Sparse (L1) logistic regression by scheduled coordinate descent on the STRADS runtime:
//! the Lasso machinery (same [`LassoJob`] settings under `[app.logistic]`, same scheduler and
//! dependency filter) with the logistic core's push (partial gradient and curvature bound)
//! and pull (`b_j <- S(h b_j - g, lambda) / h`). Labels `> 0` are the positive class.
//! Without a data file, a linearly separable two-class problem is generated.
//!
//! Roles `strads-logistic-scheduler` / `strads-logistic-worker`; outputs
//! `coefficients.tsv` (LIBSVM 1-based feature numbers) and `metrics.json`.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::shells::{
    Plan, Push, Schedule, SchedulerOptions, Step, StradsApp, WorkerSet, run_scheduler, start_worker,
};
use petrel_actors::{Cluster, NodeContext};
use petrel_messages::Priority;
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

use super::lasso::LassoJob;
use crate::core::logistic::{LogisticWorkerState, pull};
use crate::core::scheduler::{ColumnCorrelationCache, DependencyFilter, LassoScheduler};
use crate::kit::{AppError, write_output};
use petrel_ml::data::SparseColumns;
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};

pub const SCHEDULER_ROLE: &str = "strads-logistic-scheduler";
pub const WORKER_ROLE: &str = "strads-logistic-worker";
const WORKER_ACTOR: &str = "strads-logistic-worker";
const READY_BARRIER: &str = "strads.logistic.ready";

/// `(X by columns, labels)` from the job's LIBSVM file or a separable synthetic problem
/// (`synthetic.n_samples x synthetic.n_features`, seed `synthetic.seed`).
pub fn load(job: &LassoJob) -> Result<(SparseColumns, Vec<f32>), AppError> {
    if job.data.is_some() {
        return job.load();
    }
    let s = &job.synthetic;
    let p = separable_classification(&ClassificationParams {
        n_samples: s.n_samples,
        n_features: s.n_features,
        n_classes: 2,
        margin: 0.5,
        seed: s.seed,
    })?;
    Ok((p.dataset.to_columns(), p.dataset.labels))
}

/// Marker type of the logistic wire types.
pub struct LogisticApp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticTask {
    pub vars: Vec<u32>,
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticPartial {
    #[serde(with = "f32_bytes")]
    pub gradient: Vec<f32>,
    #[serde(with = "f32_bytes")]
    pub curvature: Vec<f32>,
    /// Partial loss and correctly classified rows of the state after `applied` commits.
    pub loss: f64,
    pub correct: u64,
    pub rows: u64,
    pub applied: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticCommit {
    pub vars: Vec<u32>,
    #[serde(with = "f32_bytes")]
    pub deltas: Vec<f32>,
}

impl StradsApp for LogisticApp {
    const DISPATCH_NAME: &'static str = "petrel.strads.logistic.dispatch";
    const COMMIT_NAME: &'static str = "petrel.strads.logistic.commit";
    type Task = LogisticTask;
    type Partial = LogisticPartial;
    type Commit = LogisticCommit;
}

/// Worker half: a row block and its margins.
pub struct LogisticWorker {
    state: LogisticWorkerState,
    n_features: usize,
    rows: u64,
    applied: u64,
}

impl LogisticWorker {
    pub fn new(x: SparseColumns, labels: &[f32]) -> Result<Self, AppError> {
        let (n_features, rows) = (x.n_columns(), x.n_rows as u64);
        Ok(LogisticWorker {
            state: LogisticWorkerState::new(x, labels)?,
            n_features,
            rows,
            applied: 0,
        })
    }
}

fn check_vars(vars: &[u32], values: usize, n: usize) -> Result<Vec<usize>, String> {
    if vars.len() != values {
        return Err(format!("{} vars but {values} values", vars.len()));
    }
    vars.iter()
        .map(|&j| {
            (j as usize)
                .lt(&n)
                .then_some(j as usize)
                .ok_or_else(|| format!("coordinate {j} out of range ({n} features)"))
        })
        .collect()
}

impl Push<LogisticApp> for LogisticWorker {
    fn push(&mut self, _round: u64, task: &LogisticTask) -> Result<LogisticPartial, String> {
        let vars = check_vars(&task.vars, task.values.len(), self.n_features)?;
        let (gradient, curvature) = self.state.push(&vars);
        Ok(LogisticPartial {
            gradient,
            curvature,
            loss: self.state.loss(),
            correct: self.state.correct() as u64,
            rows: self.rows,
            applied: self.applied,
        })
    }

    fn commit(&mut self, _round: u64, c: &LogisticCommit) -> Result<(), String> {
        let vars = check_vars(&c.vars, c.deltas.len(), self.n_features)?;
        let changes: Vec<(usize, f32)> = vars.into_iter().zip(c.deltas.iter().copied()).collect();
        self.state.apply_deltas(&changes);
        self.applied += 1;
        Ok(())
    }
}

/// One point of the trace: the state after `updates` coordinate updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticPoint {
    pub round: u64,
    pub updates: u64,
    pub elapsed_s: f64,
    pub objective: f64,
    pub training_accuracy: f64,
}

/// `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticMetrics {
    pub mode: String,
    pub lambda: f32,
    pub n_samples: usize,
    pub n_features: usize,
    pub workers: usize,
    pub rounds: u64,
    pub updates: u64,
    pub elapsed_s: f64,
    pub final_objective: f64,
    pub final_training_accuracy: f64,
    pub nonzeros: usize,
    pub trace: Vec<LogisticPoint>,
}

/// Scheduler half.
pub struct LogisticScheduling {
    scheduler: LassoScheduler,
    coefficients: Vec<f32>,
    lambda: f32,
    max_rounds: u64,
    in_flight: VecDeque<(u64, Vec<usize>)>,
    busy: HashSet<usize>,
    l1_after: Vec<f64>,
    updates_after: Vec<u64>,
    l1: f64,
    updates: u64,
    scheduled: u64,
    metrics: LogisticMetrics,
}

impl LogisticScheduling {
    /// The job's `lambda` is absolute (default: `lambda_fraction` of `max_j |x_j^T y| / 2`,
    /// the smallest lambda with an all-zero solution for +-1 labels at b = 0).
    pub fn new(
        x: &SparseColumns,
        labels: &[f32],
        job: &LassoJob,
        workers: usize,
    ) -> Result<Self, AppError> {
        let signs: Vec<f32> = labels
            .iter()
            .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
            .collect();
        let lambda = job
            .lambda
            .unwrap_or((job.lambda_fraction * super::lasso::lambda_max(x, &signs) / 2.0) as f32);
        let shared = Arc::new(x.clone());
        let filter = job.rho.map(|rho| DependencyFilter {
            rho,
            oracle: Box::new(ColumnCorrelationCache::new(shared, 1 << 20)),
        });
        let mut config = crate::core::scheduler::SchedulerConfig::new(
            job.schedule_mode()?,
            job.block_size.max(1),
        );
        config.candidate_pool = job.candidate_pool.max(job.block_size);
        config.eta = job.eta;
        config.priority_exponent = job.priority_exponent;
        config.seed = job.seed;
        Ok(LogisticScheduling {
            scheduler: LassoScheduler::new(x.n_columns(), config, filter)?,
            coefficients: vec![0.0; x.n_columns()],
            lambda,
            max_rounds: job.max_rounds,
            in_flight: VecDeque::new(),
            busy: HashSet::new(),
            l1_after: vec![0.0],
            updates_after: vec![0],
            l1: 0.0,
            updates: 0,
            scheduled: 0,
            metrics: LogisticMetrics {
                mode: job.mode.clone(),
                lambda,
                n_samples: x.n_rows,
                n_features: x.n_columns(),
                workers,
                rounds: 0,
                updates: 0,
                elapsed_s: 0.0,
                final_objective: f64::NAN,
                final_training_accuracy: f64::NAN,
                nonzeros: 0,
                trace: Vec::new(),
            },
        })
    }

    pub fn coefficients(&self) -> &[f32] {
        &self.coefficients
    }

    pub fn metrics(&self) -> &LogisticMetrics {
        &self.metrics
    }
}

impl Schedule<LogisticApp> for LogisticScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LogisticTask> {
        // One extra (empty-effect) round at the end measures the final state.
        if self.scheduled > self.max_rounds {
            return Step::Done;
        }
        let vars: Vec<usize> = if self.scheduled == self.max_rounds {
            Vec::new()
        } else {
            self.scheduler
                .next_round()
                .into_iter()
                .filter(|j| !self.busy.contains(j))
                .collect()
        };
        if vars.is_empty() && self.scheduled < self.max_rounds && in_flight > 0 {
            return Step::Wait;
        }
        if self.scheduled == self.max_rounds && in_flight > 0 {
            return Step::Wait;
        }
        self.busy.extend(vars.iter().copied());
        self.scheduled += 1;
        let task = LogisticTask {
            vars: vars.iter().map(|&j| j as u32).collect(),
            values: vars.iter().map(|&j| self.coefficients[j]).collect(),
        };
        self.in_flight.push_back((round, vars));
        Step::Run(Plan::All(task))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LogisticPartial>,
        elapsed: Duration,
    ) -> Result<LogisticCommit, String> {
        let Some((expected, vars)) = self.in_flight.pop_front() else {
            return Err(format!("pull of round {round} with nothing in flight"));
        };
        if expected != round {
            return Err(format!("pull of round {round}, expected {expected}"));
        }
        let mut g = vec![0.0f32; vars.len()];
        let mut h = vec![0.0f32; vars.len()];
        let (mut loss, mut correct, mut rows) = (0.0, 0u64, 0u64);
        let mut applied = Vec::new();
        for p in &partials {
            if p.gradient.len() != vars.len() || p.curvature.len() != vars.len() {
                return Err(format!("round {round}: partials do not match the vars"));
            }
            g.iter_mut().zip(&p.gradient).for_each(|(s, v)| *s += v);
            h.iter_mut().zip(&p.curvature).for_each(|(s, v)| *s += v);
            loss += p.loss;
            correct += p.correct;
            rows += p.rows;
            applied.push(p.applied);
        }
        let a = applied.first().copied().unwrap_or(0);
        if applied.iter().any(|&b| b != a) {
            return Err(format!(
                "workers report different commit counts {applied:?}"
            ));
        }
        if let Some(&l1) = self.l1_after.get(a as usize) {
            let objective = loss + f64::from(self.lambda) * l1;
            let accuracy = correct as f64 / rows.max(1) as f64;
            self.metrics.trace.push(LogisticPoint {
                round,
                updates: self.updates_after[a as usize],
                elapsed_s: elapsed.as_secs_f64(),
                objective,
                training_accuracy: accuracy,
            });
            self.metrics.final_objective = objective;
            self.metrics.final_training_accuracy = accuracy;
        }
        let values: Vec<f32> = vars.iter().map(|&j| self.coefficients[j]).collect();
        let new_values = pull(&values, &g, &h, self.lambda);
        let mut deltas = Vec::with_capacity(vars.len());
        let mut changes = Vec::with_capacity(vars.len());
        for (&j, &value) in vars.iter().zip(&new_values) {
            let old = self.coefficients[j];
            self.l1 += f64::from(value.abs()) - f64::from(old.abs());
            self.coefficients[j] = value;
            deltas.push(value - old);
            changes.push((j, value - old));
            self.busy.remove(&j);
        }
        self.scheduler.commit(&changes);
        self.updates += vars.len() as u64;
        self.l1_after.push(self.l1);
        self.updates_after.push(self.updates);
        self.metrics.rounds = round + 1;
        self.metrics.updates = self.updates;
        self.metrics.elapsed_s = elapsed.as_secs_f64();
        self.metrics.nonzeros = self.coefficients.iter().filter(|v| **v != 0.0).count();
        Ok(LogisticCommit {
            vars: vars.iter().map(|&j| j as u32).collect(),
            deltas,
        })
    }
}

/// Writes `coefficients.tsv` and `metrics.json`.
pub fn write_outputs(dir: &std::path::Path, sched: &LogisticScheduling) -> Result<(), AppError> {
    let text: String = sched
        .coefficients()
        .iter()
        .enumerate()
        .map(|(j, v)| format!("{}\t{v}\n", j + 1))
        .collect();
    write_output(dir, "coefficients.tsv", text.as_bytes())?;
    let json =
        serde_json::to_vec_pretty(sched.metrics()).map_err(|e| AppError::Config(e.to_string()))?;
    write_output(dir, "metrics.json", &json)
}

async fn scheduler_role(ctx: NodeContext) -> Result<(), String> {
    let job: LassoJob = ctx.settings.app("logistic").map_err(|e| e.to_string())?;
    if job.checkpoint_dir.is_some() || job.resume {
        return Err("checkpoint_dir / resume: checkpointing is implemented for lasso only".into());
    }
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    if workers.is_empty() {
        return Err(format!("no node runs {WORKER_ROLE}"));
    }
    let (n_workers, loader) = (workers.len(), job.clone());
    let mut app = crate::kit::off_loop(move || {
        let (x, labels) = load(&loader)?;
        LogisticScheduling::new(&x, &labels, &loader, n_workers)
    })
    .await?;
    ctx.barrier(READY_BARRIER)
        .await
        .map_err(|e| e.to_string())?;
    let set = WorkerSet::<LogisticApp>::resolve(&ctx.node, &workers, WORKER_ACTOR)
        .map_err(|e| e.to_string())?;
    let opts = SchedulerOptions {
        depth: job.depth.max(1),
        timeout: Duration::from_secs(job.timeout_s.max(1)),
        priority: Priority::NORMAL,
        ..SchedulerOptions::default()
    };
    run_scheduler(&mut app, &set, &opts)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(dir) = &job.out_dir {
        write_outputs(dir, &app).map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn worker_role(ctx: NodeContext) -> Result<(), String> {
    let job: LassoJob = ctx.settings.app("logistic").map_err(|e| e.to_string())?;
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    let index = workers
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or("worker not in its own role list")?;
    let n_workers = workers.len();
    let worker = crate::kit::off_loop(move || {
        let (x, labels) = load(&job)?;
        let rows = crate::core::split_evenly(x.n_rows, n_workers)
            .into_iter()
            .nth(index)
            .ok_or_else(|| AppError::Config("worker index out of range".into()))?;
        LogisticWorker::new(x.row_block(rows.clone()), &labels[rows])
    })
    .await?;
    start_worker::<LogisticApp, _>(&ctx.node, WORKER_ACTOR, index as u32, worker)
        .map_err(|e| e.to_string())?;
    ctx.barrier(READY_BARRIER).await.map_err(|e| e.to_string())
}

/// Registers the logistic-regression roles.
pub fn register(cluster: Cluster) -> Cluster {
    cluster
        .role(SCHEDULER_ROLE, |ctx| Box::pin(scheduler_role(ctx)))
        .role(WORKER_ROLE, |ctx| Box::pin(worker_role(ctx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::lasso::SyntheticLasso;
    use crate::shells::{PipelineAction, PipelineCore};

    #[test]
    fn sparse_logistic_fits_separable_data() {
        let job = LassoJob {
            synthetic: SyntheticLasso {
                n_samples: 200,
                n_features: 30,
                seed: 5,
                ..SyntheticLasso::default()
            },
            lambda: Some(0.01),
            block_size: 4,
            candidate_pool: 16,
            max_rounds: 600,
            depth: 2,
            ..LassoJob::default()
        };
        let (x, labels) = load(&job).unwrap();
        let mut sched = LogisticScheduling::new(&x, &labels, &job, 2).unwrap();
        let mut ws: Vec<LogisticWorker> = crate::core::split_evenly(x.n_rows, 2)
            .into_iter()
            .map(|r| LogisticWorker::new(x.row_block(r.clone()), &labels[r]).unwrap())
            .collect();
        let mut core = PipelineCore::new(job.depth);
        let mut pending = VecDeque::new();
        let mut waiting = false;
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
                    core.scheduled(&step).unwrap();
                    if let Step::Run(Plan::All(t)) = step {
                        let parts: Vec<_> = ws.iter_mut().map(|w| w.push(r, &t).unwrap()).collect();
                        pending.push_back((r, parts));
                    }
                }
                PipelineAction::AwaitOldest => {
                    waiting = false;
                    let (r, parts) = pending.pop_front().unwrap();
                    let c = sched.pull(r, parts, Duration::ZERO).unwrap();
                    core.committed(r).unwrap();
                    for w in &mut ws {
                        w.commit(r, &c).unwrap();
                    }
                }
                PipelineAction::Stop => break,
            }
        }
        let m = sched.metrics();
        let first = m.trace.first().unwrap().objective;
        assert!(
            m.final_objective < 0.5 * first,
            "{first} -> {}",
            m.final_objective
        );
        assert!(
            m.final_training_accuracy > 0.95,
            "accuracy {}",
            m.final_training_accuracy
        );
        assert!(m.nonzeros > 0);
    }
}
