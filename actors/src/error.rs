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

/// Renders an error and its `source()` chain as `outer: inner: root`, skipping a cause
/// whose text the outer message already contains (as `#[error("...: {0}")]` does), so
/// each cause is printed once.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod chain_tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("loading the corpus")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("reading: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn chain_lists_each_cause_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "docword.txt missing");
        assert_eq!(
            error_chain(&Outer(io())),
            "loading the corpus: docword.txt missing"
        );
        assert_eq!(error_chain(&Repeats(io())), "reading: docword.txt missing");
    }
}
