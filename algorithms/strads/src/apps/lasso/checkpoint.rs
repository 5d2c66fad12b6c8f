//! Checkpoint and resume for STRADS Lasso.
//!
//! ## Protocol
//! A checkpoint is taken at a *drain point* (no update round in flight) once
//! `checkpoint_every` update rounds have been dispatched since the last one. It is a round of
//! its own (round `r`):
//!
//! 1. the scheduler snapshots its state ([`SchedulerSnapshot`]: coefficients, the coordinate
//!    scheduler's priorities, cursor and exact ChaCha12 RNG position, the round counter,
//!    objective bookkeeping and metrics so far) and removes any stale manifest of round `r`;
//! 2. it dispatches `Control(Save{r})` to every worker; each writes
//!    `lasso-round-<r>-worker-<i>.bin` (its residual, commit count and identity) atomically
//!    (temp file, fsync, rename, directory fsync) and answers with the file's length and
//!    FNV-1a 64 checksum;
//! 3. when every worker answered, the scheduler writes `lasso-round-<r>-scheduler.bin`, then
//!    LAST the manifest `lasso-round-<r>.manifest` (magic, msgpack body, checksum of the body)
//!    naming every file with its length and checksum, the round and the cluster shape
//!    ([`ClusterShape`]: workers, rows, features, non-zeros, lambda, seed, a fingerprint of
//!    the data). Then it deletes all but the newest [`KEEP`] checkpoints.
//!
//! A checkpoint is valid only if its manifest exists and decodes, every listed file has its
//! length and checksum, and the shape equals the job's. A crash at any point before the
//! manifest's rename leaves no manifest, so the checkpoint never loads.
//!
//! ## Resume
//! With `resume = true` the scheduler tries the manifests newest first, skipping (with a
//! warning naming the file and the reason) every invalid one, and restores the newest valid
//! checkpoint. If there is none it fails with an error listing why each was refused (an
//! empty or missing directory is an error too: `resume` never silently starts from
//! scratch). Its first round is then `Control(Restore{r, digest})` to each worker, which
//! re-verifies its own file against the manifest's digest and its identity (index, rows,
//! features, data fingerprint) before replacing its residual. The restore round takes the
//! place (and the round number) of the save round, so the resumed run continues exactly as
//! the uninterrupted run did after round `r`.
//!
//! ## What is guaranteed
//! For a deterministic job the coefficients after resuming are bit-identical to those of an
//! uninterrupted run with the same settings. With `depth = 1` a checkpoint round changes
//! nothing in the schedule, so they are also identical to a run without checkpointing; with
//! `depth > 1` a checkpoint drains the pipeline, which can change the schedule (still
//! deterministic). Only one scheduler node is supported. All nodes must see the same
//! `checkpoint_dir` (one machine, or a shared file system): the scheduler verifies every
//! worker's file before choosing a checkpoint.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::shells::{Plan, Schedule, Step};
use petrel_actors::durable::{self, DurableError, FileDigest, Fnv1a64};
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

use super::{LassoApp, LassoCommit, LassoJob, LassoMetrics, LassoPartial, LassoScheduling};
use super::{LassoTask, LassoWorker};
use crate::core::scheduler::SchedulerState;
use petrel_messages::tensor::f64_bytes;
use petrel_ml::data::SparseColumns;

/// Checkpoints kept in the directory (older ones are deleted after a new one is complete).
pub const KEEP: usize = 2;
const MANIFEST_MAGIC: &[u8; 8] = b"PLASSOM1";
const FORMAT_VERSION: u32 = 1;
const PREFIX: &str = "lasso-round-";

pub fn manifest_name(round: u64) -> String {
    format!("{PREFIX}{round:012}.manifest")
}

pub fn scheduler_file(round: u64) -> String {
    format!("{PREFIX}{round:012}-scheduler.bin")
}

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

/// Errors of checkpointing and resuming; every one names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("invalid checkpoint: {0}")]
    File(#[from] DurableError),
    #[error(
        "invalid checkpoint: {}: cluster shape differs: {field} is {checkpoint} in the checkpoint but {job} in this job",
        path.display()
    )]
    Shape {
        path: PathBuf,
        field: &'static str,
        checkpoint: String,
        job: String,
    },
    #[error("resume = true but {} holds no valid checkpoint{}", dir.display(), list(.reasons))]
    NoValid { dir: PathBuf, reasons: Vec<String> },
    #[error("checkpoint settings: {0}")]
    Config(String),
    #[error("checkpoint encode: {0}")]
    Encode(String),
}

fn list(reasons: &[String]) -> String {
    if reasons.is_empty() {
        " (no manifest found)".into()
    } else {
        format!(": {}", reasons.join("; "))
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> CheckpointError {
    CheckpointError::File(DurableError::invalid(path, reason))
}

/// What must match between a checkpoint and a job resuming from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterShape {
    pub workers: u64,
    pub n_samples: u64,
    pub n_features: u64,
    pub nnz: u64,
    /// Bits of the f32 lambda (compared exactly).
    pub lambda_bits: u32,
    pub seed: u64,
    /// FNV-1a 64 of X and y ([`data_fingerprint`]).
    pub data_fnv64: u64,
}

impl ClusterShape {
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
    pub name: String,
    pub digest: FileDigest,
}

/// `lasso-round-<r>.manifest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub round: u64,
    pub shape: ClusterShape,
    pub scheduler: FileEntry,
    /// In worker order.
    pub workers: Vec<FileEntry>,
}

/// Writes the manifest (atomically, then syncs the directory).
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<PathBuf, CheckpointError> {
    let body = rmp_serde::to_vec(m).map_err(|e| CheckpointError::Encode(e.to_string()))?;
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
    pub manifest_path: PathBuf,
    pub manifest: Manifest,
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
    let mut rounds: Vec<u64> = durable::list_names(dir)?
        .iter()
        .filter_map(|n| parse_name(n))
        .filter(|&(_, manifest)| manifest)
        .map(|(r, _)| r)
        .collect();
    rounds.sort_unstable();
    rounds.dedup();
    Ok(rounds)
}

/// Tries `rounds` newest first; returns the first that `validate` accepts and the reasons
/// the newer ones were refused, or every reason if none is valid.
pub fn choose_newest_valid<T>(
    rounds: &[u64],
    mut validate: impl FnMut(u64) -> Result<T, CheckpointError>,
) -> Result<(T, Vec<String>), Vec<String>> {
    let mut refused = Vec::new();
    for &r in rounds.iter().rev() {
        match validate(r) {
            Ok(t) => return Ok((t, refused)),
            Err(e) => refused.push(e.to_string()),
        }
    }
    Err(refused)
}

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
/// except the `keep` newest manifests at or below `newest` and their data files. Manifests
/// come first, so a crash while pruning never leaves a manifest without its files.
pub fn prune_plan(names: &[String], newest: u64, keep: usize) -> Vec<String> {
    let mut manifests: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_name(n))
        .filter(|&(r, m)| m && r <= newest)
        .map(|(r, _)| r)
        .collect();
    manifests.sort_unstable_by(|a, b| b.cmp(a));
    manifests.dedup();
    manifests.truncate(keep);
    let mut doomed: Vec<(bool, &String)> = names
        .iter()
        .filter_map(|n| parse_name(n).map(|(r, m)| (r, m, n)))
        .filter(|(r, _, _)| !manifests.contains(r))
        .map(|(_, m, n)| (m, n))
        .collect();
    doomed.sort_by_key(|(m, _)| !m);
    doomed.into_iter().map(|(_, n)| n.clone()).collect()
}

fn prune(dir: &Path, newest: u64) -> Result<(), CheckpointError> {
    let names = durable::list_names(dir)?;
    for name in prune_plan(&names, newest, KEEP) {
        durable::remove_if_exists(dir, &name)?;
    }
    Ok(())
}

/// When to checkpoint: every `every` update rounds (0 = never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPolicy {
    every: u64,
    since: u64,
}

impl CheckpointPolicy {
    pub fn new(every: u64) -> Self {
        CheckpointPolicy { every, since: 0 }
    }

    pub fn update_round_dispatched(&mut self) {
        self.since += 1;
    }

    /// A checkpoint should be taken at the next drain point.
    pub fn due(&self) -> bool {
        self.every > 0 && self.since >= self.every
    }

    /// A checkpoint was taken (or restored).
    pub fn reset(&mut self) {
        self.since = 0;
    }
}

/// The checkpoint knobs of a job, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointSettings {
    pub dir: PathBuf,
    pub every: u64,
    pub resume: bool,
    pub fail_after: Option<u64>,
}

impl CheckpointSettings {
    /// `None` when the job does not checkpoint. Errors for `resume` without a directory and
    /// for checkpointing with several schedulers.
    pub fn of(job: &LassoJob, schedulers: usize) -> Result<Option<Self>, CheckpointError> {
        let Some(dir) = job.checkpoint_dir.clone() else {
            if job.resume {
                return Err(CheckpointError::Config(
                    "resume = true needs checkpoint_dir".into(),
                ));
            }
            return Ok(None);
        };
        if schedulers > 1 {
            return Err(CheckpointError::Config(format!(
                "checkpointing supports one scheduler node, the cluster has {schedulers}"
            )));
        }
        Ok(Some(CheckpointSettings {
            dir,
            every: job.checkpoint_every,
            resume: job.resume,
            fail_after: job.fail_after_checkpoints,
        }))
    }
}

/// The scheduler's state at a drain point (`lasso-round-<r>-scheduler.bin`, msgpack).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerSnapshot {
    pub version: u32,
    pub round: u64,
    pub scheduler: SchedulerState,
    #[serde(with = "f32_bytes")]
    pub coefficients: Vec<f32>,
    #[serde(with = "f64_bytes")]
    pub l1_after: Vec<f64>,
    pub updates_after: Vec<u64>,
    pub l1: f64,
    pub updates: u64,
    pub update_rounds_since_eval: u64,
    pub rounds_scheduled: u64,
    pub stopping: bool,
    pub final_eval_sent: bool,
    pub metrics: LassoMetrics,
    /// Commits every worker has applied (they must report the same on restore).
    pub worker_applied: u64,
}

impl LassoScheduling {
    fn snapshot(&self, round: u64) -> SchedulerSnapshot {
        SchedulerSnapshot {
            version: FORMAT_VERSION,
            round,
            scheduler: self.scheduler.export_state(),
            coefficients: self.coefficients.clone(),
            l1_after: self.l1_after.clone(),
            updates_after: self.updates_after.clone(),
            l1: self.l1,
            updates: self.updates,
            update_rounds_since_eval: self.update_rounds_since_eval,
            rounds_scheduled: self.rounds_scheduled,
            stopping: self.stopping,
            final_eval_sent: self.final_eval_sent,
            metrics: self.metrics.clone(),
            worker_applied: self.commits(),
        }
    }

    fn restore(&mut self, s: &SchedulerSnapshot) -> Result<(), String> {
        if s.coefficients.len() != self.coefficients.len() {
            return Err(format!(
                "{} coefficients for {} features",
                s.coefficients.len(),
                self.coefficients.len()
            ));
        }
        if s.l1_after.len() != s.updates_after.len()
            || s.l1_after.len() as u64 != s.worker_applied + 1
        {
            return Err("inconsistent commit bookkeeping".into());
        }
        self.scheduler
            .import_state(&s.scheduler)
            .map_err(|e| e.to_string())?;
        self.coefficients = s.coefficients.clone();
        self.l1_after = s.l1_after.clone();
        self.updates_after = s.updates_after.clone();
        self.l1 = s.l1;
        self.updates = s.updates;
        self.update_rounds_since_eval = s.update_rounds_since_eval;
        self.rounds_scheduled = s.rounds_scheduled;
        self.stopping = s.stopping;
        self.final_eval_sent = s.final_eval_sent;
        self.metrics = s.metrics.clone();
        self.in_flight.clear();
        self.busy.clear();
        Ok(())
    }

    /// Commits sent to the workers so far.
    fn commits(&self) -> u64 {
        self.l1_after.len() as u64 - 1
    }

    /// Bookkeeping of a save/restore round, exactly as any other round's pull.
    fn control_round_done(&mut self, round: u64, elapsed: Duration) {
        self.metrics.rounds = round + 1;
        self.metrics.elapsed_s = elapsed.as_secs_f64();
        self.after_commit();
    }
}

/// Scheduler -> worker: save or restore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControlTask {
    /// Write `lasso-round-<round>-worker-<i>.bin`.
    Save { round: u64 },
    /// Load that file, which must match `digest` (from the manifest).
    Restore { round: u64, digest: FileDigest },
}

/// Worker -> scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControlReply {
    Saved {
        round: u64,
        digest: FileDigest,
        applied: u64,
    },
    Restored {
        round: u64,
        applied: u64,
    },
}

/// Where and as whom a worker saves its state.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSlot {
    pub dir: PathBuf,
    pub index: u32,
    pub n_workers: u32,
    pub rows: Range<usize>,
    pub n_features: usize,
    /// [`data_fingerprint`] of the worker's row block.
    pub block_fnv64: u64,
}

/// `lasso-round-<r>-worker-<i>.bin` (msgpack).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct WorkerSnapshot {
    version: u32,
    round: u64,
    index: u32,
    n_workers: u32,
    rows_start: u64,
    rows_end: u64,
    n_features: u64,
    block_fnv64: u64,
    applied: u64,
    #[serde(with = "f64_bytes")]
    residual: Vec<f64>,
}

/// A worker's handling of [`ControlTask`]s.
pub(super) fn worker_control(
    w: &mut LassoWorker,
    task: &ControlTask,
) -> Result<LassoPartial, String> {
    let Some(slot) = &w.checkpoint else {
        return Err("checkpoint task, but this worker has no checkpoint_dir".into());
    };
    let reply = match *task {
        ControlTask::Save { round } => {
            let snap = WorkerSnapshot {
                version: FORMAT_VERSION,
                round,
                index: slot.index,
                n_workers: slot.n_workers,
                rows_start: slot.rows.start as u64,
                rows_end: slot.rows.end as u64,
                n_features: slot.n_features as u64,
                block_fnv64: slot.block_fnv64,
                applied: w.applied[0],
                residual: w.state.residual().to_vec(),
            };
            let bytes = rmp_serde::to_vec(&snap).map_err(|e| e.to_string())?;
            durable::create_dir(&slot.dir).map_err(|e| e.to_string())?;
            durable::write_atomic(&slot.dir, &worker_file(round, slot.index), &bytes)
                .and_then(|_| durable::sync_dir(&slot.dir))
                .map_err(|e| e.to_string())?;
            ControlReply::Saved {
                round,
                digest: FileDigest::of(&bytes),
                applied: w.applied[0],
            }
        }
        ControlTask::Restore { round, digest } => {
            let name = worker_file(round, slot.index);
            let path = slot.dir.join(&name);
            let bytes =
                durable::read_verified(&slot.dir, &name, digest).map_err(|e| e.to_string())?;
            let snap: WorkerSnapshot = rmp_serde::from_slice(&bytes)
                .map_err(|e| format!("{}: decode: {e}", path.display()))?;
            let mine = (
                round,
                slot.index,
                slot.n_workers,
                slot.rows.start as u64,
                slot.rows.end as u64,
                slot.n_features as u64,
                slot.block_fnv64,
            );
            let theirs = (
                snap.round,
                snap.index,
                snap.n_workers,
                snap.rows_start,
                snap.rows_end,
                snap.n_features,
                snap.block_fnv64,
            );
            if snap.version != FORMAT_VERSION || mine != theirs {
                return Err(format!(
                    "{}: saved for (round, worker, workers, rows, features, data) {theirs:?}, this worker is {mine:?}",
                    path.display()
                ));
            }
            w.state
                .restore_residual(snap.residual)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            w.applied[0] = snap.applied;
            ControlReply::Restored {
                round,
                applied: w.applied[0],
            }
        }
    };
    Ok(LassoPartial::Control(reply))
}

/// A save or restore round in flight.
#[derive(Debug)]
enum Control {
    Save {
        round: u64,
        snapshot: Result<Vec<u8>, String>,
    },
    Restore {
        round: u64,
        worker_applied: u64,
    },
}

/// [`LassoScheduling`] with checkpoint/resume: decides when to save, runs the save and
/// restore rounds, and hands every other round to the inner scheduler (with round numbers
/// and elapsed time continuing those of the checkpointed run).
pub struct Resumable {
    inner: LassoScheduling,
    settings: Option<CheckpointSettings>,
    shape: ClusterShape,
    policy: CheckpointPolicy,
    round_offset: u64,
    elapsed_offset: Duration,
    pending_restore: Option<Manifest>,
    control: Option<Control>,
    written: u64,
}

impl Resumable {
    /// With `settings.resume`, restores the newest valid checkpoint (file I/O: call it off
    /// the event loop).
    pub fn new(
        inner: LassoScheduling,
        settings: Option<CheckpointSettings>,
        shape: ClusterShape,
    ) -> Result<Self, CheckpointError> {
        let mut me = Resumable {
            inner,
            policy: CheckpointPolicy::new(settings.as_ref().map_or(0, |s| s.every)),
            settings,
            shape,
            round_offset: 0,
            elapsed_offset: Duration::ZERO,
            pending_restore: None,
            control: None,
            written: 0,
        };
        if let Some(s) = me.settings.clone().filter(|s| s.resume) {
            let ck = resume_from(&s.dir, &me.shape)?;
            me.inner
                .restore(&ck.scheduler)
                .map_err(|reason| invalid(&ck.manifest_path, reason))?;
            let round = ck.manifest.round;
            me.inner.metrics.resumed_from_round = Some(round);
            me.round_offset = round;
            me.elapsed_offset = Duration::from_secs_f64(ck.scheduler.metrics.elapsed_s.max(0.0));
            tracing::info!(round, manifest = %ck.manifest_path.display(), "resuming from checkpoint");
            me.pending_restore = Some(ck.manifest);
        }
        Ok(me)
    }

    pub fn inner(&self) -> &LassoScheduling {
        &self.inner
    }

    pub fn into_inner(self) -> LassoScheduling {
        self.inner
    }

    fn start_save(&mut self, round: u64, dir: &Path) -> Step<LassoTask> {
        let snapshot = rmp_serde::to_vec(&self.inner.snapshot(round))
            .map_err(|e| format!("scheduler snapshot: {e}"))
            .and_then(|bytes| {
                durable::create_dir(dir)
                    .and_then(|_| durable::remove_if_exists(dir, &manifest_name(round)))
                    .map_err(|e| e.to_string())
                    .map(|_| bytes)
            });
        self.control = Some(Control::Save { round, snapshot });
        self.policy.reset();
        Step::Run(Plan::All(LassoTask::Control(ControlTask::Save { round })))
    }

    fn finish_save(
        &mut self,
        round: u64,
        snapshot: Vec<u8>,
        partials: Vec<LassoPartial>,
    ) -> Result<(), String> {
        let dir = self
            .settings
            .as_ref()
            .map(|s| s.dir.clone())
            .ok_or("save round without checkpoint settings")?;
        let commits = self.inner.commits();
        let mut workers = Vec::with_capacity(partials.len());
        for (i, p) in partials.into_iter().enumerate() {
            match p {
                LassoPartial::Control(ControlReply::Saved {
                    round: r,
                    digest,
                    applied,
                }) if r == round && applied == commits => workers.push(FileEntry {
                    name: worker_file(round, i as u32),
                    digest,
                }),
                other => {
                    return Err(format!(
                        "checkpoint round {round}: worker {i} answered {other:?} (expected saved at {commits} commits)"
                    ));
                }
            }
        }
        let name = scheduler_file(round);
        durable::write_atomic(&dir, &name, &snapshot)
            .and_then(|_| durable::sync_dir(&dir))
            .map_err(|e| e.to_string())?;
        let manifest = Manifest {
            version: FORMAT_VERSION,
            round,
            shape: self.shape.clone(),
            scheduler: FileEntry {
                name,
                digest: FileDigest::of(&snapshot),
            },
            workers,
        };
        let path = write_manifest(&dir, &manifest).map_err(|e| e.to_string())?;
        prune(&dir, round).map_err(|e| e.to_string())?;
        tracing::info!(round, manifest = %path.display(), "checkpoint written");
        Ok(())
    }
}

impl Schedule<LassoApp> for Resumable {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LassoTask> {
        let round = round + self.round_offset;
        if let Some(m) = self.pending_restore.take() {
            // The first round of a resumed run (nothing in flight yet).
            let tasks = m
                .workers
                .iter()
                .map(|f| {
                    LassoTask::Control(ControlTask::Restore {
                        round: m.round,
                        digest: f.digest,
                    })
                })
                .collect();
            self.control = Some(Control::Restore {
                round,
                worker_applied: self.inner.commits(),
            });
            self.policy.reset();
            return Step::Run(Plan::PerWorker(tasks));
        }
        if let Some(dir) = self.settings.as_ref().map(|s| s.dir.clone())
            && self.policy.due()
            && !self.inner.stopping
        {
            return if in_flight > 0 {
                Step::Wait
            } else {
                self.start_save(round, &dir)
            };
        }
        let step = self.inner.schedule(round, in_flight);
        if matches!(step, Step::Run(Plan::All(LassoTask::Update { .. }))) {
            self.policy.update_round_dispatched();
        }
        step
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LassoPartial>,
        elapsed: Duration,
    ) -> Result<LassoCommit, String> {
        let round = round + self.round_offset;
        let elapsed = elapsed + self.elapsed_offset;
        let control_round = match &self.control {
            Some(Control::Save { round: r, .. } | Control::Restore { round: r, .. }) => Some(*r),
            None => None,
        };
        if control_round != Some(round) {
            return self.inner.pull(round, partials, elapsed);
        }
        match self.control.take() {
            Some(Control::Save { snapshot, .. }) => {
                self.finish_save(round, snapshot?, partials)
                    .map_err(|e| format!("checkpoint of round {round}: {e}"))?;
                self.inner.metrics.checkpoints.push(round);
                self.written += 1;
            }
            Some(Control::Restore { worker_applied, .. }) => {
                for (i, p) in partials.iter().enumerate() {
                    match p {
                        LassoPartial::Control(ControlReply::Restored { applied, .. })
                            if *applied == worker_applied => {}
                        other => {
                            return Err(format!(
                                "restore of round {round}: worker {i} answered {other:?} (expected {worker_applied} commits)"
                            ));
                        }
                    }
                }
                self.inner.metrics.checkpoints.push(round);
            }
            None => return Err(format!("round {round}: control round vanished")),
        }
        self.inner.control_round_done(round, elapsed);
        if let Some(limit) = self.settings.as_ref().and_then(|s| s.fail_after)
            && self.written >= limit
        {
            return Err(format!(
                "fault injection: stopping after checkpoint of round {round} (fail_after_checkpoints = {limit})"
            ));
        }
        Ok(LassoCommit {
            vars: Vec::new(),
            deltas: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests;
