//! The petrel node runtime on actix: everything a process needs to be one node of a
//! cluster, and nothing about any learning system.
//!
//! - [`Node`]: a registry of named actors and typed addresses ([`ActorRef`]) that send
//!   locally without serializing and remotely through [`petrel_net`] with the same call;
//!   handlers receive a [`Msg`] and may fail with a [`HandlerError`].
//! - [`PriorityInbox`]: an opt-in priority mailbox for actix actors ([`PriorityActor`]).
//! - [`coordinator`]: membership, heartbeats, failure detection and barriers.
//! - [`Topology`] builds the [`Settings`] (or [`Settings::load`] reads them),
//!   [`Cluster::role`] registers each role's code and [`Cluster::run_in_process`] or
//!   [`Cluster::run_node`] runs it; [`lazy_job`] builds an app's job once per process.
//! - [`checkpoint`]: the one checkpoint set of every system, on [`durable`] files.
//! - Errors: [`NodeError`], [`AskError`], printed with their causes by [`error_chain`].
//!
//! Start with `use petrel_actors::prelude::*;`.

#![forbid(unsafe_code)]

pub mod address;
pub mod chaos;
pub mod checkpoint;
pub mod coordinator;
pub mod durable;
pub mod error;
mod mailbox;
pub mod node;
pub mod scale;
pub mod settings;
pub mod topology;

pub use address::{ActorRef, Msg};
pub use error::{
    AskError, ExpectedNode, HandlerError, NodeError, RoleErrorSource, error_chain, handler_failure,
};
pub use mailbox::{PriorityActor, PriorityInbox};
pub use node::{Node, PeerEvent, Registration};
pub use petrel_messages::PriorityQueue;
pub use scale::MembershipArgs;
pub use settings::{
    AppSections, ClusterSettings, JobTransport, NodeSpec, OnNodeDeath, Settings, Transport,
    flag_defaults, validate_node_name,
};
pub use topology::{Cluster, NodeContext, RoleError, RoleFuture, Topology, Wiring, lazy_job};

/// The names most code needs: `use petrel_actors::prelude::*;`.
pub mod prelude {
    pub use crate::{
        ActorRef, AskError, Cluster, HandlerError, Msg, Node, NodeContext, NodeError,
        PriorityActor, PriorityInbox, RoleError, Settings, Topology, Transport, error_chain,
    };
    pub use petrel_messages::prelude::*;
}
