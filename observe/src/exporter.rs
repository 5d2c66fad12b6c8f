//! `GET /metrics`: the registry as OpenMetrics text, served by axum on a thread and tokio
//! runtime of its own. A node's actors run on actix arbiters (tokio current-thread
//! runtimes); a long handler there must not delay a scrape, and a flood of scrapes must not
//! take turns from the actors.

use crate::ObserveError;
use axum::Router;
use axum::http::header;
use axum::routing::get;
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An HTTP server on its own thread; stops when dropped.
#[derive(Debug)]
pub(crate) struct HttpThread {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpThread {
    /// Binds `addr` now (so a taken port fails here, naming it) and serves `router`.
    pub(crate) fn start(addr: &str, name: &str, router: Router) -> Result<Self, ObserveError> {
        Self::start_with(addr, name, router, Box::pin(async {}))
    }

    /// [`HttpThread::start`], also running `task` on the server's runtime until it stops.
    pub(crate) fn start_with(
        addr: &str,
        name: &str,
        router: Router,
        task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ) -> Result<Self, ObserveError> {
        let parsed: SocketAddr = addr.parse().map_err(|_| ObserveError::BadAddress {
            addr: addr.to_string(),
        })?;
        let bind_err = |source| ObserveError::Bind {
            addr: addr.to_string(),
            source,
        };
        let listener = TcpListener::bind(parsed).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ObserveError::Runtime)?;
        let (stop, stopped) = oneshot::channel::<()>();
        let label = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("petrel-{name}"))
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::spawn(task);
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!(server = %label, error = %e, "cannot serve");
                            return;
                        }
                    };
                    let served = axum::serve(listener, router)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                    if let Err(e) = served {
                        tracing::warn!(server = %label, error = %e, "server stopped");
                    }
                })
            })
            .map_err(ObserveError::Runtime)?;
        Ok(Self {
            addr: local,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves this process's registry at `http://ADDR/metrics`. Stops when dropped.
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
        let http = HttpThread::start(addr, "metrics", router)?;
        tracing::info!(addr = %http.local_addr(), "serving /metrics");
        Ok(Self { http })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }
}
