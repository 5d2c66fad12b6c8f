//! Every node's runtime endpoint: heartbeats to the coordinator, watching it, and the
//! coordinator's notices (`PeerDown`, `MembershipView`, `DrainAndLeave`, `Shutdown`).

use super::{COORDINATOR_ACTOR, check_claim, heartbeat_task};
use crate::address::Msg;
use crate::error::HandlerError;
use crate::node::Node;
use actix::prelude::*;
use petrel_messages::NodeId;
use petrel_messages::runtime::{DrainAndLeave, Heartbeat, MembershipView, PeerDown, Shutdown};
use std::time::{Duration, Instant};

/// Every node's runtime endpoint: sends heartbeats, watches the coordinator, applies
/// `PeerDown` and `Shutdown`.
pub struct NodeAgent {
    node: Node,
    coordinator: NodeId,
    heartbeat_interval: Duration,
    failure_timeout: Duration,
    last_from_coordinator: Instant,
    seq: u64,
}

impl NodeAgent {
    /// The agent of `node`, watching `coordinator`.
    pub fn new(
        node: Node,
        coordinator: NodeId,
        heartbeat_interval: Duration,
        failure_timeout: Duration,
    ) -> Self {
        Self {
            node,
            coordinator,
            heartbeat_interval,
            failure_timeout,
            last_from_coordinator: Instant::now(),
            seq: 0,
        }
    }

    fn beat(&mut self) {
        // A remote coordinator is beaten to by `heartbeat_task`; a local one hears from
        // this agent (its own thread is the coordinator's).
        if self.coordinator == self.node.id() {
            self.seq += 1;
            let beat = Heartbeat {
                node: self.node.id(),
                seq: self.seq,
            };
            self.node
                .tell_control(self.coordinator, COORDINATOR_ACTOR, beat);
        }
        if let Some(heard) = self.node.net().last_heard(self.coordinator)
            && heard > self.last_from_coordinator
        {
            self.last_from_coordinator = heard;
        }
        if self.coordinator != self.node.id()
            && self.last_from_coordinator.elapsed() > self.failure_timeout
        {
            let timeout = self.failure_timeout;
            let reason = format!("no heartbeat from the coordinator for {timeout:?}");
            self.node.mark_down(self.coordinator, &reason);
        }
    }
}

impl Actor for NodeAgent {
    type Context = Context<Self>;
}

/// Sent by the node after it joined: start heartbeating and watching.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Joined;

impl Handler<Joined> for NodeAgent {
    type Result = ();
    fn handle(&mut self, _: Joined, ctx: &mut Context<Self>) {
        self.last_from_coordinator = Instant::now();
        self.beat();
        ctx.run_interval(self.heartbeat_interval, |act, _| act.beat());
        if self.coordinator != self.node.id() {
            let coordinator = self.coordinator;
            self.node.net().handle().spawn(heartbeat_task(
                self.node.clone(),
                move || vec![coordinator],
                COORDINATOR_ACTOR,
                self.heartbeat_interval,
            ));
        }
    }
}

impl Handler<Msg<Heartbeat>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Heartbeat>, _: &mut Context<Self>) -> Self::Result {
        check_claim(msg.from, msg.body.node).map_err(|e| HandlerError(e.to_string()))?;
        if msg.body.node == self.coordinator {
            self.last_from_coordinator = Instant::now();
        }
        self.node.heard_from(msg.body.node);
        Ok(())
    }
}

impl Handler<Msg<PeerDown>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<PeerDown>, _: &mut Context<Self>) -> Self::Result {
        // Only the coordinator declares members dead.
        check_claim(msg.from, self.coordinator).map_err(|e| HandlerError(e.to_string()))?;
        self.node.mark_down(msg.body.node, &msg.body.reason);
        Ok(())
    }
}

impl Handler<Msg<MembershipView>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<MembershipView>, _: &mut Context<Self>) -> Self::Result {
        // Only the coordinator changes the membership.
        check_claim(msg.from, self.coordinator).map_err(|e| HandlerError(e.to_string()))?;
        self.node.apply_view(msg.body);
        Ok(())
    }
}

impl Handler<Msg<DrainAndLeave>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<DrainAndLeave>, _: &mut Context<Self>) -> Self::Result {
        check_claim(msg.from, self.coordinator).map_err(|e| HandlerError(e.to_string()))?;
        tracing::info!(node = %self.node.name(), reason = %msg.body.reason, "asked to leave");
        self.node.request_leave();
        Ok(())
    }
}

impl Handler<Msg<Shutdown>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Shutdown>, _: &mut Context<Self>) -> Self::Result {
        tracing::debug!(node = %self.node.name(), reason = %msg.body.reason, "shutdown requested");
        self.node
            .announce_shutdown(&msg.body.reason, msg.body.failed_node);
        Ok(())
    }
}
