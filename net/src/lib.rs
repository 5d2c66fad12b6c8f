//! petrel's transport: authenticated QUIC (quinn + rustls, mutual TLS against a per-cluster
//! CA), one priority-ordered outbox per node, an optional bandwidth shaper, and an in-memory
//! transport with the same interface for fast tests.
//!
//! The crate knows frames and node ids, not actors. [`Net`] is the handle a node uses:
//! `send(to, priority, frame)` and a receiver of [`Inbound`] frames.

pub mod config;
pub mod memory;
pub mod net;
pub mod outbox;
pub mod quic;
pub mod sequencer;
pub mod shaper;
pub mod stats;
pub mod tls;

pub use config::{NetConfig, ShaperConfig};
pub use memory::MemoryHub;
pub use net::{Inbound, Net, NetError, PeerAddr};
pub use stats::{NetStats, NetStatsSnapshot};
pub use tls::{ClusterCredentials, TlsError};
