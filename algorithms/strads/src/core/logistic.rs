//! Sparse (L1) logistic regression `min sum_i log(1 + exp(-y_i x_i^T b)) + lambda ||b||_1`
//! with the same STRADS machinery as Lasso: rows split over workers, coordinates from a
//! [`LassoScheduler`](super::scheduler::LassoScheduler). Each coordinate step minimises the quadratic upper bound of the loss
//! (curvature `sum_i x_ij^2 / 4`, the logistic Hessian's maximum) plus the L1 term, so a
//! serial step never increases the objective: `b_j <- S(h b_j - g, lambda) / h`.

use super::StradsModelError;
use super::lasso::soft_threshold;
use petrel_ml::data::SparseColumns;

/// `log(1 + exp(-z))` without overflow.
pub(crate) fn log_one_plus_exp_neg(z: f64) -> f64 {
    (-z).max(0.0) + (-z.abs()).exp().ln_1p()
}

/// The logistic function, without overflow.
pub(crate) fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// A worker's row block, its labels in {-1, +1} and the margins `x_i^T b`.
#[derive(Debug, Clone)]
pub struct LogisticWorkerState {
    x: SparseColumns,
    labels: Vec<f64>,
    margins: Vec<f64>,
}

impl LogisticWorkerState {
    /// Labels `> 0` become +1, all others -1 (so class indices 0/1 work as-is).
    pub fn new(x_block: SparseColumns, labels: &[f32]) -> Result<Self, StradsModelError> {
        super::check_sizes(&[("labels", labels.len(), x_block.n_rows)])?;
        Ok(LogisticWorkerState {
            margins: vec![0.0; labels.len()],
            labels: labels
                .iter()
                .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
                .collect(),
            x: x_block,
        })
    }

    /// The margins `x_i^T b` of the rows (what a checkpoint saves).
    pub fn margins(&self) -> &[f64] {
        &self.margins
    }

    /// Continues from checkpointed margins; refuses another number of rows.
    pub fn restore_margins(&mut self, margins: Vec<f64>) -> Result<(), StradsModelError> {
        super::check_sizes(&[("margins", margins.len(), self.margins.len())])?;
        self.margins = margins;
        Ok(())
    }

    /// Partial gradient `sum_i -y_i x_ij sigmoid(-y_i m_i)` and curvature bound
    /// `sum_i x_ij^2 / 4` for each var.
    pub fn push(&self, vars: &[usize]) -> (Vec<f32>, Vec<f32>) {
        vars.iter()
            .map(|&j| {
                let (rows, vals) = self.x.column(j);
                let (mut g, mut h) = (0.0f64, 0.0f64);
                for (&i, &x) in rows.iter().zip(vals) {
                    let (x, y) = (f64::from(x), self.labels[i as usize]);
                    g -= y * x * sigmoid(-y * self.margins[i as usize]);
                    h += 0.25 * x * x;
                }
                (g as f32, h as f32)
            })
            .unzip()
    }

    /// Applies committed `(coordinate, delta)` changes to the margins.
    pub fn apply_deltas(&mut self, changes: &[(usize, f32)]) {
        for &(j, delta) in changes.iter().filter(|c| c.1 != 0.0) {
            let (rows, vals) = self.x.column(j);
            for (&i, &x) in rows.iter().zip(vals) {
                self.margins[i as usize] += f64::from(x) * f64::from(delta);
            }
        }
    }

    /// Partial logistic loss.
    pub fn loss(&self) -> f64 {
        self.labels
            .iter()
            .zip(&self.margins)
            .map(|(&y, &m)| log_one_plus_exp_neg(y * m))
            .sum()
    }

    /// Number of rows whose margin has the label's sign.
    pub fn correct(&self) -> usize {
        correct_signs(&self.labels, &self.margins)
    }
}

/// Rows whose margin has the label's sign.
pub(crate) fn correct_signs(labels: &[f64], margins: &[f64]) -> usize {
    labels
        .iter()
        .zip(margins)
        .filter(|&(&y, &m)| y * m > 0.0)
        .count()
}

/// Aggregation: `b_j <- S(h b_j - g, lambda) / h` with the summed partials.
pub fn pull(values: &[f32], gradient: &[f32], curvature: &[f32], lambda: f32) -> Vec<f32> {
    values
        .iter()
        .zip(gradient.iter().zip(curvature))
        .map(|(&b, (&g, &h))| {
            let (b, g, h) = (f64::from(b), f64::from(g), f64::from(h));
            if h > 0.0 {
                (soft_threshold(h * b - g, f64::from(lambda)) / h) as f32
            } else {
                0.0
            }
        })
        .collect()
}

pub mod gauss_seidel;

#[cfg(test)]
pub(crate) mod tests;
