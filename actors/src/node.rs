//! The node runtime: actor registry, local/remote dispatch, pending requests, peer failures.

use crate::address::{ActorRef, Msg};
use crate::error::{AskError, NodeError};
use actix::dev::ToEnvelope;
use actix::prelude::*;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use petrel_messages::{
    ActorId, EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority, RemoteMessage, decode_body,
    encode_body,
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
        node: NodeId,
        name: String,
        reason: String,
    },
    /// The coordinator asked the cluster to stop; `failed_node` is set when the run failed.
    Shutdown {
        reason: String,
        failed_node: Option<String>,
    },
}

type ReplyFuture = LocalBoxFuture<'static, Result<Vec<u8>, String>>;

/// What delivering one remote message to a local actor left to do.
enum Dispatched {
    /// The message is in the actor's mailbox.
    Delivered,
    /// The mailbox is full: the inbound loop awaits this before reading the next frame,
    /// which pushes back through the transport to the sender (bounded memory).
    Backpressure(LocalBoxFuture<'static, ()>),
    /// An ask: resolves to the encoded reply.
    Reply(ReplyFuture),
}

/// Decodes a body and delivers it to a local actor.
type DispatchFn = dyn Fn(&[u8], NodeId, Priority, bool) -> Result<Dispatched, String> + Send + Sync;

/// Asks from other nodes being handled at once; more wait in the transport.
const MAX_INBOUND_ASKS: usize = 4096;

#[derive(Default)]
struct ActorEntry {
    local: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
    remote: HashMap<&'static str, Arc<DispatchFn>>,
}

struct Pending {
    peer: NodeId,
    actor: String,
    tx: oneshot::Sender<Result<Bytes, AskError>>,
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
    /// Wraps a started transport. Must be called inside an actix `System`; spawns the
    /// inbound loop on the current arbiter.
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
            }),
        };
        let weak = Arc::downgrade(&node.inner);
        actix::spawn(inbound_loop(weak, inbound));
        node
    }

    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn net(&self) -> &Net {
        &self.inner.net
    }

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
        self.inner.net.add_peer(node, addr);
    }

    pub fn peer_name(&self, node: NodeId) -> String {
        self.inner
            .names
            .read()
            .ok()
            .and_then(|n| n.get(&node).cloned())
            .unwrap_or_else(|| node.to_string())
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

    /// Registers a local actor under `name`; chain [`Registration::accept`] for each message
    /// type it takes from other nodes or by name.
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

    /// Removes a registered actor (its address stops resolving).
    pub fn unregister(&self, name: &str) {
        if let Ok(mut a) = self.inner.actors.write() {
            a.remove(name);
        }
    }

    /// An address for `M` at `target`. Local targets resolve to the actor's mailbox (no
    /// serialization) and must be registered; remote ones are checked when used.
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
        Ok(ActorRef::local(target.clone(), recipient))
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

    pub fn is_down(&self, node: NodeId) -> bool {
        self.inner
            .down
            .lock()
            .map(|d| d.contains_key(&node))
            .unwrap_or(false)
    }

    /// Declares a peer dead: pending requests to it fail now, its queued frames are dropped,
    /// subscribers are told. Idempotent.
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
        let failed: Vec<Pending> = self
            .inner
            .pending
            .lock()
            .map(|mut p| {
                let ids: Vec<u64> = p
                    .iter()
                    .filter(|(_, v)| v.peer == node)
                    .map(|(k, _)| *k)
                    .collect();
                ids.into_iter().filter_map(|id| p.remove(&id)).collect()
            })
            .unwrap_or_default();
        for p in failed {
            let _ = p.tx.send(Err(AskError::PeerDown {
                node,
                actor: p.actor,
            }));
        }
        self.inner.net.drop_peer(node);
        let _ = self.inner.events.send(PeerEvent::Down {
            node,
            name,
            reason: reason.to_string(),
        });
    }

    /// The failure elsewhere that this node has heard of, if any: a run failure announced
    /// by the coordinator, else the lowest-numbered peer declared down. A local error that
    /// happens after one (an ask or barrier to a dead peer failing) is its consequence.
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
        if let (Some(failed), Ok(mut f)) = (&failed_node, self.inner.run_failure.lock()) {
            f.get_or_insert_with(|| (failed.clone(), reason.to_string()));
        }
        let _ = self.inner.events.send(PeerEvent::Shutdown {
            reason: reason.to_string(),
            failed_node,
        });
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
        body: &M,
        priority: Priority,
    ) -> Result<(), AskError> {
        if self.is_down(target.node) {
            return Err(AskError::PeerDown {
                node: target.node,
                actor: target.to_string(),
            });
        }
        let frame = Frame::encode(
            &self.header(target, M::TYPE_NAME, priority, EnvelopeKind::Tell),
            body,
        )?;
        self.inner
            .net
            .send(target.node, priority, frame)
            .map_err(|e| AskError::Send {
                actor: target.to_string(),
                error: e.to_string(),
            })
    }

    pub(crate) async fn ask_remote<M: RemoteMessage>(
        &self,
        target: &ActorId,
        body: &M,
        priority: Priority,
        timeout: Duration,
    ) -> Result<M::Reply, AskError> {
        let actor = target.to_string();
        let request_id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let frame = Frame::encode(
            &self.header(
                target,
                M::TYPE_NAME,
                priority,
                EnvelopeKind::Ask { request_id },
            ),
            body,
        )?;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(
                request_id,
                Pending {
                    peer: target.node,
                    actor: actor.clone(),
                    tx,
                },
            );
        }
        // Checked after registering, so a death racing with this call still fails it.
        if self.is_down(target.node) {
            self.forget(request_id);
            return Err(AskError::PeerDown {
                node: target.node,
                actor,
            });
        }
        if let Err(e) = self.inner.net.send(target.node, priority, frame) {
            self.forget(request_id);
            return Err(AskError::Send {
                actor,
                error: e.to_string(),
            });
        }
        let body = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                self.forget(request_id);
                return Err(AskError::Timeout { actor, timeout });
            }
            Ok(Err(_)) => return Err(AskError::Stopped { actor }),
            Ok(Ok(result)) => result?,
        };
        Ok(decode_body::<M::Reply>(M::TYPE_NAME, &body)?)
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
        self.inner.net.shutdown();
    }
}

/// Builder returned by [`Node::register`].
pub struct Registration<'a, A: Actor> {
    node: &'a Node,
    name: String,
    addr: Addr<A>,
}

impl<A: Actor> Registration<'_, A> {
    /// Makes the actor reachable for message type `M`, locally and from other nodes.
    pub fn accept<M: RemoteMessage>(self) -> Self
    where
        A: Handler<Msg<M>>,
        A::Context: ToEnvelope<A, Msg<M>>,
    {
        let recipient: Recipient<Msg<M>> = self.addr.clone().recipient();
        let remote_recipient = recipient.clone();
        let dispatch = move |body: &[u8],
                             from: NodeId,
                             priority: Priority,
                             is_ask: bool|
              -> Result<Dispatched, String> {
            let msg: M = decode_body(M::TYPE_NAME, body).map_err(|e| e.to_string())?;
            let wrapped = Msg {
                body: msg,
                priority,
                from: Some(from),
            };
            if !is_ask {
                return Ok(match remote_recipient.try_send(wrapped) {
                    Ok(()) => Dispatched::Delivered,
                    Err(SendError::Closed(_)) => {
                        return Err(format!("actor for {} stopped", M::TYPE_NAME));
                    }
                    Err(SendError::Full(msg)) => {
                        let r = remote_recipient.clone();
                        Dispatched::Backpressure(Box::pin(async move {
                            let mut msg = msg;
                            loop {
                                match r.try_send(msg) {
                                    Err(SendError::Full(back)) => {
                                        msg = back;
                                        tokio::time::sleep(Duration::from_millis(1)).await;
                                    }
                                    _ => return,
                                }
                            }
                        }))
                    }
                });
            }
            let request = remote_recipient.send(wrapped);
            Ok(Dispatched::Reply(Box::pin(async move {
                match request.await {
                    Ok(Ok(reply)) => {
                        let mut out = Vec::new();
                        encode_body(&reply, &mut out).map_err(|e| e.to_string())?;
                        Ok(out)
                    }
                    Ok(Err(e)) => Err(e.0),
                    Err(e) => Err(format!("actor mailbox: {e}")),
                }
            })))
        };
        if let Ok(mut actors) = self.node.inner.actors.write()
            && let Some(entry) = actors.get_mut(&self.name)
        {
            entry.local.insert(M::TYPE_NAME, Box::new(recipient));
            entry.remote.insert(M::TYPE_NAME, Arc::new(dispatch));
        }
        self
    }

    pub fn id(&self) -> ActorId {
        ActorId::new(self.node.id(), self.name.clone())
    }
}

/// Takes frames off the transport one at a time. A frame's transport budget is released
/// only once its message sits in an actor's mailbox, so a slow actor slows its senders
/// instead of growing memory.
async fn inbound_loop(node: std::sync::Weak<NodeInner>, mut rx: mpsc::Receiver<Inbound>) {
    let asks = Arc::new(tokio::sync::Semaphore::new(MAX_INBOUND_ASKS));
    while let Some(inbound) = rx.recv().await {
        let Some(inner) = node.upgrade() else { return };
        let node = Node { inner };
        let is_ask = matches!(inbound.frame.header.kind, EnvelopeKind::Ask { .. });
        let permit = if is_ask {
            match asks.clone().acquire_owned().await {
                Ok(p) => Some(p),
                Err(_) => return,
            }
        } else {
            None
        };
        if let Some(wait) = node.handle_inbound(inbound.frame, permit) {
            wait.await;
        }
    }
}

impl Node {
    fn handle_inbound(
        &self,
        frame: Frame,
        ask_permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Option<LocalBoxFuture<'static, ()>> {
        let h = frame.header;
        match h.kind {
            EnvelopeKind::Reply { request_id } => self.complete(request_id, Ok(frame.body)),
            EnvelopeKind::Failure { request_id, error } => {
                let actor = self.pending_actor(request_id);
                self.complete(request_id, Err(AskError::Remote { actor, error }))
            }
            EnvelopeKind::Tell | EnvelopeKind::Ask { .. } => {
                let request_id = match h.kind {
                    EnvelopeKind::Ask { request_id } => Some(request_id),
                    _ => None,
                };
                let dispatch = self.inner.actors.read().ok().and_then(|a| {
                    a.get(&h.actor)
                        .and_then(|e| e.remote.get(h.msg_type.as_str()).cloned())
                });
                let Some(dispatch) = dispatch else {
                    tracing::warn!(node = %self.inner.name, from = %h.from, actor = %h.actor, msg_type = %h.msg_type, "no actor accepts this message; dropped");
                    if let Some(id) = request_id {
                        self.reply(
                            h.from,
                            &h.msg_type,
                            h.priority,
                            Err(format!(
                                "no actor {} accepting {} on {}",
                                h.actor, h.msg_type, self.inner.name
                            )),
                            id,
                        );
                    }
                    return None;
                };
                match dispatch(&frame.body, h.from, h.priority, request_id.is_some()) {
                    Err(e) => {
                        tracing::warn!(node = %self.inner.name, from = %h.from, msg_type = %h.msg_type, error = %e, "undecodable message; dropped");
                        if let Some(id) = request_id {
                            self.reply(h.from, &h.msg_type, h.priority, Err(e), id);
                        }
                    }
                    Ok(Dispatched::Delivered) => {}
                    Ok(Dispatched::Backpressure(wait)) => return Some(wait),
                    Ok(Dispatched::Reply(reply)) => {
                        let node = self.clone();
                        let id = request_id.unwrap_or_default();
                        actix::spawn(async move {
                            let result = reply.await;
                            node.reply(h.from, &h.msg_type, h.priority, result, id);
                            drop(ask_permit);
                        });
                    }
                }
            }
        }
        None
    }

    fn reply(
        &self,
        to: NodeId,
        msg_type: &str,
        priority: Priority,
        result: Result<Vec<u8>, String>,
        request_id: u64,
    ) {
        let target = ActorId::new(to, "");
        let (kind, body) = match result {
            Ok(body) => (EnvelopeKind::Reply { request_id }, body),
            Err(error) => (EnvelopeKind::Failure { request_id, error }, Vec::new()),
        };
        let frame = match Frame::encode_raw(&self.header(&target, msg_type, priority, kind), &body)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode reply");
                return;
            }
        };
        if let Err(e) = self.inner.net.send(to, priority, frame) {
            tracing::warn!(to = %to, error = %e, "cannot send reply");
        }
    }

    fn pending_actor(&self, request_id: u64) -> String {
        self.inner
            .pending
            .lock()
            .ok()
            .and_then(|p| p.get(&request_id).map(|x| x.actor.clone()))
            .unwrap_or_default()
    }

    fn complete(&self, request_id: u64, result: Result<Bytes, AskError>) {
        let pending = self
            .inner
            .pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(&request_id));
        match pending {
            Some(p) => {
                let _ = p.tx.send(result);
            }
            None => tracing::debug!(request_id, "reply for a request that already timed out"),
        }
    }
}
