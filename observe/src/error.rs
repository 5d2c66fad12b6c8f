/// Why an exporter, a scrape or a dashboard failed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An address in the settings or on the command line is not `host:port`.
    #[error("bad address {addr:?} (want host:port, e.g. 127.0.0.1:9100)")]
    BadAddress {
        /// The text.
        addr: String,
    },
    /// The server's thread or runtime could not be started.
    #[error("cannot start the HTTP server thread")]
    Runtime(#[source] std::io::Error),
    /// Connecting to or reading from a scrape target failed.
    #[error("scrape of {target} failed")]
    Scrape {
        /// The target address.
        target: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A scrape target answered with an HTTP error.
    #[error("scrape of {target} answered HTTP {status}")]
    Status {
        /// The target address.
        target: String,
        /// The status code.
        status: u16,
    },
    /// Writing the static report failed.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Encoding the dashboard's data failed.
    #[error("cannot encode the dashboard data")]
    Json(#[from] serde_json::Error),
}
