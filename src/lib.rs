//! # petrel
//!
//! A framework for distributed machine learning on actors over QUIC. It unites a parameter
//! server with bounded staleness (Bösen), priority-based parameter propagation (P3) and
//! scheduled model parallelism (STRADS) on one runtime. This crate is the facade: it
//! re-exports every workspace crate under one name and holds the `petrel` command line's
//! building blocks. This page is the guided tour; README.md and ARCHITECTURE.md point here.
//!
//! ## The runtime, bottom up
//!
//! Dependencies point one way: [`messages`] ← [`net`] ← [`actors`] ← the systems
//! ([`ps`], [`strads`], [`p3`], on top of [`ml`]) ← this facade.
//!
//! - [`messages`]: wire types, pure data. A [`messages::Priority`] (an `i32`, higher
//!   first) travels with every message; [`messages::PriorityQueue`] is the one queue that
//!   orders work by it (mailbox, outbox and P3's slices). Your own message types implement
//!   [`messages::RemoteMessage`] (or use [`messages::remote_message!`]); large numeric
//!   payloads travel as raw bytes ([`messages::Tensor`]).
//! - [`net`]: the transport. [`net::Net`] sends frames over authenticated QUIC (or in memory
//!   for tests) through a priority outbox ([`net::outbox`]); knobs are [`net::NetConfig`].
//! - [`actors`]: the node runtime on actix. A [`actors::Node`] hosts named actors; an
//!   [`actors::ActorRef`] sends to a local actor without serializing and to a remote one
//!   over [`net`] with the same call. [`actors::coordinator`] runs membership, heartbeats,
//!   failure detection and barriers.
//!
//! ## Composing a cluster
//!
//! Build the settings in code with [`actors::Topology`] (or read TOML with
//! [`actors::Settings::load`]), register the code of each role with
//! [`actors::Cluster::role`] — any `async fn(NodeContext) -> Result<(), E>` — and run it
//! with [`launcher::launch`], which reads the mode from the command line: every node a
//! thread of this process (`--in-process`), one process per node on this host
//! (`--processes`: the program re-executes itself), or one node of a multi-host cluster
//! (`--node NAME --config FILE`). `petrel run` and `petrel node` are the same launcher for
//! the built-in roles. A role's error keeps its cause chain
//! ([`actors::RoleError`]); [`actors::error_chain`] prints it once.
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
//! Each system has one home that reads in the same order: a sans-I/O `core` (no actix,
//! tokio or quinn), the actor `shells`, the kit (generic roles and job runner), the apps.
//!
//! - [`ps`]: the parameter server: sharded tables, client caches, BSP/SSP/ESSP/async
//!   consistency; apps for matrix factorization, logistic regression and LDA.
//! - [`strads`]: scheduled model parallelism: schedulers dispatch dependency-aware blocks of
//!   variables (star and ring routing); apps for Lasso, sparse logistic regression, CCD++
//!   matrix factorization and LDA.
//! - [`p3`]: priority-based parameter propagation for data-parallel DNN training: slices
//!   sent in the order the next forward pass needs them.
//! - [`ml`]: what they share: data loaders, synthetic generators, DNN layers, topic-model
//!   math.
//!
//! ## The command line
//!
//! [`cli`] is the `petrel` command line. [`roles::builtin`] is a [`actors::Cluster`] with
//! every built-in role; `petrel run`, `petrel node` and `petrel train …` are built on it,
//! the [`launcher`] and [`netns`] (emulated hosts). `petrel bench …` runs the benchmarks'
//! own crate (`bench/`, the `petrel-bench` binary). [`demo`] is the runtime's own check job.
//! Commands fail with a [`CliError`].
//!
//! ## Features
//!
//! Three default-on features hold the heavy parts; a program that embeds only the parameter
//! server or STRADS builds without them (`default-features = false`), and a command that
//! needs a missing one refuses to run and names it. `candle`: P3's real networks (candle;
//! `petrel train p3`, `[app.p3] net`, `eval`/`predict p3`; emulated profiles need none).
//! `plot`: `petrel train --plot` (plotters). `dashboard`: `--dashboard`, the live page and
//! its report; axum and hyper stay without it, since every node serves `/metrics` with
//! them.

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
/// glibc serves every allocation above its mmap threshold (128 KiB at first) with a fresh
/// `mmap` and unmaps it on free, so a node receiving a 16 MiB row per iteration pays a page
/// fault and a zeroed page for each of its 4,096 pages per message: about 15 % of a `bench
/// ps` node's CPU (perf), and 1.2-1.5x on the push+pull figure. With the mmap threshold at
/// 256 MiB and the trim threshold at 1 GiB the heap reuses those pages, at the cost of up
/// to 1 GiB freed but still mapped (the peak is unchanged). The binary's commands call this
/// first; `PETREL_KEEP_LARGE_BUFFERS=0` leaves glibc's defaults. Does nothing outside
/// glibc. Returns whether the thresholds were set.
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

/// Sets up `tracing` output to stderr, filtered by `RUST_LOG` (default `info`). A closed
/// stderr (a launcher that died, a closed pipe) drops log lines silently instead of
/// panicking the thread that logged.
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
