//! The runtime's own wire messages: membership, heartbeats, barriers, shutdown.

use crate::ids::NodeId;
use crate::remote_message;
use serde::{Deserialize, Serialize};

/// Actor name of every node's runtime endpoint.
pub const NODE_ACTOR: &str = "petrel.node";

/// A node announces itself to the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    pub node: NodeId,
    pub name: String,
    pub roles: Vec<String>,
}

/// The coordinator's answer: the members known so far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinAck {
    pub members: Vec<Member>,
    pub heartbeat_interval_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub node: NodeId,
    pub name: String,
    pub roles: Vec<String>,
}

/// Liveness signal sent to the coordinator; answered by the coordinator's view of failures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub node: NodeId,
    pub seq: u64,
}

/// Sent by the coordinator to every live node when it declares a node dead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerDown {
    pub node: NodeId,
    pub name: String,
    pub reason: String,
}

/// Asks a node to stop cleanly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shutdown {
    pub reason: String,
    /// Set when the run failed: the node whose failure stops the cluster. Every node that
    /// receives it stops at once with an error naming that node, instead of waiting for
    /// heartbeats to time out.
    #[serde(default)]
    pub failed_node: Option<String>,
}

/// A node enters a named barrier; the ask completes when every live node has entered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierEnter {
    pub name: String,
    pub node: NodeId,
}

/// Reply to [`BarrierEnter`] (inside `Ok`): how many nodes took part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierReleased {
    pub name: String,
    pub participants: u32,
}

remote_message!(Join => JoinAck, "petrel.join");
remote_message!(Heartbeat, "petrel.heartbeat");
remote_message!(PeerDown, "petrel.peer_down");
remote_message!(Shutdown, "petrel.shutdown");
remote_message!(BarrierEnter => Result<BarrierReleased, String>, "petrel.barrier");
