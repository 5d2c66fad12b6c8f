//! The runtime's own wire messages: membership, heartbeats, barriers, shutdown.

use crate::ids::NodeId;
use crate::remote_message;
use serde::{Deserialize, Serialize};

/// Actor name of every node's runtime endpoint.
pub const NODE_ACTOR: &str = "petrel.node";

/// A node announces itself to the coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// The joining node's id (its index in the settings).
    pub node: NodeId,
    /// Its name in the settings.
    pub name: String,
    /// The roles it runs.
    pub roles: Vec<String>,
}

/// The coordinator's answer: the members known so far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinAck {
    /// Every member, once the cluster formed.
    pub members: Vec<Member>,
    /// The membership epoch the joining node starts at.
    #[serde(default)]
    pub epoch: u64,
    /// How often members send heartbeats.
    pub heartbeat_interval_ms: u64,
}

/// A member of the cluster as the coordinator knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its id.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// The roles it runs.
    pub roles: Vec<String>,
}

/// Liveness signal sent to the coordinator; answered by the coordinator's view of failures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The sender.
    pub node: NodeId,
    /// Increases by one per heartbeat of the sender.
    pub seq: u64,
}

/// Sent by the coordinator to every live node when it declares a node dead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerDown {
    /// The dead node.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// Why it was declared dead.
    pub reason: String,
}

/// Asks a node to stop cleanly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shutdown {
    /// Why the cluster stops.
    pub reason: String,
    /// The node whose failure stops the cluster, if the run failed: receivers stop at
    /// once with an error naming it instead of waiting for heartbeats to time out.
    #[serde(default)]
    pub failed_node: Option<String>,
}

/// A node enters a named barrier; the ask completes when every live node has entered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierEnter {
    /// The barrier's name (the same on every node).
    pub name: String,
    /// The entering node.
    pub node: NodeId,
    /// A value every entering node must share (a digest of its loaded data); if two
    /// differ the barrier fails for every node, naming them.
    #[serde(default)]
    pub agree_on: Option<u64>,
}

/// Why the coordinator refused or failed a barrier (a member died, the caller is not a
/// live member, the coordinator stopped). On the wire it is the reason text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(transparent)]
#[error("{reason}")]
pub struct BarrierRefused {
    /// What went wrong, naming the node or barrier.
    pub reason: String,
}

/// What the coordinator answers to [`BarrierEnter`].
pub type BarrierReply = Result<BarrierReleased, BarrierRefused>;

/// Reply to [`BarrierEnter`] (inside `Ok`): how many nodes took part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierReleased {
    /// The barrier's name.
    pub name: String,
    /// How many live nodes entered it.
    pub participants: u32,
}

/// Asks the coordinator which nodes have not joined yet (a node whose join timed out names
/// them in its error).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinStatus;

/// The coordinator's answer to [`JoinStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinProgress {
    /// Names of the nodes of the settings that have not joined, in settings order.
    pub missing: Vec<String>,
}

/// A member leaves a running cluster on its own, after draining its work: the others
/// carry on without it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leave {
    /// The leaving node.
    pub node: NodeId,
}

/// The coordinator's answer to [`Leave`]: the epoch at which the node left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaveAck {
    /// The membership epoch without the node.
    pub epoch: u64,
}

/// The membership every live member holds, sent by the coordinator whenever a node joins
/// a formed cluster or leaves it. The epoch grows by one per change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipView {
    /// One more than the previous view's.
    pub epoch: u64,
    /// The live members, by id.
    pub members: Vec<Member>,
    /// Nodes that left, with the epoch at which each left.
    pub departed: Vec<(NodeId, u64)>,
}

/// The coordinator asks a member to drain its work and leave (a scale plan's `remove`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainAndLeave {
    /// Why, for the node's log.
    pub reason: String,
}

remote_message!(Leave => LeaveAck, "petrel.leave");
remote_message!(DrainAndLeave, "petrel.drain_and_leave");
remote_message!(MembershipView, "petrel.membership");
remote_message!(Join => JoinAck, "petrel.join");
remote_message!(JoinStatus => JoinProgress, "petrel.join_status");
remote_message!(Heartbeat, "petrel.heartbeat");
remote_message!(PeerDown, "petrel.peer_down");
remote_message!(Shutdown, "petrel.shutdown");
remote_message!(BarrierEnter => BarrierReply, "petrel.barrier");
