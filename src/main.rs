//! The `petrel` command line.

use clap::{Parser, Subcommand};
use petrel::CliError;
use petrel::launcher::{self, LaunchOptions};
use petrel::netns::{Hosts, LinkShape};
use petrel_actors::topology::Wiring;
use petrel_actors::{NodeError, Settings, error_chain};
use petrel_net::ClusterCredentials;
use petrel_net::tls::ClusterCa;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "petrel",
    version,
    about = "Distributed machine learning on actors over QUIC"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Launch a whole cluster on this machine, one process per node.
    Run {
        /// Cluster settings (TOML).
        config: PathBuf,
        /// Directory for certificates and resolved settings (default: a temporary one).
        #[arg(long)]
        run_dir: Option<PathBuf>,
        /// Stop all nodes and fail after this many seconds.
        #[arg(long)]
        timeout_s: Option<u64>,
        /// Run every node as a thread of this process instead of separate processes.
        #[arg(long)]
        in_process: bool,
    },
    /// Run one node of a cluster (multi-host: start one on every host).
    Node {
        /// Cluster settings (TOML); `cluster.certs_dir` must hold this node's certificate.
        #[arg(long)]
        config: PathBuf,
        /// This node's name in the settings.
        #[arg(long)]
        name: String,
    },
    /// Create a cluster CA and one certificate per node.
    Certs {
        /// Output directory.
        #[arg(long)]
        dir: PathBuf,
        /// Node names (comma separated), or take them from --config.
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Emulated hosts in network namespaces (needs root).
    Netns {
        #[command(subcommand)]
        command: NetnsCommand,
    },
    /// Benchmarks: each prints a table and ends with one JSON line.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    // commands: applications -- systems add their subcommands below this line
    /// Train a model on a localhost cluster (parameter-server or STRADS apps).
    Train {
        #[command(subcommand)]
        app: TrainCommand,
    },
}

#[derive(Subcommand)]
enum NetnsCommand {
    /// Create N hosts (namespaces PREFIX-h0..) on a bridge, optionally rate-limited.
    Up {
        #[arg(long, default_value_t = 3)]
        hosts: usize,
        #[arg(long, default_value = "petrel")]
        prefix: String,
        #[arg(long)]
        rate_mbit: Option<f64>,
        #[arg(long)]
        delay_ms: Option<f64>,
    },
    /// Remove the hosts.
    Down {
        #[arg(long, default_value_t = 3)]
        hosts: usize,
        #[arg(long, default_value = "petrel")]
        prefix: String,
    },
}

#[derive(Subcommand)]
enum TrainCommand {
    /// Matrix factorization by SGD on the parameter server (BSP/SSP/ESSP/async).
    #[command(name = "ps-mf")]
    PsMf(petrel::ps::PsTrainArgs<petrel::ps::PsMfConfig>),
    /// Multinomial logistic regression (LIBSVM data) on the parameter server.
    #[command(name = "ps-lr")]
    PsLr(petrel::ps::PsTrainArgs<petrel::ps::PsLrConfig>),
    /// LDA by collapsed Gibbs sampling, data-parallel on the parameter server (SSP).
    #[command(name = "ps-lda")]
    PsLda(petrel::ps::PsTrainArgs<petrel::ps::PsLdaConfig>),
    /// Lasso by scheduled coordinate descent (STRADS): coefficients.tsv + metrics.json.
    Lasso(petrel::train::LassoTrainArgs),
    /// Matrix factorisation by CCD++ with block rotation (STRADS): factors + metrics.json.
    #[command(name = "strads-mf")]
    StradsMf(petrel::train::StradsMfTrainArgs),
    /// LDA by collapsed Gibbs sampling with word rotation (STRADS): topics + metrics.json.
    Lda(petrel::train::LdaTrainArgs),
    /// Sparse logistic regression by scheduled coordinate descent (Lasso options).
    Logistic(petrel::train::LassoTrainArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Raw quinn vs petrel messaging vs local sends, and priority under a backlog.
    Transport(petrel::bench::transport::TransportBenchArgs),
    /// A multi-process cluster under sustained load, sampling every node's memory.
    Soak(petrel::bench::soak::SoakBenchArgs),
    // bench: systems add their benchmarks below this line
    /// Parameter server: MF under BSP, SSP, ESSP and async with a straggler.
    Consistency(petrel::bench::consistency::ConsistencyBenchArgs),
    /// P3: sequential vs fifo vs priority-sliced parameter propagation on shaped links.
    P3(petrel::bench::p3::P3BenchArgs),
    /// STRADS Lasso: dynamic vs random vs cyclic scheduling to 1e-3 of the optimum.
    Lasso(petrel::bench::lasso::LassoBenchArgs),
    /// STRADS Lasso (1, 2, 4 workers) against single-threaded coordinate descent, by size.
    LassoScale(petrel::bench::lasso_scale::LassoScaleBenchArgs),
    /// STRADS Lasso with its coefficients split over 1, 2, 4 schedulers (depth 1 and 2).
    LassoSchedulers(petrel::bench::lasso_schedulers::LassoSchedulersBenchArgs),
    /// STRADS matrix factorisation (CCD++ with block rotation): RMSE against time.
    Mf(petrel::bench::mf::StradsMfBenchArgs),
    /// STRADS LDA (SparseLDA with word rotation): tokens/s and log-likelihood against time.
    Lda(petrel::bench::lda::LdaBenchArgs),
}

fn main() -> ExitCode {
    petrel::init_tracing();
    let cli = Cli::parse();
    if let Command::Node { config, name } = &cli.command {
        return node_command(config, name);
    }
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, ExitCode::FAILURE),
    }
}

/// The one line a failed command prints: the error and its causes, each once.
fn fail(error: &(dyn std::error::Error + 'static), code: ExitCode) -> ExitCode {
    eprintln!("error: {}", error_chain(error));
    code
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(CliError::Runtime)
}

/// `petrel node`: exits 0 when the run finished, 1 when it failed on this node, and
/// [`petrel::launcher::STOPPED_BY_PEER`] when another node's failure stopped it (so
/// `petrel run` names the node where the failure started).
fn node_command(config: &std::path::Path, name: &str) -> ExitCode {
    let settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return fail(&e, ExitCode::FAILURE),
    };
    let Some(dir) = settings.cluster.certs_dir.clone() else {
        let e = CliError::Usage(
            "cluster.certs_dir is not set; create certificates with `petrel certs`".into(),
        );
        return fail(&e, ExitCode::FAILURE);
    };
    let creds = match ClusterCredentials::load(&dir, name) {
        Ok(c) => c,
        Err(e) => return fail(&e, ExitCode::FAILURE),
    };
    match petrel::roles::builtin(settings).run_node(name, Wiring::Quic(creds)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ (NodeError::PeerFailed { .. } | NodeError::RunFailed { .. })) => {
            fail(&e, ExitCode::from(petrel::launcher::STOPPED_BY_PEER))
        }
        Err(e) => fail(&e, ExitCode::FAILURE),
    }
}

fn dispatch(command: Command) -> Result<(), CliError> {
    match command {
        Command::Run {
            config,
            run_dir,
            timeout_s,
            in_process,
        } => {
            if in_process {
                let settings = Settings::load(&config)?;
                return Ok(petrel::roles::builtin(settings).run_in_process()?);
            }
            let mut opts = LaunchOptions::new()?;
            opts.run_dir = run_dir;
            opts.timeout = timeout_s.map(Duration::from_secs);
            let report = tokio_runtime()?.block_on(launcher::run(&config, opts))?;
            for (name, t) in &report.nodes {
                tracing::info!(node = %name, seconds = format!("{:.2}", t.as_secs_f64()), "node finished");
            }
            tracing::info!(
                "cluster finished; run directory {}",
                report.run_dir.display()
            );
            Ok(())
        }
        // main() runs `petrel node` through node_command for its exit codes.
        Command::Node { name, .. } => Err(CliError::Usage(format!(
            "`petrel node --name {name}` runs in main"
        ))),
        Command::Certs { dir, nodes, config } => {
            let mut names = nodes;
            if let Some(c) = config {
                let s = Settings::load(&c)?;
                names.extend(s.nodes.iter().map(|n| n.name.clone()));
            }
            if names.is_empty() {
                return Err(CliError::Usage(
                    "name the nodes with --nodes a,b,c or --config".into(),
                ));
            }
            let ca = match ClusterCa::load(&dir) {
                Ok(ca) => ca,
                Err(_) => {
                    let ca = ClusterCa::generate()?;
                    ca.write(&dir)?;
                    ca
                }
            };
            for n in &names {
                ca.issue(n).and_then(|c| c.write(&dir, n))?;
            }
            println!(
                "wrote CA and {} node certificates to {}",
                names.len(),
                dir.display()
            );
            Ok(())
        }
        Command::Netns { command } => match command {
            NetnsCommand::Up {
                hosts,
                prefix,
                rate_mbit,
                delay_ms,
            } => {
                let h = Hosts::up(
                    &prefix,
                    hosts,
                    &LinkShape {
                        rate_mbit,
                        delay_ms,
                    },
                )?;
                for i in 0..h.count {
                    println!("{} {}", h.host_ns(i), h.host_ip(i));
                }
                Ok(())
            }
            NetnsCommand::Down { hosts, prefix } => {
                Hosts {
                    prefix,
                    count: hosts,
                }
                .down();
                Ok(())
            }
        },
        Command::Bench { command } => match command {
            BenchCommand::Transport(args) => Ok(petrel::bench::transport::run(args)?),
            BenchCommand::Soak(args) => Ok(petrel::bench::soak::run(args)?),
            // bench dispatch: systems add their arms below this line; each maps its own error
            // type with `CliError::command`.
            BenchCommand::Consistency(args) => {
                petrel::bench::consistency::run(args).map_err(CliError::command)
            }
            BenchCommand::P3(args) => petrel::bench::p3::run(args).map_err(CliError::command),
            BenchCommand::Lasso(args) => petrel::bench::lasso::run(args).map_err(CliError::command),
            BenchCommand::LassoScale(args) => {
                petrel::bench::lasso_scale::run(args).map_err(CliError::command)
            }
            BenchCommand::LassoSchedulers(args) => {
                petrel::bench::lasso_schedulers::run(args).map_err(CliError::command)
            }
            BenchCommand::Mf(args) => petrel::bench::mf::run(args).map_err(CliError::command),
            BenchCommand::Lda(args) => petrel::bench::lda::run(args).map_err(CliError::command),
        },
        // commands dispatch: applications add their arms below this line; each maps its own
        // error type with `CliError::command`.
        Command::Train { app } => match app {
            TrainCommand::PsMf(args) => train_ps::<petrel::ps::PsMf>(args),
            TrainCommand::PsLr(args) => train_ps::<petrel::ps::PsLr>(args),
            TrainCommand::PsLda(args) => train_ps::<petrel::ps::PsLda>(args),
            TrainCommand::Lasso(args) => {
                petrel::train::train_lasso(args).map_err(CliError::command)
            }
            TrainCommand::StradsMf(args) => {
                petrel::train::train_mf(args).map_err(CliError::command)
            }
            TrainCommand::Lda(args) => petrel::train::train_lda(args).map_err(CliError::command),
            TrainCommand::Logistic(args) => {
                petrel::train::train_logistic(args).map_err(CliError::command)
            }
        },
    }
}

/// `petrel train ps-*`: runs the parameter-server app in process and prints its summary.
fn train_ps<A: petrel::ps::PsApp>(
    args: petrel::ps::PsTrainArgs<A::Config>,
) -> Result<(), CliError> {
    let summary = petrel::ps::train::<A>(args).map_err(CliError::command)?;
    println!("{summary}");
    Ok(())
}
