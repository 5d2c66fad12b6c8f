//! `petrel bench lasso-scale`: STRADS Lasso against the single-threaded cyclic coordinate
//! descent baseline on sparse correlated designs of growing size, side by side in one run.
// Long because it also holds the design-size helpers logistic-scale reuses.
//!
//! For each size the bench generates the design (`sparse_correlated_lasso`), solves it with
//! the baseline to a duality gap of `--optimum-gap` (the optimum `f*`), then times, to the
//! target `f* (1 + --tolerance)`: a fresh baseline run (in this process, one thread) and a
//! STRADS run per worker count (`--transport processes` by default: a scheduler process and
//! one process per worker over QUIC; every process generates only its rows). STRADS time is
//! the scheduler's time to the target (data generation and cluster start excluded, as for
//! the baseline); the wall time of the whole command is reported beside it. The timed runs
//! are repeated `--repeats` times, interleaved (baseline, every worker count, again), and
//! each runner reports its median run, `ratio` the median of the repeats' ratios (each
//! against its own repeat's baseline), with their spread in the table: the host is shared,
//! and single runs of the largest size were seen anywhere from 0.9 to 1.4.
//!
//! Figures per size: `baseline_s`, `petrel_s`, `ratio` (petrel / baseline), the updates of
//! each, `rss_mb` (largest peak RSS of a node) for `--headline-workers`, and every worker
//! count under `per_workers`, with the time per coordinate update, the round breakdown
//! (`RoundProfile`) and, over `--transport processes`, each node's peak against what a
//! worker holds ([`NodeMemory`]: `worker_rss_mb`, `scheduler_rss_mb`, `worker_holds_mb`,
//! `worker_rss_over_holds`, `worker_private_mb`, `worker_private_over_holds`,
//! `worker_heap_mb`, `worker_heap_over_holds`), and
//! `compute_ratio`: the compute on the rounds' critical path up to the target (the slowest
//! worker's per round plus the scheduler's) over `baseline_s`, the ratio's floor if
//! messages and waits cost nothing. After the table a probe prints how fast one thread and
//! two threads stream memory here (`memory_bandwidth`), the ceiling of what a second
//! worker on this host gains in passes that only read. An SVG plots the time per update
//! against the design's non-zeros.

use crate::memory_bandwidth::{self, StreamBandwidth};
use crate::scale::{baseline_row, range_cell, write_plot};
use petrel::report::{Table, print_json};
use petrel::train::plot::{Series, absolute};
use petrel::train::{NodeMemory, StradsTrainError, TrainTransport, run_lasso_job};
use petrel_actors::JobTransport;
use petrel_strads::StradsError;
use petrel_strads::apps::lasso::baseline::solve_baseline;
use petrel_strads::apps::lasso::{LassoJob, LassoSolver, RoundProfile, SyntheticLasso};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One design size: `rows x features`, non-zeros per column.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DesignSize {
    /// Rows.
    pub n_samples: usize,
    /// Features.
    pub n_features: usize,
    /// Non-zeros per column.
    pub nnz_per_column: usize,
}

/// A `--sizes` entry that is not `ROWSxFEATURESxNNZ_PER_COLUMN`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: expected three positive numbers ROWSxFEATURESxNNZ_PER_COLUMN")]
pub struct DesignSizeError(String);

impl std::str::FromStr for DesignSize {
    type Err = DesignSizeError;

    /// `ROWSxFEATURESxNNZ` (e.g. `2000x20000x20`).
    fn from_str(s: &str) -> Result<Self, DesignSizeError> {
        let bad = || DesignSizeError(s.to_string());
        let parts: Vec<usize> = s
            .split('x')
            .map(|p| p.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        match parts[..] {
            [n_samples, n_features, nnz_per_column]
                if n_samples > 0 && n_features > 0 && nnz_per_column > 0 =>
            {
                Ok(DesignSize {
                    n_samples,
                    n_features,
                    nnz_per_column,
                })
            }
            _ => Err(bad()),
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct LassoScaleBenchArgs {
    /// Design sizes, ROWSxFEATURESxNNZ_PER_COLUMN, smallest first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000x20000x20,10000x200000x20,50000x1000000x20"
    )]
    pub sizes: Vec<DesignSize>,
    /// STRADS worker counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// The worker count whose figures are the headline keys of each size.
    #[arg(long, default_value_t = 2)]
    pub headline_workers: usize,
    /// Features per correlated group.
    #[arg(long, default_value_t = 10)]
    pub group_size: usize,
    /// Correlation inside a group.
    #[arg(long, default_value_t = 0.8)]
    pub correlation: f32,
    /// True non-zero coefficients, as a fraction of the features.
    #[arg(long, default_value_t = 0.001)]
    pub nonzero_fraction: f64,
    /// lambda = fraction * max_j |x_j^T y|.
    #[arg(long, default_value_t = 0.1)]
    pub lambda_fraction: f64,
    /// STRADS: bound on a block's row loads (0: pairwise check only); see
    /// `petrel train lasso --help`.
    #[arg(long, default_value_t = petrel_strads::apps::lasso::RECOMMENDED_SPARSE_INTERFERENCE_BOUND)]
    pub interference_bound: f32,
    /// STRADS: rounds in flight (`scheduled` only).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// STRADS solver: `gauss-seidel` (column-holding workers) or `scheduled`.
    #[arg(long, value_enum, default_value_t = LassoSolver::GaussSeidel)]
    pub solver: LassoSolver,
    /// `gauss-seidel`: columns per worker and round of a full sweep (0 = automatic).
    #[arg(long, default_value_t = 0)]
    pub gs_chunk: usize,
    /// `gauss-seidel`: active-set passes per round (0 = automatic).
    #[arg(long, default_value_t = 0)]
    pub gs_active_passes: u32,
    /// Per-round latency the automatic chunk and block sizes assume, in milliseconds; see
    /// `petrel train lasso --help`.
    #[arg(long, default_value_t = LassoJob::default().round_latency_ms)]
    pub round_latency_ms: f64,
    /// Relative objective gap to reach: f <= f* (1 + tolerance).
    #[arg(long, default_value_t = 1e-3)]
    pub tolerance: f64,
    /// Relative duality gap of the baseline run that defines f*.
    #[arg(long, default_value_t = 1e-9)]
    pub optimum_gap: f64,
    /// How the STRADS nodes run.
    #[arg(long, value_enum, default_value_t = TrainTransport::Processes)]
    pub transport: TrainTransport,
    /// Timeout of one round, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    #[arg(long, default_value = "target/bench-lasso-scale")]
    pub out: PathBuf,
    /// Buffer of the memory-bandwidth probe (one thread against two), MB; 0 skips it.
    #[arg(long, default_value_t = 256)]
    pub bandwidth_mb: usize,
    /// Interleaved repeats of the timed runs at each size (the baseline, then every worker
    /// count, then again): each runner's figures are those of its median run, and `ratio`
    /// is the median of the repeats' ratios (each petrel run against the baseline run of
    /// its own repeat), so one slow episode of a shared host moves neither. Over an
    /// in-process transport the runs before the last repeat's share this process with its
    /// copy of the design, so their peak memory includes it (`--repeats 1` for those peaks).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// One worker count's figures at one size: its median run's.
#[derive(Debug, Clone, Serialize)]
pub struct PetrelFigures {
    pub workers: usize,
    pub petrel_s: Option<f64>,
    pub petrel_updates: Option<u64>,
    /// The median of `ratios`.
    pub ratio: Option<f64>,
    /// Every repeat's petrel / baseline, in run order (`null`: the target not reached).
    pub ratios: Vec<Option<f64>>,
    /// Every repeat's seconds to the target, in run order.
    pub runs_s: Vec<Option<f64>>,
    pub us_per_update: Option<f64>,
    pub wall_s: f64,
    pub rounds: u64,
    pub block_size: usize,
    pub rss_mb: f64,
    pub final_objective: f64,
    /// The compute on the critical path up to the target (the slowest worker's per round
    /// plus the scheduler's): petrel's time if messages and waits cost nothing.
    pub compute_to_target_s: Option<f64>,
    /// `compute_to_target_s / baseline_s`: the ratio's floor on this host.
    pub compute_ratio: Option<f64>,
    pub profile: RoundProfile,
    /// Node peaks against what a worker holds (keys `worker_rss_mb`, `scheduler_rss_mb`,
    /// `worker_holds_mb`, `worker_rss_over_holds`, `worker_private_mb`, `worker_private_over_holds`,
    /// `worker_heap_mb`, `worker_heap_over_holds`).
    #[serde(flatten)]
    pub memory: NodeMemory,
}

/// One design size: the baseline, and the headline worker count's keys beside every
/// worker count's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SizeFigures {
    pub n_samples: usize,
    pub n_features: usize,
    pub nnz: usize,
    pub lambda: f32,
    pub optimum: f64,
    /// The median of `baseline_runs_s`.
    pub baseline_s: f64,
    /// Every repeat's baseline seconds, in run order.
    pub baseline_runs_s: Vec<f64>,
    pub baseline_updates: u64,
    pub baseline_us_per_update: f64,
    pub optimum_s: f64,
    pub petrel_s: Option<f64>,
    pub petrel_updates: Option<u64>,
    pub ratio: Option<f64>,
    pub rss_mb: Option<f64>,
    pub data_mb_per_worker: f64,
    pub per_workers: BTreeMap<usize, PetrelFigures>,
}

/// The figures of a run (its JSON line).
#[derive(Serialize)]
pub struct LassoScaleFigures {
    pub bench: &'static str,
    pub solver: String,
    pub tolerance: f64,
    pub interference_bound: f32,
    pub depth: usize,
    pub round_latency_ms: f64,
    pub headline_workers: usize,
    pub transport: String,
    pub repeats: usize,
    pub sizes: Vec<SizeFigures>,
    pub plot: String,
    /// One thread's streaming read bandwidth against two threads' (`--bandwidth-mb`).
    pub memory_bandwidth: Option<StreamBandwidth>,
}

/// What one of `workers` workers holds, MB, counted from the solvers' own structures.
/// A scheduled worker (`core::lasso`): its rows' share of X (8 bytes a non-zero: row
/// index and value), the coefficients (8 bytes a feature), its rows' y and residual (12
/// bytes a row). A Gauss-Seidel worker (`core::gauss_seidel::GsWorkerCore`): its
/// columns' share of X (8 bytes a non-zero), per column of its share the column start,
/// squared norm and coefficient (24 bytes), and per row of the design y, the residual and
/// the round's start residual (20 bytes).
pub fn worker_holds_mb(solver: LassoSolver, nnz: usize, size: &DesignSize, workers: usize) -> f64 {
    let share = workers.max(1) as f64;
    let (nnz, d, n) = (nnz as f64, size.n_features as f64, size.n_samples as f64);
    let bytes = match solver {
        LassoSolver::Scheduled => nnz * 8.0 / share + d * 8.0 + n * 12.0 / share,
        LassoSolver::GaussSeidel | LassoSolver::Auto => {
            nnz * 8.0 / share + d * 24.0 / share + n * 20.0
        }
    };
    bytes / 1e6
}

fn job_for(size: &DesignSize, args: &LassoScaleBenchArgs) -> LassoJob {
    // Each solver gets its own knobs only (`gauss-seidel` refuses the scheduled mode's).
    let scheduled = args.solver == LassoSolver::Scheduled;
    let d = LassoJob::default();
    LassoJob {
        synthetic: SyntheticLasso {
            n_samples: size.n_samples,
            n_features: size.n_features,
            group_size: args.group_size,
            correlation: args.correlation,
            n_nonzero: ((size.n_features as f64 * args.nonzero_fraction).ceil() as usize)
                .clamp(1, size.n_features),
            noise_std: 0.1,
            nnz_per_column: size.nnz_per_column,
            seed: 42,
        },
        lambda_fraction: args.lambda_fraction,
        timeout_s: args.timeout_s,
        round_latency_ms: args.round_latency_ms,
        interference_bound: if scheduled {
            args.interference_bound
        } else {
            d.interference_bound
        },
        depth: if scheduled { args.depth } else { d.depth },
        solver: args.solver,
        gs_chunk: if scheduled { d.gs_chunk } else { args.gs_chunk },
        gs_active_passes: if scheduled {
            d.gs_active_passes
        } else {
            args.gs_active_passes
        },
        ..d
    }
}

/// The table's columns (every row has them all).
const COLUMNS: [&str; 19] = [
    "design",
    "nnz",
    "runner",
    "seconds to tol",
    "updates",
    "us / update",
    "ratio",
    "ratio min-max",
    "wall s",
    "U",
    "rss MB",
    "worker MB",
    "holds MB",
    "peak / holds",
    "heap / holds",
    "sched. MB",
    "round ms",
    "messaging s",
    "compute / base",
];

/// One STRADS run of `job` on `workers` workers, against the baseline's `baseline_s`.
fn run_petrel(
    job: &LassoJob,
    workers: usize,
    transport: JobTransport,
    baseline_s: f64,
    args: &LassoScaleBenchArgs,
    nnz: usize,
    size: &DesignSize,
) -> Result<PetrelFigures, StradsTrainError> {
    let started = Instant::now();
    let m = run_lasso_job(job, workers, transport, false)?;
    let wall_s = started.elapsed().as_secs_f64();
    let ratio = m.target_s.map(|s| s / baseline_s);
    let us_per_update = m
        .target_s
        .zip(m.target_updates)
        .map(|(s, u)| 1e6 * s / u.max(1) as f64);
    let holds = worker_holds_mb(args.solver, nnz, size, workers);
    let memory = NodeMemory::of_run(job.out_dir.as_deref(), transport, holds);
    // The launcher's peak of every node process when there are processes, else what the
    // nodes sampled during their rounds.
    let rss_mb = match (memory.worker_rss_mb, memory.scheduler_rss_mb) {
        (Some(w), Some(s)) => w.max(s),
        _ => m
            .profile
            .scheduler_peak_rss_mb
            .max(m.profile.worker_peak_rss_mb),
    };
    let compute_to_target_s = m.profile.critical_compute_to_target_s;
    Ok(PetrelFigures {
        workers,
        petrel_s: m.target_s,
        petrel_updates: m.target_updates,
        ratio,
        ratios: vec![ratio],
        runs_s: vec![m.target_s],
        us_per_update,
        wall_s,
        rounds: m.rounds,
        block_size: m.block_size,
        rss_mb,
        final_objective: m.final_objective,
        compute_to_target_s,
        compute_ratio: compute_to_target_s.map(|s| s / baseline_s),
        profile: m.profile.clone(),
        memory,
    })
}

/// The run of median time among a runner's repeats (a run that missed the target counts
/// as the slowest), with `ratio` the median of every repeat's ratio and the repeats'
/// ratios and times in run order.
/// `None` without runs.
fn median_run(runs: Vec<PetrelFigures>) -> Option<PetrelFigures> {
    let runs_s: Vec<Option<f64>> = runs.iter().map(|r| r.petrel_s).collect();
    let median = median_repeat(runs, |r| r.petrel_s, |r| r.ratio)?;
    let mut figures = median.run;
    figures.ratio = median.ratio;
    figures.ratios = median.ratios;
    figures.runs_s = runs_s;
    Some(figures)
}

/// A runner's median repeat ([`median_repeat`]).
pub(crate) struct MedianRepeat<T> {
    /// The run of median time.
    pub run: T,
    /// The median of the repeats' ratios (`None`: it fell on a run that missed the target).
    pub ratio: Option<f64>,
    /// Every repeat's ratio, in run order.
    pub ratios: Vec<Option<f64>>,
}

/// The run of median time among `runs` (`seconds`; a run that missed the target, `None`,
/// counts as the slowest) and the median of their `ratio`s; `None` without runs.
pub(crate) fn median_repeat<T>(
    runs: Vec<T>,
    seconds: impl Fn(&T) -> Option<f64>,
    ratio: impl Fn(&T) -> Option<f64>,
) -> Option<MedianRepeat<T>> {
    let ratios: Vec<Option<f64>> = runs.iter().map(&ratio).collect();
    let slowest_last = |v: Option<f64>| v.unwrap_or(f64::INFINITY);
    let median_ratio = median(&ratios.iter().map(|&r| slowest_last(r)).collect::<Vec<_>>())
        .filter(|r| r.is_finite());
    let mut order = runs;
    order.sort_by(|a, b| slowest_last(seconds(a)).total_cmp(&slowest_last(seconds(b))));
    let middle = order.len().checked_sub(1)? / 2;
    Some(MedianRepeat {
        run: order.swap_remove(middle),
        ratio: median_ratio,
        ratios,
    })
}

/// The median (the mean of the two middle values of an even count); `None` when empty.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some(0.5 * (sorted[n / 2 - 1] + sorted[n / 2])),
    }
}

/// A runner's table row.
fn petrel_row(label: &str, nnz: usize, f: &PetrelFigures, ratio_spread: String) -> Vec<String> {
    let m = &f.memory;
    let mb = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    vec![
        label.to_string(),
        nnz.to_string(),
        format!("petrel {}w", f.workers),
        f.petrel_s
            .map_or("not reached".into(), |s| format!("{s:.3}")),
        f.petrel_updates.map_or("-".into(), |u| u.to_string()),
        f.us_per_update.map_or("-".into(), |u| format!("{u:.3}")),
        f.ratio.map_or("-".into(), |r| format!("{r:.2}")),
        ratio_spread,
        format!("{:.1}", f.wall_s),
        f.block_size.to_string(),
        format!("{:.0}", f.rss_mb),
        mb(m.worker_rss_mb, 0),
        format!("{:.1}", m.worker_holds_mb),
        mb(m.worker_rss_over_holds, 2),
        mb(m.worker_heap_over_holds, 2),
        mb(m.scheduler_rss_mb, 0),
        format!("{:.2}", f.profile.round_latency_ms),
        format!("{:.2}", f.profile.messaging_s),
        mb(f.compute_ratio, 2),
    ]
}

/// Runs the bench, prints its table and JSON line.
pub fn run(args: LassoScaleBenchArgs) -> Result<(), StradsTrainError> {
    let figures = measure(&args)?;
    print_json(&figures).map_err(|source| StradsTrainError::Json {
        path: PathBuf::new(),
        source,
    })
}

/// Runs every size, repeat and worker count, prints the table and writes the plot.
pub fn measure(args: &LassoScaleBenchArgs) -> Result<LassoScaleFigures, StradsTrainError> {
    let transport = validate(args)?;
    let out = absolute(&args.out)?;
    let mut sizes = Vec::new();
    let mut table = Table::new(&COLUMNS);
    for size in &args.sizes {
        sizes.push(measure_size(args, size, transport, &out, &mut table)?);
    }
    table.print();
    let bandwidth =
        (args.bandwidth_mb > 0).then(|| memory_bandwidth::measure(args.bandwidth_mb << 20, 5));
    if let Some(b) = &bandwidth {
        println!(
            "memory bandwidth (streaming read of {} MB): 1 thread {:.1} GB/s, 2 threads {:.1} GB/s (x{:.2})",
            b.bytes >> 20,
            b.one_thread_gbps,
            b.two_threads_gbps,
            b.two_over_one()
        );
    }
    let mut series = vec![Series {
        name: "baseline (1 thread)".into(),
        points: sizes
            .iter()
            .map(|s| (s.nnz as f64, s.baseline_us_per_update))
            .collect(),
    }];
    for &workers in &args.workers {
        series.push(Series {
            name: format!("petrel, {workers} worker(s)"),
            points: sizes
                .iter()
                .filter_map(|s| {
                    let p = s.per_workers.get(&workers)?;
                    Some((s.nnz as f64, p.us_per_update?))
                })
                .collect(),
        });
    }
    let plot = write_plot(
        &out.join("lasso_scale_us_per_update.svg"),
        "Lasso: time per coordinate update against design size",
        "non-zeros of X",
        "microseconds per coordinate update (to 1e-3)",
        &series,
        true,
    )?;
    Ok(LassoScaleFigures {
        bench: "lasso-scale",
        solver: args.solver.to_string(),
        tolerance: args.tolerance,
        interference_bound: args.interference_bound,
        depth: args.depth,
        round_latency_ms: args.round_latency_ms,
        headline_workers: args.headline_workers,
        transport: format!("{:?}", args.transport).to_lowercase(),
        repeats: args.repeats,
        sizes,
        plot,
        memory_bandwidth: bandwidth,
    })
}

/// Refuses empty size or worker lists, no repeats and a transport without a cluster;
/// returns the cluster's transport.
fn validate(args: &LassoScaleBenchArgs) -> Result<JobTransport, StradsTrainError> {
    if args.sizes.is_empty() || args.workers.is_empty() || args.repeats == 0 {
        return Err(StradsTrainError::Usage(
            "need at least one size, one worker count and one repeat",
        ));
    }
    args.transport.cluster().ok_or(StradsTrainError::Usage(
        "lasso-scale compares STRADS runs: --transport memory, quic or processes",
    ))
}

/// One design size: its optimum, the repeated baseline and STRADS runs, and their table
/// rows (the baseline's, then one per worker count).
fn measure_size(
    args: &LassoScaleBenchArgs,
    size: &DesignSize,
    transport: JobTransport,
    out: &Path,
    table: &mut Table,
) -> Result<SizeFigures, StradsTrainError> {
    let base = job_for(size, args);
    // The flags checked as `train lasso` checks its settings, before any work.
    base.validate().map_err(StradsError::from)?;
    let generated = Instant::now();
    let (x, y) = base.load()?;
    let nnz = x.values.len();
    tracing::info!(
        rows = size.n_samples,
        features = size.n_features,
        nnz,
        seconds = generated.elapsed().as_secs_f64(),
        "lasso-scale design generated"
    );
    // f*: the baseline to a tight duality gap.
    let optimum_job = LassoJob {
        gap_tolerance: Some(args.optimum_gap),
        ..base.clone()
    };
    let optimum_run = solve_baseline(&x, &y, &optimum_job)?;
    let optimum = optimum_run.metrics.final_objective;
    let target = optimum * (1.0 + args.tolerance);
    let lambda = optimum_run.metrics.lambda;
    // The timed baseline: the same solver, stopped at the target.
    let timed_job = LassoJob {
        target_objective: Some(target),
        ..base.clone()
    };
    let label = format!("{}x{}", size.n_samples, size.n_features);
    let mut design = Some((x, y));
    let mut baseline_runs_s = Vec::with_capacity(args.repeats);
    let mut baseline_updates = 0;
    let mut runs: BTreeMap<usize, Vec<PetrelFigures>> = BTreeMap::new();
    for repeat in 0..args.repeats {
        let Some((x, y)) = design.as_ref() else {
            break;
        };
        let timed = solve_baseline(x, y, &timed_job)?;
        let baseline_s = timed.metrics.elapsed_s;
        baseline_runs_s.push(baseline_s);
        baseline_updates = timed.metrics.updates;
        if repeat + 1 == args.repeats {
            // The last repeat's STRADS runs start without this process's copy of
            // the design (what in-process transports measure as their peak).
            design = None;
        }
        for &workers in &args.workers {
            let dir = out.join(format!("{label}-p{workers}"));
            let job = LassoJob {
                target_objective: Some(target),
                out_dir: Some(dir),
                ..base.clone()
            };
            let run = run_petrel(&job, workers, transport, baseline_s, args, nnz, size)?;
            tracing::info!(
                size = %label,
                workers,
                repeat,
                ratio = run.ratio,
                "lasso-scale run"
            );
            runs.entry(workers).or_default().push(run);
        }
    }
    drop(design);
    let baseline_s = median(&baseline_runs_s).unwrap_or(f64::NAN);
    table.row(baseline_row(
        &label,
        nnz,
        baseline_s,
        baseline_updates,
        COLUMNS.len(),
    ));
    let mut per_workers = BTreeMap::new();
    for (workers, runs) in runs {
        let Some(figures) = median_run(runs) else {
            continue;
        };
        let reached: Vec<f64> = figures.ratios.iter().flatten().copied().collect();
        table.row(petrel_row(&label, nnz, &figures, range_cell(&reached)));
        per_workers.insert(workers, figures);
    }
    let headline = per_workers.get(&args.headline_workers);
    let data_mb_per_worker = worker_holds_mb(args.solver, nnz, size, args.headline_workers);
    Ok(SizeFigures {
        n_samples: size.n_samples,
        n_features: size.n_features,
        nnz,
        lambda,
        optimum,
        baseline_s,
        baseline_runs_s,
        baseline_updates,
        baseline_us_per_update: 1e6 * baseline_s / baseline_updates.max(1) as f64,
        optimum_s: optimum_run.metrics.elapsed_s,
        petrel_s: headline.and_then(|h| h.petrel_s),
        petrel_updates: headline.and_then(|h| h.petrel_updates),
        ratio: headline.and_then(|h| h.ratio),
        rss_mb: headline.map(|h| h.rss_mb),
        data_mb_per_worker,
        per_workers,
    })
}

#[cfg(test)]
mod tests;
