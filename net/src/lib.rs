//! petrel's transport: bytes and envelopes between nodes, no actors.
//!
//! - [`Net`] is the handle a node uses: [`Net::send`]`(to, priority, frame)` and a receiver
//!   of [`Inbound`] frames. [`Net::quic`] runs authenticated QUIC (quinn + rustls, mutual TLS
//!   against a per-cluster CA, see [`ClusterCredentials`]); [`Net::memory`] connects the
//!   nodes of one process through a [`MemoryHub`] with the same interface, for fast tests.
//! - Priorities: every frame carries a [`Priority`](petrel_messages::Priority). The
//!   [`outbox`] holds each node's waiting frames in a
//!   [`PriorityQueue`](petrel_messages::PriorityQueue) and admits them per peer within an
//!   in-flight window; each QUIC stream gets the frame's priority.
//! - Identity: the node name in a peer's certificate must be the sender every frame
//!   claims (see [`Net::add_peer`]); an impostor is refused and disconnected. A certificate
//!   is accepted only from its node's registered address, so a stolen key used elsewhere
//!   is refused at the handshake.
//! - Order: frames between two nodes at one priority arrive in order ([`sequencer`]).
//! - Size: messages above `max_message_bytes` are split and joined ([`reassembly`]);
//!   with `shared_memory_dir`, large frames between nodes of one host go through files
//!   and only a control frame crosses QUIC ([`shm`]).
//! - Knobs: [`NetConfig`] (`[net]` in the settings; unknown keys are rejected),
//!   [`Congestion`], and the optional link emulation [`ShaperConfig`].
//! - Counters: [`NetStats`] / [`NetStatsSnapshot`]. Errors: [`NetError`], [`TlsError`].
//!
//! Start with `use petrel_net::prelude::*;`.

pub mod config;
pub mod datagram;
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

pub use config::{Congestion, NetConfig, NetConfigError, ShaperConfig};
pub use memory::MemoryHub;
pub use net::{Inbound, LinkCause, Net, NetError, PeerAddr};
pub use stats::{LinkStats, NetStats, NetStatsSnapshot};
pub use tls::{ClusterCredentials, TlsError};

/// The names most code needs: `use petrel_net::prelude::*;`.
pub mod prelude {
    pub use crate::{ClusterCredentials, Inbound, MemoryHub, Net, NetConfig, NetError, PeerAddr};
}
