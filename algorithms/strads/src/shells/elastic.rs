//! The shells of a star job whose workers join and leave while it runs: the scheduler's
//! roster inbox (a worker announces itself once its half is ready, or once it was asked
//! to leave: [`RosterNotice`]; the starting workers' notices take the place of the ready
//! barrier, which a joiner arriving during start-up would hold up), the scheduler loop's
//! side of a change
//! ([`ElasticWorkers`], decisions in [`Roster`]) and the worker's release (a leaver that
//! holds no work after a change's commit may go). A worker that died (`on_node_death =
//! "leave"`) is lost: the rounds in flight are given up and its share is dealt to the
//! others (`departed` tells a death from a failure).

use crate::core::app::{Schedule, Step, StradsApp};
use crate::core::pipeline::PipelineCore;
use crate::core::roster::{Reshape, Roster};
use crate::error::StradsError;
use actix::prelude::*;
use petrel_actors::address::Msg;
use petrel_actors::error::{AskError, HandlerError, NodeError};
use petrel_actors::{Node, NodeContext, Settings};
use petrel_messages::RemoteMessage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The actor on the scheduler's node that takes [`RosterNotice`]s.
pub const ROSTER_ACTOR: &str = "strads-roster";

/// Worker -> scheduler: `worker` is ready to join (`leaving = false`; its half is built and
/// its actor started) or was asked to leave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RosterNotice {
    /// The worker's node.
    pub worker: String,
    /// Asked to leave, rather than ready.
    pub leaving: bool,
    /// The digest of the data it loaded (compared with the scheduler's).
    pub digest: Option<u64>,
}

impl RemoteMessage for RosterNotice {
    const TYPE_NAME: &'static str = "strads.roster_notice";
    type Reply = ();
}

type Inbox = Arc<Mutex<Vec<RosterNotice>>>;

struct RosterInbox(Inbox);

impl Actor for RosterInbox {
    type Context = Context<Self>;
}

impl Handler<Msg<RosterNotice>> for RosterInbox {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<RosterNotice>, _: &mut Context<Self>) -> Self::Result {
        tracing::info!(worker = %msg.body.worker, leaving = msg.body.leaving, "roster notice");
        self.0
            .lock()
            .map_err(|_| HandlerError::new("roster inbox poisoned"))?
            .push(msg.body);
        Ok(())
    }
}

/// The nodes running `role` that the job starts with (standby nodes join later), in
/// cluster order: every node computes the same list.
pub fn starting_workers(settings: &Settings, role: &str) -> Vec<String> {
    settings
        .nodes
        .iter()
        .filter(|n| !n.standby && n.roles.iter().any(|r| r == role))
        .map(|n| n.name.clone())
        .collect()
}

/// The scheduler loop's side of the changes: the roster, the notices received, and the
/// change whose round is in flight.
pub struct ElasticWorkers {
    ctx: NodeContext,
    role: &'static str,
    roster: Roster,
    inbox: Inbox,
    in_flight: Option<(u64, Reshape)>,
    /// The workers the rounds go to, in worker order (a change's round goes to its
    /// leavers too).
    sent_to: Vec<String>,
    changes: u64,
    /// Workers that announced themselves ready.
    ready: BTreeSet<String>,
    /// The scheduler's data digest, once its half is built.
    digest: Option<u64>,
}

impl ElasticWorkers {
    /// Registers the roster inbox on the scheduler's node (first thing, so the workers
    /// reach it early) for the job starting on `workers` of `role`.
    pub fn start(
        ctx: &NodeContext,
        role: &'static str,
        workers: Vec<String>,
    ) -> Result<Self, StradsError> {
        let inbox = Inbox::default();
        ctx.node
            .register(ROSTER_ACTOR, RosterInbox(inbox.clone()).start())?
            .accept::<RosterNotice>();
        Ok(ElasticWorkers {
            ctx: ctx.clone(),
            role,
            sent_to: workers.clone(),
            roster: Roster::new(workers),
            inbox,
            in_flight: None,
            changes: 0,
            ready: BTreeSet::new(),
            digest: None,
        })
    }

    /// Waits until every starting worker announced itself ready with data of `digest`
    /// (the scheduler's), at most `timeout`.
    pub async fn starting_workers_ready(
        &mut self,
        digest: Option<u64>,
        timeout: Duration,
    ) -> Result<(), StradsError> {
        self.digest = digest;
        let deadline = Instant::now() + timeout;
        loop {
            self.take_notices()?;
            let missing: Vec<&String> = (self.roster.workers().iter())
                .filter(|w| !self.ready.contains(*w))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(NodeError::Config(format!(
                    "workers {missing:?} not ready after {timeout:?}"
                ))
                .into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Takes the notices received: a worker whose data differs from the scheduler's fails
    /// the job, as at the ready barrier.
    fn take_notices(&mut self) -> Result<(), StradsError> {
        let notices = match self.inbox.lock() {
            Ok(mut inbox) => std::mem::take(&mut *inbox),
            Err(_) => return Err(NodeError::Config("roster inbox poisoned".into()).into()),
        };
        for n in notices {
            if let (Some(mine), Some(theirs)) = (self.digest, n.digest)
                && mine != theirs
            {
                return Err(NodeError::Config(format!(
                    "worker {} loaded other data than the scheduler (digest {theirs:#018x}, not {mine:#018x})",
                    n.worker
                ))
                .into());
            }
            if !n.leaving {
                self.ready.insert(n.worker.clone());
            }
            self.roster.announce(n.worker, n.leaving);
        }
        Ok(())
    }

    /// The node the worker actors are resolved on.
    pub(crate) fn node(&self) -> &Node {
        &self.ctx.node
    }

    /// The worker actors' name (the worker role's).
    pub(crate) fn actor(&self) -> &str {
        self.role
    }

    /// Whether a change waits for a round boundary with nothing in flight. A worker that
    /// is no member any more died (a leaver is a member until its change committed).
    pub(crate) fn pending(&mut self) -> Result<bool, StradsError> {
        self.take_notices()?;
        let members = self.ctx.members_with_role(self.role);
        let dead: Vec<String> = (self.roster.workers().iter())
            .filter(|w| !members.contains(w))
            .cloned()
            .collect();
        for w in dead {
            if self.roster.lose(&w) {
                tracing::warn!(worker = %w, "strads worker died; its rows go to the others");
            }
        }
        Ok(self.in_flight.is_none() && self.roster.pending())
    }

    /// The change to make now (nothing in flight), against the current members; an error
    /// when workers died and none is left to take their work.
    pub(crate) fn reshape(&mut self) -> Result<Option<Reshape>, StradsError> {
        let members = self.ctx.members_with_role(self.role);
        let change = self.roster.reshape(&members);
        match self.roster.stranded() {
            Some(dead) if change.is_none() => Err(NodeError::Config(format!(
                "workers {dead:?} died and no worker is left to take their rows"
            ))
            .into()),
            _ => Ok(change),
        }
    }

    /// The change's round `round` was dispatched.
    pub(crate) fn dispatched(&mut self, round: u64, change: Reshape) {
        self.sent_to.clone_from(&change.dealt);
        self.in_flight = Some((round, change));
    }

    /// `error` failed a round: the worker it names, when it died (it is then lost).
    pub(crate) fn died(&mut self, error: &StradsError) -> Option<String> {
        let members = self.ctx.members_with_role(self.role);
        let dead = departed(error, &self.sent_to, &members)?;
        if self.roster.lose(&dead) {
            tracing::warn!(worker = %dead, %error, "strads worker died; its rows go to the others");
        }
        Some(dead)
    }

    /// The rounds in flight were given up: a change among them did not happen.
    pub(crate) fn abandoned(&mut self) {
        self.in_flight = None;
        self.sent_to = self.roster.workers().to_vec();
    }

    /// Round `round` committed: the workers after it, if it was a change's round.
    pub(crate) fn committed(&mut self, round: u64) -> Option<Vec<String>> {
        if self.in_flight.as_ref().is_none_or(|(r, _)| *r != round) {
            return None;
        }
        let (_, change) = self.in_flight.take()?;
        self.roster.adopt(&change);
        self.sent_to = self.roster.workers().to_vec();
        self.changes += 1;
        tracing::info!(
            round,
            workers = ?change.staying(),
            joined = ?change.joining(),
            left = ?change.leaving(),
            "strads workers changed"
        );
        Some(self.roster.workers().to_vec())
    }

    /// The changes made so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }
}

/// The app's round for `change`; a change that loses dead workers must be made (their
/// rows have no other owner).
pub(crate) fn change_step<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    round: u64,
    change: &Reshape,
) -> Result<Option<Step<A::Task>>, StradsError> {
    match app.reshape(round, change).map_err(StradsError::Pull)? {
        None if !change.lost.is_empty() => Err(NodeError::Config(format!(
            "round {round}: workers {:?} died and the app takes no change now",
            change.lost
        ))
        .into()),
        step => Ok(step),
    }
}

/// A round failed with `error`. In an elastic job whose worker died, the rounds in flight
/// are given up (`core` and the app forget them; the caller drops their futures) and the
/// change that deals the dead worker's rows to the others comes next; any other failure
/// is the job's.
pub(crate) fn give_up_rounds<A: StradsApp, S: Schedule<A>>(
    app: &mut S,
    core: &mut PipelineCore,
    elastic: Option<&mut ElasticWorkers>,
    error: StradsError,
) -> Result<(), StradsError> {
    let Some(el) = elastic else {
        return Err(error);
    };
    if el.died(&error).is_none() {
        return Err(error);
    }
    let rounds = core.abandon();
    tracing::info!(?rounds, "rounds given up; redone after the change");
    app.lost(&rounds).map_err(StradsError::Pull)?;
    el.abandoned();
    Ok(())
}

/// The worker (of `sent_to`, in worker order) a failed request went to, when it is gone
/// from the cluster (`members` of the worker role): it left before answering, which in
/// a running job means it died (`on_node_death = "leave"`). Any other failure is `None`:
/// the job's.
pub(crate) fn departed(
    error: &StradsError,
    sent_to: &[String],
    members: &[String],
) -> Option<String> {
    let (StradsError::Worker { worker, source, .. } | StradsError::Commit { worker, source, .. }) =
        error
    else {
        return None;
    };
    let name = sent_to.get(*worker)?;
    let left = matches!(source, AskError::PeerLeft { name: n, .. } if n == name);
    (left || !members.contains(name)).then(|| name.clone())
}

/// A worker's way out: once it was asked to leave and holds no work after a commit, it
/// fires `release` (its role then leaves the cluster).
pub(crate) struct WorkerExit {
    pub(crate) node: Node,
    pub(crate) release: Option<futures::channel::oneshot::Sender<()>>,
}

impl WorkerExit {
    /// After a commit: releases the worker when it was asked to leave and holds no work.
    pub(crate) fn after_commit(&mut self, holds_work: bool) {
        if !holds_work
            && self.node.is_leave_requested()
            && let Some(release) = self.release.take()
        {
            let _ = release.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::roster::tests::names;

    #[test]
    fn a_request_to_a_worker_that_left_is_a_death_and_other_failures_are_the_jobs() {
        let sent_to = names(&["w0", "w1", "w2"]);
        let left = |name: &str| AskError::PeerLeft {
            name: name.into(),
            actor: "worker".into(),
            epoch: 3,
        };
        let timeout = || AskError::Timeout {
            actor: "worker".into(),
            timeout: Duration::from_secs(1),
        };
        let failed = |worker, source| StradsError::Worker {
            round: 9,
            worker,
            source,
        };
        let members = names(&["w0", "w2"]);
        let all = names(&["w0", "w1", "w2"]);
        // The membership already lost it, or the request failed because it left.
        assert_eq!(
            departed(&failed(1, timeout()), &sent_to, &members),
            Some("w1".into())
        );
        assert_eq!(
            departed(&failed(1, left("w1")), &sent_to, &all),
            Some("w1".into())
        );
        let commit = StradsError::Commit {
            round: 9,
            worker: 1,
            source: left("w1"),
        };
        assert_eq!(departed(&commit, &sent_to, &members), Some("w1".into()));
        // A member that timed out, an index outside the workers, another error: failures.
        assert_eq!(departed(&failed(0, timeout()), &sent_to, &members), None);
        assert_eq!(departed(&failed(5, left("w5")), &sent_to, &members), None);
        assert_eq!(
            departed(&StradsError::EmptyWorkerSet, &sent_to, &members),
            None
        );
    }
}
