//! The petrel node runtime on actix: everything a process needs to be one node of a
//! cluster, and nothing about any learning system.
//!
//! - [`Node`]: one process of a cluster: a registry of named actors, typed addresses
//!   ([`ActorRef`]) that send locally without serializing and remotely through
//!   [`petrel_net`] with the same call ([`ActorRef::tell`], [`ActorRef::ask`]), request
//!   timeouts, failure notifications ([`PeerEvent`]). Handlers receive a [`Msg`] and may
//!   fail with a [`HandlerError`].
//! - [`PriorityInbox`]: an opt-in priority mailbox for actix actors ([`PriorityActor`]),
//!   built on the one [`PriorityQueue`].
//! - [`coordinator`]: membership, heartbeats, failure detection and barriers;
//!   [`coordinator::ClusterCore`] is the sans-I/O decision logic under the actors.
//! - Compose a cluster in code: [`Topology`] builds the [`Settings`] (or read them from
//!   TOML with [`Settings::load`]), [`Cluster::role`] registers the code of each role (any
//!   `async fn(NodeContext) -> Result<(), E>`), and [`Cluster::run_in_process`] or
//!   [`Cluster::run_node`] runs it. A role's error is a [`RoleError`]; [`lazy_job`] builds
//!   an app's job from its `[app.<section>]` once per process ([`AppJobError`]).
//! - Choices in the settings are enums checked when read: [`Transport`], [`JobTransport`].
//! - [`checkpoint`]: the one checkpoint set of every system (manifest, keep the newest N,
//!   resume from the newest valid one), on the atomic, checksummed files of [`durable`].
//! - Errors: [`NodeError`], [`AskError`]; print any error with its causes once with
//!   [`error_chain`].
//!
//! Start with `use petrel_actors::prelude::*;`.

#![forbid(unsafe_code)]

// `address`, `error` and `node` stay public for existing paths; their types are re-exported
// below, which is the way to name them.
pub mod address;
pub mod chaos;
pub mod checkpoint;
pub mod coordinator;
pub mod durable;
pub mod error;
mod mailbox;
pub mod node;
pub mod settings;
pub mod topology;

pub use address::{ActorRef, Msg};
pub use error::{
    AskError, ExpectedNode, HandlerError, NodeError, RoleErrorSource, error_chain, handler_failure,
};
pub use mailbox::{PriorityActor, PriorityInbox};
pub use node::{Node, PeerEvent, Registration};
pub use petrel_messages::PriorityQueue;
pub use settings::{
    AppSections, ClusterSettings, JobTransport, NodeSpec, Settings, Transport, flag_defaults,
    validate_node_name,
};
pub use topology::{
    AppJobError, Cluster, NodeContext, RoleError, RoleFuture, Topology, Wiring, lazy_job,
};

/// The names most code needs: `use petrel_actors::prelude::*;`.
pub mod prelude {
    pub use crate::{
        ActorRef, AskError, Cluster, HandlerError, Msg, Node, NodeContext, NodeError,
        PriorityActor, PriorityInbox, RoleError, Settings, Topology, Transport, error_chain,
    };
    pub use petrel_messages::prelude::*;
}
