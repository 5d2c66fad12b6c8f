use serde::{Deserialize, Serialize};
use std::fmt;

/// A node (one process) of a cluster.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

/// A named actor on a node. Names are unique per node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActorId {
    /// The node the actor lives on.
    pub node: NodeId,
    /// The actor's registered name.
    pub name: String,
}

impl ActorId {
    /// The actor `name` on `node`.
    pub fn new(node: NodeId, name: impl Into<String>) -> Self {
        Self {
            node,
            name: name.into(),
        }
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.node, self.name)
    }
}

/// Message priority: higher values leave the outbox first, get higher QUIC stream priority
/// and are processed first by priority mailboxes.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub struct Priority(pub i32);

impl Priority {
    /// Bulk data that may wait.
    pub const LOW: Priority = Priority(-100);
    /// The default for ordinary messages.
    pub const NORMAL: Priority = Priority(0);
    /// Work that should overtake ordinary traffic.
    pub const HIGH: Priority = Priority(100);
    /// Runtime control traffic: must not starve behind data, or live peers look dead.
    pub const CONTROL: Priority = Priority(1 << 20);
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}
