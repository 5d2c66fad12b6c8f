//! `GET /metrics`: the registry as OpenMetrics text, served on a thread of its own so that
//! actors and scrapes never delay each other ([`crate::http`]).

use crate::ObserveError;
use crate::http::HttpThread;
use axum::Router;
use axum::http::header;
use axum::routing::get;
use std::net::SocketAddr;

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves this process's registry at `http://ADDR/metrics`; stops when dropped.
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
