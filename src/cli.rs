// Over 600 lines: it is the whole command line: every command's flags and its dispatch.
//! The `petrel` command line, as a library the `petrel-bench` binary shares.

use crate::CliError;
use crate::launcher::{self, LaunchError, LaunchMode, LaunchOptions};
use crate::netns::{Hosts, LinkShape};
use crate::recovery::{self, RecoveryError};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use petrel_actors::{NodeError, Settings, error_chain, validate_node_name};
use petrel_net::tls::ClusterCa;
use std::collections::BTreeSet;
use std::ffi::OsString;
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
    Run(RunArgs),
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
        /// Also write DIR/bundles/NODE with only what that host needs (and, with --config,
        /// a cluster.toml for `petrel node --config NODE/cluster.toml`).
        #[arg(long)]
        bundle: bool,
    },
    /// Emulated hosts in network namespaces (needs root).
    Netns {
        #[command(subcommand)]
        command: NetnsCommand,
    },
    /// Benchmarks, each a table and one JSON line (`petrel bench --help` lists them; runs
    /// the `petrel-bench` binary: `cargo build --release -p petrel-bench`).
    #[command(disable_help_flag = true)]
    Bench {
        /// The bench and its flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
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
    Eval(crate::train::saved::EvalArgs),
    /// Predictions of a trained model: values, class probabilities, ratings or top-N
    /// items, topic mixtures of new documents.
    Predict(crate::train::saved::PredictArgs),
}

/// `petrel run`.
#[derive(clap::Args)]
struct RunArgs {
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
    /// Give no default checkpoints (by default every `[app.*]` section of an app that
    /// checkpoints and names no `checkpoint_dir` writes them to
    /// RUN_DIR/checkpoints/<section>, so a restart rolls back to the newest one).
    #[arg(long)]
    no_checkpoints: bool,
    /// A membership plan for an elastic job, e.g. `at=2s add w2; at=4s remove w0`, in
    /// place of the file's `[cluster] scale`.
    #[arg(long, value_name = "PLAN")]
    scale: Option<String>,
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
    PsMf(crate::ps::PsTrainArgs<crate::ps::PsMfSettings>),
    /// Multinomial logistic regression (LIBSVM data) on the parameter server.
    #[command(name = "ps-lr")]
    PsLr(crate::ps::PsTrainArgs<crate::ps::PsLrSettings>),
    /// LDA by collapsed Gibbs sampling, data-parallel on the parameter server (SSP).
    #[command(name = "ps-lda")]
    PsLda(crate::ps::PsTrainArgs<crate::ps::PsLdaSettings>),
    /// Lasso by scheduled coordinate descent (STRADS): coefficients.tsv + metrics.json.
    Lasso(crate::train::LassoTrainArgs),
    /// Matrix factorisation by CCD++ with block rotation (STRADS): factors + metrics.json.
    #[command(name = "strads-mf")]
    StradsMf(crate::train::StradsTrainArgs<crate::strads::apps::mf::StradsMfSettings>),
    /// LDA by collapsed Gibbs sampling with word rotation (STRADS): topics + metrics.json.
    Lda(crate::train::StradsTrainArgs<crate::strads::apps::lda::LdaSettings>),
    /// Sparse logistic regression by scheduled coordinate descent (Lasso options).
    Logistic(crate::train::LassoTrainArgs),
    /// P3: a candle model (mlp, lenet, resnet18, vgg11) data-parallel on worker and shard
    /// processes on 127.0.0.1, --mode sequential|fifo|p3.
    P3(crate::train::p3::P3TrainArgs),
}

/// What `petrel bench ARGS…` does in this binary.
pub type BenchRunner = fn(Vec<OsString>) -> Result<(), CliError>;

/// Whether `name` is a command of this command line (not a bench).
pub fn is_command(name: &str) -> bool {
    Cli::command()
        .get_subcommands()
        .any(|c| c.get_name() == name)
}

/// Runs the command line of this process; `bench` runs `petrel bench`.
pub fn main(bench: BenchRunner) -> ExitCode {
    main_with_args(std::env::args_os().collect(), bench)
}

/// Runs the command line `args` (the program's name first).
pub fn main_with_args(args: Vec<OsString>, bench: BenchRunner) -> ExitCode {
    crate::observe::heap::mark_installed();
    crate::keep_large_buffers();
    crate::init_tracing();
    let matches = Cli::command().get_matches_from(args);
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
        Some(("train", train)) => {
            use crate::train::jobfile::given_ids;
            let mut given = (train.subcommand())
                .map(|(_, app)| given_ids(app))
                .unwrap_or_default();
            // The dashboard watches a cluster's nodes: asking for it asks for a cluster.
            given.extend(given_ids(train).into_iter().filter(|id| id == "dashboard"));
            given
        }
        _ => BTreeSet::new(),
    };
    match dispatch(cli.command, &given, bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, ExitCode::FAILURE),
    }
}

/// The one line a failed command prints: the error and its causes, each once.
fn fail(error: &(dyn std::error::Error + 'static), code: ExitCode) -> ExitCode {
    eprintln!("error: {}", error_chain(error));
    code
}

/// `petrel node`: exits 0, 1, or [`crate::launcher::STOPPED_BY_PEER`] (a peer failed).
fn node_command(config: &std::path::Path, name: Option<&str>) -> ExitCode {
    let mode = LaunchMode::Node {
        name: name.map(str::to_string),
        config: config.to_path_buf(),
    };
    let launched = Settings::load(config)
        .map_err(LaunchError::from)
        .and_then(|settings| {
            launcher::launch_with(
                &crate::roles::builtin(settings),
                mode,
                LaunchOptions::new()?,
            )
        });
    match launched {
        Ok(_) => ExitCode::SUCCESS,
        Err(
            e @ LaunchError::Settings(NodeError::PeerFailed { .. } | NodeError::RunFailed { .. }),
        ) => fail(&e, ExitCode::from(crate::launcher::STOPPED_BY_PEER)),
        Err(e) => fail(&e, ExitCode::FAILURE),
    }
}

fn dispatch(
    command: Command,
    given: &BTreeSet<String>,
    bench: BenchRunner,
) -> Result<(), CliError> {
    match command {
        Command::Run(args) => run_command(args),
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
        Command::Bench { args } => bench(args),
        // commands dispatch: applications add their arms below this line; an arm whose error
        // is not a `CliError` wraps it with `CliError::command`.
        Command::Train {
            dashboard,
            plot,
            netns,
            app,
        } => {
            let (title, report_dir, processes) = app.plan();
            if let Some(prefix) = &netns {
                if !processes {
                    return Err(CliError::Usage(
                        "--netns places node processes: add --transport processes".into(),
                    ));
                }
                crate::launcher::set_default_netns(prefix);
            }
            if plot.is_some() && !cfg!(feature = "plot") {
                return Err(CliError::Usage(
                    "--plot: this petrel was built without its `plot` feature".into(),
                ));
            }
            if plot.is_some() && report_dir.is_none() {
                return Err(CliError::Usage(
                    "--plot needs the output directory on the command line (--out)".into(),
                ));
            }
            let dashboard = start_dashboard(dashboard.as_deref(), title)?;
            let result = train(*app, given);
            finish_dashboard(dashboard, report_dir.clone())?;
            result?;
            #[cfg(feature = "plot")]
            if let (Some(svg), Some(out)) = (plot, report_dir) {
                let drawn = crate::train::progress::plot_history(&out, &svg)?;
                println!("plotted {} to {}", drawn.join(", "), svg.display());
            }
            Ok(())
        }
        Command::Eval(args) => crate::train::saved::eval_command(args),
        Command::Predict(args) => crate::train::saved::predict_command(args),
    }
}

/// `petrel run`: checkpoints by default, restarts on a node's death, the dashboard.
fn run_command(mut args: RunArgs) -> Result<(), CliError> {
    let mut settings = Settings::load(&args.config)?;
    if let Some(plan) = &args.scale {
        settings.cluster.scale = Some(plan.clone());
        settings.validate()?;
    }
    if let Some(dir) = &args.run_dir {
        // Absolute: the node settings written into it name their files by path.
        let dir = std::path::absolute(dir).map_err(CliError::io(dir))?;
        // Private before anything is written into it.
        petrel_net::private_files::create_private_dir(&dir).map_err(CliError::io(&dir))?;
        args.run_dir = Some(dir);
    }
    // Checkpoints by default, in a run directory kept across restarts.
    let wants = |name: &str, section: &serde_json::Value| {
        !args.no_checkpoints && crate::train::apps::checkpoints_by_default(name, section)
    };
    let temp_run_dir = match &args.run_dir {
        None if settings.app.iter().any(|(n, s)| wants(n, s)) => Some(
            tempfile::Builder::new()
                .prefix(&format!("petrel-run-{}-", settings.cluster.name))
                .tempdir()
                .map_err(CliError::io(&std::env::temp_dir()))?,
        ),
        _ => None,
    };
    let run_dir =
        (args.run_dir.clone()).or_else(|| temp_run_dir.as_ref().map(|t| t.path().to_path_buf()));
    if let Some(dir) = &run_dir {
        let root = default_checkpoint_root(dir)?;
        let (app, given) = recovery::with_default_checkpoint_dirs(&settings.app, &root, wants);
        // A fresh job never rolls back to an earlier job's checkpoints.
        for d in &given {
            if d.exists() {
                std::fs::remove_dir_all(d).map_err(CliError::io(d))?;
            }
            tracing::info!(dir = %d.display(), "checkpoints by default");
        }
        settings.app = app;
    }
    let cluster = crate::roles::builtin(settings);
    let dashboard = start_dashboard(args.dashboard.as_deref(), &cluster.settings().cluster.name)?;
    let checkpoints = recovery::checkpoint_dirs(&cluster.settings().app);
    let result = recovery::run_with_restarts(
        args.max_restarts,
        recovery::launch_failed_by_node_death,
        || checkpoints.iter().any(|d| recovery::has_checkpoint(d)),
        |resume, _| {
            let mut settings = cluster.settings().clone();
            if resume {
                settings.app = recovery::resuming(&settings.app);
                println!("restarting the cluster from the newest checkpoint");
            }
            run_cluster(&cluster.with_settings(settings), &args, run_dir.clone())
        },
    );
    let result = match result {
        Ok(((), 0)) => Ok(()),
        Ok(((), restarts)) => {
            println!("cluster finished after {restarts} restart(s)");
            Ok(())
        }
        Err(RecoveryError::Fatal(e)) => Err(e.into()),
        Err(spent) => Err(CliError::command(spent)),
    };
    finish_dashboard(dashboard, args.run_dir)?;
    drop(temp_run_dir);
    result
}

/// `<run_dir>/checkpoints`, created, as an absolute path (the nodes may run elsewhere).
fn default_checkpoint_root(run_dir: &std::path::Path) -> Result<PathBuf, CliError> {
    let root = run_dir.join("checkpoints");
    std::fs::create_dir_all(&root)
        .and_then(|()| std::fs::canonicalize(&root))
        .map_err(|source| CliError::Io { path: root, source })
}

impl TrainCommand {
    /// The dashboard's title, the output directory, and whether it runs node processes.
    fn plan(&self) -> (&'static str, Option<PathBuf>, bool) {
        use crate::train::TrainTransport::Processes;
        let ps = |out: &Option<PathBuf>, t: petrel_actors::JobTransport| {
            (out.clone(), t == petrel_actors::JobTransport::Processes)
        };
        let strads = |c: &crate::train::ClusterArgs| (c.out.clone(), c.transport == Processes);
        let (name, (out, processes)) = match self {
            TrainCommand::PsMf(a) => ("train ps-mf", ps(&a.config.files.out, a.transport)),
            TrainCommand::PsLr(a) => ("train ps-lr", ps(&a.config.files.out, a.transport)),
            TrainCommand::PsLda(a) => ("train ps-lda", ps(&a.config.files.out, a.transport)),
            TrainCommand::Lasso(a) => ("train lasso", strads(&a.cluster)),
            TrainCommand::Logistic(a) => ("train logistic", strads(&a.cluster)),
            TrainCommand::StradsMf(a) => ("train strads-mf", strads(&a.cluster)),
            TrainCommand::Lda(a) => ("train lda", strads(&a.cluster)),
            TrainCommand::P3(a) => ("train p3", (Some(a.out.clone()), true)),
        };
        (name, out, processes)
    }
}

/// `petrel train <app>`; `given` names the flags given on the command line.
fn train(app: TrainCommand, given: &BTreeSet<String>) -> Result<(), CliError> {
    use crate::strads::apps::{lasso::LassoApp, lda::LdaApp, logistic::LogisticApp, mf::MfApp};
    use crate::train as t;
    match app {
        TrainCommand::PsMf(args) => t::train_ps::<crate::ps::PsMf>(args, given),
        TrainCommand::PsLr(args) => t::train_ps::<crate::ps::PsLr>(args, given),
        TrainCommand::PsLda(args) => t::train_ps::<crate::ps::PsLda>(args, given),
        TrainCommand::Lasso(args) => t::train_lasso::<LassoApp>(args, given),
        TrainCommand::Logistic(args) => t::train_lasso::<LogisticApp>(args, given),
        TrainCommand::StradsMf(args) => t::train_strads::<MfApp>(args, given),
        TrainCommand::Lda(args) => t::train_strads::<LdaApp>(args, given),
        TrainCommand::P3(args) => t::p3::train(args),
    }
}

/// `petrel run` without the dashboard around it.
fn run_cluster(
    cluster: &petrel_actors::Cluster,
    args: &RunArgs,
    run_dir: Option<PathBuf>,
) -> Result<(), LaunchError> {
    let mode = if args.in_process {
        LaunchMode::InProcess
    } else {
        LaunchMode::Processes
    };
    let mut opts = LaunchOptions::new()?;
    opts.run_dir = run_dir;
    opts.timeout = args.timeout_s.map(Duration::from_secs);
    opts.netns = args.netns.clone().or(opts.netns);
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

#[cfg(feature = "dashboard")]
use petrel_observe::dashboard::Dashboard;

/// Without the `dashboard` feature `--dashboard` is refused before anything runs.
#[cfg(not(feature = "dashboard"))]
enum Dashboard {}

#[cfg(not(feature = "dashboard"))]
impl Dashboard {
    fn start(_: &str, _: &str) -> Result<Self, CliError> {
        let why = "--dashboard: this petrel was built without its `dashboard` feature";
        Err(CliError::Usage(why.into()))
    }
    fn url(&self) -> &str {
        match *self {}
    }
    fn finish(self, _: &std::path::Path) -> Result<PathBuf, CliError> {
        match self {}
    }
}

/// Starts the dashboard when `--dashboard` was given and prints its URL.
fn start_dashboard(addr: Option<&str>, title: &str) -> Result<Option<Dashboard>, CliError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let d = Dashboard::start(addr, title).map_err(CliError::command)?;
    println!("dashboard: {}", d.url());
    Ok(Some(d))
}

/// Writes the dashboard's static report into `dir` (default: the current directory).
fn finish_dashboard(dashboard: Option<Dashboard>, dir: Option<PathBuf>) -> Result<(), CliError> {
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
                std::fs::write(&path, s.to_toml()?).map_err(CliError::io(&path))?;
            }
        }
    }
    let bundles = bundle.then_some(" and one bundle per node to bundles/");
    let (n, dir) = (names.len(), dir.display());
    println!(
        "wrote CA and {n} node certificates to {dir}{}",
        bundles.unwrap_or("")
    );
    Ok(())
}

/// `petrel bench`: execs the `petrel-bench` binary beside this one (else on `PATH`).
pub fn exec_bench(args: Vec<OsString>) -> Result<(), CliError> {
    use std::os::unix::process::CommandExt;
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("petrel-bench")))
        .filter(|path| path.is_file());
    let program = beside.unwrap_or_else(|| PathBuf::from("petrel-bench"));
    let error = std::process::Command::new(&program).args(args).exec();
    Err(CliError::Usage(format!(
        "`petrel bench` runs the petrel-bench binary ({}: {error}); build it with \
         `cargo build --release -p petrel-bench`",
        program.display()
    )))
}
