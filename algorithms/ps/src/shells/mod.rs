//! The parameter server on the actor runtime: thin shells around
//! [`PsShardCore`](crate::core::shard::PsShardCore) and [`ClientCore`](crate::core::client::ClientCore).
//!
//! * [`ServerShard`]: an actor owning one `PsShardCore` (`ps-shard-<s>`); it takes
//!   [`ToShard`] messages and sends what the core decides to the workers' inboxes as
//!   [`ToClient`]; [`ShardQuery`]s (snapshot, checkpoint) are asks.
//! * [`PsClient`]: one worker's client (`get`, `inc`, `batch_inc`, `clock`, `barrier`); its
//!   `ClientCore` is shared with a [`ClientInbox`] actor (`ps-client-<w>`) that feeds it.
//!
//! The cores assume FIFO delivery per (client, shard) pair: every data message is a `tell`
//! at [`PS_PRIORITY`], so it travels on one transport lane. A core error at a shard is fatal
//! ([`ShardHandle::wait`]); a dead peer stops every node; a waiting read times out.
//! Files: [`messages`] (the wire protocol), [`layout`] (tables and placement), `shard` (the
//! shard actor), `client` (the client handle) and `query` (snapshots and readiness).

mod client;
pub mod layout;
pub mod messages;
mod query;
mod shard;

pub use client::{ClientInbox, PsClient, PullTicket};
pub use layout::{PsLayout, TablesBuilder};
pub use messages::{
    PS_PRIORITY, PlacementNote, ShardQuery, ShardState, ToClient, ToShard, client_actor_name,
    shard_actor_name,
};
pub(crate) use query::merge_snapshots;
pub use query::{
    Shards, admit_everywhere, merge_tables, snapshot_all, snapshot_of, wait_for_all_left,
    wait_for_min_clock, wait_for_shards, wait_for_shards_of, workers_joined,
};
pub use shard::{OnCheckpoint, ServerShard, ShardEnd, ShardHandle, start_shard, start_shard_core};
