// Over 600 lines: `Cluster` runs both wirings and a node's whole life, boot to shutdown (joining and ports are in topology/).
//! Compose clusters in code: which nodes exist, which roles run where, and the code of each
//! role. A [`Cluster`] runs every node in one process (one thread and actix System each)
//! or one node per process (`run_node`, used by `petrel node` and `petrel run`).

use crate::coordinator::{
    AGENT_ACTOR, BroadcastShutdown, COORDINATOR_ACTOR, Coordinator, Joined, NodeAgent,
};
use crate::error::{ExpectedNode, NodeError};
use crate::node::{Node, PeerEvent};
use crate::settings::{NodeSpec, Settings, Transport};
use actix::prelude::*;
use futures::future::LocalBoxFuture;
use petrel_messages::runtime::{
    BarrierEnter, DrainAndLeave, Heartbeat, Join, JoinProgress, JoinStatus, Leave, MembershipView,
    PeerDown, Shutdown,
};
use petrel_messages::{ActorId, NodeId, Priority};
use petrel_net::{ClusterCredentials, MemoryHub, Net, PeerAddr};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod join;
mod ports;
use join::{JOIN_STATUS_TIMEOUT, join};
use ports::check_ports_free;
pub use ports::{pick_ports, reserve_ports};

/// Why a role failed: any error, `source()` chain intact ([`crate::error::error_chain`]).
pub type RoleError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a registered role runs: `Ok` when done (services return once started).
pub type RoleFuture = LocalBoxFuture<'static, Result<(), RoleError>>;
type RoleFn = Arc<dyn Fn(NodeContext) -> RoleFuture + Send + Sync>;

/// What a role gets to work with.
#[derive(Clone)]
pub struct NodeContext {
    /// This node.
    pub node: Node,
    /// The cluster's settings.
    pub settings: Arc<Settings>,
    /// This node's entry in the settings.
    pub spec: NodeSpec,
    /// The node that runs the coordinator.
    pub coordinator: NodeId,
}

impl NodeContext {
    /// Waits until every live node reached the same named barrier.
    pub async fn barrier(&self, name: &str) -> Result<(), NodeError> {
        self.node.barrier(name, self.coordinator).await.map(|_| ())
    }

    /// [`NodeContext::barrier`] agreeing on a value ([`Node::barrier_agreeing`]).
    pub async fn barrier_agreeing(&self, name: &str, value: Option<u64>) -> Result<(), NodeError> {
        self.node
            .barrier_agreeing(name, self.coordinator, value)
            .await
            .map(|_| ())
    }

    /// Leaves the running cluster now: the coordinator starts a new membership epoch
    /// without this node and the others carry on. Drain first: what this node sends
    /// afterwards is refused. Roles usually call [`Node::leave_when_done`] instead, and
    /// the node leaves once they all returned.
    pub async fn leave(&self) -> Result<(), NodeError> {
        let c = self
            .node
            .actor::<Leave>(&ActorId::new(self.coordinator, COORDINATOR_ACTOR))?;
        let leave = Leave {
            node: self.node.id(),
        };
        let ack = c
            .ask(leave, Priority::CONTROL, self.node.default_timeout())
            .await
            .map_err(NodeError::Leave)?;
        tracing::info!(node = %self.node.name(), epoch = ack.epoch, "left the cluster");
        Ok(())
    }

    /// Names of the members running `role` now (the settings' nodes before the cluster
    /// formed), in cluster order: standby nodes count once they joined, and nodes that
    /// left do not.
    pub fn members_with_role(&self, role: &str) -> Vec<String> {
        let view = self.node.view();
        if view.members.is_empty() {
            return self.nodes_with_role(role);
        }
        view.members
            .iter()
            .filter(|m| m.roles.iter().any(|r| r == role))
            .map(|m| m.name.clone())
            .collect()
    }

    /// Names of the nodes that run `role`, in cluster order.
    pub fn nodes_with_role(&self, role: &str) -> Vec<String> {
        self.settings
            .nodes
            .iter()
            .filter(|n| n.roles.iter().any(|r| r == role))
            .map(|n| n.name.clone())
            .collect()
    }
}

/// Builds [`Settings`] in code.
pub struct Topology {
    settings: Settings,
}

impl Topology {
    /// Starts a cluster named `name` with no nodes.
    pub fn builder(name: &str) -> Self {
        let mut settings = Settings::default();
        settings.cluster.name = name.to_string();
        Self { settings }
    }

    /// Adds a node running `roles`, bound to 127.0.0.1 on a free port.
    pub fn node(self, name: &str, roles: &[&str]) -> Self {
        self.node_at(name, "127.0.0.1:0", roles)
    }

    /// Adds a node running `roles`, bound to `addr`.
    pub fn node_at(mut self, name: &str, addr: &str, roles: &[&str]) -> Self {
        self.settings.nodes.push(NodeSpec {
            name: name.to_string(),
            addr: addr.to_string(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            ..Default::default()
        });
        self
    }

    /// Adds a standby node running `roles`: the cluster forms without it and it joins
    /// the running cluster when started ([`NodeSpec::standby`]).
    pub fn standby_node(mut self, name: &str, roles: &[&str]) -> Self {
        self = self.node(name, roles);
        if let Some(spec) = self.settings.nodes.last_mut() {
            spec.standby = true;
        }
        self
    }

    /// How the nodes reach each other (default [`Transport::Quic`]).
    pub fn transport(mut self, transport: Transport) -> Self {
        self.settings.cluster.transport = transport;
        self
    }

    /// Edits the settings directly (timeouts, `[net]`, app sections).
    pub fn with(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(&mut self.settings);
        self
    }

    /// The settings, validated.
    pub fn build(self) -> Result<Settings, NodeError> {
        self.settings.validate()?;
        Ok(self.settings)
    }
}

/// A cluster definition: settings plus the code of every role.
#[derive(Clone)]
pub struct Cluster {
    settings: Arc<Settings>,
    roles: HashMap<String, RoleFn>,
    /// `[app.<section>]` readers registered by the apps, run before any node starts.
    app_sections: BTreeMap<String, SectionCheck>,
    /// Roles written for a membership fixed at the start (no standby, no leaves).
    fixed_membership: std::collections::BTreeSet<String>,
}

type SectionCheck = Arc<dyn Fn(&Settings) -> Result<(), NodeError> + Send + Sync>;

/// How a node reaches the others.
#[derive(Clone)]
pub enum Wiring {
    /// QUIC with this node's credentials.
    Quic(ClusterCredentials),
    /// In-memory channels through a hub shared by every node of the process.
    Memory(MemoryHub),
}

impl Cluster {
    /// A cluster with these settings and no roles yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings: Arc::new(settings),
            roles: HashMap::new(),
            app_sections: BTreeMap::new(),
            fixed_membership: Default::default(),
        }
    }

    /// Declares that the roles read `[app.<section>]` as a `C`, parsed by
    /// [`Cluster::check_settings`] before any node starts so a bad value fails at once.
    /// Once any section is declared, undeclared `[app.*]` sections are rejected too.
    pub fn app_section<C>(self, section: &str) -> Self
    where
        C: serde::de::DeserializeOwned + Default + 'static,
    {
        self.app_section_checked::<C, std::convert::Infallible>(section, |_| Ok(()))
    }

    /// [`Cluster::app_section`] plus the app's own check of the values, failing with
    /// [`NodeError::AppSetting`].
    pub fn app_section_checked<C, E>(
        mut self,
        section: &str,
        validate: fn(&C) -> Result<(), E>,
    ) -> Self
    where
        C: serde::de::DeserializeOwned + Default + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let name = section.to_string();
        let check: SectionCheck = Arc::new(move |s: &Settings| {
            let config = s.app::<C>(&name)?;
            validate(&config).map_err(|e| NodeError::AppSetting {
                section: name.clone(),
                source: Box::new(e),
            })
        });
        self.app_sections.insert(section.to_string(), check);
        self
    }

    /// Checks before any node starts: every listed role is registered and every declared
    /// `[app.*]` section parses.
    pub fn check_settings(&self) -> Result<(), NodeError> {
        // Settings handed to `Cluster::new` directly were never validated.
        self.settings.validate()?;
        self.check_roles()?;
        for check in self.app_sections.values() {
            check(&self.settings)?;
        }
        let sections = &self.app_sections;
        let app = &self.settings.app;
        let unknown = app.keys().find(|s| !sections.contains_key(*s));
        if let Some(section) = unknown.filter(|_| !sections.is_empty()) {
            let known: Vec<&str> = sections.keys().map(String::as_str).collect();
            let known = known.join(", ");
            let why = format!("unknown settings section [app.{section}]; known sections: {known}");
            return Err(NodeError::Config(why));
        }
        Ok(())
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The same roles and `[app.*]` checks with other settings.
    pub fn with_settings(&self, settings: Settings) -> Self {
        Cluster {
            settings: Arc::new(settings),
            roles: self.roles.clone(),
            app_sections: self.app_sections.clone(),
            fixed_membership: self.fixed_membership.clone(),
        }
    }

    /// Registers the code of a role, run on every node that lists it: usually an
    /// `async fn(NodeContext) -> Result<(), E>` with `E` into [`RoleError`].
    pub fn role<F, Fut, E>(mut self, name: &str, f: F) -> Self
    where
        F: Fn(NodeContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), E>> + 'static,
        E: Into<RoleError>,
    {
        let run: RoleFn = Arc::new(move |ctx| {
            let fut = f(ctx);
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        self.roles.insert(name.to_string(), run);
        self
    }

    /// Marks every role registered so far as written for a fixed membership: settings
    /// that run one with a standby node, a scale plan or `on_node_death = "leave"` are
    /// refused before any node starts.
    pub fn registered_roles_need_fixed_membership(mut self) -> Self {
        self.fixed_membership.extend(self.roles.keys().cloned());
        self
    }

    fn check_roles(&self) -> Result<(), NodeError> {
        let cluster = &self.settings.cluster;
        let elastic =
            cluster.scale.is_some() || cluster.on_node_death == crate::settings::OnNodeDeath::Leave;
        for n in &self.settings.nodes {
            for r in &n.roles {
                if !self.roles.contains_key(r) {
                    let why = format!("node {} lists unknown role {r}", n.name);
                    return Err(NodeError::Config(why));
                }
                if self.fixed_membership.contains(r) && (elastic || n.standby) {
                    let why = format!(
                        "node {} runs role {r}, which keeps the membership fixed: standby nodes, [cluster] scale and on_node_death = \"leave\" are for roles written to handle joins and leaves",
                        n.name
                    );
                    return Err(NodeError::Config(why));
                }
            }
        }
        Ok(())
    }

    /// Runs every node in this process on its own thread; returns the root failure, if any.
    pub fn run_in_process(&self) -> Result<(), NodeError> {
        self.check_settings()?;
        let nodes = &self.settings.nodes;
        let wiring: Vec<Wiring> = if self.settings.cluster.transport == Transport::Memory {
            let hub = MemoryHub::new();
            nodes.iter().map(|_| Wiring::Memory(hub.clone())).collect()
        } else {
            let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
            let creds = ClusterCredentials::generate_cluster(&names)?;
            creds.into_iter().map(Wiring::Quic).collect()
        };
        // In one process, nodes bound to port 0 need real ports before anyone starts.
        let mut settings = (*self.settings).clone();
        if self.settings.cluster.transport == Transport::Quic {
            reserve_ports(&mut settings)?;
            check_ports_free(&settings)?;
        }
        let this = self.with_settings(settings);
        // Standby nodes start when the scale plan adds them, if it does.
        let plan = this.settings.scale_plan()?;
        let start_after = |spec: &NodeSpec| match spec.standby {
            false => Some(Duration::ZERO),
            true => plan
                .added()
                .find(|(_, n)| *n == spec.name)
                .map(|(at, _)| at),
        };
        let gate = Arc::new(StandbyGate::default());
        let mut standby = Vec::new();
        let mut handles = Vec::new();
        for (spec, wiring) in this.settings.nodes.iter().zip(wiring) {
            let Some(after) = start_after(spec) else {
                continue;
            };
            let cluster = this.clone();
            let name = spec.name.clone();
            let gate = gate.clone();
            let handle = std::thread::Builder::new()
                .name(format!("petrel-{name}"))
                .spawn(move || {
                    if !gate.wait(after) {
                        tracing::info!(node = %name, "the job finished before the scale plan started this node");
                        return Ok(());
                    }
                    cluster.run_node(&name, wiring)
                })?;
            match spec.standby {
                true => standby.push(handle),
                false => handles.push(handle),
            }
        }
        // Report the root cause: a node's own failure, not the "peer failed" it caused.
        let mut errors = Vec::new();
        // Standby nodes are waited for last: those not started once the others are done
        // are not started at all.
        let closing = handles.len();
        let handles = handles.into_iter().chain(standby).enumerate();
        for (i, h) in handles {
            if i == closing {
                gate.close();
            }
            let panicked = || Err(NodeError::Config("node thread panicked".into()));
            if let Err(e) = h.join().unwrap_or_else(|_| panicked()) {
                errors.push(e);
            }
        }
        // A node that failed before binding leaves its reserved socket behind.
        for n in &this.settings.nodes {
            if let Ok(addr) = parse_addr(n) {
                petrel_net::ports::release(addr);
            }
        }
        // A failed join is a consequence too, so the root cause only when nothing better
        // is known; the coordinator's view of who is missing beats an unreachable one.
        let rank = |e: &NodeError| match e {
            NodeError::PeerFailed { .. } | NodeError::RunFailed { .. } => 3,
            NodeError::CoordinatorUnreachable { .. } => 2,
            NodeError::JoinTimeout { .. } => 1,
            _ => 0,
        };
        let root = (0..errors.len()).min_by_key(|&i| (rank(&errors[i]), i));
        match root.map(|i| errors.swap_remove(i)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Runs one node until its roles and the final barrier are done, or a peer fails.
    /// Blocks; creates its own actix System.
    pub fn run_node(&self, name: &str, wiring: Wiring) -> Result<(), NodeError> {
        self.run_node_until(name, wiring, futures::future::pending())
    }

    /// [`Cluster::run_node`] that also stops when `stop` resolves (to the cause, e.g.
    /// "SIGTERM"), returning [`NodeError::Interrupted`]. `stop` runs on this node's runtime.
    pub fn run_node_until(
        &self,
        name: &str,
        wiring: Wiring,
        stop: impl std::future::Future<Output = String>,
    ) -> Result<(), NodeError> {
        self.check_settings()?;
        let system = System::new();
        let cluster = self.clone();
        let name = name.to_string();
        let result = system.block_on(async move { cluster.node_main(&name, wiring, stop).await });
        System::current().stop();
        result
    }

    async fn node_main(
        &self,
        name: &str,
        wiring: Wiring,
        stop: impl std::future::Future<Output = String>,
    ) -> Result<(), NodeError> {
        let (ctx, coordinator_addr) = match self.boot(name, wiring).await {
            // A standby node started as the job ended: nothing to do, and no failure.
            Err(NodeError::Join(crate::AskError::Remote { ref error, .. }))
                if crate::coordinator::MembershipError::is_job_ended(error) =>
            {
                tracing::info!(node = %name, "the job ended before this node joined");
                return Ok(());
            }
            booted => booted?,
        };
        let node = ctx.node.clone();
        let mut events = node.subscribe();
        let roles: Vec<_> = ctx
            .spec
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r).map(|f| (r.clone(), f(ctx.clone()))))
            .collect();
        let node_name = name.to_string();
        let run_roles = async {
            let results = futures::future::join_all(
                roles
                    .into_iter()
                    .map(|(role, fut)| async move { (role, fut.await) }),
            )
            .await;
            for (role, r) in results {
                r.map_err(|source| NodeError::Role {
                    node: node_name.clone(),
                    role,
                    source,
                })?;
            }
            // Once all are in the final barrier the coordinator may leave before this node
            // hears the release: a failed send is no news.
            ctx.node.net().set_membership_changing(true);
            if ctx.node.leaves_when_done() || ctx.node.is_leave_requested() {
                return ctx.leave().await;
            }
            ctx.barrier(crate::coordinator::FINISH_BARRIER).await
        };
        let interrupted = |cause| NodeError::Interrupted {
            node: name.to_string(),
            cause,
        };
        tokio::pin!(run_roles);
        let result = match node.peer_failure() {
            // Announced while this node was joining (before `events` existed).
            Some(e @ NodeError::RunFailed { .. }) => Err(e),
            _ => tokio::select! {
                r = &mut run_roles => r,
                e = first_failure(&mut events) => Err(e),
                cause = stop => match self.settings.allows_membership_changes() {
                    // A job whose members may leave drains this one first (a
                    // StatefulSet scaling down, an operator's SIGTERM).
                    true => {
                        tracing::info!(node = %name, %cause, "draining, then leaving the cluster");
                        node.request_leave();
                        tokio::select! {
                            r = &mut run_roles => r,
                            e = first_failure(&mut events) => Err(e),
                            () = tokio::time::sleep(LEAVE_GRACE) => Err(interrupted(cause)),
                        }
                    }
                    false => Err(interrupted(cause)),
                },
            },
        };
        // A local error after a failure elsewhere is reported as that failure, so the root
        // cause is named once. Peers leave from now on: failed sends are no news.
        node.net().set_membership_changing(true);
        let result = result.map_err(|e| match e {
            NodeError::PeerFailed { .. } | NodeError::RunFailed { .. } => e,
            other => match (node.peer_failure(), node.disconnected_peers()) {
                (Some(cause), _) => {
                    tracing::debug!(node = %name, error = %other, "error follows a peer failure");
                    cause
                }
                // Peers that held this node's inbound budget hostage may be why it failed.
                (None, Some(peers)) => NodeError::AfterDisconnects {
                    node: name.to_string(),
                    peers,
                    failure: Box::new(other),
                },
                (None, None) => other,
            },
        });
        match &result {
            Ok(()) => tracing::debug!(node = %name, "finished"),
            // The caller reports the error; only a trace here, so it is not printed twice.
            Err(e) => tracing::debug!(node = %name, error = %crate::error_chain(e), "stopping"),
        }
        // A failure that started here (or reached the coordinator) is told to the whole
        // cluster at once; heartbeat-detected failures were already broadcast as `PeerDown`.
        let failure = match &result {
            Ok(()) => None,
            Err(NodeError::PeerFailed { .. }) => None,
            Err(NodeError::RunFailed { name, reason }) => coordinator_addr
                .is_some()
                .then(|| (name.clone(), reason.clone())),
            Err(e) => Some((name.to_string(), crate::error_chain(e))),
        };
        match (&coordinator_addr, failure) {
            (Some(c), failure) => {
                let (reason, failed_node) = match failure {
                    Some((failed, reason)) => (reason, Some(failed)),
                    None => ("run finished".to_string(), None),
                };
                // After a failure every live peer must have the notice before this node
                // leaves, or a peer still joining waits out its join timeout without the
                // cause. Bounded by the failure timeout (at most 5 s).
                let acknowledged_within = failed_node.as_ref().map(|_| {
                    Duration::from_millis(self.settings.cluster.failure_timeout_ms)
                        .min(Duration::from_secs(5))
                });
                let delivered = c.send(BroadcastShutdown {
                    reason,
                    failed_node,
                    acknowledged_within,
                });
                // Give peers a moment to hear the last message before the coordinator leaves.
                let _ = tokio::join!(delivered, tokio::time::sleep(Duration::from_millis(200)));
            }
            (None, Some((failed, reason))) => {
                let shutdown = Shutdown {
                    reason,
                    failed_node: Some(failed),
                };
                // The agent stops the coordinator's node; the coordinator refuses joins.
                for actor in [AGENT_ACTOR, COORDINATOR_ACTOR] {
                    node.tell_control(ctx.coordinator, actor, shutdown.clone());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (None, None) => {
                // Stopped by the coordinator's notice: let this node's answer leave first.
                if matches!(result, Err(NodeError::RunFailed { .. })) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        node.shutdown();
        result
    }

    /// Starts transport, node runtime, agent (and coordinator) and joins the cluster.
    pub async fn boot(
        &self,
        name: &str,
        wiring: Wiring,
    ) -> Result<(NodeContext, Option<Addr<Coordinator>>), NodeError> {
        let s = self.settings.clone();
        let index = s
            .node_index(name)
            .ok_or_else(|| NodeError::Config(format!("no node named {name}")))?;
        let spec = s.nodes[index].clone();
        let id = NodeId(index as u32);
        let coordinator_name = s.coordinator_name().to_string();
        let coordinator = NodeId(s.node_index(&coordinator_name).unwrap_or(0) as u32);
        let (net, inbound) = match &wiring {
            Wiring::Quic(creds) => Net::quic(id, parse_addr(&spec)?, creds, s.net.clone())?,
            Wiring::Memory(hub) => Net::memory(hub, id, s.net.clone())?,
        };
        let request_timeout = Duration::from_millis(s.cluster.request_timeout_ms);
        let node = Node::new(id, name, net, inbound, request_timeout);
        for (i, n) in s.nodes.iter().enumerate() {
            let addr = match &wiring {
                Wiring::Quic(_) => PeerAddr::Quic(parse_addr(n)?),
                Wiring::Memory(_) => PeerAddr::Memory,
            };
            node.add_peer(NodeId(i as u32), &n.name, addr);
        }
        let metrics_addr = petrel_observe::process_metrics_addr().or(spec.metrics_addr.as_deref());
        if let Some(addr) = node.start_metrics(&spec.roles, metrics_addr)? {
            tracing::info!(node = %name, "metrics at http://{addr}/metrics");
        }
        let hb = Duration::from_millis(s.cluster.heartbeat_interval_ms);
        let timeout = Duration::from_millis(s.cluster.failure_timeout_ms);
        let agent = NodeAgent::new(node.clone(), coordinator, hb, timeout).start();
        node.register(AGENT_ACTOR, agent.clone())?
            .accept::<Heartbeat>()
            .accept::<PeerDown>()
            .accept::<MembershipView>()
            .accept::<DrainAndLeave>()
            .accept::<Shutdown>();
        let coordinator_addr = if id == coordinator {
            let ids = || {
                s.nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (NodeId(i as u32), n))
            };
            let expected = ids().map(|(i, n)| (i, n.name.clone())).collect();
            let standby = ids().filter(|(_, n)| n.standby).map(|(i, _)| i).collect();
            let removals = s
                .scale_plan()?
                .removed()
                .filter_map(|(at, name)| Some((at, NodeId(s.node_index(name)? as u32))))
                .collect();
            let death_is_leave = s.cluster.on_node_death == crate::settings::OnNodeDeath::Leave;
            let addr = Coordinator::new(node.clone(), expected, standby, hb, timeout)
                .with_removals(removals)
                .with_death_as_leave(death_is_leave)
                .start();
            node.register(COORDINATOR_ACTOR, addr.clone())?
                .accept::<Join>()
                .accept::<JoinStatus>()
                .accept::<Heartbeat>()
                .accept::<BarrierEnter>()
                .accept::<Leave>()
                .accept::<Shutdown>();
            Some(addr)
        } else {
            None
        };
        // Until everyone joined, the coordinator (or a peer) may not be reachable yet.
        node.net().set_membership_changing(true);
        // The nodes as a failed join names them: over the network, with their addresses.
        let expected: Vec<ExpectedNode> = s
            .nodes
            .iter()
            .map(|n| ExpectedNode {
                name: n.name.clone(),
                addr: matches!(wiring, Wiring::Quic(_)).then(|| n.addr.clone()),
            })
            .collect();
        let join_timeout = Duration::from_millis(s.cluster.join_timeout_ms);
        if let Err(e) = join(&node, coordinator, &spec, &expected, join_timeout).await {
            if id == coordinator && matches!(e, NodeError::JoinTimeout { .. }) {
                // Nodes that started later time out later and then ask who is missing.
                tokio::time::sleep(JOIN_STATUS_TIMEOUT).await;
            }
            return Err(e);
        }
        node.net().set_membership_changing(false);
        crate::chaos::arm(&node)?;
        agent.do_send(Joined);
        tracing::debug!(node = %name, id = %id, "joined cluster {}", s.cluster.name);
        Ok((
            NodeContext {
                node,
                settings: s,
                spec,
                coordinator,
            },
            coordinator_addr,
        ))
    }
}

/// Holds standby nodes of an in-process cluster until their time, or until the cluster's
/// own nodes are done (then they do not start).
#[derive(Default)]
struct StandbyGate {
    closed: Mutex<bool>,
    changed: std::sync::Condvar,
}

impl StandbyGate {
    /// Waits `after`; false if the gate closed first.
    fn wait(&self, after: Duration) -> bool {
        let Ok(closed) = self.closed.lock() else {
            return false;
        };
        match self
            .changed
            .wait_timeout_while(closed, after, |closed| !*closed)
        {
            Ok((closed, _)) => !*closed,
            Err(_) => false,
        }
    }

    fn close(&self) {
        if let Ok(mut closed) = self.closed.lock() {
            *closed = true;
        }
        self.changed.notify_all();
    }
}

fn parse_addr(spec: &NodeSpec) -> Result<SocketAddr, NodeError> {
    let addr = if spec.addr.is_empty() {
        "127.0.0.1:0"
    } else {
        spec.addr.as_str()
    };
    addr.parse()
        .map_err(|e| NodeError::Config(format!("node {}: bad addr {addr:?}: {e}", spec.name)))
}

/// How long a node asked by a signal to leave may drain before it stops anyway.
const LEAVE_GRACE: Duration = Duration::from_secs(30);

async fn first_failure(events: &mut tokio::sync::broadcast::Receiver<PeerEvent>) -> NodeError {
    loop {
        match events.recv().await {
            Ok(PeerEvent::Down { node, name, reason }) => {
                return NodeError::PeerFailed { node, name, reason };
            }
            Ok(PeerEvent::Shutdown {
                reason,
                failed_node: Some(name),
            }) => return NodeError::RunFailed { name, reason },
            Ok(PeerEvent::Shutdown { .. } | PeerEvent::Membership(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                futures::future::pending::<()>().await;
            }
        }
    }
}

/// An app's job, built once per process from `[app.<section>]` on first use and shared by
/// its roles; a bad section fails every role with the reason.
pub fn lazy_job<C, J, E>(
    settings: Settings,
    section: &'static str,
    build: impl Fn(&Settings, C) -> Result<J, E> + Send + Sync + 'static,
) -> impl Fn() -> Result<Arc<J>, NodeError> + Clone + Send + Sync + 'static
where
    C: serde::de::DeserializeOwned + Default,
    J: Send + Sync + 'static,
    E: Into<RoleError>,
{
    // The cause is kept behind an `Arc`: one failed build is reported to every role.
    type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;
    let cell: Arc<std::sync::OnceLock<Result<Arc<J>, Cause>>> =
        Arc::new(std::sync::OnceLock::new());
    let build = Arc::new(build);
    move || {
        cell.get_or_init(|| {
            let fail = |cause: RoleError| Cause::from(cause);
            let cfg: C = settings.app(section).map_err(|e| fail(e.into()))?;
            build(&settings, cfg)
                .map(Arc::new)
                .map_err(|e| fail(e.into()))
        })
        .clone()
        .map_err(|cause| NodeError::AppJob { section, cause })
    }
}
