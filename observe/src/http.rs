//! The one HTTP/1 server of this crate (`/metrics` and the dashboard): axum's router served
//! by hyper on a thread and tokio runtime of its own. A stopping process waits for it and it
//! shares the process's descriptors, so no client may hold it: see the bounds below.

use crate::ObserveError;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinSet;

/// Time a client has to send a request's head (also the keep-alive idle timeout).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a connection stays open, whatever it does.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Connections served at once; a further one is accepted and closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// How long stopping waits for requests in flight before it drops every connection.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// The pause after a failed `accept` (out of descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A task the server's runtime runs beside it (the dashboard's scraper).
pub(crate) type SideTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An HTTP server on its own thread; stops when dropped, within about [`SHUTDOWN_GRACE`].
#[derive(Debug)]
pub(crate) struct HttpThread {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpThread {
    /// Binds `addr` now and serves `router`, running `task` beside it until it stops.
    pub(crate) fn start(
        addr: &str,
        name: &str,
        router: Router,
        task: SideTask,
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
                    let side = tokio::spawn(task);
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => serve(listener, router, &label, stopped).await,
                        Err(e) => tracing::warn!(server = %label, error = %e, "cannot serve"),
                    }
                    side.abort();
                });
                // Dropping the runtime here drops whatever task is left.
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

/// Serves connections until `stop` fires (or its sender is dropped), then lets requests in
/// flight finish for at most [`SHUTDOWN_GRACE`].
async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    label: &str,
    stop: oneshot::Receiver<()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut refused: u64 = 0;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::debug!(server = %label, error = %e, "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    refused += 1;
                    // Once per power of two: a flood is seen in the log without filling it.
                    if refused.is_power_of_two() {
                        tracing::warn!(
                            server = %label,
                            refused,
                            limit = MAX_CONNECTIONS,
                            "too many connections: closing new ones"
                        );
                    }
                    drop(stream);
                    continue;
                };
                let service = TowerToHyperService::new(router.clone());
                let conn = http.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                connections.spawn(async move {
                    // An error here is the client's doing (a timeout, a reset, bad HTTP).
                    match tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!(error = %e, "connection ended"),
                        Err(_) => tracing::debug!("connection closed at its lifetime bound"),
                    }
                    drop(slot);
                });
            }
        }
    }
    // New clients are refused from here on.
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!(server = %label, open = connections.len(), "dropping open connections");
    }
    connections.shutdown().await;
}
