//! The runtime's errors: [`NodeError`], [`AskError`], [`HandlerError`], and [`error_chain`]
//! to print any of them with its causes once.

use petrel_messages::runtime::BarrierRefused;
use petrel_messages::{CodecError, NodeId};
use std::sync::Arc;
use std::time::Duration;

/// Why an `ask` (or `tell`) did not produce a reply, naming node and actor
/// (`mapper on node map-1`).
#[derive(Debug, thiserror::Error, Clone)]
pub enum AskError {
    /// No reply within the timeout.
    #[error("no reply from actor {actor} within {timeout:?}")]
    Timeout {
        /// The asked actor and its node.
        actor: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The actor's node was declared dead.
    #[error("node {name} is down; a request to its actor {actor} failed")]
    PeerDown {
        /// The dead node.
        node: NodeId,
        /// Its name.
        name: String,
        /// The asked actor's name.
        actor: String,
    },
    /// The actor's node left the cluster.
    #[error(
        "node {name} left the cluster at membership epoch {epoch}; a request to its actor {actor} failed"
    )]
    PeerLeft {
        /// The node that left.
        name: String,
        /// The asked actor's name.
        actor: String,
        /// The epoch at which it left.
        epoch: u64,
    },
    /// The remote handler (or the remote runtime) answered with an error.
    #[error("actor {actor} on node {node} failed to handle a request from {from}: {error}")]
    // `Box<str>` rather than `String`: every `Result` carrying an `AskError` stays small.
    Remote {
        /// The asked actor's name.
        actor: Box<str>,
        /// The name of the node where it failed.
        node: Box<str>,
        /// The name of the node that asked.
        from: Box<str>,
        /// The error text that came back over the wire.
        error: Box<str>,
    },
    /// The transport refused the message.
    #[error("cannot send to actor {actor}: {source}")]
    Send {
        /// The target actor and its node.
        actor: String,
        /// The transport's error.
        #[source]
        source: Arc<petrel_net::NetError>,
    },
    /// The message is larger than a peer takes even split into parts (its share of
    /// `net.inbound_buffer_bytes`); nothing was sent. A too-large reply comes back at once
    /// as [`AskError::Remote`] with the same wording.
    #[error(
        "{msg_type} to actor {actor} is {len} bytes, over the largest message a peer takes ({max} bytes: half of net.inbound_buffer_bytes): raise it ([net] inbound_buffer_bytes or PETREL_NET__INBOUND_BUFFER_BYTES) or send smaller messages"
    )]
    Oversize {
        /// The target actor and its node.
        actor: String,
        /// The message type's wire name.
        msg_type: String,
        /// The encoded frame's length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// The message or its reply could not be encoded or decoded.
    #[error("codec: {0}")]
    Codec(#[from] CodecError),
    /// The local actor's mailbox is closed.
    #[error("actor {actor} stopped")]
    Stopped {
        /// The actor and its node.
        actor: String,
    },
}

/// How errors name an actor: `mapper on node map-1`.
pub(crate) fn actor_label(actor: &str, node: &str) -> String {
    format!("{actor} on node {node}")
}

/// An error a message handler returns; a remote asker gets its text ([`AskError::Remote`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[error("{0}")]
pub struct HandlerError(pub String);

impl HandlerError {
    /// A handler error with this text.
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

/// Why a node could not be set up, join, or run its roles.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Settings that are inconsistent (no nodes, duplicate names, unknown role, ...).
    #[error("configuration: {0}")]
    Config(String),
    /// A settings file or text could not be read or parsed (names the bad key or value).
    #[error("settings {origin}: {source}")]
    Settings {
        /// The file, or "text" for settings parsed from a string.
        origin: String,
        /// The parser's error (boxed: it is large, and errors travel in every `Result`).
        #[source]
        source: Box<config::ConfigError>,
    },
    /// An `[app.<section>]` does not deserialize into the app's config.
    #[error("[app.{section}]: {source}")]
    AppSection {
        /// The section name.
        section: String,
        /// What is wrong with it.
        #[source]
        source: serde_json::Error,
    },
    /// An `[app.<section>]` parses but a value cannot be right (the app's own check).
    #[error("[app.{section}] {source}")]
    AppSetting {
        /// The section name.
        section: String,
        /// The app's reason, naming the key.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An app's job could not be built from `[app.<section>]` ([`crate::lazy_job`]); every
    /// role of the process gets the same cause.
    #[error("[app.{section}]: {cause}")]
    AppJob {
        /// The settings section, e.g. `ps_mf`.
        section: &'static str,
        /// What went wrong (a bad value, a file that does not load).
        #[source]
        cause: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A choice (e.g. a transport) that is not one of the valid values.
    #[error("unknown {kind} {value:?}; valid values: {valid}")]
    UnknownChoice {
        /// What is being chosen.
        kind: &'static str,
        /// The value given.
        value: String,
        /// The valid values, comma separated.
        valid: String,
    },
    /// Settings could not be rendered as TOML.
    #[error("settings to TOML: {0}")]
    WriteSettings(#[source] toml::ser::Error),
    /// The transport, its `[net]` settings or the cluster's certificates failed.
    #[error(transparent)]
    Net(#[from] petrel_net::NetError),
    /// A node's address cannot be bound (most often: another process holds the port).
    #[error("node {node} cannot bind {addr}: {source}")]
    Bind {
        /// The node.
        node: String,
        /// Its configured address.
        addr: std::net::SocketAddr,
        /// Why (`AddrInUse`: "Address already in use").
        #[source]
        source: std::io::Error,
    },
    /// No local actor takes this message type under this name.
    #[error("no actor {actor} accepting {msg_type} on this node")]
    NoSuchActor {
        /// The actor name.
        actor: String,
        /// The message type.
        msg_type: String,
    },
    /// An actor name was registered twice on one node.
    #[error("actor name {0} is already registered on this node")]
    DuplicateActor(String),
    /// The coordinator refused this node's join.
    #[error("joining the cluster failed: {0}")]
    Join(#[source] AskError),
    /// The coordinator refused or did not answer this node's leave.
    #[error("leaving the cluster failed: {0}")]
    Leave(#[source] AskError),
    /// The cluster did not form in time; the coordinator named the nodes that never joined.
    #[error("joining the cluster failed: cluster did not form within {timeout:?}: {}", missing_nodes(.coordinator, .missing))]
    JoinTimeout {
        /// The join timeout.
        timeout: Duration,
        /// The coordinator node's name.
        coordinator: String,
        /// The nodes not joined in time, with their expected addresses.
        missing: Vec<ExpectedNode>,
    },
    /// This node could not reach the coordinator's node while joining.
    #[error("joining the cluster failed: the coordinator, node {}, could not be reached within {timeout:?}", .coordinator)]
    CoordinatorUnreachable {
        /// The join timeout.
        timeout: Duration,
        /// The coordinator node and the address it was expected at.
        coordinator: ExpectedNode,
    },
    /// The barrier request did not reach the coordinator or got no answer.
    #[error("barrier {name} failed: {source}")]
    Barrier {
        /// The barrier.
        name: String,
        /// Why the request failed.
        #[source]
        source: AskError,
    },
    /// The coordinator failed the barrier (a member died).
    #[error("barrier {name} failed: {source}")]
    BarrierRefused {
        /// The barrier.
        name: String,
        /// The coordinator's reason.
        #[source]
        source: BarrierRefused,
    },
    /// A role on this node returned an error.
    #[error("role {role} on {node}: {source}")]
    Role {
        /// The node.
        node: String,
        /// The role.
        role: String,
        /// The role's error, with its cause chain.
        #[source]
        source: RoleErrorSource,
    },
    /// This node failed after its transport disconnected peers hoarding inbound budget,
    /// named as a likely cause.
    #[error("{} ({node} had disconnected {peers} for frames that held inbound budget without progressing)", crate::error_chain(.failure))]
    AfterDisconnects {
        /// This node.
        node: String,
        /// The peers it disconnected, comma separated.
        peers: String,
        /// Its failure.
        failure: Box<NodeError>,
    },
    /// A peer was declared dead.
    #[error("peer {name} ({node}) failed: {reason}")]
    PeerFailed {
        /// The peer's id.
        node: NodeId,
        /// Its name.
        name: String,
        /// Why it was declared dead.
        reason: String,
    },
    /// Another node's failure stopped the run (it told the coordinator, which told all).
    #[error("node {name} failed: {reason}")]
    RunFailed {
        /// The node where the failure happened.
        name: String,
        /// Its error, as that node reported it.
        reason: String,
    },
    /// The node's `/metrics` exporter could not start.
    #[error("node {node}: metrics exporter")]
    Metrics {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: petrel_observe::ObserveError,
    },
    /// The node was told to stop (SIGINT, SIGTERM) before its run finished.
    #[error("node {node} interrupted ({cause})")]
    Interrupted {
        /// The node.
        node: String,
        /// What stopped it, e.g. "SIGTERM".
        cause: String,
    },
    /// A node name that cannot be used: it names files, certificates and log prefixes.
    #[error(
        "invalid node name {name:?}: {why}; names are 1 to 63 characters from a-z, A-Z, 0-9, '-' and '_', starting with a letter or digit"
    )]
    InvalidNodeName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A request failed.
    #[error(transparent)]
    Ask(#[from] AskError),
    /// An operating-system error (threads, sockets).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// A node as an error names it: its name and, over the network, its expected address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedNode {
    /// The node's name.
    pub name: String,
    /// Its address from the settings (`None` for in-memory wiring).
    pub addr: Option<String>,
}

impl std::fmt::Display for ExpectedNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.addr {
            Some(addr) => write!(f, "{} (expected at {addr})", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// `node b (expected at …) never joined`, or `nodes b (…), c (…) never joined`.
fn missing_nodes(coordinator: &str, missing: &[ExpectedNode]) -> String {
    let list = missing
        .iter()
        .map(ExpectedNode::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match missing.len() {
        // The coordinator saw everyone, but its answer to this node was lost.
        0 => format!(
            "every node joined, but the answer of the coordinator {coordinator} did not arrive"
        ),
        1 => format!("node {list} never joined (coordinator: {coordinator})"),
        _ => format!("nodes {list} never joined (coordinator: {coordinator})"),
    }
}

/// A role's error as [`NodeError::Role`] holds it (`source()` chain kept).
pub type RoleErrorSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The remote handler failure ([`AskError::Remote`]) anywhere in `error`'s `source()`
/// chain, if any: it happened on the node it names, not the one that saw it.
pub fn handler_failure<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a AskError> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        let ask = e
            .downcast_ref::<AskError>()
            .or_else(|| match e.downcast_ref::<NodeError>() {
                Some(NodeError::Ask(a)) => Some(a),
                _ => None,
            });
        if let Some(a @ AskError::Remote { .. }) = ask {
            return Some(a);
        }
        cause = e.source();
    }
    None
}

/// Renders an error and its `source()` chain as `outer: inner: root`, skipping causes the
/// outer text already contains, so each cause is printed once.
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
    input_clipped(&text)
}

/// `text` quoting at most 200 bytes of any input: quoted values and TOML source lines
/// (`12 | key = value`) are cut; keys and valid choices stay whole.
fn input_clipped(text: &str) -> String {
    const QUOTED: usize = 200;
    let quoted = petrel_messages::clip_quoted(text, QUOTED);
    let is_source_line = |line: &str| {
        let rest = line
            .trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit());
        rest.len() < line.trim_start().len() && rest.starts_with(" |")
    };
    quoted
        .split('\n')
        .map(|line| match petrel_messages::clip(line, QUOTED + 8) {
            start if is_source_line(line) && start.len() < line.len() => format!("{start}…"),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
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

    #[test]
    fn a_settings_error_quotes_at_most_200_bytes_of_the_file() {
        let key = "k".repeat(1 << 20);
        let e = crate::Settings::from_toml(&format!("[cluster]\n{key} = 1\n[[nodes]]\nname='a'"))
            .unwrap_err();
        let shown = error_chain(&e);
        assert!(shown.len() < 800, "an error of {} bytes", shown.len());
        assert!(!shown.contains(&"k".repeat(201)), "{shown}");
    }
}
