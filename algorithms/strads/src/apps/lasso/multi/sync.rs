//! The lead's synchronisation logic (sans-I/O): the followers' reports, the assembled
//! model, the exact evaluation of the whole model and the stop rule.

use std::ops::Range;
use std::time::Duration;

use super::slice::SliceScheduling;
use crate::apps::lasso::config::{LassoSettings, column_correlation};
use crate::apps::lasso::heldout::LinearHeldout;
use crate::apps::lasso::metrics::{EvalNumbers, Evaluation, LassoMetrics, combine_evaluation};
use crate::apps::lasso::wire::LassoPartial;
use crate::core::StradsModelError;
use crate::error::StradsError;
use petrel_messages::tensor::f32_bytes;
use petrel_ml::data::SparseColumns;
use petrel_ml::model::LinearTask;
use serde::{Deserialize, Serialize};

/// Follower -> lead at the end of an epoch (follower drained and flushed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncReport {
    /// The epoch that ended.
    pub epoch: u64,
    /// The reporting scheduler.
    pub scheduler: u32,
    /// Rounds this scheduler ran so far.
    pub rounds: u64,
    /// Coordinate updates this scheduler ran so far.
    pub updates: u64,
    /// It reached `max_rounds` or diverged.
    pub wants_stop: bool,
    /// Its non-zero coefficients (global indices).
    #[serde(with = "petrel_messages::tensor::u32_bytes")]
    pub vars: Vec<u32>,
    /// Their values.
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

/// Lead -> follower: the reply to a [`SyncReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncDecision {
    /// The epoch decided.
    pub epoch: u64,
    /// The job stops.
    pub stop: bool,
    /// Why the job stops (empty when it goes on).
    pub reason: String,
    /// `||b||_1` of the whole model at this evaluation.
    pub l1_total: f64,
    /// Coordinate updates of the whole model so far.
    pub updates_total: u64,
}

petrel_messages::remote_message!(SyncReport => SyncDecision, "petrel.strads.lasso.sync");

/// What the lead knows of itself at a synchronisation point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeadStatus {
    /// Rounds the lead ran.
    pub rounds: u64,
    /// Coordinate updates the lead ran.
    pub updates: u64,
    /// The lead reached `max_rounds` or diverged.
    pub wants_stop: bool,
}

/// Per-scheduler totals in `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerSummary {
    /// The scheduler's index.
    pub scheduler: usize,
    /// Owned columns `first_feature..first_feature + features` (0-based).
    pub first_feature: usize,
    /// Columns owned.
    pub features: usize,
    /// Rounds run.
    pub rounds: u64,
    /// Coordinate updates run.
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
    /// The lead of schedulers owning `ranges` (index = scheduler).
    pub fn new(ranges: Vec<Range<usize>>) -> Self {
        let s = ranges.len();
        SyncCore {
            ranges,
            epoch: 0,
            reports: vec![None; s],
            last: vec![None; s],
        }
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Schedulers in the job.
    pub fn schedulers(&self) -> usize {
        self.ranges.len()
    }

    /// Accepts a follower's report for the current epoch.
    pub fn add(&mut self, r: SyncReport) -> Result<(), StradsError> {
        let s = r.scheduler as usize;
        let (n, epoch) = (self.ranges.len(), self.epoch);
        let fail = |what: String| Err(StradsError::SchedulerSync(what));
        if s == 0 || s >= n {
            return fail(format!("report from scheduler {s}: followers are 1..{n}"));
        }
        if r.epoch != epoch {
            let reported = r.epoch;
            return fail(format!(
                "scheduler {s} reports epoch {reported} during epoch {epoch}"
            ));
        }
        if self.reports[s].is_some() {
            return fail(format!("scheduler {s} reported twice in epoch {epoch}"));
        }
        if r.vars.len() != r.values.len() {
            let (vars, values) = (r.vars.len(), r.values.len());
            return fail(format!("scheduler {s}: {vars} vars but {values} values"));
        }
        let range = &self.ranges[s];
        if let Some(&bad) = r.vars.iter().find(|&&j| !range.contains(&(j as usize))) {
            return fail(format!(
                "scheduler {s}: reports coordinate {bad} outside its columns {range:?}"
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

/// `metrics.json` of a multi-scheduler job: the single-scheduler fields (whole model;
/// `rounds` and `updates` are summed over the schedulers, every evaluation's `updates` is
/// the global count, the `objective` trace is the lead's) plus the partition and the
/// per-scheduler totals. It reads as a [`LassoMetrics`] too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiLassoMetrics {
    /// The single-scheduler fields.
    #[serde(flatten)]
    pub base: LassoMetrics,
    /// Schedulers in the job.
    pub schedulers: usize,
    /// Per-scheduler totals.
    pub per_scheduler: Vec<SchedulerSummary>,
}

/// The lead's bookkeeping across epochs (shared by the actor run and the local driver).
pub(super) struct LeadBook {
    pub(super) core: SyncCore,
    /// The whole model's metrics as a single scheduler keeps them: its evaluations and
    /// final figures (the totals are filled in by [`Self::outcome`]).
    metrics: LassoMetrics,
    job: LassoSettings,
    /// The test set scored at every evaluation (with `test_data`).
    heldout: Option<LinearHeldout>,
}

/// The evaluation of the all-zero model on `(x, y)` (residual `y`), computed from the data
/// by the formulas of the workers' evaluation: the step-0 record of a multi-scheduler run.
/// At `b = 0` only `|x_j^T y|` enters it, which is what `lambda_max` takes too.
pub(super) fn zero_model_evaluation(
    x: &SparseColumns,
    y: &[f32],
    lambda: f32,
    centred: bool,
) -> Result<EvalNumbers, StradsModelError> {
    let yy: f64 = y.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let y_sum: f64 = y.iter().map(|&v| f64::from(v)).sum();
    let centring = centred.then(|| (x.n_rows.max(1) as f64, y_sum));
    let x_t_residual = (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            column_correlation(rows, vals, y, centring)
        })
        .collect();
    let partial = LassoPartial::Eval {
        x_t_residual,
        yy,
        yr: yy,
        rr: yy,
        applied: 0,
    };
    let zero = vec![0.0f32; x.n_columns()];
    Ok(combine_evaluation(&[partial], &zero, lambda)?.0)
}

/// What the lead scores its history with: the test set and the step-0 evaluation (both
/// `None` without `test_data`, or on a node without the lead).
pub(super) type LeadStart = (Option<LinearHeldout>, Option<EvalNumbers>);

/// The [`LeadStart`] of the schedulers `indices` of `job` on `(x, y)`.
pub(super) fn lead_start(
    x: &SparseColumns,
    y: &[f32],
    job: &LassoSettings,
    indices: &[usize],
) -> Result<LeadStart, StradsError> {
    if !indices.contains(&0) || job.test_data.is_none() {
        return Ok((None, None));
    }
    let lambda = job.resolve_lambda(x, y);
    let heldout = LinearHeldout::of(job, LinearTask::Regression, lambda)?;
    Ok((
        heldout,
        Some(zero_model_evaluation(x, y, lambda, job.fit_intercept)?),
    ))
}

impl LeadBook {
    /// The lead's book; with a test set, its history starts with the untrained model
    /// (`start`, the [`zero_model_evaluation`]) at step 0.
    pub(super) fn new(
        ranges: Vec<Range<usize>>,
        job: &LassoSettings,
        workers: usize,
        n_samples: usize,
        heldout: Option<LinearHeldout>,
        start: Option<EvalNumbers>,
    ) -> Self {
        let n_features = ranges.last().map_or(0, |r| r.end);
        let target = job.target_objective;
        let mut metrics = LassoMetrics {
            block_size: job.block_size,
            rho: job.rho,
            depth: job.depth,
            ..LassoMetrics::at_start(
                job.mode.to_string(),
                0.0,
                (n_samples, n_features),
                workers,
                target,
            )
        };
        if let (Some(h), Some(e)) = (&heldout, start) {
            let zero = vec![0.0f32; n_features];
            let heldout = h.figures(&zero, &Default::default(), 0.0);
            let e = Evaluation::of(0, 0, 0.0, &e, heldout);
            metrics.reach_target(target, e.objective, e.updates, e.elapsed_s);
            metrics.evaluations.push(e);
        }
        LeadBook {
            core: SyncCore::new(ranges),
            metrics,
            job: job.clone(),
            heldout,
        }
    }

    /// The model to evaluate: the lead's own slice plus the reports.
    pub(super) fn assemble(&self, lead: &SliceScheduling) -> Vec<f32> {
        let mut b = vec![0.0f32; lead.n_features];
        lead.fill(&mut b);
        self.core.merge(&mut b);
        b
    }

    pub(super) fn decide(
        &mut self,
        lead: &mut SliceScheduling,
    ) -> Result<SyncDecision, StradsError> {
        let (round, eval, elapsed) = lead.take_evaluation().ok_or_else(|| {
            StradsError::SchedulerSync("the evaluation round produced no result".into())
        })?;
        let d = self.core.decide(
            lead.status(),
            &eval,
            self.job.gap_tolerance,
            self.job.target_objective,
        );
        let heldout = self
            .heldout
            .as_ref()
            .map(|h| h.figures(lead.evaluated_model(), &Default::default(), eval.l1))
            .unwrap_or_default();
        let (updates, elapsed_s) = (d.updates_total, elapsed.as_secs_f64());
        let e = Evaluation::of(round, updates, elapsed_s, &eval, heldout);
        let target = self.job.target_objective;
        self.metrics
            .reach_target(target, e.objective, e.updates, e.elapsed_s);
        self.metrics
            .record_evaluation(e, "lasso evaluation (all schedulers)");
        lead.apply_decision(&d);
        Ok(d)
    }

    pub(super) fn outcome(
        &self,
        lead: &SliceScheduling,
        coefficients: Vec<f32>,
        elapsed: Duration,
    ) -> (Vec<f32>, MultiLassoMetrics) {
        let summary = self.core.summary(lead.status());
        let base = LassoMetrics {
            lambda: lead.lambda,
            rounds: summary.iter().map(|s| s.rounds).sum(),
            updates: summary.iter().map(|s| s.updates).sum(),
            elapsed_s: elapsed.as_secs_f64(),
            objective: lead.metrics().objective.clone(),
            ..self.metrics.clone()
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
