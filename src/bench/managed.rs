//! `petrel bench managed`: Bösen's managed communication in use, on MF over shaped links.
//!
//! Three variants at the same bandwidth budget, each on its own in-process cluster whose
//! every node's egress is shaped to `mbit` (QUIC, token bucket under QUIC):
//! (a) `clock`: updates leave only at the clock boundary (the oplog flushed by `clock()`);
//! (b) `fifo`: managed communication both ways, oldest first: workers send pending updates
//!     while the clock computes, and shards push changed rows to the workers that hold
//!     them (server push), each within a budget of the link's rate;
//! (c) `relative-magnitude`: the same, largest `|delta| / |value|` first.
//! `--no-server-push` keeps (b) and (c) worker-to-server only. A clock's compute (`clock_ms`) is cut into `compute_slices` slices; the updates of a slice
//! become pending when it ends and managed communication gets one tick per slice. Reported:
//! time and iterations to the target RMSE, the bytes the workers' nodes sent, and the RMSE
//! against time and against bytes (bytes at a point = the run's bytes per clock times the
//! clock of that point), with one SVG plot of each.

use crate::report::{Table, fmt, print_json, save_json};
use petrel_actors::{Settings, Transport};
use petrel_ps::core::managed::SendPolicy;
use petrel_ps::{ConsistencyModel, PsError, PsMf, PsMfConfig, PsMfResult};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Why the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum ManagedBenchError {
    /// One variant's run failed.
    #[error("variant {variant}")]
    Run {
        /// The variant.
        variant: String,
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
    /// A file could not be written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The JSON line could not be written.
    #[error("json figures")]
    Json(#[from] serde_json::Error),
}

/// `petrel bench managed`.
#[derive(clap::Args, Debug, Clone)]
pub struct ManagedBenchArgs {
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Egress rate of every node's link (Mbit/s). At 20 communication matters (a clock's
    /// bytes take longer than its compute) but every variant reaches the target (8 was
    /// hopeless: none did in 15 s).
    #[arg(long, default_value_t = 20.0)]
    pub mbit: f64,
    /// The managed budget (per worker, and per shard for server push) as a fraction of the
    /// link rate: Bösen spends the bandwidth that reads and clock flushes leave over.
    /// (A full link's budget made both managed variants about 2x slower than clock-boundary
    /// updates: their early rows crowded out the reads and flushes; see BENCHMARKS.md.)
    #[arg(long, default_value_t = 0.25)]
    pub budget_fraction: f64,
    /// Consistency model of the items table.
    #[arg(long, value_enum, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Its staleness bound (at 8 stale reads cost iterations, which is what fresher rows
    /// can win back; at 2 they barely do).
    #[arg(long, default_value_t = 8)]
    pub staleness: u32,
    /// Emulated compute per clock (ms).
    #[arg(long, default_value_t = 40.0)]
    pub clock_ms: f64,
    /// Slices of a clock's compute (managed ticks per clock).
    #[arg(long, default_value_t = 8)]
    pub compute_slices: u32,
    #[arg(long, default_value_t = 0.4)]
    pub target_rmse: f64,
    /// Per-run time limit (s).
    #[arg(long, default_value_t = 40.0)]
    pub max_seconds: f64,
    /// Small data and short limits: for tests (checks shapes, not speed).
    #[arg(long)]
    pub quick: bool,
    /// Managed variants send worker-to-server only (no server push).
    #[arg(long)]
    pub no_server_push: bool,
    /// Time between two server-push ticks of a shard (ms).
    #[arg(long, default_value_t = 10)]
    pub server_push_tick_ms: u64,
    /// Directory of the plots (`managed-time.svg`, `managed-bytes.svg`).
    #[arg(long, default_value = "target/bench")]
    pub plot_dir: PathBuf,
    /// Where the JSON figures are also written.
    #[arg(long, default_value = "target/bench/managed.json")]
    pub json_out: PathBuf,
}

/// One variant's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManagedRun {
    /// `clock`, `fifo` or `relative-magnitude`.
    pub variant: String,
    /// Whether the target was reached.
    pub reached_target: bool,
    /// Seconds to the target.
    pub time_to_target_s: Option<f64>,
    /// Min clock at the target (or at the end).
    pub iterations: u64,
    /// Bytes all workers' nodes sent in the run.
    pub sent_bytes: u64,
    /// Bytes all workers' nodes received in the run (replies and server pushes).
    #[serde(default)]
    pub received_bytes: u64,
    /// Bytes per clock (all workers, sent).
    pub bytes_per_clock: f64,
    /// Bytes per clock both ways (workers' sent + received: every byte on a link, as shards
    /// talk only to workers).
    #[serde(default)]
    pub both_ways_per_clock: f64,
    /// Estimated bytes on the links until the target (`both_ways_per_clock * iterations`).
    pub bytes_to_target: Option<f64>,
    /// Final held-out RMSE.
    pub final_rmse: f64,
    /// Mean observed staleness.
    pub mean_staleness: f64,
    /// Seconds of the run.
    pub wall_s: f64,
    /// `(seconds, clock, rmse)` points.
    pub curve: Vec<(f64, u64, f64)>,
}

/// The JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ManagedFigures {
    /// Link rate (Mbit/s).
    pub mbit: f64,
    /// Managed budget as a fraction of the link rate.
    #[serde(default)]
    pub budget_fraction: f64,
    /// Consistency of the items table.
    pub consistency: ConsistencyModel,
    /// Its bound.
    pub staleness: u32,
    /// The target RMSE.
    pub target_rmse: f64,
    /// Quick mode.
    pub quick: bool,
    /// Whether the managed variants also push server to client.
    #[serde(default)]
    pub server_push: bool,
    /// Every variant.
    pub runs: Vec<ManagedRun>,
    /// Time to target of `clock` over `relative-magnitude` (> 1: managed is faster).
    pub clock_over_relative_magnitude: Option<f64>,
    /// Time to target of `fifo` over `relative-magnitude`.
    pub fifo_over_relative_magnitude: Option<f64>,
    /// The plots.
    pub plots: Vec<String>,
}

fn config(args: &ManagedBenchArgs, managed: Option<SendPolicy>) -> PsMfConfig {
    let (users, items, observed) = if args.quick {
        (400, 200, 0.05)
    } else {
        (2000, 1000, 0.02)
    };
    PsMfConfig {
        synthetic_users: users,
        synthetic_items: items,
        synthetic_rank: 5,
        synthetic_observed: observed,
        synthetic_noise: 0.1,
        rank: 8,
        learning_rate: 0.08,
        consistency: args.consistency,
        staleness: args.staleness,
        batches_per_epoch: 4,
        // Quick runs (tests) also end by clocks, so a lost stop cannot keep them going.
        max_clocks: Some(if args.quick { 300 } else { u64::MAX }),
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_ms: if args.quick { 50 } else { 100 },
        clock_ms: args.clock_ms,
        managed,
        server_push: managed.filter(|_| !args.no_server_push),
        server_push_tick_ms: args.server_push_tick_ms,
        compute_slices: args.compute_slices,
        managed_bytes_per_s: (args.mbit * 1e6 / 8.0 * args.budget_fraction.max(0.0)) as u64,
        // The comparison is of when updates leave; the per-clock read prefetch (on by
        // default) spends this tight link's bandwidth on earlier refreshes, so it is off.
        no_prefetch: true,
        init_scale: 0.3,
        regularization: 0.02,
        out: None,
        ..PsMfConfig::default()
    }
}

fn variant_name(p: Option<SendPolicy>) -> &'static str {
    match p {
        None => "clock",
        Some(SendPolicy::Fifo) => "fifo",
        Some(SendPolicy::Random) => "random",
        Some(SendPolicy::RelativeMagnitude) => "relative-magnitude",
    }
}

fn summarise(name: &str, r: &PsMfResult) -> ManagedRun {
    let sent: u64 = r.per_worker_sent_bytes.iter().sum();
    let received: u64 = r.per_worker_received_bytes.iter().sum();
    let clocks = r.worker_clocks.iter().sum::<u64>() as f64 / r.worker_clocks.len().max(1) as f64;
    let per_clock = |bytes: u64| {
        if clocks > 0.0 {
            bytes as f64 / clocks
        } else {
            0.0
        }
    };
    let (both_ways, per_clock) = (per_clock(sent + received), per_clock(sent));
    ManagedRun {
        variant: name.to_string(),
        reached_target: r.reached_target,
        time_to_target_s: r.time_to_target_s,
        iterations: r.iterations,
        sent_bytes: sent,
        received_bytes: received,
        bytes_per_clock: per_clock,
        both_ways_per_clock: both_ways,
        bytes_to_target: r.reached_target.then_some(both_ways * r.iterations as f64),
        final_rmse: r.final_rmse,
        mean_staleness: r.staleness.mean,
        wall_s: r.wall_s,
        curve: r
            .curve
            .iter()
            .map(|p| (p.seconds, p.clock, p.rmse))
            .collect(),
    }
}

/// Runs the three variants and returns the figures (the table is printed).
pub fn measure(args: &ManagedBenchArgs) -> Result<ManagedFigures, ManagedBenchError> {
    let mbit = args.mbit;
    eprintln!(
        "mf on the ps, {} workers, {} shards, links {mbit} Mbit/s egress, {} s={}, {} ms/clock \
         in {} slices, managed variants {} within {} of the link",
        args.workers,
        args.shards,
        args.consistency,
        args.staleness,
        args.clock_ms,
        args.compute_slices,
        if args.no_server_push {
            "worker to server only".to_string()
        } else {
            format!(
                "both ways (server push every {} ms)",
                args.server_push_tick_ms
            )
        },
        args.budget_fraction
    );
    let mut runs = Vec::new();
    for policy in [
        None,
        Some(SendPolicy::Fifo),
        Some(SendPolicy::RelativeMagnitude),
    ] {
        let name = variant_name(policy);
        eprintln!("running {name} ...");
        let tweak = move |s: &mut Settings| {
            s.cluster.failure_timeout_ms = 10_000;
            s.net.shaper = Some(petrel_net::ShaperConfig::egress_mbit(mbit));
        };
        let r = petrel_ps::run_local_with::<PsMf>(
            config(args, policy),
            args.shards,
            args.workers,
            Transport::Quic,
            tweak,
        )
        .map_err(|source| ManagedBenchError::Run {
            variant: name.into(),
            source,
        })?;
        runs.push(summarise(name, &r.metrics));
    }
    let t = |v: &str| {
        runs.iter()
            .find(|r| r.variant == v)
            .and_then(|r| r.time_to_target_s)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let time_plot = args.plot_dir.join("managed-time.svg");
    let bytes_plot = args.plot_dir.join("managed-bytes.svg");
    plot(&time_plot, &runs, args.target_rmse, false)?;
    plot(&bytes_plot, &runs, args.target_rmse, true)?;
    let figures = ManagedFigures {
        mbit,
        budget_fraction: args.budget_fraction,
        consistency: args.consistency,
        staleness: args.staleness,
        target_rmse: args.target_rmse,
        quick: args.quick,
        server_push: !args.no_server_push,
        clock_over_relative_magnitude: ratio(t("clock"), t("relative-magnitude")),
        fifo_over_relative_magnitude: ratio(t("fifo"), t("relative-magnitude")),
        runs,
        plots: vec![
            time_plot.display().to_string(),
            bytes_plot.display().to_string(),
        ],
    };
    let mut table = Table::new(&[
        "variant",
        "reached",
        "time to target (s)",
        "iterations",
        "MB sent",
        "MB received",
        "kB/clock both ways",
        "MB to target",
        "final rmse",
        "mean staleness",
    ]);
    for r in &figures.runs {
        table.row(vec![
            r.variant.clone(),
            r.reached_target.to_string(),
            r.time_to_target_s.map_or("-".into(), fmt),
            r.iterations.to_string(),
            fmt(r.sent_bytes as f64 / 1e6),
            fmt(r.received_bytes as f64 / 1e6),
            fmt(r.both_ways_per_clock / 1e3),
            r.bytes_to_target.map_or("-".into(), |b| fmt(b / 1e6)),
            fmt(r.final_rmse),
            fmt(r.mean_staleness),
        ]);
    }
    table.print();
    let o = |x: Option<f64>| x.map_or("-".into(), fmt);
    println!(
        "clock / relative-magnitude: {}x; fifo / relative-magnitude: {}x; plots {}",
        o(figures.clock_over_relative_magnitude),
        o(figures.fifo_over_relative_magnitude),
        figures.plots.join(", ")
    );
    Ok(figures)
}

/// Runs the benchmark: table, plots and one JSON line (also written to `--json-out`).
pub fn run(args: ManagedBenchArgs) -> Result<(), ManagedBenchError> {
    let figures = measure(&args)?;
    save_json(&args.json_out, &figures).map_err(|source| ManagedBenchError::Io {
        path: args.json_out.clone(),
        source,
    })?;
    Ok(print_json(&figures)?)
}

fn plot(
    path: &Path,
    runs: &[ManagedRun],
    target: f64,
    by_bytes: bool,
) -> Result<(), ManagedBenchError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| ManagedBenchError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let e = |e: &dyn std::fmt::Display| ManagedBenchError::Plot {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let x_of = |r: &ManagedRun, p: &(f64, u64, f64)| {
        if by_bytes {
            r.both_ways_per_clock * p.1 as f64 / 1e6
        } else {
            p.0
        }
    };
    let max_x = runs
        .iter()
        .flat_map(|r| r.curve.iter().map(move |p| x_of(r, p)))
        .fold(1e-3f64, f64::max);
    let max_y = runs
        .iter()
        .flat_map(|r| r.curve.iter().map(|p| p.2))
        .fold(target, f64::max)
        * 1.05;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "MF on the PS over shaped links: managed communication",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(if by_bytes {
            "MB on the links, both ways (bytes per clock x clock)"
        } else {
            "seconds"
        })
        .y_desc("test RMSE")
        .draw()
        .map_err(|x| e(&x))?;
    let colors = [BLACK, BLUE, RED, GREEN];
    for (k, r) in runs.iter().enumerate() {
        let c = colors[k % colors.len()];
        chart
            .draw_series(LineSeries::new(
                r.curve.iter().map(|p| (x_of(r, p), p.2)),
                c.stroke_width(2),
            ))
            .map_err(|x| e(&x))?
            .label(r.variant.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, target), (max_x, target)],
            BLACK.mix(0.4),
        ))
        .map_err(|x| e(&x))?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
