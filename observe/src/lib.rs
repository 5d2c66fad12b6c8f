//! petrel's observability: what a running cluster shows while it runs.
//!
//! - [`metrics()`] is the process's one Prometheus registry (the `prometheus-client`
//!   crate). Its families carry a `node` label, so an in-process cluster (several nodes in
//!   one process) is exported without collisions. The systems record into it through small
//!   hooks: [`Metrics::ps`], [`Metrics::strads`], [`Metrics::p3`], [`Metrics::job`].
//! - State that already lives in counters of the net and node layers (bytes per peer and
//!   priority, outbox and mailbox depths, shaper waits, refused connections, malformed
//!   frames, failure-detector state) is not copied: a node registers a sampler with
//!   [`register_node`] and the registry reads it at every scrape ([`NodeSample`]). Process
//!   RSS and CPU come from `/proc` at scrape time too ([`process`]); a binary that installs
//!   [`heap::CountingAllocator`] also knows its heap's peak.
//! - [`MetricsServer`] serves the registry as OpenMetrics text at `GET /metrics` (axum on a
//!   thread and tokio runtime of its own, so a busy actor thread does not stall scrapes);
//!   [`http`] is that server, shared with the dashboard, and the bounds it holds clients to
//!   (header-read timeout, connection limit, shutdown that does not wait for clients).
//! - [`scrape`] fetches and parses that text; [`dashboard`] (the `dashboard` feature,
//!   default on) turns scrapes of every node into the launcher's live web page and the
//!   static report a finished run leaves behind. The HTTP stack (axum, hyper) stays without
//!   it: `/metrics` needs it.
//!
//! Series names are listed in the README ("Watching a run").

#[cfg(feature = "dashboard")]
pub mod dashboard;
mod error;
mod exporter;
mod families;
pub mod heap;
pub mod http;
mod node;
pub mod process;
pub mod scrape;

pub use error::ObserveError;
pub use exporter::MetricsServer;
pub use families::{
    CountHistogram, JobMetrics, Metrics, P3Metrics, PsMetrics, StradsMetrics, encode_text, metrics,
};
pub use node::{
    LinkSample, NodeSample, PeerSample, process_metrics_addr, register_node,
    set_process_metrics_addr, set_thread_node, thread_node, unregister_node,
};
