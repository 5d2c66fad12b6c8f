//! # petrel
//!
//! A framework for distributed machine learning on actors over QUIC. It unites a
//! parameter server with bounded staleness (Bösen), priority-based parameter propagation
//! (P3) and scheduled model parallelism (STRADS) on one runtime.
//!
//! This facade re-exports the workspace crates and holds the `petrel` CLI's building
//! blocks: the multi-process launcher, network-namespace hosts, built-in roles and
//! benchmarks.

pub use petrel_actors as actors;
pub use petrel_messages as messages;
pub use petrel_ml as ml;
pub use petrel_net as net;
pub use petrel_p3 as p3;
pub use petrel_ps as ps;
pub use petrel_strads as strads;

pub mod bench;
pub mod demo;
pub mod fuzzing;
pub mod launcher;
pub mod netns;
pub mod report;
pub mod roles;
pub mod train;

/// Sets up `tracing` output to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
