//! The yardstick: tight single-threaded cyclic coordinate descent for Lasso and for L1
//! logistic regression over column-compressed (CSC) data, with no scheduler, no actors and
//! no messages. `petrel train lasso|logistic --transport none` runs it, and
//! `petrel bench lasso-scale` compares STRADS against it.
//!
//! What makes it tight (the glmnet recipe):
//! - **Maintained residual** (`r = y - X b`, Lasso) or margins (`m = X b`, logistic) in
//!   f64, so one coordinate update costs `O(nnz(x_j))`: the partial
//!   `z_j = x_j^T r + ||x_j||^2 b_j` is one gather, and the change is one scatter.
//! - **Precomputed column norms** (`||x_j||^2`), computed once.
//! - **Covariance-free updates**: no Gram matrix, nothing quadratic in the features.
//! - **Active set** (exact): after every full sweep, sweep only the non-zero coordinates
//!   until they settle, then go back to a full sweep. The run only stops after a full sweep
//!   whose duality gap (Lasso) or objective decrease (logistic) meets the tolerance, so the
//!   shortcut never changes the answer, only how fast it is reached.
//! - **O(1) objective** (Lasso): `||r||^2` and `||b||_1` are updated with each coordinate,
//!   so a target objective is checked after every single update, exactly as the STRADS
//!   scheduler checks it after every round.
//!
//! Plain data, no clock: callers time [`CyclicLasso::solve`] themselves. The logistic
//! solver, [`CyclicLogistic`], is in `baseline/logistic.rs`.

use super::StradsModelError;
use super::gauss_seidel::{Centring, PackedColumns, column_step};
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// When a baseline run stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CdStop {
    /// Lasso: stop once `duality gap <= gap_tolerance * |objective|` after a full sweep.
    /// Logistic: stop once a full sweep lowers the objective by at most this fraction.
    pub tolerance: f64,
    /// At most this many full sweeps (active-set sweeps are not counted).
    pub max_sweeps: usize,
    /// Stop as soon as the objective is at or below this (checked after every update).
    pub target_objective: Option<f64>,
    /// Use the active-set strategy (exact either way; off for ablations and tests).
    pub active_set: bool,
}

impl Default for CdStop {
    fn default() -> Self {
        CdStop {
            tolerance: 1e-7,
            max_sweeps: 10_000,
            target_objective: None,
            active_set: true,
        }
    }
}

/// Why a baseline run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CdOutcome {
    /// The tolerance was met after a full sweep.
    Converged,
    /// The objective reached `target_objective`.
    ReachedTarget,
    /// `max_sweeps` full sweeps ran out.
    SweepLimit,
}

/// A baseline run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CdReport {
    /// Why it stopped.
    pub outcome: CdOutcome,
    /// Coordinate updates (every coordinate visited counts, moved or not).
    pub updates: u64,
    /// Full sweeps.
    pub full_sweeps: usize,
    /// Active-set sweeps.
    pub active_sweeps: usize,
    /// The objective at the end.
    pub objective: f64,
    /// Lasso: the duality gap of the last full sweep (NaN when stopped on the target).
    /// Logistic: the last full sweep's relative objective decrease.
    pub gap: f64,
    /// `(updates, objective)` after every full sweep (and at the end).
    pub trace: Vec<(u64, f64)>,
}

fn check_shape(x: &SparseColumns, n: usize, what: &str) -> Result<(), StradsModelError> {
    if x.n_rows != n {
        return Err(StradsModelError::DimensionMismatch(format!(
            "X has {} rows, {what} has {n}",
            x.n_rows
        )));
    }
    if x.column_starts.last().copied() != Some(x.row_indices.len())
        || x.values.len() != x.row_indices.len()
        || x.row_indices.iter().any(|&i| i as usize >= x.n_rows)
    {
        return Err(StradsModelError::InvalidConfig(
            "column storage is inconsistent (row index out of range or lengths differ)".into(),
        ));
    }
    Ok(())
}

/// A certified state: `(objective, duality gap, max KKT violation)`.
pub type Certified = (f64, f64, f64);

/// What [`CyclicLasso::solve_observed`] shows its states and certifications to.
pub type LassoObserver<'o, 'a> = dyn FnMut(&CyclicLasso<'a>, Certified) + 'o;

/// Cyclic coordinate descent for `min 1/2 ||y - X b||^2 + lambda ||b||_1`.
#[derive(Debug, Clone)]
pub struct CyclicLasso<'a> {
    x: &'a SparseColumns,
    y: &'a [f32],
    lambda: f64,
    sq_norms: Vec<f64>,
    coefficients: Vec<f64>,
    residual: Vec<f64>,
    sq_residual: f64,
    l1: f64,
    updates: u64,
    /// Implicit centring ([`CyclicLasso::centred`]), `None` for the design as given.
    centring: Option<Centring>,
}

impl<'a> CyclicLasso<'a> {
    /// Starts at `b = 0` on the design `x` centred implicitly (column `j` is
    /// `x_j - mean(x_j)`; nothing is densified: memory and an update's cost stay
    /// proportional to the non-zeros) with labels `y` (the caller centres them). Solves
    /// the problem of the explicitly centred design, the intercept
    /// `mean(y) - mean(X) . b` left to the caller.
    pub fn centred(
        x: &'a SparseColumns,
        y: &'a [f32],
        lambda: f32,
    ) -> Result<Self, StradsModelError> {
        let mut cd = CyclicLasso::new(x, y, lambda)?;
        let (centring, sq_norms) = Centring::of(x, &cd.residual);
        cd.sq_norms = sq_norms;
        cd.centring = Some(centring);
        Ok(cd)
    }

    /// Starts at `b = 0` (residual = y).
    pub fn new(x: &'a SparseColumns, y: &'a [f32], lambda: f32) -> Result<Self, StradsModelError> {
        check_shape(x, y.len(), "y")?;
        if !(lambda >= 0.0 && lambda.is_finite()) {
            return Err(StradsModelError::InvalidConfig(format!(
                "lambda {lambda} must be finite and >= 0"
            )));
        }
        let residual: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
        Ok(CyclicLasso {
            sq_norms: x.column_sq_norms(),
            sq_residual: residual.iter().map(|r| r * r).sum(),
            coefficients: vec![0.0; x.n_columns()],
            residual,
            x,
            y,
            lambda: f64::from(lambda),
            l1: 0.0,
            updates: 0,
            centring: None,
        })
    }

    /// Exact one-coordinate minimisation of coordinate `j`; returns `new - old`.
    #[inline]
    pub fn update(&mut self, j: usize) -> f64 {
        self.updates += 1;
        let norm = self.sq_norms[j];
        if norm <= 0.0 {
            return 0.0;
        }
        let x = self.x;
        let (rows, vals) = x.column(j);
        self.step_on(j, rows, vals, norm)
    }

    /// [`Self::update`] of the active set's slot `s` (its column packed in `active`);
    /// returns `new - old` and the column's squared norm.
    #[inline]
    fn update_packed(&mut self, active: &PackedColumns, s: usize) -> (f64, f64) {
        self.updates += 1;
        let (j, rows, vals, norm) = active.slot(s);
        (self.step_on(j, rows, vals, norm), norm)
    }

    /// The exact minimisation along column `j` (`rows`, `vals`, squared norm `norm`): the
    /// step the Gauss-Seidel workers run too.
    #[inline]
    fn step_on(&mut self, j: usize, rows: &[u32], vals: &[f32], norm: f64) -> f64 {
        column_step(
            self.centring.as_mut(),
            j,
            rows,
            vals,
            norm,
            self.lambda,
            &mut self.coefficients[j],
            &mut self.residual,
            &mut self.sq_residual,
            &mut self.l1,
        )
    }

    /// `1/2 ||r||^2 + lambda ||b||_1` from the maintained sums (O(1)).
    pub fn objective(&self) -> f64 {
        0.5 * self.sq_residual + self.lambda * self.l1
    }

    /// Coordinate updates so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// The coefficients (as f32, the model files' precision).
    pub fn coefficients(&self) -> Vec<f32> {
        self.coefficients.iter().map(|&b| b as f32).collect()
    }

    /// The coefficients as the solver keeps them (f64), without a copy.
    pub fn coefficients_f64(&self) -> &[f64] {
        &self.coefficients
    }

    /// Recomputes `||r||^2` and `||b||_1` exactly (drift of the running sums), then
    /// returns `(objective, duality gap, max KKT violation)`: `O(nnz)`.
    pub fn certify(&mut self) -> (f64, f64, f64) {
        if let Some(c) = &mut self.centring {
            // Fold the offset into the stored residual (O(rows), like the sums below),
            // so that the running sums restart exact.
            c.fold(&mut self.residual);
        }
        self.sq_residual = self.residual.iter().map(|r| r * r).sum();
        self.l1 = self.coefficients.iter().map(|b| b.abs()).sum();
        let xtr: Vec<f64> = (0..self.x.n_columns())
            .map(|j| {
                let (rows, vals) = self.x.column(j);
                let dot = rows
                    .iter()
                    .zip(vals)
                    .map(|(&i, &v)| f64::from(v) * self.residual[i as usize])
                    .sum();
                self.centring.as_ref().map_or(dot, |c| c.dot(j, dot))
            })
            .collect();
        let lambda = self.lambda;
        let kkt = xtr
            .iter()
            .zip(&self.coefficients)
            .map(|(&g, &b)| {
                if b != 0.0 {
                    (g - lambda * b.signum()).abs()
                } else {
                    (g.abs() - lambda).max(0.0)
                }
            })
            .fold(0.0, f64::max);
        let max_corr = xtr.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        let scale = if max_corr > lambda {
            lambda / max_corr
        } else {
            1.0
        };
        let (mut yy, mut dist) = (0.0, 0.0);
        for (&y, &r) in self.y.iter().zip(&self.residual) {
            let y = f64::from(y);
            yy += y * y;
            dist += (y - scale * r).powi(2);
        }
        let objective = self.objective();
        (objective, objective - (0.5 * yy - 0.5 * dist), kkt)
    }

    fn reached(&self, stop: &CdStop) -> bool {
        stop.target_objective
            .is_some_and(|target| self.objective() <= target)
    }

    /// Runs to the stop rule (see the module doc for the strategy).
    pub fn solve(&mut self, stop: &CdStop) -> CdReport {
        self.solve_observed(stop, None)
    }

    /// [`CyclicLasso::solve`], showing `observe` the state and its certified
    /// `(objective, duality gap, KKT violation)` at the start (one extra `O(nnz)`
    /// certification) and after every full sweep.
    pub fn solve_observed(
        &mut self,
        stop: &CdStop,
        mut observe: Option<&mut LassoObserver<'_, 'a>>,
    ) -> CdReport {
        if let Some(f) = observe.as_mut() {
            let certified = self.certify();
            f(self, certified);
        }
        self.solve_after_start(stop, observe)
    }

    /// [`CyclicLasso::solve_observed`] without the start's certification: for a caller
    /// that has it already (at `b = 0` it is the largest correlation, which resolving a
    /// relative lambda computes).
    pub fn solve_after_start(
        &mut self,
        stop: &CdStop,
        mut observe: Option<&mut LassoObserver<'_, 'a>>,
    ) -> CdReport {
        let d = self.x.n_columns();
        let mut report = CdReport {
            outcome: CdOutcome::SweepLimit,
            updates: 0,
            full_sweeps: 0,
            active_sweeps: 0,
            objective: self.objective(),
            gap: f64::NAN,
            trace: vec![(0, self.objective())],
        };
        if self.reached(stop) {
            report.outcome = CdOutcome::ReachedTarget;
            return report;
        }
        // Slots of the packed active set still swept (shrinking, as below).
        let mut slots: Vec<usize> = Vec::new();
        'outer: while report.full_sweeps < stop.max_sweeps {
            for j in 0..d {
                self.update(j);
                if self.reached(stop) {
                    report.outcome = CdOutcome::ReachedTarget;
                    break 'outer;
                }
            }
            report.full_sweeps += 1;
            let (objective, gap, kkt) = self.certify();
            report.gap = gap;
            report.trace.push((self.updates, objective));
            if let Some(f) = observe.as_mut() {
                f(self, (objective, gap, kkt));
            }
            if gap <= stop.tolerance * objective.abs().max(f64::MIN_POSITIVE) {
                report.outcome = CdOutcome::Converged;
                break;
            }
            if !stop.active_set {
                continue;
            }
            // The active columns are packed next to each other ([`PackedColumns`]: in
            // place, every step waited on memory).
            let coefficients = &self.coefficients;
            let packed = PackedColumns::of(
                self.x,
                &self.sq_norms,
                (0..d).filter(|&j| coefficients[j] != 0.0),
            );
            slots.clear();
            slots.extend(0..packed.len());
            // Sweep the active set until its largest step (in objective units,
            // delta^2 ||x_j||^2) is small against the current gap per active coordinate:
            // the next full sweep decides whether the run is done.
            let settle = (0.1 * gap / slots.len().max(1) as f64).max(f64::MIN_POSITIVE);
            for _ in 0..1000 {
                let mut largest = 0.0f64;
                for &s in &slots {
                    let (delta, norm) = self.update_packed(&packed, s);
                    largest = largest.max(delta * delta * norm);
                    if self.reached(stop) {
                        report.outcome = CdOutcome::ReachedTarget;
                        break 'outer;
                    }
                }
                report.active_sweeps += 1;
                if largest <= settle {
                    break;
                }
                // Shrinking (as liblinear's solvers do): a coordinate a pass left at zero
                // is not swept again until the next full sweep, which checks every one.
                // Measured: a quarter fewer updates at every size of `bench lasso-scale`.
                slots.retain(|&s| self.coefficients[packed.column_of(s)] != 0.0);
            }
        }
        report.updates = self.updates;
        report.objective = self.objective();
        if report.trace.last().map(|t| t.0) != Some(self.updates) {
            report.trace.push((self.updates, report.objective));
        }
        report
    }
}

mod logistic;
pub use logistic::{ACTIVE_SWEEPS, CyclicLogistic, LogisticPhase};

#[cfg(test)]
mod tests;
