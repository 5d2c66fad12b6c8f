//! petrel's observability: what a running cluster shows while it runs.
//!
//! - [`metrics()`] is the process's one Prometheus registry; every family has a `node`
//!   label (several nodes may share a process). The systems record through
//!   [`Metrics::ps`], [`Metrics::strads`], [`Metrics::p3`] and [`Metrics::job`].
//! - Counters the net and node layers already keep are read at scrape time from the
//!   sampler a node registers ([`register_node`], [`NodeSample`]); process RSS and CPU from
//!   `/proc` ([`process`]), the heap from [`heap::CountingAllocator`] when installed.
//! - [`MetricsServer`] serves OpenMetrics text at `GET /metrics` on a thread of its own
//!   ([`http`], shared with the dashboard, bounds every client).
//! - [`scrape`] fetches and parses that text; [`dashboard`] (feature `dashboard`) turns
//!   scrapes of every node into the launcher's live page and a finished run's report.
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
