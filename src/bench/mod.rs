//! Benchmarks behind `petrel bench …`. Each prints a table and ends with one JSON line.
//!
//! [`BenchError`] is the error of the runtime benchmarks ([`transport`], [`soak`]).

// The application benchmarks document their own items.
#[allow(missing_docs)]
pub mod consistency;
#[allow(missing_docs)]
pub mod lasso;
#[allow(missing_docs)]
pub mod lasso_scale;
#[allow(missing_docs)]
pub mod lasso_schedulers;
#[allow(missing_docs)]
pub mod lda;
#[allow(missing_docs)]
pub mod mf;
#[allow(missing_docs)]
pub mod p3;
#[allow(missing_docs)]
pub mod p3_netns;
pub mod soak;
#[allow(missing_docs)]
pub mod strads_plot;
pub mod transport;

/// Why a runtime benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up a node or an actor failed.
    #[error(transparent)]
    Node(#[from] petrel_actors::NodeError),
    /// A transport could not start.
    #[error(transparent)]
    Net(#[from] petrel_net::NetError),
    /// Certificates could not be made.
    #[error(transparent)]
    Tls(#[from] petrel_net::TlsError),
    /// A message could not be sent.
    #[error(transparent)]
    Ask(#[from] petrel_actors::AskError),
    /// The launched cluster failed.
    #[error(transparent)]
    Launch(#[from] crate::launcher::LaunchError),
    /// A raw quinn connection or stream failed.
    #[error("raw quinn: {0}")]
    Quinn(#[source] petrel_net::LinkCause),
    /// A file or runtime could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A measurement did not complete.
    #[error("{0}")]
    Incomplete(String),
    /// The figures could not be printed as JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl BenchError {
    fn quinn(e: impl Into<petrel_net::LinkCause>) -> Self {
        BenchError::Quinn(e.into())
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }
}
