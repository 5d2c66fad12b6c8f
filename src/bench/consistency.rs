//! `petrel bench consistency`: matrix factorization on the parameter server under BSP,
//! SSP(s), ESSP(s) and async, with one straggling worker, side by side in one run.
//!
//! Each model runs on its own in-process cluster (every node a thread, QUIC on 127.0.0.1):
//! `shards` shard nodes (the first also runs the monitor) and `workers` worker nodes. Worker 0
//! is the straggler: every clock of it takes `straggler_factor` times the emulated compute
//! time `clock_ms` of the others. The run of a model stops when the held-out RMSE reaches
//! `target_rmse` or after `max_seconds`.

use crate::report::{Table, fmt, print_json};
use petrel_actors::Transport;
use petrel_ps::{ConsistencyModel, PsError, PsMf, PsMfConfig, PsMfResult};
use plotters::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Why the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsistencyBenchError {
    /// The run of one consistency model failed.
    #[error("{model}")]
    Run {
        /// The model.
        model: ConsistencyModel,
        /// Why.
        #[source]
        source: PsError,
    },
    /// The plot could not be drawn.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The SVG file.
        path: String,
        /// The plotting library's message.
        reason: String,
    },
    /// The plot's directory could not be made.
    #[error("{}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The JSON line could not be written.
    #[error("json figures")]
    Json(#[from] serde_json::Error),
}

/// `petrel bench consistency`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConsistencyBenchArgs {
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Staleness bound of SSP and ESSP.
    #[arg(long, default_value_t = 3)]
    pub staleness: u32,
    /// The straggler's clocks take this many times longer.
    #[arg(long, default_value_t = 4.0)]
    pub straggler_factor: f64,
    /// Emulated compute time per clock of a normal worker (ms).
    #[arg(long, default_value_t = 20.0)]
    pub clock_ms: f64,
    #[arg(long, default_value_t = 0.4)]
    pub target_rmse: f64,
    /// Per-model time limit (s).
    #[arg(long, default_value_t = 38.0)]
    pub max_seconds: f64,
    #[arg(long, default_value_t = 2000)]
    pub users: usize,
    #[arg(long, default_value_t = 1000)]
    pub items: usize,
    #[arg(long, default_value_t = 0.02)]
    pub observed: f64,
    #[arg(long, default_value_t = 8)]
    pub rank: u32,
    #[arg(long, default_value_t = 0.08)]
    pub learning_rate: f32,
    #[arg(long, default_value_t = 4)]
    pub batches_per_epoch: u32,
    /// Models to run (comma separated): bsp, ssp, essp, async.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bsp,ssp,essp,async"
    )]
    pub models: Vec<ConsistencyModel>,
    /// quic (127.0.0.1) or memory.
    #[arg(long, value_enum, default_value_t = Transport::Quic)]
    pub transport: Transport,
    /// Where the convergence plot (SVG) goes.
    #[arg(long, default_value = "target/bench/consistency.svg")]
    pub plot: PathBuf,
}

#[derive(Serialize)]
struct Figures {
    time_to_target_s: Option<f64>,
    iterations: u64,
    reached_target: bool,
    final_rmse: f64,
    mean_staleness: f64,
    staleness_variance: f64,
    max_staleness: u64,
    staleness_bound: Option<u32>,
    wall_s: f64,
    worker_clocks: Vec<u64>,
}

fn config(args: &ConsistencyBenchArgs, model: ConsistencyModel) -> PsMfConfig {
    PsMfConfig {
        synthetic_users: args.users,
        synthetic_items: args.items,
        synthetic_rank: 5,
        synthetic_observed: args.observed,
        synthetic_noise: 0.1,
        rank: args.rank,
        learning_rate: args.learning_rate,
        consistency: model,
        staleness: args.staleness,
        batches_per_epoch: args.batches_per_epoch,
        max_clocks: Some(u64::MAX),
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_ms: 100,
        clock_ms: args.clock_ms,
        straggler: Some(0),
        straggler_factor: args.straggler_factor,
        // The defaults of the settings this bench was tuned with.
        init_scale: 0.3,
        regularization: 0.02,
        ..PsMfConfig::default()
    }
}

/// Runs the benchmark: a table, a plot and one JSON line.
pub fn run(args: ConsistencyBenchArgs) -> Result<(), ConsistencyBenchError> {
    eprintln!(
        "mf on the ps: {} workers, {} shards ({} on 127.0.0.1), worker 0 straggles x{}, \
         {} ms/clock, target rmse {}",
        args.workers,
        args.shards,
        args.transport,
        args.straggler_factor,
        args.clock_ms,
        args.target_rmse
    );
    let mut results: Vec<(String, PsMfResult)> = Vec::new();
    for &m in &args.models {
        eprintln!("running {m} ...");
        let r = petrel_ps::run_local_with::<PsMf>(
            config(&args, m),
            args.shards,
            args.workers,
            args.transport,
            |s| s.cluster.failure_timeout_ms = 10_000,
        )
        .map_err(|source| ConsistencyBenchError::Run { model: m, source })?;
        results.push((m.to_string(), r.metrics));
    }
    let mut table = Table::new(&[
        "model",
        "reached",
        "time to target (s)",
        "iterations",
        "final rmse",
        "mean staleness",
        "var",
        "max staleness",
        "bound",
        "clocks per worker",
    ]);
    let mut json = BTreeMap::new();
    for (m, r) in &results {
        table.row(vec![
            m.clone(),
            r.reached_target.to_string(),
            r.time_to_target_s.map_or("-".into(), fmt),
            r.iterations.to_string(),
            fmt(r.final_rmse),
            fmt(r.staleness.mean),
            fmt(r.staleness.variance),
            r.staleness.max.to_string(),
            r.staleness_bound.map_or("none".into(), |b| b.to_string()),
            format!("{:?}", r.worker_clocks),
        ]);
        json.insert(
            m.clone(),
            Figures {
                time_to_target_s: r.time_to_target_s,
                iterations: r.iterations,
                reached_target: r.reached_target,
                final_rmse: r.final_rmse,
                mean_staleness: r.staleness.mean,
                staleness_variance: r.staleness.variance,
                max_staleness: r.staleness.max,
                staleness_bound: r.staleness_bound,
                wall_s: r.wall_s,
                worker_clocks: r.worker_clocks.clone(),
            },
        );
    }
    table.print();
    plot(&args.plot, &results, args.target_rmse)?;
    println!("convergence plot: {}", args.plot.display());
    Ok(print_json(&json)?)
}

fn plot(
    path: &PathBuf,
    results: &[(String, PsMfResult)],
    target: f64,
) -> Result<(), ConsistencyBenchError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| ConsistencyBenchError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let max_t = results
        .iter()
        .flat_map(|(_, r)| r.curve.iter().map(|p| p.seconds))
        .fold(1.0f64, f64::max);
    let max_y = results
        .iter()
        .flat_map(|(_, r)| r.curve.iter().map(|p| p.rmse))
        .fold(target, f64::max)
        * 1.05;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let e = |e: &dyn std::fmt::Display| ConsistencyBenchError::Plot {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "MF on the parameter server: held-out RMSE",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_t, 0.0..max_y)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("test RMSE")
        .draw()
        .map_err(|x| e(&x))?;
    let colors = [RED, BLUE, GREEN, MAGENTA, BLACK];
    for (k, (m, r)) in results.iter().enumerate() {
        let c = colors[k % colors.len()];
        chart
            .draw_series(LineSeries::new(
                r.curve.iter().map(|p| (p.seconds, p.rmse)),
                c.stroke_width(2),
            ))
            .map_err(|x| e(&x))?
            .label(m.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, target), (max_t, target)],
            BLACK.mix(0.4),
        ))
        .map_err(|x| e(&x))?
        .label("target")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
