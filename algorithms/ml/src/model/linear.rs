//! Evaluation and prediction of the linear models: [`LinearModel`] (lasso, logistic) and
//! [`SoftmaxModel`] (ps-lr).

use super::*;

impl LinearModel {
    /// `intercept + x . w` (features past the model count as zero).
    pub fn score(&self, x: &SparseRow) -> f64 {
        self.intercept
            + x.indices
                .iter()
                .zip(&x.values)
                .filter_map(|(&j, &v)| {
                    self.coefficients
                        .get(j as usize)
                        .map(|&w| f64::from(w) * f64::from(v))
                })
                .sum::<f64>()
    }

    /// The prediction for `x`: the value (regression), the positive class's probability
    /// (logistic) or the margin (squared hinge).
    pub fn predict(&self, x: &SparseRow) -> f64 {
        match self.task {
            LinearTask::Regression | LinearTask::SquaredHingeClassification => self.score(x),
            LinearTask::BinaryClassification => sigmoid(self.score(x)),
        }
    }

    /// Held-out figures on `data`: `mse`, `rmse`, `r2` and the training `objective` for
    /// regression; `accuracy`, `log_loss` or `squared_hinge` (mean) and `objective` for
    /// classification (labels > 0 positive).
    pub fn evaluate(&self, data: &SparseDataset) -> Figures {
        let l1 = self
            .coefficients
            .iter()
            .map(|w| f64::from(w.abs()))
            .sum::<f64>();
        linear_figures(self.task, self.lambda, l1, data, |x| self.score(x))
    }
}

/// The figures of [`LinearModel::evaluate`] for a model given by its L1 norm `l1` and its
/// scores `score(x) = intercept + x . w` (a trainer's coefficients in another form).
pub fn linear_figures(
    task: LinearTask,
    lambda: f64,
    l1: f64,
    data: &SparseDataset,
    score: impl Fn(&SparseRow) -> f64,
) -> Figures {
    let n = data.rows.len().max(1) as f64;
    let l1 = lambda * l1;
    match task {
        LinearTask::Regression => {
            let sse: f64 = data
                .rows
                .iter()
                .zip(&data.labels)
                .map(|(x, &y)| (f64::from(y) - score(x)).powi(2))
                .sum();
            let mean = data.labels.iter().map(|&y| f64::from(y)).sum::<f64>() / n;
            let sst: f64 = data
                .labels
                .iter()
                .map(|&y| (f64::from(y) - mean).powi(2))
                .sum();
            let r2 = if sst > 0.0 { 1.0 - sse / sst } else { f64::NAN };
            vec![
                ("mse", sse / n),
                ("rmse", (sse / n).sqrt()),
                ("r2", r2),
                ("objective", 0.5 * sse + l1),
                ("rows", data.rows.len() as f64),
            ]
        }
        LinearTask::BinaryClassification => {
            let (mut correct, mut loss) = (0usize, 0.0f64);
            for (x, &y) in data.rows.iter().zip(&data.labels) {
                let p = sigmoid(score(x));
                let positive = y > 0.0;
                correct += usize::from((p >= 0.5) == positive);
                loss -= if positive { p } else { 1.0 - p }.max(1e-12).ln();
            }
            vec![
                ("accuracy", correct as f64 / n),
                ("log_loss", loss / n),
                ("objective", loss + l1),
                ("rows", data.rows.len() as f64),
            ]
        }
        LinearTask::SquaredHingeClassification => {
            let (mut correct, mut loss) = (0usize, 0.0f64);
            for (x, &y) in data.rows.iter().zip(&data.labels) {
                let m = score(x);
                let positive = y > 0.0;
                correct += usize::from((m >= 0.0) == positive);
                let sign = if positive { 1.0 } else { -1.0 };
                loss += (1.0 - sign * m).max(0.0).powi(2);
            }
            vec![
                ("accuracy", correct as f64 / n),
                ("squared_hinge", loss / n),
                ("objective", loss + l1),
                ("rows", data.rows.len() as f64),
            ]
        }
    }
}

/// Held-out figures named `heldout_<figure>`, leaving out what is not a number and `skip`.
pub fn heldout_names(figures: Figures, skip: &[&str]) -> Vec<(String, f64)> {
    figures
        .into_iter()
        .filter(|(k, v)| v.is_finite() && !skip.contains(k))
        .map(|(k, v)| (format!("heldout_{k}"), v))
        .collect()
}

/// The index of the largest of `p` (the last of equals; 0 for none).
fn argmax(p: &[f64]) -> usize {
    (0..p.len())
        .max_by(|&a, &b| p[a].total_cmp(&p[b]))
        .unwrap_or(0)
}

pub(super) fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

impl SoftmaxModel {
    /// Features (the weight rows before the bias row).
    pub fn n_features(&self) -> usize {
        self.weights.len().saturating_sub(1)
    }

    /// Class probabilities of `x` (features past the model count as zero).
    pub fn probabilities(&self, x: &SparseRow) -> Vec<f64> {
        let k = self.class_labels.len();
        let bias = self.weights.len() - 1;
        let mut z: Vec<f64> = self.weights[bias].iter().map(|&b| f64::from(b)).collect();
        for (&j, &v) in x.indices.iter().zip(&x.values) {
            if let Some(row) = self.weights.get(j as usize).filter(|_| (j as usize) < bias) {
                for c in 0..k {
                    z[c] += f64::from(row[c]) * f64::from(v);
                }
            }
        }
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exp: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
        let sum: f64 = exp.iter().sum();
        exp.iter().map(|e| e / sum).collect()
    }

    /// The most probable class's original label and the probabilities.
    pub fn predict(&self, x: &SparseRow) -> (f32, Vec<f64>) {
        let p = self.probabilities(x);
        (self.class_labels[argmax(&p)], p)
    }

    /// `accuracy` and `log_loss` (mean) on `data`; a label the model never saw is an error.
    pub fn evaluate(&self, data: &SparseDataset, path: &Path) -> Result<Figures, MlError> {
        let n = data.rows.len().max(1) as f64;
        let (mut correct, mut loss) = (0usize, 0.0f64);
        for (row, (x, y)) in data.rows.iter().zip(&data.labels).enumerate() {
            let class = self
                .class_labels
                .iter()
                .position(|l| l == y)
                .ok_or_else(|| {
                    let classes = &self.class_labels;
                    let why = format!(
                        "row {}: label {y} is not one of the model's classes {classes:?}",
                        row + 1
                    );
                    MlError::does_not_fit(path, why)
                })?;
            let p = self.probabilities(x);
            correct += usize::from(argmax(&p) == class);
            loss -= p[class].max(1e-12).ln();
        }
        Ok(vec![
            ("accuracy", correct as f64 / n),
            ("log_loss", loss / n),
            ("rows", data.rows.len() as f64),
        ])
    }
}
