//! `petrel bench logistic-scale`: STRADS sparse logistic regression (Gauss-Seidel) against
//! the same solver on one worker in this thread, on the Lasso's designs labelled by the
//! sign of the response ([`crate::scale`]). f* is the baseline run until a full sweep
//! lowers the objective by at most `--optimum-tolerance`.

use crate::scale::{CdRun, CdScale, CdScaleArgs, DesignSize, PetrelRun, Prepared};
use petrel::CliError;
use petrel::train::run_job;
use petrel_strads::apps::lasso::{LassoSettings, LassoSolver, SyntheticLasso};
use petrel_strads::apps::logistic::{LogisticApp, load, logistic_lambda, run_baseline};
use std::path::{Path, PathBuf};

/// `petrel bench logistic-scale`.
#[derive(clap::Args, Debug, Clone)]
pub struct LogisticScaleBenchArgs {
    /// Design sizes, ROWSxFEATURESxNNZ_PER_COLUMN, smallest first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000x20000x20,20000x200000x20,50000x1000000x20"
    )]
    pub sizes: Vec<DesignSize>,
    /// The flags every coordinate-descent scale bench has.
    #[command(flatten)]
    pub common: CdScaleArgs,
    /// lambda = fraction * max_j |x_j^T y| / 2 (y in {-1, +1}).
    #[arg(long, default_value_t = LassoSettings::default().lambda_fraction)]
    pub lambda_fraction: f64,
    /// Relative objective gap to reach: f <= f* (1 + tolerance).
    #[arg(long, default_value_t = 1e-4)]
    pub tolerance: f64,
    /// The baseline run that defines f* stops once a full sweep lowers the objective by at
    /// most this (relative).
    #[arg(long, default_value_t = 1e-11)]
    pub optimum_tolerance: f64,
    /// Output directory (every run's outputs and the plot).
    #[arg(long, default_value = "target/bench-logistic-scale")]
    pub out: PathBuf,
}

impl CdScale for LogisticScaleBenchArgs {
    type Run = ();
    type Size = ();
    type Top = ();
    type Design = ();
    const NAME: &'static str = "logistic-scale";
    const EXTRA_KEYS: &'static str = "rounds rss_mb";
    const PLOT: [&'static str; 3] = [
        "logistic_scale_us_per_update.svg",
        "Sparse logistic regression: time per coordinate update against design size",
        "microseconds per coordinate update (to the target)",
    ];

    fn args(&self) -> (&CdScaleArgs, &[DesignSize], f64, &Path) {
        (&self.common, &self.sizes, self.tolerance, &self.out)
    }

    fn solver(&self) -> String {
        "gauss-seidel".into()
    }

    fn job(&self, size: &DesignSize) -> LassoSettings {
        LassoSettings {
            synthetic: SyntheticLasso {
                n_samples: size.n_samples,
                n_features: size.n_features,
                n_nonzero: (size.n_features / 1000).clamp(1, size.n_features),
                nnz_per_column: size.nnz_per_column,
                seed: 42,
                ..SyntheticLasso::default()
            },
            lambda_fraction: self.lambda_fraction,
            timeout_s: self.common.timeout_s,
            solver: LassoSolver::GaussSeidel,
            ..LassoSettings::default()
        }
    }

    /// Its columns' share of X (8 bytes a non-zero), 32 bytes a column of it and a row.
    fn holds_mb(&self, nnz: usize, size: &DesignSize, workers: usize) -> f64 {
        let share = workers.max(1) as f64;
        let (nnz, d, n) = (nnz as f64, size.n_features as f64, size.n_samples as f64);
        (nnz * 8.0 / share + d * 32.0 / share + n * 32.0) / 1e6
    }

    fn prepare(
        &self,
        _size: &DesignSize,
        job: &LassoSettings,
    ) -> Result<Prepared<(), ()>, CliError> {
        let (x, labels) = load(job)?;
        // f*: the baseline stops once a sweep gains less than gap_tolerance / 100.
        let optimum = run_baseline(&LassoSettings {
            gap_tolerance: Some(100.0 * self.optimum_tolerance),
            ..job.clone()
        })?
        .final_objective;
        Ok(Prepared {
            design: (),
            nnz: x.values.len(),
            lambda: logistic_lambda(&x, &labels, job),
            optimum,
            extra: (),
        })
    }

    fn baseline(
        &self,
        _design: &mut (),
        job: &LassoSettings,
        _last: bool,
    ) -> Result<(f64, u64), CliError> {
        let m = run_baseline(job)?;
        Ok((m.elapsed_s, m.updates))
    }

    fn petrel(&self, r: PetrelRun) -> Result<CdRun<()>, CliError> {
        let m = run_job::<LogisticApp>(r.job, r.workers, r.transport)?;
        let reached = r
            .job
            .target_objective
            .is_some_and(|t| m.final_objective <= t);
        Ok(CdRun {
            petrel_s: reached.then_some(m.elapsed_s),
            petrel_updates: Some(m.updates),
            rounds: m.rounds,
            final_objective: m.final_objective,
            ..CdRun::default()
        })
    }

    fn top(&self) {}
}

/// Runs the bench, prints its table, plot and JSON line.
pub fn run(args: LogisticScaleBenchArgs) -> Result<(), CliError> {
    crate::scale::print_figures(&crate::scale::measure_cd(&args)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reaches_the_target_and_reports_every_worker_count() {
        let dir = tempfile::tempdir().unwrap();
        let args = LogisticScaleBenchArgs {
            sizes: vec!["300x2000x6".parse().unwrap()],
            common: crate::scale::CdScaleArgs {
                workers: vec![1, 2],
                headline_workers: 2,
                transport: petrel::train::TrainTransport::Memory,
                timeout_s: 60,
                repeats: 1,
            },
            lambda_fraction: 0.1,
            tolerance: 1e-4,
            optimum_tolerance: 1e-11,
            out: dir.path().to_path_buf(),
        };
        let f = crate::scale::measure_cd(&args).unwrap();
        let size = &f.sizes[0];
        assert_eq!(size.per_workers.len(), 2);
        for run in size.per_workers.values() {
            assert!(run.petrel_s.is_some(), "{run:?}");
            assert!(run.final_objective <= size.optimum * (1.0 + 1e-4));
        }
        // One worker is the baseline: the same updates to the same target.
        assert_eq!(
            size.per_workers[&1].petrel_updates,
            Some(size.baseline_updates)
        );
        assert!(std::path::Path::new(&f.plot).exists());
    }
}
