//! `petrel bench managed`: Bösen's managed communication on MF (or LDA, `--app lda`), every
//! node's egress shaped to `--mbit`, on data with power-law popularity (`--skew`), the
//! variants on their own in-process clusters, interleaved over `--repeats`: `clock`
//! (updates leave at the clock boundary, SSP), `relative-magnitude` (managed both ways
//! within `--budget-fraction` of the link: aged rows at clocks, the top rows in between,
//! shards pushing) and `bsp` (clock boundary under BSP, the bound on freshness); `--fifo`
//! adds managed in oldest-first order. Reported: medians of time, clocks and bytes to the
//! target, the CPU the nodes used, and the curves. LDA's target defaults to 90 % of the
//! way from the first clock run's initial to its final value. `--netns` runs every node as
//! a process of its own in a network namespace of its own, the links limited by `tc`.

mod data;
mod netns;
mod plot;
mod summary;

use plot::plot;
pub use summary::VariantSummary;
use summary::{lda_targets, summarise, summarise_lda, summarise_variant};

use crate::BenchError;
use crate::common::{PsClusterArgs, fmt_opt, json_table, ratio, save_and_print};
use petrel::netns::Hosts;
use petrel_actors::{Settings, Transport};
use petrel_ml::data::synthetic::LdaCorpusParams;
use petrel_ps::core::managed::SendPolicy;
use petrel_ps::kit::settings::{ManagedSettings, RunFiles, StragglerSettings};
use petrel_ps::{
    ConsistencyModel, PsLda, PsLdaMetrics, PsLdaSettings, PsMf, PsMfResult, PsMfSettings,
};
use serde::Serialize;
use std::collections::BTreeMap;
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
    /// link rate: Bösen spends the bandwidth that clock flushes leave over (a flush taking
    /// a third of a clock leaves two thirds).
    #[arg(long, default_value_t = 0.67)]
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
    /// MF: the SGD step (hot users and items of skewed data take many steps a clock).
    #[arg(long, default_value_t = 0.05)]
    pub learning_rate: f32,
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
    /// Every node a `petrel node` process in a network namespace of its own (the shards,
    /// a monitor node, the workers), each link limited by `tc` at `--mbit` on both ends
    /// (needs root and iproute2); without it, one in-process cluster whose nodes' egress the
    /// transport's shaper limits.
    #[arg(long)]
    pub netns: bool,
    /// With --netns: stop a run's processes after this many seconds.
    #[arg(long, default_value_t = 300.0)]
    pub netns_timeout_s: f64,
    /// Small data and short limits: for tests (checks shapes, not speed).
    #[arg(long)]
    pub quick: bool,
    /// MF: managed variants send worker-to-server only (no server push).
    #[arg(long)]
    pub no_server_push: bool,
    /// Interleaved repeats of every variant (figures are medians; 1 under `--quick`).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Power-law exponent of the popularity of users and items (MF) or words (LDA); 0: the
    /// apps' own uniform synthetic data.
    #[arg(long, default_value_t = 1.0)]
    pub skew: f64,
    /// Also run managed communication in oldest-first order.
    #[arg(long)]
    pub fifo: bool,
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
    /// `clock`, `relative-magnitude`, `bsp` or `fifo`.
    pub variant: String,
    /// Which repeat.
    pub repeat: usize,
    /// Cores the nodes used over the run (CPU seconds / wall seconds): in-process, the one
    /// process's; with `--netns`, all node processes'.
    pub cpu_cores: f64,
    /// With `--netns`: the CPU seconds (user + system) of each node's process.
    pub cpu_seconds_by_node: BTreeMap<String, f64>,
    /// With `--netns`: the seconds each node's threads were ready to run but waited for a
    /// core (the 2 cores are shared by every node and whatever else runs on the machine).
    pub runqueue_wait_s_by_node: BTreeMap<String, f64>,
    pub reached_target: bool,
    pub time_to_target_s: Option<f64>,
    /// MF: min clock at the target (or the end); LDA: the pass at the target (or passes).
    pub iterations: u64,
    /// The min clock at the target.
    pub clocks_to_target: Option<u64>,
    /// Seconds a worker waited for reads per clock (mean over workers): where the time
    /// that is not compute goes.
    pub wait_s_per_clock: f64,
    /// LDA: seconds per clock a worker spent sampling (mean over workers); the rest of a
    /// clock, beside `wait_s_per_clock`, is the worker thread's other work.
    pub sweep_s_per_clock: Option<f64>,
    /// Clocks the workers completed (mean).
    pub clocks: f64,
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
    /// `shaper` (one process, the transport's token bucket on every node's egress) or
    /// `netns-tc` (a process and network namespace per node, `tc` on both link ends).
    pub links: String,
    /// The nodes of a run (with `--netns`, one process each; the monitor is its own node).
    pub nodes: Vec<String>,
    pub repeats: usize,
    pub skew: f64,
    /// Emulated compute per clock (MF; LDA samples for real).
    pub clock_ms: f64,
    /// Median seconds a `clock` run's flush of one worker's clock takes on its link, over
    /// the median seconds of a clock: the link load of clock-boundary updates.
    pub flush_fraction: Option<f64>,
    /// Per variant, medians over the repeats.
    pub summaries: Vec<VariantSummary>,
    pub runs: Vec<ManagedRun>,
    /// Median time to target of `clock` over `relative-magnitude` (> 1: managed is faster).
    pub speedup_vs_clock: Option<f64>,
    /// Median time to target of `bsp` over `relative-magnitude`.
    pub speedup_vs_bsp: Option<f64>,
    /// The same as `speedup_vs_clock` (the older key).
    pub clock_over_relative_magnitude: Option<f64>,
    /// With `--fifo`: `fifo` over `relative-magnitude`.
    pub fifo_over_relative_magnitude: Option<f64>,
    pub plots: Vec<String>,
}

/// A variant: its name, whether it runs under BSP, and its managed order.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    bsp: bool,
    managed: Option<SendPolicy>,
}

impl Variant {
    fn consistency(&self, args: &ManagedBenchArgs) -> ConsistencyModel {
        if self.bsp {
            ConsistencyModel::Bsp
        } else {
            args.consistency
        }
    }
}

fn comm(args: &ManagedBenchArgs, managed: Option<SendPolicy>) -> ManagedSettings {
    ManagedSettings {
        managed,
        compute_slices: args.compute_slices,
        managed_bytes_per_s: (args.mbit * 1e6 / 8.0 * args.budget_fraction.max(0.0)) as u64,
    }
}

/// LDA's corpus: documents, vocabulary, tokens per document, topics.
fn lda_shape(args: &ManagedBenchArgs) -> (usize, usize, usize, usize) {
    match args.quick {
        true => (200, 500, 40, 20),
        false => (args.docs, 5000, 100, 20),
    }
}

fn lda_config(args: &ManagedBenchArgs, v: Variant, data: Option<&Path>) -> PsLdaSettings {
    let (n_docs, vocab_size, doc_length, n_topics) = lda_shape(args);
    PsLdaSettings {
        docword: data.map(Path::to_path_buf),
        synthetic: LdaCorpusParams {
            n_docs,
            vocab_size,
            doc_length,
            ..LdaCorpusParams::default()
        },
        n_topics,
        iterations: if args.quick { 6 } else { args.iterations },
        consistency: v.consistency(args),
        staleness: args.staleness,
        comm: comm(args, v.managed),
        ..PsLdaSettings::default()
    }
}

/// MF's data: users, items, rank and ratings (as `common::ps_mf`'s synthetic data).
fn mf_shape(args: &ManagedBenchArgs) -> (usize, usize, usize, usize) {
    match args.quick {
        true => (400, 200, 5, 4000),
        false => (2000, 1000, 5, 40_000),
    }
}

fn config(args: &ManagedBenchArgs, v: Variant, data: Option<&Path>) -> PsMfSettings {
    PsMfSettings {
        data: data.map(Path::to_path_buf),
        consistency: v.consistency(args),
        staleness: args.staleness,
        // Quick runs (tests) also end by clocks, so a lost stop cannot keep them going; the
        // other limit is out of reach but fits the nodes' TOML settings (i64).
        max_clocks: Some(if args.quick { 300 } else { u64::from(u32::MAX) }),
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_every: Some(1),
        stragglers: StragglerSettings {
            clock_ms: args.clock_ms,
            ..Default::default()
        },
        comm: comm(args, v.managed),
        server_push: v.managed.filter(|_| !args.no_server_push),
        server_push_tick_ms: args.server_push_tick_ms,
        // The comparison is of when updates leave: no prefetch spending the link on reads.
        no_prefetch: true,
        learning_rate: args.learning_rate,
        ..crate::common::ps_mf(args.quick)
    }
}

/// The variants of a run of the bench.
fn variants(args: &ManagedBenchArgs) -> Vec<Variant> {
    let v = |name, bsp, managed| Variant { name, bsp, managed };
    let mut out = vec![
        v("clock", false, None),
        v(
            "relative-magnitude",
            false,
            Some(SendPolicy::RelativeMagnitude),
        ),
        v("bsp", true, None),
    ];
    if args.fifo {
        out.push(v("fifo", false, Some(SendPolicy::Fifo)));
    }
    out
}

/// Writes the skewed data set of the app (`None` with `--skew 0`).
fn skewed_data(args: &ManagedBenchArgs) -> Result<Option<PathBuf>, BenchError> {
    if args.skew <= 0.0 {
        return Ok(None);
    }
    // A temporary directory, removed after the runs: the seed makes the data again.
    // One per call: measurements may run side by side in one process (tests).
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("petrel-managed-data-{pid}-{call}"));
    let path = match args.app {
        ManagedApp::Mf => {
            let path = dir.join(format!("ratings-skew{}.txt", args.skew));
            data::write_ratings(&path, mf_shape(args), args.skew, 7)?;
            path
        }
        ManagedApp::Lda => {
            let path = dir.join(format!("docword-skew{}.txt", args.skew));
            data::write_corpus(&path, lda_shape(args), args.skew, 7)?;
            path
        }
    };
    Ok(Some(path))
}

/// One run of `v` as node processes on `hosts`.
fn run_on_hosts(
    args: &ManagedBenchArgs,
    v: Variant,
    data: Option<&Path>,
    hosts: &Hosts,
) -> Result<ManagedRun, BenchError> {
    let dir = netns::run_dir();
    let out = dir.join("out");
    let files = RunFiles {
        out: Some(out.clone()),
        ..RunFiles::default()
    };
    let (run, nodes) = if args.app == ManagedApp::Lda {
        let cfg = PsLdaSettings {
            files,
            ..lda_config(args, v, data)
        };
        let (m, nodes) = netns::run::<PsLda, PsLdaMetrics>(args, hosts, &cfg, (&dir, &out))?;
        (summarise_lda(v.name, &m), nodes)
    } else {
        let cfg = PsMfSettings {
            files,
            ..config(args, v, data)
        };
        let (m, nodes) = netns::run::<PsMf, PsMfResult>(args, hosts, &cfg, (&dir, &out))?;
        (summarise(v.name, &m), nodes)
    };
    Ok(ManagedRun {
        cpu_cores: nodes.cpu_cores,
        cpu_seconds_by_node: nodes.cpu_s_by_node,
        runqueue_wait_s_by_node: nodes.runqueue_wait_s_by_node,
        ..run
    })
}

/// One run of `v` (as processes on `hosts` when given), with the cores its nodes used.
fn run_variant(
    args: &ManagedBenchArgs,
    v: Variant,
    data: Option<&Path>,
    hosts: Option<&Hosts>,
) -> Result<ManagedRun, BenchError> {
    if let Some(hosts) = hosts {
        return run_on_hosts(args, v, data, hosts);
    }
    let shape = |s: &mut Settings| {
        s.net.shaper = Some(petrel_net::ShaperConfig::egress_mbit(args.mbit));
    };
    let (c, quic) = (&args.cluster, Transport::Quic);
    let cpu0 = petrel_observe::process::read().map(|p| p.cpu_s);
    let t0 = std::time::Instant::now();
    let run = if args.app == ManagedApp::Lda {
        let r = c.run::<PsLda>(lda_config(args, v, data), quic, shape);
        r.map(|r| summarise_lda(v.name, &r.metrics))
    } else {
        let r = c.run::<PsMf>(config(args, v, data), quic, shape);
        r.map(|r| summarise(v.name, &r.metrics))
    };
    let mut run = run.map_err(BenchError::run(format!("variant {}", v.name)))?;
    let wall = t0.elapsed().as_secs_f64().max(1e-9);
    if let (Some(a), Some(b)) = (cpu0, petrel_observe::process::read().map(|p| p.cpu_s)) {
        run.cpu_cores = (b - a) / wall;
    }
    Ok(run)
}

/// Runs the variants, interleaved over the repeats, and returns the figures (the table
/// is printed).
pub fn measure(args: &ManagedBenchArgs) -> Result<ManagedFigures, BenchError> {
    // First, so a machine without namespaces refuses before any work; torn down when
    // dropped, on every path out of here.
    let hosts = args.netns.then(|| netns::hosts(args)).transpose()?;
    let mbit = args.mbit;
    let lda = args.app == ManagedApp::Lda;
    let (app, metric, stem) = match lda {
        true => ("lda", "loglik_per_token", "managed-lda"),
        false => ("mf", "rmse", "managed"),
    };
    let server_push = lda || !args.no_server_push;
    eprintln!(
        "{app} on the ps, {} workers, {} shards, links {mbit} Mbit/s egress, {} s={}, {}, \
         {} slices per clock, skew {}, managed both ways: {server_push}, budget {} of the link",
        args.cluster.workers,
        args.cluster.shards,
        args.consistency,
        args.staleness,
        match lda {
            true => "sampling (real time)".to_string(),
            false => format!("{} ms/clock", args.clock_ms),
        },
        args.compute_slices,
        args.skew,
        args.budget_fraction
    );
    let data = skewed_data(args)?;
    let repeats = if args.quick { 1 } else { args.repeats.max(1) };
    let vs = variants(args);
    let mut runs = Vec::new();
    let mut ran = Ok(());
    'repeats: for repeat in 0..repeats {
        for &v in &vs {
            eprintln!("running {} (repeat {}) ...", v.name, repeat + 1);
            match run_variant(args, v, data.as_deref(), hosts.as_ref().map(|h| &h.0)) {
                Ok(run) => runs.push(ManagedRun { repeat, ..run }),
                Err(e) => {
                    ran = Err(e);
                    break 'repeats;
                }
            }
        }
    }
    drop(hosts);
    if let Some(dir) = data.as_deref().and_then(Path::parent) {
        let _ = std::fs::remove_dir_all(dir);
    }
    ran?;
    let target = if lda {
        lda_targets(args, &mut runs)
    } else {
        args.target_rmse
    };
    let summaries: Vec<VariantSummary> = vs
        .iter()
        .map(|v| summarise_variant(v.name, &runs))
        .collect();
    let t = |v: &str| {
        (summaries.iter())
            .find(|s| s.variant == v)
            .and_then(|s| s.time_to_target_s)
    };
    let clock = summaries.iter().find(|s| s.variant == "clock");
    let flush_fraction = clock.and_then(|c| {
        let per_worker = c.bytes_per_clock? / args.cluster.workers.max(1) as f64;
        Some(per_worker * 8.0 / (mbit * 1e6) / c.clock_s?)
    });
    let first: Vec<ManagedRun> = runs.iter().filter(|r| r.repeat == 0).cloned().collect();
    let mut plots = Vec::new();
    for (by_bytes, x) in [(false, "time"), (true, "bytes")] {
        let path = args.plot_dir.join(format!("{stem}-{x}.svg"));
        plot(&path, &first, target, by_bytes, args.app)?;
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
        server_push,
        links: if args.netns { "netns-tc" } else { "shaper" }.into(),
        nodes: netns::node_names(args)
            .into_iter()
            .filter(|n| args.netns || n != "monitor")
            .collect(),
        repeats,
        skew: args.skew,
        clock_ms: args.clock_ms,
        flush_fraction,
        speedup_vs_clock: ratio(t("clock"), t("relative-magnitude")),
        speedup_vs_bsp: ratio(t("bsp"), t("relative-magnitude")),
        clock_over_relative_magnitude: ratio(t("clock"), t("relative-magnitude")),
        fifo_over_relative_magnitude: ratio(t("fifo"), t("relative-magnitude")),
        summaries,
        runs,
        plots,
    };
    json_table(
        &figures.summaries,
        "variant reached time_to_target_s clocks_to_target bytes_per_clock both_ways_per_clock \
         clock_s wait_s_per_clock sweep_s_per_clock cpu_cores",
    )
    .print();
    for s in figures
        .summaries
        .iter()
        .filter(|s| !s.cpu_seconds_by_node.is_empty())
    {
        let nodes: Vec<String> = (s.cpu_seconds_by_node.iter())
            .map(|(node, cpu)| format!("{node} {cpu:.2}"))
            .collect();
        println!("{}: CPU s by node: {}", s.variant, nodes.join(", "));
        let waits: Vec<String> = (s.runqueue_wait_s_by_node.iter())
            .map(|(node, wait)| format!("{node} {wait:.2}"))
            .collect();
        println!("{}: s waiting for a core: {}", s.variant, waits.join(", "));
    }
    println!(
        "medians of {repeats}: speed-up vs clock {}x, vs bsp {}x; clock flush {} of a clock; \
         plots {}",
        fmt_opt(figures.speedup_vs_clock),
        fmt_opt(figures.speedup_vs_bsp),
        fmt_opt(figures.flush_fraction),
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
