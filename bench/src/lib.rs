//! petrel's benchmarks: `petrel bench <name>` (or the `petrel-bench` binary itself). Each
//! prints a human table and ends with one JSON line of figures; [`BenchCommand`] lists
//! them. The binary is also the whole `petrel` command line, so the node processes a bench
//! launches run its roles ([`register_roles`]) as well as the built-in ones.

// The benches return `BenchError` or the facade's `CliError`, which clippy finds large.
#![allow(clippy::result_large_err)]

use petrel::CliError;

// The benches the tests drive document their own items.
#[allow(missing_docs)]
pub mod adarevision;
#[allow(missing_docs)]
pub mod balance;
#[allow(missing_docs)]
pub mod consistency;
#[allow(missing_docs)]
pub mod elastic;
mod elastic_p3;
mod elastic_ps;
#[allow(missing_docs)]
pub mod lasso_scale;
#[allow(missing_docs)]
pub mod lda_scale;
#[allow(missing_docs)]
pub mod managed;
#[allow(missing_docs)]
pub mod mf_scale;

mod chaos;
mod common;
mod lasso;
mod lasso_schedulers;
mod lda;
mod load;
mod logistic_scale;
mod memory_bandwidth;
mod mf;
mod p3;
mod p3_real;
mod performance;
mod ps;
mod reproduce;
mod scale;
mod soak;
mod transport;

/// Why a runtime benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up a node or an actor failed.
    #[error(transparent)]
    Node(#[from] petrel_actors::NodeError),
    /// A transport could not start, or certificates could not be made.
    #[error(transparent)]
    Net(#[from] petrel_net::NetError),
    /// A message could not be sent.
    #[error(transparent)]
    Ask(#[from] petrel_actors::AskError),
    /// The launched cluster failed.
    #[error(transparent)]
    Launch(#[from] petrel::launcher::LaunchError),
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
    /// A measurement did not complete, or its figures cannot be read.
    #[error("{0}")]
    Incomplete(String),
    /// The figures could not be printed as JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A parameter-server run failed (`what`: the app, variant or setting it ran).
    #[error("{what}")]
    Run {
        /// What ran.
        what: String,
        /// Why.
        #[source]
        source: petrel_ps::PsError,
    },
    /// A plot could not be drawn.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The SVG file.
        path: String,
        /// The plotting library's message.
        reason: String,
    },
    /// A data file could not be loaded.
    #[error(transparent)]
    Ml(#[from] petrel_ml::MlError),
    /// A `--net KEY=VALUE` override does not name a `[net]` knob or has a bad value.
    #[error("--net {given}: {reason}")]
    NetOverride {
        /// The override as given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<BenchError> for CliError {
    fn from(e: BenchError) -> Self {
        CliError::command(e)
    }
}

/// A cluster `name` on this host: per `(node, role)` one node on 127.0.0.1.
pub(crate) fn local_settings<'a>(
    name: &str,
    nodes: impl IntoIterator<Item = (String, &'a str)>,
) -> petrel_actors::Settings {
    let mut settings = petrel_actors::Settings::default();
    settings.cluster.name = name.into();
    settings.nodes = nodes
        .into_iter()
        .map(|(name, role)| petrel_actors::NodeSpec {
            name,
            addr: "127.0.0.1:0".into(),
            roles: vec![role.into()],
            ..Default::default()
        })
        .collect();
    settings
}

/// Starts the node processes of `settings` in the run directory `dir` (made first),
/// without progress bars.
pub(crate) async fn launch(
    settings: petrel_actors::Settings,
    dir: &std::path::Path,
) -> Result<petrel::launcher::Running, BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(dir.display().to_string()))?;
    let mut opts = petrel::launcher::LaunchOptions::new()?;
    opts.run_dir = Some(dir.to_path_buf());
    opts.progress = false;
    Ok(petrel::launcher::start(settings, opts).await?)
}

impl BenchError {
    fn quinn(e: impl Into<petrel_net::LinkCause>) -> Self {
        BenchError::Quinn(e.into())
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }

    /// A failed parameter-server run of `what`, for `map_err`.
    fn run(what: impl std::fmt::Display) -> impl FnOnce(petrel_ps::PsError) -> Self {
        move |source| BenchError::Run {
            what: what.to_string(),
            source,
        }
    }

    /// A plot of `path` that could not be drawn, for `map_err`.
    fn plot(path: &std::path::Path) -> impl FnOnce(petrel::CliError) -> Self {
        move |e| BenchError::Plot {
            path: path.display().to_string(),
            reason: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn net_overrides_apply_and_bad_ones_name_the_key() {
        let net_config = |net: &[String]| crate::common::NetArgs { net: net.to_vec() }.config();
        let cfg = net_config(&[
            "max_udp_payload=65527".into(),
            "congestion=bbr".into(),
            "segmentation_offload=false".into(),
        ])
        .unwrap();
        assert_eq!(cfg.max_udp_payload, 65527);
        assert_eq!(cfg.congestion, petrel_net::Congestion::Bbr);
        assert!(!cfg.segmentation_offload);
        let err = net_config(&["max_udp_paylod=1".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_udp_paylod"), "{err}");
        assert!(net_config(&["threads".into()]).is_err());
        assert!(net_config(&["threads=many".into()]).is_err());
    }
}

/// Declares [`BenchCommand`], one variant a bench, and [`run`], which calls the bench's
/// module's `run` (its error a [`BenchError`] or a [`CliError`]).
macro_rules! benches {
    ($($(#[$attr:meta])* $variant:ident($module:ident::$args:ident),)*) => {
        /// `petrel bench <name>`: one variant a bench.
        #[derive(clap::Subcommand)]
        #[allow(missing_docs)]
        pub enum BenchCommand {
            $($(#[$attr])* $variant(crate::$module::$args),)*
        }

        /// Runs one bench.
        pub fn run(command: BenchCommand) -> Result<(), CliError> {
            match command {
                $(BenchCommand::$variant(args) => {
                    crate::$module::run(args).map_err(Into::into)
                })*
            }
        }
    };
}

benches! {
    /// Raw quinn vs petrel messaging vs local sends, and priority under a backlog.
    Transport(transport::TransportBenchArgs),
    /// A multi-process cluster under sustained load, sampling every node's memory.
    Soak(soak::SoakBenchArgs),
    /// Kill, pause, attack and (as root) cut the links of random nodes of multi-process
    /// jobs; every run must recover.
    Chaos(chaos::ChaosBenchArgs),
    /// Parameter-server push+pull per row size over QUIC, separate processes, beside the
    /// transport ceiling (and a peer such as ps-lite).
    Ps(ps::PsBenchArgs),
    /// Parameter server: MF and LR under BSP, SSP(s), ESSP(s) and async with stragglers.
    Consistency(consistency::ConsistencyBenchArgs),
    /// Parameter server: clock-boundary vs managed (fifo, relative-magnitude) communication.
    Managed(managed::ManagedBenchArgs),
    /// Parameter server: AdaRevision vs the best fixed and Adagrad step of a grid.
    Adarevision(adarevision::AdaRevisionBenchArgs),
    /// Writes docs/REPRODUCING.md and the performance page (BENCHMARKS.md) from the
    /// benches' JSON figures and records.
    Report(reproduce::ReportArgs),
    /// Runs a bench and records its JSON line, command, date and machine for the
    /// performance page (`docs/figures/perf/<name>.json`).
    Record(performance::RecordArgs),
    /// P3: sequential vs fifo vs priority-sliced parameter propagation on shaped links.
    P3(p3::P3BenchArgs),
    /// P3 on real compute: candle ResNet-18/VGG-11 layouts, 2 workers + 2 shards as
    /// processes, sequential vs fifo vs p3 images/s and test accuracy side by side.
    #[command(name = "p3-real")]
    P3Real(p3_real::P3RealBenchArgs),
    /// STRADS Lasso: dynamic vs random vs cyclic scheduling to 1e-3 of the optimum.
    Lasso(lasso::LassoBenchArgs),
    /// STRADS Lasso (1, 2, 4 workers) against single-threaded coordinate descent, by size.
    LassoScale(lasso_scale::LassoScaleBenchArgs),
    /// STRADS sparse logistic regression (Gauss-Seidel, 1, 2, 4 workers) against
    /// single-threaded coordinate descent, by size.
    LogisticScale(logistic_scale::LogisticScaleBenchArgs),
    /// STRADS Lasso with its coefficients split over 1, 2, 4 schedulers (depth 1 and 2).
    LassoSchedulers(lasso_schedulers::LassoSchedulersBenchArgs),
    /// STRADS with one worker slowed 2x: static against dynamic dealing (by measured
    /// worker speed), time and final objective side by side.
    Balance(balance::BalanceBenchArgs),
    /// STRADS Lasso and logistic regression, ps-lr and ps-mf with a worker joining and one
    /// leaving mid-run (ps-lr and ps-mf also a shard) against a fixed membership: same
    /// model, time lost per change, orphans, hangs.
    Elastic(elastic::ElasticBenchArgs),
    /// STRADS matrix factorisation (CCD++ with block rotation): RMSE against time.
    Mf(mf::StradsMfBenchArgs),
    /// STRADS LDA (SparseLDA with word rotation): tokens/s and log-likelihood against time.
    Lda(lda::LdaBenchArgs),
    /// STRADS LDA: tokens/s per core against corpus size, for 1, 2, 4 workers.
    LdaScale(lda_scale::LdaScaleBenchArgs),
    /// STRADS MF (CCD++): seconds to a target RMSE and ratings/s per core against data
    /// size, for 1, 2, 4 workers.
    MfScale(mf_scale::MfScaleBenchArgs),
    /// Data loading: LIBSVM, ratings and bag-of-words MB/s, cold and from the binary cache.
    Load(load::LoadBenchArgs),
}

/// `petrel bench ARGS…` (ARGS without the program name): parses them as a [`BenchCommand`]
/// (help and bad flags print and exit, as clap does) and runs it.
pub fn run_args(args: Vec<std::ffi::OsString>) -> Result<(), CliError> {
    #[derive(clap::Parser)]
    #[command(
        name = "petrel bench",
        about = "petrel's benchmarks: each prints a table and ends with one JSON line"
    )]
    struct BenchCli {
        #[command(subcommand)]
        command: BenchCommand,
    }
    let cli = <BenchCli as clap::Parser>::try_parse_from(
        std::iter::once(std::ffi::OsString::from("petrel bench")).chain(args),
    )
    .unwrap_or_else(|e| e.exit());
    run(cli.command)
}

/// Adds the roles the benches' clusters run (the parameter-server bench's shard and worker).
pub fn register_roles(cluster: petrel::actors::Cluster) -> petrel::actors::Cluster {
    ps::register(cluster)
}
