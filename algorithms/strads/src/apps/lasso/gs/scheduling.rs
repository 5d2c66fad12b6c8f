//! The Gauss-Seidel Lasso's scheduler half: the baseline's schedule (full sweeps in chunks,
//! certification, active-set sweeps), the step weights that combine the workers' sweeps,
//! the objective, the stop rules and the metrics, all reading and advancing one `GsState`.

mod pull;

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use super::{GsCommit, GsPartial, GsTask, LassoGsApp, column_ranges_of};
use crate::apps::lasso::config::{DesignShape, LassoSettings, NS_PER_NONZERO};
use crate::apps::lasso::heldout::LinearHeldout;
use crate::apps::lasso::metrics::{LassoMetrics, LassoOutcome};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Schedule, Step, decode_state, encode_state};
use crate::core::gauss_seidel::{Certificate, ChunkGrowth, Coords, SweepOrder, resident_zeros};
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;
use petrel_ml::model::LinearTask;
use serde::{Deserialize, Serialize};

/// The mode name written into `metrics.json`.
pub const GS_MODE: &str = "gauss-seidel";

pub use crate::core::tuning::LASSO_SHARED_ACTIVE_PASSES as SHARED_ACTIVE_PASSES;
use crate::core::tuning::MAX_ACTIVE_PASSES;

/// Where the schedule is (the starting point's certificate needs no round: see
/// [`GsScheduling::new`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
enum Phase {
    /// A full sweep in chunks.
    #[default]
    Full,
    /// The full sweep is done: certify it.
    AfterFull,
    /// Sweeps of the active set (`fresh`: take the set anew).
    Active {
        /// Take the active set anew.
        fresh: bool,
    },
}

/// Everything the scheduler changes while running (what a checkpoint saves).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct GsState {
    coefficients: Vec<f64>,
    phase: Phase,
    /// Per worker: the next local column of the full sweep.
    next: Vec<usize>,
    /// The full-sweep chunk as a multiple of the latency-covering one (several workers,
    /// automatic chunk).
    growth: ChunkGrowth,
    full_sweeps: u64,
    active_passes: u32,
    settle: f64,
    /// `||r||^2` (running; resynced at every certification).
    sq_residual: f64,
    /// `||b||_1` (running; resynced at every certification).
    l1: f64,
    updates: u64,
    rounds: u64,
    /// Updates reflected by the last certification.
    certified_at: Option<u64>,
    stopping: bool,
    done: bool,
    metrics: LassoMetrics,
    /// Per worker: its cumulative compute as of its last answer (the critical path's
    /// per-round figure is the difference).
    #[serde(default)]
    worker_compute_s: Vec<f64>,
}

/// Scheduler half of `solver = "gauss-seidel"`.
pub struct GsScheduling {
    job: LassoSettings,
    lambda: f32,
    n_rows: usize,
    /// Global column range of each worker.
    ranges: Vec<Range<usize>>,
    /// Columns per worker and round in a full sweep.
    chunks: Vec<usize>,
    heldout: Option<LinearHeldout>,
    s: GsState,
    in_flight: VecDeque<(u64, RoundKind)>,
    /// The digest of the data it loaded ([`super::super::config::ColumnShare::digest`]).
    pub(super) data_digest: Option<u64>,
}

/// What the round in flight does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RoundKind {
    Certify,
    Chunk,
    Active,
    /// The certification after a full sweep and the first active-set round (several
    /// workers).
    CertifyActive,
    /// A lone worker's last full-sweep chunk and the certification of the state it left.
    ChunkCertify,
}

impl GsScheduling {
    /// `x` is the full design, `workers` the worker count.
    pub fn new(
        x: &SparseColumns,
        y: &[f32],
        job: &LassoSettings,
        workers: usize,
    ) -> Result<Self, StradsError> {
        crate::core::baseline::check_shape(x, y.len(), "y")?;
        Self::of_design(&DesignShape::of(x), y, job.lambda_max(x, y), job, workers)
    }

    /// [`Self::new`] from what the scheduler needs of the design: its shape (the column
    /// cut and chunks), `y` and `lambda_max` (the start's certificate).
    pub fn of_design(
        shape: &DesignShape,
        y: &[f32],
        lambda_max: f64,
        job: &LassoSettings,
        workers: usize,
    ) -> Result<Self, StradsError> {
        crate::core::check_sizes(&[("targets", y.len(), shape.n_rows)])?;
        let ranges = column_ranges_of(shape, workers)?;
        let chunks = ranges
            .iter()
            .map(|r| chunk_for(shape, r.clone(), workers, job))
            .collect::<Vec<_>>();
        // At b = 0 the largest correlation is lambda_max: the start's certificate comes
        // with the lambda, no round needed.
        let lambda = job.lambda_from_max(lambda_max);
        let heldout = LinearHeldout::of(job, LinearTask::Regression, lambda)?;
        let sq_residual = y.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let metrics = LassoMetrics {
            block_size: chunks.iter().copied().max().unwrap_or(0),
            ..LassoMetrics::at_start(
                GS_MODE.into(),
                lambda,
                (shape.n_rows, shape.n_columns()),
                workers,
                job.target_objective,
            )
        };
        let mut scheduling = GsScheduling {
            job: job.clone(),
            lambda,
            n_rows: shape.n_rows,
            s: GsState {
                coefficients: resident_zeros(shape.n_columns()),
                next: vec![0; workers],
                sq_residual,
                metrics,
                ..GsState::default()
            },
            ranges,
            chunks,
            heldout,
            in_flight: VecDeque::new(),
            data_digest: None,
        };
        // The starting point (b = 0, r = y), certified from what every node knows: what
        // the workers' certificate round would return, without the round.
        let yy = sq_residual;
        let start = Certificate {
            max_abs_corr: lambda_max,
            kkt: (lambda_max - f64::from(lambda)).max(0.0),
            l1: 0.0,
            nonzeros: 0,
            yy,
            yr: yy,
            rr: yy,
        };
        scheduling.record_certificate(0, &start, Duration::ZERO);
        if scheduling.s.stopping {
            scheduling.s.done = true;
        }
        Ok(scheduling)
    }

    /// The job's lambda.
    pub fn lambda(&self) -> f32 {
        self.lambda
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &LassoMetrics {
        &self.s.metrics
    }

    /// The model and metrics as they are now.
    pub fn outcome(&self) -> LassoOutcome {
        LassoOutcome {
            coefficients: self.coefficients_f32(),
            metrics: self.s.metrics.clone(),
        }
    }

    fn coefficients_f32(&self) -> Vec<f32> {
        self.s.coefficients.iter().map(|&b| b as f32).collect()
    }

    fn workers(&self) -> usize {
        self.ranges.len()
    }

    fn objective(&self) -> f64 {
        0.5 * self.s.sq_residual + f64::from(self.lambda) * self.s.l1
    }

    /// With several workers and a target, each worker's share of the decrease the target
    /// still needs: its active passes stop there. Active rounds keep about the sum of the
    /// workers' own decreases, so the round that reaches the target stops close to it (as
    /// the baseline stops at the update that reaches it); if it falls short, the next
    /// round goes on.
    fn share_of_target(&self) -> Option<f64> {
        let target = self.job.target_objective?;
        let missing = self.objective() - target;
        (self.workers() > 1 && missing > 0.0).then(|| missing / self.workers() as f64)
    }

    /// The target is only handed to a lone worker, whose view is the whole objective.
    fn worker_target(&self) -> Option<f64> {
        (self.workers() == 1)
            .then_some(self.job.target_objective)
            .flatten()
    }

    /// Dispatches `plan` as round `round` of kind `kind`.
    fn dispatch(&mut self, round: u64, kind: RoundKind, plan: Plan<GsTask>) -> Step<GsTask> {
        self.in_flight.push_back((round, kind));
        self.s.rounds += 1;
        Step::Run(plan)
    }

    fn certify(&mut self, round: u64) -> Step<GsTask> {
        self.dispatch(round, RoundKind::Certify, Plan::All(GsTask::Certify))
    }

    fn sweep(&mut self, round: u64, kind: RoundKind, orders: Vec<SweepOrder>) -> Step<GsTask> {
        let tasks = orders.into_iter().map(GsTask::Sweep).collect();
        self.dispatch(round, kind, Plan::PerWorker(tasks))
    }

    fn full_sweep_chunk(&mut self, round: u64) -> Step<GsTask> {
        let target = self.worker_target();
        let mut orders = Vec::with_capacity(self.workers());
        for p in 0..self.workers() {
            let n = self.ranges[p].len();
            let start = self.s.next[p].min(n);
            let end = (start + self.chunks[p].saturating_mul(self.chunk_factor())).min(n);
            self.s.next[p] = end;
            orders.push(SweepOrder {
                coords: Coords::Range {
                    start: start as u32,
                    end: end as u32,
                },
                max_passes: 1,
                settle: 0.0,
                target,
                decrease: None,
            });
        }
        if (0..self.workers()).all(|p| self.s.next[p] >= self.ranges[p].len()) {
            self.s.phase = Phase::AfterFull;
            if let [order] = orders.as_slice() {
                // One worker commits its sweep as it is, so it certifies the state it
                // left in the same round: a round less per full sweep.
                let task = GsTask::SweepThenCertify(order.clone());
                return self.dispatch(round, RoundKind::ChunkCertify, Plan::All(task));
            }
        }
        self.sweep(round, RoundKind::Chunk, orders)
    }

    /// The growth factor of the full-sweep chunk: 1 with one worker or a fixed `gs_chunk`.
    fn chunk_factor(&self) -> usize {
        if self.workers() > 1 && self.job.gs_chunk == 0 {
            self.s.growth.factor() as usize
        } else {
            1
        }
    }

    fn active_passes_per_round(&self) -> u32 {
        match self.job.gs_active_passes {
            0 if self.workers() == 1 => MAX_ACTIVE_PASSES,
            0 => SHARED_ACTIVE_PASSES,
            n => n.min(MAX_ACTIVE_PASSES),
        }
    }

    /// Several workers, after a full sweep: the certification and, in the same round, a
    /// first sweep of the active set taken afresh (at most the round's passes; its settle
    /// threshold needs the certificate's gap, so this one passes until nothing moves).
    fn certify_then_sweep(&mut self, round: u64) -> Step<GsTask> {
        let order = SweepOrder {
            coords: Coords::Active { fresh: true },
            max_passes: self.active_passes_per_round(),
            settle: 0.0,
            target: None,
            decrease: self.share_of_target(),
        };
        let task = GsTask::CertifyThenSweep(order);
        self.dispatch(round, RoundKind::CertifyActive, Plan::All(task))
    }

    fn active_sweep(&mut self, round: u64, fresh: bool) -> Step<GsTask> {
        let order = SweepOrder {
            coords: Coords::Active { fresh },
            max_passes: self.active_passes_per_round(),
            settle: self.s.settle,
            target: self.worker_target(),
            decrease: self.share_of_target(),
        };
        self.s.phase = Phase::Active { fresh: false };
        self.sweep(round, RoundKind::Active, vec![order; self.workers()])
    }

    fn start_full_sweep(&mut self) {
        self.s.phase = Phase::Full;
        self.s.next.iter_mut().for_each(|n| *n = 0);
        self.s.active_passes = 0;
    }

    fn stop(&mut self) {
        self.s.stopping = true;
    }

    /// The largest compute any worker spent on this round (since its previous answer;
    /// partials come in worker order), remembering each worker's cumulative figure.
    fn slowest_round_compute(&mut self, partials: &[GsPartial]) -> f64 {
        self.s.worker_compute_s.resize(partials.len(), 0.0);
        partials
            .iter()
            .zip(&mut self.s.worker_compute_s)
            .map(|(p, before)| {
                let busy = p.busy();
                let now = busy.push_s + busy.commit_s + busy.eval_s;
                let spent = (now - *before).max(0.0);
                *before = now;
                spent
            })
            .fold(0.0, f64::max)
    }

    fn reached_target(&mut self, objective: f64, elapsed: Duration) {
        let (target, updates, at) = (self.job.target_objective, self.s.updates, elapsed);
        if self
            .s
            .metrics
            .reach_target(target, objective, updates, at.as_secs_f64())
        {
            self.stop();
        }
    }
}

/// Columns worker `range` sweeps per round in a full sweep: `gs_chunk`, else (one worker)
/// the whole range, else enough non-zeros to cover the assumed round latency (the base that
/// [`ChunkGrowth`] multiplies).
fn chunk_for(
    shape: &DesignShape,
    range: Range<usize>,
    workers: usize,
    job: &LassoSettings,
) -> usize {
    let n = range.len().max(1);
    if job.gs_chunk > 0 {
        return job.gs_chunk.min(n);
    }
    if workers == 1 {
        return n;
    }
    let nnz = shape.nnz(range.clone()) as f64;
    let per_column = (nnz / n as f64).max(1.0);
    let columns = job.round_latency_ms * 1e6 / (NS_PER_NONZERO * per_column);
    (columns.ceil() as usize).clamp(1, n)
}

impl Schedule<LassoGsApp> for GsScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<GsTask> {
        if in_flight > 0 {
            return Step::Wait;
        }
        if self.s.done {
            return Step::Done;
        }
        if !self.s.stopping && self.job.max_rounds > 0 && self.s.rounds >= self.job.max_rounds {
            self.stop();
        }
        if self.s.stopping {
            if self.s.certified_at == Some(self.s.updates) {
                self.s.done = true;
                return Step::Done;
            }
            return self.certify(round);
        }
        match self.s.phase {
            Phase::AfterFull if self.workers() > 1 => self.certify_then_sweep(round),
            Phase::AfterFull => self.certify(round),
            Phase::Full => self.full_sweep_chunk(round),
            Phase::Active { fresh } => self.active_sweep(round, fresh),
        }
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<GsPartial>,
        elapsed: Duration,
    ) -> Result<GsCommit, StradsModelError> {
        let kind = crate::core::pop_in_flight(&mut self.in_flight, round)?;
        self.s.metrics.rounds = round + 1;
        self.s.metrics.elapsed_s = elapsed.as_secs_f64();
        let slowest_compute = self.slowest_round_compute(&partials);
        let started = Instant::now();
        let commit = match kind {
            RoundKind::Certify => self.pull_certify(round, partials, elapsed)?,
            RoundKind::CertifyActive => self.pull_certify_then_sweep(round, partials, elapsed)?,
            RoundKind::ChunkCertify => self.pull_sweep_then_certify(round, partials, elapsed)?,
            kind => self.pull_sweep(round, kind, partials, elapsed)?,
        };
        self.s.metrics.updates = self.s.updates;
        let metrics = &mut self.s.metrics;
        metrics.profile.critical_compute_s += slowest_compute + started.elapsed().as_secs_f64();
        if metrics.target_s.is_some() && metrics.profile.critical_compute_to_target_s.is_none() {
            metrics.profile.critical_compute_to_target_s = Some(metrics.profile.critical_compute_s);
        }
        self.s.metrics.profile.finish(elapsed.as_secs_f64());
        Ok(commit)
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        crate::core::check_drained(!self.in_flight.is_empty())?;
        if self.s.done {
            return Ok(None);
        }
        encode_state(&self.s)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let s: GsState = decode_state(state)?;
        crate::core::check_sizes(&[
            (
                "coefficients",
                s.coefficients.len(),
                self.s.coefficients.len(),
            ),
            ("workers", s.next.len(), self.workers()),
        ])?;
        self.s = s;
        self.in_flight.clear();
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }
}
