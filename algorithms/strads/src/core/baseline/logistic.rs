//! The classifiers' half of the yardstick: [`CyclicMargin`], the single-threaded cyclic
//! coordinate descent for an L1-regularised margin loss (logistic regression, the
//! squared-hinge SVM: [`MarginLoss`]), and its full sweep and active phase, which the
//! Gauss-Seidel workers run on their blocks ([`crate::core::logistic::gauss_seidel`]).

use super::super::StradsModelError;
use super::super::gauss_seidel::PackedColumns;
use super::super::loss::{MarginLoss, OnLabels, cd_step};
use super::{CdStop, check_shape};
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// The most active-set sweeps after one full sweep (the baseline's active phase).
pub const ACTIVE_SWEEPS: usize = crate::core::tuning::MAX_ACTIVE_PASSES as usize;

/// Cyclic coordinate descent for `min sum_i loss(y_i, x_i^T b) + lambda ||b||_1` with the
/// margin loss `L` (labels `> 0` are +1, others -1). Each coordinate takes the proximal
/// Newton step with the exact (generalised) second derivative and keeps it if it lowers the
/// objective by at least 1% of the model's predicted decrease (one extra pass over the
/// column); otherwise it takes the step under the curvature bound
/// `L::CURVATURE_BOUND ||x_j||^2` (for the logistic loss `||x_j||^2 / 4`, what STRADS'
/// logistic pull uses), which never increases the objective. So every update is a descent
/// step, and most are Newton's ([`cd_step`]).
///
/// The same solver sweeps a Gauss-Seidel worker's block of columns
/// ([`crate::core::logistic::gauss_seidel`]): it then owns its block ([`Self::owning`]),
/// and the objective counts the other blocks' `||b||_1` ([`Self::set_l1_others`]), so
/// one worker's round is the baseline's full sweep and active phase, step for step.
#[derive(Debug, Clone)]
pub struct CyclicMargin<L> {
    x: SparseColumns,
    labels: Vec<f64>,
    lambda: f64,
    bound: Vec<f64>,
    coefficients: Vec<f64>,
    margins: Vec<f64>,
    /// `||b||_1` of the coordinates this solver does not hold (0 for the baseline).
    l1_others: f64,
    /// While recording: `(coordinate, value before)` of every step that moved one.
    journal: Option<Vec<(usize, f64)>>,
    /// The non-zeros after the last full sweep, packed by the first active phase after it
    /// (every coordinate an active sweep moves is in it, so every non-zero is, until the
    /// next full sweep or a new state).
    active: Option<PackedColumns>,
    updates: u64,
    loss: L,
}

/// What one full sweep and the active phase after it did ([`CyclicMargin::full_then_active`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogisticPhase {
    /// The objective after the full sweep.
    pub after_full: f64,
    /// The full sweep's relative objective decrease.
    pub gap: f64,
    /// The decrease met the tolerance: no active phase ran.
    pub converged: bool,
    /// Active-set sweeps run.
    pub active_sweeps: usize,
    /// The objective at the end.
    pub objective: f64,
}

impl<L: MarginLoss> CyclicMargin<L> {
    /// A solver that owns its columns (a Gauss-Seidel worker's block, all rows), at
    /// `b = 0`.
    pub fn owning(x: SparseColumns, labels: &[f32], lambda: f32) -> Result<Self, StradsModelError> {
        check_shape(&x, labels.len(), "labels")?;
        if !(lambda >= 0.0 && lambda.is_finite()) {
            return Err(StradsModelError::InvalidConfig(format!(
                "lambda {lambda} must be finite and >= 0"
            )));
        }
        Ok(CyclicMargin {
            bound: x
                .column_sq_norms()
                .into_iter()
                .map(|s| L::CURVATURE_BOUND * s)
                .collect(),
            labels: labels
                .iter()
                .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
                .collect(),
            coefficients: vec![0.0; x.n_columns()],
            margins: vec![0.0; labels.len()],
            x,
            lambda: f64::from(lambda),
            l1_others: 0.0,
            journal: None,
            active: None,
            updates: 0,
            loss: L::default(),
        })
    }

    /// One coordinate step on `j`; returns `new - old`.
    pub fn update(&mut self, j: usize) -> f64 {
        self.updates += 1;
        let (x, bound, mut steps) = self.parts();
        let (rows, vals) = x.column(j);
        steps.step(j, rows, vals, bound[j])
    }

    /// [`Self::update`] of the active set's slot `s` (its column and curvature bound packed
    /// in `active`, as the Lasso's active passes walk theirs).
    fn update_packed(&mut self, active: &PackedColumns, s: usize) -> f64 {
        self.updates += 1;
        let (j, rows, vals, bound) = active.slot(s);
        self.parts().2.step(j, rows, vals, bound)
    }

    /// The columns and bounds beside what a step changes (borrowed apart).
    fn parts(&mut self) -> (&SparseColumns, &[f64], Steps<'_, L>) {
        (
            &self.x,
            &self.bound,
            Steps {
                labels: &self.labels,
                margins: &mut self.margins,
                coefficients: &mut self.coefficients,
                journal: &mut self.journal,
                lambda: self.lambda,
                loss: self.loss,
            },
        )
    }

    /// Loss plus `lambda ||b||_1` (O(rows + features)), the other blocks' `||b||_1`
    /// included.
    pub fn objective(&self) -> f64 {
        self.objective_with_l1(self.l1())
    }

    /// [`Self::objective`] given this block's `||b||_1`.
    fn objective_with_l1(&self, l1: f64) -> f64 {
        let loss: f64 = self
            .labels
            .iter()
            .zip(&self.margins)
            .map(|(&y, &m)| L::row_loss(y, m))
            .sum();
        loss + self.lambda * (self.l1_others + l1)
    }

    /// `||b||_1` of the coordinates held.
    pub fn l1(&self) -> f64 {
        self.coefficients.iter().map(|b| b.abs()).sum::<f64>()
    }

    /// Coordinate updates so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Training accuracy (margin sign equals the label).
    pub fn training_accuracy(&self) -> f64 {
        self.correct() as f64 / self.labels.len().max(1) as f64
    }

    /// Rows whose margin has the label's sign.
    pub fn correct(&self) -> usize {
        super::super::logistic::correct_signs(&self.labels, &self.margins)
    }

    /// The coefficients (as f32).
    pub fn coefficients(&self) -> Vec<f32> {
        self.coefficients.iter().map(|&b| b as f32).collect()
    }

    /// The coefficients as the solver keeps them (f64), without a copy.
    pub fn coefficients_f64(&self) -> &[f64] {
        &self.coefficients
    }

    /// One full sweep from a state of objective `objective`; unless it lowered the
    /// objective by at most `stop.tolerance` (relative), the active phase follows (with
    /// `stop.active_set`): at most `max_active` sweeps of the non-zero coordinates, until
    /// one lowers the objective by at most a tenth of the tolerance or the target is met
    /// ([`Self::active_phase`]).
    pub fn full_then_active(
        &mut self,
        stop: &CdStop,
        objective: f64,
        max_active: usize,
    ) -> LogisticPhase {
        let d = self.x.n_columns();
        self.active = None;
        for j in 0..d {
            self.update(j);
        }
        let after_full = self.objective();
        let gap = (objective - after_full) / after_full.abs().max(f64::MIN_POSITIVE);
        let mut phase = LogisticPhase {
            after_full,
            gap,
            converged: gap <= stop.tolerance,
            active_sweeps: 0,
            objective: after_full,
        };
        // No active sweep: nothing to pack yet (a commit may still change the non-zeros).
        if phase.converged || !stop.active_set || max_active == 0 {
            return phase;
        }
        (phase.active_sweeps, phase.objective) = self.active_phase(stop, after_full, max_active);
        phase
    }

    /// Sweeps of the non-zero coordinates from a state of objective `objective` until one
    /// lowers the objective by at most a tenth of `stop.tolerance` (relative), the target
    /// is met, or `max_sweeps` sweeps ran; returns the sweeps and the objective.
    pub fn active_phase(
        &mut self,
        stop: &CdStop,
        objective: f64,
        max_sweeps: usize,
    ) -> (usize, f64) {
        let reached = |f: f64| stop.target_objective.is_some_and(|t| f <= t);
        // The non-zeros packed once after a full sweep: an active sweep moves only them,
        // so later phases before the next full sweep start from the same pack.
        let packed = match self.active.take() {
            Some(packed) => packed,
            None => {
                let coefficients = &self.coefficients;
                PackedColumns::of(
                    &self.x,
                    &self.bound,
                    (0..self.x.n_columns()).filter(|&j| coefficients[j] != 0.0),
                )
            }
        };
        let mut slots: Vec<usize> = (0..packed.len())
            .filter(|&s| self.coefficients[packed.column_of(s)] != 0.0)
            .collect();
        let mut previous = objective;
        let mut sweeps = 0;
        for _ in 0..max_sweeps {
            for &s in &slots {
                self.update_packed(&packed, s);
            }
            sweeps += 1;
            // Every non-zero is packed, in increasing order: the same sum as `l1`'s.
            let l1: f64 = (0..packed.len())
                .map(|s| self.coefficients[packed.column_of(s)].abs())
                .sum();
            let now = self.objective_with_l1(l1);
            let settled = previous - now <= 0.1 * stop.tolerance * now.abs();
            previous = now;
            if settled || reached(now) {
                break;
            }
            // Shrinking, as in the Lasso's active passes: a coordinate a pass left at
            // zero waits for the next full sweep, which checks every one.
            slots.retain(|&s| self.coefficients[packed.column_of(s)] != 0.0);
        }
        self.active = Some(packed);
        (sweeps, previous)
    }
}

impl<L: MarginLoss> CyclicMargin<L> {
    /// The margins `X b` (every row; with blocks, of the whole model).
    pub fn margins(&self) -> &[f64] {
        &self.margins
    }

    /// Counts `l1` as the other blocks' `||b||_1` in [`Self::objective`].
    pub fn set_l1_others(&mut self, l1: f64) {
        self.l1_others = l1;
    }

    /// Replaces the coefficients and the margins (a commit or a checkpoint); refuses other
    /// lengths.
    pub fn set_state(
        &mut self,
        coefficients: Vec<f64>,
        margins: Vec<f64>,
    ) -> Result<(), StradsModelError> {
        super::super::check_sizes(&[
            ("coefficients", coefficients.len(), self.coefficients.len()),
            ("margins", margins.len(), self.margins.len()),
        ])?;
        self.coefficients = coefficients;
        self.margins = margins;
        self.active = None;
        Ok(())
    }

    /// Restores the update count (a checkpoint).
    pub fn set_updates(&mut self, updates: u64) {
        self.updates = updates;
    }

    /// Starts recording the coordinates the steps move ([`Self::moved_since`]).
    pub fn record_moves(&mut self) {
        self.journal = Some(Vec::new());
    }

    /// Stops recording: every coordinate whose value differs from when recording started,
    /// as `(coordinate, value then, value now)`, in increasing order.
    pub fn moved_since(&mut self) -> Vec<(usize, f64, f64)> {
        let mut journal = self.journal.take().unwrap_or_default();
        // A stable sort keeps each coordinate's first entry, its value at the start, first.
        journal.sort_by_key(|&(j, _)| j);
        journal.dedup_by_key(|&mut (j, _)| j);
        journal
            .into_iter()
            .map(|(j, then)| (j, then, self.coefficients[j]))
            .filter(|&(_, then, now)| then != now)
            .collect()
    }

    /// Sets the given coordinates (a commit); refuses a coordinate out of range.
    pub fn set_coefficients(&mut self, values: &[(usize, f64)]) -> Result<(), StradsModelError> {
        let d = self.coefficients.len();
        for &(j, v) in values {
            *self.coefficients.get_mut(j).ok_or_else(|| {
                StradsModelError::protocol(format!("coordinate {j} of a block of {d}"))
            })? = v;
        }
        Ok(())
    }

    /// The margins, to replace (a commit).
    pub fn margins_mut(&mut self) -> &mut [f64] {
        &mut self.margins
    }
}

/// What a [`CyclicMargin`] step changes.
struct Steps<'s, L> {
    labels: &'s [f64],
    margins: &'s mut [f64],
    coefficients: &'s mut [f64],
    journal: &'s mut Option<Vec<(usize, f64)>>,
    lambda: f64,
    loss: L,
}

impl<L: MarginLoss> Steps<'_, L> {
    /// The step on coordinate `j` (column `rows`, `vals`, curvature bound `bound`),
    /// journalled when it moves while recording.
    #[inline]
    fn step(&mut self, j: usize, rows: &[u32], vals: &[f32], bound: f64) -> f64 {
        let before = self.coefficients[j];
        let mut loss = OnLabels {
            labels: self.labels,
            loss: self.loss,
        };
        let delta = cd_step(
            &mut loss,
            rows,
            vals,
            bound,
            self.lambda,
            &mut self.coefficients[j],
            self.margins,
        );
        if delta != 0.0
            && let Some(journal) = self.journal
        {
            journal.push((j, before));
        }
        delta
    }
}
