//! The logistic job's data: a LIBSVM file with binary labels, or a synthetic problem, and
//! the default `lambda`.

use super::super::lasso::LassoJob;
use crate::core::StradsModelError;
use crate::error::StradsError;
use petrel_ml::data::SparseColumns;
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};

/// `(X by columns, labels)` from the job's LIBSVM file or a synthetic problem: with
/// `synthetic.nnz_per_column > 0` the Lasso's sparse correlated design with labels `y > 0`,
/// otherwise a dense separable one (`synthetic.n_samples x synthetic.n_features`, seed
/// `synthetic.seed`).
pub fn load(job: &LassoJob) -> Result<(SparseColumns, Vec<f32>), StradsError> {
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

/// The job's `lambda`, or `lambda_fraction` of `max_j |x_j^T y| / 2` (the smallest lambda
/// with an all-zero solution for +-1 labels).
pub fn logistic_lambda(x: &SparseColumns, labels: &[f32], job: &LassoJob) -> f32 {
    let signs: Vec<f32> = labels
        .iter()
        .map(|&l| if l > 0.0 { 1.0 } else { -1.0 })
        .collect();
    job.lambda
        .unwrap_or((job.lambda_fraction * super::super::lasso::lambda_max(x, &signs) / 2.0) as f32)
}
