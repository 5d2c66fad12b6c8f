//! `petrel train p3`: a candle model ([`petrel_p3::models::nets`]) trained data-parallel
//! by worker and shard node processes ([`processes`]).

pub mod processes;

use crate::CliError;
use crate::report::{Table, fmt, print_json};
use crate::train::{Membership, TrainTransport};
use petrel_actors::{JobTransport, MembershipArgs};
use petrel_net::{NetConfig, ShaperConfig};
use petrel_p3::Mode;
use petrel_p3::roles::{P3Settings, WorkerReportFile};
use processes::run_job_with;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Flags shared by `train p3` and `bench p3-real`.
#[derive(clap::Args, Debug, Clone)]
pub struct RealJobArgs {
    /// Channel width of resnet18/vgg11 (64 = the published layout).
    #[arg(long, default_value_t = 8)]
    pub width: usize,
    /// Images per worker per iteration.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Data-parallel workers (one process each).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Server shards (one process each).
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.02)]
    pub lr: f32,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f32,
    /// Parameters per slice in p3 mode.
    #[arg(long, default_value_t = 16384)]
    pub slice_size: u64,
    /// Seed of the initial parameters and of synthetic data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Training data: synthetic:N, cifar:FILE[,FILE...] or idx:IMAGES,LABELS.
    #[arg(long, default_value = "synthetic:2048")]
    pub train_data: String,
    /// Test data, same syntax (synthetic:N shares the training classes).
    #[arg(long, default_value = "synthetic:512")]
    pub test_data: String,
    /// Link bandwidth of every node in Mbit/s (0 = unshaped).
    #[arg(long)]
    pub bandwidth_mbit: Option<f64>,
    /// Stop a mode's cluster after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_s: u64,
    /// Where node configs, certificates and reports go (default: a private temporary
    /// directory; a given one is removed after a successful run).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
}

impl RealJobArgs {
    pub fn node_config(&self, net: &str, mode: Mode, iterations: u64, dir: &Path) -> P3Settings {
        P3Settings {
            mode,
            batch: self.batch,
            slice_size: self.slice_size,
            workers: self.workers,
            shards: self.shards,
            iterations,
            lr: self.lr,
            momentum: self.momentum,
            ask_timeout_ms: 300_000,
            report_dir: dir.join("reports"),
            net: net.into(),
            width: self.width,
            seed: self.seed,
            train_data: self.train_data.clone(),
            test_data: self.test_data.clone(),
            ..P3Settings::default()
        }
    }

    pub fn net_config(&self, bandwidth_mbit: f64) -> NetConfig {
        NetConfig {
            shaper: (bandwidth_mbit > 0.0).then(|| ShaperConfig::mbit(bandwidth_mbit)),
            ..NetConfig::default()
        }
    }
}

/// Runs one real-model job as node processes (on emulated hosts with `--netns`).
pub fn run_processes(
    cfg: &P3Settings,
    net: &NetConfig,
    dir: &Path,
    limit: Duration,
) -> Result<Vec<WorkerReportFile>, CliError> {
    let (fixed, transport) = (Membership::default(), JobTransport::Processes);
    let hosts = default_hosts(cfg, &fixed, transport)?;
    let (reports, _cpu) = run_job_with(hosts.as_ref(), cfg, net, dir, limit, &fixed, transport)?;
    Ok(reports)
}

/// The emulated hosts of `--netns` for a job on processes, one per node.
pub fn default_hosts(
    cfg: &P3Settings,
    membership: &Membership,
    transport: JobTransport,
) -> Result<Option<crate::netns::Hosts>, CliError> {
    if transport != JobTransport::Processes {
        return Ok(None);
    }
    let plan = &membership.plan;
    let n = cfg.workers + plan.standby_workers + cfg.shards + plan.standby_shards;
    crate::launcher::default_netns()
        .map(|prefix| crate::netns::Hosts::existing(&prefix, n))
        .transpose()
        .map_err(CliError::NetnsUnavailable)
}

/// `petrel train p3`.
#[derive(clap::Args, Debug, Clone)]
pub struct P3TrainArgs {
    /// mlp, lenet, resnet18 or vgg11, or `emulated`: the scaled profile of `[app.p3]
    /// model` (VGG-19 at 1/1000) with emulated compute and constant gradients (no model
    /// saved).
    #[arg(long, default_value = "lenet")]
    pub net: String,
    /// How the nodes run: as processes, or as threads of this process (memory, quic).
    #[arg(long, value_enum, default_value_t = TrainTransport::Processes)]
    pub transport: TrainTransport,
    /// Standby workers and shards and the scale plan (`add s2` and `remove s1` change
    /// the shards: all but `s0`, the coordinator's).
    #[command(flatten)]
    pub membership: MembershipArgs,
    /// sequential, fifo or p3.
    #[arg(long, value_enum, default_value = "p3")]
    pub mode: Mode,
    /// Passes over the training data.
    #[arg(long, default_value_t = 2)]
    pub epochs: u64,
    /// Where to save the trained model (safetensors; a `.json` name is refused).
    #[arg(long, default_value = "p3-model.safetensors")]
    pub out: PathBuf,
    /// Iterations between checkpoints (default: one per epoch; 0 = none).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Checkpoint directory (default: `<out>.checkpoints`); a fresh run clears it first.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Start from the newest valid checkpoint in the checkpoint directory.
    #[arg(long)]
    pub resume: bool,
    /// Restart the cluster this many times when a node dies, from the newest complete
    /// checkpoint (from the start without one; 0 = stop at the first failure).
    #[arg(long, default_value_t = 2)]
    pub max_restarts: u32,
    /// Cluster, data and optimiser flags.
    #[command(flatten)]
    pub job: RealJobArgs,
}

/// A job's run directory: the one given, made absolute, else a temporary one (the guard).
pub fn job_run_dir(given: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>), CliError> {
    match given {
        Some(dir) => Ok((std::path::absolute(dir).map_err(CliError::io(dir))?, None)),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("petrel-run-p3-")
                .tempdir()
                .map_err(CliError::io(&std::env::temp_dir()))?;
            crate::leftovers::mark_run_dir(temp.path()).map_err(CliError::io(temp.path()))?;
            Ok((temp.path().to_path_buf(), Some(temp)))
        }
    }
}

/// `<out>.checkpoints`, so two jobs in one directory keep apart.
fn default_checkpoint_dir(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".checkpoints");
    out.with_file_name(name)
}

/// `--net emulated`: the job emulates `[app.p3] model`'s profile.
pub const EMULATED: &str = "emulated";

/// `petrel train p3`: trains, prints per-epoch and test figures, and saves the model.
pub fn train(args: P3TrainArgs) -> Result<(), CliError> {
    check_out(&args.out)?;
    let emulated = args.net == EMULATED;
    let net_name = if emulated { "" } else { args.net.as_str() };
    // The flags' ranges first (the iteration count is unknown until the data is read).
    args.job
        .node_config(net_name, args.mode, 1, Path::new(""))
        .validate()
        .map_err(CliError::P3Setting)?;
    let transport = args.transport.cluster().ok_or_else(|| {
        CliError::Usage(
            "--transport none: train p3 runs on a cluster (memory, quic or processes)".into(),
        )
    })?;
    let membership = Membership {
        plan: args.membership.clone(),
        ..Membership::default()
    };
    let (dir, _temp) = job_run_dir(args.job.run_dir.as_deref())?;
    let probe = P3Settings {
        net: net_name.to_string(),
        train_data: args.job.train_data.clone(),
        width: args.job.width,
        ..P3Settings::default()
    };
    probe.check_net()?;
    let (train, _) = P3Settings {
        test_data: String::new(),
        ..probe.clone()
    }
    .data()?;
    let per_epoch = (train.len() / (args.job.workers * args.job.batch).max(1)).max(1) as u64;
    let iterations = per_epoch * args.epochs.max(1);
    let mut cfg = args.job.node_config(net_name, args.mode, iterations, &dir);
    let out = std::path::absolute(&args.out).unwrap_or_else(|_| args.out.clone());
    // Staged in the run directory: `--out` only gets the model of a successful job.
    cfg.model_out = dir.join(petrel_p3::model_file::MODEL_FILE_NAME);
    let net = args.job.net_config(args.job.bandwidth_mbit.unwrap_or(0.0));
    tracing::info!(
        net = %args.net, mode = %args.mode.name(), iterations, per_epoch,
        "training on {} worker and {} shard nodes", cfg.workers, cfg.shards
    );
    let ckpt_dir = match &args.checkpoint_dir {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.clone()),
        None => default_checkpoint_dir(&out),
    };
    // Checkpoints hold one file per worker of a fixed set: none by default when workers
    // join and leave (asked for, they are refused).
    let fixed = membership == Membership::default();
    cfg.checkpoint_every = args
        .checkpoint_every
        .unwrap_or(if fixed { per_epoch } else { 0 });
    if !args.resume {
        // A restart may only roll back to this run's own checkpoints.
        petrel_p3::checkpoint::clear(&ckpt_dir)?;
    } else if petrel_p3::checkpoint::manifest_rounds(&ckpt_dir)?.is_empty() {
        // Refused before any process starts (the nodes verify the files themselves).
        return Err(petrel_p3::P3Error::NoCheckpoint {
            dir: ckpt_dir,
            reasons: Vec::new(),
        }
        .into());
    }
    cfg.checkpoint_dir = ckpt_dir.clone();
    let t0 = Instant::now();
    let limit = Duration::from_secs(args.job.timeout_s);
    let reports = crate::recovery::restart_job(
        "p3",
        args.max_restarts,
        CliError::is_node_death,
        || crate::recovery::round_resume_point(&ckpt_dir, petrel_p3::checkpoint::SCHEME),
        |restarts, source| CliError::Restarts {
            restarts,
            source: Box::new(source),
        },
        |resume, _| {
            let cfg = P3Settings {
                resume: resume || args.resume,
                ..cfg.clone()
            };
            let hosts = default_hosts(&cfg, &membership, transport)?;
            run_job_with(
                hosts.as_ref(),
                &cfg,
                &net,
                &dir,
                limit,
                &membership,
                transport,
            )
            .map(|(reports, _cpu)| reports)
        },
    )?;
    let wall = t0.elapsed().as_secs_f64();
    // The first worker at the end evaluated and saved the model (worker 0 unless it left).
    let r0 = reports
        .iter()
        .find(|r| r.final_workers.first() == Some(&r.worker))
        .or(reports.first())
        .ok_or(CliError::NoMeasuredIterations)?;
    print_epochs(&r0.stats, per_epoch);
    let test = r0.test;
    if let Some(t) = test {
        println!("test loss {:.4}, test accuracy {:.3}", t.loss, t.accuracy);
    }
    if emulated {
        println!("{iterations} iterations in {wall:.1} s (emulated: no model saved)");
    } else {
        publish_model(&cfg.model_out, &out)?;
        println!(
            "{iterations} iterations in {wall:.1} s; model saved to {}",
            out.display()
        );
    }
    if args.job.run_dir.is_some() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut changes: Vec<_> = reports.iter().flat_map(|r| r.changes.clone()).collect();
    changes.sort_by_key(|c| c.iteration);
    changes.dedup();
    let mut shard_changes: Vec<_> = reports
        .iter()
        .flat_map(|r| r.shard_changes.clone())
        .collect();
    shard_changes.sort_by_key(|c| c.iteration);
    shard_changes.dedup();
    print_json(&serde_json::json!({
        "net": args.net,
        "mode": args.mode.name(),
        "iterations": iterations,
        "wall_s": wall,
        "test_accuracy": test.map(|t| t.accuracy),
        "model": (!emulated).then_some(&out),
        "params_digest": r0.params_digest,
        "final_workers": r0.final_workers,
        "changes": changes,
        "final_shards": r0.final_shards,
        "shard_changes": shard_changes,
    }))
    .map_err(CliError::JsonOutput)?;
    Ok(())
}

/// Prints the mean training loss and accuracy of every epoch of `stats`.
fn print_epochs(stats: &[Option<petrel_p3::StepStats>], per_epoch: u64) {
    let mut table = Table::new(&["epoch", "train loss", "train accuracy"]);
    for (e, chunk) in stats.chunks(per_epoch as usize).enumerate() {
        let s: Vec<_> = chunk.iter().flatten().collect();
        let n = s.len().max(1) as f32;
        table.row(vec![
            (e + 1).to_string(),
            fmt(f64::from(s.iter().map(|s| s.loss).sum::<f32>() / n)),
            fmt(f64::from(s.iter().map(|s| s.accuracy).sum::<f32>() / n)),
        ]);
    }
    table.print();
}

/// Refuses an `--out` named `.json`: tools pick a reader by the extension.
fn check_out(out: &Path) -> Result<(), CliError> {
    let json = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if json {
        return Err(CliError::Args(format!(
            "--out {}: train p3 writes safetensors; name the file .safetensors (models saved \
             as JSON by earlier versions still load in `petrel eval p3` and `petrel predict p3`)",
            out.display()
        )));
    }
    Ok(())
}

/// Copies the staged model to `out` atomically (maybe across file systems).
fn publish_model(staged: &Path, out: &Path) -> Result<(), CliError> {
    let bytes = std::fs::read(staged).map_err(CliError::io(staged))?;
    petrel_ml::job::write_atomic(out, &bytes).map_err(CliError::io(out))
}
