//! The P3 engine on petrel actors: thin shells around the sans-I/O cores.
//!
//! - [`messages`]: the wire types, [`PushGrad`] (answered by [`SliceValues`]) and
//!   [`InitSlice`].
//! - [`shard`]: [`ShardActor`] (role `p3-shard`) holds the parameter slices its shard owns
//!   in a [`crate::core::SliceShardCore`]. A worker *asks* it with [`PushGrad`] at the
//!   slice's priority; the shard queues the work in a priority mailbox (highest priority
//!   first), and once every worker's gradient of that slice and iteration is in, applies
//!   SGD with momentum and answers every waiting worker with the new [`SliceValues`].
//!   Replies travel at the request's priority, so the pull of a slice is prioritised
//!   exactly like its push.
//! - [`worker`]: the `p3-worker` role runs any [`crate::kit::StageModel`] stage by stage
//!   over a [`crate::core::SliceWorkerCore`]. Forward stage `k` starts when stage `k`'s
//!   tensors are back; backward stage `k`'s gradients are pushed at once (`fifo`, `p3`) or
//!   after the whole backward pass (`sequential`). Pushes go through the node's priority
//!   outbox onto per-message QUIC streams whose priority is the slice's priority.

pub mod messages;
pub mod shard;
pub mod worker;

pub use messages::{InitSlice, PushGrad, SliceValues};
pub use shard::{SHARD_ACTOR, SHARD_ROLE, ShardActor, shard_role};
pub use worker::{WORKER_ROLE, worker_role};

use petrel_actors::NodeContext;

use crate::error::P3Error;

/// This node's index among the nodes running `role`.
fn index_in(ctx: &NodeContext, role: &'static str) -> Result<usize, P3Error> {
    ctx.nodes_with_role(role)
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or_else(|| P3Error::NotInRole {
            node: ctx.spec.name.clone(),
            role,
        })
}
