//! Progress of a `petrel train` run: the apps publish each point of their history curve
//! (`petrel_job_progress` in the observe registry: objective, RMSE, log-likelihood,
//! loss); a thread of the CLI reads the newest point and shows it as an indicatif bar on
//! standard error when that is a terminal, or as an INFO line at most every
//! [`LINE_EVERY`] otherwise. Runs whose nodes are processes (`--transport processes`,
//! `petrel run --processes`) publish in those processes: there every node started by a
//! launcher runs [`TrainProgress::for_launched_node`], whose INFO lines the launcher
//! relays with the node's name in front.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// The longest gap between two INFO lines when standard error is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

const POLL: Duration = Duration::from_millis(200);

/// The newest point of the job's curve.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    metric: String,
    value: f64,
    points: u64,
}

/// The newest point in the observe registry (the curve with the most points).
fn newest() -> Option<Point> {
    let series = petrel_observe::scrape::parse_text(&petrel_observe::encode_text());
    let key = |s: &petrel_observe::scrape::Series| {
        (
            s.label("node").unwrap_or("").to_string(),
            s.label("metric").unwrap_or("").to_string(),
        )
    };
    series
        .iter()
        .filter(|s| s.name.starts_with("petrel_job_progress_points"))
        .max_by(|a, b| a.value.total_cmp(&b.value))
        .and_then(|count| {
            let k = key(count);
            let value = series
                .iter()
                .find(|s| s.name == "petrel_job_progress" && key(s) == k)?
                .value;
            Some(Point {
                metric: k.1,
                value,
                points: count.value as u64,
            })
        })
}

/// How often a node process started by a launcher looks at its registry (it only
/// writes lines, at most every [`LINE_EVERY`]).
const NODE_POLL: Duration = Duration::from_secs(1);

/// Shows a run's progress until dropped (then one last line).
pub struct TrainProgress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TrainProgress {
    /// Starts showing `app`'s progress; `passes` is the number of curve points a full run
    /// records, when known (a bar with an estimate of the time left), else a spinner.
    pub fn start(app: &str, passes: Option<u64>) -> TrainProgress {
        let lines_only = !std::io::stderr().is_terminal();
        Self::spawn(app.to_string(), passes, lines_only, POLL)
    }

    /// In a node process started by a launcher (whose standard error the launcher relays):
    /// INFO lines of the points this node publishes (a STRADS scheduler, a PS monitor;
    /// other nodes have none and stay silent), labelled `label`.
    pub fn for_launched_node(label: String) -> TrainProgress {
        Self::spawn(label, None, true, NODE_POLL)
    }

    fn spawn(label: String, passes: Option<u64>, lines_only: bool, poll: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        // Points of an earlier run in this process are not this run's.
        let before = newest().map_or(0, |p| p.points);
        let thread = std::thread::Builder::new()
            .name("train-progress".into())
            .spawn(move || show(&label, passes, before, &flag, lines_only, poll))
            .ok();
        TrainProgress { stop, thread }
    }
}

impl Drop for TrainProgress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn show(
    app: &str,
    passes: Option<u64>,
    before: u64,
    stop: &AtomicBool,
    lines_only: bool,
    poll: Duration,
) {
    let started = Instant::now();
    let bar = (!lines_only).then(|| {
        let bar = match passes {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, about {eta} left)",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{prefix} {spinner} {pos} points, {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_prefix(app.to_string());
        bar
    });
    // Without a terminal: the first point, then at most one line per LINE_EVERY, and
    // the last point when the run ends.
    let mut shown: Option<Point> = None;
    let mut last_line = Instant::now();
    loop {
        let done = stop.load(Ordering::Relaxed);
        if let Some(p) = newest().filter(|p| p.points > before) {
            let pos = p.points - before;
            match &bar {
                Some(bar) => {
                    bar.set_position(pos);
                    bar.set_message(format!("{} {:.6}", p.metric, p.value));
                }
                None => {
                    let due = shown.is_none() || done || last_line.elapsed() >= LINE_EVERY;
                    if due && shown.as_ref() != Some(&p) {
                        info_line(app, passes, pos, &p, started.elapsed());
                        last_line = Instant::now();
                        shown = Some(p);
                    }
                }
            }
        }
        if done {
            break;
        }
        // Woken early by the drop, so the last line comes as soon as the run ends.
        std::thread::park_timeout(poll);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

/// One INFO line: the point, and with a known number of passes the time left at the
/// pace so far.
fn info_line(app: &str, passes: Option<u64>, pos: u64, p: &Point, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    let left = passes
        .filter(|&n| pos > 0 && pos < n)
        .map(|n| format!(", about {:.0} s left", secs / pos as f64 * (n - pos) as f64))
        .unwrap_or_default();
    let of = passes.map(|n| format!("/{n}")).unwrap_or_default();
    tracing::info!(
        "{app} progress: point {pos}{of}, {} {:.6}, {secs:.1} s{left}",
        p.metric,
        p.value
    );
}

/// The history figures `--plot` draws (the ones that say how training goes; counters and
/// accuracies are left to `history.csv`).
const PLOTTED: [&str; 6] = [
    "objective",
    "heldout_objective",
    "train_rmse",
    "test_rmse",
    "log_loss",
    "loglik_per_token",
];

/// `--plot FILE.svg`: draws the run's `history` (from `out/metrics.json`) against seconds,
/// one line per figure among objective, heldout_objective (lasso and logistic with
/// `--test-data`: the training objective's formula on the test rows), train_rmse,
/// test_rmse (held out), log_loss (held out) and loglik_per_token. Returns the figures
/// drawn.
pub fn plot_history(
    out: &std::path::Path,
    svg: &std::path::Path,
) -> Result<Vec<String>, super::StradsTrainError> {
    let m: petrel_ml::job::RunMetrics = super::read_json(&out.join("metrics.json"))?;
    let series: Vec<crate::bench::strads_plot::Series> = PLOTTED
        .iter()
        .filter_map(|name| {
            let points: Vec<(f64, f64)> = m
                .history
                .iter()
                .filter_map(|r| r.values.get(*name).map(|v| (r.seconds, *v)))
                .collect();
            (!points.is_empty()).then(|| crate::bench::strads_plot::Series {
                name: (*name).to_string(),
                points,
            })
        })
        .collect();
    if series.is_empty() {
        return Err(super::StradsTrainError::Usage(
            "--plot: the run's history has no figure to draw",
        ));
    }
    crate::bench::strads_plot::line_plot(
        svg,
        &format!("petrel train {}", m.app),
        "seconds",
        "figure",
        &series,
        false,
    )?;
    Ok(series.into_iter().map(|s| s.name).collect())
}
