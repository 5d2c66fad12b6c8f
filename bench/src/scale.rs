//! Steps the scale benches share: table cells of optional figures, the spread of a
//! series, the baseline's table row and the plot.

use petrel::train::StradsTrainError;
use petrel::train::plot::{Series, line_plot};
use std::path::Path;

/// `v` with `digits` decimals, or `-` when there is none.
pub(crate) fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

/// The largest over the smallest `y` of `points` (1 is flat); none without points or
/// when the smallest is not positive.
pub(crate) fn spread(points: &[(f64, f64)]) -> Option<f64> {
    let (lo, hi) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    (!points.is_empty() && lo > 0.0).then(|| hi / lo)
}

/// `lo-hi` of `values` with two decimals, or `-` when there are none.
pub(crate) fn range_cell(values: &[f64]) -> String {
    let lo = values.iter().copied().min_by(f64::total_cmp);
    let hi = values.iter().copied().max_by(f64::total_cmp);
    lo.zip(hi)
        .map_or("-".into(), |(lo, hi)| format!("{lo:.2}-{hi:.2}"))
}

/// The single-threaded baseline's row of a coordinate-descent scale table (`columns`
/// cells, `-` past the ratio).
pub(crate) fn baseline_row(
    label: &str,
    nnz: usize,
    baseline_s: f64,
    updates: u64,
    columns: usize,
) -> Vec<String> {
    let mut row = vec![
        label.to_string(),
        nnz.to_string(),
        "baseline".into(),
        format!("{baseline_s:.3}"),
        updates.to_string(),
        format!("{:.3}", 1e6 * baseline_s / updates.max(1) as f64),
        "1".into(),
    ];
    row.resize(columns, "-".into());
    row
}

/// Writes the line plot to `path`, says where, and returns the path as the JSON gives it.
pub(crate) fn write_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<String, StradsTrainError> {
    line_plot(path, title, x_label, y_label, series, log_y)?;
    println!("plot: {}", path.display());
    Ok(path.display().to_string())
}
