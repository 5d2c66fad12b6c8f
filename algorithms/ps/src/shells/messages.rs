//! The wire protocol between workers' clients and shards, and the registry names.

use petrel_messages::{Priority, remote_message};
use serde::{Deserialize, Serialize};

use crate::core::placement::Placement;
use crate::core::server_push::ServerPushStats;
use crate::core::shard::{ShardAction, TableSnapshot};
use crate::core::types::{Clock, ReadRequest, ShardBatch, WorkerId};

/// The one priority of all PS data traffic (one FIFO lane, see [`crate::shells`]).
pub const PS_PRIORITY: Priority = Priority::NORMAL;

/// Registry name of shard `s`.
pub fn shard_actor_name(shard: u32) -> String {
    format!("ps-shard-{shard}")
}

/// Registry name of worker `w`'s client inbox.
pub fn client_actor_name(worker: u32) -> String {
    format!("ps-client-{worker}")
}

/// Client -> shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToShard {
    /// An update batch (ends a clock when `end_of_clock`).
    Batch(ShardBatch),
    /// Reads, each answered when the shard's min clock allows.
    Reads(Vec<ReadRequest>),
    /// Barrier probes (`PsShardCore::handle_sync`).
    Syncs(Vec<ReadRequest>),
    /// Asks which of the worker's update batches are applied (`ShardAction::Ack`).
    Ack {
        /// The asking worker.
        worker: WorkerId,
    },
    /// The worker is done: it no longer holds back the min clock.
    Leave {
        /// The worker that is done.
        worker: WorkerId,
    },
}
remote_message!(ToShard => (), "petrel.ps.to_shard");

/// Shard (or controller) -> client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToClient {
    /// Replies and pushes from shard `shard`, in the order the core produced them.
    Actions {
        /// The sending shard.
        shard: u32,
        /// Replies and pushes, in production order.
        actions: Vec<ShardAction>,
    },
    /// Asks the worker to stop at its next clock boundary (see `PsClient::stop_requested`).
    Stop {
        /// Why (for the log).
        reason: String,
    },
    /// The shard set changes towards placement epoch `epoch`: say the next boundary and
    /// pause there ([`crate::core::placement::WorkerPause`]).
    Pause {
        /// The epoch of the placement after the change.
        epoch: u64,
    },
    /// Run to clock `cut`, report and pause there.
    Cut {
        /// The epoch of the placement after the change.
        epoch: u64,
        /// The clock every worker pauses at.
        cut: Clock,
    },
    /// Resume with `placement` (the moved rows are at their new owners).
    Resume {
        /// The placement in force from now.
        placement: Placement,
    },
}
remote_message!(ToClient => (), "petrel.ps.to_client");

/// Worker or shard -> the coordinator of shard changes (on the monitor's node).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PlacementNote {
    /// `worker` pauses at the boundary of `clock` (first the next one it reaches, then the
    /// cut, once there).
    Paused {
        /// The worker.
        worker: u32,
        /// Its clock (completed clocks).
        clock: Clock,
    },
    /// `worker` ended its run and left every shard.
    Gone {
        /// The worker.
        worker: u32,
    },
    /// Shard `shard` (of a standby node) started and waits for its rows.
    ShardJoined {
        /// The shard.
        shard: u32,
    },
    /// Shard `shard`'s node was asked to leave: it waits to hand its rows over.
    ShardLeaving {
        /// The shard.
        shard: u32,
    },
    /// Shard `shard`, asked to leave, still holds its rows as every worker ended first: it
    /// asks until refused (the coordinator closed once the final tables were read).
    Holding {
        /// The shard.
        shard: u32,
    },
}
remote_message!(PlacementNote => (), "petrel.ps.placement_note");

/// Questions to a shard (asks, any priority).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ShardQuery {
    /// Liveness probe: the min clock only (no rows).
    Ping,
    /// All rows of every table and the min clock.
    Snapshot,
    /// Writes an atomic checkpoint of this shard into `dir` at its current min clock.
    Checkpoint {
        /// The checkpoint directory (on the shard's host).
        dir: String,
    },
    /// The evaluation cuts completed since the last such query (no live rows).
    EvalCuts,
    /// Admits `worker` of a standby node at `clock` or the shard's min clock, whichever is
    /// larger ([`crate::core::shard::PsShardCore::admit`]); no rows.
    Admit {
        /// The joining worker.
        worker: WorkerId,
        /// The clock it asks to start at.
        clock: Clock,
    },
    /// At a clock boundary: gives up the rows `next` places elsewhere (in the answer's
    /// `tables`); a shard `next` leaves out also answers its last evaluation cuts
    /// ([`crate::core::shard::PsShardCore::hand_over`]).
    HandOver {
        /// The placement after the change.
        next: Placement,
    },
    /// Stops a shard that handed every row over. Told, not asked: its node leaves at once,
    /// and an answer could be lost on the way.
    Retire,
    /// Takes rows handed over ([`crate::core::shard::PsShardCore::take_over`]); a shard that
    /// joins first takes `next` and the members at the cut.
    TakeOver {
        /// The placement after the change.
        next: Placement,
        /// For a joining shard: the cut and the workers taking part.
        joining: Option<(Clock, Vec<WorkerId>)>,
        /// The rows now placed here.
        tables: Vec<TableSnapshot>,
    },
}

/// A shard's answer to a [`ShardQuery`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardState {
    /// The answering shard.
    pub shard: u32,
    /// Its min clock (every update of clocks below it is applied).
    pub min_clock: Clock,
    /// Its rows (empty for `Ping`).
    pub tables: Vec<TableSnapshot>,
    /// Set by `Checkpoint`: the clock the checkpoint was written at.
    pub checkpoint_clock: Option<Clock>,
    /// Workers that left this shard (all their updates are applied).
    #[serde(default)]
    pub workers_left: u32,
    /// Workers that were ever members here: those that left plus the current members.
    #[serde(default)]
    pub workers_joined: u32,
    /// Set by `Admit`: the clock the worker was admitted at.
    #[serde(default)]
    pub admitted_at: Option<Clock>,
    /// What this shard's server push has sent (all zero when it is off).
    #[serde(default)]
    pub server_push: ServerPushStats,
    /// Set by `EvalCuts`: the evaluation cuts completed since the last ask.
    #[serde(default)]
    pub eval_cuts: Vec<(Clock, Vec<TableSnapshot>)>,
}
remote_message!(ShardQuery => ShardState, "petrel.ps.shard_query");
