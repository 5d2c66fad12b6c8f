//! [`CliError`]: every way a `petrel` command can fail, with its cause chain intact.

/// Why a `petrel` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Settings, a node, or an in-process cluster failed.
    #[error(transparent)]
    Node(#[from] petrel_actors::NodeError),
    /// `petrel run`'s launched cluster failed.
    #[error(transparent)]
    Launch(#[from] crate::launcher::LaunchError),
    /// Certificates could not be made or read.
    #[error(transparent)]
    Tls(#[from] petrel_net::NetError),
    /// Network namespaces could not be set up.
    #[error(transparent)]
    Netns(#[from] crate::netns::NetnsError),
    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(String),
    /// A file could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The runtime of a command could not start.
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A training app or a benchmark failed.
    #[error(transparent)]
    Command(petrel_actors::RoleError),
}

impl CliError {
    /// Wraps the error of an application command (`petrel train …`, a benchmark).
    pub fn command(error: impl Into<petrel_actors::RoleError>) -> Self {
        CliError::Command(error.into())
    }

    /// A failed write of `path`, for `map_err`.
    pub(crate) fn write(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| CliError::Write {
            path: path.to_path_buf(),
            source,
        }
    }
}
