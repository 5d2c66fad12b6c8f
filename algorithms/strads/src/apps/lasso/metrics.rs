//! What the Lasso scheduler measures and writes: the objective trace, the exact
//! evaluations (KKT violation, duality gap) computed from the workers' `Evaluate` partials,
//! `metrics.json` and `coefficients.tsv`.

use super::config::LassoSettings;
use super::wire::LassoPartial;
use crate::core::StradsModelError;
pub use crate::core::balance::RowDealing;
use crate::core::lasso::{dual_scale, kkt_violation};
use crate::error::StradsError;
use crate::kit::{write_output, write_run_metrics};
use petrel_ml::job::RunMetrics;
use serde::{Deserialize, Serialize};

/// One point of the objective trace: the state after `updates` coordinate updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectivePoint {
    /// The round.
    pub round: u64,
    /// Coordinate updates reflected.
    pub updates: u64,
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// `1/2 ||r||^2 + lambda ||b||_1`.
    pub objective: f64,
}

/// An exact evaluation (pipeline drained).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The evaluation round.
    pub round: u64,
    /// Coordinate updates reflected.
    pub updates: u64,
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// The objective.
    pub objective: f64,
    /// Max KKT violation.
    pub kkt_violation: f64,
    /// Duality gap.
    pub duality_gap: f64,
    /// Non-zero coefficients.
    pub nonzeros: usize,
    /// Held-out figures of these coefficients (with `test_data`): `heldout_mse`,
    /// `heldout_r2`, ... as in the final figures.
    #[serde(default)]
    pub heldout: std::collections::BTreeMap<String, f64>,
}

impl Evaluation {
    /// The record of the evaluation `e` of `round`, after `updates` updates.
    pub(crate) fn of(
        round: u64,
        updates: u64,
        elapsed_s: f64,
        e: &EvalNumbers,
        heldout: std::collections::BTreeMap<String, f64>,
    ) -> Self {
        Evaluation {
            round,
            updates,
            elapsed_s,
            objective: e.objective,
            kkt_violation: e.kkt_violation,
            duality_gap: e.duality_gap,
            nonzeros: e.nonzeros,
            heldout,
        }
    }
}

/// `metrics.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LassoMetrics {
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
    /// Coordinates per round.
    pub block_size: usize,
    /// Dependency-check threshold.
    pub rho: Option<f32>,
    /// Pipeline depth.
    pub depth: usize,
    /// Rounds run.
    pub rounds: u64,
    /// Coordinate updates.
    pub updates: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// Objective at the last evaluation.
    pub final_objective: f64,
    /// KKT violation at the last evaluation.
    pub final_kkt_violation: f64,
    /// Duality gap at the last evaluation.
    pub final_duality_gap: f64,
    /// Updates / seconds at which `target_objective` was first reached.
    pub target_objective: Option<f64>,
    /// Updates when `target_objective` was reached.
    pub target_updates: Option<u64>,
    /// Seconds when `target_objective` was reached.
    pub target_s: Option<f64>,
    /// Per-round objective trace.
    pub objective: Vec<ObjectivePoint>,
    /// The exact evaluations.
    pub evaluations: Vec<Evaluation>,
    /// Rounds at which checkpoints were written (including before a resume).
    #[serde(default)]
    pub checkpoints: Vec<u64>,
    /// The checkpoint round this run resumed from.
    #[serde(default)]
    pub resumed_from_round: Option<u64>,
    /// Where the rounds' time went.
    #[serde(default)]
    pub profile: RoundProfile,
    /// With `balance = "dynamic"`: how the rows were dealt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<RowDealing>,
}

impl LassoMetrics {
    /// The figures of a run that has not started: the problem's shape and settings, no
    /// rounds, NaN final figures, empty traces. Callers set the schedule's own fields
    /// (`block_size`, `rho`, `depth`) with struct-update syntax.
    pub fn at_start(
        mode: String,
        lambda: f32,
        shape: (usize, usize),
        workers: usize,
        target_objective: Option<f64>,
    ) -> Self {
        LassoMetrics {
            mode,
            lambda,
            n_samples: shape.0,
            n_features: shape.1,
            workers,
            depth: 1,
            final_objective: f64::NAN,
            final_kkt_violation: f64::NAN,
            final_duality_gap: f64::NAN,
            target_objective,
            ..LassoMetrics::default()
        }
    }
}

/// Where a run's time went, in seconds. Scheduler
/// parts are timed by the scheduler half; worker parts are the slowest worker's cumulative
/// compute as it reported it with its last update answer; `wall_s` is the run's time, and
/// what the parts do not explain is messaging and waiting (with `depth > 1` the parts
/// overlap, so the rest can be negative).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundProfile {
    /// Update rounds pulled.
    pub update_rounds: u64,
    /// Evaluation rounds pulled.
    pub eval_rounds: u64,
    /// Scheduler: drawing candidates (priority sampling).
    pub sample_s: f64,
    /// Scheduler: the dependency check.
    pub filter_s: f64,
    /// Scheduler: summing partials, soft-thresholding, bookkeeping (update rounds).
    pub pull_s: f64,
    /// Scheduler: combining evaluation partials.
    pub eval_pull_s: f64,
    /// Slowest worker: pushes.
    pub worker_push_s: f64,
    /// Slowest worker: applying commits.
    pub worker_commit_s: f64,
    /// Slowest worker: evaluations.
    pub worker_eval_s: f64,
    /// The run's wall time.
    pub wall_s: f64,
    /// Mean wall time of an update round (`wall_s / rounds`).
    pub round_latency_ms: f64,
    /// `wall_s` minus the scheduler's and the slowest worker's compute: messages, waiting.
    pub messaging_s: f64,
    /// Peak resident memory of the scheduler's process, in MB.
    #[serde(default)]
    pub scheduler_peak_rss_mb: f64,
    /// Largest peak resident memory a worker process reported, in MB.
    #[serde(default)]
    pub worker_peak_rss_mb: f64,
    /// The compute on the rounds' critical path: per round, the slowest worker's compute
    /// since its previous answer plus the scheduler's pull, summed. What the run would
    /// take if messages and waiting cost nothing (Gauss-Seidel solver; 0 elsewhere).
    #[serde(default)]
    pub critical_compute_s: f64,
    /// [`Self::critical_compute_s`] up to the round that reached the target objective.
    #[serde(default)]
    pub critical_compute_to_target_s: Option<f64>,
}

/// This process's peak resident memory (`VmHWM`) in MB; 0 where `/proc` has none.
pub fn peak_rss_mb() -> f64 {
    petrel_observe::process::peak_rss_mb(None).unwrap_or(0.0)
}

impl RoundProfile {
    /// Fills the derived fields from the measured ones.
    pub fn finish(&mut self, wall_s: f64) {
        self.wall_s = wall_s;
        let rounds = (self.update_rounds + self.eval_rounds).max(1);
        self.round_latency_ms = 1e3 * wall_s / rounds as f64;
        self.messaging_s = wall_s
            - (self.sample_s + self.filter_s + self.pull_s + self.eval_pull_s)
            - (self.worker_push_s + self.worker_commit_s + self.worker_eval_s);
    }
}

/// The finished model.
#[derive(Debug, Clone, PartialEq)]
pub struct LassoOutcome {
    /// Coefficients by feature.
    pub coefficients: Vec<f32>,
    /// `metrics.json`.
    pub metrics: LassoMetrics,
}

impl LassoOutcome {
    /// Writes `coefficients.tsv` (`feature<TAB>value` for every feature, numbered 1-based
    /// like LIBSVM indices), `history.csv` and `metrics.json` ([`RunMetrics`] of `job`,
    /// the Lasso's own figures beside the common ones); nothing if a figure diverged.
    pub fn write(&self, dir: &std::path::Path, job: &LassoSettings) -> Result<(), StradsError> {
        self.write_with(dir, job, &self.metrics)
    }

    /// [`LassoOutcome::write`] with other details (the multi-scheduler figures).
    pub fn write_with(
        &self,
        dir: &std::path::Path,
        job: &LassoSettings,
        details: &impl Serialize,
    ) -> Result<(), StradsError> {
        let mut m = self.metrics.run_metrics(job, details);
        m.check_finite(LASSO_ADVICE)?;
        let saved = linear_model("lasso", job, self.metrics.lambda, &self.coefficients)?;
        saved.add_heldout(&mut m, job.test_data.as_deref(), job.seed)?;
        write_coefficients(dir, &self.coefficients)?;
        crate::kit::write_saved_model(dir, &saved)?;
        write_run_metrics(dir, &m)
    }
}

const LASSO_ADVICE: &str = "check the data for extreme or non-finite values, or scale the features";

impl LassoMetrics {
    /// Logs the exact evaluation `e` as `what` and records it, as the final figures too.
    pub(crate) fn record_evaluation(&mut self, e: Evaluation, what: &str) {
        tracing::info!(
            round = e.round,
            updates = e.updates,
            objective = format!("{:.6}", e.objective),
            kkt = format!("{:.3e}", e.kkt_violation),
            gap = format!("{:.3e}", e.duality_gap),
            nonzeros = e.nonzeros,
            "{what}"
        );
        self.final_objective = e.objective;
        self.final_kkt_violation = e.kkt_violation;
        self.final_duality_gap = e.duality_gap;
        self.evaluations.push(e);
    }

    /// Records the first time `objective` reaches `target` (after `updates` updates, at
    /// `elapsed_s`); true then.
    pub(crate) fn reach_target(
        &mut self,
        target: Option<f64>,
        objective: f64,
        updates: u64,
        elapsed_s: f64,
    ) -> bool {
        let reached = self.target_updates.is_none() && target.is_some_and(|t| objective <= t);
        if reached {
            self.target_updates = Some(updates);
            self.target_s = Some(elapsed_s);
        }
        reached
    }

    /// Duality gap / objective at the end (what `gap_tolerance` bounds).
    pub fn relative_gap(&self) -> f64 {
        self.final_duality_gap / self.final_objective.abs().max(f64::MIN_POSITIVE)
    }

    /// The one metrics format: a record per exact evaluation, `converged` when the
    /// relative duality gap met `gap_tolerance` (or the target objective was reached)
    /// before `max_rounds`.
    pub fn run_metrics(&self, job: &LassoSettings, details: &impl Serialize) -> RunMetrics {
        let mut m = RunMetrics::new("lasso", job, details, self.elapsed_s);
        for e in &self.evaluations {
            let rel = e.duality_gap / e.objective.abs().max(f64::MIN_POSITIVE);
            let mut values = vec![
                ("objective", e.objective),
                ("kkt_violation", e.kkt_violation),
                ("duality_gap", e.duality_gap),
                ("relative_gap", rel),
                ("nonzeros", e.nonzeros as f64),
            ];
            values.extend(e.heldout.iter().map(|(k, v)| (k.as_str(), *v)));
            m.record(e.round, e.elapsed_s, &values);
        }
        let rel = self.relative_gap();
        m.finals(&[
            ("objective", self.final_objective),
            ("kkt_violation", self.final_kkt_violation),
            ("duality_gap", self.final_duality_gap),
            ("relative_gap", rel),
            ("rounds", self.rounds as f64),
            ("updates", self.updates as f64),
        ]);
        let tolerance = job.gap_tolerance.filter(|t| *t > 0.0);
        let met = tolerance.is_some_and(|t| rel <= t);
        let target = self.target_updates.is_some();
        m.converged = met || target;
        m.stop_reason = match (met, target, tolerance) {
            (true, _, Some(t)) => format!("relative duality gap {rel:.3e} <= gap_tolerance {t:e}"),
            (_, true, _) => "reached target_objective".to_string(),
            (_, _, Some(t)) => format!(
                "stopped at the iteration limit (max_rounds = {}) before gap_tolerance {t:e}: relative duality gap {rel:.3e}; raise max_rounds or loosen gap_tolerance",
                job.max_rounds
            ),
            _ => format!("ran max_rounds = {} (no gap_tolerance)", job.max_rounds),
        };
        m
    }
}

/// The saved model of a Lasso (`app = "lasso"`) or sparse logistic regression
/// (`"logistic"`) run: its L1 weight and coefficients (no intercept is fitted).
pub fn linear_model(
    app: &str,
    job: &LassoSettings,
    lambda: f32,
    coefficients: &[f32],
) -> Result<petrel_ml::model::SavedModel, StradsError> {
    use petrel_ml::model::{LinearModel, LinearTask, ModelParams, SavedModel};
    let task = if app == "logistic" {
        job.loss.unwrap_or_default().task()
    } else {
        LinearTask::Regression
    };
    Ok(SavedModel::new(
        app,
        job,
        ModelParams::Linear(LinearModel {
            task,
            lambda: f64::from(lambda),
            intercept: job.intercept(coefficients)?,
            coefficients: coefficients.to_vec(),
        }),
    ))
}

/// Writes `coefficients.tsv`: `feature<TAB>value` for every feature, numbered 1-based like
/// LIBSVM indices (Lasso and sparse logistic regression).
pub fn write_coefficients(dir: &std::path::Path, coefficients: &[f32]) -> Result<(), StradsError> {
    let mut text = String::with_capacity(coefficients.len() * 12);
    for (j, v) in coefficients.iter().enumerate() {
        text.push_str(&format!("{}\t{v}\n", j + 1));
    }
    write_output(dir, "coefficients.tsv", text.as_bytes())
}

/// The commit count every worker reports; they must agree (they see the same message
/// sequence).
pub fn common_applied(applied: impl Iterator<Item = u64>) -> Result<u64, StradsModelError> {
    let all: Vec<u64> = applied.collect();
    match all.first() {
        Some(&a) if all.iter().all(|&b| b == a) => Ok(a),
        _ => Err(StradsModelError::protocol(format!(
            "workers report different commit counts {all:?}"
        ))),
    }
}

/// The numbers of an exact evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalNumbers {
    /// The objective.
    pub objective: f64,
    /// Max KKT violation.
    pub kkt_violation: f64,
    /// Duality gap.
    pub duality_gap: f64,
    /// `||b||_1`.
    pub l1: f64,
    /// Non-zero coefficients.
    pub nonzeros: usize,
}

/// Sums the workers' `Evaluate` partials and computes the objective, KKT violation and
/// duality gap of `coefficients` (the whole model). Returns the common applied count too.
pub fn combine_evaluation(
    partials: &[LassoPartial],
    coefficients: &[f32],
    lambda: f32,
) -> Result<(EvalNumbers, u64), StradsModelError> {
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
            return Err(StradsModelError::protocol("update answer to an evaluation"));
        };
        crate::core::check_sizes(&[("entries of X^T r", x_t_residual.len(), d)])?;
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
