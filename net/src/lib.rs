//! petrel's transport: bytes and envelopes between nodes, no actors.
//!
//! - [`Net`] is a node's handle: [`Net::send`]`(to, priority, frame)` and a receiver of
//!   [`Inbound`] frames, over authenticated QUIC ([`Net::quic`]: mutual TLS against a
//!   per-cluster CA, [`ClusterCredentials`]) or in-process channels ([`Net::memory`]).
//! - Priorities: the [`outbox`] admits waiting frames per peer within an in-flight window,
//!   and each QUIC stream gets its frame's priority.
//! - Identity: every frame's claimed sender must be the node named by the peer's
//!   certificate ([`Net::add_peer`]), and a certificate is accepted only from its node's
//!   address.
//! - Order per lane ([`sequencer`]); splitting of large messages ([`reassembly`]); shared
//!   memory between nodes of one host ([`shm`]).
//! - Knobs: [`NetConfig`], [`Congestion`], [`ShaperConfig`]. Counters: [`NetStats`] /
//!   [`NetStatsSnapshot`]. Errors: [`NetError`].
//!
//! Start with `use petrel_net::prelude::*;`.

pub mod config;
pub mod datagram;
mod error;
pub mod hostile;
mod identity;
pub mod inbound_budget;
mod memory;
mod net;
pub mod outbox;
pub mod ports;
pub mod private_files;
mod quic;
pub mod reassembly;
pub mod refusal_log;
pub mod sequencer;
mod shaper;
pub mod shm;
mod stats;
pub mod tls;

pub use config::{Congestion, NetConfig, ShaperConfig};
pub use error::NetError;
pub use memory::MemoryHub;
pub use net::{Inbound, LinkCause, Net, PeerAddr};
pub use stats::{LinkStats, NetStats, NetStatsSnapshot};
pub use tls::ClusterCredentials;

/// The names most code needs: `use petrel_net::prelude::*;`.
pub mod prelude {
    pub use crate::{ClusterCredentials, Inbound, MemoryHub, Net, NetConfig, NetError, PeerAddr};
}
