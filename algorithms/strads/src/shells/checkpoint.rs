//! Round checkpoints' I/O for every kit app (the decisions are in
//! [`crate::core::checkpoint`]): the worker side writes and reads its own file, the
//! scheduler side ([`RoundCheckpointer`]) asks every worker to save at a drain point, then
//! writes its own file and LAST the manifest, and on resume restores the newest valid
//! checkpoint into itself and every worker before the first dispatch.
//!
//! Every file is written atomically (temporary name, fsync, rename, directory fsync) with
//! the durable-file helpers of `petrel_actors::durable`, and verified against the
//! manifest's length and checksum before anything is restored from it.

use super::star::{SchedulerOptions, WorkerSet};
use super::{RestoreRoundState, SaveRoundState, SavedRoundState};
use crate::core::StradsModelError;
use crate::core::app::{Schedule, StradsApp};
use crate::core::checkpoint::{
    ROUND_CHECKPOINT_VERSION, ROUND_CHECKPOINTS_KEPT, RoundCheckpointPolicy, RoundFileEntry,
    RoundManifest, SchedulerRoundFile, WorkerRoundFile, handoffs_settled, manifest_mismatch,
    parse_round_file, round_manifest_name, round_scheduler_file, round_worker_file,
};
use petrel_actors::durable::{self, DurableError, FileDigest};
use petrel_actors::error::AskError;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MANIFEST_MAGIC: &[u8; 8] = b"PSTRCKP1";

/// How often a save is retried while blocks are still in transit between ring workers.
const SETTLE_ATTEMPTS: u32 = 50;

/// Errors of round checkpoints; each names the file, the round or the worker.
#[derive(Debug, thiserror::Error)]
pub enum RoundCheckpointError {
    /// A file is missing, short, corrupt or could not be written.
    #[error("invalid checkpoint: {0}")]
    File(#[from] DurableError),
    /// A file decodes but does not belong to this job or round.
    #[error("invalid checkpoint: {}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Resuming found no checkpoint to continue from.
    #[error("resume: {} holds no valid checkpoint{}", dir.display(), reasons_list(.reasons))]
    NoValid {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why each manifest was refused.
        reasons: Vec<String>,
    },
    /// A file could not be encoded.
    #[error("checkpoint encode: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// A worker could not save or restore.
    #[error("checkpoint of round {round}: worker {worker} could not {what}: {source}")]
    Worker {
        /// `save` or `restore`.
        what: &'static str,
        /// The round.
        round: u64,
        /// The worker.
        worker: usize,
        /// The ask's error (with the worker's reason).
        #[source]
        source: AskError,
    },
    /// A worker answered for another index.
    #[error("checkpoint of round {round}: worker {worker} answered as worker {answered}")]
    WrongWorker {
        /// The round.
        round: u64,
        /// The worker asked.
        worker: usize,
        /// The index it answered with.
        answered: u32,
    },
    /// Ring blocks were still travelling after every retry.
    #[error(
        "checkpoint of round {round}: blocks still in transit between ring workers after {attempts} attempts"
    )]
    Unsettled {
        /// The round.
        round: u64,
        /// Attempts made.
        attempts: u32,
    },
    /// The app half could not snapshot or restore its state.
    #[error("checkpoint of round {round}: {source}")]
    App {
        /// The round.
        round: u64,
        /// The app's error.
        #[source]
        source: StradsModelError,
    },
    /// The `fail_after` fault injection fired (a test hook).
    #[error("fault injection: stopping after checkpoint of round {round} (fail_after = {limit})")]
    FaultInjection {
        /// The last checkpoint's round.
        round: u64,
        /// The limit.
        limit: u64,
    },
}

fn reasons_list(reasons: &[String]) -> String {
    if reasons.is_empty() {
        " (no manifest found)".into()
    } else {
        format!(": {}", reasons.join("; "))
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> RoundCheckpointError {
    RoundCheckpointError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn entry(name: String, bytes: &[u8]) -> RoundFileEntry {
    let d = FileDigest::of(bytes);
    RoundFileEntry {
        name,
        len: d.len,
        fnv64: d.fnv64,
    }
}

fn read_entry(dir: &Path, e: &RoundFileEntry) -> Result<Vec<u8>, RoundCheckpointError> {
    let digest = FileDigest {
        len: e.len,
        fnv64: e.fnv64,
    };
    Ok(durable::read_verified(dir, &e.name, digest)?)
}

/// Worker side of a save: writes `strads-round-<r>-worker-<i>.bin` atomically and returns
/// its manifest entry.
pub fn write_worker_round_file(
    msg: &SaveRoundState,
    file: &WorkerRoundFile,
) -> Result<RoundFileEntry, RoundCheckpointError> {
    durable::create_dir(&msg.dir)?;
    let name = round_worker_file(msg.round, file.worker);
    let bytes = rmp_serde::to_vec(file)?;
    durable::write_atomic(&msg.dir, &name, &bytes)?;
    durable::sync_dir(&msg.dir)?;
    Ok(entry(name, &bytes))
}

/// Worker side of a restore: reads worker `worker`'s file, verified against the manifest's
/// entry and checked to be this app's, round's and worker's.
pub fn read_worker_round_file(
    msg: &RestoreRoundState,
    worker: u32,
) -> Result<WorkerRoundFile, RoundCheckpointError> {
    let path = msg.dir.join(&msg.file.name);
    if msg.file.name != round_worker_file(msg.round, worker) {
        return Err(invalid(&path, format!("is not worker {worker}'s file")));
    }
    let bytes = read_entry(&msg.dir, &msg.file)?;
    let file: WorkerRoundFile =
        rmp_serde::from_slice(&bytes).map_err(|e| invalid(&path, format!("decode: {e}")))?;
    if file.version != ROUND_CHECKPOINT_VERSION
        || file.app != msg.app
        || file.round != msg.round
        || file.worker != worker
    {
        return Err(invalid(
            &path,
            format!(
                "holds version {} of app {:?}, round {}, worker {}",
                file.version, file.app, file.round, file.worker
            ),
        ));
    }
    Ok(file)
}

/// Our files to delete once the checkpoint of round `newest` is complete: all but the
/// `keep` newest manifests at or below `newest` and their data files, manifests first
/// ([`durable::prune_plan`] over [`parse_round_file`]).
pub fn round_prune_plan(names: &[String], newest: u64, keep: usize) -> Vec<String> {
    durable::prune_plan(names, parse_round_file, newest, keep)
}

/// Rounds that have a manifest in `dir`, ascending (not verified; none when `dir` is
/// missing).
pub fn round_manifest_rounds(dir: &Path) -> Result<Vec<u64>, RoundCheckpointError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    Ok(durable::manifest_rounds_among(
        &durable::list_names(dir)?,
        parse_round_file,
    ))
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
    /// checkpoints in this run ([`RoundCheckpointError::FaultInjection`]).
    pub fail_after: Option<u64>,
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

    /// A checkpoint is due at the next drain point.
    pub fn due(&self) -> bool {
        self.policy.due()
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
    /// deletes them (our files only, manifests first), so that a restart of this run can
    /// only roll back to its own checkpoints.
    pub fn clear_stale(&self) -> Result<(), RoundCheckpointError> {
        let dir = &self.settings.dir;
        if !dir.exists() {
            return Ok(());
        }
        let names = durable::list_names(dir)?;
        let stale = round_prune_plan(&names, u64::MAX, 0);
        if !stale.is_empty() {
            tracing::info!(
                app = %self.app,
                dir = %dir.display(),
                files = stale.len(),
                "a fresh run deletes the older run's checkpoints"
            );
        }
        for name in stale {
            durable::remove_if_exists(dir, &name)?;
        }
        Ok(())
    }

    /// Takes the checkpoint of round boundary `round` (nothing in flight): every worker
    /// saves (again, while ring blocks are still in transit), then the scheduler's file,
    /// then the manifest; then older checkpoints are pruned. Nothing happens when the app's
    /// scheduler half has no state to give here (`snapshot_state` is `None`).
    pub async fn save<A: StradsApp, S: Schedule<A>>(
        &mut self,
        app: &S,
        workers: &WorkerSet<A>,
        opts: &SchedulerOptions,
        round: u64,
        elapsed: Duration,
    ) -> Result<(), RoundCheckpointError> {
        let Some(state) = app
            .snapshot_state()
            .map_err(|source| RoundCheckpointError::App { round, source })?
        else {
            tracing::debug!(app = %self.app, round, "the app takes no checkpoint here");
            return Ok(());
        };
        let dir = self.settings.dir.clone();
        durable::create_dir(&dir)?;
        durable::remove_if_exists(&dir, &round_manifest_name(round))?;
        let msg = SaveRoundState {
            app: self.app.clone(),
            round,
            dir: dir.clone(),
        };
        let mut attempt = 0;
        let saved = loop {
            attempt += 1;
            let saved = ask_all(&workers.save, &msg, opts, round, "save").await?;
            for (worker, s) in saved.iter().enumerate() {
                if s.worker as usize != worker {
                    return Err(RoundCheckpointError::WrongWorker {
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
                return Err(RoundCheckpointError::Unsettled {
                    round,
                    attempts: attempt,
                });
            }
            tracing::debug!(round, attempt, "ring blocks in transit; saving again");
            tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
        };
        let scheduler = SchedulerRoundFile {
            version: ROUND_CHECKPOINT_VERSION,
            app: self.app.clone(),
            round,
            elapsed_s: elapsed.as_secs_f64(),
            state,
        };
        let bytes = rmp_serde::to_vec(&scheduler)?;
        let name = round_scheduler_file(round);
        durable::write_atomic(&dir, &name, &bytes)?;
        let manifest = RoundManifest {
            version: ROUND_CHECKPOINT_VERSION,
            app: self.app.clone(),
            round,
            scheduler: entry(name, &bytes),
            workers: saved.into_iter().map(|s| s.file).collect(),
        };
        durable::sync_dir(&dir)?;
        let body = rmp_serde::to_vec(&manifest)?;
        durable::write_atomic(
            &dir,
            &round_manifest_name(round),
            &durable::frame(MANIFEST_MAGIC, &body),
        )?;
        durable::sync_dir(&dir)?;
        for name in round_prune_plan(&durable::list_names(&dir)?, round, ROUND_CHECKPOINTS_KEPT) {
            durable::remove_if_exists(&dir, &name)?;
        }
        self.policy.reset();
        self.written += 1;
        tracing::info!(app = %self.app, round, dir = %dir.display(), "checkpoint written");
        if let Some(limit) = self.settings.fail_after
            && self.written >= limit
        {
            return Err(RoundCheckpointError::FaultInjection { round, limit });
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
    ) -> Result<u64, RoundCheckpointError> {
        let dir = self.settings.dir.clone();
        let mut refused = Vec::new();
        for round in round_manifest_rounds(&dir)?.into_iter().rev() {
            match self.load_valid(round, workers.len()) {
                Ok((manifest, scheduler)) => {
                    for reason in &refused {
                        tracing::warn!(%reason, "skipping an invalid checkpoint");
                    }
                    app.restore_state(&scheduler.state)
                        .map_err(|source| RoundCheckpointError::App { round, source })?;
                    let asks = manifest.workers.iter().map(|file| RestoreRoundState {
                        app: self.app.clone(),
                        round,
                        dir: dir.clone(),
                        file: file.clone(),
                    });
                    let replies = futures::future::join_all(
                        workers
                            .restore
                            .iter()
                            .zip(asks)
                            .map(|(addr, msg)| addr.ask(msg, opts.priority, opts.timeout)),
                    )
                    .await;
                    for (worker, r) in replies.into_iter().enumerate() {
                        r.map_err(|source| RoundCheckpointError::Worker {
                            what: "restore",
                            round,
                            worker,
                            source,
                        })?;
                    }
                    self.policy.reset();
                    self.elapsed_before =
                        Duration::try_from_secs_f64(scheduler.elapsed_s).unwrap_or_default();
                    tracing::info!(app = %self.app, round, dir = %dir.display(), "resumed from checkpoint");
                    return Ok(round);
                }
                Err(e) => refused.push(e.to_string()),
            }
        }
        Err(RoundCheckpointError::NoValid {
            dir,
            reasons: refused,
        })
    }

    /// The manifest of `round` and the scheduler's file, with every listed file verified.
    fn load_valid(
        &self,
        round: u64,
        workers: usize,
    ) -> Result<(RoundManifest, SchedulerRoundFile), RoundCheckpointError> {
        let dir = &self.settings.dir;
        let path = dir.join(round_manifest_name(round));
        let body = durable::read_framed(&path, MANIFEST_MAGIC)?;
        let manifest: RoundManifest = rmp_serde::from_slice(&body)
            .map_err(|e| invalid(&path, format!("manifest decode: {e}")))?;
        if let Some(reason) = manifest_mismatch(&manifest, &self.app, round, workers) {
            return Err(invalid(&path, reason));
        }
        for file in &manifest.workers {
            read_entry(dir, file)?;
        }
        let bytes = read_entry(dir, &manifest.scheduler)?;
        let file = dir.join(&manifest.scheduler.name);
        let scheduler: SchedulerRoundFile =
            rmp_serde::from_slice(&bytes).map_err(|e| invalid(&file, format!("decode: {e}")))?;
        if scheduler.version != ROUND_CHECKPOINT_VERSION
            || scheduler.app != self.app
            || scheduler.round != round
        {
            return Err(invalid(
                &file,
                format!(
                    "holds version {} of app {:?}, round {}",
                    scheduler.version, scheduler.app, scheduler.round
                ),
            ));
        }
        Ok((manifest, scheduler))
    }
}

async fn ask_all(
    addrs: &[petrel_actors::address::ActorRef<SaveRoundState>],
    msg: &SaveRoundState,
    opts: &SchedulerOptions,
    round: u64,
    what: &'static str,
) -> Result<Vec<SavedRoundState>, RoundCheckpointError> {
    let replies = futures::future::join_all(
        addrs
            .iter()
            .map(|addr| addr.ask(msg.clone(), opts.priority, opts.timeout)),
    )
    .await;
    replies
        .into_iter()
        .enumerate()
        .map(|(worker, r)| {
            r.map_err(|source| RoundCheckpointError::Worker {
                what,
                round,
                worker,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_complete_checkpoints_and_deletes_manifests_first() {
        let mut names: Vec<String> = Vec::new();
        for r in [10, 20, 30] {
            names.push(round_worker_file(r, 0));
            names.push(round_scheduler_file(r));
            names.push(round_manifest_name(r));
        }
        // Round 40 has no manifest (a save that crashed): its files are orphans, deleted.
        names.push(round_worker_file(40, 0));
        names.push("unrelated.txt".into());
        let doomed = round_prune_plan(&names, 30, 2);
        assert_eq!(
            doomed,
            vec![
                round_manifest_name(10),
                round_worker_file(10, 0),
                round_scheduler_file(10),
                round_worker_file(40, 0)
            ]
        );
    }
}
