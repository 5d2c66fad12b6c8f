//! Ring rotation: blocks of the model travel worker to worker, not through the scheduler.
//!
//! In a rotation schedule (MF, LDA) worker `p` works on block `(p + s) mod P` in sub-round
//! `s`. Routed through the scheduler, every block goes scheduler -> worker -> scheduler in
//! every sub-round, so the whole model crosses one node twice per sub-round. A [`RingApp`]
//! instead keeps the blocks with the workers: the scheduler's [`Dispatch`] only names the
//! block a task needs (and whatever small parameters the app wants), the worker's push gets
//! the block it holds by value and says what to do with it afterwards ([`BlockFate`]): keep
//! it, pass it to worker `j` in a [`Handoff`] (worker -> worker tell), or consume it (move it
//! into the partial, e.g. a final collect round so the scheduler can write outputs).
//!
//! ```text
//! scheduler --Dispatch{round r, needs block b}--> worker p   (waits until it holds b)
//! worker p: push(task, block b) -> partial, PassTo{j}
//! worker p --Handoff{b, produced in r}--> worker j           (before the partial leaves)
//! worker p --PartialResult--> scheduler -> pull -> Commit to every worker
//! ```
//!
//! A dispatch and the handoff it needs come from different nodes, so the dispatch can
//! arrive first. The [`RingWorker`] keeps a FIFO of the scheduler's messages (dispatches and
//! commits, in arrival order, exactly as a star worker applies them): a commit at the head
//! runs at once, a dispatch at the head runs once its block is held, and everything behind
//! it waits. Handoffs are served while it waits (the reply to the scheduler's ask is a
//! oneshot completed later; the actor never blocks). A handoff of a block the worker
//! already holds means two workers would be updating one block: a protocol error that
//! poisons the worker, as does a failed push (its block is gone) or a failed commit.
//!
//! The decisions are in the sans-I/O [`RingCore`]; [`settle`] turns a push's [`BlockFate`]
//! into a local keep or an outgoing handoff; [`run_local`] drives a [`Schedule`] and
//! [`RingPush`] workers in one thread with the same cores (tests and serial checks, with
//! an adversarial handoff delivery order).

use super::{
    Commit, Dispatch, PartialResult, PipelineAction, PipelineCore, Plan, Schedule, Step, StradsApp,
};
use actix::prelude::*;
use futures::channel::oneshot;
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::{HandlerError, NodeError};
use petrel_messages::{ActorId, Priority, RemoteMessage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;
use std::time::Duration;

/// Identifies a block within one ring (e.g. the block index of a rotation schedule).
pub type BlockId = u64;

/// A model-parallel app whose blocks rotate worker to worker.
pub trait RingApp: StradsApp {
    /// Wire name of [`Handoff<Self>`]; unique in the cluster.
    const HANDOFF_NAME: &'static str;
    /// The unit that travels around the ring (e.g. a column block of a factor matrix).
    type Block: Serialize + DeserializeOwned + Send + 'static;
    /// The block a task works on (`None`: the task needs no block).
    fn block_needed(task: &Self::Task) -> Option<BlockId>;
}

/// Worker -> worker: a block and the round whose push produced this version of it.
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Block: Serialize",
    deserialize = "A::Block: DeserializeOwned"
))]
pub struct Handoff<A: RingApp> {
    pub block_id: BlockId,
    pub round: u64,
    /// Index of the sending worker (for error messages).
    pub from: u32,
    pub block: A::Block,
}

impl<A: RingApp> RemoteMessage for Handoff<A> {
    const TYPE_NAME: &'static str = A::HANDOFF_NAME;
    type Reply = ();
}

/// What happens to the block a push held.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockFate<B> {
    /// The worker keeps it for a later task.
    Keep(B),
    /// Send it to worker `worker` (to itself = keep, no message).
    PassTo { worker: u32, block: B },
    /// No block stays behind: the task needed none, or the push moved it into the partial.
    Consumed,
}

/// The answer of [`RingPush::push`].
#[derive(Debug, Clone, PartialEq)]
pub struct RingOutput<P, B> {
    pub partial: P,
    pub block: BlockFate<B>,
}

/// Worker half of a ring app (sans-I/O), like [`super::Push`] but the push receives the
/// block its task needs by value.
pub trait RingPush<A: RingApp>: Unpin + 'static {
    /// `block` is `Some` exactly when [`RingApp::block_needed`] names a block.
    fn push(
        &mut self,
        round: u64,
        task: &A::Task,
        block: Option<A::Block>,
    ) -> Result<RingOutput<A::Partial, A::Block>, String>;
    fn commit(&mut self, round: u64, commit: &A::Commit) -> Result<(), String>;
}

#[derive(Debug)]
struct Held<B> {
    block: B,
    /// Round whose push produced this version (`None`: an initial block).
    produced: Option<u64>,
}

#[derive(Debug)]
enum Queued<T, C, R> {
    Dispatch {
        round: u64,
        need: Option<BlockId>,
        task: T,
        reply: R,
    },
    Commit {
        round: u64,
        commit: C,
    },
}

/// The next scheduler message to apply, with the block it needs taken out of the store.
#[derive(Debug)]
pub enum Ready<T, C, B, R> {
    Push {
        round: u64,
        need: Option<BlockId>,
        task: T,
        block: Option<B>,
        reply: R,
    },
    Commit {
        round: u64,
        commit: C,
    },
}

/// The worker failed: `orphans` are the replies of the dispatches that will never run
/// (answer each with `reason`).
#[derive(Debug, PartialEq)]
pub struct Poisoned<R> {
    pub reason: String,
    pub orphans: Vec<R>,
}

/// Queue and held-block bookkeeping of one ring worker (sans-I/O). `T`, `C`, `B` are the
/// app's task, commit and block types; `R` is whatever the shell needs to answer a
/// dispatch later (a oneshot sender in [`RingWorker`], a slot index in [`run_local`]).
#[derive(Debug)]
pub struct RingCore<T, C, B, R> {
    worker: u32,
    held: BTreeMap<BlockId, Held<B>>,
    queue: VecDeque<Queued<T, C, R>>,
    failed: Option<String>,
}

impl<T, C, B, R> RingCore<T, C, B, R> {
    /// A worker holding `initial` blocks. Two initial blocks with one id are an error.
    pub fn new(
        worker: u32,
        initial: impl IntoIterator<Item = (BlockId, B)>,
    ) -> Result<Self, String> {
        let mut held = BTreeMap::new();
        for (id, block) in initial {
            if held
                .insert(
                    id,
                    Held {
                        block,
                        produced: None,
                    },
                )
                .is_some()
            {
                return Err(format!("worker {worker}: initial block {id} given twice"));
            }
        }
        Ok(RingCore {
            worker,
            held,
            queue: VecDeque::new(),
            failed: None,
        })
    }

    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// Why the worker failed, once it has.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub fn holds(&self, id: BlockId) -> bool {
        self.held.contains_key(&id)
    }

    /// Ids of the blocks held now, ascending.
    pub fn held_ids(&self) -> Vec<BlockId> {
        self.held.keys().copied().collect()
    }

    /// The blocks held now.
    pub fn held_blocks(&self) -> impl Iterator<Item = (BlockId, &B)> {
        self.held.iter().map(|(id, h)| (*id, &h.block))
    }

    /// Scheduler messages not yet applied.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The block the dispatch at the head of the queue waits for, if it waits.
    pub fn waiting_for(&self) -> Option<BlockId> {
        match self.queue.front() {
            Some(Queued::Dispatch { need: Some(id), .. }) if !self.held.contains_key(id) => {
                Some(*id)
            }
            _ => None,
        }
    }

    /// Marks the worker failed (the first reason stays) and hands back every queued
    /// dispatch's reply.
    pub fn poison(&mut self, reason: String) -> Poisoned<R> {
        let reason = self.failed.get_or_insert(reason).clone();
        let orphans = self
            .queue
            .drain(..)
            .filter_map(|q| match q {
                Queued::Dispatch { reply, .. } => Some(reply),
                Queued::Commit { .. } => None,
            })
            .collect();
        Poisoned { reason, orphans }
    }

    fn failed_reply(&self, reply: R) -> Poisoned<R> {
        Poisoned {
            reason: format!(
                "worker {} failed earlier: {}",
                self.worker,
                self.failed.as_deref().unwrap_or("unknown")
            ),
            orphans: vec![reply],
        }
    }

    /// A dispatch from the scheduler, queued behind earlier scheduler messages. A failed
    /// worker answers at once with its error.
    pub fn dispatch(
        &mut self,
        round: u64,
        need: Option<BlockId>,
        task: T,
        reply: R,
    ) -> Result<(), Poisoned<R>> {
        if self.failed.is_some() {
            return Err(self.failed_reply(reply));
        }
        self.queue.push_back(Queued::Dispatch {
            round,
            need,
            task,
            reply,
        });
        Ok(())
    }

    /// A commit from the scheduler, queued behind earlier scheduler messages (dropped by a
    /// failed worker: returns false).
    pub fn commit(&mut self, round: u64, commit: C) -> bool {
        if self.failed.is_some() {
            return false;
        }
        self.queue.push_back(Queued::Commit { round, commit });
        true
    }

    fn store(
        &mut self,
        id: BlockId,
        block: B,
        produced: u64,
        what: &str,
    ) -> Result<(), Poisoned<R>> {
        if self.failed.is_some() {
            return Ok(());
        }
        if self.held.contains_key(&id) {
            let reason = format!(
                "protocol error: worker {} already holds block {id} and {what} (round {produced}): two workers would update one block",
                self.worker
            );
            return Err(self.poison(reason));
        }
        self.held.insert(
            id,
            Held {
                block,
                produced: Some(produced),
            },
        );
        Ok(())
    }

    /// A block handed over by worker `from`, produced in round `produced`. Receiving a
    /// block that is already held poisons the worker. A failed worker drops it.
    pub fn handoff(
        &mut self,
        id: BlockId,
        block: B,
        produced: u64,
        from: u32,
    ) -> Result<(), Poisoned<R>> {
        self.store(
            id,
            block,
            produced,
            &format!("worker {from} handed it over"),
        )
    }

    /// The block a push in round `produced` kept (or passed to this worker itself).
    pub fn keep(&mut self, id: BlockId, block: B, produced: u64) -> Result<(), Poisoned<R>> {
        self.store(id, block, produced, "a push kept it")
    }

    /// The next scheduler message that can be applied now, in arrival order: a commit at the
    /// head at once, a dispatch at the head once its block is held (taken out of the store).
    /// A block whose version was produced in the dispatch's round or later cannot serve it:
    /// that poisons the worker.
    #[allow(clippy::type_complexity)]
    pub fn next_ready(&mut self) -> Result<Option<Ready<T, C, B, R>>, Poisoned<R>> {
        if self.failed.is_some() {
            return Ok(None);
        }
        let block = match self.queue.front() {
            None => return Ok(None),
            Some(Queued::Commit { .. }) => None,
            Some(Queued::Dispatch { need: None, .. }) => None,
            Some(Queued::Dispatch {
                need: Some(id),
                round,
                ..
            }) => {
                let (id, round) = (*id, *round);
                let Some(held) = self.held.remove(&id) else {
                    return Ok(None);
                };
                if let Some(produced) = held.produced
                    && produced >= round
                {
                    let reason = format!(
                        "protocol error: worker {} got block {id} produced in round {produced} for round {round}",
                        self.worker
                    );
                    return Err(self.poison(reason));
                }
                Some(held.block)
            }
        };
        Ok(match self.queue.pop_front() {
            Some(Queued::Commit { round, commit }) => Some(Ready::Commit { round, commit }),
            Some(Queued::Dispatch {
                round,
                need,
                task,
                reply,
            }) => Some(Ready::Push {
                round,
                need,
                task,
                block,
                reply,
            }),
            None => None,
        })
    }
}

/// Applies a push's [`BlockFate`]: a kept block (or one passed to this worker itself) goes
/// back into `core`; a block for another worker is returned as `(worker, block)` for the
/// shell to send. Errors (a block from a task that needed none, a worker index outside
/// the ring, a duplicate) are reasons to poison the worker.
pub fn settle<T, C, B, R>(
    core: &mut RingCore<T, C, B, R>,
    ring_size: usize,
    round: u64,
    need: Option<BlockId>,
    fate: BlockFate<B>,
) -> Result<Option<(u32, BlockId, B)>, String> {
    let (to, block) = match fate {
        BlockFate::Consumed => return Ok(None),
        BlockFate::Keep(block) => (core.worker(), block),
        BlockFate::PassTo { worker, block } => (worker, block),
    };
    let Some(id) = need else {
        return Err(format!(
            "worker {}: the push of round {round} returned a block for a task that needs none",
            core.worker()
        ));
    };
    if to as usize >= ring_size {
        return Err(format!(
            "worker {}: round {round} passes block {id} to worker {to}, but the ring has {ring_size} workers",
            core.worker()
        ));
    }
    if to == core.worker() {
        core.keep(id, block, round).map_err(|p| p.reason)?;
        return Ok(None);
    }
    Ok(Some((to, id, block)))
}

type ReplySender<A> = oneshot::Sender<Result<PartialResult<A>, HandlerError>>;

/// What a ring worker remembers about a queued dispatch.
pub struct PendingReply<A: StradsApp> {
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
    ) -> Result<Self, String> {
        if index as usize >= ring.len() {
            return Err(format!(
                "worker index {index} outside a ring of {}",
                ring.len()
            ));
        }
        let core = Box::new(RingCore::new(index, initial)?);
        Ok(RingWorker {
            index,
            logic,
            node,
            resolved: (0..ring.len()).map(|_| None).collect(),
            ring,
            core,
            _app: PhantomData,
        })
    }

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
                .send(Err(HandlerError::new(poisoned.reason.clone())));
        }
    }

    /// Applies every scheduler message that can run now.
    fn drain(&mut self) {
        loop {
            match self.core.next_ready() {
                Ok(None) => return,
                Err(poisoned) => return self.fail(poisoned),
                Ok(Some(Ready::Commit { round, commit })) => {
                    if let Err(e) = self.logic.commit(round, &commit) {
                        let p = self.core.poison(format!(
                            "worker {} commit of round {round}: {e}",
                            self.index
                        ));
                        return self.fail(p);
                    }
                }
                Ok(Some(Ready::Push {
                    round,
                    need,
                    task,
                    block,
                    reply,
                })) => {
                    let result = self.push(round, need, &task, block, reply.priority);
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

    fn push(
        &mut self,
        round: u64,
        need: Option<BlockId>,
        task: &A::Task,
        block: Option<A::Block>,
        priority: Priority,
    ) -> Result<A::Partial, String> {
        let out = self
            .logic
            .push(round, task, block)
            .map_err(|e| format!("worker {} push of round {round}: {e}", self.index))?;
        if let Some((to, block_id, block)) =
            settle(&mut self.core, self.ring.len(), round, need, out.block)?
        {
            let msg = Handoff::<A> {
                block_id,
                round,
                from: self.index,
                block,
            };
            self.peer(to)?.tell(msg, priority).map_err(|e| {
                format!(
                    "worker {} handoff of block {block_id} to worker {to}: {e}",
                    self.index
                )
            })?;
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
        if let Err(p) = self.core.handoff(block_id, block, round, from) {
            let reason = p.reason.clone();
            self.fail(p);
            return Err(HandlerError::new(reason));
        }
        self.drain();
        Ok(())
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
) -> Result<Addr<RingWorker<A, W>>, NodeError> {
    let worker = RingWorker::<A, W>::new(node.clone(), index, ring, logic, initial)
        .map_err(NodeError::Config)?;
    let addr = worker.start();
    node.register(name, addr.clone())?
        .accept::<Dispatch<A>>()
        .accept::<Commit<A>>()
        .accept::<Handoff<A>>();
    Ok(addr)
}

/// Handoff delivery order of [`run_local`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Every handoff arrives after the next round's dispatches: each dispatch waits.
    Late,
    /// Dispatches and handoffs arrive in an order shuffled from this seed.
    Shuffled(u64),
}

/// What [`run_local`] reports.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalRun {
    pub rounds: u64,
    /// Blocks held by each worker at the end.
    pub held: Vec<Vec<BlockId>>,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

enum SimEvent<T, B> {
    Dispatch {
        worker: usize,
        task: T,
    },
    Handoff {
        to: usize,
        id: BlockId,
        round: u64,
        from: u32,
        block: B,
    },
}

type SimCore<A> =
    RingCore<<A as StradsApp>::Task, <A as StradsApp>::Commit, <A as RingApp>::Block, usize>;

/// Runs a scheduler and ring workers in this thread, through the same [`RingCore`]s as the
/// actors, one round at a time (depth 1), with handoffs delivered in the order `delivery`
/// asks for. After every step it checks that no block id is in two places (two workers, or
/// a worker and a handoff in transit); a dispatch whose block never comes is reported as a
/// deadlock naming the block's whereabouts.
pub fn run_local<A, S, W>(
    app: &mut S,
    workers: &mut [W],
    initial: Vec<Vec<(BlockId, A::Block)>>,
    delivery: Delivery,
) -> Result<LocalRun, String>
where
    A: RingApp,
    S: Schedule<A>,
    W: RingPush<A>,
{
    let p = workers.len();
    if p == 0 || initial.len() != p {
        return Err(format!(
            "{p} workers with {} initial block lists",
            initial.len()
        ));
    }
    let mut cores: Vec<SimCore<A>> = initial
        .into_iter()
        .enumerate()
        .map(|(w, blocks)| RingCore::new(w as u32, blocks))
        .collect::<Result<_, _>>()?;
    let mut transit: Vec<SimEvent<A::Task, A::Block>> = Vec::new();
    let mut seed = match delivery {
        Delivery::Late => 0,
        Delivery::Shuffled(s) => s,
    };
    let mut pipeline = PipelineCore::new(1);
    loop {
        let round = match pipeline.next_action() {
            PipelineAction::Schedule(r) => r,
            PipelineAction::AwaitOldest => return Err("depth 1 pulls every round at once".into()),
            PipelineAction::Stop => break,
        };
        let step = app.schedule(round, pipeline.in_flight());
        pipeline.scheduled(&step)?;
        let tasks = match step {
            Step::Run(Plan::All(task)) => vec![task; p],
            Step::Run(Plan::PerWorker(tasks)) if tasks.len() == p => tasks,
            Step::Run(Plan::PerWorker(tasks)) => {
                return Err(format!(
                    "round {round}: {} tasks for {p} workers",
                    tasks.len()
                ));
            }
            Step::Wait | Step::Done => continue,
        };
        let mut events: Vec<SimEvent<A::Task, A::Block>> = tasks
            .into_iter()
            .enumerate()
            .map(|(worker, task)| SimEvent::Dispatch { worker, task })
            .collect();
        events.append(&mut transit);
        if let Delivery::Shuffled(_) = delivery {
            for i in (1..events.len()).rev() {
                let j = (splitmix(&mut seed) % (i as u64 + 1)) as usize;
                events.swap(i, j);
            }
        }
        let mut partials: Vec<Option<A::Partial>> = (0..p).map(|_| None).collect();
        for event in events {
            match event {
                SimEvent::Dispatch { worker, task } => {
                    let need = A::block_needed(&task);
                    cores[worker]
                        .dispatch(round, need, task, worker)
                        .map_err(|e| e.reason)?;
                }
                SimEvent::Handoff {
                    to,
                    id,
                    round: produced,
                    from,
                    block,
                } => cores[to]
                    .handoff(id, block, produced, from)
                    .map_err(|e| e.reason)?,
            }
            for (w, core) in cores.iter_mut().enumerate() {
                while let Some(ready) = core.next_ready().map_err(|e| e.reason)? {
                    match ready {
                        Ready::Commit { round, commit } => workers[w]
                            .commit(round, &commit)
                            .map_err(|e| format!("worker {w} commit of round {round}: {e}"))?,
                        Ready::Push {
                            round,
                            need,
                            task,
                            block,
                            reply,
                        } => {
                            let out = workers[w]
                                .push(round, &task, block)
                                .map_err(|e| format!("worker {w} push of round {round}: {e}"))?;
                            if let Some((to, id, block)) = settle(core, p, round, need, out.block)?
                            {
                                transit.push(SimEvent::Handoff {
                                    to: to as usize,
                                    id,
                                    round,
                                    from: w as u32,
                                    block,
                                });
                            }
                            partials[reply] = Some(out.partial);
                        }
                    }
                }
            }
            check_exclusive::<A>(&cores, &transit)?;
        }
        let mut done = Vec::with_capacity(p);
        for (w, partial) in partials.into_iter().enumerate() {
            match partial {
                Some(x) => done.push(x),
                None => {
                    let waiting = cores[w].waiting_for();
                    return Err(deadlock::<A>(round, w, waiting, &cores, &transit));
                }
            }
        }
        let commit = app.pull(round, done, Duration::ZERO)?;
        pipeline.committed(round)?;
        for (w, core) in cores.iter_mut().enumerate() {
            core.commit(round, commit.clone());
            while let Some(ready) = core.next_ready().map_err(|e| e.reason)? {
                match ready {
                    Ready::Commit { round, commit } => workers[w]
                        .commit(round, &commit)
                        .map_err(|e| format!("worker {w} commit of round {round}: {e}"))?,
                    Ready::Push { .. } => {
                        return Err(format!("worker {w}: a dispatch after its round's commit"));
                    }
                }
            }
        }
    }
    // Handoffs of the last round land too.
    for event in transit {
        if let SimEvent::Handoff {
            to,
            id,
            round,
            from,
            block,
        } = event
        {
            cores[to]
                .handoff(id, block, round, from)
                .map_err(|e| e.reason)?;
        }
    }
    Ok(LocalRun {
        rounds: pipeline.next_round,
        held: cores.iter().map(RingCore::held_ids).collect(),
    })
}

fn check_exclusive<A: RingApp>(
    cores: &[SimCore<A>],
    transit: &[SimEvent<A::Task, A::Block>],
) -> Result<(), String> {
    let mut seen: BTreeMap<BlockId, String> = BTreeMap::new();
    let places = cores
        .iter()
        .flat_map(|c| {
            c.held_ids()
                .into_iter()
                .map(|id| (id, format!("worker {}", c.worker())))
        })
        .chain(transit.iter().filter_map(|e| match e {
            SimEvent::Handoff { to, id, from, .. } => {
                Some((*id, format!("a handoff from worker {from} to worker {to}")))
            }
            SimEvent::Dispatch { .. } => None,
        }));
    for (id, place) in places {
        if let Some(other) = seen.insert(id, place.clone()) {
            return Err(format!(
                "block {id} is held twice: by {other} and by {place}"
            ));
        }
    }
    Ok(())
}

fn deadlock<A: RingApp>(
    round: u64,
    worker: usize,
    waiting: Option<BlockId>,
    cores: &[SimCore<A>],
    transit: &[SimEvent<A::Task, A::Block>],
) -> String {
    let Some(id) = waiting else {
        return format!("round {round}: worker {worker} never answered");
    };
    let place = cores
        .iter()
        .find(|c| c.holds(id))
        .map(|c| format!("held by worker {}", c.worker()))
        .or_else(|| {
            transit.iter().find_map(|e| match e {
                SimEvent::Handoff { to, id: b, .. } if *b == id => {
                    Some(format!("in transit to worker {to}"))
                }
                _ => None,
            })
        })
        .unwrap_or_else(|| "nowhere".into());
    format!("round {round}: worker {worker} waits for block {id}, which is {place}")
}

#[cfg(test)]
mod tests;
