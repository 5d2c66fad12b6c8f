//! The linear models' losses and the one L1 coordinate-descent step they share: as in
//! glmnet and scikit-learn's `cd_fast`, one engine ([`cd_step`]) and a family is its
//! gradient and curvature along a column ([`Loss`]).
//!
//! Every row keeps one number, its **state**: the residual `r = y - X b` for the squared
//! loss (so the Lasso's step is one gather and one scatter), the margin `m = X b` for the
//! margin losses ([`MarginLoss`]: [`Logistic`], [`SquaredHinge`]). Along column `j`, with
//! `g` and `h` the summed loss's first and second derivative in `b_j`, the step is the
//! proximal Newton step `new = S(h b_j - g, lambda) / h` (`S` the soft threshold). A loss
//! whose quadratic model is exact ([`Loss::EXACT`], squared) takes it as it is. Any other
//! keeps it only if it lowers the objective by at least 1% of the model's predicted
//! decrease (one more pass over the column), else takes the step under the curvature bound
//! `CURVATURE_BOUND ||x_j||^2`, which never raises the objective: every step is a descent
//! step, and most are Newton's.
//!
//! The baseline and the Gauss-Seidel workers (Lasso and the classifiers) run every update
//! through [`cd_step`]; a new family is a [`Loss`] impl (a classifier's, a [`MarginLoss`]
//! impl), not a new solver.

use super::gauss_seidel::{Centring, gather_dot};
use super::lasso::soft_threshold;
use super::logistic::{log_one_plus_exp_neg, sigmoid};
use super::tuning::NEWTON_ACCEPTANCE;

/// A smooth loss summed over the rows, seen along one column (`rows`, `vals`: its stored
/// non-zeros) at the rows' current state.
pub trait Loss {
    /// The second-order model along a column is the loss itself: the Newton step is the
    /// exact minimiser, no descent check.
    const EXACT: bool;
    /// The largest second derivative of one row's loss in its margin: the column's
    /// curvature bound is this times `||x_j||^2`.
    const CURVATURE_BOUND: f64;
    /// `(g, h)`, the summed loss's first and second derivative in the coefficient, at the
    /// current state (`bound`: the column's curvature bound).
    fn gradient_curvature(
        &self,
        rows: &[u32],
        vals: &[f32],
        state: &[f64],
        bound: f64,
    ) -> (f64, f64);
    /// The summed loss's change if the coefficient moves by `delta`; by default from the
    /// second-order model, exact for a quadratic loss.
    fn loss_change(
        &self,
        rows: &[u32],
        vals: &[f32],
        state: &[f64],
        bound: f64,
        delta: f64,
    ) -> f64 {
        let (g, h) = self.gradient_curvature(rows, vals, state, bound);
        g * delta + 0.5 * h * delta * delta
    }
    /// Moves the state by a coefficient change `delta`.
    fn apply(&mut self, rows: &[u32], vals: &[f32], state: &mut [f64], delta: f64);
}

/// One coordinate step of `loss + lambda |b|` along the column `rows`, `vals` (curvature
/// bound `bound`): updates `b` and the state, returns the coefficient's change.
#[inline]
pub fn cd_step<L: Loss>(
    loss: &mut L,
    rows: &[u32],
    vals: &[f32],
    bound: f64,
    lambda: f64,
    b: &mut f64,
    state: &mut [f64],
) -> f64 {
    if bound <= 0.0 {
        return 0.0;
    }
    let old = *b;
    let (g, h) = loss.gradient_curvature(rows, vals, state, bound);
    let target = |curvature: f64| soft_threshold(curvature * old - g, lambda) / curvature;
    let (new, delta) = if L::EXACT {
        let new = target(h);
        (new, new - old)
    } else {
        let mut delta = 0.0;
        if h > 1e-12 * bound {
            let newton = target(h) - old;
            if newton != 0.0 {
                let loss_change = loss.loss_change(rows, vals, state, bound, newton);
                let l1_change = lambda * ((old + newton).abs() - old.abs());
                let predicted = g * newton + l1_change;
                if loss_change + l1_change <= NEWTON_ACCEPTANCE * predicted {
                    delta = newton;
                }
            }
        }
        if delta == 0.0 {
            delta = target(bound) - old;
        }
        (old + delta, delta)
    };
    if delta != 0.0 {
        loss.apply(rows, vals, state, delta);
        *b = new;
    }
    delta
}

/// `1/2 ||y - X b||^2` over the residual, keeping `||r||^2` current.
pub struct Squared<'s> {
    /// `||r||^2`.
    pub sq_residual: &'s mut f64,
}

impl Loss for Squared<'_> {
    const EXACT: bool = true;
    const CURVATURE_BOUND: f64 = 1.0;

    #[inline]
    fn gradient_curvature(&self, rows: &[u32], vals: &[f32], r: &[f64], bound: f64) -> (f64, f64) {
        (-gather_dot(rows, vals, r), bound)
    }

    #[inline]
    fn apply(&mut self, rows: &[u32], vals: &[f32], r: &mut [f64], delta: f64) {
        *self.sq_residual += scatter_residual(rows, vals, r, delta);
    }
}

/// `r -= delta x` on the column's non-zeros; returns the change of `||r||^2` there.
#[inline]
fn scatter_residual(rows: &[u32], vals: &[f32], r: &mut [f64], delta: f64) -> f64 {
    let mut sq_change = 0.0f64;
    for (&i, &v) in rows.iter().zip(vals) {
        let r = &mut r[i as usize];
        let before = *r;
        *r -= f64::from(v) * delta;
        sq_change += *r * *r - before * before;
    }
    sq_change
}

/// [`Squared`] on column `j` of an implicitly centred design ([`Centring`]): the state is
/// the stored residual `s`, the residual `s + c 1`; the gather and the scatter touch the
/// non-zeros only, the centring costs O(1).
pub(crate) struct CentredSquared<'s> {
    /// The centring (its offset and sums move with every step).
    pub(crate) centring: &'s mut Centring,
    /// The column.
    pub(crate) j: usize,
    /// `||s + c 1||^2`.
    pub(crate) sq_residual: &'s mut f64,
}

impl Loss for CentredSquared<'_> {
    const EXACT: bool = true;
    const CURVATURE_BOUND: f64 = 1.0;

    #[inline]
    fn gradient_curvature(&self, rows: &[u32], vals: &[f32], s: &[f64], bound: f64) -> (f64, f64) {
        (-self.centring.dot(self.j, gather_dot(rows, vals, s)), bound)
    }

    #[inline]
    fn apply(&mut self, rows: &[u32], vals: &[f32], s: &mut [f64], delta: f64) {
        let c = &mut *self.centring;
        c.sq_s += scatter_residual(rows, vals, s, delta);
        c.sum_s -= delta * c.sums[self.j];
        c.offset += delta * c.means[self.j];
        *self.sq_residual = c.sq_residual();
    }
}

/// A loss of each row's margin `m = x_i^T b` and label `y = +-1`, summed over the rows: the
/// classifiers' family. One solver serves every impl (the cyclic kernel
/// [`crate::core::baseline::CyclicMargin`], the Gauss-Seidel workers and the scheduler's
/// combination in [`crate::core::logistic::gauss_seidel`]); a loss is its row loss, its
/// gradient and curvature along a column, and its curvature bound. Impls are zero-sized
/// markers: [`OnLabels`] pairs one with the labels, the [`Loss`] that [`cd_step`] takes.
pub trait MarginLoss: Copy + Default + Send + Sync + 'static {
    /// The loss's name in the settings and the logs.
    const NAME: &'static str;
    /// The largest second derivative of one row's loss in its margin.
    const CURVATURE_BOUND: f64;
    /// `|d loss / dm|` at `m = 0` (either label): `lambda_max = this * max_j |x_j^T y|`.
    const SLOPE_AT_ZERO: f64;
    /// One row's loss at margin `m` with label `y`.
    fn row_loss(y: f64, m: f64) -> f64;
    /// One row's loss and its derivative in the margin, at margin `m` with label `y`.
    fn row_loss_slope(y: f64, m: f64) -> (f64, f64);
    /// `(g, h)` of the summed loss along the column `rows`, `vals` (as
    /// [`Loss::gradient_curvature`]) at the margins `m`.
    fn gradient_curvature(labels: &[f64], rows: &[u32], vals: &[f32], m: &[f64]) -> (f64, f64);
}

/// A [`MarginLoss`] over labelled rows (labels +-1), the state being the margins.
pub struct OnLabels<'l, L> {
    /// The labels, +-1.
    pub labels: &'l [f64],
    /// The loss.
    pub loss: L,
}

impl<L: MarginLoss> Loss for OnLabels<'_, L> {
    const EXACT: bool = false;
    const CURVATURE_BOUND: f64 = L::CURVATURE_BOUND;

    #[inline]
    fn gradient_curvature(&self, rows: &[u32], vals: &[f32], m: &[f64], _bound: f64) -> (f64, f64) {
        L::gradient_curvature(self.labels, rows, vals, m)
    }

    fn loss_change(&self, rows: &[u32], vals: &[f32], m: &[f64], _bound: f64, delta: f64) -> f64 {
        let mut change = 0.0f64;
        for (&i, &v) in rows.iter().zip(vals) {
            let (m, y) = (m[i as usize], self.labels[i as usize]);
            change += L::row_loss(y, m + f64::from(v) * delta) - L::row_loss(y, m);
        }
        change
    }

    #[inline]
    fn apply(&mut self, rows: &[u32], vals: &[f32], m: &mut [f64], delta: f64) {
        // `m += delta x` on the column's non-zeros.
        for (&i, &v) in rows.iter().zip(vals) {
            m[i as usize] += f64::from(v) * delta;
        }
    }
}

/// `log(1 + exp(-y m))` per row: L1 logistic regression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Logistic;

impl MarginLoss for Logistic {
    const NAME: &'static str = "logistic";
    const CURVATURE_BOUND: f64 = 0.25;
    const SLOPE_AT_ZERO: f64 = 0.5;

    #[inline]
    fn row_loss(y: f64, m: f64) -> f64 {
        log_one_plus_exp_neg(y * m)
    }

    #[inline]
    fn row_loss_slope(y: f64, m: f64) -> (f64, f64) {
        // One exp for both terms, as `log_one_plus_exp_neg` and `sigmoid` compute them.
        let z = y * m;
        let e = (-z.abs()).exp();
        let p = if z <= 0.0 {
            1.0 / (1.0 + e)
        } else {
            e / (1.0 + e)
        };
        ((-z).max(0.0) + e.ln_1p(), -y * p)
    }

    #[inline]
    fn gradient_curvature(labels: &[f64], rows: &[u32], vals: &[f32], m: &[f64]) -> (f64, f64) {
        let (mut g, mut h) = (0.0f64, 0.0f64);
        for (&i, &v) in rows.iter().zip(vals) {
            let (x, y) = (f64::from(v), labels[i as usize]);
            let p = sigmoid(-y * m[i as usize]);
            g -= y * x * p;
            h += x * x * p * (1.0 - p);
        }
        (g, h)
    }
}

/// The squared hinge `max(0, 1 - y m)^2` per row: an L1-regularised L2-loss SVM
/// (liblinear's `L1R_L2LOSS_SVC`). Piecewise quadratic: the Newton step uses the
/// generalised second derivative and the descent check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SquaredHinge;

impl MarginLoss for SquaredHinge {
    const NAME: &'static str = "squared-hinge";
    const CURVATURE_BOUND: f64 = 2.0;
    const SLOPE_AT_ZERO: f64 = 2.0;

    #[inline]
    fn row_loss(y: f64, m: f64) -> f64 {
        (1.0 - y * m).max(0.0).powi(2)
    }

    #[inline]
    fn row_loss_slope(y: f64, m: f64) -> (f64, f64) {
        let slack = (1.0 - y * m).max(0.0);
        (slack * slack, -2.0 * y * slack)
    }

    #[inline]
    fn gradient_curvature(labels: &[f64], rows: &[u32], vals: &[f32], m: &[f64]) -> (f64, f64) {
        let (mut g, mut h) = (0.0f64, 0.0f64);
        for (&i, &v) in rows.iter().zip(vals) {
            let (x, y) = (f64::from(v), labels[i as usize]);
            let slack = 1.0 - y * m[i as usize];
            if slack > 0.0 {
                g -= 2.0 * y * x * slack;
                h += 2.0 * x * x;
            }
        }
        (g, h)
    }
}

#[cfg(test)]
mod tests;
