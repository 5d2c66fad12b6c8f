//! [`CliError`]: every way a `petrel` command (`run`, `train`, `eval`, `predict`, a
//! benchmark) fails, with its cause chain intact.

use crate::netns::NetnsError;
use petrel_actors::NodeError;
use petrel_ml::job::InvalidSetting;
use std::path::{Path, PathBuf};

/// Why a `petrel` command refused its input or failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The job file or the environment did not parse.
    #[error("{origin}: {source}")]
    Parse {
        /// Where the text came from (the file, or the environment).
        origin: String,
        /// The parser's error.
        #[source]
        source: Box<config::ConfigError>,
    },
    /// The job file's top level has a table that no job reads.
    #[error(
        "{}: unknown table [{key}]; a job file holds [app.{section}] (and may hold [cluster], [[nodes]] and [net] for `petrel run`)",
        file.display()
    )]
    UnknownTable {
        /// The job file.
        file: PathBuf,
        /// The unknown table.
        key: String,
        /// The section the app reads.
        section: &'static str,
    },
    /// The job file configures another app.
    #[error("{}: [app.{found}] is not read by this app; it reads [app.{section}]", file.display())]
    OtherApp {
        /// The job file.
        file: PathBuf,
        /// The section found.
        found: String,
        /// The section the app reads.
        section: &'static str,
    },
    /// The merged section does not fit the app's settings.
    #[error("[app.{section}]{origin}: {source}")]
    Section {
        /// The section the app reads.
        section: &'static str,
        /// Where the text came from (the file, or the environment).
        origin: String,
        /// The decoder's error.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The flags could not be represented as settings (a bug, not a user error).
    #[error("encoding the flags: {0}")]
    Flags(#[source] serde_json::Error),
    /// The merged settings could not be represented as TOML (a bug, not a user error).
    #[error("encoding the settings: {0}")]
    Encode(#[source] toml::ser::Error),
    /// Neither `--out` nor `out` in the job file (the app's section).
    #[error("no output directory: give --out DIR (or `out` in [app.{0}])")]
    OutDirMissing(&'static str),
    /// The output directory could not be created, resolved or written to.
    #[error("output directory {}: {source}", path.display())]
    OutDirUnusable {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A setting's value cannot be right.
    #[error("{app}: invalid setting {source}")]
    Setting {
        /// The app.
        app: &'static str,
        /// The setting and why.
        #[source]
        source: InvalidSetting,
    },
    /// A setting of a P3 job out of its range, named as in `[app.p3]`.
    #[error("[app.p3] {0}")]
    P3Setting(#[source] InvalidSetting),
    /// The data does not fit the app.
    #[error("{app}: {source}")]
    Data {
        /// The app.
        app: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// More workers than units of data to split.
    #[error("{app}: {workers} workers but only {count} {what}; use --workers {count} or fewer")]
    TooManyWorkers {
        /// The app.
        app: &'static str,
        /// The workers asked for.
        workers: usize,
        /// The units of data.
        count: usize,
        /// What the units are.
        what: &'static str,
    },
    /// The flags or a benchmark's arguments ask for something impossible.
    #[error("{0}")]
    Usage(String),
    /// A flag of a P3 job or benchmark out of its range.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// A STRADS job failed.
    #[error(transparent)]
    Strads(#[from] petrel_strads::StradsError),
    /// A parameter-server run failed.
    #[error(transparent)]
    Ps(#[from] petrel_ps::PsError),
    /// A parameter-server run (the LDA benchmark's comparison) failed.
    #[error("parameter server: {0}")]
    ParameterServer(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A P3 job, its network or its data failed.
    #[error(transparent)]
    P3(#[from] petrel_p3::P3Error),
    /// The P3 model profile could not be read, or P3's automatic slice size failed.
    #[error(transparent)]
    P3Core(#[from] petrel_p3::P3CoreError),
    /// The cluster failed, or its settings could not be built or written.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The node processes failed, or ran past their time limit.
    #[error(transparent)]
    Launch(#[from] crate::launcher::LaunchError),
    /// `--netns` on a machine without network namespaces (or without root).
    #[error("--netns needs network namespaces")]
    NetnsUnavailable(#[source] NetnsError),
    /// The network namespaces could not be created.
    #[error("cannot create network namespaces")]
    Namespaces(#[source] NetnsError),
    /// The job failed more often than `--max-restarts` allows.
    #[error("{source} (gave up after {restarts} restart(s); raise --max-restarts to try more)")]
    Restarts {
        /// Restarts tried.
        restarts: u32,
        /// The last attempt's failure.
        #[source]
        source: Box<CliError>,
    },
    /// A file or directory could not be read, created or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (the metrics) could not be read or written.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file or directory.
        path: PathBuf,
        /// The encoder's or decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The JSON figures could not be printed.
    #[error("JSON output")]
    JsonOutput(#[source] serde_json::Error),
    /// The model file cannot be used, the data file cannot be read, or the data does not
    /// fit the saved model.
    #[error(transparent)]
    Ml(#[from] petrel_ml::MlError),
    /// A plot could not be drawn.
    #[error("{}: {reason}", path.display())]
    Plot {
        /// The plot file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The job has no output directory.
    #[error("the job needs an output directory")]
    NoOutputDir,
    /// A job needs at least one worker.
    #[error("need at least one worker")]
    NoWorkers,
    /// A P3 worker reported no measured iteration.
    #[error("no measured iterations")]
    NoMeasuredIterations,
    /// A P3 bandwidth sweep produced no point.
    #[error("no bandwidth point")]
    NoBandwidthPoint,
    /// Certificates could not be made or read (`petrel certs`, `petrel run`).
    #[error(transparent)]
    Net(#[from] petrel_net::NetError),
    /// Network namespaces could not be set up.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A benchmark, the dashboard or a role failed with its own error.
    #[error(transparent)]
    Command(petrel_actors::RoleError),
}

impl CliError {
    /// Wraps the error of a benchmark, the dashboard or a role.
    pub fn command(error: impl Into<petrel_actors::RoleError>) -> Self {
        CliError::Command(error.into())
    }

    /// An I/O error on `path`, for `map_err`.
    pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| CliError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A JSON error of file `path` (empty: no file), for `map_err`.
    pub fn json(path: &Path) -> impl FnOnce(serde_json::Error) -> Self + '_ {
        move |source| CliError::Json {
            path: path.to_path_buf(),
            source,
        }
    }

    /// True when a node died (or the fault-injection hook fired): only then can a restart help.
    pub fn is_node_death(&self) -> bool {
        match self {
            CliError::Node(NodeError::PeerFailed { .. })
            | CliError::Ps(petrel_ps::PsError::Node(NodeError::PeerFailed { .. })) => true,
            CliError::Launch(e) => crate::recovery::launch_failed_by_node_death(e),
            other => petrel_actors::error_chain(other).contains("fault injection"),
        }
    }
}
