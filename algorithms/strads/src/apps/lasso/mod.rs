//! Lasso by scheduled coordinate descent, as a [`StradsJob`] ([`LassoScheduling`] and
//! [`LassoWorker`]), with its Gauss-Seidel solver ([`gs`], same roles: they pick by
//! `solver`), several schedulers ([`multi`]) and the one-thread baseline ([`baseline`]).
//!
//! Roles: `strads-lasso-scheduler` (plus `strads-lasso-scheduler-<s>` for further
//! schedulers) and `strads-lasso-worker`; outputs `coefficients.tsv` and `metrics.json`.

pub mod baseline;
pub mod checkpoint;
pub mod config;
pub mod gs;
pub mod heldout;
pub mod metrics;
pub mod multi;
pub mod scheduling;
pub mod wire;
pub mod worker;

pub use config::{
    Balance, ColumnShare, DesignShape, LassoSettings, LassoSolver,
    RECOMMENDED_SPARSE_INTERFERENCE_BOUND, SyntheticLasso, lambda_max,
};
pub use metrics::{
    Evaluation, LassoMetrics, LassoOutcome, ObjectivePoint, RoundProfile, linear_model,
    write_coefficients,
};
pub use scheduling::LassoScheduling;
pub use wire::{LassoApp, LassoCommit, LassoPartial, LassoTask};
pub use worker::LassoWorker;

use crate::core::lasso::LassoWorkerState;
use crate::error::StradsError;
use crate::kit::dealing::WorkerDealing;
use crate::kit::serial::Delivery;
use crate::kit::{FinishedRun, JobShape, StarHalf, StradsJob, StradsSettings};
use crate::shells::SchedulerOptions;
use checkpoint::{ClusterShape, data_fingerprint};
use petrel_actors::Cluster;

/// Role of scheduler 0 (the only one unless `schedulers > 1`).
pub const SCHEDULER_ROLE: &str = "strads-lasso-scheduler";
/// Role (and actor) of the workers.
pub const WORKER_ROLE: &str = "strads-lasso-worker";

impl StradsJob for LassoApp {
    const SECTION: &'static str = "lasso";
    const SCHEDULER_ROLE: &'static str = SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = WORKER_ROLE;
    /// A round's block (or a Gauss-Seidel chunk) is sized from the measured round
    /// latency, so handlers return in milliseconds and a run is a chain of short hops.
    fn latency_bound(_: &LassoSettings) -> bool {
        true
    }
    type Config = LassoSettings;
    type Scheduler = LassoScheduling;
    type Worker = StarHalf<LassoWorker>;

    fn scheduler_options(job: &LassoSettings) -> SchedulerOptions {
        SchedulerOptions::with_depth_and_timeout(job.depth, job.timeout_s)
    }

    fn scheduler(job: &LassoSettings, shape: &JobShape) -> Result<LassoScheduling, StradsError> {
        let (x, y) = job.load()?;
        let mut half = LassoScheduling::new(&x, &y, job, shape.workers)?;
        tracing::info!(
            rows = x.n_rows,
            features = x.n_columns(),
            workers = shape.workers,
            lambda = half.lambda(),
            mode = %job.mode,
            "lasso scheduler ready"
        );
        let shape = ClusterShape::of(&x, &y, half.lambda(), job.seed);
        // A file is read whole by every node (workers too), so every node can digest it.
        half.data_digest = job.data.is_some().then_some(shape.data_fnv64());
        half.shape = Some(shape);
        Ok(half)
    }

    fn worker(
        job: &LassoSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<StarHalf<LassoWorker>, StradsError> {
        let mut rows = 0..0;
        let mut means = None;
        let mut digest = None;
        let mut whole = None;
        let dynamic = job.balance == Balance::Dynamic;
        let (block, y_block) = if job.fit_intercept || job.data.is_some() || dynamic {
            // Implicit centring needs the whole design's column means; a file is read
            // whole anyway (and digested, as the scheduler does); dynamic dealing may
            // hand this worker any rows.
            let (x, y) = job.load()?;
            rows = shape.share(x.n_rows, index)?;
            means = job.design_means(&x);
            digest = job.data.is_some().then(|| data_fingerprint(&x, &y));
            let block = (x.row_block(rows.clone()), y[rows.clone()].to_vec());
            if dynamic {
                whole = Some(crate::kit::dealing::WholeDesign::new(x, y, means.clone()));
            }
            block
        } else {
            job.load_rows(|n| {
                rows = shape.share(n, index)?;
                Ok(rows.clone())
            })?
        };
        let state = match means {
            Some(means) => LassoWorkerState::centred(block, y_block, means)?,
            None => LassoWorkerState::new(block, y_block)?,
        };
        let mut worker = LassoWorker::with_schedulers(state, job.schedulers);
        worker.data_digest = digest;
        worker = worker.dealing(WorkerDealing::of(job.slowness(index), whole));
        tracing::debug!(worker = index, rows = ?rows, "lasso worker loaded");
        Ok(StarHalf(worker))
    }

    fn finish(
        job: &LassoSettings,
        half: LassoScheduling,
        _run: &FinishedRun,
    ) -> Result<(), StradsError> {
        tracing::info!(objective = half.metrics().final_objective, "lasso finished");
        if let Some(dir) = &job.out_dir {
            half.outcome().write(dir, job)?;
            tracing::info!(dir = %dir.display(), "wrote coefficients.tsv and metrics.json");
        }
        Ok(())
    }
}

/// Runs a job with both halves in this thread and no actors, in exactly the message order
/// of the cluster run: the reference the distributed runs must reproduce bit for bit.
pub fn run_without_actors(
    job: &LassoSettings,
    workers: usize,
) -> Result<LassoOutcome, StradsError> {
    let (scheduler, _) = crate::kit::run_serial::<LassoApp>(job, workers, Delivery::Late)?;
    Ok(scheduler.outcome())
}

/// Registers the Lasso roles: the worker, scheduler 0 (`strads-lasso-scheduler`) and the
/// further scheduler roles of a job with several schedulers ([`multi::scheduler_role_name`]).
pub fn register(cluster: Cluster) -> Cluster {
    let cluster = (0..multi::MAX_SCHEDULERS).fold(cluster, |c, index| {
        c.role(&multi::scheduler_role_name(index), move |ctx| {
            multi::scheduler_entry(ctx, index)
        })
    });
    cluster
        .app_section_checked::<LassoSettings, _>(
            LassoApp::SECTION,
            <LassoSettings as StradsSettings>::validate,
        )
        .role(WORKER_ROLE, worker_entry)
}

/// The worker role: the scheduled Lasso's row-holding worker or, with `solver =
/// "gauss-seidel"`, a column-holding one ([`gs`]).
async fn worker_entry(ctx: petrel_actors::NodeContext) -> Result<(), StradsError> {
    let job: LassoSettings = ctx.settings.app(LassoApp::SECTION)?;
    check_membership(&ctx, &job, WORKER_ROLE)?;
    solver_role::<gs::LassoGsApp, LassoApp>(ctx, &job, false).await
}

/// Whether `job` handles joins and leaves of its workers: the scheduled solver with
/// `balance = "dynamic"` and one scheduler, whose deal rounds re-deal the rows over the
/// workers of the moment.
pub fn supports_membership_changes(job: &LassoSettings) -> bool {
    job.resolved_solver() == LassoSolver::Scheduled
        && job.balance == Balance::Dynamic
        && job.schedulers <= 1
}

/// Refuses a cluster whose members may change unless the job handles it.
pub(crate) fn check_membership(
    ctx: &petrel_actors::NodeContext,
    job: &LassoSettings,
    role: &str,
) -> Result<(), StradsError> {
    match ctx.settings.allows_membership_changes() && !supports_membership_changes(job) {
        true => Err(StradsError::FixedMembership {
            role: role.to_string(),
        }),
        false => Ok(()),
    }
}

/// The scheduler's (`scheduler`) or a worker's role of job `G` under the Gauss-Seidel
/// solver, else of job `S` (Lasso and logistic regression).
pub(crate) async fn solver_role<G: StradsJob, S: StradsJob>(
    ctx: petrel_actors::NodeContext,
    job: &LassoSettings,
    scheduler: bool,
) -> Result<(), StradsError> {
    let gauss_seidel = job.resolved_solver() == LassoSolver::GaussSeidel;
    match (gauss_seidel, scheduler) {
        (true, true) => crate::kit::scheduler_role::<G>(ctx).await,
        (true, false) => crate::kit::worker_role::<G>(ctx).await,
        (false, true) => crate::kit::scheduler_role::<S>(ctx).await,
        (false, false) => crate::kit::worker_role::<S>(ctx).await,
    }
}

#[cfg(test)]
pub(crate) mod tests;
