//! The server shard: a [`SliceShardCore`] behind a priority mailbox, and its role.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use petrel_actors::{HandlerError, Msg, NodeContext, PriorityActor, PriorityInbox};

use crate::checkpoint::write_shard_file;
use crate::core::{Announce, Pulled, SliceShardCore};
use crate::error::P3Error;
use crate::kit::P3Job;
use crate::shells::index_in;
use crate::shells::messages::{InitSlice, PullSlice, PushGrad, SaveShard, SavedFile, SliceValues};
use crate::shells::worker::WORKER_ROLE;

/// The role of a server shard.
pub const SHARD_ROLE: &str = "p3-shard";
/// The name the shard actor is registered under.
pub const SHARD_ACTOR: &str = "p3-shard";

type Waiter = futures::channel::oneshot::Sender<Result<SliceValues, HandlerError>>;

/// A server shard: a [`SliceShardCore`] behind a priority mailbox.
pub struct ShardActor {
    core: SliceShardCore,
    inbox: PriorityInbox<Self>,
    waiters: HashMap<usize, Vec<Waiter>>,
    /// Joiners' pulls held per slice, by worker.
    pulls: HashMap<usize, Vec<(usize, Waiter)>>,
    first_arrival: HashMap<usize, Instant>,
}

impl ShardActor {
    /// A shard actor serving `core`'s slices.
    pub fn new(core: SliceShardCore) -> Self {
        ShardActor {
            core,
            inbox: PriorityInbox::default(),
            waiters: HashMap::new(),
            pulls: HashMap::new(),
            first_arrival: HashMap::new(),
        }
    }

    /// `e` as this shard's handler error.
    fn fail(&self, e: impl std::fmt::Display) -> HandlerError {
        HandlerError::new(format!("shard {}: {e}", self.core.shard()))
    }

    fn push(&mut self, m: PushGrad, tx: Waiter) {
        let slice = m.slice as usize;
        let iter = m.iter;
        let announce = Announce {
            leaving: m.leaving,
            joiners: m.joiners.iter().map(|&w| w as usize).collect(),
        };
        match self
            .core
            .push(iter, m.worker as usize, slice, m.grad, &announce)
        {
            Err(e) => {
                let _ = tx.send(Err(self.fail(e)));
            }
            Ok(None) => {
                self.first_arrival.entry(slice).or_insert_with(Instant::now);
                self.waiters.entry(slice).or_default().push(tx)
            }
            Ok(Some(applied)) => {
                if let Some(t) = self.first_arrival.remove(&slice) {
                    tracing::trace!(
                        shard = self.core.shard(),
                        slice,
                        iter,
                        spread_ms = t.elapsed().as_secs_f64() * 1e3,
                        "slice aggregated"
                    );
                }
                let waiters = self.waiters.remove(&slice).unwrap_or_default();
                let mut held = self.pulls.remove(&slice).unwrap_or_default();
                let (answered, kept) = held
                    .drain(..)
                    .partition::<Vec<_>, _>(|(w, _)| applied.pulls.contains(w));
                if !kept.is_empty() {
                    self.pulls.insert(slice, kept);
                }
                let reply = SliceValues {
                    iter,
                    slice: m.slice,
                    values: applied.values.clone(),
                    workers: applied.members.iter().map(|&w| w as u32).collect(),
                };
                for w in waiters.into_iter().chain([tx]) {
                    let _ = w.send(Ok(reply.clone()));
                }
                let pulled = start_values(slice, &Pulled::from(&applied));
                for (_, w) in answered {
                    let _ = w.send(Ok(pulled.clone()));
                }
            }
        }
    }

    fn pull(&mut self, m: PullSlice, tx: Waiter) {
        let (worker, slice) = (m.worker as usize, m.slice as usize);
        match self.core.pull(worker, slice) {
            Err(e) => {
                let _ = tx.send(Err(self.fail(e)));
            }
            Ok(None) => self.pulls.entry(slice).or_default().push((worker, tx)),
            Ok(Some(p)) => {
                let _ = tx.send(Ok(start_values(slice, &p)));
            }
        }
    }
}

/// The reply to a pull of `slice`: `iter` is the iteration the worker starts.
fn start_values(slice: usize, p: &Pulled) -> SliceValues {
    SliceValues {
        iter: p.start,
        slice: slice as u32,
        values: p.values.clone(),
        workers: p.members.iter().map(|&w| w as u32).collect(),
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;
}

impl PriorityActor for ShardActor {
    fn inbox(&mut self) -> &mut PriorityInbox<Self> {
        &mut self.inbox
    }
}

impl Handler<Msg<PushGrad>> for ShardActor {
    type Result = ResponseFuture<Result<SliceValues, HandlerError>>;

    fn handle(&mut self, msg: Msg<PushGrad>, ctx: &mut Context<Self>) -> Self::Result {
        self.queue(ctx, msg, Self::push)
    }
}

impl Handler<Msg<PullSlice>> for ShardActor {
    type Result = ResponseFuture<Result<SliceValues, HandlerError>>;

    fn handle(&mut self, msg: Msg<PullSlice>, ctx: &mut Context<Self>) -> Self::Result {
        self.queue(ctx, msg, Self::pull)
    }
}

impl ShardActor {
    /// Queues `handle(msg)` in the priority inbox at the message's priority; the reply
    /// comes once `handle` (or a later update) answers the waiter it gets.
    fn queue<B: petrel_messages::RemoteMessage + 'static>(
        &mut self,
        ctx: &mut Context<Self>,
        msg: Msg<B>,
        handle: fn(&mut Self, B, Waiter),
    ) -> ResponseFuture<Result<SliceValues, HandlerError>> {
        let (tx, rx) = futures::channel::oneshot::channel();
        let queued = PriorityInbox::defer(self, ctx, msg.priority, move |act, _| {
            handle(act, msg.body, tx);
            Ok(())
        });
        Box::pin(async move {
            queued.await?;
            rx.await
                .unwrap_or_else(|_| Err(HandlerError::new("shard stopped")))
        })
    }
}

impl Handler<Msg<InitSlice>> for ShardActor {
    type Result = Result<u32, HandlerError>;

    fn handle(&mut self, msg: Msg<InitSlice>, _: &mut Context<Self>) -> Self::Result {
        self.core
            .init_slice(msg.body.slice as usize, msg.body.values)
            .map_err(|e| self.fail(e))?;
        Ok(msg.body.slice)
    }
}

impl Handler<Msg<SaveShard>> for ShardActor {
    type Result = Result<SavedFile, HandlerError>;

    /// Writes this shard's checkpoint file: asked by worker 0 once every slice of round
    /// `round - 1` came back to it, so every slice is at iteration `round` (checked).
    fn handle(&mut self, msg: Msg<SaveShard>, _: &mut Context<Self>) -> Self::Result {
        let (shard, round) = (self.core.shard(), msg.body.round);
        let slices = self.core.snapshot(round).map_err(|e| self.fail(e))?;
        let dir = std::path::Path::new(&msg.body.dir);
        let entry = write_shard_file(dir, round, shard, slices).map_err(|e| self.fail(e))?;
        tracing::debug!(shard, round, part = %entry.part, "p3 shard checkpoint written");
        Ok(entry)
    }
}

/// The `p3-shard` role for `job` (also run by the built-in roles of the `petrel` binary):
/// starts the shard actor, then waits at the `p3.ready` and `p3.init` barriers.
pub async fn shard_role(ctx: NodeContext, job: Arc<P3Job>) -> Result<(), P3Error> {
    let me = index_in(&ctx, SHARD_ROLE)?;
    let plan = job.plan()?;
    let (capacity, members) = starting_workers(&ctx);
    let mut core =
        SliceShardCore::elastic(&plan, me, capacity, &members, job.opt)?.ending_at(job.iterations);
    if let Some(ck) = job.resume_point()? {
        let round = ck.round;
        let file = ck
            .shards
            .into_iter()
            .nth(me)
            .ok_or(P3Error::CheckpointRound {
                round,
                detail: format!("no file of shard {me}"),
            })?;
        core.restore(round, file.slices)?;
        tracing::info!(shard = me, round, "p3 shard resumed from its checkpoint");
    }
    // With workers that join, a start-up barrier would wait for a joiner that never enters
    // it: each shard takes the initial values every node derives, and the workers pull
    // them (asking again until this actor is registered).
    let elastic = ctx.settings.allows_membership_changes();
    if elastic {
        for s in plan.shard_slices(me) {
            let a = s.offset as usize;
            let values = job.initial[s.layer][a..a + s.len as usize].to_vec();
            core.init_slice(s.id, values)?;
        }
    }
    tracing::debug!(shard = me, slices = core.n_slices(), "p3 shard ready");
    let addr = ShardActor::new(core).start();
    ctx.node
        .register(SHARD_ACTOR, addr)?
        .accept::<PushGrad>()
        .accept::<PullSlice>()
        .accept::<InitSlice>()
        .accept::<SaveShard>();
    if !elastic {
        ctx.barrier("p3.ready").await?;
        ctx.barrier("p3.init").await?;
    }
    Ok(())
}

/// The number of worker nodes the job may have (worker ids run below it) and the ids of
/// those it starts with (the others are standby nodes that join later).
pub(crate) fn starting_workers(ctx: &NodeContext) -> (usize, Vec<usize>) {
    let workers: Vec<bool> = ctx
        .settings
        .nodes
        .iter()
        .filter(|n| n.roles.iter().any(|r| r == WORKER_ROLE))
        .map(|n| n.standby)
        .collect();
    let starting = (0..workers.len()).filter(|&w| !workers[w]).collect();
    (workers.len(), starting)
}
