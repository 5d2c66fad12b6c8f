//! `petrel bench lasso-scale`: STRADS Lasso against the single-threaded cyclic coordinate
//! descent baseline on sparse correlated designs of growing size (`sparse_correlated_lasso`),
//! through the scale harness (`crate::scale`): f* is the baseline run to a duality gap of
//! `--optimum-gap`, and every runner is timed to `f* (1 + --tolerance)` in `--repeats`
//! interleaved repeats. STRADS runs as a scheduler process and one process per worker by
//! default, each generating only its rows.
//!
//! Its own figures: per run the block size (`block_size`), the round breakdown (`profile`) and
//! `compute_ratio` (the compute on the rounds' critical path up to the target over
//! `baseline_s`: the ratio's floor if messages and waits cost nothing); per size
//! `optimum_s` and `data_mb_per_worker`; and after the table a probe of how fast one and two
//! threads stream memory here (`memory_bandwidth`), the ceiling of what a second worker on
//! this host gains in passes that only read.

use crate::memory_bandwidth::{self, StreamBandwidth};
pub use crate::scale::DesignSize;
use crate::scale::{CdRun, CdScale, CdScaleArgs, CdScaleFigures, CdSize, PetrelRun, Prepared};
use petrel::train::{NodeMemory, StradsTrainError, run_lasso_job};
use petrel_ml::data::SparseColumns;
use petrel_strads::StradsError;
use petrel_strads::apps::lasso::baseline::solve_baseline;
use petrel_strads::apps::lasso::{LassoSettings, LassoSolver, RoundProfile, SyntheticLasso};
use petrel_strads::kit::StradsSettings;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct LassoScaleBenchArgs {
    /// Design sizes, ROWSxFEATURESxNNZ_PER_COLUMN, smallest first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000x20000x20,10000x200000x20,50000x1000000x20"
    )]
    pub sizes: Vec<DesignSize>,
    #[command(flatten)]
    pub common: CdScaleArgs,
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
    #[arg(long, default_value_t = LassoSettings::default().round_latency_ms)]
    pub round_latency_ms: f64,
    /// Relative objective gap to reach: f <= f* (1 + tolerance).
    #[arg(long, default_value_t = 1e-3)]
    pub tolerance: f64,
    /// Relative duality gap of the baseline run that defines f*.
    #[arg(long, default_value_t = 1e-9)]
    pub optimum_gap: f64,
    #[arg(long, default_value = "target/bench-lasso-scale")]
    pub out: PathBuf,
    /// Buffer of the memory-bandwidth probe (one thread against two), MB; 0 skips it.
    #[arg(long, default_value_t = 256)]
    pub bandwidth_mb: usize,
}

/// A Lasso run's own keys.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LassoRun {
    pub block_size: usize,
    /// The compute on the critical path up to the target (the slowest worker's per round
    /// plus the scheduler's): petrel's time if messages and waits cost nothing.
    pub compute_to_target_s: Option<f64>,
    /// `compute_to_target_s / baseline_s`: the ratio's floor on this host.
    pub compute_ratio: Option<f64>,
    pub profile: RoundProfile,
}

/// One worker count's figures at one size: its median run's.
pub type PetrelFigures = CdRun<LassoRun>;

/// A Lasso size's own keys.
#[derive(Debug, Clone, Serialize)]
pub struct LassoSize {
    pub optimum_s: f64,
    pub data_mb_per_worker: f64,
}

/// One design size.
pub type SizeFigures = CdSize<LassoRun, LassoSize>;

/// The Lasso's own top-level keys.
#[derive(Debug, Serialize)]
pub struct LassoTop {
    pub interference_bound: f32,
    pub depth: usize,
    pub round_latency_ms: f64,
    /// One thread's streaming read bandwidth against two threads' (`--bandwidth-mb`).
    pub memory_bandwidth: Option<StreamBandwidth>,
}

/// The figures of a run (its JSON line).
pub type LassoScaleFigures = CdScaleFigures<LassoRun, LassoSize, LassoTop>;

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

impl LassoScaleBenchArgs {
    fn job_for(&self, size: &DesignSize) -> LassoSettings {
        let mut job = LassoSettings {
            synthetic: SyntheticLasso {
                n_samples: size.n_samples,
                n_features: size.n_features,
                group_size: self.group_size,
                correlation: self.correlation,
                n_nonzero: ((size.n_features as f64 * self.nonzero_fraction).ceil() as usize)
                    .clamp(1, size.n_features),
                noise_std: 0.1,
                nnz_per_column: size.nnz_per_column,
                seed: 42,
            },
            lambda_fraction: self.lambda_fraction,
            timeout_s: self.common.timeout_s,
            round_latency_ms: self.round_latency_ms,
            solver: self.solver,
            ..LassoSettings::default()
        };
        // Each solver gets its own knobs only (`gauss-seidel` refuses the scheduled mode's).
        if self.solver == LassoSolver::Scheduled {
            (job.interference_bound, job.depth) = (self.interference_bound, self.depth);
        } else {
            (job.gs_chunk, job.gs_active_passes) = (self.gs_chunk, self.gs_active_passes);
        }
        job
    }
}

/// The baseline's design (dropped before the last repeat's STRADS runs, so that they start
/// without this process's copy of it: what in-process transports measure as their peak).
pub struct LassoDesign {
    data: Option<(SparseColumns, Vec<f32>)>,
    job: LassoSettings,
}

impl CdScale for LassoScaleBenchArgs {
    type Run = LassoRun;
    type Size = LassoSize;
    type Top = LassoTop;
    type Design = LassoDesign;
    const NAME: &'static str = "lasso-scale";
    const NO_CLUSTER: &'static str =
        "lasso-scale compares STRADS runs: --transport memory, quic or processes";
    const EXTRA_KEYS: &'static str = "block_size rss_mb worker_rss_mb worker_holds_mb \
        worker_rss_over_holds worker_heap_over_holds scheduler_rss_mb profile/round_latency_ms \
        profile/messaging_s compute_ratio";
    const PLOT: [&'static str; 3] = [
        "lasso_scale_us_per_update.svg",
        "Lasso: time per coordinate update against design size",
        "microseconds per coordinate update (to 1e-3)",
    ];

    fn common(&self) -> &CdScaleArgs {
        &self.common
    }

    fn sizes(&self) -> (&[DesignSize], f64, &Path) {
        (&self.sizes, self.tolerance, &self.out)
    }

    fn solver(&self) -> String {
        self.solver.to_string()
    }

    fn prepare(
        &self,
        size: &DesignSize,
    ) -> Result<Prepared<LassoDesign, LassoSize>, StradsTrainError> {
        let base = self.job_for(size);
        // The flags checked as `train lasso` checks its settings, before any work.
        base.validate().map_err(StradsError::from)?;
        let generated = Instant::now();
        let (x, y) = base.load()?;
        let nnz = x.values.len();
        tracing::info!(
            nnz,
            seconds = generated.elapsed().as_secs_f64(),
            "design generated"
        );
        // f*: the baseline to a tight duality gap.
        let optimum_job = LassoSettings {
            gap_tolerance: Some(self.optimum_gap),
            ..base.clone()
        };
        let m = solve_baseline(&x, &y, &optimum_job)?.metrics;
        Ok(Prepared {
            design: LassoDesign {
                data: Some((x, y)),
                job: base,
            },
            nnz,
            lambda: m.lambda,
            optimum: m.final_objective,
            extra: LassoSize {
                optimum_s: m.elapsed_s,
                data_mb_per_worker: worker_holds_mb(
                    self.solver,
                    nnz,
                    size,
                    self.common.headline_workers,
                ),
            },
        })
    }

    fn baseline(
        &self,
        design: &mut LassoDesign,
        target: f64,
        last: bool,
    ) -> Result<(f64, u64), StradsTrainError> {
        let Some((x, y)) = &design.data else {
            return Err(StradsTrainError::Usage("the design was released"));
        };
        // The timed baseline: the same solver, stopped at the target.
        let job = LassoSettings {
            target_objective: Some(target),
            ..design.job.clone()
        };
        let m = solve_baseline(x, y, &job)?.metrics;
        if last {
            design.data = None;
        }
        Ok((m.elapsed_s, m.updates))
    }

    fn petrel(&self, r: PetrelRun) -> Result<PetrelFigures, StradsTrainError> {
        let PetrelRun {
            size,
            nnz,
            target,
            workers,
            transport,
            dir,
            ..
        } = r;
        let job = LassoSettings {
            target_objective: Some(target),
            out_dir: Some(dir),
            ..self.job_for(size)
        };
        let started = Instant::now();
        let m = run_lasso_job(&job, workers, transport, false)?;
        let wall_s = started.elapsed().as_secs_f64();
        let holds = worker_holds_mb(self.solver, nnz, size, workers);
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
        Ok(CdRun {
            workers,
            petrel_s: m.target_s,
            petrel_updates: m.target_updates,
            wall_s,
            rounds: m.rounds,
            final_objective: m.final_objective,
            rss_mb: Some(rss_mb),
            memory,
            extra: LassoRun {
                block_size: m.block_size,
                compute_to_target_s,
                compute_ratio: compute_to_target_s.map(|s| s / r.baseline_s),
                profile: m.profile.clone(),
            },
            ..CdRun::default()
        })
    }

    /// After the table, a probe of how fast one thread and two threads stream memory here.
    fn top(&self) -> LassoTop {
        let bandwidth =
            (self.bandwidth_mb > 0).then(|| memory_bandwidth::measure(self.bandwidth_mb << 20, 5));
        if let Some(b) = &bandwidth {
            println!(
                "memory bandwidth (streaming read of {} MB): 1 thread {:.1} GB/s, 2 threads {:.1} GB/s (x{:.2})",
                b.bytes >> 20,
                b.one_thread_gbps,
                b.two_threads_gbps,
                b.two_over_one()
            );
        }
        LassoTop {
            interference_bound: self.interference_bound,
            depth: self.depth,
            round_latency_ms: self.round_latency_ms,
            memory_bandwidth: bandwidth,
        }
    }
}

/// Runs the bench, prints its table and JSON line.
pub fn run(args: LassoScaleBenchArgs) -> Result<(), StradsTrainError> {
    crate::scale::print_figures(&measure(&args)?)
}

/// Runs every size, repeat and worker count, prints the table and writes the plot.
pub fn measure(args: &LassoScaleBenchArgs) -> Result<LassoScaleFigures, StradsTrainError> {
    crate::scale::measure_cd(args)
}
