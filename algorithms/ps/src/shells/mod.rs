//! The parameter server on the actor runtime: thin shells around [`PsShardCore`](crate::core::shard::PsShardCore) and [`ClientCore`](crate::core::client::ClientCore).
//!
//! * [`ServerShard`]: an actix actor owning one `PsShardCore`, registered as `ps-shard-<s>`. It
//!   takes [`ToShard`] messages (update batches, reads, barrier probes, a worker leaving) and
//!   sends what the core decides (replies, ESSP pushes) to the workers' client inboxes as
//!   [`ToClient`] messages. Queries ([`ShardQuery`]: snapshot, checkpoint) are asks.
//! * [`PsClient`]: one worker's client library (`get`, `inc`, `batch_inc`, `clock`, `barrier`),
//!   driven from the worker's role code. Its `ClientCore` is shared with a [`ClientInbox`]
//!   actor (`ps-client-<w>`) on the same thread that feeds replies and pushes into it.
//!
//! Ordering: the cores assume FIFO delivery per (client, shard) pair in each direction. Every
//! data message between a client and a shard is a `tell` at the single priority
//! [`PS_PRIORITY`], so it travels on one lane of the transport (FIFO), or through the local
//! actix mailbox (FIFO) when both sit on the same node.
//!
//! Failure: a core error at a shard (a protocol violation) is fatal and surfaces through
//! [`ShardHandle::wait`]; a dead peer node makes the runtime stop every node with an error
//! naming it (fail-fast), and a read still waiting fails after the request timeout.

//!
//! Files: [`messages`] (the wire protocol), [`layout`] (tables and placement), `shard` (the
//! shard actor), `client` (the client handle) and `query` (snapshots and readiness).

mod client;
pub mod layout;
pub mod messages;
mod query;
mod shard;

pub use client::{ClientError, ClientInbox, PsClient, PullTicket};
pub use layout::{PsLayout, TablesBuilder};
pub use messages::{
    PS_PRIORITY, ShardQuery, ShardState, ToClient, ToShard, client_actor_name, shard_actor_name,
};
pub use query::{
    merge_tables, snapshot_all, wait_for_all_left, wait_for_min_clock, wait_for_shards,
};
pub use shard::{OnCheckpoint, ServerShard, ShardHandle, start_shard, start_shard_core};
