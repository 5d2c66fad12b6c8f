//! The `petrel` command line.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use petrel::CliError;
use petrel::launcher::{self, LaunchError, LaunchMode, LaunchOptions};
use petrel::netns::{Hosts, LinkShape};
use petrel::observe::heap::CountingAllocator;
use petrel_actors::{NodeError, Settings, error_chain, validate_node_name};
use petrel_net::tls::ClusterCa;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The system allocator, counted: every node records its heap's peak beside its RSS
/// (`petrel_observe::heap`).
#[global_allocator]
static HEAP: CountingAllocator = CountingAllocator;

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
        /// Serve a live dashboard at ADDR (default 127.0.0.1 on a free port; the URL is
        /// printed) and leave it as dashboard.html in --run-dir (else the current directory).
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
        dashboard: Option<String>,
        /// Launch the whole cluster again, from the start, this many times when a node dies
        /// (killed by a signal or silent past the failure timeout; a role's own error is
        /// never retried). 0 = stop at the first failure.
        #[arg(long, default_value_t = 2)]
        max_restarts: u32,
        /// Run node i (in the order of the file's [[nodes]]) in network namespace
        /// PREFIX-h{i} at 198.18.0.{i+1}:7000, one emulated host per node (made by `petrel
        /// netns up --prefix PREFIX --hosts N`; needs root).
        #[arg(long, value_name = "PREFIX", conflicts_with = "in_process")]
        netns: Option<String>,
        /// Give no default checkpoints: by default every `[app.*]` section of an app that
        /// checkpoints (lasso, logistic, strads_mf, lda, mf, lr, ps_lda) and names no
        /// `checkpoint_dir` writes them to RUN_DIR/checkpoints/<section>, so a restart
        /// rolls back to the newest one. (`checkpoint_every = 0` in a section turns them
        /// off for that section.)
        #[arg(long)]
        no_checkpoints: bool,
    },
    /// Run one node of a cluster (multi-host: start one on every host).
    Node {
        /// Cluster settings (TOML); `cluster.certs_dir` (relative to this file) must hold
        /// this node's certificate.
        #[arg(long)]
        config: PathBuf,
        /// This node's name in the settings (default: the node at position RANK or
        /// SLURM_PROCID, else the node named like this host).
        #[arg(long)]
        name: Option<String>,
        /// Serve OpenMetrics text at http://ADDR/metrics (overrides the node's
        /// `metrics_addr`; off unless one of them is set).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<String>,
    },
    /// Create a cluster CA and one certificate per node.
    Certs {
        /// Output directory.
        #[arg(long)]
        dir: PathBuf,
        /// Node names (comma separated), or take them from --config.
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Cluster settings whose nodes get certificates.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also write one directory per node, DIR/bundles/NODE, with only what that host
        /// needs: ca.pem, NODE.pem, NODE.key and (with --config) a cluster.toml whose
        /// certs_dir is the bundle itself. Copy it to the host and run
        /// `petrel node --config NODE/cluster.toml`.
        #[arg(long)]
        bundle: bool,
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
        /// Serve a live dashboard at ADDR (default 127.0.0.1 on a free port; the URL is
        /// printed) and leave it as dashboard.html in the output directory.
        #[arg(long, global = true, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
        dashboard: Option<String>,
        /// Draw the run's history (objective, RMSE, log-loss or log-likelihood against
        /// seconds) into this SVG file when it ends (needs --out).
        #[arg(long, global = true, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// With `--transport processes` (always for p3): run node i in network namespace
        /// PREFIX-h{i} at 198.18.0.{i+1}:7000, one emulated host per node (made by `petrel
        /// netns up --prefix PREFIX --hosts N`; needs root).
        #[arg(long, global = true, value_name = "PREFIX")]
        netns: Option<String>,
        #[command(subcommand)]
        app: Box<TrainCommand>,
    },
    /// Held-out figures of a trained model on a data file (RMSE, accuracy and log-loss,
    /// R^2, perplexity...).
    Eval(petrel::train::saved::EvalArgs),
    /// Predictions of a trained model: values, class probabilities, ratings or top-N
    /// items, topic mixtures of new documents.
    Predict(petrel::train::saved::PredictArgs),
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
    /// P3: a candle model (mlp, lenet, resnet18, vgg11) data-parallel on worker and shard
    /// processes on 127.0.0.1, --mode sequential|fifo|p3.
    P3(petrel::bench::p3_real::P3TrainArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Raw quinn vs petrel messaging vs local sends, and priority under a backlog.
    Transport(petrel::bench::transport::TransportBenchArgs),
    /// A multi-process cluster under sustained load, sampling every node's memory.
    Soak(petrel::bench::soak::SoakBenchArgs),
    /// Kill, pause, attack and (as root) cut the links of random nodes of multi-process
    /// jobs; every run must recover.
    Chaos(petrel::bench::chaos::ChaosBenchArgs),
    // bench: systems add their benchmarks below this line
    /// Parameter-server push+pull per row size over QUIC, separate processes, beside the
    /// transport ceiling (and a peer such as ps-lite).
    Ps(petrel::bench::ps::PsBenchArgs),
    /// Parameter server: MF and LR under BSP, SSP(s), ESSP(s) and async with stragglers.
    Consistency(petrel::bench::consistency::ConsistencyBenchArgs),
    /// Parameter server: clock-boundary vs managed (fifo, relative-magnitude) communication.
    Managed(petrel::bench::managed::ManagedBenchArgs),
    /// Parameter server: AdaRevision vs the best fixed and Adagrad step of a grid.
    Adarevision(petrel::bench::adarevision::AdaRevisionBenchArgs),
    /// Writes docs/REPRODUCING.md from the benches' JSON figures.
    Report(petrel::bench::reproduce::ReportArgs),
    /// P3: sequential vs fifo vs priority-sliced parameter propagation on shaped links.
    P3(petrel::bench::p3::P3BenchArgs),
    /// P3 on real compute: candle ResNet-18/VGG-11 layouts, 2 workers + 2 shards as
    /// processes, sequential vs fifo vs p3 images/s and test accuracy side by side.
    #[command(name = "p3-real")]
    P3Real(petrel::bench::p3_real::P3RealBenchArgs),
    /// STRADS Lasso: dynamic vs random vs cyclic scheduling to 1e-3 of the optimum.
    Lasso(petrel::bench::lasso::LassoBenchArgs),
    /// STRADS Lasso (1, 2, 4 workers) against single-threaded coordinate descent, by size.
    LassoScale(petrel::bench::lasso_scale::LassoScaleBenchArgs),
    /// STRADS sparse logistic regression (Gauss-Seidel, 1, 2, 4 workers) against
    /// single-threaded coordinate descent, by size.
    LogisticScale(petrel::bench::logistic_scale::LogisticScaleBenchArgs),
    /// STRADS Lasso with its coefficients split over 1, 2, 4 schedulers (depth 1 and 2).
    LassoSchedulers(petrel::bench::lasso_schedulers::LassoSchedulersBenchArgs),
    /// STRADS matrix factorisation (CCD++ with block rotation): RMSE against time.
    Mf(petrel::bench::mf::StradsMfBenchArgs),
    /// STRADS LDA (SparseLDA with word rotation): tokens/s and log-likelihood against time.
    Lda(petrel::bench::lda::LdaBenchArgs),
    /// STRADS LDA: tokens/s per core against corpus size, for 1, 2, 4 workers.
    LdaScale(petrel::bench::lda_scale::LdaScaleBenchArgs),
    /// STRADS MF (CCD++): seconds to a target RMSE and ratings/s per core against data
    /// size, for 1, 2, 4 workers.
    MfScale(petrel::bench::mf_scale::MfScaleBenchArgs),
}

fn main() -> ExitCode {
    petrel::observe::heap::mark_installed();
    petrel::keep_large_buffers();
    petrel::init_tracing();
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Command::Node {
        config,
        name,
        metrics_addr,
    } = &cli.command
    {
        if let Some(addr) = metrics_addr {
            petrel_observe::set_process_metrics_addr(addr);
        }
        return node_command(config, name.as_deref());
    }
    // `petrel train APP`: the flags given on the command line override the job file.
    let given = match matches.subcommand() {
        Some(("train", train)) => train
            .subcommand()
            .map(|(_, app)| petrel::train::jobfile::given_ids(app))
            .unwrap_or_default(),
        _ => BTreeSet::new(),
    };
    match dispatch(cli.command, &given) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, ExitCode::FAILURE),
    }
}

/// The one line a failed command prints: the error and its causes, each once.
fn fail(error: &(dyn std::error::Error + 'static), code: ExitCode) -> ExitCode {
    eprintln!("error: {}", error_chain(error));
    code
}

/// `petrel node`: exits 0 when the run finished, 1 when it failed on this node, and
/// [`petrel::launcher::STOPPED_BY_PEER`] when another node's failure stopped it (so
/// `petrel run` names the node where the failure started). Under `petrel run` the launcher
/// prints the error; alone, this prints it.
fn node_command(config: &std::path::Path, name: Option<&str>) -> ExitCode {
    let settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return fail(&e, ExitCode::FAILURE),
    };
    let mode = LaunchMode::Node {
        name: name.map(str::to_string),
        config: config.to_path_buf(),
    };
    let opts = match LaunchOptions::new() {
        Ok(o) => o,
        Err(e) => return fail(&e, ExitCode::FAILURE),
    };
    match launcher::launch_with(&petrel::roles::builtin(settings), mode, opts) {
        Ok(_) => ExitCode::SUCCESS,
        Err(
            e @ LaunchError::Settings(NodeError::PeerFailed { .. } | NodeError::RunFailed { .. }),
        ) => fail(&e, ExitCode::from(petrel::launcher::STOPPED_BY_PEER)),
        Err(e) => fail(&e, ExitCode::FAILURE),
    }
}

fn dispatch(command: Command, given: &BTreeSet<String>) -> Result<(), CliError> {
    match command {
        Command::Run {
            config,
            run_dir,
            timeout_s,
            in_process,
            dashboard,
            max_restarts,
            netns,
            no_checkpoints,
        } => {
            let mut settings = Settings::load(&config)?;
            let report_dir = run_dir.clone();
            // Checkpoints by default, in the job's run directory (kept across restarts: a
            // temporary one for the whole job when --run-dir is not given).
            let mut temp_run_dir = None;
            let wants = |name: &str, section: &serde_json::Value| {
                !no_checkpoints && petrel::train::apps::checkpoints_by_default(name, section)
            };
            let run_dir = match run_dir {
                None if settings.app.iter().any(|(n, s)| wants(n, s)) => {
                    let t = tempfile::Builder::new()
                        .prefix(&format!("petrel-run-{}-", settings.cluster.name))
                        .tempdir()
                        .map_err(|source| CliError::Write {
                            path: std::env::temp_dir(),
                            source,
                        })?;
                    let path = t.path().to_path_buf();
                    temp_run_dir = Some(t);
                    Some(path)
                }
                other => other,
            };
            if let Some(dir) = &run_dir {
                let root = default_checkpoint_root(dir)?;
                let (app, given) =
                    petrel::recovery::with_default_checkpoint_dirs(&settings.app, &root, wants);
                // A fresh job never rolls back to an earlier job's checkpoints.
                for d in &given {
                    if d.exists() {
                        std::fs::remove_dir_all(d).map_err(|source| CliError::Write {
                            path: d.clone(),
                            source,
                        })?;
                    }
                    tracing::info!(dir = %d.display(), "checkpoints by default");
                }
                settings.app = app;
            }
            let cluster = petrel::roles::builtin(settings);
            let dashboard =
                start_dashboard(dashboard.as_deref(), &cluster.settings().cluster.name)?;
            // A section with a `checkpoint_dir` (its own or the default) restarts from its
            // newest checkpoint (`resume = true`), any other from the start.
            let checkpoints = petrel::recovery::checkpoint_dirs(&cluster.settings().app);
            let result = petrel::recovery::run_with_restarts(
                max_restarts,
                petrel::recovery::launch_failed_by_node_death,
                || {
                    checkpoints
                        .iter()
                        .any(|d| petrel::recovery::has_checkpoint(d))
                },
                |resume, _| {
                    let mut settings = cluster.settings().clone();
                    if resume {
                        settings.app = petrel::recovery::resuming(&settings.app);
                        println!("restarting the cluster from the newest checkpoint");
                    }
                    let cluster = cluster.with_settings(settings);
                    run_cluster(
                        &cluster,
                        run_dir.clone(),
                        timeout_s,
                        in_process,
                        netns.clone(),
                    )
                },
            );
            let result = match result {
                Ok(((), 0)) => Ok(()),
                Ok(((), restarts)) => {
                    println!("cluster finished after {restarts} restart(s)");
                    Ok(())
                }
                Err(petrel::recovery::RecoveryError::Fatal(e)) => Err(e.into()),
                Err(exhausted) => Err(CliError::command(exhausted)),
            };
            finish_dashboard(dashboard, report_dir)?;
            drop(temp_run_dir);
            result
        }
        // main() runs `petrel node` through node_command for its exit codes.
        Command::Node { .. } => Err(CliError::Usage("`petrel node` runs in main".into())),

        Command::Certs {
            dir,
            nodes,
            config,
            bundle,
        } => certs_command(&dir, nodes, config.as_deref(), bundle),
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
                        queue_ms: None,
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
            BenchCommand::Chaos(args) => Ok(petrel::bench::chaos::run(args)?),
            // bench dispatch: systems add their arms below this line; each maps its own error
            // type with `CliError::command`.
            BenchCommand::Ps(args) => Ok(petrel::bench::ps::run(args)?),
            BenchCommand::Consistency(args) => {
                petrel::bench::consistency::run(args).map_err(CliError::command)
            }
            BenchCommand::Managed(args) => {
                petrel::bench::managed::run(args).map_err(CliError::command)
            }
            BenchCommand::Adarevision(args) => {
                petrel::bench::adarevision::run(args).map_err(CliError::command)
            }
            BenchCommand::Report(args) => {
                petrel::bench::reproduce::run(args).map_err(CliError::command)
            }
            BenchCommand::P3(args) => petrel::bench::p3::run(args).map_err(CliError::command),
            BenchCommand::P3Real(args) => {
                petrel::bench::p3_real::run(args).map_err(CliError::command)
            }
            BenchCommand::Lasso(args) => petrel::bench::lasso::run(args).map_err(CliError::command),
            BenchCommand::LassoScale(args) => {
                petrel::bench::lasso_scale::run(args).map_err(CliError::command)
            }
            BenchCommand::LogisticScale(args) => {
                petrel::bench::logistic_scale::run(args).map_err(CliError::command)
            }
            BenchCommand::LassoSchedulers(args) => {
                petrel::bench::lasso_schedulers::run(args).map_err(CliError::command)
            }
            BenchCommand::Mf(args) => petrel::bench::mf::run(args).map_err(CliError::command),
            BenchCommand::Lda(args) => petrel::bench::lda::run(args).map_err(CliError::command),
            BenchCommand::LdaScale(args) => {
                petrel::bench::lda_scale::run(args).map_err(CliError::command)
            }
            BenchCommand::MfScale(args) => {
                petrel::bench::mf_scale::run(args).map_err(CliError::command)
            }
        },
        // commands dispatch: applications add their arms below this line; each maps its own
        // error type with `CliError::command`.
        Command::Train {
            dashboard,
            plot,
            netns,
            app,
        } => {
            if let Some(prefix) = &netns {
                runs_node_processes(&app)?;
                petrel::launcher::set_default_netns(prefix);
            }
            let report_dir = train_out_dir(&app);
            if plot.is_some() && report_dir.is_none() {
                return Err(CliError::Usage(
                    "--plot needs the output directory on the command line (--out)".into(),
                ));
            }
            let dashboard = start_dashboard(dashboard.as_deref(), train_title(&app))?;
            let result = train(*app, given);
            finish_dashboard(dashboard, report_dir.clone())?;
            result?;
            if let (Some(svg), Some(out)) = (plot, report_dir) {
                let drawn =
                    petrel::train::progress::plot_history(&out, &svg).map_err(CliError::command)?;
                println!("plotted {} to {}", drawn.join(", "), svg.display());
            }
            Ok(())
        }
        Command::Eval(args) => petrel::train::saved::eval_command(args).map_err(CliError::command),
        Command::Predict(args) => {
            petrel::train::saved::predict_command(args).map_err(CliError::command)
        }
    }
}

/// `<run_dir>/checkpoints`, created, as an absolute path (the nodes may run elsewhere).
fn default_checkpoint_root(run_dir: &std::path::Path) -> Result<PathBuf, CliError> {
    let root = run_dir.join("checkpoints");
    std::fs::create_dir_all(&root)
        .and_then(|()| std::fs::canonicalize(&root))
        .map_err(|source| CliError::Write { path: root, source })
}

/// The output directory of a `petrel train` command, if it has one.
fn train_out_dir(app: &TrainCommand) -> Option<PathBuf> {
    match app {
        TrainCommand::PsMf(a) => a.config.out.clone(),
        TrainCommand::PsLr(a) => a.config.out.clone(),
        TrainCommand::PsLda(a) => a.config.out.clone(),
        TrainCommand::Lasso(a) | TrainCommand::Logistic(a) => a.cluster.out.clone(),
        TrainCommand::StradsMf(a) => a.cluster.out.clone(),
        TrainCommand::Lda(a) => a.cluster.out.clone(),
        TrainCommand::P3(a) => Some(a.out.clone()),
    }
}

/// `--netns` places node processes: the app must run them (`--transport processes`).
fn runs_node_processes(app: &TrainCommand) -> Result<(), CliError> {
    use petrel::train::TrainTransport;
    let processes = match app {
        TrainCommand::PsMf(a) => a.transport == petrel_actors::JobTransport::Processes,
        TrainCommand::PsLr(a) => a.transport == petrel_actors::JobTransport::Processes,
        TrainCommand::PsLda(a) => a.transport == petrel_actors::JobTransport::Processes,
        TrainCommand::Lasso(a) | TrainCommand::Logistic(a) => {
            a.cluster.transport == TrainTransport::Processes
        }
        TrainCommand::StradsMf(a) => a.cluster.transport == TrainTransport::Processes,
        TrainCommand::Lda(a) => a.cluster.transport == TrainTransport::Processes,
        // Always node processes.
        TrainCommand::P3(_) => true,
    };
    if processes {
        Ok(())
    } else {
        Err(CliError::Usage(
            "--netns places node processes: add --transport processes".into(),
        ))
    }
}

/// The dashboard's title for a `petrel train` command.
fn train_title(app: &TrainCommand) -> &'static str {
    match app {
        TrainCommand::PsMf(_) => "train ps-mf",
        TrainCommand::PsLr(_) => "train ps-lr",
        TrainCommand::PsLda(_) => "train ps-lda",
        TrainCommand::Lasso(_) => "train lasso",
        TrainCommand::StradsMf(_) => "train strads-mf",
        TrainCommand::Lda(_) => "train lda",
        TrainCommand::Logistic(_) => "train logistic",
        TrainCommand::P3(_) => "train p3",
    }
}

/// `petrel train <app>`; `given` names the flags given on the command line.
fn train(app: TrainCommand, given: &BTreeSet<String>) -> Result<(), CliError> {
    match app {
        TrainCommand::PsMf(args) => train_ps::<petrel::ps::PsMf>(args, given),
        TrainCommand::PsLr(args) => train_ps::<petrel::ps::PsLr>(args, given),
        TrainCommand::PsLda(args) => train_ps::<petrel::ps::PsLda>(args, given),
        TrainCommand::Lasso(args) => {
            petrel::train::train_lasso(args, given).map_err(CliError::command)
        }
        TrainCommand::StradsMf(args) => {
            petrel::train::train_mf(args, given).map_err(CliError::command)
        }
        TrainCommand::Lda(args) => petrel::train::train_lda(args, given).map_err(CliError::command),
        TrainCommand::P3(args) => petrel::bench::p3_real::train(args).map_err(CliError::command),
        TrainCommand::Logistic(args) => {
            petrel::train::train_logistic(args, given).map_err(CliError::command)
        }
    }
}

/// `petrel run` without the dashboard around it.
fn run_cluster(
    cluster: &petrel_actors::Cluster,
    run_dir: Option<PathBuf>,
    timeout_s: Option<u64>,
    in_process: bool,
    netns: Option<String>,
) -> Result<(), LaunchError> {
    let mode = if in_process {
        LaunchMode::InProcess
    } else {
        LaunchMode::Processes
    };
    let mut opts = LaunchOptions::new()?;
    opts.run_dir = run_dir;
    opts.timeout = timeout_s.map(Duration::from_secs);
    if netns.is_some() {
        opts.netns = netns;
    }
    let Some(report) = launcher::launch_with(cluster, mode, opts)?.report else {
        return Ok(());
    };
    for (name, t) in &report.nodes {
        let peak = report.peaks.get(name);
        let mb = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        tracing::info!(
            node = %name,
            seconds = format!("{:.2}", t.as_secs_f64()),
            peak_rss_mb = mb(peak.map(|p| p.rss_mb)),
            private_mb = mb(peak.and_then(|p| p.private_mb)),
            heap_mb = mb(peak.and_then(|p| p.heap_mb)),
            "node finished"
        );
    }
    tracing::debug!(
        "cluster finished; run directory {}",
        report.run_dir.display()
    );
    Ok(())
}

/// Starts the dashboard when `--dashboard` was given and prints its URL.
fn start_dashboard(
    addr: Option<&str>,
    title: &str,
) -> Result<Option<petrel_observe::dashboard::Dashboard>, CliError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let d = petrel_observe::dashboard::Dashboard::start(addr, title).map_err(CliError::command)?;
    println!("dashboard: {}", d.url());
    Ok(Some(d))
}

/// Writes the dashboard's static report into `dir` (default: the current directory).
fn finish_dashboard(
    dashboard: Option<petrel_observe::dashboard::Dashboard>,
    dir: Option<PathBuf>,
) -> Result<(), CliError> {
    let Some(d) = dashboard else {
        return Ok(());
    };
    let dir = match dir {
        Some(d) => d,
        None => std::env::current_dir().map_err(CliError::command)?,
    };
    let path = d.finish(&dir).map_err(CliError::command)?;
    println!("dashboard report: {}", path.display());
    Ok(())
}

/// `petrel certs`: every name is checked before anything is written.
fn certs_command(
    dir: &std::path::Path,
    nodes: Vec<String>,
    config: Option<&std::path::Path>,
    bundle: bool,
) -> Result<(), CliError> {
    let mut names = nodes;
    let settings = config.map(Settings::load).transpose()?;
    if let Some(s) = &settings {
        names.extend(s.nodes.iter().map(|n| n.name.clone()));
    }
    if names.is_empty() {
        return Err(CliError::Usage(
            "name the nodes with --nodes a,b,c or --config".into(),
        ));
    }
    for n in &names {
        validate_node_name(n)?;
    }
    let ca = match ClusterCa::load(dir) {
        Ok(ca) => ca,
        Err(_) => {
            let ca = ClusterCa::generate()?;
            ca.write(dir)?;
            ca
        }
    };
    for n in &names {
        let creds = ca.issue(n)?;
        creds.write(dir, n)?;
        if bundle {
            let host = dir.join("bundles").join(n);
            creds.write(&host, n)?;
            if let Some(s) = &settings {
                let mut s = s.clone();
                // Relative to the bundle's cluster.toml: the bundle itself.
                s.cluster.certs_dir = Some(PathBuf::from("."));
                let path = host.join("cluster.toml");
                std::fs::write(&path, s.to_toml()?).map_err(|source| CliError::Write {
                    path: path.clone(),
                    source,
                })?;
            }
        }
    }
    println!(
        "wrote CA and {} node certificates to {}{}",
        names.len(),
        dir.display(),
        if bundle {
            " and one bundle per node to bundles/"
        } else {
            ""
        }
    );
    Ok(())
}

/// `petrel train ps-*`: runs the parameter-server app in process and prints its summary.
fn train_ps<A>(
    args: petrel::ps::PsTrainArgs<<A as petrel::ps::PsApp>::Config>,
    given: &BTreeSet<String>,
) -> Result<(), CliError>
where
    A: petrel::ps::PsApp + petrel::train::TrainApp<Job = <A as petrel::ps::PsApp>::Config>,
    <A as petrel::ps::PsApp>::Config: serde::Serialize,
{
    let summary = petrel::train::train_ps::<A>(args, given).map_err(CliError::command)?;
    println!("{summary}");
    Ok(())
}
