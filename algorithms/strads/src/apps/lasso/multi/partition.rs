//! The partition of the coefficients over the schedulers: contiguous column ranges of
//! about equal weight (see the module docs of [`super`]).

use crate::error::StradsError;
use petrel_ml::data::SparseColumns;
use std::ops::Range;

/// Weight of each column for partitioning: `nnz(x_j) + 1` (the cost of a push, plus one
/// so that empty columns still count).
pub fn column_weights(x: &SparseColumns) -> Vec<u64> {
    x.column_starts
        .windows(2)
        .map(|w| column_weight((w[1] - w[0]) as u64))
        .collect()
}

/// The weight of a column of `nnz` non-zeros (see [`column_weights`]).
pub fn column_weight(nnz: u64) -> u64 {
    nnz + 1
}

/// Cuts columns `0..weights.len()` into `schedulers` non-empty contiguous ranges of about
/// equal total weight: boundary `k` is the first column where the prefix weight reaches
/// `k/S` of the total, moved as little as needed to keep every range non-empty. Each
/// range's weight is then within one column's weight of `total / S`.
pub fn partition_columns(
    weights: &[u64],
    schedulers: usize,
) -> Result<Vec<Range<usize>>, StradsError> {
    partition_weighted(weights.iter().copied(), schedulers)
}

/// [`partition_columns`] of the weights an iterator yields, in two passes over it and
/// memory for the boundaries only (a prefix-sum array was 24 MB at 1M columns).
pub fn partition_weighted<I>(
    weights: I,
    schedulers: usize,
) -> Result<Vec<Range<usize>>, StradsError>
where
    I: IntoIterator<Item = u64>,
    I::IntoIter: Clone,
{
    let weights = weights.into_iter();
    let (d, total) = weights
        .clone()
        .fold((0usize, 0u128), |(d, t), w| (d + 1, t + u128::from(w)));
    super::check_count(schedulers)?;
    if schedulers > d {
        return Err(StradsError::TooManySchedulers {
            schedulers,
            features: d,
        });
    }
    // One walk: the targets grow with k, so each boundary starts where the last stopped.
    let mut rest = weights;
    let (mut first_reaching, mut prefix) = (0usize, 0u128);
    let mut bounds = vec![0usize];
    for k in 1..schedulers {
        let target = total * k as u128 / schedulers as u128;
        // First boundary b (columns 0..b) whose prefix weight reaches the target.
        while prefix < target {
            let Some(w) = rest.next() else { break };
            prefix += u128::from(w);
            first_reaching += 1;
        }
        let lo = bounds[k - 1] + 1;
        let hi = d - (schedulers - k);
        bounds.push(first_reaching.clamp(lo, hi));
    }
    bounds.push(d);
    Ok(bounds.windows(2).map(|w| w[0]..w[1]).collect())
}
