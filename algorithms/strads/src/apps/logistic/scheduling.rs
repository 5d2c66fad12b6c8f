//! The scheduled logistic job's scheduler half: the Lasso scheduler's coordinate choice, commits
//! of the pulled coefficients, held-out and stopping figures, checkpoints and dynamic deals.

use super::{LogisticApp, LogisticPartial, LogisticTask, logistic_lambda};
use crate::apps::lasso::Balance;
use crate::apps::lasso::heldout::{CommitLog, HeldoutFigures, LinearHeldout};
use crate::apps::lasso::metrics::common_applied;
use crate::apps::lasso::wire::LassoCommit;
use crate::apps::lasso::{LassoSettings, linear_model, write_coefficients};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Schedule, Step, decode_state, encode_state};
use crate::core::balance::{DealGate, RowDealer, RowDealing, deal_step, gate};
use crate::core::logistic::pull;
use crate::core::scheduler::{LassoScheduler, SchedulerState};
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// What a [`LogisticScheduling`] changes while running (a round checkpoint holds it, with
/// the coordinate scheduler's state, taken with nothing in flight).
#[derive(Clone, Default, Serialize, Deserialize)]
struct LogisticSchedulingState {
    coefficients: Vec<f32>,
    l1_after: Vec<f64>,
    updates_after: Vec<u64>,
    l1: f64,
    updates: u64,
    scheduled: u64,
    metrics: LogisticMetrics,
}

/// One point of the trace: the state after `updates` coordinate updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticPoint {
    /// The round.
    pub round: u64,
    /// Coordinate updates reflected.
    pub updates: u64,
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// Loss plus L1 penalty.
    pub objective: f64,
    /// Fraction of rows classified right.
    pub training_accuracy: f64,
    /// Held-out figures of the same state (with `test_data`): `heldout_accuracy`,
    /// `heldout_log_loss`, `heldout_objective`.
    #[serde(default)]
    pub heldout: HeldoutFigures,
}

/// `metrics.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LogisticMetrics {
    /// Schedule mode.
    pub mode: String,
    /// The L1 weight.
    pub lambda: f32,
    /// Rows.
    pub n_samples: usize,
    /// Features.
    pub n_features: usize,
    /// Workers.
    pub workers: usize,
    /// Rounds run.
    pub rounds: u64,
    /// Coordinate updates.
    pub updates: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// Last objective.
    pub final_objective: f64,
    /// Last training accuracy.
    pub final_training_accuracy: f64,
    /// Non-zero coefficients.
    pub nonzeros: usize,
    /// Per-round trace.
    pub trace: Vec<LogisticPoint>,
    /// With `balance = "dynamic"`: how the rows were dealt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<RowDealing>,
}

/// Scheduler half.
pub struct LogisticScheduling {
    scheduler: LassoScheduler,
    lambda: f32,
    max_rounds: u64,
    /// The coordinates of each round in flight (`None`: a deal).
    in_flight: VecDeque<(u64, Option<Vec<usize>>)>,
    s: LogisticSchedulingState,
    /// The test set (`test_data`): held-out figures at every point of the trace.
    heldout: Option<LinearHeldout>,
    /// Old values of the commits a partial may not reflect yet (with `heldout` only).
    commit_log: CommitLog,
    /// The digest of the data it was built from (compared with the workers' before the
    /// first round).
    pub(super) data_digest: Option<u64>,
    /// The rows' dealer with `balance = "dynamic"`.
    dealer: Option<RowDealer>,
    /// With `balance = "dynamic"`: the coefficients as the workers sum the commits, for
    /// the workers that join.
    committed: Vec<f64>,
}

impl LogisticScheduling {
    /// The job's `lambda` is absolute (default: `lambda_fraction` of `max_j |x_j^T y| / 2`,
    /// the smallest lambda with an all-zero solution for +-1 labels at b = 0).
    pub fn new(
        x: &SparseColumns,
        labels: &[f32],
        job: &LassoSettings,
        workers: usize,
    ) -> Result<Self, StradsError> {
        let job = &job.resolved_for(x, workers);
        let lambda = logistic_lambda(x, labels, job);
        let heldout = LinearHeldout::of(
            job,
            petrel_ml::model::LinearTask::BinaryClassification,
            lambda,
        )?;
        let shared = Arc::new(x.clone());
        let dealer = RowDealer::of(job.balance == Balance::Dynamic, x.n_rows, workers)?;
        Ok(LogisticScheduling {
            scheduler: job.coordinate_scheduler(shared)?,
            lambda,
            max_rounds: job.max_rounds,
            in_flight: VecDeque::new(),
            s: LogisticSchedulingState {
                coefficients: vec![0.0; x.n_columns()],
                l1_after: vec![0.0],
                updates_after: vec![0],
                metrics: LogisticMetrics {
                    workers,
                    final_training_accuracy: f64::NAN,
                    ..LogisticMetrics::at_start(
                        job.mode.name(),
                        lambda,
                        x.n_rows,
                        x.n_columns(),
                        f64::NAN,
                    )
                },
                ..LogisticSchedulingState::default()
            },
            heldout,
            commit_log: CommitLog::default(),
            data_digest: None,
            committed: match dealer {
                Some(_) => vec![0.0; x.n_columns()],
                None => Vec::new(),
            },
            dealer,
        })
    }

    /// The coefficients so far.
    pub fn coefficients(&self) -> &[f32] {
        &self.s.coefficients
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &LogisticMetrics {
        &self.s.metrics
    }

    /// The pull of a deal round: no update, an empty commit (so the commit counts stay
    /// those of the scheduler's records).
    fn pull_deal(
        &mut self,
        round: u64,
        partials: &[LogisticPartial],
        elapsed: Duration,
    ) -> Result<LassoCommit, StradsModelError> {
        if partials.iter().any(|p| !p.gradient.is_empty()) {
            return Err(StradsModelError::protocol(format!(
                "round {round}: an update answer to a deal"
            )));
        }
        self.s.l1_after.push(self.s.l1);
        self.s.updates_after.push(self.s.updates);
        if self.heldout.is_some() {
            self.commit_log.push(Vec::new());
        }
        self.s.metrics.rounds = round + 1;
        self.s.metrics.elapsed_s = elapsed.as_secs_f64();
        self.dealt(elapsed, true);
        Ok(LassoCommit::default())
    }

    /// Tells the dealer a round was pulled, and keeps its report in the metrics.
    fn dealt(&mut self, elapsed: Duration, deal: bool) {
        if let Some(dealer) = &mut self.dealer {
            dealer.pulled(elapsed.as_secs_f64(), deal);
            self.s.metrics.balance = Some(dealer.report());
        }
    }
}

impl Schedule<LogisticApp> for LogisticScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LogisticTask> {
        // One extra (empty-effect) round at the end measures the final state.
        if self.s.scheduled > self.max_rounds {
            return Step::Done;
        }
        // No deal before the final measuring round.
        if self.s.scheduled < self.max_rounds {
            let deal_in_flight = self.in_flight.iter().any(|(_, v)| v.is_none());
            let idle = in_flight == 0 && self.in_flight.is_empty();
            match gate(self.dealer.as_mut(), round, deal_in_flight, idle) {
                DealGate::Wait => return Step::Wait,
                DealGate::Deal(ranges) => {
                    self.in_flight.push_back((round, None));
                    return deal_step(ranges, |start, end| LogisticTask::Deal {
                        start,
                        end,
                        join: None,
                    });
                }
                DealGate::Proceed => {}
            }
        }
        let vars: Vec<usize> = if self.s.scheduled == self.max_rounds {
            Vec::new()
        } else {
            // In-flight coordinates are never chosen again, and the dependency check
            // keeps new ones away from them as from each other.
            let in_flight: Vec<usize> = self
                .in_flight
                .iter()
                .flat_map(|(_, v)| v.iter().flatten())
                .copied()
                .collect();
            self.scheduler.next_round_around(&in_flight)
        };
        if vars.is_empty() && self.s.scheduled < self.max_rounds && in_flight > 0 {
            return Step::Wait;
        }
        if self.s.scheduled == self.max_rounds && in_flight > 0 {
            return Step::Wait;
        }
        self.s.scheduled += 1;
        let task = LogisticTask::Update {
            vars: vars.iter().map(|&j| j as u32).collect(),
            values: vars.iter().map(|&j| self.s.coefficients[j]).collect(),
        };
        self.in_flight.push_back((round, Some(vars)));
        Step::Run(Plan::All(task))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LogisticPartial>,
        elapsed: Duration,
    ) -> Result<LassoCommit, StradsModelError> {
        let Some(vars) = crate::core::pop_in_flight(&mut self.in_flight, round)? else {
            return self.pull_deal(round, &partials, elapsed);
        };
        let mut g = vec![0.0f32; vars.len()];
        let mut h = vec![0.0f32; vars.len()];
        let (mut loss, mut correct, mut rows) = (0.0, 0u64, 0u64);
        let mut applied = Vec::new();
        for (index, p) in partials.iter().enumerate() {
            if p.gradient.len() != vars.len() || p.curvature.len() != vars.len() {
                return Err(StradsModelError::DimensionMismatch(format!(
                    "round {round}: partials do not match the vars"
                )));
            }
            g.iter_mut().zip(&p.gradient).for_each(|(s, v)| *s += v);
            h.iter_mut().zip(&p.curvature).for_each(|(s, v)| *s += v);
            loss += p.loss;
            correct += p.correct;
            rows += p.rows;
            applied.push(p.applied);
            if let Some(dealer) = &mut self.dealer {
                dealer.observe(index, p.busy_s);
            }
        }
        let a = common_applied(applied.into_iter())?;
        if let Some(&l1) = self.s.l1_after.get(a as usize) {
            let objective = loss + f64::from(self.lambda) * l1;
            let accuracy = correct as f64 / rows.max(1) as f64;
            // The partials describe the state after `a` commits: the held-out figures of
            // that same state.
            let heldout = match &self.heldout {
                Some(h) => {
                    let at = self.commit_log.values_at(a);
                    h.figures(&self.s.coefficients, &at, l1)
                }
                None => HeldoutFigures::new(),
            };
            let node = petrel_observe::thread_node();
            petrel_observe::metrics()
                .job
                .point(&node, "objective", elapsed, objective);
            self.s.metrics.trace.push(LogisticPoint {
                round,
                updates: self.s.updates_after[a as usize],
                elapsed_s: elapsed.as_secs_f64(),
                objective,
                training_accuracy: accuracy,
                heldout,
            });
            self.s.metrics.final_objective = objective;
            self.s.metrics.final_training_accuracy = accuracy;
        }
        let values: Vec<f32> = vars.iter().map(|&j| self.s.coefficients[j]).collect();
        let new_values = pull(&values, &g, &h, self.lambda);
        let mut deltas = Vec::with_capacity(vars.len());
        let mut changes = Vec::with_capacity(vars.len());
        let mut old_values = Vec::new();
        for (&j, &value) in vars.iter().zip(&new_values) {
            let old = self.s.coefficients[j];
            self.s.l1 += f64::from(value.abs()) - f64::from(old.abs());
            self.s.coefficients[j] = value;
            deltas.push(value - old);
            changes.push((j, value - old));
            if self.heldout.is_some() && value != old {
                old_values.push((j, old));
            }
        }
        if self.heldout.is_some() {
            self.commit_log.push(old_values);
        }
        self.scheduler.commit(&changes);
        crate::kit::dealing::add_changes(&mut self.committed, &changes);
        self.s.updates += vars.len() as u64;
        self.s.l1_after.push(self.s.l1);
        self.s.updates_after.push(self.s.updates);
        self.s.metrics.rounds = round + 1;
        self.s.metrics.updates = self.s.updates;
        self.s.metrics.elapsed_s = elapsed.as_secs_f64();
        self.s.metrics.nonzeros = self.s.coefficients.iter().filter(|v| **v != 0.0).count();
        self.dealt(elapsed, false);
        Ok(LassoCommit {
            vars: vars.iter().map(|&j| j as u32).collect(),
            deltas,
        })
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        crate::core::check_drained(!self.in_flight.is_empty())?;
        encode_state(&(self.scheduler.export_state(), &self.s))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let (scheduler, s): (SchedulerState, LogisticSchedulingState) = decode_state(state)?;
        crate::core::check_sizes(&[
            (
                "coefficients",
                s.coefficients.len(),
                self.s.coefficients.len(),
            ),
            ("commit records", s.l1_after.len(), s.updates_after.len()),
        ])?;
        self.scheduler.import_state(&scheduler)?;
        self.s = s;
        self.in_flight.clear();
        self.commit_log.reset(self.s.l1_after.len() as u64 - 1);
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    /// With `balance = "dynamic"`, a deal round over the changed workers (joiners get the
    /// coefficients); nothing from the final measuring round on, unless a worker died (its
    /// rows need an owner).
    fn reshape(
        &mut self,
        round: u64,
        change: &crate::core::roster::Reshape,
    ) -> Result<Option<Step<LogisticTask>>, StradsModelError> {
        if self.s.scheduled >= self.max_rounds && change.lost.is_empty() {
            return Ok(None);
        }
        let model = (self.committed.as_slice(), self.s.l1_after.len() as u64 - 1);
        let dealer = self.dealer.as_mut();
        let step = crate::kit::dealing::change_deal(dealer, round, change, model, |rows, join| {
            LogisticTask::Deal {
                start: rows.start,
                end: rows.end,
                join,
            }
        })?;
        self.in_flight.push_back((round, None));
        Ok(Some(step))
    }

    /// Forgets the given-up rounds: an update (or the final measuring round) is
    /// scheduled again, a change's deal is not recorded.
    fn lost(&mut self, rounds: &[u64]) -> Result<(), StradsModelError> {
        let kinds = crate::core::take_lost(&mut self.in_flight, rounds)?;
        for (round, vars) in rounds.iter().zip(kinds) {
            match (vars, &mut self.dealer) {
                (Some(_), _) => self.s.scheduled = self.s.scheduled.saturating_sub(1),
                (None, Some(dealer)) => dealer.forget_change(*round),
                (None, None) => {}
            }
        }
        Ok(())
    }
}

/// Writes `coefficients.tsv` and `metrics.json`.
pub fn write_outputs(
    dir: &std::path::Path,
    sched: &LogisticScheduling,
    job: &LassoSettings,
) -> Result<(), StradsError> {
    let m = sched.metrics().run_metrics(job);
    write_model(dir, job, sched.lambda, sched.coefficients(), m)
}

/// Writes a logistic model's outputs (every solver's): `coefficients.tsv`, the saved model
/// and `metrics.json` (`run`, with the held-out figures of the test set when set).
pub(crate) fn write_model(
    dir: &std::path::Path,
    job: &LassoSettings,
    lambda: f32,
    coefficients: &[f32],
    mut run: petrel_ml::job::RunMetrics,
) -> Result<(), StradsError> {
    run.check_finite("check the data for extreme or non-finite values")?;
    let saved = linear_model("logistic", job, lambda, coefficients)?;
    saved.add_heldout(&mut run, job.test_data.as_deref(), job.seed)?;
    write_coefficients(dir, coefficients)?;
    crate::kit::write_saved_model(dir, &saved)?;
    crate::kit::write_run_metrics(dir, &run)
}

impl LogisticMetrics {
    /// The metrics of a run of `mode` that has not started: no round, no trace.
    pub fn at_start(
        mode: &str,
        lambda: f32,
        n_samples: usize,
        n_features: usize,
        objective: f64,
    ) -> Self {
        LogisticMetrics {
            mode: mode.into(),
            lambda,
            n_samples,
            n_features,
            final_objective: objective,
            ..LogisticMetrics::default()
        }
    }

    /// The one metrics format: a record per round of the trace; logistic regression runs
    /// `max_rounds` rounds (it has no convergence test).
    pub fn run_metrics(&self, job: &LassoSettings) -> petrel_ml::job::RunMetrics {
        let mut m = petrel_ml::job::RunMetrics::new("logistic", job, self, self.elapsed_s);
        for p in &self.trace {
            let mut values = vec![
                ("objective", p.objective),
                ("training_accuracy", p.training_accuracy),
            ];
            values.extend(p.heldout.iter().map(|(k, v)| (k.as_str(), *v)));
            m.record(p.round, p.elapsed_s, &values);
        }
        m.finals(&[
            ("objective", self.final_objective),
            ("training_accuracy", self.final_training_accuracy),
            ("nonzeros", self.nonzeros as f64),
            ("rounds", self.rounds as f64),
        ]);
        m.converged = false;
        let limit = match job.max_rounds {
            0 => "automatic".to_string(),
            n => n.to_string(),
        };
        m.stop_reason = format!(
            "ran {} rounds, the round limit (max_rounds = {limit}; the scheduled run has no convergence test)",
            self.rounds
        );
        m
    }
}
