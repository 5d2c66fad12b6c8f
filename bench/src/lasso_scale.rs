//! `petrel bench lasso-scale`: STRADS Lasso against single-threaded cyclic coordinate
//! descent on sparse correlated designs of growing size (the `scale` harness); f* is the
//! baseline run to a duality gap of `--optimum-gap`. After the table, how fast one and two
//! threads stream memory here: the ceiling of what a second worker gains.

use crate::memory_bandwidth::{self, StreamBandwidth};
use crate::scale::{CdRun, CdScale, CdScaleArgs, CdScaleFigures, DesignSize, PetrelRun, Prepared};
use petrel::CliError;
use petrel::train::run_lasso_job;
use petrel_ml::data::SparseColumns;
use petrel_strads::apps::lasso::baseline::solve_baseline;
use petrel_strads::apps::lasso::{LassoSettings, LassoSolver, RoundProfile, SyntheticLasso};
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
    /// Coordinates per round.
    pub block_size: usize,
    /// The compute on the critical path to the target: petrel's time if messages and waits
    /// cost nothing; over `baseline_s`, the ratio's floor on this host.
    pub compute_to_target_s: Option<f64>,
    pub compute_ratio: Option<f64>,
    pub profile: RoundProfile,
}

/// A Lasso size's own keys.
#[derive(Debug, Clone, Serialize)]
pub struct LassoSize {
    /// Seconds of the baseline run to f*.
    pub optimum_s: f64,
    /// What one worker of the headline count holds, MB.
    pub data_mb_per_worker: f64,
}

/// The Lasso's own top-level keys.
#[derive(Debug, Serialize)]
pub struct LassoTop {
    pub interference_bound: f32,
    pub depth: usize,
    pub round_latency_ms: f64,
    pub memory_bandwidth: Option<StreamBandwidth>,
}

/// The figures of a run (its JSON line).
pub type LassoScaleFigures = CdScaleFigures<LassoRun, LassoSize, LassoTop>;

impl CdScale for LassoScaleBenchArgs {
    type Run = LassoRun;
    type Size = LassoSize;
    type Top = LassoTop;
    /// Dropped before the last repeat's STRADS runs, out of their in-process peak.
    type Design = Option<(SparseColumns, Vec<f32>)>;
    const NAME: &'static str = "lasso-scale";
    const EXTRA_KEYS: &'static str = "block_size rss_mb worker_rss_mb worker_holds_mb \
        worker_rss_over_holds worker_heap_over_holds scheduler_rss_mb profile/round_latency_ms \
        profile/messaging_s compute_ratio";
    const PLOT: [&'static str; 3] = [
        "lasso_scale_us_per_update.svg",
        "Lasso: time per coordinate update against design size",
        "microseconds per coordinate update (to 1e-3)",
    ];

    fn args(&self) -> (&CdScaleArgs, &[DesignSize], f64, &Path) {
        (&self.common, &self.sizes, self.tolerance, &self.out)
    }

    fn solver(&self) -> String {
        self.solver.to_string()
    }

    fn job(&self, size: &DesignSize) -> LassoSettings {
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
        // `gauss-seidel` refuses the scheduled mode's knobs.
        if self.solver == LassoSolver::Scheduled {
            (job.interference_bound, job.depth) = (self.interference_bound, self.depth);
        } else {
            (job.gs_chunk, job.gs_active_passes) = (self.gs_chunk, self.gs_active_passes);
        }
        job
    }

    /// From the solvers' structures: a scheduled worker holds its rows' share of X (8 bytes
    /// a non-zero), the coefficients and its rows' y and residual; a Gauss-Seidel worker its
    /// columns' share of X, 24 bytes a column of it and 20 a row.
    fn holds_mb(&self, nnz: usize, size: &DesignSize, workers: usize) -> f64 {
        let share = workers.max(1) as f64;
        let (nnz, d, n) = (nnz as f64, size.n_features as f64, size.n_samples as f64);
        let bytes = match self.solver {
            LassoSolver::Scheduled => nnz * 8.0 / share + d * 8.0 + n * 12.0 / share,
            LassoSolver::GaussSeidel | LassoSolver::Auto => {
                nnz * 8.0 / share + d * 24.0 / share + n * 20.0
            }
        };
        bytes / 1e6
    }

    fn prepare(
        &self,
        size: &DesignSize,
        job: &LassoSettings,
    ) -> Result<Prepared<Self::Design, LassoSize>, CliError> {
        let generated = Instant::now();
        let (x, y) = job.load()?;
        let nnz = x.values.len();
        let seconds = generated.elapsed().as_secs_f64();
        tracing::info!(nnz, seconds, "design generated");
        let optimum_job = LassoSettings {
            gap_tolerance: Some(self.optimum_gap),
            ..job.clone()
        };
        let m = solve_baseline(&x, &y, &optimum_job)?.metrics;
        let data_mb_per_worker = self.holds_mb(nnz, size, self.common.headline_workers);
        Ok(Prepared {
            design: Some((x, y)),
            nnz,
            lambda: m.lambda,
            optimum: m.final_objective,
            extra: LassoSize {
                optimum_s: m.elapsed_s,
                data_mb_per_worker,
            },
        })
    }

    fn baseline(
        &self,
        design: &mut Self::Design,
        job: &LassoSettings,
        last: bool,
    ) -> Result<(f64, u64), CliError> {
        let (x, y) = design
            .as_ref()
            .ok_or_else(|| CliError::Usage("the design was released".into()))?;
        let m = solve_baseline(x, y, job)?.metrics;
        if last {
            *design = None;
        }
        Ok((m.elapsed_s, m.updates))
    }

    fn petrel(&self, r: PetrelRun) -> Result<CdRun<LassoRun>, CliError> {
        let m = run_lasso_job(r.job, r.workers, r.transport, false)?;
        let p = &m.profile;
        let compute_to_target_s = p.critical_compute_to_target_s;
        Ok(CdRun {
            petrel_s: m.target_s,
            petrel_updates: m.target_updates,
            rounds: m.rounds,
            final_objective: m.final_objective,
            rss_mb: Some(p.scheduler_peak_rss_mb.max(p.worker_peak_rss_mb)),
            extra: LassoRun {
                block_size: m.block_size,
                compute_to_target_s,
                compute_ratio: compute_to_target_s.map(|s| s / r.baseline_s),
                profile: p.clone(),
            },
            ..CdRun::default()
        })
    }

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
pub fn run(args: LassoScaleBenchArgs) -> Result<(), CliError> {
    crate::scale::print_figures(&measure(&args)?)
}

/// Runs every size, repeat and worker count, prints the table and writes the plot.
pub fn measure(args: &LassoScaleBenchArgs) -> Result<LassoScaleFigures, CliError> {
    crate::scale::measure_cd(args)
}
