//! The receiving side of a node: [`Registration`] makes an actor reachable by message
//! type; the inbound loop delivers each frame and sends an ask's reply back.

use super::{Node, NodeInner};
use crate::address::Msg;
use crate::error::{AskError, HandlerError};
use actix::dev::ToEnvelope;
use actix::prelude::*;
use futures::future::LocalBoxFuture;
use petrel_messages::{
    ActorId, Body, CodecError, EnvelopeKind, Frame, NodeId, Priority, RemoteMessage, encode_body,
    encoded_len,
};
use petrel_net::Inbound;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Why a message from another node could not be delivered or answered (sent as `Failure`).
#[derive(Debug, thiserror::Error)]
pub(super) enum DeliveryError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("actor for {0} stopped")]
    Stopped(&'static str),
    #[error("actor mailbox: {0}")]
    Mailbox(#[from] MailboxError),
    #[error(transparent)]
    Handler(#[from] HandlerError),
    #[error("{name} left the cluster at membership epoch {epoch}; its messages are refused")]
    Departed { name: String, epoch: u64 },
    #[error("no actor {actor} accepting {msg_type} on {node}")]
    NoActor {
        actor: String,
        msg_type: String,
        node: String,
    },
}

type ReplyFuture = LocalBoxFuture<'static, Result<Vec<u8>, DeliveryError>>;

/// What delivering one remote message to a local actor left to do.
pub(super) enum Dispatched {
    /// The message is in the actor's mailbox.
    Delivered,
    /// The mailbox is full: awaited before the next frame, pushing back on the sender.
    Backpressure(LocalBoxFuture<'static, ()>),
    /// An ask: resolves to the encoded reply.
    Reply(ReplyFuture),
}

/// Decodes a body and delivers it to a local actor.
pub(super) type DispatchFn =
    dyn Fn(&Body, NodeId, Priority, bool) -> Result<Dispatched, DeliveryError> + Send + Sync;

/// Asks from other nodes being handled at once; more wait in the transport.
const MAX_INBOUND_ASKS: usize = 4096;

/// Builder returned by [`Node::register`].
pub struct Registration<'a, A: Actor> {
    pub(super) node: &'a Node,
    pub(super) name: String,
    pub(super) addr: Addr<A>,
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
        let dispatch = move |body: &Body,
                             from: NodeId,
                             priority: Priority,
                             is_ask: bool|
              -> Result<Dispatched, DeliveryError> {
            let msg: M = body.decode(M::TYPE_NAME)?;
            let wrapped = Msg {
                body: msg,
                priority,
                from: Some(from),
            };
            if !is_ask {
                return Ok(match remote_recipient.try_send(wrapped) {
                    Ok(()) => Dispatched::Delivered,
                    Err(SendError::Closed(_)) => {
                        return Err(DeliveryError::Stopped(M::TYPE_NAME));
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
                        // Exact size: a large reply is written once, never regrown.
                        let mut out = Vec::with_capacity(encoded_len(&reply)?);
                        encode_body(&reply, &mut out)?;
                        Ok(out)
                    }
                    Ok(Err(e)) => Err(e.into()),
                    Err(e) => Err(e.into()),
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

    /// The registered actor's id.
    pub fn id(&self) -> ActorId {
        ActorId::new(self.node.id(), self.name.clone())
    }
}

/// Takes frames off the transport one at a time, releasing a frame's budget only once its
/// message is in a mailbox, so a slow actor slows its senders instead of growing memory.
pub(super) async fn inbound_loop(
    node: std::sync::Weak<NodeInner>,
    mut rx: mpsc::Receiver<Inbound>,
) {
    let asks = Arc::new(tokio::sync::Semaphore::new(MAX_INBOUND_ASKS));
    while let Some(inbound) = rx.recv().await {
        let Some(inner) = node.upgrade() else { return };
        inner
            .observe
            .inbound_depth
            .store(rx.len() as u64, std::sync::atomic::Ordering::Relaxed);
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
                // Named by the node that answered (the asked one) and this node, the caller.
                let actor = self.pending_actor(request_id);
                let failure = AskError::Remote {
                    actor: actor.into(),
                    node: self.peer_name(h.from).into(),
                    from: self.inner.name.as_str().into(),
                    error: error.into(),
                };
                self.complete(request_id, Err(failure))
            }
            EnvelopeKind::Tell | EnvelopeKind::Ask { .. } => {
                let request_id = match h.kind {
                    EnvelopeKind::Ask { request_id } => Some(request_id),
                    _ => None,
                };
                // A node that left drained first: what it sends now comes from an old epoch.
                if let Some(epoch) = self.departed_at(h.from) {
                    let name = self.peer_name(h.from);
                    // The runtime's own stragglers (a last heartbeat) are expected.
                    if h.msg_type.starts_with("petrel.") {
                        tracing::debug!(node = %self.inner.name, from = %name, epoch, msg_type = %h.msg_type, "runtime message from a node that left the cluster; refused");
                    } else {
                        tracing::warn!(node = %self.inner.name, from = %name, epoch, msg_type = %h.msg_type, "message from a node that left the cluster; refused");
                    }
                    if let Some(id) = request_id {
                        let refused = DeliveryError::Departed { name, epoch };
                        self.reply(h.from, &h.msg_type, h.priority, Err(refused), id);
                    }
                    return None;
                }
                let dispatch = self.inner.actors.read().ok().and_then(|a| {
                    a.get(&h.actor)
                        .and_then(|e| e.remote.get(h.msg_type.as_str()).cloned())
                });
                let Some(dispatch) = dispatch else {
                    // An ask gets the failure back; only a lost tell is news here.
                    if let Some(id) = request_id {
                        tracing::debug!(node = %self.inner.name, from = %h.from, actor = %h.actor, msg_type = %h.msg_type, "no actor accepts this ask; failure sent back");
                        let missing = DeliveryError::NoActor {
                            actor: h.actor.clone(),
                            msg_type: h.msg_type.clone(),
                            node: self.inner.name.clone(),
                        };
                        self.reply(h.from, &h.msg_type, h.priority, Err(missing), id);
                    } else {
                        tracing::warn!(node = %self.inner.name, from = %h.from, actor = %h.actor, msg_type = %h.msg_type, "no actor accepts this message; dropped");
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
        result: Result<Vec<u8>, DeliveryError>,
        request_id: u64,
    ) {
        let target = ActorId::new(to, "");
        let (kind, body) = match result {
            Ok(body) => (EnvelopeKind::Reply { request_id }, body),
            Err(error) => (
                EnvelopeKind::Failure {
                    request_id,
                    error: error.to_string(),
                },
                Vec::new(),
            ),
        };
        // A large reply body leaves as its own allocation, not copied into the frame.
        let header = self.header(&target, msg_type, priority, kind);
        let frame = match Frame::encode_raw_chunks(&header, body) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode reply");
                return;
            }
        };
        match self.inner.net.send_chunks(to, priority, frame) {
            Ok(()) => {}
            // The asker gets a failure naming type, size and knob now, not a timeout.
            Err(petrel_net::NetError::Oversize { len, max }) => {
                let error = format!(
                    "the reply to {msg_type} is {len} bytes, over the largest message a peer takes ({max} bytes: half of net.inbound_buffer_bytes): raise it ([net] inbound_buffer_bytes or PETREL_NET__INBOUND_BUFFER_BYTES) or ask for less"
                );
                tracing::warn!(to = %to, %error, "reply too large; the asker gets a failure");
                let failure = EnvelopeKind::Failure { request_id, error };
                match Frame::encode_raw(&self.header(&target, msg_type, priority, failure), &[]) {
                    Ok(frame) => {
                        if let Err(e) = self.inner.net.send(to, priority, frame) {
                            tracing::warn!(to = %to, error = %e, "cannot send failure");
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "cannot encode failure"),
                }
            }
            Err(e) => tracing::warn!(to = %to, error = %e, "cannot send reply"),
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

    fn complete(&self, request_id: u64, result: Result<Body, AskError>) {
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
