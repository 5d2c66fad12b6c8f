//! One scheduler of a multi-scheduler job: a [`LassoScheduling`] over its own columns,
//! run in epochs (update rounds, drain, flush or evaluation).

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use super::sync::{LeadStatus, SyncDecision, SyncReport};
use crate::apps::lasso::config::LassoSettings;
use crate::apps::lasso::metrics::LassoMetrics;
use crate::apps::lasso::metrics::{EvalNumbers, combine_evaluation, common_applied};
use crate::apps::lasso::scheduling::LassoScheduling;
use crate::apps::lasso::wire::{LassoApp, LassoCommit, LassoPartial, LassoTask};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Schedule, Step};
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;

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
    pub(super) n_features: usize,
    inner: LassoScheduling,
    pub(super) lambda: f32,
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
        job: &LassoSettings,
        workers: usize,
        index: usize,
        range: Range<usize>,
        lambda: f32,
    ) -> Result<Self, StradsError> {
        if range.is_empty() || range.end > x.n_columns() {
            return Err(StradsModelError::InvalidConfig(format!(
                "scheduler {index}: columns {range:?} of {}",
                x.n_columns()
            ))
            .into());
        }
        let job = &job.with_multi_defaults();
        let local_job = LassoSettings {
            lambda: Some(lambda),
            // The slice decides when to evaluate (at epoch ends), never the inner half.
            eval_every: 0,
            eval_work_ratio: 0.0,
            max_rounds: u64::MAX,
            gap_tolerance: None,
            target_objective: None,
            out_dir: None,
            // A slice holds some of the coefficients: no held-out figures of its own.
            test_data: None,
            seed: job.seed.wrapping_add(index as u64),
            schedulers: 1,
            ..job.clone()
        };
        let inner = LassoScheduling::new(&x.columns(range.clone()), y, &local_job, workers)?;
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

    /// This scheduler's index.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The columns it owns.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
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

    /// `||b||_1` of its own coefficients.
    pub fn own_l1(&self) -> f64 {
        self.inner
            .coefficients()
            .iter()
            .map(|v| f64::from(v.abs()))
            .sum()
    }

    /// Coordinate updates it ran.
    pub fn updates(&self) -> u64 {
        self.inner.s.updates
    }

    /// Rounds it ran.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// `max_rounds` update rounds done, or the local objective diverged.
    pub fn wants_stop(&self) -> bool {
        self.update_rounds >= self.max_rounds || self.inner.s.stopping
    }

    /// What the lead reports of itself.
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
                            self.inner.s.stopping = true;
                            self.phase = Phase::Draining;
                        }
                    }
                }
                Phase::Draining => {
                    if in_flight > 0 {
                        return Step::Wait;
                    }
                    if self.index == 0 {
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
    ) -> Result<LassoCommit, StradsModelError> {
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
                            _ => {
                                return Err(StradsModelError::protocol(format!(
                                    "round {round}: bad answer to a flush"
                                )));
                            }
                        }
                    }
                    common_applied(applied.into_iter())?;
                }
                Special::Evaluate => {
                    if self.assembled.len() != self.n_features {
                        return Err(StradsModelError::DimensionMismatch(format!(
                            "round {round}: evaluation of {} coefficients for {} features",
                            self.assembled.len(),
                            self.n_features
                        )));
                    }
                    let (numbers, _) = combine_evaluation(&partials, &self.assembled, self.lambda)?;
                    self.evaluation = Some((round, numbers, elapsed));
                }
            }
            // Keep the local per-commit bookkeeping aligned with the workers' count of
            // this scheduler's commits.
            self.inner.after_commit();
            return Ok(LassoCommit::default());
        }
        let traced = self.inner.s.metrics.objective.len();
        let mut commit = self.inner.pull(round, partials, elapsed)?;
        if self.inner.s.metrics.objective.len() > traced
            && let Some(point) = self.inner.s.metrics.objective.last_mut()
        {
            point.objective += f64::from(self.lambda) * self.others_l1;
            point.updates += self.others_updates;
        }
        let offset = self.range.start as u32;
        commit.vars.iter_mut().for_each(|j| *j += offset);
        Ok(commit)
    }
}
