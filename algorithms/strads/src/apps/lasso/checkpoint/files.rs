//! Checkpoint parts and the cluster shape a checkpoint must match (see the parent module's
//! protocol), on the runtime's checkpoint set ([`petrel_actors::checkpoint`], scheme
//! [`SCHEME`]: `lasso-round-<r>.manifest`, `lasso-round-<r>-scheduler.bin`,
//! `lasso-round-<r>-worker-<i>.bin`).

use std::path::{Path, PathBuf};

use super::CheckpointError;
use crate::apps::lasso::metrics::LassoMetrics;
use crate::apps::lasso::scheduling::LassoSchedulingState;
use crate::core::scheduler::SchedulerState;
use petrel_actors::checkpoint::{self as set, CheckpointSet, PartEntry};
use petrel_actors::durable::Fnv1a64;
use petrel_messages::tensor::{f32_bytes, f64_bytes};
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

pub(super) const FORMAT_VERSION: u32 = 1;
/// The checkpoint scheme of the scheduled Lasso.
pub const SCHEME: &str = "lasso";
/// The scheduler's part.
pub const SCHEDULER_PART: &str = "scheduler";

/// Worker `i`'s part.
pub fn worker_part(worker: u32) -> String {
    format!("worker-{worker}")
}

/// The checkpoints in `dir`.
pub fn checkpoints(dir: &Path) -> CheckpointSet {
    CheckpointSet::new(dir, SCHEME)
}

pub(super) fn invalid(path: &Path, reason: impl Into<String>) -> CheckpointError {
    CheckpointError::Set(set::CheckpointError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    })
}

/// What must match between a checkpoint and a job resuming from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterShape {
    /// Worker nodes.
    pub workers: u64,
    /// Rows of X.
    pub n_samples: u64,
    /// Columns of X.
    pub n_features: u64,
    /// Non-zeros of X.
    pub nnz: u64,
    /// Bits of the f32 lambda (compared exactly).
    pub lambda_bits: u32,
    /// The scheduler seed.
    pub seed: u64,
    /// FNV-1a 64 of X and y ([`data_fingerprint`]).
    pub data_fnv64: u64,
}

impl ClusterShape {
    /// The shape of a job on `(x, y)`.
    pub fn of(x: &SparseColumns, y: &[f32], lambda: f32, seed: u64, workers: usize) -> Self {
        ClusterShape {
            workers: workers as u64,
            n_samples: x.n_rows as u64,
            n_features: x.n_columns() as u64,
            nnz: x.values.len() as u64,
            lambda_bits: lambda.to_bits(),
            seed,
            data_fnv64: data_fingerprint(x, y),
        }
    }

    /// The first field that differs: `(name, in self, in other)`.
    pub fn difference(&self, job: &ClusterShape) -> Option<(&'static str, String, String)> {
        let d =
            |f: &'static str, a: u64, b: u64| (a != b).then(|| (f, a.to_string(), b.to_string()));
        d("workers", self.workers, job.workers)
            .or_else(|| d("n_samples", self.n_samples, job.n_samples))
            .or_else(|| d("n_features", self.n_features, job.n_features))
            .or_else(|| d("nnz", self.nnz, job.nnz))
            .or_else(|| {
                (self.lambda_bits != job.lambda_bits).then(|| {
                    (
                        "lambda",
                        f32::from_bits(self.lambda_bits).to_string(),
                        f32::from_bits(job.lambda_bits).to_string(),
                    )
                })
            })
            .or_else(|| d("seed", self.seed, job.seed))
            .or_else(|| {
                (self.data_fnv64 != job.data_fnv64).then(|| {
                    (
                        "data fingerprint",
                        format!("{:016x}", self.data_fnv64),
                        format!("{:016x}", job.data_fnv64),
                    )
                })
            })
    }
}

/// FNV-1a 64 over the design's structure and values and the targets.
pub fn data_fingerprint(x: &SparseColumns, y: &[f32]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update(&(x.n_rows as u64).to_le_bytes());
    for &s in &x.column_starts {
        h.update(&(s as u64).to_le_bytes());
    }
    for &i in &x.row_indices {
        h.update(&i.to_le_bytes());
    }
    for &v in x.values.iter().chain(y) {
        h.update(&v.to_bits().to_le_bytes());
    }
    h.finish()
}

/// A verified checkpoint, ready to restore.
#[derive(Debug, Clone)]
pub struct ValidCheckpoint {
    /// Where the manifest is.
    pub manifest_path: PathBuf,
    /// Its round.
    pub round: u64,
    /// The workers' parts, in worker order.
    pub workers: Vec<PartEntry>,
    /// The scheduler's state.
    pub scheduler: SchedulerSnapshot,
}

/// Whether `ck` is a checkpoint of a job of `shape`: its shape, its parts and the scheduler
/// snapshot's contents.
fn accept(
    ck: set::Checkpoint,
    shape: &ClusterShape,
) -> Result<ValidCheckpoint, set::CheckpointError> {
    let saved: ClusterShape = rmp_serde::from_slice(&ck.meta)
        .map_err(|e| ck.invalid(format!("cluster shape decode: {e}")))?;
    if let Some((field, checkpoint, job)) = saved.difference(shape) {
        return Err(ck.invalid(format!(
            "cluster shape differs: {field} is {checkpoint} in the checkpoint but {job} in this job"
        )));
    }
    let expected: Vec<String> = std::iter::once(SCHEDULER_PART.to_string())
        .chain((0..saved.workers as u32).map(worker_part))
        .collect();
    if ck.part_names() != expected {
        return Err(ck.invalid(format!(
            "lists {:?}, expected {expected:?}",
            ck.part_names()
        )));
    }
    let scheduler: SchedulerSnapshot = rmp_serde::from_slice(ck.part(SCHEDULER_PART)?)
        .map_err(|e| ck.invalid(format!("scheduler part: decode: {e}")))?;
    if scheduler.version != FORMAT_VERSION || scheduler.round != ck.round {
        return Err(ck.invalid(format!(
            "scheduler snapshot version {} round {}",
            scheduler.version, scheduler.round
        )));
    }
    Ok(ValidCheckpoint {
        manifest_path: ck.path,
        round: ck.round,
        workers: ck.parts.into_iter().skip(1).map(|(e, _)| e).collect(),
        scheduler,
    })
}

/// Loads the checkpoint of `round` from `dir` and verifies everything: manifest, shape,
/// every part's length and checksum, and the scheduler snapshot's contents.
pub fn load_valid(
    dir: &Path,
    round: u64,
    shape: &ClusterShape,
) -> Result<ValidCheckpoint, CheckpointError> {
    Ok(accept(checkpoints(dir).load(round)?, shape)?)
}

/// Rounds that have a manifest in `dir`, ascending (not verified). A missing directory has
/// none.
pub fn manifest_rounds(dir: &Path) -> Result<Vec<u64>, CheckpointError> {
    Ok(checkpoints(dir).rounds()?)
}

/// The checkpoint `resume = true` continues from (see the module docs for the policy).
pub fn resume_from(dir: &Path, shape: &ClusterShape) -> Result<ValidCheckpoint, CheckpointError> {
    Ok(checkpoints(dir).newest_valid(|ck| accept(ck, shape))?)
}

/// The scheduler's state at a drain point (`lasso-round-<r>-scheduler.bin`, msgpack).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerSnapshot {
    /// Format version.
    pub version: u32,
    /// The checkpoint's round.
    pub round: u64,
    /// The coordinate scheduler.
    pub scheduler: SchedulerState,
    /// The coefficients.
    #[serde(with = "f32_bytes")]
    pub coefficients: Vec<f32>,
    /// L1 norm after each commit.
    #[serde(with = "f64_bytes")]
    pub l1_after: Vec<f64>,
    /// Cumulative updates after each commit.
    pub updates_after: Vec<u64>,
    /// Current L1 norm.
    pub l1: f64,
    /// Coordinate updates so far.
    pub updates: u64,
    /// Update rounds since the last evaluation.
    pub update_rounds_since_eval: u64,
    /// Work of the updates since the last evaluation (`eval_every = 0`).
    #[serde(default)]
    pub work_since_eval: f64,
    /// Rounds scheduled so far.
    pub rounds_scheduled: u64,
    /// The stop rule fired.
    pub stopping: bool,
    /// The final evaluation was dispatched.
    pub final_eval_sent: bool,
    /// Metrics so far.
    pub metrics: LassoMetrics,
    /// Commits every worker has applied (they must report the same on restore).
    pub worker_applied: u64,
}

impl SchedulerSnapshot {
    /// The file contents for `state` at `round`.
    pub fn of(round: u64, s: LassoSchedulingState) -> Self {
        SchedulerSnapshot {
            version: FORMAT_VERSION,
            round,
            scheduler: s.scheduler,
            coefficients: s.coefficients,
            l1_after: s.l1_after,
            updates_after: s.updates_after,
            l1: s.l1,
            updates: s.updates,
            update_rounds_since_eval: s.update_rounds_since_eval,
            work_since_eval: s.work_since_eval,
            rounds_scheduled: s.rounds_scheduled,
            stopping: s.stopping,
            final_eval_sent: s.final_eval_sent,
            metrics: s.metrics,
            worker_applied: s.worker_applied,
        }
    }

    /// The scheduler half's state in this file.
    pub fn state(&self) -> LassoSchedulingState {
        LassoSchedulingState {
            scheduler: self.scheduler.clone(),
            coefficients: self.coefficients.clone(),
            l1_after: self.l1_after.clone(),
            updates_after: self.updates_after.clone(),
            l1: self.l1,
            updates: self.updates,
            update_rounds_since_eval: self.update_rounds_since_eval,
            work_since_eval: self.work_since_eval,
            rounds_scheduled: self.rounds_scheduled,
            stopping: self.stopping,
            final_eval_sent: self.final_eval_sent,
            metrics: self.metrics.clone(),
            worker_applied: self.worker_applied,
        }
    }
}

/// `lasso-round-<r>-worker-<i>.bin` (msgpack).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct WorkerSnapshot {
    pub(super) version: u32,
    pub(super) round: u64,
    pub(super) index: u32,
    pub(super) n_workers: u32,
    pub(super) rows_start: u64,
    pub(super) rows_end: u64,
    pub(super) n_features: u64,
    pub(super) block_fnv64: u64,
    pub(super) applied: u64,
    #[serde(with = "f64_bytes")]
    pub(super) residual: Vec<f64>,
    /// The worker's running `||r||^2` (so the objective trace continues bit for bit);
    /// absent in older files, then recomputed from the residual.
    #[serde(default)]
    pub(super) sq_residual: Option<f64>,
    /// With implicit centring (`fit_intercept`), the running `[offset, sum(s), ||s||^2]`
    /// beside the stored part `residual` (so a resumed run continues bit for bit).
    #[serde(default)]
    pub(super) centring: Option<[f64; 3]>,
}
