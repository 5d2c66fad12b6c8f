//! `petrel bench p3-real` and `petrel train p3`: P3 on real compute. A candle model
//! ([`petrel_p3::models::nets`]) is trained data-parallel by 2 workers and 2 shards, each
//! its own `petrel node` process on 127.0.0.1, every node's link limited by the
//! transport's shaper. The bench runs sequential, fifo and p3 side by side and reports
//! images/s and the test accuracy reached by each mode after the same iterations, plus
//! the adapter's own overhead (stage-wise against candle's whole-model backward, in this
//! process, no network).

use crate::bench::p3::P3BenchError;
use crate::bench::p3_netns::{Placement, free_loopback_ports, run_job};
use crate::report::{Table, fmt, print_json};
use petrel_net::{NetConfig, ShaperConfig};
use petrel_p3::roles::{P3NodeConfig, WorkerReportFile};
use petrel_p3::{CandleStageModel, Mode, StageModel, StagedNet};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
    /// Link bandwidth of every node in Mbit/s (0 = unshaped; the bench picks one when
    /// not given).
    #[arg(long)]
    pub bandwidth_mbit: Option<f64>,
    /// Stop a mode's cluster after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_s: u64,
    /// Where node configs, logs and reports go (removed after a successful run).
    #[arg(long, default_value = "p3-real-run")]
    pub run_dir: PathBuf,
}

impl RealJobArgs {
    fn node_config(&self, net: &str, mode: Mode, iterations: u64, dir: &Path) -> P3NodeConfig {
        P3NodeConfig {
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
            ..P3NodeConfig::default()
        }
    }

    fn net_config(&self, bandwidth_mbit: f64) -> NetConfig {
        NetConfig {
            shaper: (bandwidth_mbit > 0.0).then(|| ShaperConfig::mbit(bandwidth_mbit)),
            ..NetConfig::default()
        }
    }
}

/// Runs one real-model job as `workers + shards` processes on 127.0.0.1, or one per
/// emulated host with `petrel train --netns PREFIX` (node i in `PREFIX-hi`; the links are
/// then the namespaces', unshaped).
fn run_processes(
    cfg: &P3NodeConfig,
    net: &NetConfig,
    dir: &Path,
    limit: Duration,
) -> Result<Vec<WorkerReportFile>, P3BenchError> {
    let nodes = cfg.workers + cfg.shards;
    let (reports, _cpu) = match crate::launcher::default_netns() {
        Some(prefix) => {
            let hosts = crate::netns::Hosts::existing(&prefix, nodes)
                .map_err(P3BenchError::NetnsUnavailable)?;
            run_job(Placement::Netns(&hosts), cfg, net, dir, limit)?
        }
        None => {
            let ports = free_loopback_ports(nodes)?;
            run_job(Placement::Loopback(&ports), cfg, net, dir, limit)?
        }
    };
    Ok(reports)
}

/// `petrel train p3`.
#[derive(clap::Args, Debug, Clone)]
pub struct P3TrainArgs {
    /// mlp, lenet, resnet18 or vgg11.
    #[arg(long, default_value = "lenet")]
    pub net: String,
    /// sequential, fifo or p3.
    #[arg(long, value_enum, default_value = "p3")]
    pub mode: Mode,
    /// Passes over the training data.
    #[arg(long, default_value_t = 2)]
    pub epochs: u64,
    /// Where to save the trained model (JSON).
    #[arg(long, default_value = "p3-model.json")]
    pub out: PathBuf,
    /// Iterations between checkpoints (default: one per epoch; 0 = none).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Checkpoint directory (default: `checkpoints` next to `--out`). A fresh run deletes
    /// the P3 checkpoints in it first.
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

/// The run directory as an absolute path: the node configs written into it name their
/// certificates and report directories by path, and a config's relative paths are read
/// relative to the config file, not to where the user started.
fn absolute_run_dir(dir: &std::path::Path) -> Result<PathBuf, P3BenchError> {
    std::path::absolute(dir).map_err(|source| P3BenchError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// `petrel train p3`: trains on a localhost cluster, prints per-epoch training loss and
/// accuracy (worker 0's batches), the test accuracy, and saves the model.
pub fn train(mut args: P3TrainArgs) -> Result<(), P3BenchError> {
    args.job.run_dir = absolute_run_dir(&args.job.run_dir)?;
    let probe = P3NodeConfig {
        net: args.net.clone(),
        train_data: args.job.train_data.clone(),
        width: args.job.width,
        ..P3NodeConfig::default()
    };
    probe.real_net(&probe.input_shape()?)?;
    let (train, _) = P3NodeConfig {
        test_data: String::new(),
        ..probe.clone()
    }
    .data()?;
    let per_epoch = (train.len() / (args.job.workers * args.job.batch).max(1)).max(1) as u64;
    let iterations = per_epoch * args.epochs.max(1);
    let dir = args.job.run_dir.clone();
    let mut cfg = args.job.node_config(&args.net, args.mode, iterations, &dir);
    cfg.model_out = std::path::absolute(&args.out).unwrap_or_else(|_| args.out.clone());
    let net = args.job.net_config(args.job.bandwidth_mbit.unwrap_or(0.0));
    tracing::info!(
        net = %args.net, mode = %args.mode.name(), iterations, per_epoch,
        "training on {} worker and {} shard processes", cfg.workers, cfg.shards
    );
    let ckpt_dir = match &args.checkpoint_dir {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.clone()),
        None => cfg
            .model_out
            .parent()
            .map_or_else(|| PathBuf::from("checkpoints"), |p| p.join("checkpoints")),
    };
    cfg.checkpoint_every = args.checkpoint_every.unwrap_or(per_epoch);
    if !args.resume {
        // A restart may only roll back to this run's own checkpoints.
        petrel_p3::checkpoint::clear(&ckpt_dir).map_err(petrel_p3::P3Error::from)?;
    } else if petrel_p3::checkpoint::manifest_rounds(&ckpt_dir)
        .map_err(petrel_p3::P3Error::from)?
        .is_empty()
    {
        // Refused before any process starts (the nodes verify the files themselves).
        return Err(
            petrel_p3::P3Error::from(petrel_p3::checkpoint::P3CheckpointError::NoValid {
                dir: ckpt_dir,
                reasons: Vec::new(),
            })
            .into(),
        );
    }
    cfg.checkpoint_dir = ckpt_dir.clone();
    let t0 = Instant::now();
    let newest = || {
        petrel_p3::checkpoint::manifest_rounds(&ckpt_dir)
            .ok()
            .and_then(|r| r.last().copied())
    };
    let (reports, restarts) = crate::recovery::run_with_restarts(
        args.max_restarts,
        P3BenchError::is_node_death,
        || newest().is_some(),
        |resume, number| {
            match newest() {
                Some(round) if resume => println!(
                    "p3: restart {number} resumes from the newest checkpoint (round {round})"
                ),
                _ if number > 0 => println!("p3: restart {number} starts from the beginning"),
                _ => {}
            }
            let cfg = P3NodeConfig {
                resume: resume || args.resume,
                ..cfg.clone()
            };
            run_processes(&cfg, &net, &dir, Duration::from_secs(args.job.timeout_s))
        },
    )
    .map_err(|e| match e {
        crate::recovery::RecoveryError::Fatal(e) => e,
        exhausted => P3BenchError::Restarts(Box::new(exhausted)),
    })?;
    if restarts > 0 {
        println!("p3 finished after {restarts} restart(s) of the cluster");
    }
    let wall = t0.elapsed().as_secs_f64();
    let r0 = reports.first().ok_or(P3BenchError::NoMeasuredIterations)?;
    let mut table = Table::new(&["epoch", "train loss", "train accuracy"]);
    for (e, chunk) in r0.stats.chunks(per_epoch as usize).enumerate() {
        let s: Vec<_> = chunk.iter().flatten().collect();
        let n = s.len().max(1) as f32;
        table.row(vec![
            (e + 1).to_string(),
            fmt(f64::from(s.iter().map(|s| s.loss).sum::<f32>() / n)),
            fmt(f64::from(s.iter().map(|s| s.accuracy).sum::<f32>() / n)),
        ]);
    }
    table.print();
    let test = r0.test;
    if let Some(t) = test {
        println!("test loss {:.4}, test accuracy {:.3}", t.loss, t.accuracy);
    }
    println!(
        "{} iterations in {wall:.1} s; model saved to {}",
        iterations,
        cfg.model_out.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    print_json(&serde_json::json!({
        "net": args.net,
        "mode": args.mode.name(),
        "iterations": iterations,
        "wall_s": wall,
        "test_accuracy": test.map(|t| t.accuracy),
        "model": cfg.model_out,
    }))?;
    Ok(())
}

/// `petrel bench p3-real`.
#[derive(clap::Args, Debug, Clone)]
pub struct P3RealBenchArgs {
    /// Models to run (resnet18, vgg11, lenet, mlp).
    #[arg(long, value_delimiter = ',', default_values_t = ["resnet18".to_string(), "vgg11".to_string()])]
    pub models: Vec<String>,
    /// Measured iterations per mode (after the warm-up).
    #[arg(long, default_value_t = 16)]
    pub iterations: u64,
    /// Warm-up iterations per mode (not measured).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Iterations of the adapter-overhead measurement (stage-wise vs whole-model; medians).
    #[arg(long, default_value_t = 9)]
    pub overhead_iterations: u64,
    /// Measure only the adapter's overhead (no cluster runs).
    #[arg(long)]
    pub overhead_only: bool,
    /// Cluster, data and optimiser flags.
    #[command(flatten)]
    pub job: RealJobArgs,
}

/// The adapter's cost per iteration, in this process, no network.
#[derive(Serialize, Debug, Clone, Copy)]
pub struct AdapterOverhead {
    /// Stage-wise forward (module rebuilds and input copies included).
    pub stagewise_forward_ms: f64,
    /// Stage-wise backward (seeded per stage, gradients copied out).
    pub stagewise_backward_ms: f64,
    /// Installing every tensor once (`set_tensor`, the one copy of pulled values); paid
    /// before both ways, counted once on each side.
    pub set_tensors_ms: f64,
    /// candle's own forward through the same modules (rebuilt from the installed tensors).
    pub whole_forward_ms: f64,
    /// candle's own whole-model backward, gradients copied out.
    pub whole_backward_ms: f64,
    /// candle's own forward + whole-model backward on the same batch.
    pub whole_model_ms: f64,
    /// Median over iterations of (stage-wise forward + backward) / (whole-model forward +
    /// backward), minus 1.
    pub overhead: f64,
}

/// Measures [`AdapterOverhead`] for `net` with batch `batch`, alternating the two ways
/// `iters` times after one warm-up each. Both ways start from freshly installed tensors
/// (modules rebuilt), as every P3 iteration does. Times are medians over the iterations.
pub fn adapter_overhead(
    net: &StagedNet,
    batch: usize,
    iters: u64,
) -> Result<(AdapterOverhead, usize), P3BenchError> {
    let real = |source| petrel_p3::P3Error::RealModel {
        name: net.name().to_string(),
        source: Box::new(source),
    };
    let (_, initial) = net.init(1).map_err(real)?;
    let data = Arc::new(
        petrel_ml::dnn::cifar::synthetic_cifar(4 * batch, 10, 0.3, 1)
            .map_err(petrel_p3::P3Error::Data)?,
    );
    let mut m = CandleStageModel::new(net.clone(), &initial, data, batch, 0, 1).map_err(real)?;
    let n = m.stage_tensors().len();
    let install = |m: &mut CandleStageModel| -> Result<f64, P3BenchError> {
        let t = Instant::now();
        for (k, v) in initial.iter().enumerate() {
            m.set_tensor(k, v).map_err(real)?;
        }
        Ok(t.elapsed().as_secs_f64())
    };
    // Per iteration: (stage-wise fwd, bwd, set, whole fwd, whole bwd) seconds. The two ways
    // alternate which goes first, and the overhead is the median of the per-iteration
    // ratios, so a burst of load from other processes hits one pair, not the figure.
    let mut samples: Vec<[f64; 5]> = Vec::new();
    for i in 0..=iters {
        let stagewise = |m: &mut CandleStageModel| -> Result<[f64; 3], P3BenchError> {
            let t_set = install(m)?;
            let t = Instant::now();
            for s in 0..n {
                m.forward_stage(i, s).map_err(real)?;
            }
            let t_fwd = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for s in (0..n).rev() {
                m.backward_stage(s).map_err(real)?;
            }
            Ok([t_fwd, t.elapsed().as_secs_f64(), t_set])
        };
        let whole = |m: &mut CandleStageModel| -> Result<[f64; 2], P3BenchError> {
            install(m)?;
            let (_, w_fwd, w_bwd) = m.whole_model_pass(i).map_err(real)?;
            Ok([w_fwd.as_secs_f64(), w_bwd.as_secs_f64()])
        };
        let (st, wh) = if i % 2 == 0 {
            let st = stagewise(&mut m)?;
            (st, whole(&mut m)?)
        } else {
            let wh = whole(&mut m)?;
            (stagewise(&mut m)?, wh)
        };
        if i > 0 {
            samples.push([st[0], st[1], st[2], wh[0], wh[1]]);
        }
    }
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let column = |c: usize| median(samples.iter().map(|s| s[c] * 1e3).collect());
    let ratio = median(
        samples
            .iter()
            .map(|s| (s[0] + s[1]) / (s[3] + s[4]).max(1e-12))
            .collect(),
    );
    let params: usize = initial.iter().map(Vec::len).sum();
    let (whole_fwd, whole_bwd) = (column(3), column(4));
    Ok((
        AdapterOverhead {
            stagewise_forward_ms: column(0),
            stagewise_backward_ms: column(1),
            set_tensors_ms: column(2),
            whole_forward_ms: whole_fwd,
            whole_backward_ms: whole_bwd,
            whole_model_ms: whole_fwd + whole_bwd,
            overhead: ratio - 1.0,
        },
        params,
    ))
}

#[derive(Serialize)]
struct ModelFigures {
    sequential_ips: f64,
    fifo_ips: f64,
    p3_ips: f64,
    p3_over_sequential: f64,
    p3_over_fifo: f64,
    accuracy: serde_json::Map<String, serde_json::Value>,
    bandwidth_mbit: f64,
    compute_ms_per_iter: f64,
    params: usize,
    width: usize,
    batch: usize,
    adapter: AdapterOverhead,
}

/// `petrel bench p3-real`.
pub fn run(mut args: P3RealBenchArgs) -> Result<(), P3BenchError> {
    args.job.run_dir = absolute_run_dir(&args.job.run_dir)?;
    if args.iterations == 0 || args.job.workers == 0 || args.job.batch == 0 {
        return Err(P3BenchError::Args(
            "--iterations, --workers and --batch must be >= 1".into(),
        ));
    }
    let mut figures = serde_json::Map::new();
    let mut table = Table::new(&["model", "mode", "Mbit/s", "images/s", "vs seq", "test acc"]);
    let mut overheads = Table::new(&[
        "model",
        "params",
        "fwd ms",
        "bwd ms",
        "whole fwd ms",
        "whole bwd ms",
        "set ms",
        "overhead",
    ]);
    for model in &args.models {
        let probe = args.job.node_config(model, Mode::P3, 1, &args.job.run_dir);
        let net = probe
            .real_net(&probe.input_shape()?)?
            .ok_or_else(|| P3BenchError::Args("--models: empty name".into()))?;
        let (overhead, params) = adapter_overhead(&net, args.job.batch, args.overhead_iterations)?;
        overheads.row(vec![
            model.clone(),
            params.to_string(),
            fmt(overhead.stagewise_forward_ms),
            fmt(overhead.stagewise_backward_ms),
            fmt(overhead.whole_forward_ms),
            fmt(overhead.whole_backward_ms),
            fmt(overhead.set_tensors_ms),
            format!("{:+.1}%", overhead.overhead * 100.0),
        ]);
        if args.overhead_only {
            figures.insert(
                model.clone(),
                serde_json::json!({ "params": params, "batch": args.job.batch, "adapter": overhead }),
            );
            continue;
        }
        // The workers share this machine's cores, so each computes about `workers` times
        // slower than the measurement above (which had every core). One full model
        // transfer over a link then takes as long as one iteration's compute: M = C.
        let compute_s = overhead.whole_model_ms / 1e3 * args.job.workers as f64;
        let bandwidth = args
            .job
            .bandwidth_mbit
            .unwrap_or_else(|| (params as f64 * 4.0 * 8.0 / 1e6) / compute_s.max(1e-3));
        let net_cfg = args.job.net_config(bandwidth);
        let mut ips = [0.0f64; 3];
        let mut accuracy = serde_json::Map::new();
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let dir = args.job.run_dir.join(format!("{model}-{}", mode.name()));
            let cfg = args
                .job
                .node_config(model, mode, args.warmup + args.iterations, &dir);
            let reports = run_processes(
                &cfg,
                &net_cfg,
                &dir,
                Duration::from_secs(args.job.timeout_s),
            )?;
            let mut worst: f64 = 0.0;
            for r in &reports {
                let t = r
                    .secs_per_iter(args.warmup as usize)
                    .ok_or(P3BenchError::NoMeasuredIterations)?;
                worst = worst.max(t);
            }
            ips[i] = (args.job.workers * args.job.batch) as f64 / worst.max(1e-12);
            let acc = reports.first().and_then(|r| r.test).map(|t| t.accuracy);
            accuracy.insert(mode.name().into(), serde_json::json!(acc));
            table.row(vec![
                model.clone(),
                mode.name().into(),
                fmt(bandwidth),
                fmt(ips[i]),
                format!("{:.2}x", ips[i] / ips[0].max(1e-12)),
                acc.map_or("-".into(), |a| fmt(f64::from(a))),
            ]);
            let _ = std::fs::remove_dir_all(&dir);
        }
        figures.insert(
            model.clone(),
            serde_json::to_value(ModelFigures {
                sequential_ips: ips[0],
                fifo_ips: ips[1],
                p3_ips: ips[2],
                p3_over_sequential: ips[2] / ips[0].max(1e-12),
                p3_over_fifo: ips[2] / ips[1].max(1e-12),
                accuracy,
                bandwidth_mbit: bandwidth,
                compute_ms_per_iter: compute_s * 1e3,
                params,
                width: args.job.width,
                batch: args.job.batch,
                adapter: overhead,
            })?,
        );
    }
    if !args.overhead_only {
        println!(
            "P3 on real compute (candle): {} workers + {} shards as processes on 127.0.0.1, \
             links shaped so that one model transfer ~ one iteration's compute",
            args.job.workers, args.job.shards
        );
        table.print();
    }
    println!(
        "adapter overhead per iteration (batch {}, this process, no network):",
        args.job.batch
    );
    overheads.print();
    print_json(&serde_json::Value::Object(figures))?;
    Ok(())
}
