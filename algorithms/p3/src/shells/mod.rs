//! The P3 engine on petrel actors: thin shells around the sans-I/O cores.
//!
//! - [`messages`]: [`PushGrad`] (answered by [`SliceValues`]) and [`InitSlice`].
//! - [`shard`]: [`ShardActor`] (role `p3-shard`) serves its slices from a priority mailbox
//!   and answers every worker once all gradients of a slice are in, at the request's priority.
//! - [`worker`]: the `p3-worker` role runs any [`crate::kit::StageModel`] stage by stage over
//!   a [`crate::core::SliceWorkerCore`], pushing through the node's priority outbox.

pub mod messages;
pub mod shard;
mod start;
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
