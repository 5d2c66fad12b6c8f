//! Automatic checkpoints of a PS job, and resuming from them.
//!
//! At every multiple `c` of `every`, each shard writes its tables as of "every update of
//! clocks `< c` applied, none of `>= c`"
//! ([`PsShardCore::enable_checkpoints`](crate::core::shard::PsShardCore::enable_checkpoints)),
//! each worker what it needs to start clock `c` ([`PsApp::save_worker`]), and each tells the
//! monitor ([`PsSaved`]), which then writes its history
//! ([`MonitorState::save`](crate::kit::MonitorState::save)) and the manifest, last. `resume`
//! loads the newest checkpoint that verifies and matches the job.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use petrel_actors::durable::FileDigest;
use petrel_messages::remote_message;
use serde::{Deserialize, Serialize};

use crate::checkpoint::JobCheckpoint;
use crate::core::checkpoint::{JobShape, Piece};
use crate::core::types::Clock;
use crate::error::PsError;
use crate::kit::{PsApp, PsJob};

/// Where and how often a job checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsCheckpointing {
    /// The checkpoint directory (every node must see it).
    pub dir: PathBuf,
    /// Clocks between two checkpoints (0: none are written, though `resume` still reads).
    pub every: Clock,
    /// Continue from the newest valid checkpoint in `dir`.
    pub resume: bool,
}

/// A shard or worker tells the monitor that its piece of a checkpoint is durable.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsSaved {
    /// The checkpoint's clock.
    pub clock: Clock,
    /// Whose file.
    pub piece: Piece,
    /// Its part name in the checkpoint.
    pub name: String,
    /// Its length and checksum.
    pub digest: FileDigest,
}
remote_message!(PsSaved => (), "petrel.ps.saved");

/// The registry name of the monitor's checkpoint inbox of app `A`.
pub(crate) fn saved_actor<A: PsApp>() -> String {
    format!("{}-checkpoints", A::MONITOR_ACTOR)
}

/// Writes `piece` of the checkpoint of `clock` into `dir` and tells the monitor.
pub(crate) fn save_piece<A: PsApp>(
    node: &petrel_actors::Node,
    monitor_node: &str,
    (dir, clock): (&Path, Clock),
    piece: Piece,
    bytes: &[u8],
) -> Result<(), PsError> {
    let monitor = node.actor_at::<PsSaved>(monitor_node, &saved_actor::<A>())?;
    let entry = crate::checkpoint::write_piece(dir, clock, piece, bytes)?;
    let saved = PsSaved {
        clock,
        piece,
        name: entry.part,
        digest: entry.digest,
    };
    (monitor.tell(saved, petrel_messages::Priority::HIGH)).map_err(|source| PsError::Checkpoint {
        what: format!("{} of the checkpoint of clock {clock}", piece.part()),
        source,
    })
}

impl<A: PsApp> PsJob<A> {
    /// What a checkpoint of this job must match.
    pub fn shape(&self) -> JobShape {
        JobShape {
            app: A::NAME.to_string(),
            shards: self.layout.n_shards(),
            workers: self.layout.n_workers(),
            every: self.checkpointing.as_ref().map_or(0, |c| c.every),
            tables: self.app.tables(),
        }
    }

    /// The checkpoint this run resumes from (`None` unless `resume`), loaded once.
    pub fn resumed(&self) -> Result<Option<Arc<JobCheckpoint>>, PsError> {
        let Some(c) = self.checkpointing.as_ref().filter(|c| c.resume) else {
            return Ok(None);
        };
        let mut slot = self.resumed.lock().map_err(|_| PsError::InvalidConfig {
            app: A::NAME,
            reason: "a role panicked while loading the checkpoint".into(),
        })?;
        if let Some(ck) = slot.as_ref() {
            return Ok(Some(ck.clone()));
        }
        let ck = Arc::new(crate::checkpoint::load_newest_job_checkpoint(
            &c.dir,
            &self.shape(),
        )?);
        tracing::info!(app = A::NAME, clock = ck.clock, dir = %c.dir.display(), "resuming from a checkpoint");
        *slot = Some(ck.clone());
        Ok(Some(ck))
    }

    /// Checkpoints written (`every > 0`): the directory and the interval.
    pub(crate) fn writing(&self) -> Option<(&std::path::Path, Clock)> {
        self.checkpointing
            .as_ref()
            .filter(|c| c.every > 0)
            .map(|c| (c.dir.as_path(), c.every))
    }
}

/// The monitor's piece: its elapsed time and the app's history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MonitorPiece {
    /// Seconds the job had run at the checkpoint.
    pub elapsed_s: f64,
    /// [`MonitorState::save`](crate::kit::MonitorState::save)'s bytes.
    pub app: Vec<u8>,
}
