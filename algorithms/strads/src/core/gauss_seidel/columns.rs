//! Column kernels the Gauss-Seidel worker shares with the baseline: four-lane dot products, the
//! coordinate step through implicit centring, packed active columns, and the row vector a
//! sweep sends.

use crate::core::StradsModelError;
use crate::core::loss::{CentredSquared, Squared, cd_step};
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// `sum_k term(a[k], b[k])` over the shorter slice in four independent partial sums (the
/// adds need not wait for each other).
#[inline]
fn four_lane_sum<A: Copy, B: Copy>(a: &[A], b: &[B], term: impl Fn(A, B) -> f64) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (a[..n].chunks_exact(4), b[..n].chunks_exact(4));
    let mut tail = 0.0f64;
    for (&x, &y) in a.remainder().iter().zip(b.remainder()) {
        tail += term(x, y);
    }
    let mut lanes = [0.0f64; 4];
    for (x, y) in a.zip(b) {
        for k in 0..4 {
            lanes[k] += term(x[k], y[k]);
        }
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
}

/// `x_j^T r` over a column's stored non-zeros (`rows`, `vals`) in four partial sums.
#[inline]
pub(crate) fn gather_dot(rows: &[u32], vals: &[f32], r: &[f64]) -> f64 {
    four_lane_sum(rows, vals, |i, v| f64::from(v) * r[i as usize])
}

/// `a . b` in four partial sums.
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    four_lane_sum(a, b, |x, y| x * y)
}

/// `n` zeros with every page already written: a scheduler's table takes its page faults
/// at the start, not in the first rounds (on every worker's critical path).
pub(crate) fn resident_zeros(n: usize) -> Vec<f64> {
    let mut v = vec![0.0f64; n];
    // A zero the compiler cannot see through (a known zero's write would be removed).
    let zero = std::hint::black_box(0.0);
    v.iter_mut().step_by(512).for_each(|x| *x = zero);
    v
}

/// The Lasso's coordinate step ([`cd_step`] of the squared loss) on column `j` (stored
/// part `rows`, `vals`, squared norm `norm`), through the implicit centring when there is
/// one: the update the baseline and the Gauss-Seidel workers share. Keeps `sq_residual`
/// (`||r||^2`) and `l1` current; returns `new - old`.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn column_step(
    centring: Option<&mut Centring>,
    j: usize,
    rows: &[u32],
    vals: &[f32],
    norm: f64,
    lambda: f64,
    b: &mut f64,
    residual: &mut [f64],
    sq_residual: &mut f64,
    l1: &mut f64,
) -> f64 {
    let old = *b;
    let delta = match centring {
        None => cd_step(
            &mut Squared { sq_residual },
            rows,
            vals,
            norm,
            lambda,
            b,
            residual,
        ),
        Some(centring) => {
            let mut loss = CentredSquared {
                centring,
                j,
                sq_residual,
            };
            cd_step(&mut loss, rows, vals, norm, lambda, b, residual)
        }
    };
    if delta != 0.0 {
        *l1 += b.abs() - old.abs();
    }
    delta
}

/// Implicit column centring of a sparse design (`fit_intercept`): column `j` stands for
/// `x_j - mu_j 1` while only `x_j`'s non-zeros are stored. The residual is kept as
/// `s + c 1` (`s` the stored vector, `c` a scalar offset), so that a coordinate update
/// touches `x_j`'s non-zeros only: `s -= delta x_j`, `c += delta mu_j`. A Gauss-Seidel
/// worker centres its columns by their own means ([`Self::of`]), a scheduled Lasso worker
/// its row block by the whole design's ([`Self::with_means`]).
#[derive(Debug, Clone)]
pub(crate) struct Centring {
    /// `mu_j = sum_i x_ij / n`.
    pub(crate) means: Vec<f64>,
    /// `sum_i x_ij = n mu_j`.
    pub(crate) sums: Vec<f64>,
    /// The residual's offset `c`.
    pub(crate) offset: f64,
    /// `sum_i s_i`.
    pub(crate) sum_s: f64,
    /// `||s||^2`.
    pub(crate) sq_s: f64,
    /// Rows.
    n: f64,
}

impl Centring {
    /// The centring of columns `x` (all rows) for the stored residual `s` (offset 0), and
    /// the centred columns' squared norms `||x_j - mu_j 1||^2` (over the non-zeros plus
    /// `mu_j^2` on each of the other rows).
    pub(crate) fn of(x: &SparseColumns, s: &[f64]) -> (Self, Vec<f64>) {
        let n = (x.n_rows as f64).max(1.0);
        let mut centring = Self::with_means(x, s, Vec::new());
        centring.means = centring.sums.iter().map(|s| s / n).collect();
        let sq_norms = (0..x.n_columns())
            .map(|j| centring.sq_norm(j, x.column(j).1))
            .collect();
        (centring, sq_norms)
    }

    /// The centring of the rows `x` by given column `means` (a row block's, by the whole
    /// design's means), for the stored residual `s` (offset 0).
    pub(crate) fn with_means(x: &SparseColumns, s: &[f64], means: Vec<f64>) -> Self {
        Centring {
            means,
            sums: (0..x.n_columns())
                .map(|j| x.column(j).1.iter().map(|&v| f64::from(v)).sum())
                .collect(),
            offset: 0.0,
            sum_s: s.iter().sum(),
            sq_s: s.iter().map(|r| r * r).sum(),
            n: x.n_rows as f64,
        }
    }

    /// `||x_j - mu_j 1||^2` from the column's stored values (the non-zeros plus `mu_j^2`
    /// on each of the other rows).
    pub(crate) fn sq_norm(&self, j: usize, values: &[f32]) -> f64 {
        let mu = self.means[j];
        let stored: f64 = values.iter().map(|&v| (f64::from(v) - mu).powi(2)).sum();
        stored + (self.n - values.len() as f64) * mu * mu
    }

    /// `mu_j`.
    pub(crate) fn mean(&self, j: usize) -> f64 {
        self.means[j]
    }

    /// `(x_j - mu_j 1)^T (s + c 1)` from `x_j^T s`: O(1).
    pub(crate) fn dot(&self, j: usize, x_dot_s: f64) -> f64 {
        x_dot_s + self.offset * self.sums[j] - self.means[j] * (self.sum_s + self.n * self.offset)
    }

    /// `||s + c 1||^2`.
    pub(crate) fn sq_residual(&self) -> f64 {
        self.sq_s + 2.0 * self.offset * self.sum_s + self.n * self.offset * self.offset
    }

    /// Folds the offset into the stored residual `s` (O(rows)) and recomputes the running
    /// sums exactly; returns `||r||^2`.
    pub(crate) fn fold(&mut self, s: &mut [f64]) -> f64 {
        let offset = std::mem::take(&mut self.offset);
        s.iter_mut().for_each(|r| *r += offset);
        self.resync(s)
    }

    /// Recomputes `sum(s)` and `||s||^2` exactly; returns `||r||^2`.
    pub(crate) fn resync(&mut self, s: &[f64]) -> f64 {
        self.sum_s = s.iter().sum();
        self.sq_s = s.iter().map(|r| r * r).sum();
        self.sq_residual()
    }

    /// `[offset c, sum(s), ||s||^2]`, what a checkpoint keeps.
    pub(crate) fn state(&self) -> [f64; 3] {
        [self.offset, self.sum_s, self.sq_s]
    }

    /// Continues from a [`Self::state`].
    pub(crate) fn restore(&mut self, [offset, sum_s, sq_s]: [f64; 3]) {
        self.offset = offset;
        self.sum_s = sum_s;
        self.sq_s = sq_s;
    }
}

/// A vector over the rows, sent sparse or dense, whichever is smaller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RowVector {
    /// `(row, value)` pairs.
    Sparse {
        /// Rows, increasing.
        #[serde(with = "petrel_messages::tensor::u32_bytes")]
        rows: Vec<u32>,
        /// Values.
        #[serde(with = "petrel_messages::tensor::f64_bytes")]
        values: Vec<f64>,
    },
    /// Every row.
    Dense(#[serde(with = "petrel_messages::tensor::f64_bytes")] Vec<f64>),
}

impl Default for RowVector {
    fn default() -> Self {
        RowVector::zero()
    }
}

impl RowVector {
    /// Nothing (all zeros).
    pub fn zero() -> Self {
        RowVector::Sparse {
            rows: Vec::new(),
            values: Vec::new(),
        }
    }

    /// `dense` as the smaller encoding (a sparse entry costs 12 bytes, a dense one 8).
    pub fn from_dense(dense: Vec<f64>) -> Self {
        let nnz = dense.iter().filter(|v| **v != 0.0).count();
        if nnz * 12 < dense.len() * 8 {
            // Filled without a branch per value: a residual delta's zeros fall at random,
            // so a branch would mispredict about half the time.
            let (mut rows, mut values) = (vec![0u32; nnz], vec![0.0f64; nnz]);
            let mut k = 0;
            for (i, &v) in dense.iter().enumerate() {
                if k < nnz {
                    rows[k] = i as u32;
                    values[k] = v;
                }
                k += usize::from(v != 0.0);
            }
            RowVector::Sparse { rows, values }
        } else {
            RowVector::Dense(dense)
        }
    }

    /// Adds `scale * self` into `out` (of `n` rows); refuses rows out of range.
    pub fn add_scaled_to(&self, scale: f64, out: &mut [f64]) -> Result<(), StradsModelError> {
        match self {
            RowVector::Dense(v) => {
                crate::core::check_sizes(&[("rows of a dense row vector", v.len(), out.len())])?;
                out.iter_mut().zip(v).for_each(|(o, x)| *o += scale * x);
            }
            RowVector::Sparse { rows, values } => {
                if rows.len() != values.len() {
                    return Err(StradsModelError::DimensionMismatch(format!(
                        "{} rows but {} values",
                        rows.len(),
                        values.len()
                    )));
                }
                for (&i, &x) in rows.iter().zip(values) {
                    let o = out.get_mut(i as usize).ok_or_else(|| {
                        StradsModelError::protocol(format!("row {i} out of range"))
                    })?;
                    *o += scale * x;
                }
            }
        }
        Ok(())
    }

    /// As a dense vector of `n` rows.
    pub fn to_dense(&self, n: usize) -> Result<Vec<f64>, StradsModelError> {
        let mut out = vec![0.0; n];
        self.add_scaled_to(1.0, &mut out)?;
        Ok(out)
    }
}

/// An active set's columns copied next to each other, with a number per column (the
/// squared norm for the Lasso, the curvature bound for the logistic baseline), so that an
/// active-set pass streams from memory. The steps are the same, bit for bit.
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedColumns {
    /// The design's column index of each slot.
    index: Vec<usize>,
    /// `starts[s]..starts[s + 1]` is slot `s`'s range of `rows` and `vals`.
    starts: Vec<usize>,
    rows: Vec<u32>,
    vals: Vec<f32>,
    norms: Vec<f64>,
}

impl PackedColumns {
    /// The columns `list` of `x` with their numbers `norms[j]`, in the list's order.
    pub(crate) fn of(
        x: &SparseColumns,
        norms: &[f64],
        list: impl IntoIterator<Item = usize>,
    ) -> Self {
        let index: Vec<usize> = list.into_iter().collect();
        let nnz = index
            .iter()
            .map(|&j| x.column_starts[j + 1] - x.column_starts[j])
            .sum();
        let mut packed = PackedColumns {
            starts: Vec::with_capacity(index.len() + 1),
            rows: Vec::with_capacity(nnz),
            vals: Vec::with_capacity(nnz),
            norms: index.iter().map(|&j| norms[j]).collect(),
            index,
        };
        packed.starts.push(0);
        for &j in &packed.index {
            let (rows, vals) = x.column(j);
            packed.rows.extend_from_slice(rows);
            packed.vals.extend_from_slice(vals);
            packed.starts.push(packed.rows.len());
        }
        packed
    }

    /// Slots held.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The design's column index of slot `s`.
    #[inline]
    pub(crate) fn column_of(&self, s: usize) -> usize {
        self.index[s]
    }

    /// Slot `s`: its column index, rows, values and number (the squared norm).
    #[inline]
    pub(crate) fn slot(&self, s: usize) -> (usize, &[u32], &[f32], f64) {
        let range = self.starts[s]..self.starts[s + 1];
        (
            self.index[s],
            &self.rows[range.clone()],
            &self.vals[range],
            self.norms[s],
        )
    }
}
