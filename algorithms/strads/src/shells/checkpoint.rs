//! Round checkpoints' I/O for every kit app (the decisions are in
//! [`crate::core::checkpoint`]) on the runtime's checkpoint set
//! ([`petrel_actors::checkpoint`]): the worker side writes and reads its own part, the
//! scheduler side ([`RoundCheckpointer`]) asks every worker to save at a drain point, then
//! writes its own part and LAST the manifest, and on resume restores the newest valid
//! checkpoint into itself and every worker before the first dispatch.

use super::star::{SchedulerOptions, WorkerSet};
use super::{RestoreRoundState, SaveRoundState};
use crate::core::app::{Schedule, StradsApp};
use crate::core::checkpoint::{
    RoundCheckpointPolicy, SCHEDULER_PART, SCHEME, SchedulerRoundFile, WorkerRoundFile,
    checkpoint_mismatch, handoffs_settled, worker_part,
};
use crate::error::StradsError;
use petrel_actors::checkpoint::{CheckpointError, CheckpointSet, PartEntry};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a save is retried while blocks are still in transit between ring workers.
const SETTLE_ATTEMPTS: u32 = 50;

fn set(dir: &Path) -> CheckpointSet {
    CheckpointSet::new(dir, SCHEME)
}

fn decode<T: serde::de::DeserializeOwned>(path: PathBuf, bytes: &[u8]) -> Result<T, StradsError> {
    rmp_serde::from_slice(bytes).map_err(|e| {
        CheckpointError::Invalid {
            path,
            reason: format!("decode: {e}"),
        }
        .into()
    })
}

/// Fails, naming `dir`, unless it holds a checkpoint manifest (not verified): `resume`'s
/// check before any node starts.
pub fn require_checkpoint(dir: &Path) -> Result<(), StradsError> {
    if set(dir).rounds()?.is_empty() {
        return Err(CheckpointError::NoValid {
            dir: dir.to_path_buf(),
            reasons: Vec::new(),
        }
        .into());
    }
    Ok(())
}

/// Worker side of a save: writes worker `worker`'s part durably and returns its manifest
/// entry.
pub fn write_worker_round_file(
    msg: &SaveRoundState,
    worker: u32,
    file: &WorkerRoundFile,
) -> Result<PartEntry, StradsError> {
    let bytes = rmp_serde::to_vec(file)?;
    Ok(set(&msg.dir).write_part(msg.round, &worker_part(worker), &bytes)?)
}

/// Worker side of a restore: reads worker `worker`'s part, verified against the manifest's
/// entry.
pub fn read_worker_round_file(
    msg: &RestoreRoundState,
    worker: u32,
) -> Result<WorkerRoundFile, StradsError> {
    let set = set(&msg.dir);
    if msg.file.part != worker_part(worker) {
        return Err(CheckpointError::Invalid {
            path: set.manifest_path(msg.round),
            reason: format!("{:?} is not worker {worker}'s part", msg.file.part),
        }
        .into());
    }
    let bytes = set.read_part(msg.round, &msg.file)?;
    decode(set.manifest_path(msg.round), &bytes)
}

/// Where and how often a scheduler checkpoints, and whether it starts from the newest
/// checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundCheckpointSettings {
    /// The directory every node of the job sees.
    pub dir: PathBuf,
    /// Rounds between checkpoints (0 = never write; `resume` may still read).
    pub every: u64,
    /// Continue from the newest valid checkpoint in `dir`.
    pub resume: bool,
    /// Fault injection for tests: the scheduler fails right after writing this many
    /// checkpoints in this run ([`StradsError::FaultInjection`]).
    pub fail_after: Option<u64>,
}

impl RoundCheckpointSettings {
    /// Checkpoints into `dir` (none without one) every `every` rounds, resuming with
    /// `resume`; no fault injection.
    pub fn of(dir: &Option<PathBuf>, every: u64, resume: bool) -> Option<Self> {
        Some(RoundCheckpointSettings {
            dir: dir.clone()?,
            every,
            resume,
            fail_after: None,
        })
    }

    /// Refuses `resume` without a checkpoint directory.
    pub(crate) fn check_resume(
        c: &mut petrel_ml::job::SettingChecks,
        resume: bool,
        dir: &Option<PathBuf>,
    ) {
        c.require(
            !resume || dir.is_some(),
            "resume",
            resume,
            "needs checkpoint_dir",
        );
    }
}

/// The scheduler side of round checkpoints of app `app` (its settings section).
#[derive(Debug)]
pub struct RoundCheckpointer {
    app: String,
    settings: RoundCheckpointSettings,
    policy: RoundCheckpointPolicy,
    written: u64,
    elapsed_before: Duration,
}

impl RoundCheckpointer {
    /// Checkpoints of app `app` (its settings section) with `settings`.
    pub fn new(app: &str, settings: RoundCheckpointSettings) -> Self {
        RoundCheckpointer {
            app: app.to_string(),
            policy: RoundCheckpointPolicy::new(settings.every),
            settings,
            written: 0,
            elapsed_before: Duration::ZERO,
        }
    }

    /// Checkpoints written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// A round committed.
    pub fn round_committed(&mut self) {
        self.policy.round_committed();
    }

    /// A checkpoint is due at the next drain point (`progress`: the app's
    /// [`Schedule::checkpoint_progress`]).
    pub fn due(&self, progress: Option<u64>) -> bool {
        self.policy.due(progress)
    }

    /// Run time before the checkpoint the run resumed from (zero for a fresh run).
    pub fn elapsed_before(&self) -> Duration {
        self.elapsed_before
    }

    /// Whether the run starts from a checkpoint.
    pub fn resumes(&self) -> bool {
        self.settings.resume
    }

    /// A fresh run (not resuming) makes the checkpoints already in its directory obsolete:
    /// deletes their manifests, so that a restart of this run can only roll back to its own
    /// checkpoints (a directory of an older format is refused).
    pub fn clear_stale(&self) -> Result<(), StradsError> {
        Ok(set(&self.settings.dir).clear()?)
    }

    /// Takes the checkpoint of round boundary `round` (nothing in flight): every worker
    /// saves (again, while ring blocks are still in transit), then the scheduler's file,
    /// then the manifest; then older checkpoints are pruned. Nothing happens when the app's
    /// scheduler half has no state to give here (`snapshot_state` is `None`).
    pub async fn save<A: StradsApp, S: Schedule<A>>(
        &mut self,
        app: &mut S,
        workers: &WorkerSet<A>,
        opts: &SchedulerOptions,
        round: u64,
        elapsed: Duration,
    ) -> Result<(), StradsError> {
        let Some(state) = app
            .snapshot_state()
            .map_err(|source| StradsError::CheckpointApp { round, source })?
        else {
            tracing::debug!(app = %self.app, round, "the app takes no checkpoint here");
            return Ok(());
        };
        let dir = self.settings.dir.clone();
        let msg = SaveRoundState {
            app: self.app.clone(),
            round,
            dir: dir.clone(),
        };
        let mut attempt = 0;
        let saved = loop {
            attempt += 1;
            let msgs = vec![msg.clone(); workers.len()];
            let saved = ask_all(&workers.save, msgs, opts, round, "save").await?;
            for (worker, s) in saved.iter().enumerate() {
                if s.worker as usize != worker {
                    return Err(StradsError::CheckpointWrongWorker {
                        round,
                        worker,
                        answered: s.worker,
                    });
                }
            }
            let sent: Vec<Vec<u64>> = saved.iter().map(|s| s.sent.clone()).collect();
            let received: Vec<Vec<u64>> = saved.iter().map(|s| s.received.clone()).collect();
            if handoffs_settled(&sent, &received) {
                break saved;
            }
            if attempt >= SETTLE_ATTEMPTS {
                return Err(StradsError::CheckpointUnsettled {
                    round,
                    attempts: attempt,
                });
            }
            tracing::debug!(round, attempt, "ring blocks in transit; saving again");
            tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
        };
        let scheduler = SchedulerRoundFile {
            elapsed_s: elapsed.as_secs_f64(),
            state,
        };
        let set = set(&dir);
        let mut parts =
            vec![set.write_part(round, SCHEDULER_PART, &rmp_serde::to_vec(&scheduler)?)?];
        parts.extend(saved.into_iter().map(|s| s.file));
        set.commit(round, self.app.as_bytes(), parts)?;
        app.checkpointed(round, false);
        self.policy.reset(app.checkpoint_progress());
        self.written += 1;
        tracing::info!(app = %self.app, round, dir = %dir.display(), "checkpoint written");
        if let Some(limit) = self.settings.fail_after
            && self.written >= limit
        {
            return Err(StradsError::FaultInjection { round, limit });
        }
        Ok(())
    }

    /// Restores the newest valid checkpoint into `app` and every worker and returns its
    /// round (the first round of the resumed run). Invalid checkpoints are skipped with a
    /// warning naming the file and the reason; with none valid this fails and says why each
    /// was refused.
    pub async fn resume<A: StradsApp, S: Schedule<A>>(
        &mut self,
        app: &mut S,
        workers: &WorkerSet<A>,
        opts: &SchedulerOptions,
    ) -> Result<u64, StradsError> {
        let dir = self.settings.dir.clone();
        let n = workers.len();
        let (round, files, scheduler) = set(&dir).newest_valid(|ck| {
            let names = ck.part_names();
            if let Some(reason) = checkpoint_mismatch(&ck.meta, &names, &self.app, n) {
                return Err(ck.invalid(reason));
            }
            let scheduler: SchedulerRoundFile = rmp_serde::from_slice(&ck.parts[0].1)
                .map_err(|e| ck.invalid(format!("scheduler part: decode: {e}")))?;
            let files: Vec<PartEntry> = ck.parts.into_iter().skip(1).map(|(e, _)| e).collect();
            Ok((ck.round, files, scheduler))
        })?;
        app.restore_state(&scheduler.state)
            .map_err(|source| StradsError::CheckpointApp { round, source })?;
        let asks = files.into_iter().map(|file| RestoreRoundState {
            app: self.app.clone(),
            round,
            dir: dir.clone(),
            file,
        });
        ask_all(&workers.restore, asks, opts, round, "restore").await?;
        app.checkpointed(round, true);
        self.policy.reset(app.checkpoint_progress());
        self.elapsed_before = Duration::try_from_secs_f64(scheduler.elapsed_s).unwrap_or_default();
        tracing::info!(app = %self.app, round, dir = %dir.display(), "resuming from checkpoint");
        Ok(round)
    }
}

/// Asks every worker its message at once; fails naming the first that could not `what`.
async fn ask_all<M: petrel_messages::RemoteMessage>(
    addrs: &[petrel_actors::address::ActorRef<M>],
    msgs: impl IntoIterator<Item = M>,
    opts: &SchedulerOptions,
    round: u64,
    what: &'static str,
) -> Result<Vec<M::Reply>, StradsError> {
    let replies = futures::future::join_all(
        addrs
            .iter()
            .zip(msgs)
            .map(|(addr, msg)| addr.ask(msg, opts.priority, opts.timeout)),
    )
    .await;
    replies
        .into_iter()
        .enumerate()
        .map(|(worker, r)| {
            r.map_err(|source| StradsError::CheckpointWorker {
                what,
                round,
                worker,
                source,
            })
        })
        .collect()
}
