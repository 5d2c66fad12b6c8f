//! `GET /metrics`: the registry as OpenMetrics text, served by axum on a thread and tokio
//! runtime of its own. A node's actors run on actix arbiters (tokio current-thread
//! runtimes); a long handler there must not delay a scrape, and a flood of scrapes must not
//! take turns from the actors. The server and its bounds are [`crate::http`]'s.

use crate::ObserveError;
use crate::http::HttpThread;
use axum::Router;
use axum::http::header;
use axum::routing::get;
use std::net::SocketAddr;

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves this process's registry at `http://ADDR/metrics`. Stops when dropped, without
/// waiting for clients beyond [`SHUTDOWN_GRACE`](crate::http::SHUTDOWN_GRACE); the bounds
/// every client is held to are in [`crate::http`].
#[derive(Debug)]
pub struct MetricsServer {
    http: HttpThread,
}

impl MetricsServer {
    /// Listens on `addr` (`host:port`; port 0 picks a free one).
    pub fn start(addr: &str) -> Result<Self, ObserveError> {
        let router = Router::new().route(
            "/metrics",
            get(|| async { ([(header::CONTENT_TYPE, OPENMETRICS)], crate::encode_text()) }),
        );
        let http = HttpThread::start(addr, "metrics", router, Box::pin(async {}))?;
        tracing::info!(addr = %http.local_addr(), "serving /metrics");
        Ok(Self { http })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }
}
