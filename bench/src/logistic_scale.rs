//! `petrel bench logistic-scale`: STRADS sparse logistic regression (`solver =
//! "gauss-seidel"`) against the single-threaded cyclic coordinate descent baseline on
//! sparse correlated designs of growing size, side by side in one run.
//!
//! For each size the bench generates the design (the Lasso's `sparse_correlated_lasso`,
//! labelled by the sign of its response), solves it with the baseline until a full sweep
//! lowers the objective by at most `--optimum-tolerance` (the optimum `f*`), then times, to
//! the target `f* (1 + --tolerance)`: a fresh baseline run (in this process, one thread,
//! stopped at the target) and a STRADS run per worker count (`--transport processes` by
//! default: a scheduler process and one process per worker over QUIC), stopped at the
//! target too. STRADS time is the scheduler's time to the target (data generation and
//! cluster start excluded, as for the baseline); the wall time of the whole command is
//! beside it. The timed runs are repeated `--repeats` times, interleaved, and each runner
//! reports its median run, `ratio` the median of the repeats' ratios (each against its own
//! repeat's baseline). An SVG plots the time per coordinate update against the design's
//! non-zeros.

use crate::lasso_scale::{DesignSize, median, median_repeat};
use crate::scale::{baseline_row, cell, range_cell, write_plot};
use petrel::report::{Table, print_json};
use petrel::train::plot::{Series, absolute};
use petrel::train::{NodeMemory, StradsTrainError, TrainTransport, run_logistic_job};
use petrel_actors::JobTransport;
use petrel_strads::StradsError;
use petrel_strads::apps::lasso::{LassoJob, LassoSolver, SyntheticLasso};
use petrel_strads::apps::logistic::run_baseline;
use petrel_strads::apps::logistic::{load, logistic_lambda};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
/// `petrel bench logistic-scale`.
pub struct LogisticScaleBenchArgs {
    /// Design sizes, ROWSxFEATURESxNNZ_PER_COLUMN, smallest first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000x20000x20,20000x200000x20,50000x1000000x20"
    )]
    pub sizes: Vec<DesignSize>,
    /// STRADS worker counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// The worker count whose figures are the headline keys of each size.
    #[arg(long, default_value_t = 2)]
    pub headline_workers: usize,
    /// lambda = fraction * max_j |x_j^T y| / 2 (y in {-1, +1}).
    #[arg(long, default_value_t = LassoJob::default().lambda_fraction)]
    pub lambda_fraction: f64,
    /// Relative objective gap to reach: f <= f* (1 + tolerance).
    #[arg(long, default_value_t = 1e-4)]
    pub tolerance: f64,
    /// The baseline run that defines f* stops once a full sweep lowers the objective by at
    /// most this (relative).
    #[arg(long, default_value_t = 1e-11)]
    pub optimum_tolerance: f64,
    /// How the STRADS nodes run.
    #[arg(long, value_enum, default_value_t = TrainTransport::Processes)]
    pub transport: TrainTransport,
    /// Timeout of one round, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    #[arg(long, default_value = "target/bench-logistic-scale")]
    /// Output directory (every run's outputs and the plot).
    pub out: PathBuf,
    /// Interleaved repeats of the timed runs at each size (the baseline, then every worker
    /// count, then again).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// One worker count's figures at one size: its median run's.
#[derive(Debug, Clone, Serialize)]
pub struct LogisticRunFigures {
    /// Workers.
    pub workers: usize,
    /// Seconds to the target (`None`: not reached).
    pub petrel_s: Option<f64>,
    /// Coordinate updates to the target.
    pub petrel_updates: u64,
    /// The median of `ratios`.
    pub ratio: Option<f64>,
    /// Every repeat's petrel / baseline, in run order.
    pub ratios: Vec<Option<f64>>,
    /// Microseconds per coordinate update, to the target.
    pub us_per_update: Option<f64>,
    /// Seconds of the whole command (data generation and cluster start included).
    pub wall_s: f64,
    /// Rounds run.
    pub rounds: u64,
    /// The objective at the end.
    pub final_objective: f64,
    /// The largest peak of a node process (`--transport processes`).
    pub rss_mb: Option<f64>,
    /// Node peaks against what a worker holds.
    #[serde(flatten)]
    pub memory: NodeMemory,
}

/// One design size.
#[derive(Debug, Clone, Serialize)]
pub struct LogisticSizeFigures {
    /// Rows.
    pub n_samples: usize,
    /// Features.
    pub n_features: usize,
    /// Non-zeros of X.
    pub nnz: usize,
    /// The L1 weight.
    pub lambda: f32,
    /// f*.
    pub optimum: f64,
    /// The median of `baseline_runs_s`.
    pub baseline_s: f64,
    /// Every repeat's baseline seconds, in run order.
    pub baseline_runs_s: Vec<f64>,
    /// The baseline's updates to the target.
    pub baseline_updates: u64,
    /// The baseline's microseconds per update.
    pub baseline_us_per_update: f64,
    /// The headline worker count's seconds to the target.
    pub petrel_s: Option<f64>,
    /// The headline worker count's updates.
    pub petrel_updates: Option<u64>,
    /// The headline worker count's ratio.
    pub ratio: Option<f64>,
    /// The headline worker count's largest node peak.
    pub rss_mb: Option<f64>,
    /// Every worker count's figures.
    pub per_workers: BTreeMap<usize, LogisticRunFigures>,
}

/// The figures of a run (its JSON line).
#[derive(Serialize)]
pub struct LogisticScaleFigures {
    /// `logistic-scale`.
    pub bench: &'static str,
    /// The STRADS solver.
    pub solver: &'static str,
    /// The target's relative gap.
    pub tolerance: f64,
    /// The headline worker count.
    pub headline_workers: usize,
    /// How the nodes ran.
    pub transport: String,
    /// Repeats per runner.
    pub repeats: usize,
    /// Every size.
    pub sizes: Vec<LogisticSizeFigures>,
    /// The SVG.
    pub plot: String,
}

const COLUMNS: [&str; 11] = [
    "design",
    "nnz",
    "runner",
    "seconds to tol",
    "updates",
    "us / update",
    "ratio",
    "ratio min-max",
    "wall s",
    "rounds",
    "rss MB",
];

/// What one of `workers` Gauss-Seidel workers holds, MB: its columns' share of X (8 bytes
/// a non-zero), per column of its share the column start, curvature bound, coefficient
/// and the round's start coefficient (32 bytes), and per row of the design the label, the
/// margin, the round's start margin and its margin delta (32 bytes).
pub fn worker_holds_mb(nnz: usize, size: &DesignSize, workers: usize) -> f64 {
    let share = workers.max(1) as f64;
    let (nnz, d, n) = (nnz as f64, size.n_features as f64, size.n_samples as f64);
    (nnz * 8.0 / share + d * 32.0 / share + n * 32.0) / 1e6
}

fn job_for(size: &DesignSize, args: &LogisticScaleBenchArgs) -> LassoJob {
    LassoJob {
        synthetic: SyntheticLasso {
            n_samples: size.n_samples,
            n_features: size.n_features,
            n_nonzero: (size.n_features / 1000).clamp(1, size.n_features),
            nnz_per_column: size.nnz_per_column,
            seed: 42,
            ..SyntheticLasso::default()
        },
        lambda_fraction: args.lambda_fraction,
        timeout_s: args.timeout_s,
        solver: LassoSolver::GaussSeidel,
        ..LassoJob::default()
    }
}

/// Runs the bench, prints its table and JSON line.
pub fn run(args: LogisticScaleBenchArgs) -> Result<(), StradsTrainError> {
    let figures = measure(&args)?;
    print_json(&figures).map_err(|source| StradsTrainError::Json {
        path: PathBuf::new(),
        source,
    })
}

/// The median run of a runner's repeats (a run that missed the target counts as the
/// slowest), with `ratio` the median of every repeat's ratio.
fn median_run(runs: Vec<LogisticRunFigures>) -> Option<LogisticRunFigures> {
    let median = median_repeat(runs, |r| r.petrel_s, |r| r.ratio)?;
    let mut figures = median.run;
    figures.ratio = median.ratio;
    figures.ratios = median.ratios;
    Some(figures)
}

/// Runs every size, repeat and worker count, prints the table and writes the plot.
pub fn measure(args: &LogisticScaleBenchArgs) -> Result<LogisticScaleFigures, StradsTrainError> {
    let transport = validate(args)?;
    let out = absolute(&args.out)?;
    let mut sizes = Vec::new();
    let mut table = Table::new(&COLUMNS);
    for size in &args.sizes {
        sizes.push(measure_size(args, size, transport, &out, &mut table)?);
    }
    table.print();
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
                .filter_map(|s| Some((s.nnz as f64, s.per_workers.get(&workers)?.us_per_update?)))
                .collect(),
        });
    }
    let plot = write_plot(
        &out.join("logistic_scale_us_per_update.svg"),
        "Sparse logistic regression: time per coordinate update against design size",
        "non-zeros of X",
        "microseconds per coordinate update (to the target)",
        &series,
        true,
    )?;
    Ok(LogisticScaleFigures {
        bench: "logistic-scale",
        solver: "gauss-seidel",
        tolerance: args.tolerance,
        headline_workers: args.headline_workers,
        transport: format!("{:?}", args.transport).to_lowercase(),
        repeats: args.repeats,
        sizes,
        plot,
    })
}

/// Refuses empty size or worker lists, no repeats and a transport without a cluster;
/// returns the cluster's transport.
fn validate(args: &LogisticScaleBenchArgs) -> Result<JobTransport, StradsTrainError> {
    if args.sizes.is_empty() || args.workers.is_empty() || args.repeats == 0 {
        return Err(StradsTrainError::Usage(
            "need at least one size, one worker count and one repeat",
        ));
    }
    args.transport.cluster().ok_or(StradsTrainError::Usage(
        "logistic-scale compares STRADS runs: --transport memory, quic or processes",
    ))
}

/// One design size: its optimum, the repeated baseline and STRADS runs, and their table
/// rows (the baseline's, then one per worker count).
fn measure_size(
    args: &LogisticScaleBenchArgs,
    size: &DesignSize,
    transport: JobTransport,
    out: &Path,
    table: &mut Table,
) -> Result<LogisticSizeFigures, StradsTrainError> {
    let base = job_for(size, args);
    base.validate().map_err(StradsError::from)?;
    let (x, labels) = load(&base)?;
    let nnz = x.values.len();
    let lambda = logistic_lambda(&x, &labels, &base);
    // f*: the baseline (the one-worker Gauss-Seidel run, which stops once a sweep lowers
    // the objective by less than gap_tolerance / 100) to a tight tolerance.
    let optimum = run_baseline(&LassoJob {
        gap_tolerance: Some(100.0 * args.optimum_tolerance),
        ..base.clone()
    })?
    .final_objective;
    let target = optimum * (1.0 + args.tolerance);
    let label = format!("{}x{}", size.n_samples, size.n_features);
    tracing::info!(size = %label, nnz, optimum, "logistic-scale design solved");
    let mut baseline_runs_s = Vec::with_capacity(args.repeats);
    let mut baseline_updates = 0;
    let mut runs: BTreeMap<usize, Vec<LogisticRunFigures>> = BTreeMap::new();
    for repeat in 0..args.repeats {
        let timed = run_baseline(&LassoJob {
            target_objective: Some(target),
            ..base.clone()
        })?;
        let baseline_s = timed.elapsed_s;
        baseline_runs_s.push(baseline_s);
        baseline_updates = timed.updates;
        for &workers in &args.workers {
            let dir = out.join(format!("{label}-p{workers}"));
            let run = run_petrel(&base, target, dir, nnz, size, workers, transport)?;
            let ratio = run.petrel_s.map(|s| s / baseline_s);
            tracing::info!(size = %label, workers, repeat, ratio, "logistic-scale run");
            runs.entry(workers).or_default().push(LogisticRunFigures {
                ratio,
                ratios: vec![ratio],
                ..run
            });
        }
    }
    let baseline_s = median(&baseline_runs_s).unwrap_or(f64::NAN);
    let baseline_us = 1e6 * baseline_s / baseline_updates.max(1) as f64;
    table.row(baseline_row(
        &label,
        nnz,
        baseline_s,
        baseline_updates,
        COLUMNS.len(),
    ));
    let mut per_workers = BTreeMap::new();
    for (workers, runs) in runs {
        let Some(f) = median_run(runs) else {
            continue;
        };
        let reached: Vec<f64> = f.ratios.iter().flatten().copied().collect();
        table.row(vec![
            label.clone(),
            nnz.to_string(),
            format!("petrel {workers}w"),
            f.petrel_s
                .map_or("not reached".into(), |s| format!("{s:.3}")),
            f.petrel_updates.to_string(),
            cell(f.us_per_update, 3),
            cell(f.ratio, 2),
            range_cell(&reached),
            format!("{:.1}", f.wall_s),
            f.rounds.to_string(),
            cell(f.rss_mb, 0),
        ]);
        per_workers.insert(workers, f);
    }
    let headline = per_workers.get(&args.headline_workers);
    Ok(LogisticSizeFigures {
        n_samples: size.n_samples,
        n_features: size.n_features,
        nnz,
        lambda,
        optimum,
        baseline_s,
        baseline_runs_s,
        baseline_updates,
        baseline_us_per_update: baseline_us,
        petrel_s: headline.and_then(|h| h.petrel_s),
        petrel_updates: headline.map(|h| h.petrel_updates),
        ratio: headline.and_then(|h| h.ratio),
        rss_mb: headline.and_then(|h| h.rss_mb),
        per_workers,
    })
}

/// One STRADS run of `base` on `workers` workers into `dir`, stopped at `target` (its
/// ratio to the baseline left for the caller).
fn run_petrel(
    base: &LassoJob,
    target: f64,
    dir: PathBuf,
    nnz: usize,
    size: &DesignSize,
    workers: usize,
    transport: JobTransport,
) -> Result<LogisticRunFigures, StradsTrainError> {
    let job = LassoJob {
        target_objective: Some(target),
        out_dir: Some(dir.clone()),
        ..base.clone()
    };
    let started = Instant::now();
    let m = run_logistic_job(&job, workers, transport)?;
    let wall_s = started.elapsed().as_secs_f64();
    let petrel_s = (m.final_objective <= target).then_some(m.elapsed_s);
    let memory = NodeMemory::of_run(Some(&dir), transport, worker_holds_mb(nnz, size, workers));
    let rss_mb = match (memory.worker_rss_mb, memory.scheduler_rss_mb) {
        (Some(w), Some(s)) => Some(w.max(s)),
        _ => None,
    };
    Ok(LogisticRunFigures {
        workers,
        petrel_s,
        petrel_updates: m.updates,
        ratio: None,
        ratios: Vec::new(),
        us_per_update: petrel_s.map(|s| 1e6 * s / m.updates.max(1) as f64),
        wall_s,
        rounds: m.rounds,
        final_objective: m.final_objective,
        rss_mb,
        memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reaches_the_target_and_reports_every_worker_count() {
        let dir = tempfile::tempdir().unwrap();
        let args = LogisticScaleBenchArgs {
            sizes: vec!["300x2000x6".parse().unwrap()],
            workers: vec![1, 2],
            headline_workers: 2,
            lambda_fraction: 0.1,
            tolerance: 1e-4,
            optimum_tolerance: 1e-11,
            transport: TrainTransport::Memory,
            timeout_s: 60,
            out: dir.path().to_path_buf(),
            repeats: 1,
        };
        let f = measure(&args).unwrap();
        let size = &f.sizes[0];
        assert_eq!(size.per_workers.len(), 2);
        for run in size.per_workers.values() {
            assert!(run.petrel_s.is_some(), "{run:?}");
            assert!(run.final_objective <= size.optimum * (1.0 + 1e-4));
        }
        // One worker is the baseline: the same updates to the same target.
        assert_eq!(size.per_workers[&1].petrel_updates, size.baseline_updates);
        assert!(std::path::Path::new(&f.plot).exists());
    }
}
