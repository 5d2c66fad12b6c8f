//! SVG line plots (plotters) for the STRADS benchmarks.

use crate::CliError;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One named curve.
pub struct Series {
    /// The legend's label.
    pub name: String,
    /// `(x, y)` points.
    pub points: Vec<(f64, f64)>,
}

/// `path` made absolute (the benchmarks' output directories).
pub fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(CliError::io(path))
}

/// Writes an SVG with one line per series (`log_y`: a log y axis, dropping y <= 0).
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(CliError::io(dir))?;
    }
    let keep = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!log_y || y > 0.0);
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied().filter(keep))
        .collect();
    if all.is_empty() {
        return Err(CliError::Plot {
            path: path.to_path_buf(),
            reason: "nothing to plot".into(),
        });
    }
    let (x_min, x_max) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y_min, y_max) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let x_range = x_min..(x_max + (x_max - x_min).abs() * 0.02 + 1e-12);
    let err = |e: &dyn std::fmt::Display| CliError::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colors = [&RED, &BLUE, &GREEN, &MAGENTA, &CYAN, &BLACK];
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()
                .map_err(|e| err(&e))?;
            for (i, s) in series.iter().enumerate() {
                let color = colors[i % colors.len()];
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied().filter(keep),
                        color,
                    ))
                    .map_err(|e| err(&e))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    if log_y {
        draw!(
            builder
                .build_cartesian_2d(x_range, (y_min * 0.8..y_max * 1.25).log_scale())
                .map_err(|e| err(&e))?
        );
    } else {
        let pad = (y_max - y_min).abs() * 0.05 + 1e-12;
        draw!(
            builder
                .build_cartesian_2d(x_range, (y_min - pad)..(y_max + pad))
                .map_err(|e| err(&e))?
        );
    }
    root.present().map_err(|e| err(&e))
}
