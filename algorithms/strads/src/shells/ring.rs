//! Ring routing's worker actor: blocks of the model travel worker to worker, not through
//! the scheduler.
//!
//! In a rotation schedule (MF, LDA) worker `p` works on block `(p + s) mod P` in sub-round
//! `s`. Routed through the scheduler, every block goes scheduler -> worker -> scheduler in
//! every sub-round, so the whole model crosses one node twice per sub-round. A
//! [`RingApp`] instead keeps the blocks with the workers: the scheduler's [`Dispatch`] only
//! names the block a task needs, the worker's push gets the block it holds by value and
//! says what to do with it afterwards ([`BlockFate`](crate::core::app::BlockFate)): keep
//! it, pass it to worker `j` in a [`Handoff`] (worker -> worker tell), or consume it.
//!
//! ```text
//! scheduler --Dispatch{round r, needs block b}--> worker p   (waits until it holds b)
//! worker p: push(task, block b) -> partial, PassTo{j}
//! worker p --Handoff{b, produced in r}--> worker j           (before the partial leaves)
//! worker p --PartialResult--> scheduler -> pull -> Commit to every worker
//! ```
//!
//! The decisions (queue order, which block serves which dispatch, protocol errors) are the
//! sans-I/O [`RingCore`]'s; [`RingWorker`] feeds it messages and answers the scheduler's
//! asks through oneshots completed later (the actor never blocks). The scheduler side is
//! the star loop ([`super::run_scheduler`]) unchanged.

use super::checkpoint::{read_worker_round_file, write_worker_round_file};
use super::elastic::WorkerExit;
use super::{
    Commit, Dispatch, Handoff, PartialResult, RestoreRoundState, SaveRoundState, SavedRoundState,
};
use crate::core::StradsModelError;
use crate::core::app::{BlockId, RingApp, RingPush, StradsApp};
use crate::core::checkpoint::{HeldBlockRecord, WorkerRoundFile};
use crate::core::ring::{Poisoned, Ready, RingCore, settle};
use actix::prelude::*;
use futures::channel::oneshot;
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::{HandlerError, NodeError};
use petrel_messages::{ActorId, Priority};
use std::marker::PhantomData;

type ReplySender<A> = oneshot::Sender<Result<PartialResult<A>, HandlerError>>;

/// What a ring worker remembers about a queued dispatch.
struct PendingReply<A: StradsApp> {
    reply: ReplySender<A>,
    priority: Priority,
}

type WorkerCore<A> = RingCore<
    <A as StradsApp>::Task,
    <A as StradsApp>::Commit,
    <A as RingApp>::Block,
    PendingReply<A>,
>;

/// A worker actor of a [`RingApp`]: accepts [`Dispatch`], [`Commit`] and [`Handoff`].
pub struct RingWorker<A: RingApp, W: RingPush<A>> {
    index: u32,
    logic: W,
    node: petrel_actors::Node,
    ring: Vec<ActorId>,
    resolved: Vec<Option<ActorRef<Handoff<A>>>>,
    /// Boxed: the app's types need not be `Unpin` (actors must be).
    core: Box<WorkerCore<A>>,
    /// Handoffs sent to each ring worker (a checkpoint's consistency check).
    sent: Vec<u64>,
    /// Handoffs received from each ring worker.
    received: Vec<u64>,
    /// Set in a job whose workers may leave.
    exit: Option<WorkerExit>,
    _app: PhantomData<fn() -> A>,
}

impl<A: RingApp, W: RingPush<A>> RingWorker<A, W> {
    /// Worker `index` of `ring` (the ring workers' actor ids in worker order, this one
    /// included), holding the `initial` blocks.
    pub fn new(
        node: petrel_actors::Node,
        index: u32,
        ring: Vec<ActorId>,
        logic: W,
        initial: Vec<(BlockId, A::Block)>,
    ) -> Result<Self, StradsModelError> {
        if index as usize >= ring.len() {
            return Err(StradsModelError::IndexOutsideRing {
                worker: index,
                ring: ring.len(),
            });
        }
        let core = Box::new(RingCore::new(index, initial)?);
        Ok(RingWorker {
            index,
            logic,
            node,
            resolved: (0..ring.len()).map(|_| None).collect(),
            sent: vec![0; ring.len()],
            received: vec![0; ring.len()],
            ring,
            core,
            exit: None,
            _app: PhantomData,
        })
    }

    /// The handoff address of ring worker `to` (resolved once).
    fn peer(&mut self, to: u32) -> Result<ActorRef<Handoff<A>>, String> {
        let slot = self
            .resolved
            .get_mut(to as usize)
            .ok_or_else(|| format!("no ring worker {to}"))?;
        if let Some(addr) = slot {
            return Ok(addr.clone());
        }
        let id = &self.ring[to as usize];
        let addr = self
            .node
            .actor::<Handoff<A>>(id)
            .map_err(|e| format!("ring worker {to} ({id:?}): {e}"))?;
        *slot = Some(addr.clone());
        Ok(addr)
    }

    fn fail(&mut self, poisoned: Poisoned<PendingReply<A>>) {
        tracing::error!(worker = self.index, reason = %poisoned.reason, "ring worker failed");
        for orphan in poisoned.orphans {
            let _ = orphan
                .reply
                .send(Err(HandlerError::new(poisoned.reason.to_string())));
        }
    }

    /// Applies every scheduler message that can run now.
    fn drain(&mut self) {
        loop {
            match self.core.next_ready() {
                Ok(None) => return,
                Err(poisoned) => return self.fail(poisoned),
                Ok(Some(Ready::Commit { round, commit })) => {
                    if let Err(source) = self.logic.commit(round, &commit) {
                        let p = self.core.poison(StradsModelError::RingCommit {
                            worker: self.index,
                            round,
                            source: Box::new(source),
                        });
                        return self.fail(p);
                    }
                    if let Some(exit) = &mut self.exit {
                        exit.after_commit(self.logic.holds_work());
                    }
                }
                Ok(Some(Ready::Push {
                    round,
                    need,
                    task,
                    block,
                    reply,
                })) => {
                    let result = match A::new_ring(&task) {
                        Some(names) => self.rering(round, names, &task),
                        None => self.push(round, need, &task, block, reply.priority),
                    };
                    match result {
                        Ok(partial) => {
                            let _ = reply.reply.send(Ok(PartialResult {
                                round,
                                worker: self.index,
                                partial,
                            }));
                        }
                        Err(reason) => {
                            let mut p = self.core.poison(reason);
                            p.orphans.insert(0, reply);
                            return self.fail(p);
                        }
                    }
                }
            }
        }
    }

    /// A change's round: the app half rebuilds itself for the ring of `names` (this node
    /// absent: it leaves) and the worker takes its new index, peers and blocks.
    fn rering(
        &mut self,
        round: u64,
        names: &[String],
        task: &A::Task,
    ) -> Result<A::Partial, StradsModelError> {
        let index = names.iter().position(|n| n == self.node.name());
        let index = index.map(|i| i as u32);
        let failed = |source| StradsModelError::RingPush {
            worker: self.index,
            round,
            source: Box::new(source),
        };
        let actor = self.ring.get(self.index as usize).map(|id| id.name.clone());
        let ring = ring_members(&self.node, names, &actor.unwrap_or_default())
            .map_err(|e| failed(StradsModelError::InvalidConfig(e.to_string())))?;
        let (partial, blocks) = self.logic.rering(round, task, index).map_err(failed)?;
        let index = index.unwrap_or(self.index);
        self.core.rering(index, blocks)?;
        tracing::info!(round, worker = index, ring = ?names, "ring re-formed");
        self.index = index;
        self.resolved = (0..ring.len()).map(|_| None).collect();
        self.sent = vec![0; ring.len()];
        self.received = vec![0; ring.len()];
        self.ring = ring;
        Ok(partial)
    }

    fn push(
        &mut self,
        round: u64,
        need: Option<BlockId>,
        task: &A::Task,
        block: Option<A::Block>,
        priority: Priority,
    ) -> Result<A::Partial, StradsModelError> {
        let out =
            self.logic
                .push(round, task, block)
                .map_err(|source| StradsModelError::RingPush {
                    worker: self.index,
                    round,
                    source: Box::new(source),
                })?;
        if let Some((to, block_id, block)) =
            settle(&mut self.core, self.ring.len(), round, need, out.block)?
        {
            let msg = Handoff::<A> {
                block_id,
                round,
                from: self.index,
                block,
            };
            let worker = self.index;
            let failed = |reason: String| StradsModelError::HandoffFailed {
                worker,
                block: block_id,
                to,
                reason,
            };
            let peer = self.peer(to).map_err(failed)?;
            peer.tell(msg, priority)
                .map_err(|e| failed(e.to_string()))?;
            if let Some(n) = self.sent.get_mut(to as usize) {
                *n += 1;
            }
        }
        Ok(out.partial)
    }
}

impl<A: RingApp, W: RingPush<A>> Actor for RingWorker<A, W> {
    type Context = Context<Self>;
}

impl<A: RingApp, W: RingPush<A>> Handler<Msg<Dispatch<A>>> for RingWorker<A, W> {
    type Result = ResponseFuture<Result<PartialResult<A>, HandlerError>>;

    fn handle(&mut self, msg: Msg<Dispatch<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        let Dispatch { round, task, .. } = msg.body;
        let (tx, rx) = oneshot::channel();
        let need = A::block_needed(&task);
        let pending = PendingReply {
            reply: tx,
            priority: msg.priority,
        };
        match self.core.dispatch(round, need, task, pending) {
            Ok(()) => self.drain(),
            Err(p) => self.fail(p),
        }
        let index = self.index;
        Box::pin(async move {
            rx.await.map_err(|_| {
                HandlerError::new(format!(
                    "worker {index} dropped the dispatch of round {round}"
                ))
            })?
        })
    }
}

impl<A: RingApp, W: RingPush<A>> Handler<Msg<Commit<A>>> for RingWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Commit<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        let Commit { round, commit, .. } = msg.body;
        if self.core.commit(round, commit) {
            self.drain();
        }
        Ok(())
    }
}

impl<A: RingApp, W: RingPush<A>> Handler<Msg<Handoff<A>>> for RingWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Handoff<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        let Handoff {
            block_id,
            round,
            from,
            block,
        } = msg.body;
        if let Some(n) = self.received.get_mut(from as usize) {
            *n += 1;
        }
        if let Err(p) = self.core.handoff(block_id, block, round, from) {
            let reason = p.reason.to_string();
            self.fail(p);
            return Err(HandlerError::new(reason));
        }
        self.drain();
        Ok(())
    }
}

impl<A: RingApp, W: RingPush<A>> RingWorker<A, W> {
    fn save(&self, msg: &SaveRoundState) -> Result<SavedRoundState, String> {
        if let Some(e) = self.core.failed() {
            return Err(format!("failed earlier: {e}"));
        }
        if self.core.queued() > 0 {
            return Err(format!(
                "{} scheduler messages still queued at a drain point",
                self.core.queued()
            ));
        }
        let state = self
            .logic
            .snapshot_state()
            .map_err(|e| e.to_string())?
            .ok_or("this app does not implement snapshot_state")?;
        let blocks = self
            .core
            .held_versions()
            .map(|(id, produced, block)| {
                rmp_serde::to_vec(block)
                    .map(|block| HeldBlockRecord {
                        id,
                        produced,
                        block,
                    })
                    .map_err(|e| format!("block {id}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let file = WorkerRoundFile { state, blocks };
        let file = write_worker_round_file(msg, self.index, &file).map_err(|e| e.to_string())?;
        Ok(SavedRoundState {
            worker: self.index,
            file,
            sent: self.sent.clone(),
            received: self.received.clone(),
        })
    }

    fn restore(&mut self, msg: &RestoreRoundState) -> Result<(), String> {
        let file = read_worker_round_file(msg, self.index).map_err(|e| e.to_string())?;
        let blocks = file
            .blocks
            .into_iter()
            .map(|r| {
                rmp_serde::from_slice::<A::Block>(&r.block)
                    .map(|b| (r.id, r.produced, b))
                    .map_err(|e| format!("block {}: {e}", r.id))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.core.restore_held(blocks).map_err(|e| e.to_string())?;
        self.logic
            .restore_state(&file.state)
            .map_err(|e| e.to_string())
    }
}

impl<A: RingApp, W: RingPush<A>> Handler<Msg<SaveRoundState>> for RingWorker<A, W> {
    type Result = Result<SavedRoundState, HandlerError>;

    fn handle(&mut self, msg: Msg<SaveRoundState>, _ctx: &mut Context<Self>) -> Self::Result {
        self.save(&msg.body)
            .map_err(|e| HandlerError::new(format!("ring worker {} checkpoint: {e}", self.index)))
    }
}

impl<A: RingApp, W: RingPush<A>> Handler<Msg<RestoreRoundState>> for RingWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<RestoreRoundState>, _ctx: &mut Context<Self>) -> Self::Result {
        self.restore(&msg.body)
            .map_err(|e| HandlerError::new(format!("ring worker {} restore: {e}", self.index)))
    }
}

/// The actor ids of ring workers registered as `actor` on each of `nodes`, in order (the
/// node's own name resolves to itself).
pub fn ring_members(
    node: &petrel_actors::Node,
    nodes: &[String],
    actor: &str,
) -> Result<Vec<ActorId>, NodeError> {
    nodes
        .iter()
        .map(|n| {
            let id = if n == node.name() {
                node.id()
            } else {
                node.peer_id(n)
                    .ok_or_else(|| NodeError::Config(format!("unknown node {n}")))?
            };
            Ok(ActorId::new(id, actor))
        })
        .collect()
}

/// Starts ring worker `index` of `ring` holding `initial` and registers it under `name`
/// for [`Dispatch`], [`Commit`] and [`Handoff`].
pub fn start_ring_worker<A: RingApp, W: RingPush<A>>(
    node: &petrel_actors::Node,
    name: &str,
    index: u32,
    ring: Vec<ActorId>,
    logic: W,
    initial: Vec<(BlockId, A::Block)>,
) -> Result<Addr<RingWorker<A, W>>, crate::error::StradsError> {
    start_ring_worker_with(node, name, (index, ring), logic, initial, None)
}

/// [`start_ring_worker`]; with `release` (a job whose workers may leave), the sender
/// fires once this worker was asked to leave and holds no work after a commit.
pub(crate) fn start_ring_worker_with<A: RingApp, W: RingPush<A>>(
    node: &petrel_actors::Node,
    name: &str,
    (index, ring): (u32, Vec<ActorId>),
    logic: W,
    initial: Vec<(BlockId, A::Block)>,
    release: Option<oneshot::Sender<()>>,
) -> Result<Addr<RingWorker<A, W>>, crate::error::StradsError> {
    let mut worker = RingWorker::<A, W>::new(node.clone(), index, ring, logic, initial)?;
    worker.exit = release.map(|tx| WorkerExit {
        node: node.clone(),
        release: Some(tx),
    });
    let addr = worker.start();
    node.register(name, addr.clone())?
        .accept::<Dispatch<A>>()
        .accept::<Commit<A>>()
        .accept::<Handoff<A>>()
        .accept::<SaveRoundState>()
        .accept::<RestoreRoundState>();
    Ok(addr)
}
