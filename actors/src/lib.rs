//! The petrel node runtime on actix.
//!
//! - [`Node`]: one process of a cluster: a registry of named actors, typed addresses
//!   ([`ActorRef`]) that send locally without serializing and remotely through `petrel-net`
//!   with the same call, request/response with timeouts, failure notifications.
//! - [`PriorityInbox`]: an opt-in priority mailbox for actix actors.
//! - [`cluster`]: the coordinator's membership, heartbeats, failure detection and barriers
//!   ([`cluster::ClusterCore`] is the sans-I/O decision logic).
//! - [`topology`]: compose clusters in code; [`settings`]: TOML + `PETREL_*` configuration.

pub mod address;
pub mod cluster;
pub mod durable;
pub mod error;
pub mod mailbox;
pub mod node;
pub mod settings;
pub mod topology;

pub use address::{ActorRef, Msg};
pub use error::{AskError, HandlerError, NodeError, error_chain};
pub use mailbox::{PriorityActor, PriorityInbox};
pub use node::{Node, PeerEvent};
pub use petrel_messages::PriorityQueue;
pub use settings::{ClusterSettings, JobTransport, NodeSpec, Settings, Transport};
pub use topology::{AppJobError, Cluster, NodeContext, RoleError, RoleFuture, Topology, lazy_job};
