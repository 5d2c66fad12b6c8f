//! What the apps that evaluate the tables on a timer share (ps-mf, ps-lr): the curve, the
//! target and time stop rule, the monitor's checkpoint, and the run's output files.

use std::path::Path;
use std::time::{Duration, Instant};

use petrel_ml::job::{FinishError, RunMetrics};
use petrel_ml::model::{MODEL_FILE, SavedModel};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::core::stats::StalenessStats;
use crate::core::types::{Row, RowId, TableId};
use crate::error::PsError;
use crate::kit::{MonitorCtx, WorkerDone};

/// A point of an evaluated curve.
pub trait EvalPoint: Copy {
    /// The min clock over the shards when it was taken.
    fn clock(&self) -> u64;
    /// The figure the stop rule and the job's progress follow (name, value).
    fn headline(&self) -> (&'static str, f64);
}

/// The merged tables of a snapshot.
pub type Tables = std::collections::HashMap<TableId, std::collections::HashMap<RowId, Row>>;

/// An evaluating monitor's state: the curve, when the target was first reached (seconds,
/// clock), and the workers' final reports.
#[derive(Debug, Serialize, Deserialize)]
pub struct EvalMonitor<P> {
    /// One point per evaluation, the first one the initial model's (step 0).
    pub curve: Vec<P>,
    /// When the target was first reached.
    pub reached: Option<(f64, u64)>,
    /// The workers' final reports.
    #[serde(skip)]
    pub reports: Vec<WorkerDone>,
}

impl<P> Default for EvalMonitor<P> {
    fn default() -> Self {
        EvalMonitor {
            curve: Vec::new(),
            reached: None,
            reports: Vec::new(),
        }
    }
}

impl<P: EvalPoint + Serialize + DeserializeOwned> EvalMonitor<P> {
    /// One evaluation: first `initial` (the model before any update, whatever the workers
    /// did before this first snapshot), then `eval` of the tables at `(seconds, clock)`.
    /// Asks the workers to stop once `reached` holds or `max_seconds` passed.
    #[allow(clippy::too_many_arguments)] // the app's three figures and its limits
    pub async fn observe(
        &mut self,
        ctx: &MonitorCtx<'_>,
        reports: Vec<WorkerDone>,
        all_done: bool,
        max_seconds: f64,
        initial: impl FnOnce() -> P,
        eval: impl FnOnce(Tables, f64, u64) -> P,
        reached: impl Fn(&P) -> bool,
    ) -> Result<Option<String>, PsError> {
        self.reports.extend(reports);
        if self.curve.is_empty() {
            self.curve.push(initial());
        }
        let (tables, clock) = ctx.tables().await?;
        let t = ctx.elapsed_s();
        let p = eval(tables, t, clock);
        let (name, value) = p.headline();
        ctx.progress(name, value);
        self.curve.push(p);
        if self.reached.is_none() && reached(&p) {
            self.reached = Some((t, clock));
        }
        Ok(if all_done {
            None
        } else if self.reached.is_some() {
            Some(format!(
                "target reached ({name} {value:.4} at clock {clock})"
            ))
        } else if t >= max_seconds {
            Some(format!("max_seconds {max_seconds} passed"))
        } else {
            None
        })
    }

    /// The monitor's checkpoint at `clock`: the curve up to it (the resumed run evaluates
    /// later clocks again).
    pub fn save(&self, clock: u64) -> Result<Vec<u8>, PsError> {
        encode(&EvalMonitor::<P> {
            curve: self
                .curve
                .iter()
                .copied()
                .filter(|p| p.clock() <= clock)
                .collect(),
            reached: self.reached.filter(|r| r.1 <= clock),
            reports: Vec::new(),
        })
    }

    /// The final reports in worker order and their merged staleness.
    pub fn sorted_reports(&mut self) -> StalenessStats {
        self.reports.sort_by_key(|r| r.worker);
        let mut st = StalenessStats::new();
        for r in &self.reports {
            st.merge(&r.staleness);
        }
        st
    }

    /// Min clock when the target was reached, else at the last evaluation.
    pub fn iterations(&self) -> u64 {
        self.reached
            .map_or(self.curve.last().map_or(0, |p| p.clock()), |r| r.1)
    }
}

/// msgpack bytes of a checkpoint piece.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, PsError> {
    rmp_serde::to_vec(value)
        .map_err(|e| crate::core::error::PsCoreError::Encode(e.to_string()).into())
}

/// A checkpoint piece from its msgpack bytes (`what` names it in the error).
pub(crate) fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, PsError> {
    rmp_serde::from_slice(bytes).map_err(|e| {
        crate::core::error::PsCoreError::Checkpoint {
            path: what.to_string(),
            reason: format!("decode: {e}"),
        }
        .into()
    })
}

/// Sleeps until `due` after `start`: an emulated compute time that the real one did not
/// fill.
pub async fn pad_to(start: Instant, due: Duration) {
    let spent = start.elapsed();
    if spent < due {
        tokio::time::sleep(due - spent).await;
    }
}

/// Writes a run's files into `dir` (nothing without one) with [`RunMetrics::finish_run`]:
/// the saved model `petrel eval` reads (the held-out figures of `test_data` go into `run`),
/// `model.json`, `history.csv` and `metrics.json`; nothing once a figure diverged (the
/// error names it, with `advice`).
#[allow(clippy::too_many_arguments)] // what a run writes, each from its own setting
pub fn write_run<M: Serialize>(
    dir: Option<&Path>,
    saved: impl FnOnce() -> SavedModel,
    test_data: Option<&Path>,
    seed: u64,
    model: &M,
    mut run: RunMetrics,
    advice: &str,
) -> Result<(), PsError> {
    let Some(dir) = dir else {
        return Ok(run.check_finite(advice)?);
    };
    let saved = saved();
    saved.add_heldout(&mut run, test_data, seed)?;
    let model = to_json("model.json", model)?;
    finish(
        dir,
        &run,
        &[
            (MODEL_FILE, &to_json(MODEL_FILE, &saved)?),
            ("model.json", &model),
        ],
        advice,
    )
}

/// `value` as compact JSON.
pub(crate) fn to_json<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, PsError> {
    serde_json::to_vec(value).map_err(|source| PsError::Json { what, source })
}

/// [`RunMetrics::finish_run`] with the PS's errors.
pub(crate) fn finish(
    dir: &Path,
    run: &RunMetrics,
    files: &[(&str, &[u8])],
    advice: &str,
) -> Result<(), PsError> {
    run.finish_run(dir, files, advice).map_err(|e| match e {
        FinishError::Diverged(d) => PsError::Diverged(d),
        FinishError::Write(w) => PsError::Write {
            path: w.path,
            source: w.source,
        },
    })
}
