//! Exchange routing's worker actor: star rounds whose large part goes worker to worker.
//!
//! In a star round every partial goes to the scheduler and the commit comes back, so a
//! result as large as the shared state (the Gauss-Seidel Lasso's residual delta, one value
//! per row) crosses the scheduler's node twice per round, one leg after the other. An
//! [`ExchangeApp`] sends it once, to the peers, while the scheduler's legs carry only
//! small figures:
//!
//! ```text
//! scheduler --Dispatch{round r, task}--> worker p
//! worker p: push(task) -> Share s_p
//! worker p --Share{r, s_p}--> every other worker      (one encoding for all of them)
//! worker p, holding s_0 .. s_{W-1}: complete(r, shares) -> partial (small)
//! worker p --PartialResult--> scheduler -> pull -> Commit (small) to every worker
//! worker p: commit (combines the shares it holds)
//! ```
//!
//! Which shares are here and when a round is complete is the sans-I/O
//! [`ShareBoard`]'s (a share must also come from the node of the worker it names); the actor answers the scheduler's ask through a oneshot completed
//! when the last share arrives (it never blocks). A push that needs no exchange
//! ([`Pushed::Done`]) answers at once. The scheduler side is the star loop
//! ([`super::run_scheduler`]) unchanged. One scheduler drives exchange workers (rounds
//! are numbered per scheduler).

use super::star::{restore_star_state, save_star_state};
use super::{
    Commit, Dispatch, PartialResult, RestoreRoundState, SaveRoundState, SavedRoundState, Share,
};
use crate::core::StradsModelError;
use crate::core::app::{ExchangeApp, ExchangePush, Pushed};
use crate::core::exchange::ShareBoard;
use actix::prelude::*;
use futures::channel::oneshot;
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::{HandlerError, NodeError};
use std::collections::BTreeMap;
use std::marker::PhantomData;

type ReplySender<A> = oneshot::Sender<Result<PartialResult<A>, HandlerError>>;

/// A worker actor of an [`ExchangeApp`]: accepts [`Dispatch`], [`Commit`], [`Share`] and
/// the checkpoint messages.
pub struct ExchangeWorker<A: ExchangeApp, W: ExchangePush<A>> {
    index: u32,
    logic: W,
    /// The other workers' indices and, in the same order, their share addresses.
    peer_indices: Vec<u32>,
    peer_refs: Vec<ActorRef<Share<A>>>,
    /// Boxed: the app's types need not be `Unpin` (actors must be).
    board: Box<ShareBoard<A::Share>>,
    /// Asks of rounds whose shares are not all here yet.
    waiting: BTreeMap<u64, ReplySender<A>>,
    failed: Option<String>,
    _app: PhantomData<fn() -> A>,
}

impl<A: ExchangeApp, W: ExchangePush<A>> ExchangeWorker<A, W> {
    /// Worker `index` of `workers`; `peers` are the other workers' share addresses with
    /// their indices.
    pub fn new(
        index: u32,
        workers: usize,
        peers: Vec<(u32, ActorRef<Share<A>>)>,
        logic: W,
    ) -> Result<Self, StradsModelError> {
        let board = Box::new(ShareBoard::new(index as usize, workers)?);
        if peers.len() + 1 != workers || peers.iter().any(|(i, _)| *i == index) {
            return Err(StradsModelError::InvalidConfig(format!(
                "worker {index} of {workers} with {} peers",
                peers.len()
            )));
        }
        let (peer_indices, peer_refs) = peers.into_iter().unzip();
        Ok(ExchangeWorker {
            index,
            logic,
            peer_indices,
            peer_refs,
            board,
            waiting: BTreeMap::new(),
            failed: None,
            _app: PhantomData,
        })
    }

    /// Poisons the worker: every waiting ask and every later one fails with `reason`.
    fn fail(&mut self, reason: String) {
        tracing::error!(worker = self.index, %reason, "exchange worker failed");
        for (_, reply) in std::mem::take(&mut self.waiting) {
            let _ = reply.send(Err(HandlerError::new(reason.clone())));
        }
        self.failed = Some(reason);
    }

    /// The partial of `round` from every worker's share.
    fn complete(
        &mut self,
        round: u64,
        shares: Vec<A::Share>,
    ) -> Result<PartialResult<A>, HandlerError> {
        let partial = self
            .logic
            .complete(round, shares)
            .map_err(|e| HandlerError::new(format!("worker {} complete: {e}", self.index)))?;
        tracing::trace!(round, worker = self.index, "strads push done");
        Ok(PartialResult {
            round,
            worker: self.index,
            partial,
        })
    }

    /// Pushes `task`; the answer now, or `None` when it waits for the peers' shares.
    fn push(
        &mut self,
        round: u64,
        task: &A::Task,
        priority: petrel_messages::Priority,
    ) -> Result<Option<PartialResult<A>>, HandlerError> {
        let index = self.index;
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            HandlerError::new(format!("worker {index} {what}: {e}"))
        };
        let share = match self
            .logic
            .push(round, task)
            .map_err(|e| failed("push", &e))?
        {
            Pushed::Done(partial) => {
                tracing::trace!(round, worker = index, "strads push done");
                return Ok(Some(PartialResult {
                    round,
                    worker: index,
                    partial,
                }));
            }
            Pushed::Share(share) => share,
        };
        // The share is encoded once for every peer and kept, not copied.
        let msg = Share::<A> {
            round,
            from: index,
            share,
        };
        for (peer, sent) in
            self.peer_indices
                .iter()
                .zip(ActorRef::tell_each(&self.peer_refs, &msg, priority))
        {
            sent.map_err(|e| failed(&format!("share of round {round} to worker {peer}"), &e))?;
        }
        let share = msg.share;
        tracing::trace!(round, worker = index, "strads share sent");
        match self
            .board
            .own(round, share)
            .map_err(|e| failed("exchange", &e))?
        {
            Some(shares) => self.complete(round, shares).map(Some),
            None => Ok(None),
        }
    }
}

impl<A: ExchangeApp, W: ExchangePush<A>> Actor for ExchangeWorker<A, W> {
    type Context = Context<Self>;
}

impl<A: ExchangeApp, W: ExchangePush<A>> Handler<Msg<Dispatch<A>>> for ExchangeWorker<A, W> {
    type Result = ResponseFuture<Result<PartialResult<A>, HandlerError>>;

    fn handle(&mut self, msg: Msg<Dispatch<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        if let Some(e) = &self.failed {
            let e = HandlerError::new(format!("worker {} failed earlier: {e}", self.index));
            return Box::pin(async move { Err(e) });
        }
        let Dispatch { round, task, .. } = msg.body;
        tracing::trace!(round, worker = self.index, "strads dispatch arrived");
        let answer = match self.push(round, &task, msg.priority) {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                let (tx, rx) = oneshot::channel();
                self.waiting.insert(round, tx);
                let index = self.index;
                return Box::pin(async move {
                    rx.await.map_err(|_| {
                        HandlerError::new(format!(
                            "worker {index} dropped the dispatch of round {round}"
                        ))
                    })?
                });
            }
            Err(e) => {
                self.fail(e.to_string());
                return Box::pin(async move { Err(e) });
            }
        };
        Box::pin(async move { Ok(answer) })
    }
}

impl<A: ExchangeApp, W: ExchangePush<A>> Handler<Msg<Share<A>>> for ExchangeWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Share<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        if self.failed.is_some() {
            return Ok(());
        }
        let Share { round, from, share } = msg.body;
        tracing::trace!(round, worker = self.index, from, "strads share arrived");
        // The transport authenticated the sending node: it must be the worker it names.
        let claimed = self.peer_indices.iter().position(|i| *i == from);
        let offered = match (msg.from, claimed) {
            (Some(node), Some(k)) if self.peer_refs[k].id().node != node => {
                Err(StradsModelError::protocol(format!(
                    "a share of round {round} from node {node} claims worker {from}"
                )))
            }
            _ => self.board.offer(round, from as usize, share),
        };
        let shares = match offered {
            Ok(Some(shares)) => shares,
            Ok(None) => return Ok(()),
            Err(e) => {
                let reason = format!("worker {} exchange: {e}", self.index);
                self.fail(reason.clone());
                return Err(HandlerError::new(reason));
            }
        };
        // Complete: this worker's own share is in, so its ask is waiting.
        let Some(reply) = self.waiting.remove(&round) else {
            let reason = format!("worker {}: round {round} complete with no ask", self.index);
            self.fail(reason.clone());
            return Err(HandlerError::new(reason));
        };
        match self.complete(round, shares) {
            Ok(answer) => {
                let _ = reply.send(Ok(answer));
            }
            Err(e) => {
                let _ = reply.send(Err(HandlerError::new(e.to_string())));
                self.fail(e.to_string());
            }
        }
        Ok(())
    }
}

impl<A: ExchangeApp, W: ExchangePush<A>> Handler<Msg<Commit<A>>> for ExchangeWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Commit<A>>, _ctx: &mut Context<Self>) -> Self::Result {
        if self.failed.is_some() {
            return Ok(());
        }
        let Commit { round, commit, .. } = msg.body;
        tracing::trace!(round, worker = self.index, "strads commit arrived");
        if let Err(e) = self.logic.commit(round, &commit) {
            self.fail(format!("commit of round {round}: {e}"));
        }
        Ok(())
    }
}

impl<A: ExchangeApp, W: ExchangePush<A>> Handler<Msg<SaveRoundState>> for ExchangeWorker<A, W> {
    type Result = Result<SavedRoundState, HandlerError>;

    fn handle(&mut self, msg: Msg<SaveRoundState>, _ctx: &mut Context<Self>) -> Self::Result {
        let waiting = self.board.waiting();
        let state = match (&self.failed, waiting) {
            (Some(e), _) => Err(format!("failed earlier: {e}")),
            (None, 0) => self.logic.snapshot_state().map_err(|e| e.to_string()),
            (None, n) => Err(format!("{n} shares still waiting at a drain point")),
        };
        save_star_state(self.index, state, &msg.body)
    }
}

impl<A: ExchangeApp, W: ExchangePush<A>> Handler<Msg<RestoreRoundState>> for ExchangeWorker<A, W> {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<RestoreRoundState>, _ctx: &mut Context<Self>) -> Self::Result {
        let index = self.index;
        if let Some(e) = &self.failed {
            return Err(HandlerError::new(format!(
                "worker {index} restore: failed earlier: {e}"
            )));
        }
        let logic = &mut self.logic;
        restore_star_state(index, &msg.body, |state| logic.restore_state(state))?;
        self.board.clear(msg.body.round);
        Ok(())
    }
}

/// Starts exchange worker `index` of `workers` (node names, in worker order) and
/// registers it under `name` for its message types (rounds, shares and checkpoints).
pub fn start_exchange_worker<A: ExchangeApp, W: ExchangePush<A>>(
    node: &petrel_actors::Node,
    name: &str,
    index: u32,
    workers: &[String],
    logic: W,
) -> Result<Addr<ExchangeWorker<A, W>>, super::StradsRunError> {
    let peers = (0u32..)
        .zip(workers)
        .filter(|(i, _)| *i != index)
        .map(|(i, n)| node.actor_at::<Share<A>>(n, name).map(|r| (i, r)))
        .collect::<Result<Vec<_>, NodeError>>()?;
    let worker = ExchangeWorker::<A, W>::new(index, workers.len(), peers, logic)
        .map_err(super::StradsRunError::App)?;
    let addr = worker.start();
    node.register(name, addr.clone())?
        .accept::<Dispatch<A>>()
        .accept::<Commit<A>>()
        .accept::<Share<A>>()
        .accept::<SaveRoundState>()
        .accept::<RestoreRoundState>();
    Ok(addr)
}
