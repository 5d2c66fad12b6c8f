//! The plots of `bench managed`: each variant's curve against time and against bytes.

use super::{ManagedApp, ManagedRun};
use crate::BenchError;
use petrel::train::plot::{Series, line_plot};
use std::path::Path;

/// Each variant's curve against seconds or (`by_bytes`) MB on the links, and the target.
pub(super) fn plot(
    path: &Path,
    runs: &[ManagedRun],
    target: f64,
    by_bytes: bool,
    app: ManagedApp,
) -> Result<(), BenchError> {
    let x_of = |r: &ManagedRun, p: &(f64, u64, f64)| {
        if by_bytes {
            r.both_ways_per_clock * p.1 as f64 / 1e6
        } else {
            p.0
        }
    };
    let max_x = runs
        .iter()
        .flat_map(|r| r.curve.iter().map(move |p| x_of(r, p)))
        .fold(1e-3f64, f64::max);
    let mut series: Vec<Series> = runs
        .iter()
        .map(|r| Series {
            name: r.variant.clone(),
            points: r.curve.iter().map(|p| (x_of(r, p), p.2)).collect(),
        })
        .collect();
    series.push(Series {
        name: "target".into(),
        points: vec![(0.0, target), (max_x, target)],
    });
    let (app_name, y_desc) = match app {
        ManagedApp::Mf => ("MF", "test RMSE"),
        ManagedApp::Lda => ("LDA", "log-likelihood per token"),
    };
    line_plot(
        path,
        &format!("{app_name} on the PS over shaped links: managed communication"),
        if by_bytes {
            "MB on the links, both ways (bytes per clock x clock)"
        } else {
            "seconds"
        },
        y_desc,
        &series,
        false,
    )
    .map_err(BenchError::plot(path))
}
