//! `solver = "gauss-seidel"` for sparse logistic regression and the squared-hinge SVM
//! (`loss`): column-holding workers run the baseline's full sweep and active phase on their
//! block of features
//! ([`crate::core::logistic::gauss_seidel`] has the decision logic and the convergence
//! argument).
//!
//! ```text
//! start: every node cuts the features into W ranges of equal non-zeros (the Lasso's
//!        cut); worker p keeps its columns, the labels and m = X b = 0; the scheduler
//!        keeps the labels (and, with W > 1, m)
//! round: scheduler -> every worker  Sweep{full, active sweeps, objective, ||b||_1,
//!                                        tolerance, target}
//!        worker p: W = 1: the baseline's full sweep and active phase; W > 1: a full
//!                  sweep of its columns, or one sweep of its non-zeros
//!        worker p -> scheduler  {changed coordinates, new values, margin delta u_p
//!                                (W > 1), its trajectory's objectives}
//!        scheduler: W = 1: take the sweep as it is; W > 1: U = sum_p u_p, the step t
//!                   minimising the exact objective along t, b += t d, m += t U; stop
//!                   test after a full round
//!        scheduler -> every worker  Commit{t, U (W > 1)}
//! ```
//!
//! With one worker the commit carries nothing: the run is the baseline's, bit for bit.

use super::super::lasso::ColumnShare;
use super::super::lasso::LassoSettings;
use super::super::lasso::gs::worker_columns;
use super::super::lasso::heldout::LinearHeldout;
use super::ClassifierLoss;
use super::{LogisticApp, LogisticMetrics, LogisticPoint, load_share, logistic_lambda_from_max};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Push, Schedule, Step, decode_state, encode_state, strads_app};
use crate::core::baseline::CdOutcome;
use crate::core::gauss_seidel::RowVector;
use crate::core::logistic::correct_signs;
use crate::core::logistic::gauss_seidel::{
    Combination, LogisticSweepOrder, LogisticSwept, MarginGsWorkerCore, SweepWorker,
    combination_step, overlap, step_value,
};
use crate::core::loss::{Logistic, MarginLoss, SquaredHinge};
use crate::core::tuning::{MAX_ACTIVE_PASSES, MAX_FULL_SWEEPS};
use crate::error::StradsError;
use crate::kit::{FinishedRun, JobShape, StarHalf, StradsJob};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use crate::core::tuning::LOGISTIC_SHARED_ACTIVE_PASSES as SHARED_ACTIVE_PASSES;

/// Marker type of the Gauss-Seidel logistic job (same roles and settings section as the
/// scheduled one; the roles pick by `solver`).
pub struct LogisticGsApp;

/// The step every worker commits and, with several workers, the sum of their margin
/// deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticGsCommit {
    /// `t`: `b = b_start + t d`, `m = m_start + t U`.
    pub step: f64,
    /// `U = sum_p u_p` (several workers).
    pub combined: Option<RowVector>,
}

strads_app!(
    LogisticGsApp,
    "petrel.strads.logistic-gs",
    LogisticSweepOrder,
    LogisticSwept,
    LogisticGsCommit
);

/// Worker half: its block's solver, of the job's loss.
pub struct LogisticGsWorker {
    core: Box<dyn SweepWorker>,
    data_digest: Option<u64>,
}

impl Push<LogisticGsApp> for LogisticGsWorker {
    fn push(
        &mut self,
        _round: u64,
        order: &LogisticSweepOrder,
    ) -> Result<LogisticSwept, StradsModelError> {
        self.core.sweep(order)
    }

    fn commit(&mut self, _round: u64, c: &LogisticGsCommit) -> Result<(), StradsModelError> {
        self.core.commit(c.step, c.combined.as_ref())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        encode_state(&self.core.snapshot()?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        self.core.restore(decode_state(state)?)
    }
}

/// What [`LogisticGsScheduling`] changes while running (what a round checkpoint holds).
#[derive(Clone, Default, Serialize, Deserialize)]
struct GsSchedulingState {
    coefficients: Vec<f64>,
    /// `m = X b` (kept with several workers only: one worker's objective is exact).
    margins: Vec<f64>,
    l1: f64,
    objective: f64,
    correct: u64,
    rounds: u64,
    /// Full rounds run.
    full_sweeps: u64,
    /// The next round is a full one (always with one worker).
    next_full: bool,
    /// Active rounds since the last full one.
    active_rounds: u64,
    metrics: LogisticMetrics,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
enum GsStop {
    /// A baseline outcome: every block settled, the target, or the sweep limit.
    Baseline(CdOutcome, f64),
    /// `max_rounds` rounds ran.
    RoundLimit,
}

/// Scheduler half: the labels, the model and (several workers) the margins.
pub struct LogisticGsScheduling {
    labels: Vec<f64>,
    loss: ClassifierLoss,
    lambda: f32,
    workers: usize,
    tolerance: f64,
    target: Option<f64>,
    max_rounds: u64,
    s: GsSchedulingState,
    /// Non-zero coefficients.
    nonzeros: usize,
    /// Active-set sweeps per round ([`LassoSettings::gs_active_passes`], or automatic).
    active_passes: u32,
    in_flight: bool,
    stop: Option<GsStop>,
    heldout: Option<LinearHeldout>,
    data_digest: Option<u64>,
}

impl LogisticGsScheduling {
    /// The scheduler of `workers` workers on the design `design` (its shape, labels and
    /// `lambda_max`: [`load_share`] of no columns).
    pub fn new(
        design: &ColumnShare,
        job: &LassoSettings,
        workers: usize,
    ) -> Result<Self, StradsError> {
        let (n_rows, n_features) = (design.shape.n_rows, design.shape.n_columns());
        if workers == 0 || workers > n_features {
            return Err(StradsModelError::InvalidConfig(format!(
                "solver = \"gauss-seidel\" splits the {n_features} features over the workers: {workers} workers is not within 1..={n_features}"
            ))
            .into());
        }
        let lambda = logistic_lambda_from_max(job, design.lambda_max);
        let heldout = LinearHeldout::of(job, job.loss.unwrap_or_default().task(), lambda)?;
        let labels: Vec<f64> = design.y.iter().map(|&l| f64::from(l)).collect();
        let loss_kind = job.loss.unwrap_or_default();
        // The baseline's start, computed the same way: b = 0.
        let row_loss: fn(f64, f64) -> f64 = match loss_kind {
            ClassifierLoss::Logistic => Logistic::row_loss,
            ClassifierLoss::SquaredHinge => SquaredHinge::row_loss,
        };
        let loss: f64 = labels.iter().map(|&y| row_loss(y, 0.0)).sum();
        let objective = loss + f64::from(lambda) * 0.0;
        let mut s = LogisticGsScheduling {
            s: GsSchedulingState {
                margins: if workers > 1 {
                    vec![0.0; labels.len()]
                } else {
                    Vec::new()
                },
                coefficients: vec![0.0; n_features],
                objective,
                next_full: true,
                metrics: LogisticMetrics {
                    workers,
                    ..LogisticMetrics::at_start(
                        "gauss-seidel",
                        lambda,
                        n_rows,
                        n_features,
                        objective,
                    )
                },
                ..GsSchedulingState::default()
            },
            labels,
            loss: loss_kind,
            lambda,
            workers,
            tolerance: job.gap_tolerance.map_or(1e-7, |t| t / 100.0),
            target: job.target_objective,
            max_rounds: job.max_rounds,
            nonzeros: 0,
            active_passes: match (job.gs_active_passes, workers) {
                (0, 1) => MAX_ACTIVE_PASSES,
                (0, _) => SHARED_ACTIVE_PASSES,
                (passes, _) => passes,
            },
            in_flight: false,
            stop: None,
            heldout,
            data_digest: None,
        };
        s.record(0, Duration::ZERO);
        Ok(s)
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &LogisticMetrics {
        &self.s.metrics
    }

    /// The coefficients so far.
    pub fn coefficients(&self) -> &[f64] {
        &self.s.coefficients
    }

    /// Names the run's mode and worker count in the metrics (the single-threaded
    /// baseline is this solver with one worker).
    pub fn relabel(&mut self, mode: &str, workers: usize) {
        self.s.metrics.mode = mode.into();
        self.s.metrics.workers = workers;
    }

    /// Writes the model and the metrics to `dir`.
    pub fn write(&self, dir: &std::path::Path, job: &LassoSettings) -> Result<(), StradsError> {
        let coefficients: Vec<f32> = self.s.coefficients.iter().map(|&b| b as f32).collect();
        super::write_model(dir, job, self.lambda, &coefficients, self.run_metrics(job))
    }

    /// The run's figures in the one metrics format, with why it stopped.
    pub fn run_metrics(&self, job: &LassoSettings) -> petrel_ml::job::RunMetrics {
        let mut m = self.s.metrics.run_metrics(job);
        match self.stop {
            Some(GsStop::Baseline(outcome, gap)) => {
                m.converged = outcome != CdOutcome::SweepLimit;
                m.stop_reason =
                    super::baseline::stop_reason(outcome, gap, self.s.full_sweeps as usize);
                if self.workers > 1 && outcome == CdOutcome::Converged {
                    m.stop_reason = format!(
                        "the {} blocks' {}",
                        self.workers,
                        m.stop_reason
                            .replacen("a full sweep", "full sweeps together", 1)
                    );
                }
            }
            Some(GsStop::RoundLimit) | None => {
                m.converged = false;
                m.stop_reason = format!(
                    "ran {} rounds, the round limit (max_rounds = {}), before every block's full sweep settled",
                    self.s.rounds, self.max_rounds
                );
            }
        }
        m
    }

    /// A point of the trace (and the final figures) for the current state.
    fn record(&mut self, round: u64, elapsed: Duration) {
        let n = self.labels.len().max(1) as f64;
        let accuracy = if self.workers > 1 {
            correct_signs(&self.labels, &self.s.margins) as f64 / n
        } else {
            self.s.correct as f64 / n
        };
        let heldout = self
            .heldout
            .as_ref()
            .map(|h| h.figures_of_solver(&self.s.coefficients))
            .unwrap_or_default();
        self.s.metrics.trace.push(LogisticPoint {
            round,
            updates: self.s.metrics.updates,
            elapsed_s: elapsed.as_secs_f64(),
            objective: self.s.objective,
            training_accuracy: accuracy,
            heldout,
        });
        self.s.metrics.rounds = self.s.rounds;
        self.s.metrics.elapsed_s = elapsed.as_secs_f64();
        self.s.metrics.final_objective = self.s.objective;
        self.s.metrics.final_training_accuracy = accuracy;
        self.s.metrics.nonzeros = self.nonzeros;
    }

    /// Sets coordinate `j` (checked by [`Self::check`]), counting the non-zeros.
    fn set(&mut self, j: usize, value: f64) {
        let b = &mut self.s.coefficients[j];
        self.nonzeros = self.nonzeros + usize::from(value != 0.0) - usize::from(*b != 0.0);
        *b = value;
    }

    /// Checks a worker's answer against the design.
    fn check(&self, round: u64, s: &LogisticSwept) -> Result<(), StradsModelError> {
        let d = self.s.coefficients.len();
        if s.changed.len() != s.values.len()
            || s.changed.iter().any(|&j| j as usize >= d)
            || s.values.iter().any(|v| !v.is_finite())
            || !s.phase.objective.is_finite()
        {
            return Err(StradsModelError::protocol(format!(
                "round {round}: a sweep's answer of {} coordinates and {} values does not fit {d} features (or is not finite)",
                s.changed.len(),
                s.values.len()
            )));
        }
        Ok(())
    }

    /// Several workers: the step along the sum of their sweeps.
    fn combine(&mut self, swept: &[LogisticSwept]) -> Result<LogisticGsCommit, StradsModelError> {
        let deltas: Vec<&RowVector> = swept
            .iter()
            .map(|s| {
                s.margin_delta.as_ref().ok_or_else(|| {
                    StradsModelError::protocol("a shared worker's sweep without its margin delta")
                })
            })
            .collect::<Result<_, _>>()?;
        let n = self.labels.len();
        let mut sum = vec![0.0; n];
        for u in &deltas {
            u.add_scaled_to(1.0, &mut sum)?;
        }
        let moved: Vec<(f64, f64)> = swept
            .iter()
            .flat_map(|s| s.changed.iter().zip(&s.values))
            .map(|(&j, &v)| (self.s.coefficients[j as usize], v))
            .collect();
        let combination = Combination {
            labels: &self.labels,
            margins: &self.s.margins,
            sum: &sum,
            moved: &moved,
            lambda: f64::from(self.lambda),
            l1: self.s.l1,
        };
        // Every delta's rows were checked by the sum: at most every worker shares a row.
        let omega = || overlap(&deltas, n).unwrap_or(deltas.len());
        let (step, objective, l1) = match self.loss {
            ClassifierLoss::Logistic => combination_step::<Logistic>(&combination, omega),
            ClassifierLoss::SquaredHinge => combination_step::<SquaredHinge>(&combination, omega),
        };
        for s in swept {
            for (&j, &v) in s.changed.iter().zip(&s.values) {
                let b = self.s.coefficients[j as usize];
                self.set(j as usize, step_value(b, v, step));
            }
        }
        let combined = RowVector::from_dense(sum);
        combined.add_scaled_to(step, &mut self.s.margins)?;
        self.s.objective = objective;
        self.s.l1 = l1;
        tracing::debug!(
            step,
            objective,
            loss = self.loss.name(),
            "gauss-seidel round combined"
        );
        Ok(LogisticGsCommit {
            step,
            combined: Some(combined),
        })
    }
}

impl Schedule<LogisticGsApp> for LogisticGsScheduling {
    fn schedule(&mut self, _round: u64, in_flight: usize) -> Step<LogisticSweepOrder> {
        if self.stop.is_some() {
            return Step::Done;
        }
        if in_flight > 0 || self.in_flight {
            return Step::Wait;
        }
        self.in_flight = true;
        // One worker: the baseline's full sweep and active phase in one round; several:
        // a full sweep, or `active_passes` active-set sweeps, a round.
        let active_sweeps = match (self.workers, self.s.next_full) {
            (1, _) => self.active_passes,
            (_, true) => 0,
            (_, false) => self.active_passes,
        };
        Step::Run(Plan::All(LogisticSweepOrder {
            full: self.s.next_full,
            active_sweeps,
            objective: self.s.objective,
            l1: self.s.l1,
            tolerance: self.tolerance,
            target: self.target,
        }))
    }

    fn pull(
        &mut self,
        round: u64,
        swept: Vec<LogisticSwept>,
        elapsed: Duration,
    ) -> Result<LogisticGsCommit, StradsModelError> {
        if swept.len() != self.workers {
            return Err(StradsModelError::protocol(format!(
                "round {round}: {} answers from {} workers",
                swept.len(),
                self.workers
            )));
        }
        for s in &swept {
            self.check(round, s)?;
        }
        self.in_flight = false;
        self.s.rounds += 1;
        let before = self.s.objective;
        let commit = if self.workers == 1 {
            let s = &swept[0];
            for (&j, &v) in s.changed.iter().zip(&s.values) {
                self.s.l1 += v.abs() - self.s.coefficients[j as usize].abs();
                self.set(j as usize, v);
            }
            self.s.objective = s.phase.objective;
            self.s.correct = s.correct;
            LogisticGsCommit {
                step: 1.0,
                combined: None,
            }
        } else {
            self.combine(&swept)?
        };
        self.s.metrics.updates = swept.iter().map(|s| s.updates).sum();
        // `next_full` changes only here: it is what the round in flight was dispatched as.
        let full = self.s.next_full;
        // The blocks' full sweeps together: the sum of their relative decreases (one
        // worker: the baseline's figure).
        let gap: f64 = swept.iter().map(|s| s.phase.gap).sum();
        if full {
            self.s.full_sweeps += 1;
            self.s.active_rounds = 0;
            self.s.next_full = self.workers == 1;
        } else {
            // The baseline's settle rule for an active pass, for an active round.
            self.s.active_rounds += 1;
            let decrease =
                (before - self.s.objective) / self.s.objective.abs().max(f64::MIN_POSITIVE);
            self.s.next_full = decrease <= 0.1 * self.tolerance
                || self.s.active_rounds >= u64::from(MAX_ACTIVE_PASSES);
        }
        self.stop = if full && gap <= self.tolerance {
            Some(GsStop::Baseline(CdOutcome::Converged, gap))
        } else if self.target.is_some_and(|t| self.s.objective <= t) {
            Some(GsStop::Baseline(CdOutcome::ReachedTarget, gap))
        } else if self.s.full_sweeps >= MAX_FULL_SWEEPS as u64 {
            Some(GsStop::Baseline(CdOutcome::SweepLimit, gap))
        } else if self.max_rounds > 0 && self.s.rounds >= self.max_rounds {
            Some(GsStop::RoundLimit)
        } else {
            None
        };
        self.record(self.s.rounds, elapsed);
        petrel_observe::metrics().job.point(
            &petrel_observe::thread_node(),
            "objective",
            elapsed,
            self.s.objective,
        );
        Ok(commit)
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        if self.stop.is_some() {
            return Ok(None);
        }
        crate::core::check_drained(self.in_flight)?;
        encode_state(&self.s)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let s: GsSchedulingState = decode_state(state)?;
        crate::core::check_sizes(&[
            (
                "coefficients",
                s.coefficients.len(),
                self.s.coefficients.len(),
            ),
            ("margins", s.margins.len(), self.s.margins.len()),
        ])?;
        self.nonzeros = s.coefficients.iter().filter(|v| **v != 0.0).count();
        self.s = s;
        self.in_flight = false;
        self.stop = None;
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }
}

impl StradsJob for LogisticGsApp {
    const SECTION: &'static str = <LogisticApp as StradsJob>::SECTION;
    const SCHEDULER_ROLE: &'static str = super::SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = super::WORKER_ROLE;
    type Config = LassoSettings;
    type Scheduler = LogisticGsScheduling;
    type Worker = StarHalf<LogisticGsWorker>;

    fn validate_config(job: &LassoSettings) -> Result<(), petrel_ml::job::InvalidSetting> {
        <LogisticApp as StradsJob>::validate_config(job)
    }

    fn latency_bound(job: &LassoSettings) -> bool {
        <LogisticApp as StradsJob>::latency_bound(job)
    }

    /// The scheduler keeps no column: the design's shape, the labels and `lambda_max`.
    fn scheduler(
        job: &LassoSettings,
        shape: &JobShape,
    ) -> Result<LogisticGsScheduling, StradsError> {
        let design = load_share(job, |_| Ok(0..0))?;
        let mut half = LogisticGsScheduling::new(&design, job, shape.workers)?;
        tracing::info!(
            rows = design.shape.n_rows,
            features = design.shape.n_columns(),
            workers = shape.workers,
            lambda = half.lambda,
            loss = half.loss.name(),
            "logistic gauss-seidel scheduler ready"
        );
        half.data_digest = Some(design.digest());
        Ok(half)
    }

    /// Worker `index` keeps only its range of columns (every row) and the labels
    /// ([`load_share`]: the Lasso's cut of equal non-zeros).
    fn worker(
        job: &LassoSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<StarHalf<LogisticGsWorker>, StradsError> {
        let share = load_share(job, worker_columns(index, shape.workers))?;
        tracing::debug!(worker = index, columns = ?share.columns, "logistic gauss-seidel worker loaded");
        let digest = share.digest();
        let lambda = logistic_lambda_from_max(job, share.lambda_max);
        let (x, y, first, shared) = (share.x, &share.y, share.columns.start, shape.workers > 1);
        let core: Box<dyn SweepWorker> = match job.loss.unwrap_or_default() {
            ClassifierLoss::Logistic => Box::new(MarginGsWorkerCore::<Logistic>::new(
                x, y, lambda, first, shared,
            )?),
            ClassifierLoss::SquaredHinge => Box::new(MarginGsWorkerCore::<SquaredHinge>::new(
                x, y, lambda, first, shared,
            )?),
        };
        Ok(StarHalf(LogisticGsWorker {
            core,
            data_digest: Some(digest),
        }))
    }

    fn finish(
        job: &LassoSettings,
        scheduler: LogisticGsScheduling,
        _run: &FinishedRun,
    ) -> Result<(), StradsError> {
        tracing::info!(
            objective = scheduler.s.objective,
            rounds = scheduler.s.rounds,
            "logistic gauss-seidel finished"
        );
        match &job.out_dir {
            Some(dir) => scheduler.write(dir, job),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
