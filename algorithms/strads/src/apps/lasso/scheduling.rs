//! Lasso's scheduler half: priority sampling and the dependency filter
//! ([`crate::core::scheduler`]), the soft-threshold pull, exact evaluations and the
//! metrics.
//!
//! Every `eval_every` update rounds, or with `eval_every = 0` once the updates since the
//! last evaluation cost `eval_work_ratio` times an evaluation (and at the end), the
//! scheduler drains the pipeline and runs an `Evaluate` round: workers return `X^T r` and
//! `(y.y, y.r, r.r)` partials, from which it computes the KKT violation and the duality gap
//! exactly. The objective itself is tracked every round from the squared-residual partials
//! that come with each push (a running sum on the workers: O(1) per round).
//!
//! The half times its own parts (sampling, dependency check, pull, evaluation) and keeps
//! the workers' reported compute, so `metrics.json` says where a round's time went
//! ([`RoundProfile`](super::metrics::RoundProfile)).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::checkpoint::ClusterShape;
use super::config::{Balance, LassoSettings};
use super::heldout::LinearHeldout;
use super::metrics::{
    Evaluation, LassoMetrics, LassoOutcome, ObjectivePoint, combine_evaluation, common_applied,
};
use super::wire::{LassoApp, LassoCommit, LassoPartial, LassoTask, WorkerBusy};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Schedule, Step, decode_state, encode_state};
use crate::core::balance::{DealGate, RowDealer, deal_step};
use crate::core::lasso::pull;
use crate::core::scheduler::{LassoScheduler, SchedulerState};
use crate::error::StradsError;
use crate::kit::dealing::change_deal;
use petrel_messages::tensor::{f32_bytes, f64_bytes};
use petrel_ml::data::SparseColumns;
use petrel_ml::model::LinearTask;
use serde::{Deserialize, Serialize};

/// What an in-flight round is.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum InFlight {
    Update(Vec<usize>),
    Evaluate,
    Deal,
}

/// Scheduler half: priorities, dependency filter, coefficients, pull and metrics.
pub struct LassoScheduling {
    scheduler: LassoScheduler,
    col_sq_norms: Vec<f64>,
    lambda: f32,
    job: LassoSettings,
    pub(super) in_flight: VecDeque<(u64, InFlight)>,
    pub(super) s: LassoSchedulingState,
    /// Non-zeros per column: the work of updating it.
    column_nnz: Vec<u32>,
    /// Work of one evaluation (one pass over X plus one value per feature).
    eval_work: f64,
    /// The test set (`test_data`): held-out figures at every evaluation, the first one
    /// at round 0 before any update.
    heldout: Option<LinearHeldout>,
    /// What a checkpoint must match to be restored (set by the cluster job).
    pub(super) shape: Option<ClusterShape>,
    /// The digest of the data it was built from, when read from a file (compared with the
    /// workers' before the first round).
    pub(super) data_digest: Option<u64>,
    /// The rows' dealer with `balance = "dynamic"`.
    dealer: Option<RowDealer>,
    /// With `balance = "dynamic"`: the coefficients as the workers sum the commits, for
    /// the workers that join.
    committed: Vec<f64>,
}

/// What a [`LassoScheduling`] changes while running (a round checkpoint holds it, with the
/// coordinate scheduler's state, taken with nothing in flight).
#[derive(Clone, Default, Serialize, Deserialize)]
pub(super) struct LassoSchedulingState {
    #[serde(with = "f32_bytes")]
    coefficients: Vec<f32>,
    /// After commit `a`: L1 norm and cumulative updates (index = commits applied).
    #[serde(with = "f64_bytes")]
    l1_after: Vec<f64>,
    updates_after: Vec<u64>,
    l1: f64,
    pub(super) updates: u64,
    /// Update rounds dispatched (what `checkpoint_every` counts).
    update_rounds: u64,
    update_rounds_since_eval: u64,
    /// Work (non-zeros touched) of the updates since the last evaluation.
    work_since_eval: f64,
    rounds_scheduled: u64,
    pub(super) stopping: bool,
    final_eval_sent: bool,
    pub(super) metrics: LassoMetrics,
}

impl LassoScheduling {
    /// `x` is the full design (for norms and correlations), `workers` the worker count.
    pub fn new(
        x: &SparseColumns,
        y: &[f32],
        job: &LassoSettings,
        workers: usize,
    ) -> Result<Self, StradsError> {
        crate::core::baseline::check_shape(x, y.len(), "y")?;
        let job = &job.resolved_for(x, workers);
        let lambda = job.resolve_lambda(x, y);
        let column_nnz = super::DesignShape::of(x).column_nnz;
        let eval_work = (x.values.len() + x.n_columns()) as f64;
        let heldout = LinearHeldout::of(job, LinearTask::Regression, lambda)?;
        let x = Arc::new(x.clone());
        let scheduler = job.coordinate_scheduler(x.clone())?;
        let dealer = RowDealer::of(job.balance == Balance::Dynamic, x.n_rows, workers)?;
        Ok(LassoScheduling {
            scheduler,
            col_sq_norms: super::config::design_sq_norms(&x, job.fit_intercept),
            lambda,
            in_flight: VecDeque::new(),
            s: LassoSchedulingState {
                coefficients: vec![0.0; x.n_columns()],
                l1_after: vec![0.0],
                updates_after: vec![0],
                metrics: LassoMetrics {
                    block_size: job.block_size,
                    rho: job.rho,
                    depth: job.depth,
                    ..LassoMetrics::at_start(
                        job.mode.to_string(),
                        lambda,
                        (x.n_rows, x.n_columns()),
                        workers,
                        job.target_objective,
                    )
                },
                ..LassoSchedulingState::default()
            },
            job: job.clone(),
            column_nnz,
            eval_work,
            heldout,
            shape: None,
            data_digest: None,
            committed: match dealer {
                Some(_) => vec![0.0; x.n_columns()],
                None => Vec::new(),
            },
            dealer,
        })
    }

    /// The job's lambda.
    pub fn lambda(&self) -> f32 {
        self.lambda
    }

    /// The coefficients so far.
    pub fn coefficients(&self) -> &[f32] {
        &self.s.coefficients
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &LassoMetrics {
        &self.s.metrics
    }

    /// The model and metrics as they are now.
    pub fn outcome(&self) -> LassoOutcome {
        LassoOutcome {
            coefficients: self.s.coefficients.clone(),
            metrics: LassoMetrics {
                balance: self.dealer.as_ref().map(RowDealer::report),
                ..self.s.metrics.clone()
            },
        }
    }

    /// An evaluation is due: every `eval_every` update rounds, or (with `eval_every = 0`)
    /// once the updates since the last one cost `eval_work_ratio` evaluations.
    fn evaluation_due(&self) -> bool {
        if self.job.eval_every > 0 {
            self.s.update_rounds_since_eval >= self.job.eval_every
        } else {
            self.job.eval_work_ratio > 0.0
                && self.s.work_since_eval >= self.job.eval_work_ratio * self.eval_work
        }
    }

    fn evaluate(&mut self, round: u64) -> Step<LassoTask> {
        self.in_flight.push_back((round, InFlight::Evaluate));
        self.s.update_rounds_since_eval = 0;
        self.s.work_since_eval = 0.0;
        self.s.rounds_scheduled += 1;
        Step::Run(Plan::All(LassoTask::Evaluate))
    }

    fn record_objective(&mut self, round: u64, applied: u64, sq: f64, elapsed: Duration) {
        let Some(&l1) = self.s.l1_after.get(applied as usize) else {
            return;
        };
        let objective = 0.5 * sq + f64::from(self.lambda) * l1;
        let updates = self.s.updates_after[applied as usize];
        let elapsed_s = elapsed.as_secs_f64();
        let node = petrel_observe::thread_node();
        petrel_observe::metrics()
            .job
            .point(&node, "objective", elapsed, objective);
        self.s.metrics.objective.push(ObjectivePoint {
            round,
            updates,
            elapsed_s,
            objective,
        });
        let target = self.job.target_objective;
        if self
            .s
            .metrics
            .reach_target(target, objective, updates, elapsed_s)
        {
            self.s.stopping = true;
        }
        if !objective.is_finite() {
            tracing::warn!(round, "objective is not finite: diverged");
            self.s.stopping = true;
        }
    }

    /// Per-commit bookkeeping after a round that changed no coefficient either.
    pub(super) fn after_commit(&mut self) {
        self.s.l1_after.push(self.s.l1);
        self.s.updates_after.push(self.s.updates);
    }
}

impl Schedule<LassoApp> for LassoScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LassoTask> {
        if !self.s.stopping && self.s.rounds_scheduled >= self.job.max_rounds {
            self.s.stopping = true;
        }
        if self.s.stopping {
            return if in_flight > 0 {
                Step::Wait
            } else if !self.s.final_eval_sent {
                self.s.final_eval_sent = true;
                self.evaluate(round)
            } else {
                Step::Done
            };
        }
        let deal_in_flight = self.in_flight.iter().any(|(_, k)| *k == InFlight::Deal);
        let idle = in_flight == 0 && self.in_flight.is_empty();
        match crate::core::balance::gate(self.dealer.as_mut(), round, deal_in_flight, idle) {
            DealGate::Wait => return Step::Wait,
            DealGate::Deal(ranges) => {
                self.in_flight.push_back((round, InFlight::Deal));
                return deal_step(ranges, |start, end| LassoTask::Deal {
                    start,
                    end,
                    join: None,
                });
            }
            DealGate::Proceed => {}
        }
        // With a test set, the held-out curve starts at the untrained model.
        if self.heldout.is_some() && self.s.rounds_scheduled == 0 {
            return self.evaluate(round);
        }
        if self.evaluation_due() {
            return if in_flight > 0 {
                Step::Wait
            } else {
                self.evaluate(round)
            };
        }
        // The coordinates of rounds still in flight (in round order, so the check's
        // bookkeeping does not depend on a hash order).
        let in_flight_vars: Vec<usize> = self
            .in_flight
            .iter()
            .flat_map(|(_, kind)| match kind {
                InFlight::Update(vars) => vars.as_slice(),
                InFlight::Evaluate | InFlight::Deal => &[],
            })
            .copied()
            .collect();
        let vars = self.scheduler.next_round_around(&in_flight_vars);
        let costs = self.scheduler.take_costs();
        let profile = &mut self.s.metrics.profile;
        profile.sample_s += costs.sample_s;
        profile.filter_s += costs.filter_s;
        // Per round: the coordinates' columns plus a fixed share for the round itself.
        self.s.work_since_eval += vars
            .iter()
            .map(|&j| f64::from(self.column_nnz[j]) + 1.0)
            .sum::<f64>();
        if vars.is_empty() {
            return if in_flight > 0 {
                Step::Wait
            } else {
                // Cannot happen (nothing busy), but never dispatch an empty round.
                self.s.stopping = true;
                self.schedule(round, in_flight)
            };
        }
        let (metrics, node) = (
            &petrel_observe::metrics().strads,
            petrel_observe::thread_node(),
        );
        metrics.updates(&node, vars.len() as u64);
        metrics.filter_rejections(&node, self.scheduler.take_filter_rejections());
        let values = vars.iter().map(|&j| self.s.coefficients[j]).collect();
        let task = LassoTask::Update {
            vars: vars.iter().map(|&j| j as u32).collect(),
            values,
        };
        self.in_flight.push_back((round, InFlight::Update(vars)));
        self.s.update_rounds += 1;
        self.s.update_rounds_since_eval += 1;
        self.s.rounds_scheduled += 1;
        Step::Run(Plan::All(task))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LassoPartial>,
        elapsed: Duration,
    ) -> Result<LassoCommit, StradsModelError> {
        let started = Instant::now();
        let kind = crate::core::pop_in_flight(&mut self.in_flight, round)?;
        self.s.metrics.rounds = round + 1;
        self.s.metrics.elapsed_s = elapsed.as_secs_f64();
        let deal = kind == InFlight::Deal;
        let commit = match kind {
            InFlight::Update(vars) => {
                let mut slowest = WorkerBusy::default();
                let mut summed = vec![0.0f32; vars.len()];
                let mut sq = 0.0;
                let mut applied = Vec::with_capacity(partials.len());
                for (index, p) in partials.iter().enumerate() {
                    let LassoPartial::Z {
                        z,
                        sq_residual,
                        applied: a,
                        busy,
                    } = p
                    else {
                        return Err(StradsModelError::protocol(format!(
                            "round {round}: evaluation answer to an update"
                        )));
                    };
                    if z.len() != vars.len() {
                        return Err(StradsModelError::DimensionMismatch(format!(
                            "round {round}: {} partials for {} vars",
                            z.len(),
                            vars.len()
                        )));
                    }
                    summed.iter_mut().zip(z).for_each(|(s, v)| *s += v);
                    sq += sq_residual;
                    applied.push(*a);
                    slowest = slowest.slowest(*busy);
                    if let Some(dealer) = &mut self.dealer {
                        dealer.observe(index, busy.push_s + busy.commit_s);
                    }
                }
                let profile = &mut self.s.metrics.profile;
                profile.update_rounds += 1;
                profile.worker_push_s = slowest.push_s;
                profile.worker_commit_s = slowest.commit_s;
                profile.worker_eval_s = slowest.eval_s;
                profile.worker_peak_rss_mb = profile.worker_peak_rss_mb.max(slowest.peak_rss_mb);
                let applied = common_applied(applied.into_iter())?;
                self.record_objective(round, applied, sq, elapsed);
                let new_values = pull(&vars, &summed, &self.col_sq_norms, self.lambda);
                let mut changes = Vec::with_capacity(vars.len());
                for (&j, &value) in vars.iter().zip(&new_values) {
                    let old = self.s.coefficients[j];
                    self.s.l1 += f64::from(value.abs()) - f64::from(old.abs());
                    self.s.coefficients[j] = value;
                    changes.push((j, value - old));
                }
                self.scheduler.commit(&changes);
                crate::kit::dealing::add_changes(&mut self.committed, &changes);
                self.s.updates += vars.len() as u64;
                self.s.metrics.profile.pull_s += started.elapsed().as_secs_f64();
                LassoCommit {
                    vars: vars.iter().map(|&j| j as u32).collect(),
                    deltas: changes.iter().map(|c| c.1).collect(),
                }
            }
            InFlight::Evaluate => {
                // Exact: evaluation rounds are only dispatched with the pipeline drained.
                let (numbers, _) =
                    combine_evaluation(&partials, &self.s.coefficients, self.lambda)?;
                let (objective, gap) = (numbers.objective, numbers.duality_gap);
                self.s.l1 = numbers.l1;
                let heldout = self
                    .heldout
                    .as_ref()
                    .map(|h| h.figures(&self.s.coefficients, &Default::default(), numbers.l1))
                    .unwrap_or_default();
                let (updates, elapsed_s) = (self.s.updates, elapsed.as_secs_f64());
                let eval = Evaluation::of(round, updates, elapsed_s, &numbers, heldout);
                self.s.metrics.record_evaluation(eval, "lasso evaluation");
                if let Some(tol) = self.job.gap_tolerance
                    && gap <= tol * objective.abs().max(f64::MIN_POSITIVE)
                {
                    self.s.stopping = true;
                }
                if !objective.is_finite() {
                    self.s.stopping = true;
                }
                self.s.metrics.profile.eval_rounds += 1;
                self.s.metrics.profile.scheduler_peak_rss_mb = super::metrics::peak_rss_mb();
                self.s.metrics.profile.eval_pull_s += started.elapsed().as_secs_f64();
                LassoCommit::default()
            }
            InFlight::Deal => {
                if partials
                    .iter()
                    .any(|p| !matches!(p, LassoPartial::Dealt { .. }))
                {
                    return Err(StradsModelError::protocol(format!(
                        "round {round}: an update or evaluation answer to a deal"
                    )));
                }
                LassoCommit::default()
            }
        };
        self.s.metrics.updates = self.s.updates;
        self.s.metrics.profile.finish(elapsed.as_secs_f64());
        if let Some(dealer) = &mut self.dealer {
            dealer.pulled(elapsed.as_secs_f64(), deal);
        }
        self.after_commit();
        Ok(commit)
    }

    /// Nothing once the stop rule fired: the run is over.
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        crate::core::check_drained(!self.in_flight.is_empty())?;
        if self.s.stopping {
            return Ok(None);
        }
        encode_state(&(self.scheduler.export_state(), &self.s, self.shape))
    }

    /// Refuses a checkpoint of another design, lambda or seed.
    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let (scheduler, s, shape): (SchedulerState, LassoSchedulingState, Option<ClusterShape>) =
            decode_state(state)?;
        if let (Some(saved), Some(job)) = (&shape, &self.shape)
            && let Some(difference) = saved.difference(job)
        {
            return Err(StradsModelError::InvalidConfig(difference));
        }
        let n = self.s.coefficients.len();
        crate::core::check_sizes(&[("coefficients", s.coefficients.len(), n)])?;
        if s.l1_after.len() != s.updates_after.len() {
            return Err(StradsModelError::Invariant(
                "inconsistent commit bookkeeping".into(),
            ));
        }
        self.scheduler.import_state(&scheduler)?;
        self.s = s;
        self.in_flight.clear();
        Ok(())
    }

    /// `checkpoint_every` counts update rounds: with `eval_every` a multiple of it, a
    /// checkpoint falls on an evaluation's drain and leaves a pipelined schedule as it is.
    fn checkpoint_progress(&self) -> Option<u64> {
        Some(self.s.update_rounds)
    }

    /// Kept in `metrics.json`: where a run resumed from and the checkpoint rounds.
    fn checkpointed(&mut self, round: u64, resumed: bool) {
        if resumed {
            self.s.metrics.resumed_from_round = Some(round);
        } else {
            self.s.metrics.checkpoints.push(round);
        }
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    /// With `balance = "dynamic"`, a deal round over the changed workers: joiners get the
    /// coefficients with their rows. Nothing once the job is stopping, unless a worker
    /// died (its rows need an owner for the final evaluation).
    fn reshape(
        &mut self,
        round: u64,
        change: &crate::core::roster::Reshape,
    ) -> Result<Option<Step<LassoTask>>, StradsModelError> {
        if self.s.stopping && change.lost.is_empty() {
            return Ok(None);
        }
        let model = (self.committed.as_slice(), self.s.l1_after.len() as u64 - 1);
        let dealer = self.dealer.as_mut();
        let step = change_deal(dealer, round, change, model, |rows, join| LassoTask::Deal {
            start: rows.start,
            end: rows.end,
            join,
        })?;
        // Like a balancing deal, it does not count toward `max_rounds`.
        self.in_flight.push_back((round, InFlight::Deal));
        Ok(Some(step))
    }

    /// Forgets the given-up rounds: an update is scheduled again (its coordinates are
    /// free), an evaluation is due again, a change's deal is not recorded.
    fn lost(&mut self, rounds: &[u64]) -> Result<(), StradsModelError> {
        let kinds = crate::core::take_lost(&mut self.in_flight, rounds)?;
        for (round, kind) in rounds.iter().zip(kinds) {
            match kind {
                InFlight::Update(_) => {
                    self.s.update_rounds = self.s.update_rounds.saturating_sub(1);
                    self.s.update_rounds_since_eval =
                        self.s.update_rounds_since_eval.saturating_sub(1);
                }
                InFlight::Evaluate if self.s.stopping => self.s.final_eval_sent = false,
                InFlight::Evaluate => {
                    let s = &mut self.s;
                    s.update_rounds_since_eval =
                        s.update_rounds_since_eval.max(self.job.eval_every);
                    s.work_since_eval =
                        (s.work_since_eval).max(self.job.eval_work_ratio * self.eval_work);
                }
                InFlight::Deal => {
                    if let Some(dealer) = &mut self.dealer {
                        dealer.forget_change(*round);
                    }
                    continue;
                }
            }
            self.s.rounds_scheduled = self.s.rounds_scheduled.saturating_sub(1);
        }
        Ok(())
    }
}
