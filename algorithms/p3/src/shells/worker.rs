// Over 600 lines: the worker role's loop, pushes, checkpoints and confirmations share its state.
//! The worker: runs any [`StageModel`] stage by stage over a [`SliceWorkerCore`], pushing
//! gradient slices at their priority and installing parameter tensors as they complete.

use std::sync::Arc;
use std::time::{Duration, Instant};

use petrel_actors::{ActorRef, AskError, HandlerError, Msg, NodeContext};
use petrel_messages::Priority;

use crate::checkpoint::{CheckpointConfig, CheckpointPolicy, write_manifest, write_worker_file};
use crate::core::slicing::owner;
use crate::core::{Announce, RosterChange, SliceWorkerCore, WorkerRoster, shards_done_with};
use crate::error::P3Error;
use crate::kit::{P3Job, P3WorkerReport, Progress, StageLayout, StageModel, StepStats};
use crate::shells::index_in;
use crate::shells::messages::{
    PushGrad, RepliesIn, SaveShard, SavedFile, SliceValues, WorkerSaved,
};
use crate::shells::shard::{SHARD_ACTOR, SHARD_ROLE, starting_in};
use crate::shells::start::{init_shards, live_in, pull_params, resume_state};

/// The actor on worker 0 that hears which checkpoint files the other workers wrote.
pub const CHECKPOINT_ACTOR: &str = "p3-checkpoint";

/// Worker 0's [`CHECKPOINT_ACTOR`]: hands every [`WorkerSaved`] to the worker loop.
struct SavedCollector {
    tx: tokio::sync::mpsc::UnboundedSender<WorkerSaved>,
}

impl actix::Actor for SavedCollector {
    type Context = actix::Context<Self>;
}

impl actix::Handler<Msg<WorkerSaved>> for SavedCollector {
    type Result = Result<u64, HandlerError>;

    fn handle(&mut self, msg: Msg<WorkerSaved>, _: &mut actix::Context<Self>) -> Self::Result {
        let round = msg.body.round;
        let stopped = |_| HandlerError::new("worker 0 stopped training");
        self.tx.send(msg.body).map_err(stopped)?;
        Ok(round)
    }
}

/// The role of a data-parallel worker.
pub const WORKER_ROLE: &str = "p3-worker";

type Arrival = (usize, u64, Result<SliceValues, AskError>);

struct Pusher {
    /// Every shard of the job (standby ones too), by shard id.
    shards: Vec<ActorRef<PushGrad>>,
    /// The shards of the iteration being pushed: they own its slices ([`owner`]).
    owners: Vec<usize>,
    tx: tokio::sync::mpsc::UnboundedSender<Arrival>,
    worker: u32,
    timeout: Duration,
    bytes: u64,
    /// What this iteration's pushes announce (leaving, joiners seen).
    announce: Announce,
    /// Slices on the wire now and since when (`/metrics`: wire busy time).
    wire: std::rc::Rc<std::cell::RefCell<WireBusy>>,
}

/// Counts the slices awaiting their reply; the time with at least one out is the link's
/// busy time as this worker sees it.
#[derive(Default)]
struct WireBusy {
    out: usize,
    since: Option<Instant>,
    node: String,
}

impl WireBusy {
    fn sent(&mut self) {
        if self.out == 0 {
            self.since = Some(Instant::now());
        }
        self.out += 1;
    }

    fn back(&mut self) {
        self.out = self.out.saturating_sub(1);
        if self.out == 0
            && let Some(t) = self.since.take()
        {
            petrel_observe::metrics()
                .p3
                .wire_busy(&self.node, t.elapsed());
        }
    }
}

impl Pusher {
    /// Sends every slice of `unit`'s gradient to its shard at the slice's priority; the
    /// reply (new values) comes back through the channel.
    fn push(
        &mut self,
        core: &SliceWorkerCore,
        iter: u64,
        unit: usize,
        grad: &[f32],
    ) -> Result<(), P3Error> {
        for (s, values) in core.grad_slices(unit, grad)? {
            let shard = owner(s.id, &self.owners);
            let target = self
                .shards
                .get(shard)
                .ok_or(P3Error::UnknownShard { slice: s.id, shard })?
                .clone();
            let bytes = values.len() as u64 * 4;
            self.bytes += bytes;
            let msg = PushGrad {
                iter,
                worker: self.worker,
                slice: s.id as u32,
                grad: values,
                leaving: self.announce.leaving,
                joiners: ids(&self.announce.joiners),
                shards_joining: ids(&self.announce.shards_joining),
                shards_leaving: ids(&self.announce.shards_leaving),
            };
            let (tx, timeout, wire) = (self.tx.clone(), self.timeout, self.wire.clone());
            let node = wire.borrow().node.clone();
            petrel_observe::metrics().p3.slice_sent(&node, unit, bytes);
            wire.borrow_mut().sent();
            let sent = Instant::now();
            tracing::trace!(slice = s.id, iter, at = ?Instant::now(), "slice pushed");
            actix::spawn(async move {
                let r = target.ask(msg, s.priority, timeout).await;
                tracing::trace!(slice = s.id, iter, at = ?Instant::now(), "slice arrived");
                wire.borrow_mut().back();
                if let Ok(v) = &r {
                    let back = v.values.len() as u64 * 4;
                    petrel_observe::metrics()
                        .p3
                        .slice_received(&node, unit, back, sent.elapsed());
                }
                let _ = tx.send((s.id, iter, r));
            });
        }
        Ok(())
    }
}

fn ids(xs: &[usize]) -> Vec<u32> {
    xs.iter().map(|&x| x as u32).collect()
}

/// A worker's run: its model, engine and clock (model errors name the worker `me`).
struct Worker<M> {
    me: usize,
    job: Arc<P3Job>,
    model: M,
    layout: StageLayout,
    core: SliceWorkerCore,
    pusher: Pusher,
    /// The pushes' replies, as they arrive.
    rx: tokio::sync::mpsc::UnboundedReceiver<Arrival>,
    /// Emulated-device clock: compute of a stage ends at `vt`; waiting for parameters
    /// moves it to the arrival time, so timer lag does not accumulate.
    vt: Instant,
    /// Per round (from 1), the units in the order their parameters completed.
    ready_order: Vec<Vec<usize>>,
    /// The model's stats of every iteration so far.
    stats: Vec<Option<StepStats>>,
    /// Worker 0: the other workers' reports of their checkpoint files.
    saved: tokio::sync::mpsc::UnboundedReceiver<WorkerSaved>,
    shard_nodes: Vec<String>,
    /// The workers of iteration `roster_iter` (the latest the replies told).
    roster: WorkerRoster,
    roster_iter: u64,
    /// The changes of the workers this worker saw.
    changes: Vec<RosterChange>,
    /// The shards of iteration `roster_iter`, their changes, and those that said they leave.
    shards: WorkerRoster,
    shard_changes: Vec<RosterChange>,
    shards_leaving: std::collections::BTreeSet<usize>,
}

impl<M: StageModel> Worker<M> {
    fn accept(&mut self, arrival: Arrival) -> Result<(), P3Error> {
        let (slice, iter, result) = arrival;
        let v = result.map_err(|source| P3Error::Push {
            slice,
            iter,
            source,
        })?;
        tracing::trace!(slice, iter, at = ?Instant::now(), "slice back");
        if v.slice as usize != slice {
            return Err(P3Error::WrongSlice {
                asked: slice,
                got: v.slice as usize,
            });
        }
        // The shard answers with the iteration it aggregated; the worker waits for iter + 1.
        let round = v.iter + 1;
        if round > self.roster_iter && !v.workers.is_empty() {
            let members: Vec<usize> = v.workers.iter().map(|&w| w as usize).collect();
            self.changes.extend(self.roster.adopt(round, &members));
            let shards: Vec<usize> = v.shards.iter().map(|&s| s as usize).collect();
            if !shards.is_empty() {
                self.shard_changes.extend(self.shards.adopt(round, &shards));
            }
            self.roster_iter = round;
        }
        if v.shard_leaving {
            self.shards_leaving.insert(v.shard as usize);
        }
        if let Some(unit) = self.core.receive(round, slice, &v.values)?
            && let Some(values) = self.core.layer_params(unit)
        {
            let me = self.me;
            self.model
                .set_tensor(unit, values)
                .map_err(|e| P3Error::model(me, e))?;
            let r = usize::try_from(v.iter).unwrap_or(usize::MAX);
            if let Some(order) = self.ready_order.get_mut(r) {
                order.push(unit);
            }
        }
        Ok(())
    }

    async fn wait_for(
        &mut self,
        ready: impl Fn(&SliceWorkerCore) -> bool,
    ) -> Result<bool, P3Error> {
        let mut waited = false;
        while !ready(&self.core) {
            waited = true;
            let a = self.rx.recv().await.ok_or(P3Error::RepliesClosed)?;
            self.accept(a)?;
        }
        Ok(waited)
    }

    /// Iteration `iter`'s forward pass, stage by stage, each once its parameters are ready
    /// (`first`: the run's first iteration, which starts the device clock). Returns the
    /// iteration's start mark (when stage 0 began).
    async fn forward(&mut self, iter: u64, first: bool) -> Result<Option<Instant>, P3Error> {
        let me = self.me;
        // The iteration's batch follows this worker's rank among its workers, which the
        // first reply of the previous iteration tells.
        while self.roster_iter < iter {
            let a = self.rx.recv().await.ok_or(P3Error::RepliesClosed)?;
            self.accept(a)?;
        }
        if let Some(rank) = self.roster.rank(me) {
            self.model.set_rank(rank, self.roster.len());
        }
        let mut mark = None;
        for stage in 0..self.layout.n_stages() {
            let units = self.layout.stage(stage);
            let wait_start = Instant::now();
            let waited = self
                .wait_for(|c| units.clone().all(|u| c.is_ready(u)))
                .await?;
            if waited {
                tracing::debug!(
                    worker = me,
                    iter,
                    stage,
                    waited_ms = wait_start.elapsed().as_secs_f64() * 1e3,
                    lag_ms = (Instant::now() - self.vt.min(Instant::now())).as_secs_f64() * 1e3,
                    "forward waited for parameters"
                );
            }
            if waited || (first && stage == 0) {
                self.vt = self.vt.max(Instant::now());
            }
            if stage == 0 {
                mark = Some(Instant::now());
            }
            let d = self
                .model
                .forward_stage(iter, stage)
                .map_err(|e| P3Error::model(me, e))?;
            if !d.is_zero() {
                self.vt += d;
                sleep_to(self.vt).await;
            }
        }
        Ok(mark)
    }

    /// Iteration `iter`'s backward pass, last stage first, pushing each gradient during
    /// backprop or after it, as the job's mode says.
    async fn backward(&mut self, iter: u64) -> Result<(), P3Error> {
        let during = self.job.mode.pushes_during_backward();
        let mut stash = Vec::new();
        for stage in (0..self.layout.n_stages()).rev() {
            let out = self
                .model
                .backward_stage(stage)
                .map_err(|e| P3Error::model(self.me, e))?;
            if !out.compute.is_zero() {
                self.vt += out.compute;
                sleep_to(self.vt).await;
            }
            let units = self.layout.stage(stage);
            if out.grads.len() != units.len() {
                return Err(P3Error::Layout {
                    job: self.job.unit_counts(),
                    model: out.grads.iter().map(|g| g.len() as u64).collect(),
                });
            }
            // Last tensor of the stage first, as backprop produces them.
            for (u, g) in units.zip(out.grads).rev() {
                if during {
                    self.pusher.push(&self.core, iter, u, &g)?;
                } else {
                    stash.push((u, g));
                }
            }
            if during {
                // Let the spawned pushes hand their frames to the outbox now.
                tokio::task::yield_now().await;
            }
        }
        for (u, g) in stash {
            self.pusher.push(&self.core, iter, u, &g)?;
        }
        Ok(())
    }

    /// One worker's part of the checkpoint of round `round`, taken once this worker has every
    /// parameter of `round` back (so every shard applied every gradient of `round - 1`):
    /// writes its file; worker 0 then asks every shard to write its own, waits for the other
    /// workers' reports and writes the manifest LAST.
    async fn save_checkpoint(
        &mut self,
        ctx: &NodeContext,
        c: &CheckpointConfig,
        round: u64,
    ) -> Result<(), P3Error> {
        let (me, job) = (self.me, self.job.clone());
        let fail = |detail: String| P3Error::CheckpointRound { round, detail };
        let mine = write_worker_file(&c.dir, round, me, self.stats.clone())?;
        if me != 0 {
            let w0 = ctx
                .nodes_with_role(WORKER_ROLE)
                .into_iter()
                .next()
                .ok_or_else(|| fail("no worker 0".into()))?;
            let msg = WorkerSaved {
                round,
                worker: me as u32,
                file: mine,
            };
            ctx.node
                .actor_at::<WorkerSaved>(&w0, CHECKPOINT_ACTOR)?
                .ask(msg, Priority::NORMAL, job.ask_timeout)
                .await
                .map_err(|e| fail(format!("telling worker 0: {e}")))?;
            return Ok(());
        }
        let dir = c
            .dir
            .to_str()
            .ok_or_else(|| fail(format!("{} is not UTF-8", c.dir.display())))?
            .to_string();
        let asks = self.shard_nodes.iter().enumerate().map(|(i, n)| {
            let target = ctx.node.actor_at::<SaveShard>(n, SHARD_ACTOR);
            let (dir, timeout) = (dir.clone(), job.ask_timeout);
            async move {
                target?
                    .ask(SaveShard { round, dir }, Priority::NORMAL, timeout)
                    .await
                    .map_err(|e| P3Error::CheckpointRound {
                        round,
                        detail: format!("shard {i}: {e}"),
                    })
            }
        });
        let shards = futures::future::join_all(asks)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let mut workers: Vec<Option<SavedFile>> = vec![None; job.n_workers];
        workers[0] = Some(mine);
        while workers.iter().any(Option::is_none) {
            let m = tokio::time::timeout(job.ask_timeout, self.saved.recv())
                .await
                .map_err(|_| fail("a worker did not report its file in time".into()))?
                .ok_or_else(|| fail("the report channel closed".into()))?;
            let w = m.worker as usize;
            if m.round != round || workers.get(w).is_none_or(Option::is_some) {
                return Err(fail(format!(
                    "unexpected report of worker {w} for round {}",
                    m.round
                )));
            }
            workers[w] = Some(m.file);
        }
        let mut parts = shards;
        parts.extend(workers.into_iter().flatten());
        write_manifest(&c.dir, round, &job.shape(&c.tag), parts)?;
        tracing::info!(round, dir = %c.dir.display(), "p3 checkpoint complete");
        Ok(())
    }
}

async fn sleep_to(vt: Instant) {
    if vt > Instant::now() {
        tokio::time::sleep_until(tokio::time::Instant::from_std(vt)).await;
    }
}

/// The `p3-worker` role: builds this worker's model with `factory(worker index)`, trains
/// `job` with it and returns what it measured.
pub async fn worker_role<M: StageModel>(
    ctx: NodeContext,
    job: Arc<P3Job>,
    factory: impl FnOnce(usize) -> Result<M, M::Error>,
    progress: Option<Progress>,
) -> Result<P3WorkerReport, P3Error> {
    let me = index_in(&ctx, WORKER_ROLE)?;
    let plan = job.plan()?;
    let shard_nodes = ctx.nodes_with_role(SHARD_ROLE);
    let (_, starting_shards) = starting_in(&ctx, SHARD_ROLE);
    if starting_shards.len() != job.n_shards {
        return Err(P3Error::ShardCount {
            job: job.n_shards,
            cluster: starting_shards.len(),
        });
    }
    let mut model = factory(me).map_err(|e| P3Error::model(me, e))?;
    let layout = StageLayout::of(&model);
    if layout.tensor_counts() != job.unit_counts() {
        return Err(P3Error::Layout {
            job: job.unit_counts(),
            model: layout.tensor_counts().to_vec(),
        });
    }
    let saving = job.checkpoint.clone().filter(|c| c.every > 0);
    let (saved_tx, saved) = tokio::sync::mpsc::unbounded_channel::<WorkerSaved>();
    let (start, params, stats, roster, shards) = if ctx.settings.allows_membership_changes() {
        // No start-up barrier a joiner would hold up: every worker pulls the values it
        // starts from (a starting one at iteration 0).
        let (start, params, members, shards) =
            pull_params(&ctx, &job, &plan, &shard_nodes, me).await?;
        tracing::info!(worker = me, start, ?members, ?shards, "p3 worker starts");
        let (workers, shards) = (WorkerRoster::new(members), WorkerRoster::new(shards));
        (start, params, Vec::new(), workers, shards)
    } else {
        let (start, params, stats) = resume_state(&job, &plan, me)?;
        if me == 0 && saving.is_some() {
            let addr = actix::Actor::start(SavedCollector { tx: saved_tx });
            ctx.node
                .register(CHECKPOINT_ACTOR, addr)?
                .accept::<WorkerSaved>();
        }
        ctx.barrier("p3.ready").await?;
        if me == 0 && start == 0 {
            init_shards(&ctx, &job, &shard_nodes).await?;
        }
        ctx.barrier("p3.init").await?;
        let (_, starting) = starting_in(&ctx, WORKER_ROLE);
        let shards = WorkerRoster::new(starting_shards);
        (start, params, stats, WorkerRoster::new(starting), shards)
    };
    let core = SliceWorkerCore::new(plan, params)?;
    for (u, v) in core.params().iter().enumerate() {
        model.set_tensor(u, v).map_err(|e| P3Error::model(me, e))?;
    }
    let refs: Vec<ActorRef<PushGrad>> = shard_nodes
        .iter()
        .map(|n| ctx.node.actor_at::<PushGrad>(n, SHARD_ACTOR))
        .collect::<Result<_, _>>()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Arrival>();
    let pusher = Pusher {
        shards: refs,
        owners: Vec::new(),
        tx,
        worker: me as u32,
        timeout: job.ask_timeout,
        bytes: 0,
        announce: Announce::default(),
        wire: std::rc::Rc::new(std::cell::RefCell::new(WireBusy {
            node: ctx.node.name().to_string(),
            ..WireBusy::default()
        })),
    };
    let mut w = Worker {
        me,
        job: job.clone(),
        model,
        layout,
        core,
        pusher,
        rx,
        vt: Instant::now(),
        ready_order: vec![Vec::new(); job.iterations as usize],
        stats,
        saved,
        shard_nodes,
        roster,
        roster_iter: start,
        changes: Vec::new(),
        shards,
        shard_changes: Vec::new(),
        shards_leaving: Default::default(),
    };
    let marks = w.train(&ctx, start, saving, progress).await?;
    // Once per job: the last update has no loss after it, and an emulated model has none.
    let params = w.core.params();
    if let Some(value) = params.iter().flatten().copied().find(|v| !v.is_finite()) {
        return Err(P3Error::Diverged {
            worker: me,
            iter: job.iterations.saturating_sub(1),
            what: "a parameter",
            value,
        });
    }
    Ok(P3WorkerReport {
        worker: me,
        start,
        marks,
        params: params.to_vec(),
        stats: w.stats,
        bytes_pushed: w.pusher.bytes,
        ready_order: w.ready_order,
        changes: w.changes,
        final_workers: w.roster.members().iter().copied().collect(),
        shard_changes: w.shard_changes,
        final_shards: w.shards.members().iter().copied().collect(),
    })
}

impl<M: StageModel> Worker<M> {
    /// Trains from iteration `start` to the job's end, or to the end of the iteration
    /// after which this worker leaves (its node was asked to). Returns the iteration marks.
    async fn train(
        &mut self,
        ctx: &NodeContext,
        start: u64,
        saving: Option<CheckpointConfig>,
        progress: Option<Progress>,
    ) -> Result<Vec<Instant>, P3Error> {
        let (me, job) = (self.me, self.job.clone());
        let policy = CheckpointPolicy::new(saving.as_ref().map_or(0, |c| c.every), job.iterations);
        let mut marks = Vec::with_capacity(job.iterations.saturating_sub(start) as usize + 1);
        for iter in start..job.iterations {
            marks.extend(self.forward(iter, iter == start).await?);
            // Every reply of the previous iteration is in.
            let next: Vec<usize> = self.shards.members().iter().copied().collect();
            self.replies_in(ctx, iter.saturating_sub(1), &next).await?;
            let step = self.model.stats();
            if let Some(s) = &step {
                // A step too large shows first in the loss: one number per iteration, where a
                // pass over the parameters would cost a copy of the model.
                if !s.loss.is_finite() {
                    return Err(P3Error::Diverged {
                        worker: me,
                        iter,
                        what: "the training loss",
                        value: s.loss,
                    });
                }
                let elapsed = marks.first().map_or(Duration::ZERO, Instant::elapsed);
                let node = ctx.node.name();
                petrel_observe::metrics()
                    .job
                    .point(node, "loss", elapsed, f64::from(s.loss));
            }
            self.stats.push(step);
            let live = live_in(ctx, WORKER_ROLE);
            self.pusher.announce = self
                .roster
                .announce(me, ctx.node.is_leave_requested(), &live);
            let live = live_in(ctx, SHARD_ROLE);
            (
                self.pusher.announce.shards_joining,
                self.pusher.announce.shards_leaving,
            ) = self.shards.shard_changes(&live, &self.shards_leaving);
            self.pusher.owners = self.shards.members().iter().copied().collect();
            self.core.begin_round(iter + 1);
            self.backward(iter).await?;
            if let Some(p) = &progress {
                p(me, iter, self.model.stats());
            }
            if self.pusher.announce.leaving {
                // The node leaves once the role returns, with this iteration's replies in.
                ctx.node.leave_when_done();
                tracing::info!(worker = me, iter, "p3 worker leaves after this iteration");
                break;
            }
            if let Some(c) = &saving
                && policy.due_after(iter)
            {
                self.wait_for(|c| c.all_ready()).await?;
                self.save_checkpoint(ctx, c, iter + 1).await?;
            }
        }
        self.wait_for(|c| c.all_ready()).await?;
        let last = self.roster_iter.saturating_sub(1);
        // After the job's last iteration no shard serves any more.
        let next: Vec<usize> = match self.roster_iter < job.iterations {
            true => self.shards.members().iter().copied().collect(),
            false => Vec::new(),
        };
        self.replies_in(ctx, last, &next).await?;
        marks.push(Instant::now());
        Ok(marks)
    }

    /// Tells each shard that served iteration `iter` (the owners its pushes went to) and
    /// serves none of the `next` one that this worker has every reply of it: a leaving
    /// shard's node waits for that ([`crate::core::Departure`]).
    async fn replies_in(
        &self,
        ctx: &NodeContext,
        iter: u64,
        next: &[usize],
    ) -> Result<(), P3Error> {
        if !ctx.settings.allows_membership_changes() {
            // Shards leave only in a job whose members may change.
            return Ok(());
        }
        let done = shards_done_with(&self.pusher.owners, next);
        let asks = done.into_iter().map(|shard| {
            let node = self.shard_nodes.get(shard).cloned().unwrap_or_default();
            let target = ctx.node.actor_at::<RepliesIn>(&node, SHARD_ACTOR);
            let msg = RepliesIn {
                worker: self.me as u32,
                iter,
            };
            let timeout = self.job.ask_timeout;
            async move {
                match target?.ask(msg, Priority::NORMAL, timeout).await {
                    // It leaves only once it heard this: its answer and the view without
                    // it may come in either order.
                    Ok(_) | Err(AskError::PeerLeft { .. }) => Ok(()),
                    Err(source) => Err(P3Error::RepliesIn {
                        shard,
                        iter,
                        source,
                    }),
                }
            }
        });
        for r in futures::future::join_all(asks).await {
            r?;
        }
        Ok(())
    }
}
