//! Lasso with its coefficients split over several schedulers (`[app.lasso] schedulers = S`).
//!
//! **Partition.** The `d` coefficients are cut into `S` contiguous column ranges of about
//! equal weight, the weight of column `j` being `nnz(x_j) + 1` ([`partition_columns`]): a
//! push of `j` costs `nnz(x_j)` on the workers, so equal weights give the schedulers equal
//! work per round. Contiguous ranges keep neighbouring features together; in the synthetic
//! design (and in many real ones) correlated features are neighbours, and the dependency
//! filter (`rho`) only sees the variables of its own scheduler, so a contiguous cut leaves
//! at most one correlated group straddling each boundary.
//!
//! **Schedulers.** Scheduler `s` runs the role [`scheduler_role_name`]`(s)` (`s = 0` is the
//! usual `strads-lasso-scheduler`); several may share a node (the node's first scheduler
//! role runs all of them) or each have its own. Each runs its own [`LassoScheduling`] over
//! the columns it owns ([`SliceScheduling`]: priority sampling, dependency filter,
//! soft-threshold pull, local bookkeeping) and dispatches to every worker; the workers
//! serve all of them and count applied commits per scheduler ([`super::LassoWorker`]).
//! Round numbers are per scheduler.
//!
//! **Coordination.** The job runs in epochs of `eval_every` update rounds per scheduler.
//! At the end of an epoch every scheduler drains its pipeline; a follower (`s > 0`) then
//! sends one empty round to the workers (a flush: it is answered only after the workers
//! applied all its earlier commits, which travel FIFO on the same connection) and asks the
//! lead (scheduler 0) with a [`SyncReport`]: its non-zero coefficients, rounds, updates and
//! whether it wants to stop (`max_rounds` reached or diverged). The lead, once it has its
//! own epoch drained and every report in ([`SyncCore`]), is the only sender of work, so
//! the workers' state is a consistent snapshot: it assembles the whole coefficient vector,
//! dispatches one `Evaluate` round (workers return `X^T r` and `(y.y, y.r, r.r)`), and
//! [`combine_evaluation`] gives the exact objective, KKT violation and duality gap. The
//! stop rule ([`SyncCore::decide`]) is the single scheduler's: relative duality gap below
//! `gap_tolerance`, objective at or below `target_objective`, any scheduler at
//! `max_rounds`, or a non-finite objective. The decision (with the global L1 norm and
//! update count) goes back as the reply; on stop the lead writes `coefficients.tsv` and
//! `metrics.json` for the whole model.
//!
//! Between epochs the schedulers run unsynchronised, so a push may see some other
//! scheduler's commits on one worker and not yet on another: the read is slightly stale,
//! as in the STRADS papers' multi-scheduler runs; only the (exact) evaluations decide.
//! The per-round objective trace of the lead is `1/2 ||r||^2` (current) plus `lambda`
//! times its own L1 norm (exact) plus the other schedulers' L1 norm as of the last
//! evaluation; `target_objective` is only checked at evaluations.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::shells::{Plan, Push, Schedule, SchedulerOptions, Step, WorkerSet, run_scheduler_from};
use actix::prelude::*;
use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use petrel_actors::error::HandlerError;
use petrel_actors::{Msg, NodeContext};
use petrel_messages::Priority;
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

use super::{
    AppError, Evaluation, LassoApp, LassoCommit, LassoJob, LassoMetrics, LassoOutcome,
    LassoPartial, LassoScheduling, LassoTask, LassoWorker, READY_BARRIER, SCHEDULER_ROLE,
    WORKER_ACTOR, WORKER_ROLE, common_applied, job_of,
};
use crate::core::lasso::{LassoWorkerState, dual_scale, kkt_violation};
use petrel_ml::data::SparseColumns;

/// Scheduler roles registered (`strads-lasso-scheduler`, `strads-lasso-scheduler-1`, ...).
pub const MAX_SCHEDULERS: usize = 16;
/// The lead's actor receiving [`SyncReport`]s.
pub const SYNC_ACTOR: &str = "strads-lasso-sync";

/// Role of scheduler `index`: `strads-lasso-scheduler` for 0, `strads-lasso-scheduler-<i>`
/// for the others.
pub fn scheduler_role_name(index: usize) -> String {
    if index == 0 {
        SCHEDULER_ROLE.to_string()
    } else {
        format!("{SCHEDULER_ROLE}-{index}")
    }
}

/// The scheduler index a role name stands for, if it is a Lasso scheduler role.
pub fn scheduler_index_of(role: &str) -> Option<usize> {
    if role == SCHEDULER_ROLE {
        return Some(0);
    }
    role.strip_prefix(SCHEDULER_ROLE)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// Misconfigurations of a multi-scheduler job.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MultiError {
    #[error("schedulers = 0: need at least one")]
    NoSchedulers,
    #[error("schedulers = {schedulers} but the design has only {features} features")]
    TooManySchedulers { schedulers: usize, features: usize },
    #[error("schedulers = {schedulers}: at most {MAX_SCHEDULERS} are supported")]
    AboveMax { schedulers: usize },
    #[error(
        "node {node} runs role {role}: scheduler index {index} out of range (schedulers = {schedulers})"
    )]
    IndexOutOfRange {
        node: String,
        role: String,
        index: usize,
        schedulers: usize,
    },
    #[error("scheduler {index} is claimed by two nodes: {first} and {second}")]
    Duplicate {
        index: usize,
        first: String,
        second: String,
    },
    #[error("no node runs {role} (schedulers = {schedulers})")]
    Missing { role: String, schedulers: usize },
    #[error("checkpoint_dir / resume: checkpoints are implemented for one scheduler only")]
    CheckpointUnsupported,
}

impl From<MultiError> for AppError {
    fn from(e: MultiError) -> Self {
        AppError::Config(e.to_string())
    }
}

/// Weight of each column for partitioning: `nnz(x_j) + 1` (the cost of a push, plus one
/// so that empty columns still count).
pub fn column_weights(x: &SparseColumns) -> Vec<u64> {
    x.column_starts
        .windows(2)
        .map(|w| (w[1] - w[0]) as u64 + 1)
        .collect()
}

/// Cuts columns `0..weights.len()` into `schedulers` non-empty contiguous ranges of about
/// equal total weight: boundary `k` is the first column where the prefix weight reaches
/// `k/S` of the total, moved as little as needed to keep every range non-empty. Each
/// range's weight is then within one column's weight of `total / S`.
pub fn partition_columns(
    weights: &[u64],
    schedulers: usize,
) -> Result<Vec<Range<usize>>, MultiError> {
    let d = weights.len();
    if schedulers == 0 {
        return Err(MultiError::NoSchedulers);
    }
    if schedulers > MAX_SCHEDULERS {
        return Err(MultiError::AboveMax { schedulers });
    }
    if schedulers > d {
        return Err(MultiError::TooManySchedulers {
            schedulers,
            features: d,
        });
    }
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut prefix = Vec::with_capacity(d + 1);
    prefix.push(0u128);
    for &w in weights {
        let last = prefix[prefix.len() - 1];
        prefix.push(last + u128::from(w));
    }
    let mut bounds = vec![0usize];
    for k in 1..schedulers {
        let target = total * k as u128 / schedulers as u128;
        // First boundary b (columns 0..b) whose prefix weight reaches the target.
        let b = prefix.partition_point(|&p| p < target);
        let lo = bounds[k - 1] + 1;
        let hi = d - (schedulers - k);
        bounds.push(b.clamp(lo, hi));
    }
    bounds.push(d);
    Ok(bounds.windows(2).map(|w| w[0]..w[1]).collect())
}

/// Which node runs each scheduler index, from every node's `(name, roles)`: exactly one node
/// per index in `0..schedulers`, no index out of range.
pub fn assign_schedulers(
    nodes: &[(String, Vec<String>)],
    schedulers: usize,
) -> Result<Vec<String>, MultiError> {
    if schedulers == 0 {
        return Err(MultiError::NoSchedulers);
    }
    if schedulers > MAX_SCHEDULERS {
        return Err(MultiError::AboveMax { schedulers });
    }
    let mut owner: Vec<Option<String>> = vec![None; schedulers];
    for (node, roles) in nodes {
        for role in roles {
            let Some(index) = scheduler_index_of(role) else {
                continue;
            };
            let Some(slot) = owner.get_mut(index) else {
                return Err(MultiError::IndexOutOfRange {
                    node: node.clone(),
                    role: role.clone(),
                    index,
                    schedulers,
                });
            };
            if let Some(first) = slot {
                return Err(MultiError::Duplicate {
                    index,
                    first: first.clone(),
                    second: node.clone(),
                });
            }
            *slot = Some(node.clone());
        }
    }
    owner
        .into_iter()
        .enumerate()
        .map(|(index, n)| {
            n.ok_or_else(|| MultiError::Missing {
                role: scheduler_role_name(index),
                schedulers,
            })
        })
        .collect()
}

/// The columns `range` of `x` (all rows), renumbered from 0.
pub fn column_range(x: &SparseColumns, range: Range<usize>) -> SparseColumns {
    let lo = x.column_starts[range.start];
    let hi = x.column_starts[range.end];
    SparseColumns {
        n_rows: x.n_rows,
        column_starts: x.column_starts[range.start..=range.end]
            .iter()
            .map(|s| s - lo)
            .collect(),
        row_indices: x.row_indices[lo..hi].to_vec(),
        values: x.values[lo..hi].to_vec(),
    }
}

/// Follower -> lead at the end of an epoch (follower drained and flushed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncReport {
    pub epoch: u64,
    pub scheduler: u32,
    /// Rounds and coordinate updates this scheduler ran so far.
    pub rounds: u64,
    pub updates: u64,
    /// It reached `max_rounds` or diverged.
    pub wants_stop: bool,
    /// Its non-zero coefficients (global indices).
    pub vars: Vec<u32>,
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

/// Lead -> follower: the reply to a [`SyncReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncDecision {
    pub epoch: u64,
    pub stop: bool,
    /// Why the job stops (empty when it goes on).
    pub reason: String,
    /// `||b||_1` and coordinate updates of the whole model at this evaluation.
    pub l1_total: f64,
    pub updates_total: u64,
}

petrel_messages::remote_message!(SyncReport => SyncDecision, "petrel.strads.lasso.sync");

/// An exact evaluation of the whole model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalNumbers {
    pub objective: f64,
    pub kkt_violation: f64,
    pub duality_gap: f64,
    pub l1: f64,
    pub nonzeros: usize,
}

/// Sums the workers' `Evaluate` partials and computes the objective, KKT violation and
/// duality gap of `coefficients` (the whole model). Returns the common applied count too.
pub fn combine_evaluation(
    partials: &[LassoPartial],
    coefficients: &[f32],
    lambda: f32,
) -> Result<(EvalNumbers, u64), String> {
    let d = coefficients.len();
    let mut xtr = vec![0.0f64; d];
    let (mut yy, mut yr, mut rr) = (0.0, 0.0, 0.0);
    let mut applied = Vec::with_capacity(partials.len());
    for p in partials {
        let LassoPartial::Eval {
            x_t_residual,
            yy: a,
            yr: b,
            rr: c,
            applied: n,
        } = p
        else {
            return Err("update answer to an evaluation".into());
        };
        if x_t_residual.len() != d {
            return Err(format!(
                "X^T r of length {} for {d} features",
                x_t_residual.len()
            ));
        }
        xtr.iter_mut().zip(x_t_residual).for_each(|(s, v)| *s += v);
        yy += a;
        yr += b;
        rr += c;
        applied.push(*n);
    }
    let applied = common_applied(applied.into_iter())?;
    let l1: f64 = coefficients.iter().map(|v| f64::from(v.abs())).sum();
    let objective = 0.5 * rr + f64::from(lambda) * l1;
    let s = dual_scale(&xtr, lambda);
    let y_minus_theta = yy - 2.0 * s * yr + s * s * rr;
    let duality_gap = objective - (0.5 * yy - 0.5 * y_minus_theta);
    Ok((
        EvalNumbers {
            objective,
            kkt_violation: kkt_violation(&xtr, coefficients, lambda),
            duality_gap,
            l1,
            nonzeros: coefficients.iter().filter(|v| **v != 0.0).count(),
        },
        applied,
    ))
}

/// What the lead knows of itself at a synchronisation point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeadStatus {
    pub rounds: u64,
    pub updates: u64,
    pub wants_stop: bool,
}

/// Per-scheduler totals in `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerSummary {
    pub scheduler: usize,
    /// Owned columns `first_feature..first_feature + features` (0-based).
    pub first_feature: usize,
    pub features: usize,
    pub rounds: u64,
    pub updates: u64,
}

/// The lead's synchronisation logic: collects one report per follower and epoch, assembles
/// the model, and decides whether to stop.
#[derive(Debug, Clone)]
pub struct SyncCore {
    ranges: Vec<Range<usize>>,
    epoch: u64,
    reports: Vec<Option<SyncReport>>,
    /// Last report of every follower (kept across epochs for the summary).
    last: Vec<Option<SyncReport>>,
}

impl SyncCore {
    pub fn new(ranges: Vec<Range<usize>>) -> Self {
        let s = ranges.len();
        SyncCore {
            ranges,
            epoch: 0,
            reports: vec![None; s],
            last: vec![None; s],
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn schedulers(&self) -> usize {
        self.ranges.len()
    }

    /// Accepts a follower's report for the current epoch.
    pub fn add(&mut self, r: SyncReport) -> Result<(), String> {
        let s = r.scheduler as usize;
        if s == 0 || s >= self.ranges.len() {
            return Err(format!(
                "report from scheduler {s}: followers are 1..{}",
                self.ranges.len()
            ));
        }
        if r.epoch != self.epoch {
            return Err(format!(
                "scheduler {s} reports epoch {} during epoch {}",
                r.epoch, self.epoch
            ));
        }
        if self.reports[s].is_some() {
            return Err(format!(
                "scheduler {s} reported twice in epoch {}",
                self.epoch
            ));
        }
        if r.vars.len() != r.values.len() {
            return Err(format!(
                "scheduler {s}: {} vars but {} values",
                r.vars.len(),
                r.values.len()
            ));
        }
        let range = &self.ranges[s];
        if let Some(&bad) = r.vars.iter().find(|&&j| !range.contains(&(j as usize))) {
            return Err(format!(
                "scheduler {s} reports coordinate {bad} outside its columns {range:?}"
            ));
        }
        self.reports[s] = Some(r);
        Ok(())
    }

    /// Every follower reported in this epoch.
    pub fn complete(&self) -> bool {
        self.reports.iter().skip(1).all(Option::is_some)
    }

    /// Writes the followers' coefficients into `coefficients` (their ranges are zeroed
    /// first; only non-zeros travel).
    pub fn merge(&self, coefficients: &mut [f32]) {
        for (range, report) in self.ranges.iter().zip(&self.reports).skip(1) {
            coefficients[range.clone()].fill(0.0);
            if let Some(r) = report {
                for (&j, &v) in r.vars.iter().zip(&r.values) {
                    coefficients[j as usize] = v;
                }
            }
        }
    }

    /// The stop decision after the evaluation of this epoch; moves to the next epoch.
    pub fn decide(
        &mut self,
        lead: LeadStatus,
        eval: &EvalNumbers,
        gap_tolerance: Option<f64>,
        target_objective: Option<f64>,
    ) -> SyncDecision {
        let followers = || self.reports.iter().skip(1).flatten();
        let updates_total = lead.updates + followers().map(|r| r.updates).sum::<u64>();
        let mut reasons = Vec::new();
        if !eval.objective.is_finite() {
            reasons.push("objective is not finite (diverged)".to_string());
        }
        if let Some(tol) = gap_tolerance
            && eval.duality_gap <= tol * eval.objective.abs().max(f64::MIN_POSITIVE)
        {
            reasons.push(format!(
                "duality gap {:.3e} within tolerance",
                eval.duality_gap
            ));
        }
        if let Some(target) = target_objective
            && eval.objective <= target
        {
            reasons.push(format!("objective reached the target {target}"));
        }
        if lead.wants_stop {
            reasons.push("scheduler 0 reached max_rounds or diverged".into());
        }
        for r in followers().filter(|r| r.wants_stop) {
            reasons.push(format!(
                "scheduler {} reached max_rounds or diverged",
                r.scheduler
            ));
        }
        let decision = SyncDecision {
            epoch: self.epoch,
            stop: !reasons.is_empty(),
            reason: reasons.join("; "),
            l1_total: eval.l1,
            updates_total,
        };
        for (last, r) in self.last.iter_mut().zip(self.reports.iter_mut()) {
            if let Some(r) = r.take() {
                *last = Some(r);
            }
        }
        self.epoch += 1;
        decision
    }

    /// Per-scheduler totals (the lead's from `lead`, the others' from their last report).
    pub fn summary(&self, lead: LeadStatus) -> Vec<SchedulerSummary> {
        self.ranges
            .iter()
            .enumerate()
            .map(|(s, range)| {
                let (rounds, updates) = if s == 0 {
                    (lead.rounds, lead.updates)
                } else {
                    self.last[s]
                        .as_ref()
                        .map(|r| (r.rounds, r.updates))
                        .unwrap_or((0, 0))
                };
                SchedulerSummary {
                    scheduler: s,
                    first_feature: range.start,
                    features: range.len(),
                    rounds,
                    updates,
                }
            })
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Update rounds until the epoch's quota (or `max_rounds`) is reached.
    Updates,
    /// Quota reached: wait for the in-flight rounds, then flush (follower) or stop (lead).
    Draining,
    /// Lead: one `Evaluate` round of the assembled model.
    Evaluate,
    /// The segment's last round is dispatched: `Done`.
    Idle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    Flush,
    Evaluate,
}

/// One scheduler of a multi-scheduler job: a [`LassoScheduling`] over its own columns
/// (local indices `0..range.len()`), with the epoch logic of the module docs. Run it in
/// segments ([`Self::begin_segment`] / [`Self::begin_evaluation`], then `run_scheduler_from`
/// until `Done`).
pub struct SliceScheduling {
    index: u32,
    range: Range<usize>,
    n_features: usize,
    inner: LassoScheduling,
    lambda: f32,
    eval_every: u64,
    max_rounds: u64,
    phase: Phase,
    segment_rounds: u64,
    update_rounds: u64,
    rounds: u64,
    special: VecDeque<(u64, Special)>,
    others_l1: f64,
    others_updates: u64,
    time_offset: Duration,
    /// Lead: the assembled model evaluated by the next `Evaluate` round.
    assembled: Vec<f32>,
    evaluation: Option<(u64, EvalNumbers, Duration)>,
}

impl SliceScheduling {
    /// Scheduler `index` owning columns `range` of `x`; `lambda` is the job's (global) one.
    pub fn new(
        x: &SparseColumns,
        y: &[f32],
        job: &LassoJob,
        workers: usize,
        index: usize,
        range: Range<usize>,
        lambda: f32,
    ) -> Result<Self, AppError> {
        if range.is_empty() || range.end > x.n_columns() {
            return Err(AppError::Config(format!(
                "scheduler {index}: columns {range:?} of {}",
                x.n_columns()
            )));
        }
        let local_job = LassoJob {
            lambda: Some(lambda),
            eval_every: 0,
            max_rounds: u64::MAX,
            gap_tolerance: None,
            target_objective: None,
            out_dir: None,
            seed: job.seed.wrapping_add(index as u64),
            schedulers: 1,
            ..job.clone()
        };
        let inner = LassoScheduling::new(&column_range(x, range.clone()), y, &local_job, workers)?;
        Ok(SliceScheduling {
            index: index as u32,
            range,
            n_features: x.n_columns(),
            inner,
            lambda,
            eval_every: job.eval_every,
            max_rounds: job.max_rounds,
            phase: Phase::Updates,
            segment_rounds: 0,
            update_rounds: 0,
            rounds: 0,
            special: VecDeque::new(),
            others_l1: 0.0,
            others_updates: 0,
            time_offset: Duration::ZERO,
            assembled: Vec::new(),
            evaluation: None,
        })
    }

    pub fn index(&self) -> usize {
        self.index as usize
    }

    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    fn is_lead(&self) -> bool {
        self.index == 0
    }

    /// Starts an epoch of update rounds.
    pub fn begin_segment(&mut self) {
        self.phase = Phase::Updates;
        self.segment_rounds = 0;
    }

    /// Lead: the next segment is one `Evaluate` round of `coefficients` (the whole model).
    pub fn begin_evaluation(&mut self, coefficients: Vec<f32>) {
        self.assembled = coefficients;
        self.evaluation = None;
        self.phase = Phase::Evaluate;
    }

    /// Lead: the whole model of the last evaluation (what the stop decision is about).
    pub fn evaluated_model(&self) -> &[f32] {
        &self.assembled
    }

    /// Added to the elapsed time the runtime passes to `pull` (which restarts per segment).
    pub fn set_time_offset(&mut self, offset: Duration) {
        self.time_offset = offset;
    }

    /// The result of the last `Evaluate` round: `(round, numbers, elapsed)`.
    pub fn take_evaluation(&mut self) -> Option<(u64, EvalNumbers, Duration)> {
        self.evaluation.take()
    }

    /// Own coefficients written into the global vector.
    pub fn fill(&self, coefficients: &mut [f32]) {
        coefficients[self.range.clone()].copy_from_slice(self.inner.coefficients());
    }

    pub fn own_l1(&self) -> f64 {
        self.inner
            .coefficients()
            .iter()
            .map(|v| f64::from(v.abs()))
            .sum()
    }

    pub fn updates(&self) -> u64 {
        self.inner.updates
    }

    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// `max_rounds` update rounds done, or the local objective diverged.
    pub fn wants_stop(&self) -> bool {
        self.update_rounds >= self.max_rounds || self.inner.stopping
    }

    pub fn status(&self) -> LeadStatus {
        LeadStatus {
            rounds: self.rounds,
            updates: self.updates(),
            wants_stop: self.wants_stop(),
        }
    }

    /// The report a follower sends at the end of epoch `epoch`.
    pub fn report(&self, epoch: u64) -> SyncReport {
        let (vars, values) = self
            .inner
            .coefficients()
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0.0)
            .map(|(k, &v)| ((self.range.start + k) as u32, v))
            .unzip();
        SyncReport {
            epoch,
            scheduler: self.index,
            rounds: self.rounds,
            updates: self.updates(),
            wants_stop: self.wants_stop(),
            vars,
            values,
        }
    }

    /// Takes in the global L1 norm and update count of a decision (for the trace).
    pub fn apply_decision(&mut self, d: &SyncDecision) {
        self.others_l1 = (d.l1_total - self.own_l1()).max(0.0);
        self.others_updates = d.updates_total.saturating_sub(self.updates());
    }

    /// The scheduler's (lead's: the job's) per-round objective trace and metrics.
    pub fn metrics(&self) -> &LassoMetrics {
        self.inner.metrics()
    }

    fn special_round(&mut self, round: u64, kind: Special) -> Step<LassoTask> {
        self.special.push_back((round, kind));
        self.rounds += 1;
        self.phase = Phase::Idle;
        let task = match kind {
            Special::Flush => LassoTask::Update {
                vars: Vec::new(),
                values: Vec::new(),
            },
            Special::Evaluate => LassoTask::Evaluate,
        };
        Step::Run(Plan::All(task))
    }
}

impl Schedule<LassoApp> for SliceScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LassoTask> {
        loop {
            match self.phase {
                Phase::Updates => {
                    let quota = self.eval_every > 0 && self.segment_rounds >= self.eval_every;
                    if quota || self.wants_stop() {
                        self.phase = Phase::Draining;
                        continue;
                    }
                    match self.inner.schedule(round, in_flight) {
                        Step::Run(Plan::All(LassoTask::Update { vars, values })) => {
                            self.segment_rounds += 1;
                            self.update_rounds += 1;
                            self.rounds += 1;
                            let offset = self.range.start as u32;
                            let vars = vars.into_iter().map(|j| j + offset).collect();
                            return Step::Run(Plan::All(LassoTask::Update { vars, values }));
                        }
                        Step::Wait => return Step::Wait,
                        other => {
                            // The local scheduler has no stop rule of its own (no eval,
                            // no max_rounds); it only gets here when it found nothing to
                            // schedule. Undo a local evaluation round and end the epoch.
                            if matches!(other, Step::Run(_)) {
                                self.inner.in_flight.pop_back();
                            }
                            tracing::warn!(
                                scheduler = self.index,
                                round,
                                "local scheduler stopped: ending the epoch"
                            );
                            self.inner.stopping = true;
                            self.phase = Phase::Draining;
                        }
                    }
                }
                Phase::Draining => {
                    if in_flight > 0 {
                        return Step::Wait;
                    }
                    if self.is_lead() {
                        self.phase = Phase::Idle;
                        return Step::Done;
                    }
                    return self.special_round(round, Special::Flush);
                }
                Phase::Evaluate => {
                    if in_flight > 0 {
                        return Step::Wait;
                    }
                    return self.special_round(round, Special::Evaluate);
                }
                Phase::Idle => return Step::Done,
            }
        }
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LassoPartial>,
        elapsed: Duration,
    ) -> Result<LassoCommit, String> {
        let elapsed = elapsed + self.time_offset;
        if let Some(&(r, kind)) = self.special.front()
            && r == round
        {
            self.special.pop_front();
            match kind {
                Special::Flush => {
                    let mut applied = Vec::with_capacity(partials.len());
                    for p in &partials {
                        match p {
                            LassoPartial::Z { z, applied: a, .. } if z.is_empty() => {
                                applied.push(*a)
                            }
                            _ => return Err(format!("round {round}: bad answer to a flush")),
                        }
                    }
                    common_applied(applied.into_iter())?;
                }
                Special::Evaluate => {
                    if self.assembled.len() != self.n_features {
                        return Err(format!(
                            "round {round}: evaluation of {} coefficients for {} features",
                            self.assembled.len(),
                            self.n_features
                        ));
                    }
                    let (numbers, _) = combine_evaluation(&partials, &self.assembled, self.lambda)
                        .map_err(|e| format!("round {round}: {e}"))?;
                    self.evaluation = Some((round, numbers, elapsed));
                }
            }
            // Keep the local per-commit bookkeeping aligned with the workers' count of
            // this scheduler's commits.
            self.inner.after_commit();
            return Ok(LassoCommit {
                vars: Vec::new(),
                deltas: Vec::new(),
            });
        }
        let traced = self.inner.metrics.objective.len();
        let mut commit = self.inner.pull(round, partials, elapsed)?;
        if self.inner.metrics.objective.len() > traced
            && let Some(point) = self.inner.metrics.objective.last_mut()
        {
            point.objective += f64::from(self.lambda) * self.others_l1;
            point.updates += self.others_updates;
        }
        let offset = self.range.start as u32;
        commit.vars.iter_mut().for_each(|j| *j += offset);
        Ok(commit)
    }
}

/// `metrics.json` of a multi-scheduler job: the single-scheduler fields (whole model;
/// `rounds` and `updates` are summed over the schedulers, every evaluation's `updates` is
/// the global count, the `objective` trace is the lead's) plus the partition and the
/// per-scheduler totals. It reads as a [`LassoMetrics`] too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiLassoMetrics {
    #[serde(flatten)]
    pub base: LassoMetrics,
    pub schedulers: usize,
    pub per_scheduler: Vec<SchedulerSummary>,
}

/// The lead's bookkeeping across epochs (shared by the actor run and the local driver).
struct LeadBook {
    core: SyncCore,
    evaluations: Vec<Evaluation>,
    job: LassoJob,
    workers: usize,
    n_samples: usize,
}

impl LeadBook {
    /// The model to evaluate: the lead's own slice plus the reports.
    fn assemble(&self, lead: &SliceScheduling) -> Vec<f32> {
        let mut b = vec![0.0f32; lead.n_features];
        lead.fill(&mut b);
        self.core.merge(&mut b);
        b
    }

    fn decide(&mut self, lead: &mut SliceScheduling) -> Result<SyncDecision, String> {
        let (round, eval, elapsed) = lead
            .take_evaluation()
            .ok_or("the evaluation round produced no result")?;
        let d = self.core.decide(
            lead.status(),
            &eval,
            self.job.gap_tolerance,
            self.job.target_objective,
        );
        tracing::info!(
            epoch = d.epoch,
            round,
            updates = d.updates_total,
            objective = format!("{:.6}", eval.objective),
            kkt = format!("{:.3e}", eval.kkt_violation),
            gap = format!("{:.3e}", eval.duality_gap),
            nonzeros = eval.nonzeros,
            "lasso evaluation (all schedulers)"
        );
        self.evaluations.push(Evaluation {
            round,
            updates: d.updates_total,
            elapsed_s: elapsed.as_secs_f64(),
            objective: eval.objective,
            kkt_violation: eval.kkt_violation,
            duality_gap: eval.duality_gap,
            nonzeros: eval.nonzeros,
        });
        lead.apply_decision(&d);
        Ok(d)
    }

    fn outcome(
        &self,
        lead: &SliceScheduling,
        coefficients: Vec<f32>,
        elapsed: Duration,
    ) -> (Vec<f32>, MultiLassoMetrics) {
        let summary = self.core.summary(lead.status());
        let last = self.evaluations.last();
        let nan = f64::NAN;
        let target = self.job.target_objective;
        let reached = target.and_then(|t| self.evaluations.iter().find(|e| e.objective <= t));
        let base = LassoMetrics {
            mode: self.job.mode.clone(),
            lambda: lead.lambda,
            n_samples: self.n_samples,
            n_features: lead.n_features,
            workers: self.workers,
            block_size: self.job.block_size,
            rho: self.job.rho,
            depth: self.job.depth,
            rounds: summary.iter().map(|s| s.rounds).sum(),
            updates: summary.iter().map(|s| s.updates).sum(),
            elapsed_s: elapsed.as_secs_f64(),
            final_objective: last.map_or(nan, |e| e.objective),
            final_kkt_violation: last.map_or(nan, |e| e.kkt_violation),
            final_duality_gap: last.map_or(nan, |e| e.duality_gap),
            target_objective: target,
            target_updates: reached.map(|e| e.updates),
            target_s: reached.map(|e| e.elapsed_s),
            objective: lead.metrics().objective.clone(),
            evaluations: self.evaluations.clone(),
            checkpoints: Vec::new(),
            resumed_from_round: None,
        };
        (
            coefficients,
            MultiLassoMetrics {
                base,
                schedulers: self.core.schedulers(),
                per_scheduler: summary,
            },
        )
    }
}

/// The partition and the scheduler halves of a job on `(x, y)`.
fn build_schedulers(
    x: &SparseColumns,
    y: &[f32],
    job: &LassoJob,
    workers: usize,
    indices: &[usize],
) -> Result<(Vec<Range<usize>>, Vec<SliceScheduling>), AppError> {
    let ranges = partition_columns(&column_weights(x), job.schedulers)?;
    let lambda = job.resolve_lambda(x, y);
    let apps = indices
        .iter()
        .map(|&s| {
            let range = ranges.get(s).cloned().ok_or_else(|| {
                AppError::Config(format!(
                    "scheduler index {s} out of range (schedulers = {})",
                    job.schedulers
                ))
            })?;
            SliceScheduling::new(x, y, job, workers, s, range, lambda)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ranges, apps))
}

/// Runs one segment of scheduler `s` against in-memory workers, in the message order of
/// `run_scheduler_from`. Returns the next round number.
fn drive_segment(
    app: &mut SliceScheduling,
    workers: &mut [LassoWorker],
    depth: usize,
    first_round: u64,
) -> Result<u64, AppError> {
    use crate::shells::{PipelineAction, PipelineCore};
    let s = app.index;
    let mut core = PipelineCore::starting_at(depth, first_round);
    let mut pending: VecDeque<(u64, Vec<LassoPartial>)> = VecDeque::new();
    let mut waiting = false;
    let err = |e: String| AppError::Config(format!("scheduler {s}: {e}"));
    loop {
        let action = if core.must_await(waiting) {
            PipelineAction::AwaitOldest
        } else {
            core.next_action()
        };
        match action {
            PipelineAction::Schedule(r) => {
                let step = app.schedule(r, core.in_flight());
                waiting = matches!(step, Step::Wait);
                core.scheduled(&step).map_err(err)?;
                if let Step::Run(Plan::All(task)) = step {
                    let parts = workers
                        .iter_mut()
                        .map(|w| w.push_from(s, r, &task))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(err)?;
                    pending.push_back((r, parts));
                }
            }
            PipelineAction::AwaitOldest => {
                waiting = false;
                let (r, parts) = pending
                    .pop_front()
                    .ok_or_else(|| err("pipeline empty".into()))?;
                let c = app.pull(r, parts, Duration::ZERO).map_err(err)?;
                core.committed(r).map_err(err)?;
                for w in workers.iter_mut() {
                    w.commit_from(s, r, &c).map_err(err)?;
                }
            }
            PipelineAction::Stop => return Ok(core.next_round()),
        }
    }
}

/// A multi-scheduler job with every scheduler and worker in this thread and no actors:
/// the schedulers' epochs run one after the other (scheduler 0's, then 1's, ...), then the
/// lead evaluates. A deterministic reference for the distributed run's logic.
pub fn run_multi_without_actors(
    job: &LassoJob,
    workers: usize,
) -> Result<(Vec<f32>, MultiLassoMetrics), AppError> {
    let (x, y) = job.load()?;
    let all: Vec<usize> = (0..job.schedulers).collect();
    let (ranges, mut apps) = build_schedulers(&x, &y, job, workers, &all)?;
    let mut ws = crate::core::split_evenly(x.n_rows, workers)
        .into_iter()
        .map(|r| {
            LassoWorkerState::new(x.row_block(r.clone()), y[r].to_vec())
                .map(|st| LassoWorker::with_schedulers(st, job.schedulers))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut book = LeadBook {
        core: SyncCore::new(ranges),
        evaluations: Vec::new(),
        job: job.clone(),
        workers,
        n_samples: x.n_rows,
    };
    let mut next = vec![0u64; apps.len()];
    loop {
        for (app, next) in apps.iter_mut().zip(next.iter_mut()) {
            app.begin_segment();
            *next = drive_segment(app, &mut ws, job.depth, *next)?;
        }
        let epoch = book.core.epoch();
        for app in &apps[1..] {
            book.core.add(app.report(epoch)).map_err(AppError::Config)?;
        }
        let model = book.assemble(&apps[0]);
        apps[0].begin_evaluation(model);
        next[0] = drive_segment(&mut apps[0], &mut ws, job.depth, next[0])?;
        let d = book.decide(&mut apps[0]).map_err(AppError::Config)?;
        for app in &mut apps[1..] {
            app.apply_decision(&d);
        }
        if d.stop {
            let model = apps[0].evaluated_model().to_vec();
            return Ok(book.outcome(&apps[0], model, Duration::ZERO));
        }
    }
}

/// Receives the followers' reports on the lead's node and hands them to the lead's loop;
/// the reply is sent when the lead has decided.
struct SyncInbox {
    tx: mpsc::UnboundedSender<(SyncReport, oneshot::Sender<SyncDecision>)>,
}

impl Actor for SyncInbox {
    type Context = Context<Self>;
}

impl Handler<Msg<SyncReport>> for SyncInbox {
    type Result = ResponseFuture<Result<SyncDecision, HandlerError>>;

    fn handle(&mut self, msg: Msg<SyncReport>, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let sent = self.tx.unbounded_send((msg.body, tx));
        Box::pin(async move {
            sent.map_err(|_| HandlerError::new("lead scheduler has stopped"))?;
            rx.await
                .map_err(|_| HandlerError::new("lead scheduler stopped before deciding"))
        })
    }
}

/// How long a scheduler may wait for the others at a synchronisation point: one epoch of
/// rounds at the per-round timeout, plus slack. A dead peer is noticed sooner (fail-fast).
fn sync_timeout(job: &LassoJob) -> Duration {
    let rounds = if job.eval_every > 0 {
        job.eval_every
    } else {
        job.max_rounds
    };
    Duration::from_secs(job.timeout_s.max(1))
        .saturating_mul(u32::try_from(rounds.saturating_add(4)).unwrap_or(u32::MAX))
        .min(Duration::from_secs(24 * 3600))
}

/// Entry point of role [`scheduler_role_name`]`(index)`. With one scheduler, scheduler 0 is
/// the single-scheduler role; otherwise the node's first scheduler role runs every
/// scheduler the node claims, and the others return at once.
pub(super) async fn scheduler_entry(ctx: NodeContext, index: usize) -> Result<(), String> {
    let job = job_of(&ctx)?;
    let nodes: Vec<(String, Vec<String>)> = ctx
        .settings
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.roles.clone()))
        .collect();
    let owners = assign_schedulers(&nodes, job.schedulers).map_err(|e| e.to_string())?;
    if job.schedulers == 1 {
        return super::scheduler_role(ctx).await;
    }
    if job.checkpoint_dir.is_some() || job.resume {
        return Err(MultiError::CheckpointUnsupported.to_string());
    }
    let mine: Vec<usize> = (0..owners.len())
        .filter(|&s| owners[s] == ctx.spec.name)
        .collect();
    if mine.first() != Some(&index) {
        return Ok(());
    }
    run_node_schedulers(ctx, job, owners, mine).await
}

async fn run_node_schedulers(
    ctx: NodeContext,
    job: LassoJob,
    owners: Vec<String>,
    mine: Vec<usize>,
) -> Result<(), String> {
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    if workers.is_empty() {
        return Err(format!("no node runs {WORKER_ROLE}"));
    }
    let n_workers = workers.len();
    let loader = job.clone();
    let indices = mine.clone();
    let (n_samples, ranges, apps) = crate::kit::off_loop(move || {
        let (x, y) = loader.load()?;
        let (ranges, apps) = build_schedulers(&x, &y, &loader, n_workers, &indices)?;
        Ok((x.n_rows, ranges, apps))
    })
    .await?;
    for app in &apps {
        tracing::info!(
            scheduler = app.index(),
            columns = ?app.range(),
            workers = n_workers,
            "lasso scheduler ready"
        );
    }
    let inbox = if mine.contains(&0) {
        let (tx, rx) = mpsc::unbounded();
        let addr = SyncInbox { tx }.start();
        ctx.node
            .register(SYNC_ACTOR, addr)
            .map_err(|e| e.to_string())?
            .accept::<SyncReport>();
        Some(rx)
    } else {
        None
    };
    ctx.barrier(READY_BARRIER)
        .await
        .map_err(|e| e.to_string())?;
    let set = WorkerSet::<LassoApp>::resolve(&ctx.node, &workers, WORKER_ACTOR)
        .map_err(|e| e.to_string())?;
    let mut inbox = inbox;
    let set = &set;
    let runs = apps.into_iter().map(|app| {
        let job = job.clone();
        let ctx = ctx.clone();
        let lead_node = owners[0].clone();
        let rx = if app.index() == 0 { inbox.take() } else { None };
        let ranges = ranges.clone();
        async move {
            let s = app.index();
            let r = match rx {
                Some(rx) => lead_loop(app, set, job, rx, ranges, n_workers, n_samples).await,
                None => follower_loop(app, set, job, &ctx, &lead_node).await,
            };
            r.map_err(|e| format!("scheduler {s}: {e}"))
        }
    });
    futures::future::join_all(runs)
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()?;
    Ok(())
}

fn options(job: &LassoJob, scheduler: usize) -> SchedulerOptions {
    SchedulerOptions {
        depth: job.depth.max(1),
        scheduler: scheduler as u32,
        timeout: Duration::from_secs(job.timeout_s.max(1)),
        priority: Priority::NORMAL,
    }
}

async fn lead_loop(
    mut app: SliceScheduling,
    set: &WorkerSet<LassoApp>,
    job: LassoJob,
    mut rx: mpsc::UnboundedReceiver<(SyncReport, oneshot::Sender<SyncDecision>)>,
    ranges: Vec<Range<usize>>,
    workers: usize,
    n_samples: usize,
) -> Result<(), String> {
    let opts = options(&job, 0);
    let started = Instant::now();
    let wait = sync_timeout(&job);
    let mut book = LeadBook {
        core: SyncCore::new(ranges),
        evaluations: Vec::new(),
        job: job.clone(),
        workers,
        n_samples,
    };
    let mut next = 0u64;
    loop {
        app.begin_segment();
        app.set_time_offset(started.elapsed());
        next = run_scheduler_from(&mut app, set, &opts, next)
            .await
            .map_err(|e| e.to_string())?
            .rounds;
        let mut replies = Vec::new();
        while !book.core.complete() {
            let got = tokio::time::timeout(wait, rx.next())
                .await
                .map_err(|_| {
                    format!(
                        "no report from the other schedulers within {wait:?} (epoch {})",
                        book.core.epoch()
                    )
                })?
                .ok_or("report channel closed")?;
            let (report, reply) = got;
            book.core.add(report)?;
            replies.push(reply);
        }
        let model = book.assemble(&app);
        app.begin_evaluation(model);
        app.set_time_offset(started.elapsed());
        next = run_scheduler_from(&mut app, set, &opts, next)
            .await
            .map_err(|e| e.to_string())?
            .rounds;
        let d = book.decide(&mut app)?;
        for reply in replies {
            // A follower that stopped waiting fails on its own; nothing to do here.
            let _ = reply.send(d.clone());
        }
        if d.stop {
            tracing::info!(reason = %d.reason, updates = d.updates_total, "lasso finished");
            let model = app.evaluated_model().to_vec();
            let (coefficients, metrics) = book.outcome(&app, model, started.elapsed());
            if let Some(dir) = &job.out_dir {
                let outcome = LassoOutcome {
                    coefficients,
                    metrics: metrics.base.clone(),
                };
                outcome.write(dir).map_err(|e| e.to_string())?;
                let json = serde_json::to_vec_pretty(&metrics).map_err(|e| e.to_string())?;
                crate::kit::write_output(dir, "metrics.json", &json).map_err(|e| e.to_string())?;
                tracing::info!(dir = %dir.display(), "wrote coefficients.tsv and metrics.json");
            }
            return Ok(());
        }
    }
}

async fn follower_loop(
    mut app: SliceScheduling,
    set: &WorkerSet<LassoApp>,
    job: LassoJob,
    ctx: &NodeContext,
    lead_node: &str,
) -> Result<(), String> {
    let opts = options(&job, app.index());
    let lead = ctx
        .node
        .actor_at::<SyncReport>(lead_node, SYNC_ACTOR)
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let wait = sync_timeout(&job);
    let mut next = 0u64;
    let mut epoch = 0u64;
    loop {
        app.begin_segment();
        app.set_time_offset(started.elapsed());
        next = run_scheduler_from(&mut app, set, &opts, next)
            .await
            .map_err(|e| e.to_string())?
            .rounds;
        let d = lead
            .ask(app.report(epoch), Priority::NORMAL, wait)
            .await
            .map_err(|e| format!("synchronising with the lead on {lead_node}: {e}"))?;
        if d.epoch != epoch {
            return Err(format!("lead answered epoch {} for {epoch}", d.epoch));
        }
        app.apply_decision(&d);
        if d.stop {
            tracing::info!(
                scheduler = app.index(),
                rounds = app.rounds(),
                updates = app.updates(),
                "lasso scheduler finished"
            );
            return Ok(());
        }
        epoch += 1;
    }
}

#[cfg(test)]
mod tests;
