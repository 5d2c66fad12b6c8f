//! `petrel bench consistency`: BSP, SSP(s), ESSP(s) and async on the parameter server under
//! stragglers, on matrix factorization and logistic regression, side by side. Each (app,
//! model, staleness) runs on its own in-process cluster with emulated compute (seeded
//! transient stragglers, an optional persistent one) and shaped QUIC links, until the
//! target or `max_seconds`; one plot per app of time to target against the bound.

use crate::BenchError;
use crate::common::{
    LrDataArgs, PsClusterArgs, TransientArgs, fmt_opt, json_table, ratio, save_and_print,
};
use petrel::train::plot::{Series, line_plot};
use petrel_actors::{Settings, Transport};
use petrel_ps::core::stats::{ReadStats, StalenessReport};
use petrel_ps::{ConsistencyModel, PsLr, PsLrSettings, PsMf, PsMfSettings};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The PS apps the bench runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsistencyApp {
    /// Matrix factorization (items table under the model; target: held-out RMSE).
    Mf,
    /// Multinomial logistic regression (weights under the model; target: log-loss).
    Lr,
}

impl std::fmt::Display for ConsistencyApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::common::name_of(self))
    }
}

/// `petrel bench consistency`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConsistencyBenchArgs {
    /// Apps to run (comma separated): mf, lr.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "mf,lr")]
    pub apps: Vec<ConsistencyApp>,
    #[command(flatten)]
    pub cluster: PsClusterArgs,
    /// Staleness bounds of SSP and ESSP (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8")]
    pub staleness: Vec<u32>,
    #[command(flatten)]
    pub stragglers: TransientArgs,
    /// Worker 0 is slower by this factor on every clock (1 = no persistent straggler).
    #[arg(long, default_value_t = 1.0)]
    pub persistent_factor: f64,
    /// Seed of the slowdowns (and of the data).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Emulated compute time per clock of a normal worker (ms).
    #[arg(long, default_value_t = 20.0)]
    pub clock_ms: f64,
    /// Added one-way latency per packet on QUIC links (ms).
    #[arg(long, default_value_t = 1)]
    pub latency_ms: u64,
    /// Uniform extra delay per packet on QUIC links, `0..=jitter_ms` (ms).
    #[arg(long, default_value_t = 2)]
    pub jitter_ms: u64,
    /// MF: target held-out RMSE.
    #[arg(long, default_value_t = 0.4)]
    pub target_rmse: f64,
    /// LR: target held-out log-loss (about 50 BSP clocks with the default data and step).
    #[arg(long, default_value_t = 0.2)]
    pub target_log_loss: f64,
    #[command(flatten)]
    pub lr: LrDataArgs,
    /// LR: the shards' SGD step.
    #[arg(long, default_value_t = 0.5)]
    pub lr_learning_rate: f32,
    /// Per-run time limit (s).
    #[arg(long, default_value_t = 30.0)]
    pub max_seconds: f64,
    /// Models to run (comma separated): bsp, ssp, essp, async.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bsp,ssp,essp,async"
    )]
    pub models: Vec<ConsistencyModel>,
    /// quic (127.0.0.1, shaped latency and jitter) or memory.
    #[arg(long, value_enum, default_value_t = Transport::Quic)]
    pub transport: Transport,
    /// Small data (LR: 1000 samples, 40 features, 4 classes, step 1), staleness 0 and 2
    /// only, short limits: for tests (checks shapes, not speed).
    #[arg(long)]
    pub quick: bool,
    /// Directory of the plots (`consistency-<app>.svg`).
    #[arg(long, default_value = "target/bench")]
    pub plot_dir: PathBuf,
    /// Where the JSON figures are also written.
    #[arg(long, default_value = "target/bench/consistency.json")]
    pub json_out: PathBuf,
}

/// One run: an app under one model and staleness bound.
#[derive(Default, Debug, Clone, Serialize, PartialEq)]
pub struct ConsistencyRun {
    pub model: ConsistencyModel,
    /// Its staleness bound (0 for BSP, none for async).
    pub staleness: Option<u32>,
    pub reached_target: bool,
    pub time_to_target_s: Option<f64>,
    /// Min clock when the target was reached (or at the end).
    pub iterations: u64,
    /// Mean observed staleness of the reads.
    pub mean_staleness: f64,
    pub staleness_variance: f64,
    pub max_staleness: u64,
    /// The part of `staleness_variance` between workers' means (MF only).
    pub staleness_variance_between_workers: Option<f64>,
    /// Mean observed staleness per worker, MF only.
    pub per_worker_mean_staleness: Vec<f64>,
    /// Content staleness (per read and other writer, the clocks of its updates the copy
    /// lacked), mean and variance.
    pub content_staleness_mean: Option<f64>,
    pub content_staleness_variance: Option<f64>,
    pub wall_s: f64,
    pub per_clock: Option<ClockBreakdown>,
}

/// Where a worker's clock went, averaged over every clock of every worker: run time,
/// compute and time blocked in reads (`None`: the app does not time its workers), of that
/// in reads above the shard's min clock last seen (`bound_blocked_ms`), the rest
/// (`other_ms`), and the read requests behind them.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct ClockBreakdown {
    pub ms: Option<f64>,
    pub compute_ms: Option<f64>,
    pub blocked_ms: f64,
    pub bound_blocked_ms: f64,
    pub other_ms: Option<f64>,
    pub round_trips: f64,
    pub request_messages: f64,
    pub rows_requested: f64,
    /// Of those, requested ahead of the clock that needs them.
    pub rows_ahead: f64,
}

impl ClockBreakdown {
    /// The breakdown from per-worker clocks, reads, compute and run seconds (empty: not
    /// timed).
    pub fn of(
        clocks: &[u64],
        reads: &[ReadStats],
        compute_s: &[f64],
        run_s: &[f64],
    ) -> Option<Self> {
        let n: u64 = clocks.iter().sum();
        if n == 0 || reads.is_empty() {
            return None;
        }
        let mut r = ReadStats::default();
        reads.iter().for_each(|x| r.merge(x));
        let per = |x: f64| x / n as f64;
        let timed = |xs: &[f64]| {
            let s: f64 = xs.iter().sum();
            (s > 0.0).then(|| per(s) * 1e3)
        };
        let (ms, compute_ms) = (timed(run_s), timed(compute_s));
        let blocked_ms = per(r.blocked_s) * 1e3;
        Some(ClockBreakdown {
            ms,
            compute_ms,
            blocked_ms,
            bound_blocked_ms: per(r.bound_blocked_s) * 1e3,
            other_ms: ms.zip(compute_ms).map(|(m, c)| m - c - blocked_ms),
            round_trips: per(r.blocking_rounds as f64),
            request_messages: per(r.request_messages as f64),
            rows_requested: per(r.rows_requested as f64),
            rows_ahead: per(r.rows_ahead as f64),
        })
    }
}

/// The figures of one app.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConsistencyAppFigures {
    pub target: f64,
    pub runs: Vec<ConsistencyRun>,
    /// BSP's time to target over SSP's at SSP's best staleness (> 1: SSP is faster).
    pub bsp_over_best_ssp: Option<f64>,
    pub best_ssp_staleness: Option<u32>,
    /// Best SSP time over best ESSP time (>= 1: ESSP at least as fast).
    pub best_ssp_over_best_essp: Option<f64>,
    /// Mean observed staleness of ESSP over SSP's, averaged over the common bounds > 0.
    pub essp_over_ssp_mean_staleness: Option<f64>,
    pub essp_over_ssp_staleness_variance: Option<f64>,
    /// The same ratios of content staleness.
    pub essp_over_ssp_content_staleness_mean: Option<f64>,
    pub essp_over_ssp_content_staleness_variance: Option<f64>,
    /// Iterations to target at the largest bound over at the best bound (SSP).
    pub ssp_iterations_largest_over_best: Option<f64>,
    pub plot: String,
}

/// The whole JSON line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConsistencyFigures {
    pub workers: usize,
    pub transient_probability: f64,
    pub transient_factor: f64,
    pub persistent_factor: f64,
    pub clock_ms: f64,
    pub latency_ms: u64,
    pub jitter_ms: u64,
    /// Expected ms per clock of one worker, and of the slowest (what BSP pays).
    pub expected_clock_ms: f64,
    pub expected_slowest_clock_ms: f64,
    pub quick: bool,
    pub apps: std::collections::BTreeMap<String, ConsistencyAppFigures>,
}

/// Shapes the QUIC links with `--latency-ms` and `--jitter-ms`.
fn shape(args: &ConsistencyBenchArgs) -> impl FnOnce(&mut Settings) + use<> {
    let (latency_ms, jitter_ms) = (args.latency_ms, args.jitter_ms);
    move |s: &mut Settings| {
        if latency_ms > 0 || jitter_ms > 0 {
            s.net.shaper = Some(petrel_net::ShaperConfig {
                latency_ms,
                jitter_ms,
                ..Default::default()
            });
        }
    }
}

fn mf_config(args: &ConsistencyBenchArgs, model: ConsistencyModel, s: u32) -> PsMfSettings {
    PsMfSettings {
        seed: args.seed,
        consistency: model,
        staleness: s,
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_every: Some(1),
        stragglers: stragglers(args),
        ..crate::common::ps_mf(args.quick)
    }
}

fn stragglers(args: &ConsistencyBenchArgs) -> petrel_ps::kit::settings::StragglerSettings {
    petrel_ps::kit::settings::StragglerSettings {
        // Worker 0 is the persistent straggler, if any.
        straggler: (args.persistent_factor > 1.0).then_some(0),
        straggler_factor: args.persistent_factor,
        ..args.stragglers.settings(args.clock_ms)
    }
}

fn lr_config(args: &ConsistencyBenchArgs, model: ConsistencyModel, s: u32) -> PsLrSettings {
    PsLrSettings {
        seed: args.seed,
        // Quick: small, easy data (a few clocks to the target).
        learning_rate: if args.quick {
            1.0
        } else {
            args.lr_learning_rate
        },
        consistency: model,
        staleness: s,
        target_log_loss: Some(args.target_log_loss),
        max_seconds: args.max_seconds,
        stragglers: stragglers(args),
        ..args.lr.config(args.quick)
    }
}

/// Runs one (app, model, staleness).
fn run_one(
    args: &ConsistencyBenchArgs,
    app: ConsistencyApp,
    model: ConsistencyModel,
    s: u32,
) -> Result<ConsistencyRun, BenchError> {
    let fail = BenchError::run(format!("{app} {model} s={s}"));
    let (c, t) = (&args.cluster, args.transport);
    let bound = petrel_ps::Consistency::new(model, s).staleness_bound();
    // The figures both apps have; each adds its own.
    macro_rules! common {
        ($r:expr) => {
            ConsistencyRun {
                model,
                staleness: bound,
                reached_target: $r.reached_target,
                time_to_target_s: $r.time_to_target_s,
                iterations: $r.iterations,
                mean_staleness: $r.staleness.mean,
                staleness_variance: $r.staleness.variance,
                max_staleness: $r.staleness.max,
                wall_s: $r.wall_s,
                ..ConsistencyRun::default()
            }
        };
    }
    Ok(match app {
        ConsistencyApp::Mf => {
            let cfg = mf_config(args, model, s);
            let r = c.run::<PsMf>(cfg, t, shape(args)).map_err(fail)?.metrics;
            let per_worker = &r.per_worker_staleness;
            let content = Some(r.content_staleness).filter(|c| c.count > 0);
            ConsistencyRun {
                content_staleness_mean: content.map(|c| c.mean),
                content_staleness_variance: content.map(|c| c.variance),
                staleness: r.staleness_bound,
                staleness_variance_between_workers: Some(StalenessReport::between_variance(
                    per_worker,
                )),
                per_worker_mean_staleness: per_worker.iter().map(|p| p.mean).collect(),
                per_clock: ClockBreakdown::of(
                    &r.worker_clocks,
                    &r.per_worker_reads,
                    &r.per_worker_compute_s,
                    &r.per_worker_run_s,
                ),
                ..common!(r)
            }
        }
        ConsistencyApp::Lr => {
            let cfg = lr_config(args, model, s);
            let r = c.run::<PsLr>(cfg, t, shape(args)).map_err(fail)?.metrics;
            let content = Some(r.content_staleness).filter(|c| c.count > 0);
            ConsistencyRun {
                per_clock: ClockBreakdown::of(&r.worker_clocks, &r.per_worker_reads, &[], &[]),
                content_staleness_mean: content.map(|c| c.mean),
                content_staleness_variance: content.map(|c| c.variance),
                ..common!(r)
            }
        }
    })
}

/// The (model, staleness) pairs of a run: BSP once, SSP and ESSP at every bound, async once.
fn plan(args: &ConsistencyBenchArgs) -> Vec<(ConsistencyModel, u32)> {
    let bounds: Vec<u32> = if args.quick {
        vec![0, 2]
    } else {
        args.staleness.clone()
    };
    let mut out = Vec::new();
    for &m in &args.models {
        match m {
            ConsistencyModel::Bsp | ConsistencyModel::Async => out.push((m, 0)),
            ConsistencyModel::Ssp | ConsistencyModel::Essp => {
                out.extend(bounds.iter().map(|&s| (m, s)));
            }
        }
    }
    out
}

fn best(runs: &[ConsistencyRun], model: ConsistencyModel) -> Option<(u32, f64, u64)> {
    runs.iter()
        .filter(|r| r.model == model)
        .filter_map(|r| Some((r.staleness?, r.time_to_target_s?, r.iterations)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Summary ratios of one app's runs.
fn summarise(target: f64, runs: Vec<ConsistencyRun>, plot: String) -> ConsistencyAppFigures {
    let bsp = runs
        .iter()
        .find(|r| r.model == ConsistencyModel::Bsp)
        .and_then(|r| r.time_to_target_s);
    let ssp = best(&runs, ConsistencyModel::Ssp);
    let essp = best(&runs, ConsistencyModel::Essp);
    // ESSP/SSP staleness, averaged over the bounds > 0 both ran at.
    let at =
        |m: ConsistencyModel, s: u32| runs.iter().find(|r| r.model == m && r.staleness == Some(s));
    let pairs: Vec<(&ConsistencyRun, &ConsistencyRun)> = runs
        .iter()
        .filter(|r| r.model == ConsistencyModel::Ssp)
        .filter_map(|r| {
            let s = r.staleness.filter(|&s| s > 0)?;
            Some((r, at(ConsistencyModel::Essp, s)?))
        })
        .collect();
    // Over the pairs where both runs have the figure.
    let ratio_of = |f: fn(&ConsistencyRun) -> Option<f64>| {
        let both: Vec<(f64, f64)> = (pairs.iter()).filter_map(|(s, e)| f(e).zip(f(s))).collect();
        let (e, s) = (both.iter()).fold((0.0, 0.0), |acc, x| (acc.0 + x.0, acc.1 + x.1));
        (!both.is_empty() && s > 0.0).then(|| e / s)
    };
    let largest = runs
        .iter()
        .filter(|r| r.model == ConsistencyModel::Ssp && r.reached_target)
        .max_by_key(|r| r.staleness);
    ConsistencyAppFigures {
        target,
        bsp_over_best_ssp: ratio(bsp, ssp.map(|b| b.1)),
        best_ssp_staleness: ssp.map(|b| b.0),
        best_ssp_over_best_essp: ratio(ssp.map(|b| b.1), essp.map(|b| b.1)),
        essp_over_ssp_mean_staleness: ratio_of(|r| Some(r.mean_staleness)),
        essp_over_ssp_staleness_variance: ratio_of(|r| Some(r.staleness_variance)),
        essp_over_ssp_content_staleness_mean: ratio_of(|r| r.content_staleness_mean),
        essp_over_ssp_content_staleness_variance: ratio_of(|r| r.content_staleness_variance),
        ssp_iterations_largest_over_best: match (largest, ssp) {
            (Some(l), Some(b)) if b.2 > 0 => Some(l.iterations as f64 / b.2 as f64),
            _ => None,
        },
        runs,
        plot,
    }
}

/// Runs the benchmark and returns its figures (the table is printed as it goes).
pub fn measure(args: &ConsistencyBenchArgs) -> Result<ConsistencyFigures, BenchError> {
    let (expected, slowest) =
        (stragglers(args).model(args.seed)).expected_clock_ms(args.cluster.workers as u32);
    eprintln!(
        "{} workers, {} shards ({}), {} ms/clock; each clock slowed x{} with p={}, persistent \
         x{}; links +{} ms +0..{} ms jitter; expected ms/clock: {:.1} per worker, {:.1} slowest",
        args.cluster.workers,
        args.cluster.shards,
        args.transport,
        args.clock_ms,
        args.stragglers.transient_factor,
        args.stragglers.transient_probability,
        args.persistent_factor,
        args.latency_ms,
        args.jitter_ms,
        expected,
        slowest
    );
    let mut apps = std::collections::BTreeMap::new();
    for &app in &args.apps {
        let mut runs = Vec::new();
        for (m, s) in plan(args) {
            eprintln!("running {app} {m} s={s} ...");
            runs.push(run_one(args, app, m, s)?);
        }
        let target = match app {
            ConsistencyApp::Mf => args.target_rmse,
            ConsistencyApp::Lr => args.target_log_loss,
        };
        let path = args.plot_dir.join(format!("consistency-{app}.svg"));
        plot(&path, app, &runs)?;
        let figures = summarise(target, runs, path.display().to_string());
        print_table(app, &figures);
        apps.insert(app.to_string(), figures);
    }
    Ok(ConsistencyFigures {
        workers: args.cluster.workers,
        transient_probability: args.stragglers.transient_probability,
        transient_factor: args.stragglers.transient_factor,
        persistent_factor: args.persistent_factor,
        clock_ms: args.clock_ms,
        latency_ms: args.latency_ms,
        jitter_ms: args.jitter_ms,
        expected_clock_ms: expected,
        expected_slowest_clock_ms: slowest,
        quick: args.quick,
        apps,
    })
}

fn print_table(app: ConsistencyApp, f: &ConsistencyAppFigures) {
    println!("{app} (target {})", f.target);
    let keys = "model staleness reached_target time_to_target_s iterations mean_staleness \
                staleness_variance staleness_variance_between_workers max_staleness \
                content_staleness_mean content_staleness_variance wall_s";
    json_table(&f.runs, keys).print();
    println!(
        "per clock (ms): the job's pace (time to target over min-clock iterations), then per \
         worker-clock averaged over every clock of every worker:"
    );
    let per_clock = f.runs.iter().filter(|r| r.per_clock.is_some()).map(|r| {
        let mut row = serde_json::to_value(r).unwrap_or_default();
        row["pace_ms"] = (r.time_to_target_s)
            .filter(|_| r.iterations > 0)
            .map(|t| t * 1e3 / r.iterations as f64)
            .into();
        row
    });
    let keys = "model staleness pace_ms per_clock/ms per_clock/compute_ms per_clock/blocked_ms \
                per_clock/bound_blocked_ms per_clock/other_ms per_clock/round_trips \
                per_clock/request_messages per_clock/rows_requested per_clock/rows_ahead";
    json_table(per_clock, keys).print();
    println!(
        "bsp / best ssp (s={}): {}x; best ssp / best essp: {}x; essp/ssp mean staleness {}, \
         variance {}; content staleness mean {}, variance {}; plot {}\n",
        f.best_ssp_staleness.map_or("-".into(), |s| s.to_string()),
        fmt_opt(f.bsp_over_best_ssp),
        fmt_opt(f.best_ssp_over_best_essp),
        fmt_opt(f.essp_over_ssp_mean_staleness),
        fmt_opt(f.essp_over_ssp_staleness_variance),
        fmt_opt(f.essp_over_ssp_content_staleness_mean),
        fmt_opt(f.essp_over_ssp_content_staleness_variance),
        f.plot
    );
}

/// Runs the benchmark: tables, plots and one JSON line (also written to `--json-out`).
pub fn run(args: ConsistencyBenchArgs) -> Result<(), BenchError> {
    save_and_print(&args.json_out, &measure(&args)?)
}

/// Time to target (unreached: the whole run) against the staleness bound, one line per
/// model; BSP and async have no bound to vary, so theirs is flat across the plot.
fn plot(path: &Path, app: ConsistencyApp, runs: &[ConsistencyRun]) -> Result<(), BenchError> {
    let max_s = runs
        .iter()
        .filter_map(|r| r.staleness)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let models = <ConsistencyModel as clap::ValueEnum>::value_variants();
    let series: Vec<Series> = (models.iter().copied())
        .filter_map(|m| {
            let pts: Vec<(f64, f64)> = runs
                .iter()
                .filter(|r| r.model == m)
                .map(|r| {
                    let x = r.staleness.map_or(max_s, f64::from);
                    (x, r.time_to_target_s.unwrap_or(r.wall_s))
                })
                .collect();
            let points = match pts[..] {
                [] => return None,
                [(_, y)] => vec![(0.0, y), (max_s, y)],
                _ => pts,
            };
            Some(Series {
                name: m.to_string(),
                points,
            })
        })
        .collect();
    line_plot(
        path,
        &format!("{app} on the parameter server: time to target vs staleness"),
        "staleness bound s",
        "seconds to target (unreached: whole run)",
        &series,
        false,
    )
    .map_err(BenchError::plot(path))
}
