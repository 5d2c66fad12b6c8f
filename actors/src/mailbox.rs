//! A reusable priority mailbox for actix actors (whose mailboxes are FIFO): handlers
//! [`defer`](PriorityInbox::defer) work into a heap drained one item per turn. actix polls
//! the whole mailbox before spawned items, so the backlog is processed highest priority
//! first, FIFO within a priority.

use crate::error::HandlerError;
use actix::prelude::*;
use petrel_messages::{Priority, PriorityQueue};

type Work<A> = Box<dyn FnOnce(&mut A, &mut Context<A>)>;

/// The heap of deferred work of one actor.
pub struct PriorityInbox<A: Actor<Context = Context<A>>> {
    queue: PriorityQueue<Work<A>>,
    drain_scheduled: bool,
}

impl<A: Actor<Context = Context<A>>> Default for PriorityInbox<A> {
    fn default() -> Self {
        Self {
            queue: PriorityQueue::default(),
            drain_scheduled: false,
        }
    }
}

/// Implemented by actors that keep a [`PriorityInbox`].
pub trait PriorityActor: Actor<Context = Context<Self>> {
    /// The actor's inbox.
    fn inbox(&mut self) -> &mut PriorityInbox<Self>;
}

impl<A: PriorityActor> PriorityInbox<A> {
    /// Queues `work` at `priority` and returns a response for the handler to return.
    ///
    /// ```ignore
    /// fn handle(&mut self, msg: Msg<Slice>, ctx: &mut Context<Self>) -> Self::Result {
    ///     PriorityInbox::defer(self, ctx, msg.priority, move |act, _| act.apply(msg.body))
    /// }
    /// ```
    pub fn defer<R, F>(
        act: &mut A,
        ctx: &mut Context<A>,
        priority: Priority,
        work: F,
    ) -> ResponseFuture<Result<R, HandlerError>>
    where
        R: 'static,
        F: FnOnce(&mut A, &mut Context<A>) -> Result<R, HandlerError> + 'static,
    {
        let (tx, rx) = futures::channel::oneshot::channel();
        let inbox = act.inbox();
        inbox.queue.push(
            priority,
            Box::new(move |a, c| {
                let _ = tx.send(work(a, c));
            }),
        );
        Self::schedule(act, ctx);
        let why = "actor stopped before handling the message";
        let stopped = move || Err(HandlerError::new(why));
        Box::pin(async move { rx.await.unwrap_or_else(|_| stopped()) })
    }

    fn schedule(act: &mut A, ctx: &mut Context<A>) {
        let inbox = act.inbox();
        if inbox.drain_scheduled || inbox.queue.is_empty() {
            return;
        }
        inbox.drain_scheduled = true;
        ctx.spawn(
            actix::fut::ready(()).map(|(), act: &mut A, ctx: &mut Context<A>| {
                act.inbox().drain_scheduled = false;
                if let Some((_, work)) = act.inbox().queue.pop() {
                    work(act, ctx);
                }
                // One item per turn, so messages that arrived meanwhile join the heap first.
                Self::schedule(act, ctx);
            }),
        );
    }
}
