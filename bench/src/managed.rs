//! `petrel bench managed`: Bösen's managed communication on MF (or LDA, `--app lda`), every
//! node's egress shaped to `--mbit`, three variants on their own in-process clusters:
//! `clock` (updates leave at the clock boundary), `fifo` (managed both ways within a budget
//! of the link, oldest first; shards push changed rows) and `relative-magnitude` (largest
//! `|delta| / |value|` first). Reported: time, iterations and bytes to the target, and the
//! curve against time and bytes. LDA's target defaults to 90 % of the clock run's gain.

use crate::BenchError;
use crate::common::{PsClusterArgs, fmt_opt, json_table, ratio, save_and_print};
use petrel::train::plot::{Series, line_plot};
use petrel_actors::{Settings, Transport};
use petrel_ml::data::synthetic::LdaCorpusParams;
use petrel_ps::core::managed::SendPolicy;
use petrel_ps::kit::settings::{ManagedSettings, StragglerSettings};
use petrel_ps::{
    ConsistencyModel, PsLda, PsLdaMetrics, PsLdaSettings, PsMf, PsMfResult, PsMfSettings,
};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The app the bench runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagedApp {
    /// Matrix factorization (target: held-out RMSE).
    Mf,
    /// Data-parallel LDA (target: log-likelihood per token).
    Lda,
}

/// `petrel bench managed`.
#[derive(clap::Args, Debug, Clone)]
pub struct ManagedBenchArgs {
    /// The app: ps-mf or ps-lda.
    #[arg(long, value_enum, default_value_t = ManagedApp::Mf)]
    pub app: ManagedApp,
    #[command(flatten)]
    pub cluster: PsClusterArgs,
    /// Egress rate of every node's link (Mbit/s).
    #[arg(long, default_value_t = 20.0)]
    pub mbit: f64,
    /// The managed budget (per worker, and per shard for server push) as a fraction of the
    /// link rate: Bösen spends the bandwidth that reads and clock flushes leave over.
    #[arg(long, default_value_t = 0.25)]
    pub budget_fraction: f64,
    /// Consistency model of the items table.
    #[arg(long, value_enum, default_value_t = ConsistencyModel::Ssp)]
    pub consistency: ConsistencyModel,
    /// Its staleness bound.
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
    /// LDA: the target log-likelihood per token (unset: 90 % of the way from the clock
    /// run's initial to its final value).
    #[arg(long, allow_hyphen_values = true)]
    pub target_loglik: Option<f64>,
    /// LDA: passes over the corpus.
    #[arg(long, default_value_t = 30)]
    pub iterations: usize,
    /// LDA: documents of the synthetic corpus (100 tokens each, 5000 words, 20 topics).
    #[arg(long, default_value_t = 2000)]
    pub docs: usize,
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
    /// Directory of the plots (`managed-time.svg`, `managed-bytes.svg`; `managed-lda-*` for
    /// LDA).
    #[arg(long, default_value = "target/bench")]
    pub plot_dir: PathBuf,
    /// Where the JSON figures are also written (default `target/bench/managed.json`, or
    /// `managed-lda.json` for LDA).
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// One variant's figures.
#[derive(Default, Debug, Clone, Serialize, PartialEq)]
pub struct ManagedRun {
    /// `clock`, `fifo` or `relative-magnitude`.
    pub variant: String,
    pub reached_target: bool,
    pub time_to_target_s: Option<f64>,
    /// MF: min clock at the target (or the end); LDA: the pass at the target (or passes).
    pub iterations: u64,
    /// Bytes all workers sent and received in the run.
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Bytes per clock, sent and both ways (every byte on a link: shards talk only to
    /// workers).
    pub bytes_per_clock: f64,
    pub both_ways_per_clock: f64,
    /// Estimated bytes on the links until the target.
    pub bytes_to_target: Option<f64>,
    /// Final held-out RMSE (MF) or log-likelihood per token (LDA).
    pub final_value: f64,
    /// LDA: rows the workers sent before a clock boundary (0 for MF).
    pub managed_rows: u64,
    pub mean_staleness: f64,
    pub wall_s: f64,
    /// `(seconds, clock, value)` points (value: RMSE or log-likelihood per token).
    pub curve: Vec<(f64, u64, f64)>,
}

/// The JSON line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ManagedFigures {
    pub app: String,
    /// `rmse` (lower is better) or `loglik_per_token` (higher is better).
    pub metric: String,
    pub mbit: f64,
    pub budget_fraction: f64,
    pub consistency: ConsistencyModel,
    pub staleness: u32,
    pub target: f64,
    pub quick: bool,
    pub server_push: bool,
    pub runs: Vec<ManagedRun>,
    /// Time to target of `clock` over `relative-magnitude` (> 1: managed is faster).
    pub clock_over_relative_magnitude: Option<f64>,
    pub fifo_over_relative_magnitude: Option<f64>,
    pub plots: Vec<String>,
}

fn comm(args: &ManagedBenchArgs, managed: Option<SendPolicy>) -> ManagedSettings {
    ManagedSettings {
        managed,
        compute_slices: args.compute_slices,
        managed_bytes_per_s: (args.mbit * 1e6 / 8.0 * args.budget_fraction.max(0.0)) as u64,
    }
}

fn lda_config(args: &ManagedBenchArgs, managed: Option<SendPolicy>) -> PsLdaSettings {
    let (n_docs, vocab_size, doc_length, iterations) = if args.quick {
        (200, 500, 40, 6)
    } else {
        (args.docs, 5000, 100, args.iterations)
    };
    PsLdaSettings {
        synthetic: LdaCorpusParams {
            n_docs,
            vocab_size,
            doc_length,
            ..LdaCorpusParams::default()
        },
        n_topics: 20,
        iterations,
        consistency: args.consistency,
        staleness: args.staleness,
        comm: comm(args, managed),
        ..PsLdaSettings::default()
    }
}

/// A run's traffic figures from its workers' bytes and clocks; the rest to be filled in.
fn traffic(
    name: &str,
    sent: &[u64],
    received: &[u64],
    clocks: &[u64],
    mean_staleness: f64,
    wall_s: f64,
) -> ManagedRun {
    let (sent, received) = (sent.iter().sum::<u64>(), received.iter().sum::<u64>());
    let clocks = clocks.iter().sum::<u64>() as f64 / clocks.len().max(1) as f64;
    let per_clock = |bytes: u64| {
        if clocks > 0.0 {
            bytes as f64 / clocks
        } else {
            0.0
        }
    };
    ManagedRun {
        variant: name.to_string(),
        sent_bytes: sent,
        received_bytes: received,
        bytes_per_clock: per_clock(sent),
        both_ways_per_clock: per_clock(sent + received),
        mean_staleness,
        wall_s,
        ..ManagedRun::default()
    }
}

/// An LDA run's figures (the target by [`lda_targets`]).
fn summarise_lda(name: &str, m: &PsLdaMetrics) -> ManagedRun {
    let cpi = u64::from(m.clocks_per_iteration.max(1));
    ManagedRun {
        iterations: m.lda.iterations as u64,
        final_value: m.lda.final_loglik_per_token,
        managed_rows: m.managed_rows_sent,
        // Clock 0 holds the initial counts; pass `i` ends at clock `1 + i * cpi`.
        curve: m
            .lda
            .loglik
            .iter()
            .map(|p| {
                let clock = 1 + p.iteration as u64 * cpi;
                (p.elapsed_s, clock, p.loglik_per_token)
            })
            .collect(),
        ..traffic(
            name,
            &m.per_worker_sent_bytes,
            &m.per_worker_received_bytes,
            &m.worker_clocks,
            m.read_staleness.mean,
            m.lda.elapsed_s,
        )
    }
}

/// The LDA target (given, or 90 % of the clock run's gain) and each run's first pass at
/// or above it.
fn lda_targets(args: &ManagedBenchArgs, runs: &mut [ManagedRun]) -> f64 {
    let target = args.target_loglik.unwrap_or_else(|| {
        let clock = runs.iter().find(|r| r.variant == "clock");
        let first = clock.and_then(|r| r.curve.first()).map_or(0.0, |p| p.2);
        let last = clock.map_or(0.0, |r| r.final_value);
        first + 0.9 * (last - first)
    });
    for r in runs.iter_mut() {
        if let Some(p) = r.curve.iter().find(|p| p.2 >= target) {
            r.reached_target = true;
            r.time_to_target_s = Some(p.0);
            r.iterations = (r.curve.iter().position(|q| q == p).unwrap_or(0)) as u64;
            r.bytes_to_target = Some(r.both_ways_per_clock * p.1 as f64);
        }
    }
    target
}

fn config(args: &ManagedBenchArgs, managed: Option<SendPolicy>) -> PsMfSettings {
    PsMfSettings {
        consistency: args.consistency,
        staleness: args.staleness,
        // Quick runs (tests) also end by clocks, so a lost stop cannot keep them going.
        max_clocks: Some(if args.quick { 300 } else { u64::MAX }),
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_every: Some(1),
        stragglers: StragglerSettings {
            clock_ms: args.clock_ms,
            ..Default::default()
        },
        comm: comm(args, managed),
        server_push: managed.filter(|_| !args.no_server_push),
        server_push_tick_ms: args.server_push_tick_ms,
        // The comparison is of when updates leave: no prefetch spending the link on reads.
        no_prefetch: true,
        ..crate::common::ps_mf(args.quick)
    }
}

fn summarise(name: &str, r: &PsMfResult) -> ManagedRun {
    let run = traffic(
        name,
        &r.per_worker_sent_bytes,
        &r.per_worker_received_bytes,
        &r.worker_clocks,
        r.staleness.mean,
        r.wall_s,
    );
    ManagedRun {
        reached_target: r.reached_target,
        time_to_target_s: r.time_to_target_s,
        iterations: r.iterations,
        bytes_to_target: r
            .reached_target
            .then_some(run.both_ways_per_clock * r.iterations as f64),
        final_value: r.final_rmse,
        curve: r
            .curve
            .iter()
            .map(|p| (p.seconds, p.clock, p.rmse))
            .collect(),
        ..run
    }
}

/// Runs the three variants and returns the figures (the table is printed).
pub fn measure(args: &ManagedBenchArgs) -> Result<ManagedFigures, BenchError> {
    let mbit = args.mbit;
    let lda = args.app == ManagedApp::Lda;
    let (app, metric, stem) = match lda {
        true => ("lda", "loglik_per_token", "managed-lda"),
        false => ("mf", "rmse", "managed"),
    };
    let compute = if lda {
        "sampling (real time)".to_string()
    } else {
        format!("{} ms/clock", args.clock_ms)
    };
    eprintln!(
        "{} on the ps, {} workers, {} shards, links {mbit} Mbit/s egress, {} s={}, {compute} \
         in {} slices, managed variants {} within {} of the link",
        app,
        args.cluster.workers,
        args.cluster.shards,
        args.consistency,
        args.staleness,
        args.compute_slices,
        if lda || args.no_server_push {
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
    for (policy, name) in [
        (None, "clock"),
        (Some(SendPolicy::Fifo), "fifo"),
        (Some(SendPolicy::RelativeMagnitude), "relative-magnitude"),
    ] {
        eprintln!("running {name} ...");
        let shape = |s: &mut Settings| {
            s.net.shaper = Some(petrel_net::ShaperConfig::egress_mbit(mbit));
        };
        let (c, quic) = (&args.cluster, Transport::Quic);
        runs.push(
            if lda {
                let r = c.run::<PsLda>(lda_config(args, policy), quic, shape);
                r.map(|r| summarise_lda(name, &r.metrics))
            } else {
                let r = c.run::<PsMf>(config(args, policy), quic, shape);
                r.map(|r| summarise(name, &r.metrics))
            }
            .map_err(BenchError::run(format!("variant {name}")))?,
        );
    }
    let target = if lda {
        lda_targets(args, &mut runs)
    } else {
        args.target_rmse
    };
    let t = |v: &str| {
        runs.iter()
            .find(|r| r.variant == v)
            .and_then(|r| r.time_to_target_s)
    };
    let mut plots = Vec::new();
    for (by_bytes, x) in [(false, "time"), (true, "bytes")] {
        let path = args.plot_dir.join(format!("{stem}-{x}.svg"));
        plot(&path, &runs, target, by_bytes, args.app)?;
        plots.push(path.display().to_string());
    }
    let figures = ManagedFigures {
        app: app.into(),
        metric: metric.into(),
        mbit,
        budget_fraction: args.budget_fraction,
        consistency: args.consistency,
        staleness: args.staleness,
        target,
        quick: args.quick,
        server_push: !lda && !args.no_server_push,
        clock_over_relative_magnitude: ratio(t("clock"), t("relative-magnitude")),
        fifo_over_relative_magnitude: ratio(t("fifo"), t("relative-magnitude")),
        runs,
        plots,
    };
    let keys = "variant reached_target time_to_target_s iterations sent_bytes received_bytes \
                both_ways_per_clock bytes_to_target final_value mean_staleness";
    json_table(
        &figures.runs,
        &format!("{keys} {}", if lda { "managed_rows" } else { "" }),
    )
    .print();
    println!(
        "clock / relative-magnitude: {}x; fifo / relative-magnitude: {}x; plots {}",
        fmt_opt(figures.clock_over_relative_magnitude),
        fmt_opt(figures.fifo_over_relative_magnitude),
        figures.plots.join(", ")
    );
    Ok(figures)
}

/// Runs the benchmark: table, plots and one JSON line (also written to `--json-out`).
pub fn run(args: ManagedBenchArgs) -> Result<(), BenchError> {
    let figures = measure(&args)?;
    let json_out = args.json_out.clone().unwrap_or_else(|| {
        PathBuf::from(match args.app {
            ManagedApp::Mf => "target/bench/managed.json",
            ManagedApp::Lda => "target/bench/managed-lda.json",
        })
    });
    save_and_print(&json_out, &figures)
}

/// Each variant's curve against seconds or (`by_bytes`) MB on the links, and the target.
fn plot(
    path: &Path,
    runs: &[ManagedRun],
    target: f64,
    by_bytes: bool,
    app: ManagedApp,
) -> Result<(), BenchError> {
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
    let mut series: Vec<Series> = runs
        .iter()
        .map(|r| Series {
            name: r.variant.clone(),
            points: r.curve.iter().map(|p| (x_of(r, p), p.2)).collect(),
        })
        .collect();
    series.push(Series {
        name: "target".into(),
        points: vec![(0.0, target), (max_x, target)],
    });
    let (app_name, y_desc) = match app {
        ManagedApp::Mf => ("MF", "test RMSE"),
        ManagedApp::Lda => ("LDA", "log-likelihood per token"),
    };
    line_plot(
        path,
        &format!("{app_name} on the PS over shaped links: managed communication"),
        if by_bytes {
            "MB on the links, both ways (bytes per clock x clock)"
        } else {
            "seconds"
        },
        y_desc,
        &series,
        false,
    )
    .map_err(BenchError::plot(path))
}
