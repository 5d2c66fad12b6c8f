//! Typed addresses: the same call sends to a local actor (no serialization) or to a remote
//! one (through the node's transport).

use crate::error::{AskError, HandlerError, actor_label};
use crate::node::Node;
use actix::prelude::*;
use petrel_messages::{ActorId, NodeId, Priority, RemoteMessage};
use std::sync::Arc;
use std::time::Duration;

/// What an actor receives: the message, its priority and the sending node (`None` when
/// sent from the same node).
pub struct Msg<M: RemoteMessage> {
    /// The message.
    pub body: M,
    /// The priority it was sent at.
    pub priority: Priority,
    /// The sending node, for messages from other nodes (`None` for local sends).
    pub from: Option<NodeId>,
}

impl<M: RemoteMessage> Message for Msg<M> {
    type Result = Result<M::Reply, HandlerError>;
}

enum Target<M: RemoteMessage> {
    Local(Recipient<Msg<M>>),
    Remote { node: Node, target: ActorId },
}

impl<M: RemoteMessage> Clone for Target<M> {
    fn clone(&self) -> Self {
        match self {
            Target::Local(r) => Target::Local(r.clone()),
            Target::Remote { node, target } => Target::Remote {
                node: node.clone(),
                target: target.clone(),
            },
        }
    }
}

/// An address that accepts messages of type `M`, on this node or another.
pub struct ActorRef<M: RemoteMessage> {
    target: Target<M>,
    id: ActorId,
    /// The target node's name: errors name nodes by name, not by id.
    node_name: Arc<str>,
}

impl<M: RemoteMessage> Clone for ActorRef<M> {
    fn clone(&self) -> Self {
        Self {
            target: self.target.clone(),
            id: self.id.clone(),
            node_name: self.node_name.clone(),
        }
    }
}

impl<M: RemoteMessage> std::fmt::Debug for ActorRef<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.target {
            Target::Local(_) => "local",
            Target::Remote { .. } => "remote",
        };
        write!(f, "ActorRef<{}>({} {kind})", M::TYPE_NAME, self.label())
    }
}

impl<M: RemoteMessage> ActorRef<M> {
    pub(crate) fn local(id: ActorId, node_name: &str, recipient: Recipient<Msg<M>>) -> Self {
        Self {
            target: Target::Local(recipient),
            id,
            node_name: node_name.into(),
        }
    }

    pub(crate) fn remote(node: Node, target: ActorId) -> Self {
        Self {
            id: target.clone(),
            node_name: node.peer_name(target.node).into(),
            target: Target::Remote { node, target },
        }
    }

    /// How errors name the target: `mapper on node map-1`.
    fn label(&self) -> String {
        actor_label(&self.id.name, &self.node_name)
    }

    /// The target actor.
    pub fn id(&self) -> &ActorId {
        &self.id
    }

    /// True when the target lives on this node (sends do not serialize).
    pub fn is_local(&self) -> bool {
        matches!(self.target, Target::Local(_))
    }

    /// Fire and forget: into the local mailbox, or encoded into the priority outbox.
    pub fn tell(&self, body: M, priority: Priority) -> Result<(), AskError> {
        match &self.target {
            Target::Local(r) => r
                .try_send(Msg {
                    body,
                    priority,
                    from: None,
                })
                .or_else(|e| match e {
                    SendError::Full(m) => {
                        r.do_send(m);
                        Ok(())
                    }
                    SendError::Closed(_) => Err(AskError::Stopped {
                        actor: self.label(),
                    }),
                }),
            Target::Remote { node, target } => node.tell_remote(target, body, priority),
        }
    }

    /// Tells every one of `refs` the same message (fire and forget, in order): local targets
    /// get a clone, remote ones share one encoding, so a fan-out serializes once and the
    /// caller keeps `body`. One result per target.
    pub fn tell_each(
        refs: &[ActorRef<M>],
        body: &M,
        priority: Priority,
    ) -> Vec<Result<(), AskError>>
    where
        M: Clone,
    {
        let mut encoded: Option<Result<bytes::Bytes, petrel_messages::CodecError>> = None;
        refs.iter()
            .map(|r| match &r.target {
                Target::Local(_) => r.tell(body.clone(), priority),
                Target::Remote { node, target } => {
                    let bytes = encoded.get_or_insert_with(|| {
                        let mut out = Vec::with_capacity(petrel_messages::encoded_len(body)?);
                        petrel_messages::encode_body(body, &mut out)?;
                        Ok(bytes::Bytes::from(out))
                    });
                    match bytes {
                        Ok(b) => node.tell_remote_encoded(target, M::TYPE_NAME, b, priority),
                        Err(e) => Err(e.clone().into()),
                    }
                }
            })
            .collect()
    }

    /// Request/response with a timeout. A remote peer that dies while the request is
    /// pending makes this fail with [`AskError::PeerDown`] as soon as the death is known.
    pub async fn ask(
        &self,
        body: M,
        priority: Priority,
        timeout: Duration,
    ) -> Result<M::Reply, AskError> {
        match &self.target {
            Target::Local(r) => {
                let fut = r.send(Msg {
                    body,
                    priority,
                    from: None,
                });
                match tokio::time::timeout(timeout, fut).await {
                    Err(_) => Err(AskError::Timeout {
                        actor: self.label(),
                        timeout,
                    }),
                    Ok(Err(_)) => Err(AskError::Stopped {
                        actor: self.label(),
                    }),
                    // A local ask: the caller is this same node.
                    Ok(Ok(Err(e))) => Err(AskError::Remote {
                        actor: self.id.name.as_str().into(),
                        node: (*self.node_name).into(),
                        from: (*self.node_name).into(),
                        error: e.0.into(),
                    }),
                    Ok(Ok(Ok(reply))) => Ok(reply),
                }
            }
            Target::Remote { node, target } => {
                node.ask_remote::<M>(target, body, priority, timeout).await
            }
        }
    }
}
