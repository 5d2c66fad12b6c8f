//! The coordinator: membership, heartbeats, failure detection and barriers.
//! `ClusterCore` (`core.rs`) decides; the [`Coordinator`] actor on one node and a
//! [`NodeAgent`] on every node are thin shells around it:
//!
//! - nodes `Join`, answered once all joined; a node whose join times out asks `JoinStatus`;
//! - nodes and coordinator `Heartbeat` each other every interval;
//! - a node silent for `failure_timeout` is declared dead (`PeerDown` to every node);
//! - barriers complete when every live member entered, and fail if a member dies;
//! - once formed, a standby node may `Join` and a member may `Leave`: each change is a
//!   new epoch, sent to every member as a `MembershipView`.
//!
//! Liveness does not depend on the node's own thread, where roles compute: heartbeats go
//! from the transport's runtime and any arriving frame counts as a sign of life
//! ([`petrel_net::Net::last_heard`]). With `[net] threads = 0` this holds only for
//! handlers that return in time.

mod agent;
mod core;

pub use self::agent::{Joined, NodeAgent};

pub(crate) use self::core::{ClusterCore, FINISH_BARRIER, MembershipError, Outcome, check_claim};

use crate::address::Msg;
use crate::error::{HandlerError, NodeError};
use crate::node::Node;
use actix::prelude::*;
use petrel_messages::runtime::{
    BarrierEnter, BarrierRefused, BarrierReleased, BarrierReply, DrainAndLeave, Heartbeat, Join,
    JoinAck, JoinProgress, JoinStatus, Leave, LeaveAck, Member, PeerDown, Shutdown,
};
use petrel_messages::{ActorId, NodeId, Priority, RemoteMessage};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Actor name of the coordinator on its node.
pub const COORDINATOR_ACTOR: &str = "petrel.coordinator";
/// Actor name of every node's [`NodeAgent`].
pub const AGENT_ACTOR: &str = petrel_messages::runtime::NODE_ACTOR;

type Responder<T> = futures::channel::oneshot::Sender<Result<T, MembershipError>>;

/// The coordinator actor (one per cluster).
pub struct Coordinator {
    node: Node,
    core: ClusterCore<WaiterSlot>,
    heartbeat_interval: Duration,
    /// The live members, as the heartbeat task on the transport's runtime reads them.
    beat_to: std::sync::Arc<std::sync::Mutex<Vec<NodeId>>>,
    /// Members that reported their own failure: they are leaving and need no notice.
    leaving: std::collections::BTreeSet<NodeId>,
    /// The members a scale plan asks to leave, with when after the cluster formed.
    removals: Vec<(Duration, NodeId)>,
    /// A dead member counts as having left (`on_node_death = "leave"`), not as a failure.
    death_is_leave: bool,
}

/// Join and barrier waiters share the core's waiter type.
pub(crate) enum WaiterSlot {
    /// A node waiting for the cluster to form.
    Join(Responder<Vec<Member>>),
    /// A node waiting at a barrier.
    Barrier(Responder<BarrierReleased>),
}

impl Coordinator {
    /// A coordinator expecting `expected` (id to name), heartbeating every
    /// `heartbeat_interval` and declaring a node silent for `failure_timeout` dead.
    pub fn new(
        node: Node,
        expected: BTreeMap<NodeId, String>,
        standby: Vec<NodeId>,
        heartbeat_interval: Duration,
        failure_timeout: Duration,
    ) -> Self {
        Self {
            node,
            core: ClusterCore::new(expected, failure_timeout).with_standby(standby),
            heartbeat_interval,
            beat_to: Default::default(),
            leaving: Default::default(),
            removals: Vec::new(),
            death_is_leave: false,
        }
    }

    /// A member found dead leaves the cluster instead of failing the run.
    pub fn with_death_as_leave(mut self, death_is_leave: bool) -> Self {
        self.death_is_leave = death_is_leave;
        self
    }

    /// Asks each of these members to drain and leave at its time after the cluster formed.
    pub fn with_removals(mut self, removals: Vec<(Duration, NodeId)>) -> Self {
        self.removals = removals;
        self
    }

    /// Starts the timers of the planned removals (once, when the cluster forms).
    fn schedule_removals(&mut self, ctx: &mut Context<Self>) {
        for (at, node) in std::mem::take(&mut self.removals) {
            ctx.run_later(at, move |act, _| {
                let name = act.core.name(node);
                tracing::info!(node = %name, "scale plan: asking the node to drain and leave");
                let ask = DrainAndLeave {
                    reason: format!("the scale plan removes {name}"),
                };
                act.node.tell_control(node, AGENT_ACTOR, ask);
            });
        }
    }

    fn settle_join(out: Outcome<WaiterSlot, Vec<Member>>) {
        for (w, r) in out {
            if let WaiterSlot::Join(tx) = w {
                let _ = tx.send(r);
            }
        }
    }

    fn settle_barrier(out: Outcome<WaiterSlot, BarrierReleased>) {
        for (w, r) in out {
            if let WaiterSlot::Barrier(tx) = w {
                let _ = tx.send(r);
            }
        }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        // Frames stamped by the transport count as heartbeats; this node is alive.
        for peer in self.core.alive() {
            if let Some(heard) = self.node.net().last_heard(peer) {
                self.core.heartbeat(peer, heard);
            }
        }
        self.core.heartbeat(self.node.id(), now);
        for dead in self.core.tick(now) {
            let name = self.core.name(dead);
            let timeout = self.core.failure_timeout();
            let mut reason = format!("no heartbeat from {name} for {timeout:?}");
            let disconnected = self.node.disconnected_peers().unwrap_or_default();
            if disconnected.split(", ").any(|n| n == name) {
                reason.push_str(&format!(
                    "; {} had disconnected it for frames that held inbound budget without progressing",
                    self.node.name()
                ));
            }
            if self.death_is_leave
                && let Ok((epoch, released)) = self.core.leave(dead)
            {
                tracing::warn!(node = %name, epoch, %reason, "member died; the job carries on without it (on_node_death = leave)");
                Self::settle_barrier(released);
                self.broadcast_view();
                continue;
            }
            Self::settle_barrier(self.core.mark_dead(dead));
            self.node.mark_down(dead, &reason);
            for peer in self.core.alive() {
                if peer != self.node.id() {
                    let down = PeerDown {
                        node: dead,
                        name: name.clone(),
                        reason: reason.clone(),
                    };
                    self.node.tell_control(peer, AGENT_ACTOR, down);
                }
            }
        }
        self.refresh_beat_to();
    }

    /// The coordinator's own heartbeat goes to every live member but this node, so nodes
    /// notice a dead coordinator.
    fn refresh_beat_to(&self) {
        let me = self.node.id();
        if let Ok(mut beat_to) = self.beat_to.lock() {
            *beat_to = self.core.alive().into_iter().filter(|&n| n != me).collect();
        }
    }

    /// Sends the current membership to every live member, this node's agent included.
    fn broadcast_view(&self) {
        let view = self.core.view();
        tracing::info!(
            epoch = view.epoch,
            members = view.members.len(),
            "membership changed"
        );
        for peer in self.core.alive() {
            self.node.tell_control(peer, AGENT_ACTOR, view.clone());
        }
    }

    /// Asks every live node to shut down (`failed_node`: the run failed there).
    pub fn broadcast_shutdown(&self, reason: &str, failed_node: Option<&str>) {
        for peer in self.core.alive() {
            let notice = Shutdown {
                reason: reason.to_string(),
                failed_node: failed_node.map(str::to_string),
            };
            self.node.tell_control(peer, AGENT_ACTOR, notice);
        }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.heartbeat_interval, |act, _| act.tick());
        let node = self.node.clone();
        let beat_to = self.beat_to.clone();
        let targets = move || beat_to.lock().map(|b| b.clone()).unwrap_or_default();
        self.node.net().handle().spawn(heartbeat_task(
            node,
            targets,
            AGENT_ACTOR,
            self.heartbeat_interval,
        ));
    }
}

/// Sends a `Heartbeat` to the `actor` of every node `targets()` names, every `interval`,
/// from the transport's runtime (so a busy node keeps beating), until shutdown.
async fn heartbeat_task(
    node: Node,
    targets: impl Fn() -> Vec<NodeId> + Send + 'static,
    actor: &'static str,
    interval: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u64;
    loop {
        tick.tick().await;
        if node.net().is_closed() {
            return;
        }
        seq += 1;
        for peer in targets() {
            if !node.is_down(peer) {
                let beat = Heartbeat {
                    node: node.id(),
                    seq,
                };
                node.tell_control(peer, actor, beat);
            }
        }
    }
}

impl Handler<Msg<Join>> for Coordinator {
    type Result = ResponseFuture<Result<JoinAck, HandlerError>>;

    fn handle(&mut self, msg: Msg<Join>, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = check_claim(msg.from, msg.body.node) {
            tracing::warn!(error = %e, name = %msg.body.name, "join refused");
            return Box::pin(async move { Err(HandlerError(e.to_string())) });
        }
        let (tx, rx) = futures::channel::oneshot::channel();
        tracing::debug!(node = %msg.body.name, "join");
        let before = self.core.epoch();
        let was_formed = self.core.is_formed();
        Self::settle_join(
            self.core
                .join(msg.body, WaiterSlot::Join(tx), Instant::now()),
        );
        let epoch = self.core.epoch();
        if epoch != before {
            self.broadcast_view();
        }
        if !was_formed && self.core.is_formed() {
            self.schedule_removals(ctx);
        }
        // From the moment the cluster forms, even if this node's thread is then busy.
        self.refresh_beat_to();
        let interval = self.heartbeat_interval.as_millis() as u64;
        Box::pin(async move {
            match rx.await {
                Ok(Ok(members)) => Ok(JoinAck {
                    members,
                    heartbeat_interval_ms: interval,
                    epoch,
                }),
                Ok(Err(e)) => Err(HandlerError(e.to_string())),
                Err(_) => Err(HandlerError::new("coordinator stopped")),
            }
        })
    }
}

/// Which nodes have not joined, asked by a node whose join timed out.
impl Handler<Msg<JoinStatus>> for Coordinator {
    type Result = Result<JoinProgress, HandlerError>;

    fn handle(&mut self, _: Msg<JoinStatus>, _: &mut Context<Self>) -> Self::Result {
        Ok(JoinProgress {
            missing: self.core.missing(),
        })
    }
}

impl Handler<Msg<Heartbeat>> for Coordinator {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Heartbeat>, _: &mut Context<Self>) -> Self::Result {
        // A member must not keep another (dead) member alive.
        check_claim(msg.from, msg.body.node).map_err(|e| HandlerError(e.to_string()))?;
        self.core.heartbeat(msg.body.node, Instant::now());
        self.node.heard_from(msg.body.node);
        Ok(())
    }
}

impl Handler<Msg<BarrierEnter>> for Coordinator {
    type Result = ResponseFuture<Result<BarrierReply, HandlerError>>;

    fn handle(&mut self, msg: Msg<BarrierEnter>, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = check_claim(msg.from, msg.body.node) {
            return Box::pin(async move { Err(HandlerError(e.to_string())) });
        }
        let (tx, rx) = futures::channel::oneshot::channel();
        Self::settle_barrier(self.core.enter_barrier(
            &msg.body.name,
            msg.body.node,
            msg.body.agree_on,
            WaiterSlot::Barrier(tx),
        ));
        Box::pin(async move {
            let outcome = rx.await.unwrap_or(Err(MembershipError::Stopped));
            Ok(outcome.map_err(|e| BarrierRefused {
                reason: e.to_string(),
            }))
        })
    }
}

/// A member leaves after draining: a new epoch without it, sent to every member.
impl Handler<Msg<Leave>> for Coordinator {
    type Result = Result<LeaveAck, HandlerError>;

    fn handle(&mut self, msg: Msg<Leave>, _: &mut Context<Self>) -> Self::Result {
        check_claim(msg.from, msg.body.node).map_err(|e| HandlerError(e.to_string()))?;
        let name = self.core.name(msg.body.node);
        let (epoch, released) = self
            .core
            .leave(msg.body.node)
            .map_err(|e| HandlerError(e.to_string()))?;
        tracing::info!(node = %name, epoch, "node left the cluster");
        Self::settle_barrier(released);
        self.refresh_beat_to();
        self.broadcast_view();
        Ok(LeaveAck { epoch })
    }
}

/// Tells the coordinator actor to broadcast `Shutdown`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BroadcastShutdown {
    /// Why the cluster stops.
    pub reason: String,
    /// The node whose failure ends the run, if it failed.
    pub failed_node: Option<String>,
    /// Resolve only once every live member but this node and the failed one has the notice
    /// (bounded by this), so the coordinator's node leaves after its last messages are
    /// delivered. `None`: resolve at once.
    pub acknowledged_within: Option<Duration>,
}

impl Handler<BroadcastShutdown> for Coordinator {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, msg: BroadcastShutdown, _: &mut Context<Self>) -> Self::Result {
        if let Some(failed) = &msg.failed_node {
            Self::settle_join(self.core.fail_run(failed, &msg.reason));
        }
        self.broadcast_shutdown(&msg.reason, msg.failed_node.as_deref());
        let Some(within) = msg.acknowledged_within else {
            return Box::pin(async {});
        };
        let me = self.node.id();
        let asks: Vec<_> = self
            .core
            .alive()
            .into_iter()
            .filter(|&peer| {
                peer != me
                    && !self.leaving.contains(&peer)
                    && msg.failed_node.as_deref() != Some(self.core.name(peer).as_str())
            })
            .filter_map(|peer| {
                self.node
                    .actor::<Shutdown>(&ActorId::new(peer, AGENT_ACTOR))
                    .ok()
            })
            .map(|agent| {
                let notice = Shutdown {
                    reason: msg.reason.clone(),
                    failed_node: msg.failed_node.clone(),
                };
                async move {
                    if let Err(e) = agent.ask(notice, Priority::CONTROL, within).await {
                        tracing::debug!(error = %e, "shutdown notice not acknowledged");
                    }
                }
            })
            .collect();
        Box::pin(async move {
            futures::future::join_all(asks).await;
        })
    }
}

/// A node whose run failed tells the coordinator directly: the failure is broadcast and
/// joining nodes are refused with it at once, even before the cluster formed.
impl Handler<Msg<Shutdown>> for Coordinator {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Shutdown>, _: &mut Context<Self>) -> Self::Result {
        if let Some(failed) = &msg.body.failed_node {
            if let Some(from) = msg.from.filter(|&n| self.core.name(n) == *failed) {
                self.leaving.insert(from);
            }
            Self::settle_join(self.core.fail_run(failed, &msg.body.reason));
            self.broadcast_shutdown(&msg.body.reason, Some(failed));
        }
        Ok(())
    }
}

impl Node {
    /// Tells `msg` to `actor` on `peer` at control priority, if it can be addressed.
    pub(crate) fn tell_control<M: RemoteMessage>(&self, peer: NodeId, actor: &str, msg: M) {
        if let Ok(to) = self.actor::<M>(&ActorId::new(peer, actor)) {
            let _ = to.tell(msg, Priority::CONTROL);
        }
    }
    /// Enters a cluster-wide barrier and waits until every live node has entered. Fails if
    /// a node dies meanwhile, or if the coordinator is lost.
    pub async fn barrier(
        &self,
        name: &str,
        coordinator: NodeId,
    ) -> Result<BarrierReleased, NodeError> {
        self.barrier_agreeing(name, coordinator, None).await
    }

    /// [`Node::barrier`], and every node that enters with a value must have entered with
    /// the same one (a digest of the data it loaded): otherwise the barrier fails on every
    /// node, naming who had which.
    pub async fn barrier_agreeing(
        &self,
        name: &str,
        coordinator: NodeId,
        agree_on: Option<u64>,
    ) -> Result<BarrierReleased, NodeError> {
        let c = self.actor::<BarrierEnter>(&ActorId::new(coordinator, COORDINATOR_ACTOR))?;
        let enter = BarrierEnter {
            name: name.to_string(),
            node: self.id(),
            agree_on,
        };
        let reply = c
            .ask(enter, Priority::CONTROL, Duration::from_secs(24 * 3600))
            .await
            .map_err(|source| NodeError::Barrier {
                name: name.to_string(),
                source,
            })?;
        reply.map_err(|source| NodeError::BarrierRefused {
            name: name.to_string(),
            source,
        })
    }
}
