//! The logistic job's data: a LIBSVM file with binary labels, or a synthetic problem, and
//! the default `lambda`.

use super::super::lasso::config::check_pick;
use super::super::lasso::{ColumnShare, DesignShape, LassoSettings};
use crate::core::StradsModelError;
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};
use std::ops::Range;

/// `(X by columns, labels)` from the job's LIBSVM file or a synthetic problem: with
/// `synthetic.nnz_per_column > 0` the Lasso's sparse correlated design with labels `y > 0`,
/// otherwise a dense separable one (`synthetic.n_samples x synthetic.n_features`, seed
/// `synthetic.seed`).
pub fn load(job: &LassoSettings) -> Result<(SparseColumns, Vec<f32>), StradsError> {
    if let Some(path) = &job.data {
        let (x, labels) = job.load()?;
        check_binary_labels(path, &labels)?;
        return Ok((x, labels));
    }
    let s = &job.synthetic;
    if s.nnz_per_column > 0 {
        // The Lasso's sparse correlated design (any size), labelled by the sign of its
        // response: a sparse linear model's classes.
        let (x, y) = job.load_uncentred()?;
        let labels = y.iter().map(|&v| if v > 0.0 { 1.0 } else { 0.0 }).collect();
        return Ok((x, labels));
    }
    let p = separable_classification(&ClassificationParams {
        n_samples: s.n_samples,
        n_features: s.n_features,
        n_classes: 2,
        margin: 0.5,
        seed: s.seed,
    })?;
    Ok((p.dataset.to_columns(), p.dataset.labels))
}

/// Logistic regression needs two classes written `0`/`1` or `-1`/`+1`; anything else
/// (regression targets, several classes) is refused instead of thresholded at 0.
pub fn check_binary_labels(path: &std::path::Path, labels: &[f32]) -> Result<(), StradsError> {
    let refuse = |reason: String| {
        StradsModelError::InvalidConfig(format!("{}: {reason}", path.display())).into()
    };
    if let Some((row, l)) = labels
        .iter()
        .enumerate()
        .find(|(_, l)| ![-1.0f32, 0.0, 1.0].contains(*l))
    {
        return Err(refuse(format!(
            "row {}: label {l} is not a binary class; logistic regression needs labels 0/1 or -1/+1 (use lasso for regression targets, ps-lr for several classes)",
            row + 1
        )));
    }
    let has = |v: f32| labels.contains(&v);
    if has(0.0) && has(-1.0) {
        return Err(refuse(
            "labels mix 0 and -1; write the negative class one way (0/1 or -1/+1)".into(),
        ));
    }
    if !has(1.0) || !(has(0.0) || has(-1.0)) {
        return Err(refuse(
            "all labels are of one class; logistic regression needs both".into(),
        ));
    }
    Ok(())
}

/// The job's `lambda`, or `lambda_fraction` of `lambda_max`, the smallest lambda with an
/// all-zero solution for +-1 labels: `max_j |x_j^T y| / 2` for the logistic loss,
/// `2 max_j |x_j^T y|` for the squared hinge.
pub fn logistic_lambda(x: &SparseColumns, labels: &[f32], job: &LassoSettings) -> f32 {
    logistic_lambda_from_max(job, super::super::lasso::lambda_max(x, &signs(labels)))
}

/// [`logistic_lambda`] given `max_j |x_j^T y|` with `y` the labels' signs.
pub fn logistic_lambda_from_max(job: &LassoSettings, lambda_max: f64) -> f32 {
    let slope = job.loss.unwrap_or_default().slope_at_zero();
    job.lambda
        .unwrap_or((job.lambda_fraction * lambda_max * slope) as f32)
}

/// Labels `> 0` as +1, the others as -1.
fn signs(labels: &[f32]) -> Vec<f32> {
    labels
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
        .collect()
}

/// This node's columns of the job's data, `pick`ed from the design's shape, with the
/// labels as +-1 and `lambda_max` against them (the Gauss-Seidel solver's share). A
/// LIBSVM file and the sparse synthetic design never exist whole on the node; the dense
/// synthetic problem is built whole first. The labels, `lambda_max` and columns are bit
/// for bit those of [`load`] and [`logistic_lambda`].
pub fn load_share(
    job: &LassoSettings,
    pick: impl FnOnce(&DesignShape) -> Result<Range<usize>, StradsError>,
) -> Result<ColumnShare, StradsError> {
    if job.data.is_some() || job.synthetic.nnz_per_column > 0 {
        return job.load_column_share_labelled(pick, |raw| {
            if let Some(path) = &job.data {
                check_binary_labels(path, &raw)?;
            }
            Ok(signs(&raw))
        });
    }
    let (x, labels) = load(job)?;
    let shape = DesignShape::of(&x);
    let columns = pick(&shape)?;
    check_pick(&shape, &columns)?;
    let y = signs(&labels);
    Ok(ColumnShare {
        lambda_max: super::super::lasso::lambda_max(&x, &y),
        x: x.columns(columns.clone()),
        shape,
        columns,
        y,
    })
}
