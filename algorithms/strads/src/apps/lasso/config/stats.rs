//! What the Lasso needs of the whole design beside the settings: `lambda_max` (plain and
//! centred), column norms, column and label means, the intercept's terms.

use petrel_ml::data::SparseColumns;

/// `max_j |x_j^T y|`: the smallest lambda with an all-zero solution.
pub fn lambda_max(x: &SparseColumns, y: &[f32]) -> f64 {
    (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            column_correlation(rows, vals, y, None)
        })
        .fold(0.0, f64::max)
}

/// `max_j |(x_j - mean(x_j))^T y|` from the sparse columns: the smallest lambda with an
/// all-zero solution of the centred problem (the same figure on a design that is already
/// centred, whose means are zero).
pub fn centred_lambda_max(x: &SparseColumns, y: &[f32]) -> f64 {
    let n = x.n_rows.max(1) as f64;
    let y_sum: f64 = y.iter().map(|&v| f64::from(v)).sum();
    (0..x.n_columns())
        .map(|j| {
            let (rows, vals) = x.column(j);
            column_correlation(rows, vals, y, Some((n, y_sum)))
        })
        .fold(0.0, f64::max)
}

/// `|x_j^T y|` of one column (`rows`, `vals`), or with `centring = Some((n, sum y))` the
/// centred column's `|x_j^T y - sum(x_j) / n * sum y|`: one term of [`lambda_max`] and
/// [`centred_lambda_max`], for a node that sees the columns one at a time.
pub(crate) fn column_correlation(
    rows: &[u32],
    vals: &[f32],
    y: &[f32],
    centring: Option<(f64, f64)>,
) -> f64 {
    let (mut dot, mut sum) = (0.0f64, 0.0f64);
    for (&i, &v) in rows.iter().zip(vals) {
        dot += f64::from(v) * f64::from(y[i as usize]);
        sum += f64::from(v);
    }
    finish_correlation(dot, sum, centring)
}

/// [`column_correlation`] from the column's `x_j . y` and sum (summed in row order).
pub(crate) fn finish_correlation(dot: f64, sum: f64, centring: Option<(f64, f64)>) -> f64 {
    match centring {
        None => dot.abs(),
        Some((n, y_sum)) => (dot - sum / n * y_sum).abs(),
    }
}

/// `||x_j||^2` for every column of `x`, of the centred column `x_j - mean(x_j)` with
/// `centred` (computed from the stored non-zeros: `sum (x_ij - mu_j)^2` over them plus
/// `mu_j^2` for every other row).
pub fn design_sq_norms(x: &SparseColumns, centred: bool) -> Vec<f64> {
    if !centred {
        return x.column_sq_norms();
    }
    let n = x.n_rows.max(1) as f64;
    (0..x.n_columns())
        .map(|j| {
            let vals = x.column(j).1;
            let mu = vals.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let stored: f64 = vals.iter().map(|&v| (f64::from(v) - mu).powi(2)).sum();
            stored + (x.n_rows - vals.len()) as f64 * mu * mu
        })
        .collect()
}

/// The training data's column means and mean label: the intercept of coefficients `b`
/// fitted on the centred design is `mean(y) - mean(X) . b`.
#[derive(Debug, Clone, PartialEq)]
pub struct InterceptTerms {
    pub(super) means: Vec<f64>,
    pub(super) y_mean: f32,
}

impl InterceptTerms {
    /// `mean(y) - mean(X) . b`.
    pub fn intercept(&self, b: &[f32]) -> f64 {
        let dot: f64 = self
            .means
            .iter()
            .zip(b)
            .map(|(m, &b)| m * f64::from(b))
            .sum();
        f64::from(self.y_mean) - dot
    }
}

/// Column means of `x` and the mean of `y` (f64 sums).
pub(super) fn column_means(x: &SparseColumns, y: &[f32]) -> (Vec<f64>, f32) {
    let n = x.n_rows.max(1) as f64;
    let means = (0..x.n_columns())
        .map(|j| {
            let range = x.column_starts[j]..x.column_starts[j + 1];
            x.values[range].iter().map(|&v| f64::from(v)).sum::<f64>() / n
        })
        .collect();
    (means, label_mean(y, x.n_rows))
}

/// The mean label of `n_rows` rows (an f64 sum).
pub(super) fn label_mean(y: &[f32], n_rows: usize) -> f32 {
    (y.iter().map(|&v| f64::from(v)).sum::<f64>() / n_rows.max(1) as f64) as f32
}

/// `x` minus its column means, every cell stored: the old explicit centring, kept as the
/// reference of the tests.
#[cfg(test)]
pub(crate) fn centred(x: &SparseColumns, means: &[f64]) -> SparseColumns {
    let (n, d) = (x.n_rows, x.n_columns());
    let mut values = Vec::with_capacity(n * d);
    let mut column = vec![0f32; n];
    for (j, &m) in means.iter().enumerate().take(d) {
        column.iter_mut().for_each(|v| *v = 0.0);
        for k in x.column_starts[j]..x.column_starts[j + 1] {
            column[x.row_indices[k] as usize] = x.values[k];
        }
        values.extend(column.iter().map(|&v| (f64::from(v) - m) as f32));
    }
    SparseColumns {
        n_rows: n,
        column_starts: (0..=d).map(|j| j * n).collect(),
        row_indices: (0..d).flat_map(|_| 0..n as u32).collect(),
        values,
    }
}
