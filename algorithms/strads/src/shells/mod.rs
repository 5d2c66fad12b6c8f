//! STRADS model-parallel runtime: a generic scheduler and worker actors driven by an app.
//!
//! An app declares its wire types ([`StradsApp`]), the scheduler half ([`Schedule`]:
//! `schedule` and `pull`) and the worker half ([`Push`]: `push` on its data shard and
//! `commit` of aggregated changes). A round is
//!
//! ```text
//! schedule -> Dispatch{round, task} to every worker (ask) -> push -> partials back
//!          -> pull (aggregate) -> Commit{round, commit} to every worker (tell)
//!          -> the changes feed the next schedule
//! ```
//!
//! Up to `depth` rounds are in flight at once ([`SchedulerOptions::depth`]); commits are
//! applied strictly in round order, and every worker sees the same sequence of messages
//! (dispatches and commits travel FIFO at one priority), so for a deterministic app the
//! result does not depend on timing or on the transport. A task may be the same for every
//! worker or different per worker ([`Plan::PerWorker`], used by rotation schedules where
//! worker `p` works on block `(p + s) mod P` in step `s`). Several schedulers may drive the
//! same workers, each with its own disjoint variables.
//!
//! The decision logic ([`PipelineCore`]) is plain data with unit tests; [`StradsWorker`] is
//! an actix actor that feeds messages to the app; [`run_scheduler`] is the scheduler's
//! event loop on the node's actix system.
//!
//! Rotation apps whose blocks should not pass through the scheduler use the [`ring`]
//! module: the same scheduler loop and messages, plus [`ring::Handoff`]s that carry the
//! blocks worker to worker ([`ring::RingWorker`]).

use actix::prelude::*;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::{AskError, HandlerError};
use petrel_messages::{Priority, RemoteMessage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

pub mod ring;
pub use ring::{
    BlockFate, BlockId, Delivery, Handoff, LocalRun, RingApp, RingCore, RingOutput, RingPush,
    RingWorker, ring_members, run_local, start_ring_worker,
};

/// The wire types of one model-parallel app. Wire names must be unique in the cluster.
pub trait StradsApp: Send + 'static {
    /// Wire name of [`Dispatch<Self>`].
    const DISPATCH_NAME: &'static str;
    /// Wire name of [`Commit<Self>`].
    const COMMIT_NAME: &'static str;
    /// What `schedule` produces for a worker (e.g. the variables and their values).
    type Task: Serialize + DeserializeOwned + Send + Clone + 'static;
    /// What a worker's `push` returns (partial results on its data shard).
    type Partial: Serialize + DeserializeOwned + Send + 'static;
    /// What `pull` produces and every worker applies (e.g. committed deltas).
    type Commit: Serialize + DeserializeOwned + Send + Clone + 'static;
}

/// Scheduler -> worker: the work of one round.
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Task: Serialize",
    deserialize = "A::Task: DeserializeOwned"
))]
pub struct Dispatch<A: StradsApp> {
    pub scheduler: u32,
    pub round: u64,
    pub task: A::Task,
}

/// Worker -> scheduler: the reply to a [`Dispatch`].
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Partial: Serialize",
    deserialize = "A::Partial: DeserializeOwned"
))]
pub struct PartialResult<A: StradsApp> {
    pub round: u64,
    pub worker: u32,
    pub partial: A::Partial,
}

/// Scheduler -> every worker: the aggregated result of a round, to apply.
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A::Commit: Serialize",
    deserialize = "A::Commit: DeserializeOwned"
))]
pub struct Commit<A: StradsApp> {
    pub scheduler: u32,
    pub round: u64,
    pub commit: A::Commit,
}

impl<A: StradsApp> RemoteMessage for Dispatch<A> {
    const TYPE_NAME: &'static str = A::DISPATCH_NAME;
    type Reply = PartialResult<A>;
}

impl<A: StradsApp> RemoteMessage for Commit<A> {
    const TYPE_NAME: &'static str = A::COMMIT_NAME;
    type Reply = ();
}

/// What a scheduler sends in one round.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan<T> {
    /// The same task to every worker (star topology, e.g. Lasso).
    All(T),
    /// One task per worker, in worker order (rotation schedules over a ring).
    PerWorker(Vec<T>),
}

/// The answer of [`Schedule::schedule`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step<T> {
    /// Dispatch this round now.
    Run(Plan<T>),
    /// Nothing can be scheduled until an in-flight round commits (e.g. a barrier round
    /// that must see every earlier commit). Must not be returned with nothing in flight.
    Wait,
    /// The job is over: finish the in-flight rounds and stop.
    Done,
}

/// Scheduler half of an app (sans-I/O).
pub trait Schedule<A: StradsApp> {
    /// Called whenever a pipeline slot is free; `in_flight` rounds are dispatched but not
    /// yet committed.
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<A::Task>;
    /// Aggregates the partial results (one per worker, in worker order) of `round`. Rounds
    /// are pulled in increasing order.
    fn pull(
        &mut self,
        round: u64,
        partials: Vec<A::Partial>,
        elapsed: Duration,
    ) -> Result<A::Commit, String>;
}

/// Worker half of an app (sans-I/O): holds a data shard and the local model state.
pub trait Push<A: StradsApp>: Unpin + 'static {
    fn push(&mut self, round: u64, task: &A::Task) -> Result<A::Partial, String>;
    fn commit(&mut self, round: u64, commit: &A::Commit) -> Result<(), String>;

    /// [`Self::push`] with the index of the scheduler that sent the dispatch. Apps driven
    /// by several schedulers override this to keep per-scheduler bookkeeping (round
    /// numbers are only unique per scheduler); the default ignores the index.
    fn push_from(
        &mut self,
        scheduler: u32,
        round: u64,
        task: &A::Task,
    ) -> Result<A::Partial, String> {
        let _ = scheduler;
        self.push(round, task)
    }

    /// [`Self::commit`] with the index of the scheduler that sent the commit.
    fn commit_from(
        &mut self,
        scheduler: u32,
        round: u64,
        commit: &A::Commit,
    ) -> Result<(), String> {
        let _ = scheduler;
        self.commit(round, commit)
    }
}

/// Pipeline bookkeeping of a scheduler: which rounds may be dispatched, in what order
/// commits happen. Plain data; [`run_scheduler`] drives it.
#[derive(Debug, Clone)]
pub struct PipelineCore {
    depth: usize,
    next_round: u64,
    next_commit: u64,
    done: bool,
}

/// What the scheduler loop should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineAction {
    /// Ask the app for round `r` (a slot is free).
    Schedule(u64),
    /// Wait for the oldest in-flight round.
    AwaitOldest,
    /// Nothing in flight and no more rounds: stop.
    Stop,
}

impl PipelineCore {
    pub fn new(depth: usize) -> Self {
        Self::starting_at(depth, 0)
    }

    /// A pipeline whose first round is `first_round` (a scheduler that runs its job in
    /// several [`run_scheduler_from`] segments keeps its round numbers increasing).
    pub fn starting_at(depth: usize, first_round: u64) -> Self {
        PipelineCore {
            depth: depth.max(1),
            next_round: first_round,
            next_commit: first_round,
            done: false,
        }
    }

    /// The round number the next `Schedule` action will offer.
    pub fn next_round(&self) -> u64 {
        self.next_round
    }

    pub fn in_flight(&self) -> usize {
        (self.next_round - self.next_commit) as usize
    }

    pub fn next_action(&self) -> PipelineAction {
        if !self.done && self.in_flight() < self.depth {
            PipelineAction::Schedule(self.next_round)
        } else if self.in_flight() > 0 {
            PipelineAction::AwaitOldest
        } else {
            PipelineAction::Stop
        }
    }

    /// The app's answer for the round offered by [`PipelineAction::Schedule`]. Returns
    /// `Err` for a `Wait` with nothing in flight (the app would deadlock).
    pub fn scheduled<T>(&mut self, step: &Step<T>) -> Result<Option<u64>, String> {
        match step {
            Step::Run(_) => {
                self.next_round += 1;
                Ok(Some(self.next_round - 1))
            }
            Step::Done => {
                self.done = true;
                Ok(None)
            }
            Step::Wait if self.in_flight() == 0 => Err(format!(
                "app waits at round {} with nothing in flight",
                self.next_round
            )),
            Step::Wait => Ok(None),
        }
    }

    /// After a `Wait`, the loop must await a commit before scheduling again.
    pub fn must_await(&self, last_step_was_wait: bool) -> bool {
        last_step_was_wait && self.in_flight() > 0
    }

    /// The oldest in-flight round committed.
    pub fn committed(&mut self, round: u64) -> Result<(), String> {
        if round != self.next_commit || self.in_flight() == 0 {
            return Err(format!(
                "commit of round {round} out of order (expected {})",
                self.next_commit
            ));
        }
        self.next_commit += 1;
        Ok(())
    }
}

/// Knobs of a scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerOptions {
    /// Rounds in flight at once (1 = fully synchronous).
    pub depth: usize,
    /// This scheduler's index (several schedulers may drive the same workers).
    pub scheduler: u32,
    /// Timeout of one worker's push.
    pub timeout: Duration,
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

/// Addresses of the workers, in worker order.
#[derive(Clone)]
pub struct WorkerSet<A: StradsApp> {
    pub dispatch: Vec<ActorRef<Dispatch<A>>>,
    pub commit: Vec<ActorRef<Commit<A>>>,
}

impl<A: StradsApp> WorkerSet<A> {
    /// Resolves worker actors `actor` on each of `nodes` (in order).
    pub fn resolve(
        node: &petrel_actors::Node,
        nodes: &[String],
        actor: &str,
    ) -> Result<Self, petrel_actors::NodeError> {
        let dispatch = nodes
            .iter()
            .map(|n| node.actor_at::<Dispatch<A>>(n, actor))
            .collect::<Result<Vec<_>, _>>()?;
        let commit = nodes
            .iter()
            .map(|n| node.actor_at::<Commit<A>>(n, actor))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(WorkerSet { dispatch, commit })
    }

    pub fn len(&self) -> usize {
        self.dispatch.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dispatch.is_empty()
    }
}

/// Errors of a scheduler run.
#[derive(Debug, thiserror::Error)]
pub enum StradsRunError {
    #[error("round {round}: worker {worker}: {source}")]
    Worker {
        round: u64,
        worker: usize,
        #[source]
        source: AskError,
    },
    #[error("round {round}: worker {worker} answered for round {answered}")]
    WrongRound {
        round: u64,
        worker: usize,
        answered: u64,
    },
    #[error("round {round}: plan has {tasks} tasks for {workers} workers")]
    PlanSize {
        round: u64,
        tasks: usize,
        workers: usize,
    },
    #[error("round {round}: commit to worker {worker}: {source}")]
    Commit {
        round: u64,
        worker: usize,
        #[source]
        source: AskError,
    },
    #[error("app: {0}")]
    App(String),
    #[error("no workers")]
    NoWorkers,
}

/// What a finished scheduler reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStats {
    /// The next unused round number (the number of rounds when the run started at 0).
    pub rounds: u64,
    pub elapsed: Duration,
}

type RoundFuture<A> = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<(u64, Vec<<A as StradsApp>::Partial>), StradsRunError>,
            >,
    >,
>;

fn dispatch_round<A: StradsApp>(
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
    round: u64,
    plan: Plan<A::Task>,
) -> Result<RoundFuture<A>, StradsRunError> {
    let tasks: Vec<A::Task> = match plan {
        Plan::All(task) => vec![task; workers.len()],
        Plan::PerWorker(tasks) => {
            if tasks.len() != workers.len() {
                return Err(StradsRunError::PlanSize {
                    round,
                    tasks: tasks.len(),
                    workers: workers.len(),
                });
            }
            tasks
        }
    };
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
            async move {
                let reply = addr.ask(msg, priority, timeout).await.map_err(|source| {
                    StradsRunError::Worker {
                        round,
                        worker,
                        source,
                    }
                })?;
                if reply.round != round {
                    return Err(StradsRunError::WrongRound {
                        round,
                        worker,
                        answered: reply.round,
                    });
                }
                Ok(reply.partial)
            }
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

/// Runs the scheduler's rounds until the app says [`Step::Done`] and every in-flight round
/// committed. Commits go to every worker in round order.
pub async fn run_scheduler<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    workers: &WorkerSet<A>,
    opts: &SchedulerOptions,
) -> Result<RunStats, StradsRunError> {
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
) -> Result<RunStats, StradsRunError> {
    if workers.is_empty() {
        return Err(StradsRunError::NoWorkers);
    }
    let started = Instant::now();
    let mut core = PipelineCore::starting_at(opts.depth, first_round);
    let mut in_flight: FuturesOrdered<RoundFuture<A>> = FuturesOrdered::new();
    let mut waiting = false;
    loop {
        let action = if core.must_await(waiting) {
            PipelineAction::AwaitOldest
        } else {
            core.next_action()
        };
        match action {
            PipelineAction::Schedule(round) => {
                let step = app.schedule(round, core.in_flight());
                waiting = matches!(step, Step::Wait);
                core.scheduled(&step).map_err(StradsRunError::App)?;
                if let Step::Run(plan) = step {
                    in_flight.push_back(dispatch_round(workers, opts, round, plan)?);
                }
            }
            PipelineAction::AwaitOldest => {
                waiting = false;
                let Some(result) = in_flight.next().await else {
                    return Err(StradsRunError::App("pipeline empty while awaiting".into()));
                };
                let (round, partials) = result?;
                let commit = app
                    .pull(round, partials, started.elapsed())
                    .map_err(StradsRunError::App)?;
                core.committed(round).map_err(StradsRunError::App)?;
                for (worker, addr) in workers.commit.iter().enumerate() {
                    addr.tell(
                        Commit::<A> {
                            scheduler: opts.scheduler,
                            round,
                            commit: commit.clone(),
                        },
                        opts.priority,
                    )
                    .map_err(|source| StradsRunError::Commit {
                        round,
                        worker,
                        source,
                    })?;
                }
            }
            PipelineAction::Stop => break,
        }
    }
    Ok(RunStats {
        rounds: core.next_round,
        elapsed: started.elapsed(),
    })
}

/// A worker actor: hands dispatches and commits to the app's [`Push`] half. A failed
/// commit poisons the worker (its state would be inconsistent): later dispatches fail with
/// the original error, so the scheduler stops with a message naming the worker.
pub struct StradsWorker<A: StradsApp, W: Push<A>> {
    index: u32,
    logic: W,
    failed: Option<String>,
    _app: PhantomData<fn() -> A>,
}

impl<A: StradsApp, W: Push<A>> StradsWorker<A, W> {
    pub fn new(index: u32, logic: W) -> Self {
        StradsWorker {
            index,
            logic,
            failed: None,
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
        let partial = self
            .logic
            .push_from(scheduler, round, &task)
            .map_err(|e| HandlerError::new(format!("worker {} push: {e}", self.index)))?;
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
        if let Err(e) = self.logic.commit_from(scheduler, round, &commit) {
            tracing::error!(worker = self.index, scheduler, round, error = %e, "commit failed");
            self.failed = Some(format!(
                "commit of round {round} from scheduler {scheduler}: {e}"
            ));
        }
        Ok(())
    }
}

/// Starts a worker actor and registers it under `name` for both message types.
pub fn start_worker<A: StradsApp, W: Push<A>>(
    node: &petrel_actors::Node,
    name: &str,
    index: u32,
    logic: W,
) -> Result<Addr<StradsWorker<A, W>>, petrel_actors::NodeError> {
    let addr = StradsWorker::<A, W>::new(index, logic).start();
    node.register(name, addr.clone())?
        .accept::<Dispatch<A>>()
        .accept::<Commit<A>>();
    Ok(addr)
}

#[cfg(test)]
mod tests;
