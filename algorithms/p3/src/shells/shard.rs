//! The server shard: a [`SliceShardCore`] behind a priority mailbox, and its role.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix::prelude::*;
use petrel_actors::{ActorRef, HandlerError, Msg, NodeContext, PriorityActor, PriorityInbox};
use petrel_messages::Priority;

use crate::checkpoint::write_shard_file;
use crate::core::{
    Announce, Applied, Departure, Pulled, SliceHandOff, SliceShardCore, WorkerRoster,
};
use crate::error::P3Error;
use crate::kit::P3Job;
use crate::shells::index_in;
use crate::shells::messages::{
    HandOver, InitSlice, PullSlice, PushGrad, RepliesIn, SaveShard, SavedFile, ShardsDone,
    SliceValues,
};
use crate::shells::start::{ask_started, live_in};
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
    /// Every other shard of the job (standby ones too), by shard id: where slices move.
    peers: Vec<Option<Peer>>,
    /// The shard ids in the cluster now.
    live: Box<dyn Fn() -> Vec<usize>>,
    status: Arc<ShardStatus>,
    timeout: Duration,
}

type Peer = (ActorRef<HandOver>, ActorRef<ShardsDone>);

/// What a shard's role and its actor share: the role waits on it before it returns.
#[derive(Default)]
pub struct ShardStatus {
    /// The node was asked to leave: the replies say so, and the slices move away.
    leaving: AtomicBool,
    /// The shard holds no slice.
    empty: AtomicBool,
    /// Slices handed over whose workers are not answered yet: the node stays until then.
    handing: AtomicUsize,
    /// The shard holds slices, each past the job's last iteration (answered).
    finished: AtomicBool,
    /// Shard 0 applied the job's last iteration ([`ShardsDone`]).
    told: AtomicBool,
    /// Which workers this shard answered last and which of them confirmed those replies.
    departure: Mutex<Departure>,
}

impl ShardStatus {
    fn departure(&self) -> MutexGuard<'_, Departure> {
        self.departure.lock().unwrap_or_else(|e| e.into_inner())
    }
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
            peers: Vec::new(),
            live: Box::new(Vec::new),
            status: Arc::default(),
            timeout: Duration::from_secs(120),
        }
    }

    /// Slices move between the shards of `peers` (by shard id) as shards join and leave;
    /// `status` tells the role when this shard may leave or stop.
    fn elastic(
        mut self,
        peers: Vec<Option<Peer>>,
        live: Box<dyn Fn() -> Vec<usize>>,
        status: Arc<ShardStatus>,
        timeout: Duration,
    ) -> Self {
        self.peers = peers;
        self.live = live;
        self.status = status;
        self.timeout = timeout;
        self.update_status();
        self
    }

    fn update_status(&self) {
        let s = &self.status;
        s.empty.store(self.core.n_slices() == 0, Ordering::Release);
        s.finished.store(self.core.finished(), Ordering::Release);
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
            shards_joining: m.shards_joining.iter().map(|&s| s as usize).collect(),
            shards_leaving: m.shards_leaving.iter().map(|&s| s as usize).collect(),
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
                self.applied(slice, applied, waiters.into_iter().chain([tx]).collect());
            }
        }
    }

    /// Answers the workers and the joiners' pulls an update completed, once a slice that
    /// moves is at its new owner (their next pushes go there).
    fn applied(&mut self, slice: usize, mut applied: Applied, waiters: Vec<Waiter>) {
        let mut held = self.pulls.remove(&slice).unwrap_or_default();
        let (answered, kept) = held
            .drain(..)
            .partition::<Vec<_>, _>(|(w, _)| applied.pulls.contains(w));
        let me = self.core.shard();
        let reply = SliceValues {
            iter: applied.iter,
            slice: slice as u32,
            values: applied.values.clone(),
            workers: ids(&applied.members),
            shards: ids(&applied.shards),
            shard: me as u32,
            shard_leaving: self.status.leaving.load(Ordering::Acquire),
        };
        let pulled = start_values(slice, &Pulled::from(&applied));
        let answer = move |r: Result<(), HandlerError>| {
            for w in waiters {
                let _ = w.send(r.clone().map(|()| reply.clone()));
            }
            for (_, w) in answered {
                let _ = w.send(r.clone().map(|()| pulled.clone()));
            }
        };
        let last = applied.iter + 1 == self.core.end();
        if me == 0 && slice == 0 && last {
            self.tell_done();
        }
        if last || applied.handoff.is_some() {
            let answered = applied.answered.iter().copied();
            self.status.departure().last_served(answered);
        }
        match applied.handoff.take() {
            None => {
                if !kept.is_empty() {
                    self.pulls.insert(slice, kept);
                }
                answer(Ok(()));
            }
            Some(h) => {
                for (_, w) in kept {
                    let _ = w.send(Err(
                        self.fail(format!("slice {slice} moved to shard {}", h.to))
                    ));
                }
                self.hand_over(h, answer);
            }
        }
        self.update_status();
    }

    /// Sends a moved slice to its new owner, then `answer`s (with the failure, if any).
    fn hand_over(&self, h: SliceHandOff, answer: impl FnOnce(Result<(), HandlerError>) + 'static) {
        let (slice, to) = (h.slice, h.to);
        tracing::debug!(
            from = self.core.shard(),
            to,
            slice,
            iter = h.iter,
            "p3 slice moves"
        );
        let Some((target, _)) = self.peers.get(to).cloned().flatten() else {
            answer(Err(self.fail(format!("slice {slice}: no shard {to}"))));
            return;
        };
        let msg = HandOver {
            slice: slice as u32,
            iter: h.iter,
            params: h.params,
            velocity: h.velocity,
            workers: ids(h.workers.members()),
            workers_left: ids(h.workers.departed()),
            shards: ids(h.shards.members()),
            shards_left: ids(h.shards.departed()),
        };
        let (timeout, fail, status) = (self.timeout, self.fail(""), self.status.clone());
        status.handing.fetch_add(1, Ordering::AcqRel);
        actix::spawn(async move {
            let r = ask_started(&target, || msg.clone(), Priority::HIGH, timeout).await;
            answer(r.map(|_| ()).map_err(|e| {
                HandlerError::new(format!("{fail}handing slice {slice} to shard {to}: {e}"))
            }));
            status.handing.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Shard 0 tells the other shards in the cluster that its last update is applied (one
    /// that joined too late for a slice stops waiting).
    fn tell_done(&self) {
        let (iterations, timeout) = (self.core.end(), self.timeout);
        for s in (self.live)().into_iter().filter(|&s| s != 0) {
            if let Some((_, target)) = self.peers.get(s).cloned().flatten() {
                actix::spawn(async move {
                    let _ = target
                        .ask(ShardsDone { iterations }, Priority::NORMAL, timeout)
                        .await;
                });
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

fn ids<'a>(xs: impl IntoIterator<Item = &'a usize>) -> Vec<u32> {
    xs.into_iter().map(|&x| x as u32).collect()
}

/// The reply to a pull of `slice`: `iter` is the iteration the worker starts.
fn start_values(slice: usize, p: &Pulled) -> SliceValues {
    SliceValues {
        iter: p.start,
        slice: slice as u32,
        values: p.values.clone(),
        workers: ids(&p.members),
        shards: ids(&p.shards),
        ..SliceValues::default()
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

impl Handler<Msg<HandOver>> for ShardActor {
    type Result = Result<u32, HandlerError>;

    fn handle(&mut self, msg: Msg<HandOver>, _: &mut Context<Self>) -> Self::Result {
        let m = msg.body;
        let roster = |members: &[u32], left: &[u32]| {
            let each = |xs: &[u32]| xs.iter().map(|&x| x as usize).collect::<Vec<_>>();
            WorkerRoster::from_parts(each(members), each(left))
        };
        let h = SliceHandOff {
            to: self.core.shard(),
            slice: m.slice as usize,
            iter: m.iter,
            params: m.params,
            velocity: m.velocity,
            workers: roster(&m.workers, &m.workers_left),
            shards: roster(&m.shards, &m.shards_left),
        };
        let slice = h.slice;
        let answered = self.core.receive(h).map_err(|e| self.fail(e))?;
        let mut held = self.pulls.remove(&slice).unwrap_or_default();
        for (worker, p) in answered {
            if let Some(i) = held.iter().position(|(w, _)| *w == worker) {
                let _ = held.swap_remove(i).1.send(Ok(start_values(slice, &p)));
            }
        }
        if !held.is_empty() {
            self.pulls.insert(slice, held);
        }
        self.update_status();
        Ok(m.slice)
    }
}

impl Handler<Msg<ShardsDone>> for ShardActor {
    type Result = Result<u64, HandlerError>;

    fn handle(&mut self, msg: Msg<ShardsDone>, _: &mut Context<Self>) -> Self::Result {
        self.status.told.store(true, Ordering::Release);
        Ok(msg.body.iterations)
    }
}

impl Handler<Msg<RepliesIn>> for ShardActor {
    type Result = Result<u64, HandlerError>;

    fn handle(&mut self, msg: Msg<RepliesIn>, _: &mut Context<Self>) -> Self::Result {
        let (worker, iter) = (msg.body.worker as usize, msg.body.iter);
        tracing::debug!(
            shard = self.core.shard(),
            worker,
            iter,
            "worker has the shard's last replies"
        );
        self.status.departure().confirmed(worker);
        Ok(iter)
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
    let (capacity, members) = starting_in(&ctx, WORKER_ROLE);
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
    let status = Arc::new(ShardStatus::default());
    let mut actor = ShardActor::new(core);
    if elastic {
        let peer = |(i, n): (usize, &String)| -> Result<Option<Peer>, P3Error> {
            if i == me {
                return Ok(None);
            }
            let node = &ctx.node;
            Ok(Some((
                node.actor_at(n, SHARD_ACTOR)?,
                node.actor_at(n, SHARD_ACTOR)?,
            )))
        };
        let peers = ctx
            .nodes_with_role(SHARD_ROLE)
            .iter()
            .enumerate()
            .map(peer)
            .collect::<Result<_, _>>()?;
        let node = ctx.clone();
        let live = Box::new(move || live_in(&node, SHARD_ROLE));
        actor = actor.elastic(peers, live, status.clone(), job.ask_timeout);
    }
    ctx.node
        .register(SHARD_ACTOR, actor.start())?
        .accept::<PushGrad>()
        .accept::<PullSlice>()
        .accept::<InitSlice>()
        .accept::<SaveShard>()
        .accept::<HandOver>()
        .accept::<ShardsDone>()
        .accept::<RepliesIn>();
    if !elastic {
        ctx.barrier("p3.ready").await?;
        ctx.barrier("p3.init").await?;
    } else if me != 0 {
        serve_until_done(&ctx, me, &status).await;
    }
    Ok(())
}

/// A shard other than shard 0 (whose node runs the coordinator and stays) serves until the
/// job's end, or, once its node is asked to leave, until it serves no slice and every
/// worker it answered last confirmed it has those replies ([`Departure`]): then its node
/// leaves. The replies and the view without it travel on different connections, so a
/// worker that heard of the leave first would fail the request still awaiting them.
async fn serve_until_done(ctx: &NodeContext, me: usize, status: &ShardStatus) {
    loop {
        let told = status.told.load(Ordering::Acquire);
        let finished = status.finished.load(Ordering::Acquire);
        if ctx.node.is_leave_requested() {
            status.leaving.store(true, Ordering::Release);
            let holds = !status.empty.load(Ordering::Acquire) && !finished;
            let serving = holds || status.handing.load(Ordering::Acquire) > 0;
            let live = live_in(ctx, WORKER_ROLE);
            if status.departure().may_leave(serving, told, &live) {
                tracing::info!(
                    shard = me,
                    "p3 shard's slices and last replies are delivered; leaving"
                );
                ctx.node.leave_when_done();
                return;
            }
        } else if finished || told {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The number of nodes of `role` the job may have (their ids run below it) and the ids of
/// those it starts with (the others are standby nodes that join later).
pub(crate) fn starting_in(ctx: &NodeContext, role: &str) -> (usize, Vec<usize>) {
    let workers: Vec<bool> = ctx
        .settings
        .nodes
        .iter()
        .filter(|n| n.roles.iter().any(|r| r == role))
        .map(|n| n.standby)
        .collect();
    let starting = (0..workers.len()).filter(|&w| !workers[w]).collect();
    (workers.len(), starting)
}
