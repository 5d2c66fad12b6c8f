//! The node runtime: the [`Node`] handle, actor registry, outgoing dispatch, pending
//! requests and peer failures; `inbound.rs` holds the receiving side.

mod inbound;
mod membership;
mod observe;

use inbound::DispatchFn;
pub use inbound::Registration;

use crate::address::{ActorRef, Msg};
use crate::error::{AskError, NodeError};
use actix::prelude::*;
use petrel_messages::{
    ActorId, Body, CodecError, EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority, RemoteMessage,
};
use petrel_net::{Inbound, Net, NetStatsSnapshot, PeerAddr};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};

/// A change in the cluster that subscribers hear about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// A node stopped answering heartbeats (or was reported dead by the coordinator).
    Down {
        /// The node.
        node: NodeId,
        /// Its name.
        name: String,
        /// Why it is considered down.
        reason: String,
    },
    /// The membership changed: a node joined the running cluster or left it.
    Membership(petrel_messages::runtime::MembershipView),
    /// The coordinator asked the cluster to stop; `failed_node` is set when the run failed.
    Shutdown {
        /// Why.
        reason: String,
        /// The node whose failure stops the run, if it failed.
        failed_node: Option<String>,
    },
}

#[derive(Default)]
struct ActorEntry {
    local: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
    remote: HashMap<&'static str, Arc<DispatchFn>>,
}

struct Pending {
    peer: NodeId,
    /// The asked actor's name (on `peer`).
    actor: String,
    tx: oneshot::Sender<Result<Body, AskError>>,
}

struct NodeInner {
    id: NodeId,
    name: String,
    net: Net,
    names: RwLock<HashMap<NodeId, String>>,
    actors: RwLock<HashMap<String, ActorEntry>>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_request: AtomicU64,
    down: Mutex<HashMap<NodeId, String>>,
    /// `(node, reason)` of a run failure the coordinator announced.
    run_failure: Mutex<Option<(String, String)>>,
    events: broadcast::Sender<PeerEvent>,
    default_timeout: Duration,
    observe: observe::NodeObserve,
    membership: membership::Membership,
}

/// A handle to this process's node. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({} {})", self.inner.id, self.inner.name)
    }
}

impl Node {
    /// Wraps a started transport; inside an actix `System` (spawns the inbound loop).
    pub fn new(
        id: NodeId,
        name: impl Into<String>,
        net: Net,
        inbound: mpsc::Receiver<Inbound>,
        default_timeout: Duration,
    ) -> Node {
        let (events, _) = broadcast::channel(64);
        let node = Node {
            inner: Arc::new(NodeInner {
                id,
                name: name.into(),
                net,
                names: RwLock::new(HashMap::new()),
                actors: RwLock::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                next_request: AtomicU64::new(1),
                down: Mutex::new(HashMap::new()),
                run_failure: Mutex::new(None),
                events,
                default_timeout,
                observe: Default::default(),
                membership: Default::default(),
            }),
        };
        let weak = Arc::downgrade(&node.inner);
        actix::spawn(inbound::inbound_loop(weak, inbound));
        node
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The transport.
    pub fn net(&self) -> &Net {
        &self.inner.net
    }

    /// The transport's counters now.
    pub fn net_stats(&self) -> NetStatsSnapshot {
        self.inner.net.stats()
    }

    /// The request timeout from the settings.
    pub fn default_timeout(&self) -> Duration {
        self.inner.default_timeout
    }

    /// Records a peer's name and address.
    pub fn add_peer(&self, node: NodeId, name: &str, addr: PeerAddr) {
        if let Ok(mut n) = self.inner.names.write() {
            n.insert(node, name.to_string());
        }
        self.inner.net.add_peer(node, name, addr);
    }

    /// A node's name, this node's included (its id if unknown).
    pub fn peer_name(&self, node: NodeId) -> String {
        if node == self.inner.id {
            return self.inner.name.clone();
        }
        self.inner
            .names
            .read()
            .ok()
            .and_then(|n| n.get(&node).cloned())
            .unwrap_or_else(|| node.to_string())
    }

    /// How errors name `target`: `mapper on node map-1`, by names rather than ids.
    pub fn actor_label(&self, target: &ActorId) -> String {
        crate::error::actor_label(&target.name, &self.peer_name(target.node))
    }

    /// Looks a node up by name.
    pub fn peer_id(&self, name: &str) -> Option<NodeId> {
        self.inner
            .names
            .read()
            .ok()
            .and_then(|n| n.iter().find(|(_, v)| v.as_str() == name).map(|(k, _)| *k))
    }

    /// All known nodes (including this one), by id.
    pub fn peers(&self) -> Vec<(NodeId, String)> {
        let mut v: Vec<_> = self
            .inner
            .names
            .read()
            .map(|n| n.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Registers a local actor under `name`; chain [`Registration::accept`] per message type.
    pub fn register<A: Actor>(
        &self,
        name: &str,
        addr: Addr<A>,
    ) -> Result<Registration<'_, A>, NodeError> {
        let mut actors = self
            .inner
            .actors
            .write()
            .map_err(|_| NodeError::Config("registry poisoned".into()))?;
        if actors.contains_key(name) {
            return Err(NodeError::DuplicateActor(name.to_string()));
        }
        actors.insert(name.to_string(), ActorEntry::default());
        Ok(Registration {
            node: self,
            name: name.to_string(),
            addr,
        })
    }

    /// An address for `M` at `target`: local targets (registered) resolve to the mailbox,
    /// remote ones are checked when used.
    pub fn actor<M: RemoteMessage>(&self, target: &ActorId) -> Result<ActorRef<M>, NodeError> {
        if target.node != self.inner.id {
            return Ok(ActorRef::remote(self.clone(), target.clone()));
        }
        let actors = self
            .inner
            .actors
            .read()
            .map_err(|_| NodeError::Config("registry poisoned".into()))?;
        let recipient = actors
            .get(&target.name)
            .and_then(|e| e.local.get(M::TYPE_NAME))
            .and_then(|any| any.downcast_ref::<Recipient<Msg<M>>>())
            .cloned()
            .ok_or_else(|| NodeError::NoSuchActor {
                actor: target.name.clone(),
                msg_type: M::TYPE_NAME.to_string(),
            })?;
        Ok(ActorRef::local(target.clone(), &self.inner.name, recipient))
    }

    /// Shorthand: an address by node name and actor name.
    pub fn actor_at<M: RemoteMessage>(
        &self,
        node_name: &str,
        actor: &str,
    ) -> Result<ActorRef<M>, NodeError> {
        let node = if node_name == self.inner.name {
            self.inner.id
        } else {
            self.peer_id(node_name)
                .ok_or_else(|| NodeError::Config(format!("unknown node {node_name}")))?
        };
        self.actor(&ActorId::new(node, actor))
    }

    /// Subscribes to peer failures and shutdown requests.
    pub fn subscribe(&self) -> broadcast::Receiver<PeerEvent> {
        self.inner.events.subscribe()
    }

    /// True once `node` was declared dead.
    pub fn is_down(&self, node: NodeId) -> bool {
        self.inner
            .down
            .lock()
            .map(|d| d.contains_key(&node))
            .unwrap_or(false)
    }

    /// Declares a peer dead (idempotent): its pending requests fail, its queued frames are
    /// dropped, subscribers are told.
    pub fn mark_down(&self, node: NodeId, reason: &str) {
        if node == self.inner.id {
            return;
        }
        {
            let Ok(mut down) = self.inner.down.lock() else {
                return;
            };
            if down.contains_key(&node) {
                return;
            }
            down.insert(node, reason.to_string());
        }
        let name = self.peer_name(node);
        tracing::warn!(node = %self.inner.name, peer = %name, id = %node, reason, "peer is down");
        self.fail_pending_to(node, |actor| AskError::PeerDown {
            node,
            name: name.clone(),
            actor,
        });
        self.inner.net.drop_peer(node);
        let _ = self.inner.events.send(PeerEvent::Down {
            node,
            name,
            reason: reason.to_string(),
        });
    }

    /// Fails every request pending to `node` with `error(actor asked)`.
    fn fail_pending_to(&self, node: NodeId, error: impl Fn(String) -> AskError) {
        let failed: Vec<Pending> = match self.inner.pending.lock() {
            Ok(mut p) => p
                .extract_if(|_, v| v.peer == node)
                .map(|(_, v)| v)
                .collect(),
            Err(_) => Vec::new(),
        };
        for p in failed {
            let _ = p.tx.send(Err(error(p.actor)));
        }
    }

    /// The peers the transport disconnected for hoarding inbound budget, comma separated,
    /// each once; `None` when there were none.
    pub fn disconnected_peers(&self) -> Option<String> {
        let mut names = self.net().stats().disconnected_names;
        names.sort();
        names.dedup();
        (!names.is_empty()).then(|| names.join(", "))
    }

    /// The failure elsewhere this node has heard of, if any: an announced run failure, else
    /// the lowest-numbered peer declared down (a later local error is its consequence).
    pub fn peer_failure(&self) -> Option<NodeError> {
        if let Ok(f) = self.inner.run_failure.lock()
            && let Some((name, reason)) = f.as_ref()
        {
            return Some(NodeError::RunFailed {
                name: name.clone(),
                reason: reason.clone(),
            });
        }
        let (node, reason) = self
            .inner
            .down
            .lock()
            .ok()?
            .iter()
            .min_by_key(|(id, _)| **id)
            .map(|(id, r)| (*id, r.clone()))?;
        Some(NodeError::PeerFailed {
            node,
            name: self.peer_name(node),
            reason,
        })
    }

    pub(crate) fn announce_shutdown(&self, reason: &str, failed_node: Option<String>) {
        // Peers leave from now on; sends to them may fail, and that is no news.
        self.inner.net.set_membership_changing(true);
        if let (Some(failed), Ok(mut f)) = (&failed_node, self.inner.run_failure.lock()) {
            f.get_or_insert_with(|| (failed.clone(), reason.to_string()));
        }
        let _ = self.inner.events.send(PeerEvent::Shutdown {
            reason: reason.to_string(),
            failed_node,
        });
    }

    /// The error of a send to `target`, whose node is down or left.
    fn peer_down(&self, target: &ActorId) -> AskError {
        if let Some(epoch) = self.departed_at(target.node) {
            return AskError::PeerLeft {
                name: self.peer_name(target.node),
                actor: target.name.clone(),
                epoch,
            };
        }
        AskError::PeerDown {
            node: target.node,
            name: self.peer_name(target.node),
            actor: target.name.clone(),
        }
    }

    fn header(
        &self,
        target: &ActorId,
        msg_type: &str,
        priority: Priority,
        kind: EnvelopeKind,
    ) -> EnvelopeHeader {
        EnvelopeHeader {
            from: self.inner.id,
            to: target.node,
            actor: target.name.clone(),
            msg_type: msg_type.to_string(),
            priority,
            kind,
        }
    }

    pub(crate) fn tell_remote<M: RemoteMessage>(
        &self,
        target: &ActorId,
        body: M,
        priority: Priority,
    ) -> Result<(), AskError> {
        // The message is ours: a large tensor in it leaves as its own bytes, not copied.
        self.send_tell(target, M::TYPE_NAME, priority, |header| {
            Frame::encode_chunks(header, body)
        })
    }

    /// [`Self::tell_remote`] of a body encoded already (shared by several sends).
    pub(crate) fn tell_remote_encoded(
        &self,
        target: &ActorId,
        msg_type: &'static str,
        body: &bytes::Bytes,
        priority: Priority,
    ) -> Result<(), AskError> {
        self.send_tell(target, msg_type, priority, |header| {
            Frame::with_encoded_body(header, body)
        })
    }

    /// A tell's frame, made by `frame` from its header, queued unless `target` is down.
    fn send_tell(
        &self,
        target: &ActorId,
        msg_type: &'static str,
        priority: Priority,
        frame: impl FnOnce(&EnvelopeHeader) -> Result<Vec<bytes::Bytes>, CodecError>,
    ) -> Result<(), AskError> {
        if self.is_down(target.node) || self.departed_at(target.node).is_some() {
            return Err(self.peer_down(target));
        }
        let frame = frame(&self.header(target, msg_type, priority, EnvelopeKind::Tell))?;
        self.inner
            .net
            .send_chunks(target.node, priority, frame)
            .map_err(|e| send_error(self.actor_label(target), msg_type, e))
    }

    pub(crate) async fn ask_remote<M: RemoteMessage>(
        &self,
        target: &ActorId,
        body: M,
        priority: Priority,
        timeout: Duration,
    ) -> Result<M::Reply, AskError> {
        let actor = self.actor_label(target);
        let request_id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        // The request is ours, as in a tell: a large tensor in it leaves as its own bytes.
        let kind = EnvelopeKind::Ask { request_id };
        let frame = Frame::encode_chunks(&self.header(target, M::TYPE_NAME, priority, kind), body)?;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(
                request_id,
                Pending {
                    peer: target.node,
                    actor: target.name.clone(),
                    tx,
                },
            );
        }
        // Checked after registering, so a death racing with this call still fails it.
        if self.is_down(target.node) || self.departed_at(target.node).is_some() {
            self.forget(request_id);
            return Err(self.peer_down(target));
        }
        if let Err(e) = self.inner.net.send_chunks(target.node, priority, frame) {
            self.forget(request_id);
            return Err(send_error(actor, M::TYPE_NAME, e));
        }
        let body = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                self.forget(request_id);
                return Err(AskError::Timeout { actor, timeout });
            }
            Ok(Err(_)) => return Err(AskError::Stopped { actor }),
            Ok(Ok(result)) => result?,
        };
        Ok(body.decode::<M::Reply>(M::TYPE_NAME)?)
    }

    fn forget(&self, request_id: u64) {
        if let Ok(mut p) = self.inner.pending.lock() {
            p.remove(&request_id);
        }
    }

    /// Requests in flight to other nodes.
    pub fn pending_requests(&self) -> usize {
        self.inner.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Stops the transport. Pending requests fail with a timeout or peer-down error.
    pub fn shutdown(&self) {
        self.stop_metrics();
        self.inner.net.shutdown();
    }
}

/// The ask error for a refused send: an oversize frame names type, size and knob; anything
/// else keeps the transport's error as its source.
pub(crate) fn send_error(actor: String, msg_type: &str, e: petrel_net::NetError) -> AskError {
    match e {
        petrel_net::NetError::Oversize { len, max } => AskError::Oversize {
            actor,
            msg_type: msg_type.to_owned(),
            len,
            max,
        },
        other => AskError::Send {
            actor,
            source: Arc::new(other),
        },
    }
}
