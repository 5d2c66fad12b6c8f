use petrel_messages::{CodecError, NodeId};
use std::time::Duration;

/// Why an `ask` did not produce a reply. Every variant names who or what failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AskError {
    #[error("no reply from {actor} within {timeout:?}")]
    Timeout { actor: String, timeout: Duration },
    #[error("{node} is down; request to {actor} failed")]
    PeerDown { node: NodeId, actor: String },
    #[error("{actor} failed to handle the request: {error}")]
    Remote { actor: String, error: String },
    #[error("cannot send to {actor}: {error}")]
    Send { actor: String, error: String },
    #[error("codec: {0}")]
    Codec(#[from] CodecError),
    #[error("local actor {actor} stopped")]
    Stopped { actor: String },
}

/// An error a message handler returns; it travels back to a remote asker as a `Failure`.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[error("{0}")]
pub struct HandlerError(pub String);

impl HandlerError {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

impl From<String> for HandlerError {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for HandlerError {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Net(#[from] petrel_net::NetError),
    #[error(transparent)]
    Tls(#[from] petrel_net::TlsError),
    #[error("no actor {actor} accepting {msg_type} on this node")]
    NoSuchActor { actor: String, msg_type: String },
    #[error("actor name {0} is already registered on this node")]
    DuplicateActor(String),
    #[error("joining the cluster failed: {0}")]
    Join(String),
    #[error("barrier {name} failed: {reason}")]
    Barrier { name: String, reason: String },
    #[error("role {role} on {node}: {error}")]
    Role {
        node: String,
        role: String,
        error: String,
    },
    #[error("peer {name} ({node}) failed: {reason}")]
    PeerFailed {
        node: NodeId,
        name: String,
        reason: String,
    },
    /// Another node's failure stopped the run (it told the coordinator, which told all).
    #[error("node {name} failed: {reason}")]
    RunFailed { name: String, reason: String },
    #[error(transparent)]
    Ask(#[from] AskError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
