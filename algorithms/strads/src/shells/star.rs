//! Star routing: the scheduler's event loop ([`run_scheduler`]) sends every round's tasks
//! to every worker and their partials come back to it; [`StradsWorker`] is the worker
//! actor. The decisions are the [`PipelineCore`]'s; this file only moves messages.

use super::checkpoint::{RoundCheckpointer, read_worker_round_file, write_worker_round_file};
use super::elastic::{ElasticWorkers, WorkerExit, change_step, give_up_rounds};
use super::{Commit, Dispatch, PartialResult, RestoreRoundState, SaveRoundState, SavedRoundState};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Push, Schedule, Step, StradsApp};
use crate::core::checkpoint::WorkerRoundFile;
use crate::core::pipeline::{PipelineAction, PipelineCore};
use crate::error::StradsError;
use actix::prelude::*;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::{HandlerError, NodeError};
use petrel_messages::Priority;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Knobs of a scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerOptions {
    /// Rounds in flight at once (1 = fully synchronous).
    pub depth: usize,
    /// This scheduler's index (several schedulers may drive the same workers).
    pub scheduler: u32,
    /// Timeout of one worker's push.
    pub timeout: Duration,
    /// Priority of the scheduler's messages.
    pub priority: Priority,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            depth: 1,
            scheduler: 0,
            timeout: Duration::from_secs(60),
            priority: Priority::NORMAL,
        }
    }
}

impl SchedulerOptions {
    /// `depth` rounds in flight (at least 1) and a push timeout of `timeout_s` seconds (at
    /// least 1), the other knobs at their defaults: what the built-in jobs configure.
    pub fn with_depth_and_timeout(depth: usize, timeout_s: u64) -> Self {
        SchedulerOptions {
            depth: depth.max(1),
            timeout: Duration::from_secs(timeout_s.max(1)),
            ..SchedulerOptions::default()
        }
    }
}

/// Addresses of the workers, in worker order.
pub struct WorkerSet<A: StradsApp> {
    /// Where dispatches go.
    pub dispatch: Vec<ActorRef<Dispatch<A>>>,
    /// Where commits go.
    pub commit: Vec<ActorRef<Commit<A>>>,
    /// Where checkpoint saves go.
    pub save: Vec<ActorRef<SaveRoundState>>,
    /// Where checkpoint restores go.
    pub restore: Vec<ActorRef<RestoreRoundState>>,
}

// By hand: a derive would ask `A: Clone` of the marker type.
impl<A: StradsApp> Clone for WorkerSet<A> {
    fn clone(&self) -> Self {
        WorkerSet {
            dispatch: self.dispatch.clone(),
            commit: self.commit.clone(),
            save: self.save.clone(),
            restore: self.restore.clone(),
        }
    }
}

impl<A: StradsApp> WorkerSet<A> {
    /// Resolves worker actors `actor` on each of `nodes` (in order).
    pub fn resolve(
        node: &petrel_actors::Node,
        nodes: &[String],
        actor: &str,
    ) -> Result<Self, NodeError> {
        fn at<M: petrel_messages::RemoteMessage>(
            node: &petrel_actors::Node,
            nodes: &[String],
            actor: &str,
        ) -> Result<Vec<ActorRef<M>>, NodeError> {
            nodes.iter().map(|n| node.actor_at::<M>(n, actor)).collect()
        }
        Ok(WorkerSet {
            dispatch: at(node, nodes, actor)?,
            commit: at(node, nodes, actor)?,
            save: at(node, nodes, actor)?,
            restore: at(node, nodes, actor)?,
        })
    }

    /// The number of workers.
    pub fn len(&self) -> usize {
        self.dispatch.len()
    }

    /// No workers.
    pub fn is_empty(&self) -> bool {
        self.dispatch.is_empty()
    }
}

/// What a finished scheduler reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStats {
    /// The next unused round number (the number of rounds when the run started at 0).
    pub rounds: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

type RoundFuture<A> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<(u64, Vec<<A as StradsApp>::Partial>), StradsError>>,
    >,
>;

fn dispatch_round<A: StradsApp>(
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
    round: u64,
    plan: Plan<A::Task>,
) -> Result<RoundFuture<A>, StradsError> {
    let tasks = plan
        .into_tasks(workers.len())
        .map_err(|tasks| StradsError::PlanSize {
            round,
            tasks,
            workers: workers.len(),
        })?;
    let asks: Vec<_> = workers
        .dispatch
        .iter()
        .zip(tasks)
        .enumerate()
        .map(|(worker, (addr, task))| {
            let addr = addr.clone();
            let msg = Dispatch::<A> {
                scheduler: opts.scheduler,
                round,
                task,
            };
            let (priority, timeout) = (opts.priority, opts.timeout);
            started_now(Box::pin(async move {
                let reply = addr.ask(msg, priority, timeout).await.map_err(|source| {
                    StradsError::Worker {
                        round,
                        worker,
                        source,
                    }
                })?;
                tracing::trace!(round, worker, "strads partial arrived");
                if reply.round != round {
                    return Err(StradsError::WrongRound {
                        round,
                        worker,
                        answered: reply.round,
                    });
                }
                Ok(reply.partial)
            }))
        })
        .collect();
    Ok(Box::pin(async move {
        let partials = futures::future::join_all(asks)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok((round, partials))
    }))
}

/// Polls `fut` once, now: what it does before its first await (an ask puts its request on
/// the wire) happens at this point of the scheduler loop. Without this a round's dispatch
/// would leave whenever the round's future is first polled, so with several rounds in
/// flight a worker could see it before or after an older round's commit depending on
/// timing, and runs would not be reproducible. Later polls come with the real waker.
fn started_now<F: std::future::Future + Unpin>(
    mut fut: F,
) -> futures::future::Either<futures::future::Ready<F::Output>, F> {
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    match std::future::Future::poll(std::pin::Pin::new(&mut fut), &mut cx) {
        std::task::Poll::Ready(out) => futures::future::Either::Left(futures::future::ready(out)),
        std::task::Poll::Pending => futures::future::Either::Right(fut),
    }
}

/// Runs the scheduler's rounds until the app says [`Step::Done`] and every in-flight round
/// committed. Commits go to every worker in round order.
pub async fn run_scheduler<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
) -> Result<RunStats, StradsError> {
    run_scheduler_from(app, workers, opts, 0).await
}

/// [`run_scheduler`] starting at round `first_round`: a scheduler that pauses between
/// segments of its job (e.g. to synchronise with other schedulers) calls this once per
/// segment with the previous segment's [`RunStats::rounds`], so round numbers never repeat.
pub async fn run_scheduler_from<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
    first_round: u64,
) -> Result<RunStats, StradsError> {
    run_rounds(app, workers, opts, first_round, None, None).await
}

/// [`run_scheduler`] for a job whose workers join and leave ([`ElasticWorkers`]): at the
/// first round boundary after a worker announced a join or a leave, the scheduler drains
/// the rounds in flight, runs the app's change round ([`Schedule::reshape`]) over the
/// staying workers and the leavers, commits it to all of them, and then sends to the
/// staying workers only.
pub async fn run_scheduler_elastic<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
    elastic: &mut ElasticWorkers,
) -> Result<RunStats, StradsError> {
    run_rounds(app, workers, opts, 0, None, Some(elastic)).await
}

/// [`run_scheduler`] with round checkpoints ([`super::checkpoint`]): first restores the
/// newest valid checkpoint when `checkpoints` resumes, then writes one at the first drain
/// point after every `every` committed rounds. To reach a drain point the scheduler stops
/// dispatching until the rounds in flight committed, which with `depth > 1` can change the
/// schedule (deterministically); with `depth = 1` every round boundary is one.
pub async fn run_scheduler_checkpointed<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
    checkpoints: &mut RoundCheckpointer,
) -> Result<RunStats, StradsError> {
    if workers.is_empty() {
        return Err(StradsError::EmptyWorkerSet);
    }
    let first_round = if checkpoints.resumes() {
        checkpoints.resume(app, workers, opts).await?
    } else {
        checkpoints.clear_stale()?;
        0
    };
    run_rounds(app, workers, opts, first_round, Some(checkpoints), None).await
}

async fn run_rounds<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
    first_round: u64,
    mut checkpoints: Option<&mut RoundCheckpointer>,
    mut elastic: Option<&mut ElasticWorkers>,
) -> Result<RunStats, StradsError> {
    if workers.is_empty() {
        return Err(StradsError::EmptyWorkerSet);
    }
    // Changes with the membership (elastic jobs); fixed otherwise.
    let mut workers = workers.clone();
    // A resumed run's clock continues from its checkpoint.
    let clock_start = checkpoints
        .as_ref()
        .map(|c| c.elapsed_before())
        .unwrap_or_default();
    let started = Instant::now();
    let elapsed = || clock_start + started.elapsed();
    let mut core = PipelineCore::starting_at(opts.depth, first_round);
    let mut in_flight: FuturesOrdered<RoundFuture<A>> = FuturesOrdered::new();
    // Dispatch times of the rounds in flight, oldest first (rounds commit in order).
    let mut dispatched: std::collections::VecDeque<Instant> = Default::default();
    let (metrics, node) = (
        &petrel_observe::metrics().strads,
        petrel_observe::thread_node(),
    );
    let mut waiting = false;
    loop {
        let progress = app.checkpoint_progress();
        let checkpoint_due = checkpoints.as_ref().is_some_and(|c| c.due(progress));
        match core.next_action_after(waiting || checkpoint_due) {
            PipelineAction::Schedule(round) => {
                if let Some(el) = elastic.as_deref_mut()
                    && el.pending()?
                {
                    // A change waits for a boundary with nothing in flight.
                    if core.in_flight() > 0 {
                        waiting = true;
                        continue;
                    }
                    if let Some(change) = el.reshape()?
                        && let Some(step) = change_step(app, round, &change)?
                    {
                        workers = WorkerSet::resolve(el.node(), &change.dealt, el.actor())?;
                        core.scheduled(&step)?;
                        if let Step::Run(plan) = step {
                            in_flight.push_back(dispatch_round(&workers, opts, round, plan)?);
                            dispatched.push_back(Instant::now());
                            metrics.round_dispatched(&node);
                            el.dispatched(round, change);
                        }
                        continue;
                    }
                }
                if let Some(c) = checkpoints.as_deref_mut().filter(|c| c.due(progress)) {
                    // A drain point: nothing in flight, every earlier round committed.
                    c.save(app, &workers, opts, round, elapsed()).await?;
                }
                let step = app.schedule(round, core.in_flight());
                waiting = matches!(step, Step::Wait);
                core.scheduled(&step)?;
                if let Step::Run(plan) = step {
                    in_flight.push_back(dispatch_round(&workers, opts, round, plan)?);
                    dispatched.push_back(Instant::now());
                    metrics.round_dispatched(&node);
                }
            }
            PipelineAction::AwaitOldest => {
                waiting = false;
                let Some(result) = in_flight.next().await else {
                    return Err(StradsModelError::PipelineEmpty.into());
                };
                let (round, partials) = match result {
                    Ok(answers) => answers,
                    Err(e) => {
                        let el = elastic.as_deref_mut();
                        give_up_rounds(app, &mut core, el, e)?;
                        (in_flight, waiting) = (FuturesOrdered::new(), false);
                        dispatched.clear();
                        continue;
                    }
                };
                tracing::trace!(round, "strads pull starts");
                let commit = app
                    .pull(round, partials, elapsed())
                    .map_err(StradsError::Pull)?;
                tracing::trace!(round, "strads pull done");
                core.committed(round)?;
                if let Some(c) = checkpoints.as_deref_mut() {
                    c.round_committed();
                }
                if let Some(t) = dispatched.pop_front() {
                    metrics.round_committed(&node, t.elapsed());
                }
                let msg = Commit::<A> {
                    scheduler: opts.scheduler,
                    round,
                    commit,
                };
                send_commit(&workers, &msg, opts.priority, elastic.as_deref_mut())?;
                if let Some(el) = elastic.as_deref_mut()
                    && let Some(now) = el.committed(round)
                {
                    workers = WorkerSet::resolve(el.node(), &now, el.actor())?;
                }
            }
            PipelineAction::Stop => break,
        }
    }
    Ok(RunStats {
        rounds: core.next_round(),
        elapsed: elapsed(),
    })
}

/// Sends every worker the same commit (encoded once for all of them). In an elastic job
/// a worker that died misses it: it is lost, and the next change deals its rows.
fn send_commit<A: StradsApp>(
    workers: &WorkerSet<A>,
    msg: &Commit<A>,
    priority: Priority,
    mut elastic: Option<&mut ElasticWorkers>,
) -> Result<(), StradsError> {
    let sent = ActorRef::tell_each(&workers.commit, msg, priority);
    for (worker, sent) in sent.into_iter().enumerate() {
        if let Err(source) = sent {
            let round = msg.round;
            let e = StradsError::Commit {
                round,
                worker,
                source,
            };
            if elastic.as_deref_mut().and_then(|el| el.died(&e)).is_none() {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A worker actor: hands dispatches and commits to the app's [`Push`] half. A failed
/// commit poisons the worker (its state would be inconsistent): later dispatches fail with
/// the original error, so the scheduler stops with a message naming the worker.
pub struct StradsWorker<A: StradsApp, W: Push<A>> {
    index: u32,
    logic: W,
    failed: Option<String>,
    /// Set in a job whose workers may leave.
    exit: Option<WorkerExit>,
    _app: PhantomData<fn() -> A>,
}

impl<A: StradsApp, W: Push<A>> StradsWorker<A, W> {
    /// Worker `index` running `logic`.
    pub fn new(index: u32, logic: W) -> Self {
        StradsWorker {
            index,
            logic,
            failed: None,
            exit: None,
            _app: PhantomData,
        }
    }
}

impl<A: StradsApp, W: Push<A>> Actor for StradsWorker<A, W> {
    type Context = Context<Self>;
}

impl<A: StradsApp, W: Push<A>> Handler<Msg<Dispatch<A>>> for StradsWorker<A, W> {
    type Result = Result<PartialResult<A>, HandlerError>;

    fn handle(&mut self, msg: Msg<Dispatch<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        if let Some(e) = &self.failed {
            return Err(HandlerError::new(format!(
                "worker {} failed earlier: {e}",
                self.index
            )));
        }
        let Dispatch {
            scheduler,
            round,
            task,
        } = msg.body;
        tracing::trace!(round, worker = self.index, "strads dispatch arrived");
        let partial = self
            .logic
            .push_from(scheduler, round, &task)
            .map_err(|e| HandlerError::new(format!("worker {} push: {e}", self.index)))?;
        tracing::trace!(round, worker = self.index, "strads push done");
        Ok(PartialResult {
            round,
            worker: self.index,
            partial,
        })
    }
}

impl<A: StradsApp, W: Push<A>> Handler<Msg<Commit<A>>> for StradsWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Commit<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        if self.failed.is_some() {
            return Ok(());
        }
        let Commit {
            scheduler,
            round,
            commit,
        } = msg.body;
        tracing::trace!(round, worker = self.index, "strads commit arrived");
        if let Err(e) = self.logic.commit_from(scheduler, round, &commit) {
            tracing::error!(worker = self.index, scheduler, round, error = %e, "commit failed");
            self.failed = Some(format!(
                "commit of round {round} from scheduler {scheduler}: {e}"
            ));
        } else if let Some(exit) = &mut self.exit {
            exit.after_commit(self.logic.holds_work());
        }
        Ok(())
    }
}

impl<A: StradsApp, W: Push<A>> Handler<Msg<SaveRoundState>> for StradsWorker<A, W> {
    type Result = Result<SavedRoundState, HandlerError>;

    /// Writes this worker's file for a checkpoint: a star worker holds no blocks.
    fn handle(&mut self, msg: Msg<SaveRoundState>, _ctx: &mut Context<Self>) -> Self::Result {
        let index = self.index;
        let fail = |e: String| HandlerError::new(format!("worker {index} checkpoint: {e}"));
        let state = match &self.failed {
            Some(e) => return Err(fail(format!("failed earlier: {e}"))),
            None => self
                .logic
                .snapshot_state()
                .map_err(|e| fail(e.to_string()))?,
        };
        let state =
            state.ok_or_else(|| fail("this app does not implement snapshot_state".into()))?;
        let file = WorkerRoundFile {
            state,
            blocks: Vec::new(),
        };
        let file =
            write_worker_round_file(&msg.body, index, &file).map_err(|e| fail(e.to_string()))?;
        Ok(SavedRoundState {
            worker: index,
            file,
            sent: Vec::new(),
            received: Vec::new(),
        })
    }
}

impl<A: StradsApp, W: Push<A>> Handler<Msg<RestoreRoundState>> for StradsWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<RestoreRoundState>, _ctx: &mut Context<Self>) -> Self::Result {
        let index = self.index;
        let fail = |e: String| HandlerError::new(format!("worker {index} restore: {e}"));
        if let Some(e) = &self.failed {
            return Err(fail(format!("failed earlier: {e}")));
        }
        let file = read_worker_round_file(&msg.body, index).map_err(|e| fail(e.to_string()))?;
        self.logic
            .restore_state(&file.state)
            .map_err(|e| fail(e.to_string()))
    }
}

/// Starts a worker actor and registers it under `name` for its message types (rounds and
/// checkpoints).
pub fn start_worker<A: StradsApp, W: Push<A>>(
    node: &petrel_actors::Node,
    name: &str,
    index: u32,
    logic: W,
) -> Result<Addr<StradsWorker<A, W>>, NodeError> {
    start_worker_with(node, name, StradsWorker::<A, W>::new(index, logic))
}

/// [`start_worker`] in a job whose workers may leave: the receiver fires once this worker
/// was asked to leave and holds no work after a commit.
pub fn start_elastic_worker<A: StradsApp, W: Push<A>>(
    node: &petrel_actors::Node,
    name: &str,
    index: u32,
    logic: W,
) -> Result<futures::channel::oneshot::Receiver<()>, NodeError> {
    let (tx, rx) = futures::channel::oneshot::channel();
    let mut worker = StradsWorker::<A, W>::new(index, logic);
    worker.exit = Some(WorkerExit {
        node: node.clone(),
        release: Some(tx),
    });
    start_worker_with(node, name, worker)?;
    Ok(rx)
}

fn start_worker_with<A: StradsApp, W: Push<A>>(
    node: &petrel_actors::Node,
    name: &str,
    worker: StradsWorker<A, W>,
) -> Result<Addr<StradsWorker<A, W>>, NodeError> {
    let addr = worker.start();
    node.register(name, addr.clone())?
        .accept::<Dispatch<A>>()
        .accept::<Commit<A>>()
        .accept::<SaveRoundState>()
        .accept::<RestoreRoundState>();
    Ok(addr)
}
