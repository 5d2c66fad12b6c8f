//! `solver = "gauss-seidel"`: Lasso with column-holding workers that run Gauss-Seidel
//! sweeps against a full local residual ([`crate::core::gauss_seidel`] has the decision
//! logic and the convergence argument). Star routing, depth 1, one scheduler:
//!
//! ```text
//! start: every node cuts the columns into W ranges of equal non-zeros; worker p keeps
//!        its range (CSC), y and r = y
//! round: scheduler -> worker p  Sweep{local columns start..end | active set, passes,
//!                                     settle, target}
//!        worker p sweeps them sequentially (the baseline's update) and replies
//!                               {changed coordinates, deltas d_p, r . u_p, residual
//!                                delta u_p (none with one worker)}
//!        scheduler: Gram u_p . u_q, omega, step weights w, coefficients += w_p d_p,
//!                   objective, stop test; -> every worker Commit{w, V = sum_p w_p u_p}
//!        worker p: r = r_start - V, b_own = b_start + w_p d_p
//! certify: after every full sweep (and at the end) every worker returns max |x_j^T r|,
//!        the KKT violation over its columns, ||b_own||_1 and (y.y, y.r, r.r). Several
//!        workers: it rides with the first active-set round (CertifyThenSweep; the sweep
//!        is discarded with weights 0 if the certificate ends the run); one worker
//!        certifies in its full sweep's round (SweepThenCertify). The start (b = 0) needs
//!        no round: its certificate is lambda_max and y.y.
//! ```
//!
//! The schedule is glmnet's: a full sweep (in chunks of `gs_chunk` columns per worker and
//! round), a certification, then active-set sweeps until the largest step is small against
//! the gap, then the next full sweep. With one worker, two rounds per full sweep; that run
//! in one thread is the baseline (`--transport none`, [`super::baseline`]).

pub mod scheduling;

pub use scheduling::GsScheduling;

use super::config::{DesignShape, LassoSettings};
use super::multi::{MAX_SCHEDULERS, column_weight, partition_weighted};
use super::wire::WorkerBusy;
use crate::core::StradsModelError;
use crate::core::app::{Push, decode_state, encode_state, strads_app};
use crate::core::gauss_seidel::{Certificate, GsWorkerCore, RowVector, SweepOrder, SweepResult};
use crate::error::StradsError;
use crate::kit::{FinishedRun, JobShape, StarHalf, StradsJob};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::time::Instant;

/// Marker type of the Gauss-Seidel Lasso's wire types and job (same roles and settings
/// section as the scheduled Lasso; the roles pick by `solver`).
pub struct LassoGsApp;

/// What a worker is asked to do in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GsTask {
    /// Sweep these coordinates.
    Sweep(SweepOrder),
    /// Report its share of the certificate.
    Certify,
    /// Report its share of the certificate, then sweep (several workers: the
    /// certification after a full sweep rides with the first active-set round, which the
    /// scheduler discards with weights 0 if the certificate ends the run).
    CertifyThenSweep(SweepOrder),
    /// Sweep, then report the certificate of the state the sweep left (a lone worker's
    /// last full-sweep chunk: with one worker the sweep commits as it is, so the
    /// certification needs no round of its own).
    SweepThenCertify(SweepOrder),
}

/// A worker's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GsPartial {
    /// Answer to a sweep.
    Swept {
        /// The sweep's changes and its residual delta.
        result: SweepResult,
        /// The worker's compute so far.
        busy: WorkerBusy,
    },
    /// Answer to a certification.
    Certified {
        /// Its share of the certificate.
        certificate: Certificate,
        /// The worker's compute so far.
        busy: WorkerBusy,
    },
    /// Answer to [`GsTask::CertifyThenSweep`] and [`GsTask::SweepThenCertify`].
    CertifiedAndSwept {
        /// Its share of the certificate of the state before the sweep (or after it, for
        /// `SweepThenCertify`).
        certificate: Certificate,
        /// The sweep's changes (as in [`GsPartial::Swept`]).
        result: SweepResult,
        /// The worker's compute so far.
        busy: WorkerBusy,
    },
}

impl GsPartial {
    /// The worker's compute so far, whatever the answer.
    pub fn busy(&self) -> WorkerBusy {
        match self {
            GsPartial::Swept { busy, .. }
            | GsPartial::Certified { busy, .. }
            | GsPartial::CertifiedAndSwept { busy, .. } => *busy,
        }
    }
}

/// Every worker's step weight (none after a certification round: the default) and, with
/// several workers, the weighted sum of their residual deltas.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GsCommit {
    /// `w_p` by worker.
    pub weights: Vec<f64>,
    /// `V` (several workers).
    pub combined: Option<GsCombined>,
}

/// The combined residual delta `V = sum_p w_p u_p` the scheduler sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GsCombined {
    /// `V` (with implicit centring its stored part).
    pub stored: RowVector,
    /// With implicit centring, `V`'s constant part (`V = stored + offset 1`).
    pub offset: f64,
}

strads_app!(
    LassoGsApp,
    "petrel.strads.lasso-gs",
    GsTask,
    GsPartial,
    GsCommit
);

/// The column ranges of `workers` workers: contiguous, of about equal non-zeros (the same
/// on every node, so nobody sends the cut), from the design's shape alone (what a node
/// knows before it keeps any column).
pub fn column_ranges_of(
    shape: &DesignShape,
    workers: usize,
) -> Result<Vec<Range<usize>>, StradsError> {
    let d = shape.n_columns();
    if workers == 0 || workers > d || workers > MAX_SCHEDULERS {
        return Err(StradsModelError::InvalidConfig(format!(
            "solver = \"gauss-seidel\" splits the {d} features over the workers: {workers} \
             workers is not within 1..={}",
            d.min(MAX_SCHEDULERS)
        ))
        .into());
    }
    let weights = shape
        .column_nnz
        .iter()
        .map(|&c| column_weight(u64::from(c)));
    partition_weighted(weights, workers)
}

/// Worker `index`'s range of [`column_ranges_of`] among `workers`, as a share's pick.
pub fn worker_columns(
    index: usize,
    workers: usize,
) -> impl FnOnce(&DesignShape) -> Result<Range<usize>, StradsError> {
    move |design| {
        column_ranges_of(design, workers)?
            .into_iter()
            .nth(index)
            .ok_or(StradsError::NoShare { index, workers })
    }
}

/// Worker half: its columns, the residual and its compute time.
pub struct GsWorker {
    core: GsWorkerCore,
    index: usize,
    busy: WorkerBusy,
    /// The digest of the data it loaded (compared with every node's before the first
    /// round).
    data_digest: Option<u64>,
}

impl GsWorker {
    /// Worker `index` holding `core`.
    pub fn new(core: GsWorkerCore, index: usize) -> Self {
        GsWorker {
            core,
            index,
            busy: WorkerBusy::default(),
            data_digest: None,
        }
    }
}

impl Push<LassoGsApp> for GsWorker {
    fn push(&mut self, _round: u64, task: &GsTask) -> Result<GsPartial, StradsModelError> {
        let started = Instant::now();
        let partial = match task {
            GsTask::Sweep(order) => {
                let result = self.core.sweep(order)?;
                self.busy.push_s += started.elapsed().as_secs_f64();
                if self.busy.peak_rss_mb == 0.0 {
                    self.busy.peak_rss_mb = super::metrics::peak_rss_mb();
                }
                GsPartial::Swept {
                    result,
                    busy: self.busy,
                }
            }
            GsTask::Certify => {
                let certificate = self.core.certify();
                self.busy.eval_s += started.elapsed().as_secs_f64();
                self.busy.peak_rss_mb = super::metrics::peak_rss_mb();
                GsPartial::Certified {
                    certificate,
                    busy: self.busy,
                }
            }
            GsTask::CertifyThenSweep(order) => {
                let certificate = self.core.certify();
                let certified = Instant::now();
                self.busy.eval_s += (certified - started).as_secs_f64();
                let result = self.core.sweep(order)?;
                self.busy.push_s += certified.elapsed().as_secs_f64();
                self.busy.peak_rss_mb = super::metrics::peak_rss_mb();
                GsPartial::CertifiedAndSwept {
                    certificate,
                    result,
                    busy: self.busy,
                }
            }
            GsTask::SweepThenCertify(order) => {
                // Several workers' sweeps are combined at the commit: the state after
                // one sweep is not the one to certify.
                if self.core.is_shared() {
                    return Err(StradsModelError::protocol(
                        "a sweep then certification is a lone worker's round",
                    ));
                }
                let result = self.core.sweep(order)?;
                let swept = Instant::now();
                self.busy.push_s += (swept - started).as_secs_f64();
                let certificate = self.core.certify();
                self.busy.eval_s += swept.elapsed().as_secs_f64();
                self.busy.peak_rss_mb = super::metrics::peak_rss_mb();
                GsPartial::CertifiedAndSwept {
                    certificate,
                    result,
                    busy: self.busy,
                }
            }
        };
        Ok(partial)
    }

    fn commit(&mut self, round: u64, commit: &GsCommit) -> Result<(), StradsModelError> {
        if commit.weights.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let weight = *commit.weights.get(self.index).ok_or_else(|| {
            StradsModelError::protocol(format!(
                "round {round}: commit has {} weights, this is worker {}",
                commit.weights.len(),
                self.index
            ))
        })?;
        if let Some(c) = &commit.combined {
            self.core.commit(weight, &c.stored, c.offset)?;
        } else if self.core.is_shared() && commit.weights.iter().any(|w| *w != 0.0) {
            return Err(StradsModelError::protocol(format!(
                "round {round}: a commit without the combined delta it needs"
            )));
        } else {
            self.core.commit(weight, &RowVector::zero(), 0.0)?;
        }
        self.busy.commit_s += started.elapsed().as_secs_f64();
        Ok(())
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        encode_state(&self.core.snapshot()?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        self.core.restore(decode_state(state)?)
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }
}

impl StradsJob for LassoGsApp {
    const SECTION: &'static str = super::LassoApp::SECTION;
    const SCHEDULER_ROLE: &'static str = super::SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = super::WORKER_ROLE;
    fn latency_bound(job: &LassoSettings) -> bool {
        <super::LassoApp as StradsJob>::latency_bound(job)
    }
    type Config = LassoSettings;
    type Scheduler = GsScheduling;
    type Worker = StarHalf<GsWorker>;

    /// The scheduler keeps no column: the design's shape, `y` and `lambda_max`
    /// ([`LassoSettings::load_column_share`] of no columns).
    fn scheduler(job: &LassoSettings, shape: &JobShape) -> Result<GsScheduling, StradsError> {
        let design = job.load_column_share(|_| Ok(0..0))?;
        let mut half = GsScheduling::of_design(
            &design.shape,
            &design.y,
            design.lambda_max,
            job,
            shape.workers,
        )?;
        half.data_digest = Some(design.digest());
        tracing::info!(
            rows = design.shape.n_rows,
            features = design.shape.n_columns(),
            workers = shape.workers,
            lambda = half.lambda(),
            "lasso gauss-seidel scheduler ready"
        );
        Ok(half)
    }

    /// Worker `index` keeps only its range of columns ([`LassoSettings::load_column_share`]).
    fn worker(
        job: &LassoSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<StarHalf<GsWorker>, StradsError> {
        let share = job.load_column_share(worker_columns(index, shape.workers))?;
        tracing::debug!(worker = index, columns = ?share.columns, "lasso gauss-seidel worker loaded");
        let digest = share.digest();
        let lambda = f64::from(job.lambda_from_max(share.lambda_max));
        let shared = shape.workers > 1;
        let core = GsWorkerCore::build(share.x, share.y, lambda, shared, job.fit_intercept)?;
        let mut worker = GsWorker::new(core, index);
        worker.data_digest = Some(digest);
        Ok(StarHalf(worker))
    }

    fn finish(
        job: &LassoSettings,
        scheduler: GsScheduling,
        _run: &FinishedRun,
    ) -> Result<(), StradsError> {
        let outcome = scheduler.outcome();
        tracing::info!(
            objective = outcome.metrics.final_objective,
            "lasso gauss-seidel finished"
        );
        if let Some(dir) = &job.out_dir {
            outcome.write(dir, job)?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
