//! Checkpoint and resume for STRADS Lasso.
//!
//! ## Protocol
//! A checkpoint is taken at a *drain point* (no update round in flight) once
//! `checkpoint_every` update rounds have been dispatched since the last one. It is a round of
//! its own (round `r`):
//!
//! 1. the scheduler snapshots its state ([`SchedulerSnapshot`]: coefficients, the coordinate
//!    scheduler's priorities, cursor and exact ChaCha12 RNG position, the round counter,
//!    objective bookkeeping and metrics so far);
//! 2. it dispatches `Control(Save{r})` to every worker; each writes its part
//!    `worker-<i>` (its residual, commit count and identity) and answers with the part's
//!    length and FNV-1a 64 checksum;
//! 3. when every worker answered, the scheduler writes its part `scheduler`, then LAST the
//!    manifest, whose meta is the cluster shape ([`ClusterShape`]: workers, rows, features,
//!    non-zeros, lambda, seed, a fingerprint of the data). The files, their atomic writes,
//!    keeping the newest two and the resume policy are the runtime's checkpoint set
//!    ([`petrel_actors::checkpoint`]; scheme [`SCHEME`]).
//!
//! A checkpoint is valid only if its manifest exists and decodes, every listed file has its
//! length and checksum, and the shape equals the job's. A crash at any point before the
//! manifest's rename leaves no manifest, so the checkpoint never loads.
//!
//! ## Resume
//! With `resume = true` the scheduler restores the newest valid checkpoint (invalid ones are
//! skipped with a warning; with none valid, or an empty or missing directory, it fails
//! listing why each was refused: `resume` never silently starts from scratch); a fresh run
//! deletes the directory's manifests first. Its first round is then
//! `Control(Restore{r, digest})` to each worker, which re-verifies its own file against the
//! manifest's digest and its identity (index, rows, features, data fingerprint) before
//! replacing its residual. The restore round takes the
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
use std::path::PathBuf;
use std::time::Duration;

use super::config::LassoJob;
use super::scheduling::LassoScheduling;
use super::wire::{ControlReply, ControlTask, LassoApp, LassoCommit, LassoPartial, LassoTask};
use super::worker::LassoWorker;
use crate::core::StradsModelError;
use crate::core::app::{Plan, Push, Schedule, Step};
use petrel_actors::checkpoint::{self as set, PartEntry};
use petrel_actors::durable::FileDigest;

mod files;
pub use files::*;

/// Errors of checkpointing and resuming; every one names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file is missing, short, corrupt, of an older format or of another cluster shape or
    /// data, or no checkpoint is valid to resume from.
    #[error("invalid checkpoint: {0}")]
    Set(#[from] set::CheckpointError),
    /// `resume = true` without `checkpoint_dir`.
    #[error("checkpoint settings: resume = true needs checkpoint_dir")]
    ResumeWithoutDir,
    /// Checkpoints with several scheduler nodes.
    #[error(
        "checkpoint settings: checkpointing supports one scheduler node, the cluster has {schedulers}"
    )]
    SeveralSchedulers {
        /// Scheduler nodes in the cluster.
        schedulers: usize,
    },
    /// A snapshot could not be encoded.
    #[error("checkpoint encode: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// A worker answered a save or restore round unexpectedly.
    #[error("{what} of round {round}: worker {worker} answered {answer} (expected {expected})")]
    Reply {
        /// `checkpoint` or `restore`.
        what: &'static str,
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// Its answer.
        answer: String,
        /// What was expected.
        expected: String,
    },
    /// A control task reached a worker without `checkpoint_dir`.
    #[error("checkpoint task, but this worker has no checkpoint_dir")]
    NoDirectory,
    /// The `fail_after_checkpoints` fault injection fired.
    #[error(
        "fault injection: stopping after checkpoint of round {round} (fail_after_checkpoints = {limit})"
    )]
    FaultInjection {
        /// The last checkpoint's round.
        round: u64,
        /// The limit.
        limit: u64,
    },
}

impl From<CheckpointError> for StradsModelError {
    fn from(e: CheckpointError) -> Self {
        StradsModelError::app(e)
    }
}

/// When to checkpoint: every `every` update rounds (0 = never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPolicy {
    every: u64,
    since: u64,
}

impl CheckpointPolicy {
    /// Every `every` update rounds (0 = never).
    pub fn new(every: u64) -> Self {
        CheckpointPolicy { every, since: 0 }
    }

    /// An update round was dispatched.
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
    /// The directory shared by the scheduler and the workers.
    pub dir: PathBuf,
    /// Update rounds between two checkpoints.
    pub every: u64,
    /// Continue from the newest valid checkpoint.
    pub resume: bool,
    /// Fault injection: fail after this many checkpoints.
    pub fail_after: Option<u64>,
}

impl CheckpointSettings {
    /// `None` when the job does not checkpoint. Errors for `resume` without a directory and
    /// for checkpointing with several schedulers.
    pub fn of(job: &LassoJob, schedulers: usize) -> Result<Option<Self>, CheckpointError> {
        let Some(dir) = job.checkpoint_dir.clone() else {
            if job.resume {
                return Err(CheckpointError::ResumeWithoutDir);
            }
            return Ok(None);
        };
        if schedulers > 1 {
            return Err(CheckpointError::SeveralSchedulers { schedulers });
        }
        Ok(Some(CheckpointSettings {
            dir,
            every: job.checkpoint_every,
            resume: job.resume,
            fail_after: job.fail_after_checkpoints,
        }))
    }
}

/// Where and as whom a worker saves its state.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSlot {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The worker's index.
    pub index: u32,
    /// Workers in the job.
    pub n_workers: u32,
    /// The worker's rows.
    pub rows: Range<usize>,
    /// Features of X.
    pub n_features: usize,
    /// [`data_fingerprint`] of the worker's row block.
    pub block_fnv64: u64,
}

/// A [`LassoWorker`] that also serves save and restore rounds in its [`WorkerSlot`].
pub struct CheckpointingWorker {
    inner: LassoWorker,
    slot: Option<WorkerSlot>,
    /// The digest of the whole data set it read, when it read one (compared with every
    /// node's before the first round).
    pub data_digest: Option<u64>,
}

impl CheckpointingWorker {
    /// `inner`, saving and restoring in `slot` (`None`: control tasks are refused).
    pub fn new(inner: LassoWorker, slot: Option<WorkerSlot>) -> Self {
        CheckpointingWorker {
            inner,
            slot,
            data_digest: None,
        }
    }

    fn save(&self, slot: &WorkerSlot, round: u64) -> Result<ControlReply, CheckpointError> {
        let applied = self.inner.applied(0).unwrap_or(0);
        let snap = WorkerSnapshot {
            version: FORMAT_VERSION,
            round,
            index: slot.index,
            n_workers: slot.n_workers,
            rows_start: slot.rows.start as u64,
            rows_end: slot.rows.end as u64,
            n_features: slot.n_features as u64,
            block_fnv64: slot.block_fnv64,
            applied,
            residual: self.inner.state().residual().to_vec(),
            sq_residual: Some(self.inner.state().squared_residual()),
            centring: self.inner.state().centring_state(),
        };
        let bytes = rmp_serde::to_vec(&snap)?;
        let entry = checkpoints(&slot.dir).write_part(round, &worker_part(slot.index), &bytes)?;
        Ok(ControlReply::Saved {
            round,
            digest: entry.digest,
            applied,
        })
    }

    fn restore(
        &mut self,
        slot: &WorkerSlot,
        round: u64,
        digest: FileDigest,
    ) -> Result<ControlReply, CheckpointError> {
        let part = worker_part(slot.index);
        let path = slot.dir.join(set::part_name(SCHEME, round, &part));
        let bytes = checkpoints(&slot.dir).read_part(round, &PartEntry { part, digest })?;
        let snap: WorkerSnapshot =
            rmp_serde::from_slice(&bytes).map_err(|e| invalid(&path, format!("decode: {e}")))?;
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
            return Err(invalid(
                &path,
                format!(
                    "saved for (round, worker, workers, rows, features, data) {theirs:?}, this worker is {mine:?}"
                ),
            ));
        }
        self.inner
            .restore(snap.residual, snap.applied, snap.sq_residual, snap.centring)
            .map_err(|e| invalid(&path, e.to_string()))?;
        Ok(ControlReply::Restored {
            round,
            applied: snap.applied,
        })
    }

    fn control(&mut self, task: &ControlTask) -> Result<LassoPartial, CheckpointError> {
        let slot = self.slot.clone().ok_or(CheckpointError::NoDirectory)?;
        let reply = match *task {
            ControlTask::Save { round } => self.save(&slot, round)?,
            ControlTask::Restore { round, digest } => self.restore(&slot, round, digest)?,
        };
        Ok(LassoPartial::Control(reply))
    }
}

impl Push<LassoApp> for CheckpointingWorker {
    fn push(&mut self, round: u64, task: &LassoTask) -> Result<LassoPartial, StradsModelError> {
        self.push_from(0, round, task)
    }

    fn commit(&mut self, round: u64, commit: &LassoCommit) -> Result<(), StradsModelError> {
        self.inner.commit_from(0, round, commit)
    }

    fn push_from(
        &mut self,
        scheduler: u32,
        round: u64,
        task: &LassoTask,
    ) -> Result<LassoPartial, StradsModelError> {
        match task {
            LassoTask::Control(control) => Ok(self.control(control)?),
            other => self.inner.push_from(scheduler, round, other),
        }
    }

    fn commit_from(
        &mut self,
        scheduler: u32,
        round: u64,
        commit: &LassoCommit,
    ) -> Result<(), StradsModelError> {
        self.inner.commit_from(scheduler, round, commit)
    }
}

/// A save or restore round in flight.
#[derive(Debug)]
enum Control {
    Save {
        round: u64,
        snapshot: Result<Vec<u8>, CheckpointError>,
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
    pending_restore: Option<(u64, Vec<PartEntry>)>,
    control: Option<Control>,
    written: u64,
    /// The digest of the data it was built from, when read from a file (compared with the
    /// workers' before the first round).
    pub data_digest: Option<u64>,
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
            data_digest: None,
        };
        if let Some(s) = me.settings.as_ref().filter(|s| !s.resume) {
            checkpoints(&s.dir).clear()?;
        }
        if let Some(s) = me.settings.clone().filter(|s| s.resume) {
            let ck = resume_from(&s.dir, &me.shape)?;
            me.inner
                .import_state(&ck.scheduler.state())
                .map_err(|e| invalid(&ck.manifest_path, e.to_string()))?;
            let round = ck.round;
            me.inner.note_checkpoint(round, true);
            me.round_offset = round;
            me.elapsed_offset = Duration::from_secs_f64(ck.scheduler.metrics.elapsed_s.max(0.0));
            tracing::info!(round, manifest = %ck.manifest_path.display(), "resuming from checkpoint");
            me.pending_restore = Some((round, ck.workers));
        }
        Ok(me)
    }

    /// The Lasso scheduler half.
    pub fn inner(&self) -> &LassoScheduling {
        &self.inner
    }

    /// The Lasso scheduler half, once the run is over.
    pub fn into_inner(self) -> LassoScheduling {
        self.inner
    }

    fn start_save(&mut self, round: u64) -> Step<LassoTask> {
        let snapshot = rmp_serde::to_vec(&SchedulerSnapshot::of(round, self.inner.export_state()))
            .map_err(CheckpointError::from);
        self.control = Some(Control::Save { round, snapshot });
        self.policy.reset();
        Step::Run(Plan::All(LassoTask::Control(ControlTask::Save { round })))
    }

    fn finish_save(
        &mut self,
        round: u64,
        snapshot: Vec<u8>,
        partials: Vec<LassoPartial>,
    ) -> Result<(), CheckpointError> {
        let Some(dir) = self.settings.as_ref().map(|s| s.dir.clone()) else {
            return Err(CheckpointError::NoDirectory);
        };
        let commits = self.inner.commits();
        let mut workers = Vec::with_capacity(partials.len());
        for (i, p) in partials.into_iter().enumerate() {
            match p {
                LassoPartial::Control(ControlReply::Saved {
                    round: r,
                    digest,
                    applied,
                }) if r == round && applied == commits => workers.push(PartEntry {
                    part: worker_part(i as u32),
                    digest,
                }),
                other => {
                    return Err(CheckpointError::Reply {
                        what: "checkpoint",
                        round,
                        worker: i,
                        answer: format!("{other:?}"),
                        expected: format!("saved at {commits} commits"),
                    });
                }
            }
        }
        let set = checkpoints(&dir);
        let mut parts = vec![set.write_part(round, SCHEDULER_PART, &snapshot)?];
        parts.extend(workers);
        let path = set.commit(round, &rmp_serde::to_vec(&self.shape)?, parts)?;
        tracing::info!(round, manifest = %path.display(), "checkpoint written");
        Ok(())
    }
}

impl Schedule<LassoApp> for Resumable {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LassoTask> {
        let round = round + self.round_offset;
        if let Some((saved, files)) = self.pending_restore.take() {
            // The first round of a resumed run (nothing in flight yet).
            let tasks = files
                .iter()
                .map(|f| {
                    LassoTask::Control(ControlTask::Restore {
                        round: saved,
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
        if self.settings.is_some() && self.policy.due() && !self.inner.stopping() {
            return if in_flight > 0 {
                Step::Wait
            } else {
                self.start_save(round)
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
    ) -> Result<LassoCommit, StradsModelError> {
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
                self.finish_save(round, snapshot?, partials)?;
                self.inner.note_checkpoint(round, false);
                self.written += 1;
            }
            Some(Control::Restore { worker_applied, .. }) => {
                for (i, p) in partials.iter().enumerate() {
                    match p {
                        LassoPartial::Control(ControlReply::Restored { applied, .. })
                            if *applied == worker_applied => {}
                        other => {
                            return Err(CheckpointError::Reply {
                                what: "restore",
                                round,
                                worker: i,
                                answer: format!("{other:?}"),
                                expected: format!("{worker_applied} commits"),
                            }
                            .into());
                        }
                    }
                }
                self.inner.note_checkpoint(round, false);
            }
            None => {
                return Err(StradsModelError::protocol(format!(
                    "round {round}: control round vanished"
                )));
            }
        }
        self.inner.extra_round_done(round, elapsed);
        if let Some(limit) = self.settings.as_ref().and_then(|s| s.fail_after)
            && self.written >= limit
        {
            return Err(CheckpointError::FaultInjection { round, limit }.into());
        }
        Ok(LassoCommit::empty())
    }
}

#[cfg(test)]
mod tests;
