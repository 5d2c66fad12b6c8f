//! The STRADS actor shells: thin async loops and actix actors around the sans-I/O cores.
//!
//! - [`star`]: [`run_scheduler`] (the scheduler's event loop, driving a
//!   [`PipelineCore`]) and [`StradsWorker`] (an actor
//!   that hands dispatches and commits to the app's [`Push`] half).
//! - [`ring`]: [`RingWorker`], an actor around a [`RingCore`](crate::core::ring::RingCore)
//!   whose blocks travel worker to worker in [`Handoff`]s.
//!
//! Up to `depth` rounds are in flight at once ([`SchedulerOptions::depth`]); commits are
//! applied strictly in round order, and every worker sees the same sequence of messages
//! (dispatches and commits travel FIFO at one priority), so for a deterministic app the
//! result does not depend on timing or on the transport. Several schedulers may drive the
//! same workers, each with its own disjoint variables.

use petrel_messages::RemoteMessage;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use petrel_actors::checkpoint::PartEntry;

pub mod checkpoint;
pub mod elastic;
pub mod ring;
pub mod star;

pub use crate::core::app::{
    BlockFate, BlockId, Plan, Push, RingApp, RingOutput, RingPush, Schedule, Step, StradsApp,
};
pub use crate::core::pipeline::{PipelineAction, PipelineCore};
pub use checkpoint::{RoundCheckpointSettings, RoundCheckpointer};
pub use elastic::{ElasticWorkers, RosterNotice, starting_workers};
pub use ring::{RingWorker, ring_members, start_ring_worker};
pub use star::{
    RunStats, SchedulerOptions, StradsWorker, WorkerSet, run_scheduler, run_scheduler_checkpointed,
    run_scheduler_elastic, run_scheduler_from, start_elastic_worker, start_worker,
};

/// Scheduler -> worker: the work of one round.
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Task: Serialize",
    deserialize = "A::Task: DeserializeOwned"
))]
pub struct Dispatch<A: StradsApp> {
    /// Index of the sending scheduler.
    pub scheduler: u32,
    /// The round (per scheduler).
    pub round: u64,
    /// This worker's task.
    pub task: A::Task,
}

/// Worker -> scheduler: the reply to a [`Dispatch`].
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Partial: Serialize",
    deserialize = "A::Partial: DeserializeOwned"
))]
pub struct PartialResult<A: StradsApp> {
    /// The round answered.
    pub round: u64,
    /// The answering worker's index.
    pub worker: u32,
    /// Its partial result.
    pub partial: A::Partial,
}

/// Scheduler -> every worker: the aggregated result of a round, to apply.
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Commit: Serialize",
    deserialize = "A::Commit: DeserializeOwned"
))]
pub struct Commit<A: StradsApp> {
    /// Index of the sending scheduler.
    pub scheduler: u32,
    /// The round committed.
    pub round: u64,
    /// What every worker applies.
    pub commit: A::Commit,
}

// By hand: a derive would ask `A` itself (a marker type) to be `Clone`.
impl<A: StradsApp> Clone for Commit<A> {
    fn clone(&self) -> Self {
        Commit {
            scheduler: self.scheduler,
            round: self.round,
            commit: self.commit.clone(),
        }
    }
}

impl<A: StradsApp> RemoteMessage for Dispatch<A> {
    const TYPE_NAME: &'static str = A::DISPATCH_NAME;
    type Reply = PartialResult<A>;
}

impl<A: StradsApp> RemoteMessage for Commit<A> {
    const TYPE_NAME: &'static str = A::COMMIT_NAME;
    type Reply = ();
}

/// Worker -> worker: a block and the round whose push produced this version of it.
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Block: Serialize",
    deserialize = "A::Block: DeserializeOwned"
))]
pub struct Handoff<A: RingApp> {
    /// The block's id.
    pub block_id: BlockId,
    /// The round whose push produced this version.
    pub round: u64,
    /// Index of the sending worker (for error messages).
    pub from: u32,
    /// The block.
    pub block: A::Block,
}

impl<A: RingApp> RemoteMessage for Handoff<A> {
    const TYPE_NAME: &'static str = A::HANDOFF_NAME;
    type Reply = ();
}

/// Scheduler -> every worker at a drain point: write your state for the checkpoint of
/// round boundary `round` into `dir` ([`checkpoint`]). Sent again while ring blocks are in
/// transit; each answer replaces the worker's file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SaveRoundState {
    /// The app's settings section.
    pub app: String,
    /// The first round after the checkpoint.
    pub round: u64,
    /// The checkpoint directory.
    pub dir: PathBuf,
}

/// Worker -> scheduler: the file written, and the handoffs this worker sent to and received
/// from each ring worker so far (empty for star workers).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedRoundState {
    /// The answering worker's index.
    pub worker: u32,
    /// Its file, for the manifest.
    pub file: PartEntry,
    /// Handoffs sent, per receiving worker.
    pub sent: Vec<u64>,
    /// Handoffs received, per sending worker.
    pub received: Vec<u64>,
}

impl RemoteMessage for SaveRoundState {
    const TYPE_NAME: &'static str = "strads.save_round_state";
    type Reply = SavedRoundState;
}

/// Scheduler -> every worker before the first dispatch of a resumed run: continue from
/// your file of the checkpoint of `round`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoreRoundState {
    /// The app's settings section.
    pub app: String,
    /// The checkpoint's round.
    pub round: u64,
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// This worker's file as the manifest lists it.
    pub file: PartEntry,
}

impl RemoteMessage for RestoreRoundState {
    const TYPE_NAME: &'static str = "strads.restore_round_state";
    type Reply = ();
}
