//! `petrel bench lasso-scale`: STRADS Lasso against the single-threaded cyclic coordinate
//! descent baseline on sparse correlated designs of growing size, side by side in one run.
//!
//! For each size the bench generates the design (`sparse_correlated_lasso`), solves it with
//! the baseline to a duality gap of `--optimum-gap` (the optimum `f*`), then times, to the
//! target `f* (1 + --tolerance)`: a fresh baseline run (in this process, one thread) and a
//! STRADS run per worker count (`--transport processes` by default: a scheduler process and
//! one process per worker over QUIC; every process generates only its rows). STRADS time is
//! the scheduler's time to the target (data generation and cluster start excluded, as for
//! the baseline); the wall time of the whole command is reported beside it.
//!
//! Figures per size: `baseline_s`, `petrel_s`, `ratio` (petrel / baseline), the updates of
//! each, `rss_mb` (largest peak RSS of a node) for `--headline-workers`, and every worker
//! count under `per_workers`, with the time per coordinate update, the round breakdown
//! (`RoundProfile`) and, over `--transport processes`, each node's peak against what a
//! worker holds ([`NodeMemory`]: `worker_rss_mb`, `scheduler_rss_mb`, `worker_holds_mb`,
//! `worker_rss_over_holds`, `worker_private_mb`, `worker_private_over_holds`), and
//! `compute_ratio`: the compute on the rounds' critical path up to the target (the slowest
//! worker's per round plus the scheduler's) over `baseline_s`, the ratio's floor if
//! messages and waits cost nothing. After the table a probe prints how fast one thread and
//! two threads stream memory here (`memory_bandwidth`), the ceiling of what a second
//! worker on this host gains in passes that only read. An SVG plots the time per update
//! against the design's non-zeros.

use crate::bench::memory_bandwidth::{self, StreamBandwidth};
use crate::bench::strads_plot::{Series, absolute, line_plot};
use crate::report::{Table, print_json};
use crate::train::{NodeMemory, StradsTrainError, TrainTransport, run_lasso_job};
use petrel_strads::apps::lasso::baseline::solve_baseline;
use petrel_strads::apps::lasso::{LassoJob, LassoSolver, RoundProfile, SyntheticLasso};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
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
}

#[derive(Debug, Clone, Serialize)]
struct PetrelFigures {
    workers: usize,
    petrel_s: Option<f64>,
    petrel_updates: Option<u64>,
    ratio: Option<f64>,
    us_per_update: Option<f64>,
    wall_s: f64,
    rounds: u64,
    block_size: usize,
    rss_mb: f64,
    final_objective: f64,
    /// The compute on the critical path up to the target (the slowest worker's per round
    /// plus the scheduler's): petrel's time if messages and waits cost nothing.
    compute_to_target_s: Option<f64>,
    /// `compute_to_target_s / baseline_s`: the ratio's floor on this host.
    compute_ratio: Option<f64>,
    profile: RoundProfile,
    /// Node peaks against what a worker holds (keys `worker_rss_mb`, `scheduler_rss_mb`,
    /// `worker_holds_mb`, `worker_rss_over_holds`, `worker_private_mb`, `worker_private_over_holds`).
    #[serde(flatten)]
    memory: NodeMemory,
}

#[derive(Debug, Clone, Serialize)]
struct SizeFigures {
    n_samples: usize,
    n_features: usize,
    nnz: usize,
    lambda: f32,
    optimum: f64,
    baseline_s: f64,
    baseline_updates: u64,
    baseline_us_per_update: f64,
    optimum_s: f64,
    petrel_s: Option<f64>,
    petrel_updates: Option<u64>,
    ratio: Option<f64>,
    rss_mb: Option<f64>,
    data_mb_per_worker: f64,
    per_workers: BTreeMap<usize, PetrelFigures>,
}

#[derive(Serialize)]
struct Figures {
    bench: &'static str,
    solver: String,
    tolerance: f64,
    interference_bound: f32,
    depth: usize,
    headline_workers: usize,
    transport: String,
    sizes: Vec<SizeFigures>,
    plot: String,
    /// One thread's streaming read bandwidth against two threads' (`--bandwidth-mb`).
    memory_bandwidth: Option<StreamBandwidth>,
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

pub fn run(args: LassoScaleBenchArgs) -> Result<(), StradsTrainError> {
    if args.sizes.is_empty() || args.workers.is_empty() {
        return Err(StradsTrainError::Usage(
            "need at least one size and one worker count",
        ));
    }
    let out = absolute(&args.out)?;
    let mut sizes = Vec::new();
    let mut table = Table::new(&[
        "design",
        "nnz",
        "runner",
        "seconds to tol",
        "updates",
        "us / update",
        "ratio",
        "wall s",
        "U",
        "rss MB",
        "worker MB",
        "holds MB",
        "peak / holds",
        "private / holds",
        "sched. MB",
        "round ms",
        "messaging s",
        "compute / base",
    ]);
    for size in &args.sizes {
        let base = job_for(size, &args);
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
        let (optimum_run, _) = solve_baseline(&x, &y, &optimum_job)?;
        let optimum = optimum_run.metrics.final_objective;
        let target = optimum * (1.0 + args.tolerance);
        // The timed baseline: the same solver, stopped at the target.
        let timed_job = LassoJob {
            target_objective: Some(target),
            ..base.clone()
        };
        let (timed, report) = solve_baseline(&x, &y, &timed_job)?;
        let baseline_s = timed.metrics.elapsed_s;
        let baseline_updates = report.updates;
        let label = format!("{}x{}", size.n_samples, size.n_features);
        table.row(vec![
            label.clone(),
            nnz.to_string(),
            "baseline".into(),
            format!("{baseline_s:.3}"),
            baseline_updates.to_string(),
            format!("{:.3}", 1e6 * baseline_s / baseline_updates.max(1) as f64),
            "1".into(),
            "-".into(),
            "1".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
        let lambda = optimum_run.metrics.lambda;
        drop((x, y));
        let mut per_workers = BTreeMap::new();
        for &workers in &args.workers {
            let dir = out.join(format!("{label}-p{workers}"));
            let job = LassoJob {
                target_objective: Some(target),
                out_dir: Some(dir.clone()),
                ..base.clone()
            };
            let started = Instant::now();
            let Some(transport) = args.transport.cluster() else {
                return Err(StradsTrainError::Usage(
                    "lasso-scale compares STRADS runs: --transport memory, quic or processes",
                ));
            };
            let m = run_lasso_job(&job, workers, transport, false)?;
            let wall_s = started.elapsed().as_secs_f64();
            let ratio = m.target_s.map(|s| s / baseline_s);
            let us = m
                .target_s
                .zip(m.target_updates)
                .map(|(s, u)| 1e6 * s / u.max(1) as f64);
            let holds = worker_holds_mb(args.solver, nnz, size, workers);
            let memory = NodeMemory::of_run(job.out_dir.as_deref(), transport, holds);
            // The launcher's peak of every node process when there are processes, else
            // what the nodes sampled during their rounds.
            let rss = match (memory.worker_rss_mb, memory.scheduler_rss_mb) {
                (Some(w), Some(s)) => w.max(s),
                _ => m
                    .profile
                    .scheduler_peak_rss_mb
                    .max(m.profile.worker_peak_rss_mb),
            };
            let compute_to_target_s = m.profile.critical_compute_to_target_s;
            let compute_ratio = compute_to_target_s.map(|s| s / baseline_s);
            let mb = |v: Option<f64>, digits: usize| {
                v.map_or("-".to_string(), |v| format!("{v:.digits$}"))
            };
            table.row(vec![
                label.clone(),
                nnz.to_string(),
                format!("petrel {workers}w"),
                m.target_s
                    .map_or("not reached".into(), |s| format!("{s:.3}")),
                m.target_updates.map_or("-".into(), |u| u.to_string()),
                us.map_or("-".into(), |u| format!("{u:.3}")),
                ratio.map_or("-".into(), |r| format!("{r:.2}")),
                format!("{wall_s:.1}"),
                m.block_size.to_string(),
                format!("{rss:.0}"),
                mb(memory.worker_rss_mb, 0),
                format!("{holds:.1}"),
                mb(memory.worker_rss_over_holds, 2),
                mb(memory.worker_private_over_holds, 2),
                mb(memory.scheduler_rss_mb, 0),
                format!("{:.2}", m.profile.round_latency_ms),
                format!("{:.2}", m.profile.messaging_s),
                mb(compute_ratio, 2),
            ]);
            per_workers.insert(
                workers,
                PetrelFigures {
                    workers,
                    petrel_s: m.target_s,
                    petrel_updates: m.target_updates,
                    ratio,
                    us_per_update: us,
                    wall_s,
                    rounds: m.rounds,
                    block_size: m.block_size,
                    rss_mb: rss,
                    final_objective: m.final_objective,
                    compute_to_target_s,
                    compute_ratio,
                    profile: m.profile.clone(),
                    memory,
                },
            );
        }
        let headline = per_workers.get(&args.headline_workers);
        let data_mb_per_worker = worker_holds_mb(args.solver, nnz, size, args.headline_workers);
        sizes.push(SizeFigures {
            n_samples: size.n_samples,
            n_features: size.n_features,
            nnz,
            lambda,
            optimum,
            baseline_s,
            baseline_updates,
            baseline_us_per_update: 1e6 * baseline_s / baseline_updates.max(1) as f64,
            optimum_s: optimum_run.metrics.elapsed_s,
            petrel_s: headline.and_then(|h| h.petrel_s),
            petrel_updates: headline.and_then(|h| h.petrel_updates),
            ratio: headline.and_then(|h| h.ratio),
            rss_mb: headline.map(|h| h.rss_mb),
            data_mb_per_worker,
            per_workers,
        });
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
    let plot = out.join("lasso_scale_us_per_update.svg");
    line_plot(
        &plot,
        "Lasso: time per coordinate update against design size",
        "non-zeros of X",
        "microseconds per coordinate update (to 1e-3)",
        &series,
        true,
    )?;
    println!("plot: {}", plot.display());
    print_json(&Figures {
        bench: "lasso-scale",
        solver: args.solver.to_string(),
        tolerance: args.tolerance,
        interference_bound: args.interference_bound,
        depth: args.depth,
        headline_workers: args.headline_workers,
        transport: format!("{:?}", args.transport).to_lowercase(),
        sizes,
        plot: plot.display().to_string(),
        memory_bandwidth: bandwidth,
    })
    .map_err(|source| StradsTrainError::Json {
        path: PathBuf::new(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_bad_ones_name_the_format() {
        let s: DesignSize = "2000x20000x20".parse().unwrap();
        assert_eq!(
            (s.n_samples, s.n_features, s.nnz_per_column),
            (2000, 20000, 20)
        );
        for bad in ["2000x20000", "0x10x1", "axbxc", "1x2x3x4"] {
            let e = bad.parse::<DesignSize>().unwrap_err().to_string();
            assert!(e.contains("ROWSxFEATURESxNNZ"), "{e}");
        }
    }
}
