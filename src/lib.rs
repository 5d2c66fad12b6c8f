//! # petrel
//!
//! Distributed machine learning on actors over QUIC: a parameter server with bounded
//! staleness (Bösen), priority-based parameter propagation (P3) and scheduled model
//! parallelism (STRADS) on one runtime. This facade re-exports every workspace crate and
//! holds the `petrel` command line. This page is the guided tour.
//!
//! ## The runtime, bottom up
//!
//! Dependencies point one way: [`messages`] ← [`net`] ← [`actors`] ← the systems
//! ([`ps`], [`strads`], [`p3`], on top of [`ml`]) ← this facade.
//!
//! - [`messages`]: wire types. A [`messages::Priority`] travels with every message and
//!   [`messages::PriorityQueue`] orders work by it; your own types implement
//!   [`messages::RemoteMessage`]; numeric payloads travel as [`messages::Tensor`] bytes.
//! - [`net`]: [`net::Net`] sends frames over authenticated QUIC (or in memory) through a
//!   priority outbox; knobs are [`net::NetConfig`].
//! - [`actors`]: the node runtime on actix. An [`actors::ActorRef`] sends to a local or a
//!   remote actor with the same call; [`actors::coordinator`] runs membership, heartbeats,
//!   failure detection and barriers.
//!
//! ## Composing a cluster
//!
//! Build the settings with [`actors::Topology`] (or [`actors::Settings::load`]), register
//! each role's `async fn(NodeContext) -> Result<(), E>` with [`actors::Cluster::role`], and
//! run it with [`launcher::launch`]: in process, one process per node (`--processes`), or
//! one node of a multi-host cluster (`--node NAME --config FILE`).
//! [`actors::error_chain`] prints a role's error and its causes once.
//!
//! ```no_run
//! use petrel::actors::{Cluster, NodeContext, NodeError, Topology, Transport};
//!
//! async fn hello(ctx: NodeContext) -> Result<(), NodeError> {
//!     tracing::info!(node = %ctx.spec.name, "hello");
//!     ctx.barrier("said-hello").await
//! }
//!
//! let settings = Topology::builder("hello")
//!     .node("a", &["hello"])
//!     .node("b", &["hello"])
//!     .transport(Transport::Memory)
//!     .build()?;
//! Cluster::new(settings).role("hello", hello).run_in_process()?;
//! # Ok::<(), NodeError>(())
//! ```
//!
//! ## The three systems
//!
//! Each reads in the same order: a sans-I/O `core`, the actor `shells`, the kit, the apps.
//!
//! - [`ps`]: the parameter server (BSP/SSP/ESSP/async): MF, logistic regression, LDA.
//! - [`strads`]: scheduled model parallelism: Lasso, sparse logistic regression, CCD++ MF,
//!   LDA.
//! - [`p3`]: priority-based parameter propagation for data-parallel DNN training.
//! - [`ml`]: what they share: data loaders, generators, DNN layers, topic-model math.
//!
//! ## The command line
//!
//! [`cli`] is the `petrel` command line, built on [`roles::builtin`] (every built-in role),
//! the [`launcher`] and [`netns`]; `petrel bench` runs the `petrel-bench` binary. Commands
//! fail with a [`CliError`].
//!
//! ## Features
//!
//! Default-on, and a command that needs a missing one names it: `candle` (P3's real
//! networks), `plot` (`petrel train --plot`), `dashboard` (`--dashboard`).

pub use petrel_actors as actors;
pub use petrel_messages as messages;
pub use petrel_ml as ml;
pub use petrel_net as net;
pub use petrel_observe as observe;
pub use petrel_p3 as p3;
pub use petrel_ps as ps;
pub use petrel_strads as strads;

pub mod cli;
pub mod demo;
mod error;
pub mod fuzzing;
pub mod launcher;
pub mod leftovers;
pub mod netns;
pub mod recovery;
pub mod report;
pub mod roles;
// STRADS' `petrel train` glue documents its own items.
#[allow(missing_docs)]
pub mod train;

pub use error::CliError;

/// The names most programs on petrel need: `use petrel::prelude::*;`.
pub mod prelude {
    pub use petrel_actors::prelude::*;
}

/// Keeps freed large buffers in the process instead of handing them back to the kernel.
///
/// Raised thresholds (mmap 256 MiB, trim 1 GiB) spare a node receiving large rows a page
/// fault per page per message (about 15 % of a `bench ps` node's CPU). Returns whether they
/// were set; `PETREL_KEEP_LARGE_BUFFERS=0` keeps glibc's defaults.
pub fn keep_large_buffers() -> bool {
    if std::env::var("PETREL_KEEP_LARGE_BUFFERS").is_ok_and(|v| v.trim() == "0") {
        return false;
    }
    set_allocator_thresholds()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_allocator_thresholds() -> bool {
    const MMAP_THRESHOLD: libc::c_int = 256 << 20;
    const TRIM_THRESHOLD: libc::c_int = 1 << 30;
    // SAFETY: mallopt only changes allocator parameters; it takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_allocator_thresholds() -> bool {
    false
}

/// Sets up `tracing` to stderr at `RUST_LOG` (default `info`); a closed stderr is ignored.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .log_internal_errors(false)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
