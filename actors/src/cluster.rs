//! Membership, heartbeats, failure detection and barriers.
//!
//! [`ClusterCore`] decides (plain struct, unit-tested); the [`Coordinator`] actor on one node
//! and a [`NodeAgent`] on every node are thin shells around it:
//!
//! - every node asks the coordinator to `Join`; the answer comes when all nodes joined;
//! - every node sends a `Heartbeat` to the coordinator each interval, and the coordinator
//!   sends one to every node, so both sides notice a silent peer;
//! - a node silent for `failure_timeout` is declared dead: the coordinator tells every
//!   node (`PeerDown`), each node fails its pending requests to it and tells subscribers;
//! - barriers complete when every live member entered, and fail if a member dies.

use crate::address::Msg;
use crate::error::{HandlerError, NodeError};
use crate::node::Node;
use actix::prelude::*;
use petrel_messages::runtime::{
    BarrierEnter, BarrierReleased, Heartbeat, Join, JoinAck, Member, PeerDown, Shutdown,
};
use petrel_messages::{ActorId, NodeId, Priority};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

pub const COORDINATOR_ACTOR: &str = "petrel.coordinator";
pub const AGENT_ACTOR: &str = petrel_messages::runtime::NODE_ACTOR;

/// A barrier or join completing (`Ok`) or failing (`Err`) for one waiter.
pub type Outcome<W, T> = Vec<(W, Result<T, String>)>;

struct BarrierState<W> {
    entered: BTreeSet<NodeId>,
    waiters: Vec<W>,
}

/// The coordinator's decisions, free of I/O. `W` is whatever identifies a waiting caller
/// (a reply channel in the actor, a plain value in tests).
pub struct ClusterCore<W> {
    expected: BTreeMap<NodeId, String>,
    joined: BTreeMap<NodeId, Member>,
    join_waiters: Vec<W>,
    last_seen: HashMap<NodeId, Instant>,
    dead: BTreeSet<NodeId>,
    timeout: Duration,
    barriers: HashMap<String, BarrierState<W>>,
}

impl<W> ClusterCore<W> {
    pub fn new(expected: BTreeMap<NodeId, String>, failure_timeout: Duration) -> Self {
        Self {
            expected,
            joined: BTreeMap::new(),
            join_waiters: Vec::new(),
            last_seen: HashMap::new(),
            dead: BTreeSet::new(),
            timeout: failure_timeout,
            barriers: HashMap::new(),
        }
    }

    pub fn is_formed(&self) -> bool {
        self.joined.len() == self.expected.len()
    }

    pub fn members(&self) -> Vec<Member> {
        self.joined.values().cloned().collect()
    }

    pub fn alive(&self) -> Vec<NodeId> {
        self.joined
            .keys()
            .filter(|n| !self.dead.contains(n))
            .copied()
            .collect()
    }

    pub fn name(&self, node: NodeId) -> String {
        self.expected
            .get(&node)
            .cloned()
            .unwrap_or_else(|| node.to_string())
    }

    /// A node joins. Returns the waiters to answer (all of them once the cluster formed).
    pub fn join(&mut self, join: Join, waiter: W, now: Instant) -> Outcome<W, Vec<Member>> {
        match self.expected.get(&join.node) {
            None => {
                return vec![(
                    waiter,
                    Err(format!("{} is not part of this cluster", join.node)),
                )];
            }
            Some(name) if *name != join.name => {
                return vec![(
                    waiter,
                    Err(format!(
                        "{} is expected to be named {name}, not {}",
                        join.node, join.name
                    )),
                )];
            }
            _ => {}
        }
        if self.dead.contains(&join.node) {
            return vec![(
                waiter,
                Err(format!("{} was declared dead and cannot rejoin", join.name)),
            )];
        }
        self.last_seen.insert(join.node, now);
        self.joined.insert(
            join.node,
            Member {
                node: join.node,
                name: join.name,
                roles: join.roles,
            },
        );
        self.join_waiters.push(waiter);
        if !self.is_formed() {
            return Vec::new();
        }
        // Nodes start heartbeating once they hear the cluster formed: the failure clock of
        // every member starts now, not at its join (a slow starter must not make the early
        // joiners look dead).
        for n in self.joined.keys() {
            self.last_seen.insert(*n, now);
        }
        let members = self.members();
        self.join_waiters
            .drain(..)
            .map(|w| (w, Ok(members.clone())))
            .collect()
    }

    pub fn heartbeat(&mut self, node: NodeId, now: Instant) {
        if self.joined.contains_key(&node) && !self.dead.contains(&node) {
            self.last_seen.insert(node, now);
        }
    }

    /// Nodes newly found dead at `now`. Nothing is judged before the cluster formed.
    pub fn tick(&mut self, now: Instant) -> Vec<NodeId> {
        if !self.is_formed() {
            return Vec::new();
        }
        let newly: Vec<NodeId> = self
            .joined
            .keys()
            .filter(|n| !self.dead.contains(n))
            .filter(|n| {
                self.last_seen
                    .get(n)
                    .is_none_or(|t| now.saturating_duration_since(*t) > self.timeout)
            })
            .copied()
            .collect();
        newly
    }

    /// Declares `node` dead; returns the barrier waiters that must fail.
    pub fn mark_dead(&mut self, node: NodeId) -> Outcome<W, BarrierReleased> {
        if !self.dead.insert(node) {
            return Vec::new();
        }
        let name = self.name(node);
        let mut failed = Vec::new();
        for (barrier, state) in self.barriers.drain() {
            for w in state.waiters {
                failed.push((w, Err(format!("barrier {barrier}: node {name} died"))));
            }
        }
        failed
    }

    /// `node` enters barrier `name`; when every live member has entered, all waiters are
    /// released with the participant count.
    pub fn enter_barrier(
        &mut self,
        name: &str,
        node: NodeId,
        waiter: W,
    ) -> Outcome<W, BarrierReleased> {
        if self.dead.contains(&node) || !self.joined.contains_key(&node) {
            return vec![(waiter, Err(format!("{node} is not a live member")))];
        }
        let alive: BTreeSet<NodeId> = self.alive().into_iter().collect();
        let state = self
            .barriers
            .entry(name.to_string())
            .or_insert_with(|| BarrierState {
                entered: BTreeSet::new(),
                waiters: Vec::new(),
            });
        state.entered.insert(node);
        state.waiters.push(waiter);
        if !alive.is_subset(&state.entered) {
            return Vec::new();
        }
        let Some(state) = self.barriers.remove(name) else {
            return Vec::new();
        };
        let released = BarrierReleased {
            name: name.to_string(),
            participants: state.entered.len() as u32,
        };
        state
            .waiters
            .into_iter()
            .map(|w| (w, Ok(released.clone())))
            .collect()
    }
}

type Responder<T> = futures::channel::oneshot::Sender<Result<T, String>>;

/// The coordinator actor (one per cluster).
pub struct Coordinator {
    node: Node,
    core: ClusterCore<WaiterSlot>,
    heartbeat_interval: Duration,
    seq: u64,
}

/// Join and barrier waiters share the core's waiter type.
pub enum WaiterSlot {
    Join(Responder<Vec<Member>>),
    Barrier(Responder<BarrierReleased>),
}

impl Coordinator {
    pub fn new(
        node: Node,
        expected: BTreeMap<NodeId, String>,
        heartbeat_interval: Duration,
        failure_timeout: Duration,
    ) -> Self {
        Self {
            node,
            core: ClusterCore::new(expected, failure_timeout),
            heartbeat_interval,
            seq: 0,
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
        for dead in self.core.tick(now) {
            let name = self.core.name(dead);
            let reason = format!("no heartbeat from {name} for {:?}", self.core.timeout);
            Self::settle_barrier(self.core.mark_dead(dead));
            self.node.mark_down(dead, &reason);
            for peer in self.core.alive() {
                if peer == self.node.id() {
                    continue;
                }
                if let Ok(agent) = self
                    .node
                    .actor::<PeerDown>(&ActorId::new(peer, AGENT_ACTOR))
                {
                    let _ = agent.tell(
                        PeerDown {
                            node: dead,
                            name: name.clone(),
                            reason: reason.clone(),
                        },
                        Priority::CONTROL,
                    );
                }
            }
        }
        // The coordinator's own heartbeat lets every node notice a dead coordinator.
        self.seq += 1;
        for peer in self.core.alive() {
            if peer == self.node.id() {
                continue;
            }
            if let Ok(agent) = self
                .node
                .actor::<Heartbeat>(&ActorId::new(peer, AGENT_ACTOR))
            {
                let _ = agent.tell(
                    Heartbeat {
                        node: self.node.id(),
                        seq: self.seq,
                    },
                    Priority::CONTROL,
                );
            }
        }
    }

    /// Asks every live node to shut down (`failed_node`: the run failed there).
    pub fn broadcast_shutdown(&self, reason: &str, failed_node: Option<&str>) {
        for peer in self.core.alive() {
            if let Ok(agent) = self
                .node
                .actor::<Shutdown>(&ActorId::new(peer, AGENT_ACTOR))
            {
                let _ = agent.tell(
                    Shutdown {
                        reason: reason.to_string(),
                        failed_node: failed_node.map(str::to_string),
                    },
                    Priority::CONTROL,
                );
            }
        }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.heartbeat_interval, |act, _| act.tick());
    }
}

impl Handler<Msg<Join>> for Coordinator {
    type Result = ResponseFuture<Result<JoinAck, HandlerError>>;

    fn handle(&mut self, msg: Msg<Join>, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = futures::channel::oneshot::channel();
        tracing::info!(node = %msg.body.name, "join");
        Self::settle_join(
            self.core
                .join(msg.body, WaiterSlot::Join(tx), Instant::now()),
        );
        let interval = self.heartbeat_interval.as_millis() as u64;
        Box::pin(async move {
            match rx.await {
                Ok(Ok(members)) => Ok(JoinAck {
                    members,
                    heartbeat_interval_ms: interval,
                }),
                Ok(Err(e)) => Err(HandlerError(e)),
                Err(_) => Err(HandlerError::new("coordinator stopped")),
            }
        })
    }
}

impl Handler<Msg<Heartbeat>> for Coordinator {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<Heartbeat>, _: &mut Context<Self>) -> Self::Result {
        self.core.heartbeat(msg.body.node, Instant::now());
        Ok(())
    }
}

impl Handler<Msg<BarrierEnter>> for Coordinator {
    type Result = ResponseFuture<Result<Result<BarrierReleased, String>, HandlerError>>;

    fn handle(&mut self, msg: Msg<BarrierEnter>, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = futures::channel::oneshot::channel();
        Self::settle_barrier(self.core.enter_barrier(
            &msg.body.name,
            msg.body.node,
            WaiterSlot::Barrier(tx),
        ));
        Box::pin(async move {
            Ok(rx
                .await
                .unwrap_or_else(|_| Err("coordinator stopped".into())))
        })
    }
}

/// Tells the coordinator actor to broadcast `Shutdown`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BroadcastShutdown {
    pub reason: String,
    /// The node whose failure ends the run, if it failed.
    pub failed_node: Option<String>,
}

impl Handler<BroadcastShutdown> for Coordinator {
    type Result = ();
    fn handle(&mut self, msg: BroadcastShutdown, _: &mut Context<Self>) {
        self.broadcast_shutdown(&msg.reason, msg.failed_node.as_deref());
    }
}

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
        self.seq += 1;
        if let Ok(c) = self
            .node
            .actor::<Heartbeat>(&ActorId::new(self.coordinator, COORDINATOR_ACTOR))
        {
            let _ = c.tell(
                Heartbeat {
                    node: self.node.id(),
                    seq: self.seq,
                },
                Priority::CONTROL,
            );
        }
        if self.coordinator != self.node.id()
            && self.last_from_coordinator.elapsed() > self.failure_timeout
        {
            let reason = format!(
                "no heartbeat from the coordinator for {:?}",
                self.failure_timeout
            );
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
    }
}

impl Handler<Msg<Heartbeat>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Heartbeat>, _: &mut Context<Self>) -> Self::Result {
        if msg.body.node == self.coordinator {
            self.last_from_coordinator = Instant::now();
        }
        Ok(())
    }
}

impl Handler<Msg<PeerDown>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<PeerDown>, _: &mut Context<Self>) -> Self::Result {
        self.node.mark_down(msg.body.node, &msg.body.reason);
        Ok(())
    }
}

impl Handler<Msg<Shutdown>> for NodeAgent {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Shutdown>, _: &mut Context<Self>) -> Self::Result {
        tracing::info!(node = %self.node.name(), reason = %msg.body.reason, "shutdown requested");
        self.node
            .announce_shutdown(&msg.body.reason, msg.body.failed_node);
        Ok(())
    }
}

impl Node {
    /// Enters a cluster-wide barrier and waits until every live node has entered. Fails if
    /// a node dies meanwhile, or if the coordinator is lost.
    pub async fn barrier(
        &self,
        name: &str,
        coordinator: NodeId,
    ) -> Result<BarrierReleased, NodeError> {
        let c = self.actor::<BarrierEnter>(&ActorId::new(coordinator, COORDINATOR_ACTOR))?;
        let reply = c
            .ask(
                BarrierEnter {
                    name: name.to_string(),
                    node: self.id(),
                },
                Priority::CONTROL,
                Duration::from_secs(24 * 3600),
            )
            .await
            .map_err(|e| NodeError::Barrier {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        reply.map_err(|reason| NodeError::Barrier {
            name: name.to_string(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core3() -> ClusterCore<u32> {
        let expected = (0..3).map(|i| (NodeId(i), format!("n{i}"))).collect();
        ClusterCore::new(expected, Duration::from_millis(100))
    }

    fn join(i: u32) -> Join {
        Join {
            node: NodeId(i),
            name: format!("n{i}"),
            roles: vec![],
        }
    }

    #[test]
    fn join_completes_when_all_joined() {
        let mut c = core3();
        let t = Instant::now();
        assert!(c.join(join(0), 0, t).is_empty());
        assert!(c.join(join(1), 1, t).is_empty());
        let out = c.join(join(2), 2, t);
        assert_eq!(out.len(), 3);
        assert!(
            out.iter()
                .all(|(_, r)| r.as_ref().map(|m| m.len()) == Ok(3))
        );
        let wrong = c.join(
            Join {
                node: NodeId(1),
                name: "other".into(),
                roles: vec![],
            },
            9,
            t,
        );
        assert!(wrong[0].1.is_err());
        assert!(c.join(join(7), 7, t)[0].1.is_err());
    }

    #[test]
    fn failure_clock_starts_when_the_cluster_formed() {
        let mut c = core3();
        let t0 = Instant::now();
        c.join(join(0), 0, t0);
        // Node 0 waits for the others without heartbeating; it is not judged meanwhile.
        assert!(c.tick(t0 + Duration::from_millis(500)).is_empty());
        c.join(join(1), 1, t0 + Duration::from_millis(600));
        c.join(join(2), 2, t0 + Duration::from_millis(700));
        assert!(c.tick(t0 + Duration::from_millis(750)).is_empty());
        assert_eq!(c.tick(t0 + Duration::from_millis(850)).len(), 3);
    }

    #[test]
    fn silent_node_is_found_dead_and_fails_barriers() {
        let mut c = core3();
        let t0 = Instant::now();
        for i in 0..3 {
            c.join(join(i), i, t0);
        }
        assert!(c.enter_barrier("b", NodeId(0), 10).is_empty());
        let t1 = t0 + Duration::from_millis(80);
        c.heartbeat(NodeId(0), t1);
        c.heartbeat(NodeId(1), t1);
        assert!(c.tick(t1).is_empty());
        let t2 = t0 + Duration::from_millis(150);
        assert_eq!(c.tick(t2), vec![NodeId(2)]);
        let failed = c.mark_dead(NodeId(2));
        assert_eq!(failed.len(), 1);
        assert!(failed[0].1.as_ref().unwrap_err().contains("n2 died"));
        // A barrier among the survivors still works.
        assert!(c.enter_barrier("c", NodeId(0), 11).is_empty());
        let out = c.enter_barrier("c", NodeId(1), 12);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1.as_ref().unwrap().participants, 2);
        assert!(
            c.join(join(2), 2, t2)[0].1.is_err(),
            "dead nodes do not rejoin"
        );
    }
}
