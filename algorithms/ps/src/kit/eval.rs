//! What apps that evaluate the tables every `eval_every` clocks share (ps-mf, ps-lr): the
//! curve, the stop rule, the monitor's checkpoint and the output files.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use petrel_ml::MlError;
use petrel_ml::job::RunMetrics;
use petrel_ml::model::{MODEL_FILE, SavedModel};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::checkpoint::encode;
use crate::core::shard::TableSnapshot;
use crate::core::stats::StalenessStats;
use crate::core::types::{Row, RowId, TableId};
use crate::error::PsError;
use crate::kit::{MonitorCtx, MonitorState, WorkerDone};
use crate::shells::merge_snapshots;

/// A point of an evaluated curve.
pub trait EvalPoint: Copy {
    /// The min clock over the shards when it was taken.
    fn clock(&self) -> u64;
    /// The figure the stop rule and the job's progress follow (name, value).
    fn headline(&self) -> (&'static str, f64);
}

/// The merged tables of a snapshot.
pub type Tables = std::collections::HashMap<TableId, std::collections::HashMap<RowId, Row>>;

/// An evaluating monitor's state: the curve, the target, final reports and pending cuts.
#[derive(Debug, Serialize, Deserialize)]
pub struct EvalMonitor<P> {
    /// One point per evaluated clock: step 0, every multiple of `eval_every`, the last clock.
    pub curve: Vec<P>,
    /// When the target was first reached.
    pub reached: Option<(f64, u64)>,
    /// The workers' final reports.
    #[serde(skip)]
    pub reports: Vec<WorkerDone>,
    /// Evaluation cuts some shards have sent, by clock: each shard's tables.
    #[serde(skip)]
    pending: BTreeMap<u64, Vec<Vec<TableSnapshot>>>,
}

impl<P> Default for EvalMonitor<P> {
    fn default() -> Self {
        EvalMonitor {
            curve: Vec::new(),
            reached: None,
            reports: Vec::new(),
            pending: BTreeMap::new(),
        }
    }
}

impl<P: EvalPoint + Serialize + DeserializeOwned> EvalMonitor<P> {
    /// One evaluation: `eval` of the initial model first (step 0: empty tables, every row at
    /// its initial value), then of every evaluation cut all shards completed and, once
    /// `all_done`, of the final tables. Asks the workers to stop once `reached` holds or
    /// `max_seconds` passed.
    pub async fn observe(
        &mut self,
        ctx: &MonitorCtx<'_>,
        reports: Vec<WorkerDone>,
        all_done: bool,
        max_seconds: f64,
        eval: impl Fn(Tables, f64, u64) -> P,
        reached: impl Fn(&P) -> bool,
    ) -> Result<Option<String>, PsError> {
        self.reports.extend(reports);
        if self.curve.is_empty() {
            self.add(ctx, eval(Tables::new(), 0.0, 0), 0.0, &reached);
        }
        for state in ctx.eval_cuts().await? {
            for (clock, tables) in state.eval_cuts {
                self.pending.entry(clock).or_default().push(tables);
            }
        }
        let t = ctx.elapsed_s();
        while let Some(entry) = self.pending.first_entry() {
            if entry.get().len() < ctx.shards_at(*entry.key()) {
                break;
            }
            let (clock, parts) = entry.remove_entry();
            let tables = merge_snapshots(parts.into_iter().flatten());
            self.add(ctx, eval(tables, t, clock), t, &reached);
        }
        if all_done {
            // Every worker left after its last update: the live tables are the final model.
            let last = self.reports.iter().map(|r| r.clocks).max().unwrap_or(0);
            if self.curve.last().is_none_or(|p| p.clock() < last) {
                let (tables, _) = ctx.tables().await?;
                self.add(ctx, eval(tables, t, last), t, &reached);
            }
            self.pending.clear();
            return Ok(None);
        }
        let target = self.reached.and_then(|(_, clock)| {
            let p = self.curve.iter().find(|p| p.clock() == clock)?;
            Some((p.headline(), clock))
        });
        Ok(match target {
            Some(((name, value), clock)) => Some(format!(
                "target reached ({name} {value:.4} at clock {clock})"
            )),
            None if t >= max_seconds => Some(format!("max_seconds {max_seconds} passed")),
            None => None,
        })
    }

    /// Appends `p` unless the curve already has its clock (one point per clock).
    fn add(&mut self, ctx: &MonitorCtx<'_>, p: P, t: f64, reached: &impl Fn(&P) -> bool) {
        if self
            .curve
            .last()
            .is_some_and(|last| last.clock() >= p.clock())
        {
            return;
        }
        let (name, value) = p.headline();
        ctx.progress(name, value);
        if self.reached.is_none() && reached(&p) {
            self.reached = Some((t, p.clock()));
        }
        self.curve.push(p);
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

    /// The content staleness of every worker's reads, merged.
    pub fn content_staleness(&self) -> StalenessStats {
        let mut st = StalenessStats::new();
        for r in &self.reports {
            st.merge(&r.content_staleness);
        }
        st
    }

    /// Min clock when the target was reached, else at the last evaluation.
    pub fn iterations(&self) -> u64 {
        self.reached
            .map_or(self.curve.last().map_or(0, |p| p.clock()), |r| r.1)
    }
}

impl<P: EvalPoint + Serialize + DeserializeOwned> MonitorState for EvalMonitor<P> {
    /// The curve up to `clock`.
    fn save(&self, clock: u64) -> Result<Vec<u8>, PsError> {
        Ok(encode(&EvalMonitor::<P> {
            curve: self
                .curve
                .iter()
                .copied()
                .filter(|p| p.clock() <= clock)
                .collect(),
            reached: self.reached.filter(|r| r.1 <= clock),
            ..Self::default()
        })?)
    }

    fn resume(what: &str, saved: &[u8]) -> Result<Self, PsError> {
        decode(what, saved)
    }
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

/// Sleeps until `due` after `start` (emulated compute time the real one did not fill).
pub async fn pad_to(start: Instant, due: Duration) {
    let spent = start.elapsed();
    if spent < due {
        tokio::time::sleep(due - spent).await;
    }
}

/// Writes a run's files into `dir` (if any): the saved model (with `test_data`'s held-out
/// figures in `run`), `model.json`, `history.csv` and `metrics.json`; none if a figure
/// diverged (the error gives `advice`).
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
        MlError::Write { path, source } => PsError::Write { path, source },
        other => PsError::Ml(other),
    })
}
