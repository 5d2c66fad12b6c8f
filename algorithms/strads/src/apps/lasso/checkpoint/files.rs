//! Checkpoint files: names, the manifest, the cluster shape a checkpoint must match, and
//! the rules for choosing, verifying and pruning checkpoints (see the parent module's
//! protocol). Plain functions over a directory; the rounds that write and read them are in
//! the parent module.

use std::path::{Path, PathBuf};

use super::CheckpointError;
use crate::apps::lasso::metrics::LassoMetrics;
use crate::apps::lasso::scheduling::LassoSchedulingState;
use crate::core::scheduler::SchedulerState;
use petrel_actors::durable::{self, DurableError, FileDigest, Fnv1a64};
use petrel_messages::tensor::{f32_bytes, f64_bytes};
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// Checkpoints kept in the directory (older ones are deleted after a new one is complete).
pub const KEEP: usize = 2;
const MANIFEST_MAGIC: &[u8; 8] = b"PLASSOM1";
pub(super) const FORMAT_VERSION: u32 = 1;
const PREFIX: &str = "lasso-round-";

/// `lasso-round-<r>.manifest`.
pub fn manifest_name(round: u64) -> String {
    format!("{PREFIX}{round:012}.manifest")
}

/// `lasso-round-<r>-scheduler.bin`.
pub fn scheduler_file(round: u64) -> String {
    format!("{PREFIX}{round:012}-scheduler.bin")
}

/// `lasso-round-<r>-worker-<i>.bin`.
pub fn worker_file(round: u64, worker: u32) -> String {
    format!("{PREFIX}{round:012}-worker-{worker}.bin")
}

/// Round of a checkpoint file name (manifest, data file or leftover temp file), and whether
/// it is a manifest; `None` for files that are not ours.
pub fn parse_name(name: &str) -> Option<(u64, bool)> {
    let rest = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .unwrap_or(name)
        .strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.len() != 12 {
        return None;
    }
    let round = digits.parse().ok()?;
    let tail = &rest[12..];
    let is_manifest = tail == ".manifest" && !name.starts_with('.');
    let is_data = tail == "-scheduler.bin"
        || tail
            .strip_prefix("-worker-")
            .and_then(|w| w.strip_suffix(".bin"))
            .is_some_and(|w| w.parse::<u32>().is_ok());
    (is_manifest || is_data || tail == ".manifest").then_some((round, is_manifest))
}

pub(super) fn invalid(path: &Path, reason: impl Into<String>) -> CheckpointError {
    CheckpointError::File(DurableError::invalid(path, reason))
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

/// One file of a checkpoint as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    /// File name in the checkpoint directory.
    pub name: String,
    /// Length and checksum.
    pub digest: FileDigest,
}

/// `lasso-round-<r>.manifest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// The checkpoint's round.
    pub round: u64,
    /// The cluster shape it was taken on.
    pub shape: ClusterShape,
    /// The scheduler's file.
    pub scheduler: FileEntry,
    /// In worker order.
    pub workers: Vec<FileEntry>,
}

/// Writes the manifest (atomically, then syncs the directory).
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<PathBuf, CheckpointError> {
    let body = rmp_serde::to_vec(m)?;
    let path = durable::write_atomic(
        dir,
        &manifest_name(m.round),
        &durable::frame(MANIFEST_MAGIC, &body),
    )?;
    durable::sync_dir(dir)?;
    Ok(path)
}

/// Reads and decodes a manifest (no file or shape checks).
pub fn read_manifest(path: &Path) -> Result<Manifest, CheckpointError> {
    let body = durable::read_framed(path, MANIFEST_MAGIC)?;
    let m: Manifest =
        rmp_serde::from_slice(&body).map_err(|e| invalid(path, format!("manifest decode: {e}")))?;
    if m.version != FORMAT_VERSION {
        return Err(invalid(path, format!("unsupported version {}", m.version)));
    }
    Ok(m)
}

/// A verified checkpoint, ready to restore.
#[derive(Debug, Clone)]
pub struct ValidCheckpoint {
    /// Where the manifest is.
    pub manifest_path: PathBuf,
    /// The manifest.
    pub manifest: Manifest,
    /// The scheduler's state.
    pub scheduler: SchedulerSnapshot,
}

/// Loads the checkpoint of `round` from `dir` and verifies everything: manifest, shape,
/// every file's name, length and checksum, and the scheduler snapshot's contents.
pub fn load_valid(
    dir: &Path,
    round: u64,
    shape: &ClusterShape,
) -> Result<ValidCheckpoint, CheckpointError> {
    let path = dir.join(manifest_name(round));
    let m = read_manifest(&path)?;
    if m.round != round {
        return Err(invalid(&path, format!("manifest is for round {}", m.round)));
    }
    if let Some((field, checkpoint, job)) = m.shape.difference(shape) {
        return Err(CheckpointError::Shape {
            path,
            field,
            checkpoint,
            job,
        });
    }
    if m.workers.len() as u64 != m.shape.workers {
        return Err(invalid(
            &path,
            format!(
                "{} worker files for {} workers",
                m.workers.len(),
                m.shape.workers
            ),
        ));
    }
    let expected = std::iter::once(scheduler_file(round))
        .chain((0..m.workers.len() as u32).map(|w| worker_file(round, w)));
    for (entry, name) in std::iter::once(&m.scheduler)
        .chain(&m.workers)
        .zip(expected)
    {
        if entry.name != name {
            return Err(invalid(
                &path,
                format!("lists {:?} where {name:?} belongs", entry.name),
            ));
        }
        durable::read_verified(dir, &entry.name, entry.digest)?;
    }
    let file = dir.join(&m.scheduler.name);
    let bytes = durable::read_verified(dir, &m.scheduler.name, m.scheduler.digest)?;
    let scheduler: SchedulerSnapshot =
        rmp_serde::from_slice(&bytes).map_err(|e| invalid(&file, format!("decode: {e}")))?;
    if scheduler.version != FORMAT_VERSION || scheduler.round != round {
        return Err(invalid(
            &file,
            format!(
                "snapshot version {} round {}",
                scheduler.version, scheduler.round
            ),
        ));
    }
    Ok(ValidCheckpoint {
        manifest_path: path,
        manifest: m,
        scheduler,
    })
}

/// Rounds that have a manifest in `dir`, ascending (not verified). A missing directory has
/// none.
pub fn manifest_rounds(dir: &Path) -> Result<Vec<u64>, CheckpointError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    Ok(durable::manifest_rounds_among(
        &durable::list_names(dir)?,
        parse_name,
    ))
}

pub use petrel_actors::durable::choose_newest_valid;

/// The checkpoint `resume = true` continues from (see the module docs for the policy).
pub fn resume_from(dir: &Path, shape: &ClusterShape) -> Result<ValidCheckpoint, CheckpointError> {
    let rounds = manifest_rounds(dir)?;
    match choose_newest_valid(&rounds, |r| load_valid(dir, r, shape)) {
        Ok((ck, refused)) => {
            for reason in refused {
                tracing::warn!(%reason, "skipping an invalid checkpoint");
            }
            Ok(ck)
        }
        Err(reasons) => Err(CheckpointError::NoValid {
            dir: dir.to_path_buf(),
            reasons,
        }),
    }
}

/// Files to delete after the checkpoint of round `newest` is complete: everything of ours
/// except the `keep` newest manifests at or below `newest` and their data files
/// ([`durable::prune_plan`] over [`parse_name`]).
pub fn prune_plan(names: &[String], newest: u64, keep: usize) -> Vec<String> {
    durable::prune_plan(names, parse_name, newest, keep)
}

pub(super) fn prune(dir: &Path, newest: u64) -> Result<(), CheckpointError> {
    let names = durable::list_names(dir)?;
    for name in prune_plan(&names, newest, KEEP) {
        durable::remove_if_exists(dir, &name)?;
    }
    Ok(())
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
