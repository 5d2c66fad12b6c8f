//! Column-holding Gauss-Seidel for an L1-regularised margin loss (logistic regression, the
//! squared-hinge SVM: [`MarginLoss`]), sans-I/O: the decision logic of the logistic job's
//! `solver = "gauss-seidel"` (`apps::logistic::gs` runs it, `loss` picks the loss). One
//! worker core and one combination serve every loss, monomorphised.
//!
//! Each worker holds a contiguous column range of about equal non-zeros (the Lasso's cut),
//! all rows, the labels and the margins `m = X b` (f64). In a full round every worker runs,
//! from the same start, the baseline's full sweep of its columns and, unless that settled
//! it, the baseline's active phase ([`CyclicMargin::full_then_active`]), and answers with
//! its new values and margin delta `u_p`. With several workers every baseline sweep
//! becomes a round: a full round (every block's full sweep), then active rounds (one sweep
//! of each block's non-zeros) until one lowers the objective by at most a tenth of the
//! tolerance, then the next full round. Combining a sweep at a time settles the coupling
//! between blocks as the baseline does a coordinate at a time (a block's own active phase
//! between combinations would run ahead and be partly undone).
//!
//! **Why the combination converges.** Worker `p` alone lowers the objective:
//! `Delta_p = F(b + d_p) - F(b) <= 0`. The loss is a sum over rows of convex functions of
//! one margin each, so with `omega` the most workers whose `u_p` touch one row, each row's
//! margin under `b + t sum_p d_p`, `t = 1 / omega`, is a convex combination of `m_i` and
//! the `m_i + u_{p,i}`; with the L1 term convex per coordinate, `F(b + sum_p d_p / omega) -
//! F(b) <= (1 / omega) sum_p Delta_p <= 0`. The scheduler holds the labels and margins, so
//! it evaluates the objective along `t` exactly ([`combined_objective`]) and takes `1`
//! where the objective still falls there, else the best of `1 / omega` and a
//! golden-section search on `[0, 1]` ([`combination_step`]): never worse than the
//! safeguard, so every round lowers `F` by at least `(1 / W) sum_p |Delta_p|`. A full
//! round whose blocks' relative decreases sum to at most the tolerance ends the run (the
//! baseline's stop rule, summed over blocks). With one worker `t = 1`, every round is
//! full, and the run is the baseline's, update for update.

use super::super::StradsModelError;
use super::super::baseline::{CdStop, CyclicMargin, LogisticPhase};
use super::super::gauss_seidel::RowVector;
use super::super::loss::MarginLoss;
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// What every worker is asked to do in a round: a full sweep and the active phase from the
/// state the scheduler describes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticSweepOrder {
    /// A full sweep first; `false`: active sweeps only (several workers, between full
    /// sweeps).
    pub full: bool,
    /// At most this many sweeps of the block's non-zeros (after the full sweep, unless it
    /// settled the block): the baseline's active phase ([`crate::core::baseline::ACTIVE_SWEEPS`]) with one
    /// worker; with several, none in a full round and one in an active round.
    pub active_sweeps: u32,
    /// The objective of the round's start state.
    pub objective: f64,
    /// `||b||_1` of the whole model at the start.
    pub l1: f64,
    /// Relative decrease of a full sweep at or below which a block has settled.
    pub tolerance: f64,
    /// Stop the active phase once the objective is at or below this.
    pub target: Option<f64>,
}

/// A worker's answer to a [`LogisticSweepOrder`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogisticSwept {
    /// The coordinates that changed (the design's numbering).
    #[serde(with = "petrel_messages::tensor::u32_bytes")]
    pub changed: Vec<u32>,
    /// Their new values (before the combination).
    #[serde(with = "petrel_messages::tensor::f64_bytes")]
    pub values: Vec<f64>,
    /// The margin delta `u_p` (several workers only: one worker's sweep commits as it is).
    pub margin_delta: Option<RowVector>,
    /// The worker's own trajectory: objective after its full sweep, the sweep's decrease,
    /// whether it settled, its active sweeps, its objective at the end.
    pub phase: LogisticPhase,
    /// The worker's coordinate updates so far.
    pub updates: u64,
    /// Rows its margins classify right (the whole model's with one worker).
    pub correct: u64,
}

/// Worker half: a [`CyclicMargin`] over its block of columns and every row.
pub struct MarginGsWorkerCore<L> {
    cd: CyclicMargin<L>,
    /// The design's number of the block's first column.
    first: usize,
    /// Other workers sweep other blocks: the round's result is combined at the commit.
    shared: bool,
    /// The round's start margins (several workers) until its commit.
    start: Option<Vec<f64>>,
    /// The block's coordinates the round's sweep moved: `(coordinate, start, swept)`.
    moved: Vec<(usize, f64, f64)>,
}

impl<L: MarginLoss> MarginGsWorkerCore<L> {
    /// The worker of the columns `x` (every row), the first being the design's `first`;
    /// `shared`: other workers hold other columns.
    pub fn new(
        x: SparseColumns,
        labels: &[f32],
        lambda: f32,
        first: usize,
        shared: bool,
    ) -> Result<Self, StradsModelError> {
        Ok(MarginGsWorkerCore {
            cd: CyclicMargin::owning(x, labels, lambda)?,
            first,
            shared,
            start: None,
            moved: Vec::new(),
        })
    }
}

/// A Gauss-Seidel worker core of any loss behind one type: the app picks the loss when it
/// starts (`Box<dyn SweepWorker>`, one dispatch a round; every sweep inside is
/// monomorphised).
pub trait SweepWorker: Send {
    /// Runs the round: the full sweep and the active phase of the block.
    fn sweep(&mut self, order: &LogisticSweepOrder) -> Result<LogisticSwept, StradsModelError>;
    /// Commits the round: with one worker the sweep as it is (`t = 1`, no delta); with
    /// several, `b = b_start + t (b_swept - b_start)` on the changed coordinates and
    /// `m = m_start + t U`, `U` the sum of every worker's margin delta (what the scheduler
    /// computes, the same arithmetic).
    fn commit(&mut self, t: f64, combined: Option<&RowVector>) -> Result<(), StradsModelError>;
    /// The block's coefficients, margins and updates (between rounds).
    fn snapshot(&self) -> Result<(Vec<f64>, Vec<f64>, u64), StradsModelError>;
    /// Continues from a [`Self::snapshot`].
    fn restore(&mut self, state: (Vec<f64>, Vec<f64>, u64)) -> Result<(), StradsModelError>;
}

impl<L: MarginLoss> SweepWorker for MarginGsWorkerCore<L> {
    fn sweep(&mut self, order: &LogisticSweepOrder) -> Result<LogisticSwept, StradsModelError> {
        if !(order.objective.is_finite() && order.l1.is_finite() && order.tolerance >= 0.0) {
            return Err(StradsModelError::protocol(format!(
                "a sweep order with objective {}, l1 {}, tolerance {}",
                order.objective, order.l1, order.tolerance
            )));
        }
        if self.start.is_some() {
            return Err(StradsModelError::protocol(
                "a sweep order before the previous round's commit",
            ));
        }
        // With one worker the scheduler's l1 is this block's, bit for bit: no other term.
        let others = if self.shared {
            (order.l1 - self.cd.l1()).max(0.0)
        } else {
            0.0
        };
        self.cd.set_l1_others(others);
        self.cd.record_moves();
        let start_margins = self.shared.then(|| self.cd.margins().to_vec());
        let stop = CdStop {
            tolerance: order.tolerance,
            max_sweeps: 1,
            target_objective: order.target,
            active_set: true,
        };
        let phase = if order.full {
            let max_active = order.active_sweeps as usize;
            self.cd.full_then_active(&stop, order.objective, max_active)
        } else {
            let (active_sweeps, objective) =
                self.cd
                    .active_phase(&stop, order.objective, order.active_sweeps as usize);
            LogisticPhase {
                after_full: order.objective,
                gap: 0.0,
                converged: false,
                active_sweeps,
                objective,
            }
        };
        self.moved = self.cd.moved_since();
        let margin_delta = start_margins.as_ref().map(|start| {
            RowVector::from_dense(
                self.cd
                    .margins()
                    .iter()
                    .zip(start)
                    .map(|(m, s)| m - s)
                    .collect(),
            )
        });
        let swept = LogisticSwept {
            changed: self
                .moved
                .iter()
                .map(|&(j, _, _)| (self.first + j) as u32)
                .collect(),
            values: self.moved.iter().map(|&(_, _, now)| now).collect(),
            margin_delta,
            phase,
            updates: self.cd.updates(),
            correct: self.cd.correct() as u64,
        };
        self.start = Some(start_margins.unwrap_or_default());
        Ok(swept)
    }

    fn commit(&mut self, t: f64, combined: Option<&RowVector>) -> Result<(), StradsModelError> {
        let start_margins = self.start.take().ok_or_else(|| {
            StradsModelError::protocol("a commit without a swept round to commit")
        })?;
        if !self.shared {
            if t != 1.0 || combined.is_some() {
                return Err(StradsModelError::protocol(format!(
                    "a lone worker's sweep commits as it is, not with step {t} and a combined delta"
                )));
            }
            return Ok(());
        }
        let combined = combined.ok_or_else(|| {
            StradsModelError::protocol("a commit of several workers' sweeps without their sum")
        })?;
        if !(0.0..=1.0).contains(&t) {
            return Err(StradsModelError::protocol(format!(
                "step {t} is not within [0, 1]"
            )));
        }
        let values: Vec<(usize, f64)> = self
            .moved
            .iter()
            .map(|&(j, start, swept)| (j, step_value(start, swept, t)))
            .collect();
        self.cd.set_coefficients(&values)?;
        let mut margins = start_margins;
        combined.add_scaled_to(t, &mut margins)?;
        self.cd.margins_mut().copy_from_slice(&margins);
        Ok(())
    }

    fn snapshot(&self) -> Result<(Vec<f64>, Vec<f64>, u64), StradsModelError> {
        super::super::check_drained(self.start.is_some())?;
        Ok((
            self.cd.coefficients_f64().to_vec(),
            self.cd.margins().to_vec(),
            self.cd.updates(),
        ))
    }

    fn restore(
        &mut self,
        (coefficients, margins, updates): (Vec<f64>, Vec<f64>, u64),
    ) -> Result<(), StradsModelError> {
        self.start = None;
        self.cd.set_state(coefficients, margins)?;
        self.cd.set_updates(updates);
        Ok(())
    }
}

/// A coordinate's value after a combined step `t` from `start` towards `swept` (worker and
/// scheduler compute it the same way, so they agree bit for bit).
#[inline]
pub fn step_value(start: f64, swept: f64, t: f64) -> f64 {
    if t == 1.0 {
        swept
    } else {
        start + t * (swept - start)
    }
}

/// The combination's inputs at the scheduler: labels (+-1), the start margins, the sum `U`
/// of the workers' margin deltas, and the changed coordinates as `(start, swept)` values.
pub struct Combination<'a> {
    /// Labels, +-1.
    pub labels: &'a [f64],
    /// The start margins.
    pub margins: &'a [f64],
    /// `U = sum_p u_p`.
    pub sum: &'a [f64],
    /// `(start, swept)` of every changed coordinate.
    pub moved: &'a [(f64, f64)],
    /// `lambda`.
    pub lambda: f64,
    /// `||b||_1` at the start.
    pub l1: f64,
}

/// The objective and `||b||_1` after step `t`: `sum_i loss(y_i, m_i + t U_i)
/// + lambda ||b(t)||_1`, exactly (the margins the commit will produce).
pub fn combined_objective<L: MarginLoss>(c: &Combination<'_>, t: f64) -> (f64, f64) {
    let loss: f64 = c
        .labels
        .iter()
        .zip(c.margins.iter().zip(c.sum))
        .map(|(&y, (&m, &u))| L::row_loss(y, m + t * u))
        .sum();
    let l1 = c.l1
        + c.moved
            .iter()
            .map(|&(start, swept)| step_value(start, swept, t).abs() - start.abs())
            .sum::<f64>();
    (loss + c.lambda * l1, l1)
}

/// The largest number of workers whose margin deltas touch one row.
pub fn overlap(deltas: &[&RowVector], n_rows: usize) -> Result<usize, StradsModelError> {
    let mut count = vec![0u32; n_rows];
    for d in deltas {
        match d {
            RowVector::Dense(v) => {
                super::super::check_sizes(&[("rows of a margin delta", v.len(), n_rows)])?;
                v.iter()
                    .zip(&mut count)
                    .for_each(|(x, c)| *c += u32::from(*x != 0.0));
            }
            RowVector::Sparse { rows, values } => {
                for (&i, x) in rows.iter().zip(values) {
                    let c = count.get_mut(i as usize).ok_or_else(|| {
                        StradsModelError::protocol(format!("margin delta row {i} of {n_rows}"))
                    })?;
                    *c += u32::from(*x != 0.0);
                }
            }
        }
    }
    Ok(count.into_iter().max().unwrap_or(0) as usize)
}

/// [`combined_objective`] at `t = 1` and its left derivative there, in one pass over the
/// rows: the smooth part's derivative plus the L1 term's left derivative (at a coordinate
/// the step sets to zero, `-|d_j|`). A derivative of at most 0 means the convex objective
/// falls all the way to `t = 1`.
pub fn objective_and_slope_at_one<L: MarginLoss>(c: &Combination<'_>) -> (f64, f64, f64) {
    let (mut loss, mut smooth) = (0.0f64, 0.0f64);
    for (&y, (&m, &u)) in c.labels.iter().zip(c.margins.iter().zip(c.sum)) {
        let (row, slope) = L::row_loss_slope(y, m + 1.0 * u);
        loss += row;
        smooth += u * slope;
    }
    let (mut l1, mut l1_slope) = (c.l1, 0.0f64);
    for &(start, swept) in c.moved {
        l1 += swept.abs() - start.abs();
        let d = swept - start;
        l1_slope += if swept == 0.0 {
            -d.abs()
        } else {
            d * swept.signum()
        };
    }
    (loss + c.lambda * l1, l1, smooth + c.lambda * l1_slope)
}

/// The combined step `t` and the objective and `||b||_1` it gives. `t = 1` when the
/// objective still falls there ([`objective_and_slope_at_one`]: then 1 is the minimum on
/// `[0, 1]`, the objective being convex; one pass over the rows, the usual case) or when
/// no row is shared (`omega() <= 1`, asked only then); otherwise the lowest of
/// `1 / omega` (the safeguard) and a golden-section search on `[0, 1]`.
pub fn combination_step<L: MarginLoss>(
    c: &Combination<'_>,
    omega: impl FnOnce() -> usize,
) -> (f64, f64, f64) {
    let (f, l1, slope) = objective_and_slope_at_one::<L>(c);
    let at_one = (f, l1);
    if slope <= 0.0 {
        return (1.0, f, l1);
    }
    let omega = omega();
    if omega <= 1 {
        return (1.0, f, l1);
    }
    let mut best = (1.0, at_one);
    let consider = |t: f64, best: &mut (f64, (f64, f64))| {
        let f = combined_objective::<L>(c, t);
        if f.0 < best.1.0 {
            *best = (t, f);
        }
        f.0
    };
    consider(1.0 / omega as f64, &mut best);
    // Golden section: the objective is convex in t, so the bracket keeps its minimum
    // (16 steps: within 0.001 of it).
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    let (mut a, mut b) = (hi - ratio * (hi - lo), lo + ratio * (hi - lo));
    let (mut fa, mut fb) = (consider(a, &mut best), consider(b, &mut best));
    for _ in 0..16 {
        if fa <= fb {
            hi = b;
            (b, fb) = (a, fa);
            a = hi - ratio * (hi - lo);
            fa = consider(a, &mut best);
        } else {
            lo = a;
            (a, fa) = (b, fb);
            b = lo + ratio * (hi - lo);
            fb = consider(b, &mut best);
        }
    }
    (best.0, best.1.0, best.1.1)
}

#[cfg(test)]
mod tests;
