//! A node's share of the design by columns (`solver = "gauss-seidel"`), loaded without
//! holding the whole design: the sparse synthetic design is generated once column by
//! column and a LIBSVM file is read twice (counts, then the node's columns), keeping only
//! the node's columns, `y` and what needs every column (`lambda_max`, each column's
//! non-zero count for the cut). Every figure is bit for bit the one computed on the whole
//! design ([`LassoSettings::load`], [`LassoSettings::lambda_max`], [`SparseColumns::columns`]).

use super::{LassoSettings, column_correlation, column_means, label_mean};
use crate::core::StradsModelError;
use crate::error::StradsError;
use petrel_ml::MlError;
use petrel_ml::data::synthetic::{SparseLassoColumns, SparseLassoParams};
use petrel_ml::data::{ReadDigest, SparseColumns, visit_libsvm};
use std::ops::Range;
use std::path::Path;

/// What a node knows of the whole design before it keeps any of it: the rows and every
/// column's non-zero count (what the column cut weighs).
#[derive(Debug, Clone, PartialEq)]
pub struct DesignShape {
    /// Rows.
    pub n_rows: usize,
    /// Non-zeros of each column.
    pub column_nnz: Vec<u32>,
}

impl DesignShape {
    /// The shape of `x`.
    pub fn of(x: &SparseColumns) -> Self {
        DesignShape {
            n_rows: x.n_rows,
            column_nnz: x
                .column_starts
                .windows(2)
                .map(|w| (w[1] - w[0]) as u32)
                .collect(),
        }
    }

    /// Columns.
    pub fn n_columns(&self) -> usize {
        self.column_nnz.len()
    }

    /// The non-zeros of the columns `columns`.
    pub fn nnz(&self, columns: Range<usize>) -> u64 {
        self.column_nnz[columns].iter().map(|&c| u64::from(c)).sum()
    }
}

/// One node's columns of the design and what it needs of the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnShare {
    /// The whole design's shape.
    pub shape: DesignShape,
    /// The columns kept.
    pub columns: Range<usize>,
    /// Those columns (all rows), renumbered from 0.
    pub x: SparseColumns,
    /// `y`, centred with `fit_intercept` (as [`LassoSettings::load`] returns it).
    pub y: Vec<f32>,
    /// [`LassoSettings::lambda_max`] of the whole design.
    pub lambda_max: f64,
}

impl ColumnShare {
    /// What every node's share of one design has in common, digested: the shape, `y` and
    /// `lambda_max` (which every value of the design enters). Nodes compare it before the
    /// first round ([`crate::kit::WorkerHalf::data_digest`]).
    pub fn digest(&self) -> u64 {
        let mut d = ReadDigest::default();
        d.add(self.shape.n_rows as u64);
        d.add(self.shape.column_nnz.len() as u64);
        self.shape
            .column_nnz
            .iter()
            .for_each(|&c| d.add(u64::from(c)));
        self.y.iter().for_each(|v| d.add(u64::from(v.to_bits())));
        d.add(self.lambda_max.to_bits());
        d.value()
    }
}

/// Builds a share's CSC column by column.
struct ShareBuilder {
    columns: Range<usize>,
    x: SparseColumns,
}

impl ShareBuilder {
    fn new(shape: &DesignShape, columns: Range<usize>) -> Self {
        let nnz = shape.nnz(columns.clone()) as usize;
        let mut column_starts = Vec::with_capacity(columns.len() + 1);
        column_starts.push(0);
        ShareBuilder {
            x: SparseColumns {
                n_rows: shape.n_rows,
                column_starts,
                row_indices: Vec::with_capacity(nnz),
                values: Vec::with_capacity(nnz),
            },
            columns,
        }
    }
}

/// Refuses a pick outside the design's columns.
pub(crate) fn check_pick(shape: &DesignShape, columns: &Range<usize>) -> Result<(), StradsError> {
    if columns.start > columns.end || columns.end > shape.n_columns() {
        return Err(StradsModelError::InvalidConfig(format!(
            "column share {columns:?} outside the design's 0..{} columns",
            shape.n_columns()
        ))
        .into());
    }
    Ok(())
}

impl LassoSettings {
    /// This node's columns of the design, `pick`ed from the whole design's shape, with `y`
    /// and the whole design's `lambda_max`. The sparse synthetic design and LIBSVM files
    /// never exist whole on the node (memory: the share, `y`, and per column a count, plus
    /// for a file two `f64` accumulators); the dense synthetic design is built whole first.
    pub fn load_column_share(
        &self,
        pick: impl FnOnce(&DesignShape) -> Result<Range<usize>, StradsError>,
    ) -> Result<ColumnShare, StradsError> {
        if self.data.is_some() || self.sparse_params().is_some() {
            return self.load_column_share_labelled(pick, |y| Ok(self.centred_labels(y)));
        }
        let (x, y) = self.load()?;
        let shape = DesignShape::of(&x);
        let columns = pick(&shape)?;
        check_pick(&shape, &columns)?;
        let lambda_max = self.lambda_max(&x, &y);
        Ok(ColumnShare {
            x: x.columns(columns.clone()),
            shape,
            columns,
            y,
            lambda_max,
        })
    }

    /// [`Self::load_column_share`] of a LIBSVM file or the sparse synthetic design, with
    /// its labels made by `labels` from the file's labels or the design's response
    /// (`lambda_max` is computed against them): the Lasso centres them with
    /// `fit_intercept`, logistic regression checks them and takes their signs. `None`
    /// (the dense synthetic design) is refused: it is built whole.
    pub fn load_column_share_labelled(
        &self,
        pick: impl FnOnce(&DesignShape) -> Result<Range<usize>, StradsError>,
        labels: impl FnOnce(Vec<f32>) -> Result<Vec<f32>, StradsError>,
    ) -> Result<ColumnShare, StradsError> {
        if let (None, Some(params)) = (&self.data, self.sparse_params()) {
            return self.synthetic_share(&params, pick, labels);
        }
        if let Some(path) = &self.data {
            return self.file_share(path, pick, labels);
        }
        Err(StradsModelError::InvalidConfig(
            "a column share is read from a LIBSVM file or the sparse synthetic design".into(),
        )
        .into())
    }

    /// `y` centred with `fit_intercept`, as [`LassoSettings::load`] does.
    fn centred_labels(&self, y: Vec<f32>) -> Vec<f32> {
        if !self.fit_intercept {
            return y;
        }
        let mean = label_mean(&y, y.len());
        y.iter().map(|v| v - mean).collect()
    }

    /// `Some((n, sum y))` with `fit_intercept`: the centring of [`column_correlation`].
    fn centring(&self, y: &[f32]) -> Option<(f64, f64)> {
        self.fit_intercept
            .then(|| (y.len().max(1) as f64, y.iter().map(|&v| f64::from(v)).sum()))
    }

    fn synthetic_share(
        &self,
        params: &SparseLassoParams,
        pick: impl FnOnce(&DesignShape) -> Result<Range<usize>, StradsError>,
        labels: impl FnOnce(Vec<f32>) -> Result<Vec<f32>, StradsError>,
    ) -> Result<ColumnShare, StradsError> {
        let mut generator = SparseLassoColumns::new(params)?;
        let shape = DesignShape {
            n_rows: params.n_samples,
            column_nnz: vec![generator.nnz_per_column() as u32; params.n_features],
        };
        let columns = pick(&shape)?;
        check_pick(&shape, &columns)?;
        let y = labels(generator.labels())?;
        let centring = self.centring(&y);
        let mut share = ShareBuilder::new(&shape, columns);
        let mut lambda_max = 0.0f64;
        for j in 0..params.n_features {
            let (rows, values) = generator.column(j);
            lambda_max = lambda_max.max(column_correlation(rows, values, &y, centring));
            if share.columns.contains(&j) {
                share.x.row_indices.extend_from_slice(rows);
                share.x.values.extend_from_slice(values);
                share.x.column_starts.push(share.x.row_indices.len());
            }
        }
        Ok(ColumnShare {
            shape,
            columns: share.columns,
            x: share.x,
            y,
            lambda_max,
        })
    }

    /// Two passes over the file: labels and column counts, then this node's columns and
    /// every column's `x_j . y` (and sum, with `fit_intercept`), accumulated in row order:
    /// the order of the whole design's CSC columns, so the sums are its sums.
    fn file_share(
        &self,
        path: &Path,
        pick: impl FnOnce(&DesignShape) -> Result<Range<usize>, StradsError>,
        make_y: impl FnOnce(Vec<f32>) -> Result<Vec<f32>, StradsError>,
    ) -> Result<ColumnShare, StradsError> {
        // Held across both passes: one parse, shared with this process's other workers.
        let _parsed_once = petrel_ml::data::load_libsvm_shared(path).ok();
        let (mut labels, mut column_nnz) = (Vec::new(), Vec::<u32>::new());
        visit_libsvm(path, |label, row| {
            labels.push(label);
            if let Some(&last) = row.indices.last()
                && last as usize >= column_nnz.len()
            {
                column_nnz.resize(last as usize + 1, 0);
            }
            for &j in &row.indices {
                column_nnz[j as usize] += 1;
            }
            Ok(())
        })?;
        super::check_nonempty(path, labels.len(), column_nnz.len())?;
        let shape = DesignShape {
            n_rows: labels.len(),
            column_nnz,
        };
        let columns = pick(&shape)?;
        check_pick(&shape, &columns)?;
        // The second read must see the same labels (its columns are checked by the counts).
        let first_labels = labels.clone();
        let y = make_y(labels)?;
        let centring = self.centring(&y);
        let d = shape.n_columns();
        let mut dots = vec![0.0f64; d];
        let mut sums = vec![0.0f64; if centring.is_some() { d } else { 0 }];
        // The share's CSC, sized by the counts; `next`: each kept column's next slot.
        let mut column_starts = Vec::with_capacity(columns.len() + 1);
        column_starts.push(0usize);
        for j in columns.clone() {
            column_starts
                .push(column_starts[column_starts.len() - 1] + shape.column_nnz[j] as usize);
        }
        let nnz = column_starts[columns.len()];
        let mut next = column_starts[..columns.len()].to_vec();
        let mut x = SparseColumns {
            n_rows: shape.n_rows,
            column_starts,
            row_indices: vec![0; nnz],
            values: vec![0.0; nnz],
        };
        let changed = || {
            StradsError::from(MlError::ChangedWhileRead {
                path: path.to_path_buf(),
            })
        };
        let mut i = 0usize;
        let mut inconsistent = false;
        visit_libsvm(path, |label, row| {
            let (Some(&y_i), Some(&first)) = (y.get(i), first_labels.get(i)) else {
                inconsistent = true;
                return Ok(());
            };
            if label.to_bits() != first.to_bits() {
                inconsistent = true;
                return Ok(());
            }
            let y_i = f64::from(y_i);
            for (&j, &v) in row.indices.iter().zip(&row.values) {
                let j = j as usize;
                let Some(dot) = dots.get_mut(j) else {
                    inconsistent = true;
                    return Ok(());
                };
                *dot += f64::from(v) * y_i;
                if let Some(sum) = sums.get_mut(j) {
                    *sum += f64::from(v);
                }
                if columns.contains(&j) {
                    let local = j - columns.start;
                    let slot = next[local];
                    if slot >= x.column_starts[local + 1] {
                        inconsistent = true;
                        return Ok(());
                    }
                    x.row_indices[slot] = i as u32;
                    x.values[slot] = v;
                    next[local] += 1;
                }
            }
            i += 1;
            Ok(())
        })?;
        let filled = next
            .iter()
            .zip(&x.column_starts[1..])
            .all(|(n, end)| n == end);
        if inconsistent || i != y.len() || !filled {
            return Err(changed());
        }
        let lambda_max = (0..d)
            .map(|j| {
                let sum = sums.get(j).copied().unwrap_or(0.0);
                super::finish_correlation(dots[j], sum, centring)
            })
            .fold(0.0, f64::max);
        Ok(ColumnShare {
            shape,
            columns,
            x,
            y,
            lambda_max,
        })
    }
}

impl LassoSettings {
    /// The column means of the whole design and its mean label, as the whole design's
    /// `column_means` computes them, in one pass that keeps only the means.
    pub(super) fn streamed_column_means(&self) -> Result<(Vec<f64>, f32), StradsError> {
        if let (None, Some(params)) = (&self.data, self.sparse_params()) {
            let mut generator = SparseLassoColumns::new(&params)?;
            let n = params.n_samples.max(1) as f64;
            let y_mean = label_mean(&generator.labels(), params.n_samples);
            let means = (0..params.n_features)
                .map(|j| {
                    let values = generator.column(j).1;
                    values.iter().map(|&v| f64::from(v)).sum::<f64>() / n
                })
                .collect();
            return Ok((means, y_mean));
        }
        let Some(path) = &self.data else {
            let (x, y) = self.load_uncentred()?;
            return Ok(column_means(&x, &y));
        };
        // Sums start at -0.0, as `Iterator::sum` of floats does, so that an empty column's
        // mean is the whole design's bit for bit.
        let (mut rows, mut y_sum, mut sums) = (0usize, -0.0f64, Vec::<f64>::new());
        visit_libsvm(path, |label, row| {
            rows += 1;
            y_sum += f64::from(label);
            if let Some(&last) = row.indices.last()
                && last as usize >= sums.len()
            {
                sums.resize(last as usize + 1, -0.0);
            }
            for (&j, &v) in row.indices.iter().zip(&row.values) {
                sums[j as usize] += f64::from(v);
            }
            Ok(())
        })?;
        super::check_nonempty(path, rows, sums.len())?;
        let n = rows as f64;
        let means = sums.iter().map(|s| s / n).collect();
        Ok((means, (y_sum / n) as f32))
    }
}
