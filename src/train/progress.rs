//! Progress of a `petrel train` run: the apps publish their curve's points in the observe
//! registry; a thread shows the newest as a bar or INFO lines. A launched node writes INFO
//! lines, or [`ProgressReport`]s ([`REPORTS_ENV`]) for the launcher's [`JobProgress`] bar.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// How often a launched node writing INFO lines looks at its registry.
const NODE_POLL: Duration = Duration::from_secs(1);

/// Set to `1` by a launcher that draws a bar: its nodes write [`ProgressReport`] lines.
pub const REPORTS_ENV: &str = "PETREL_PROGRESS_REPORTS";

/// The points a full run of the job a live [`TrainProgress`] shows records (0: unknown).
static EXPECTED_POINTS: AtomicU64 = AtomicU64::new(0);

/// The points a full run of the job this process shows records, when known.
pub fn expected_points() -> Option<u64> {
    Some(EXPECTED_POINTS.load(Ordering::Relaxed)).filter(|&n| n > 0)
}

/// The start of a progress report line.
const REPORT_PREFIX: &str = "petrel-progress v1";

/// A point of a launched node's curve: `petrel-progress v1 points=N metric=M value=X label=L`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressReport {
    /// Who publishes the point (the node's roles, e.g. `strads-lda-scheduler`).
    pub label: String,
    /// Points of the curve so far.
    pub points: u64,
    /// The figure (`objective`, `loglik_per_token`, ...).
    pub metric: String,
    /// Its newest value.
    pub value: f64,
}

/// A field's text with no blank in it (a blank would end the field).
fn field(text: &str) -> String {
    let t: String = text
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    if t.is_empty() { "-".into() } else { t }
}

impl ProgressReport {
    /// The line (blanks in the label or metric become `_`; an empty label is left out).
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "{REPORT_PREFIX} points={} metric={} value={}",
            self.points,
            field(&self.metric),
            self.value,
        );
        if !self.label.is_empty() {
            line.push_str(" label=");
            line.push_str(&field(&self.label));
        }
        line
    }

    /// The report on `line`, or `None` when the line is not a well-formed one.
    pub fn parse(line: &str) -> Option<ProgressReport> {
        let rest = line.trim_end().strip_prefix(REPORT_PREFIX)?;
        if !rest.is_empty() && !rest.starts_with(' ') {
            return None;
        }
        let (mut points, mut metric, mut value, mut label) = (None, None, None, None);
        for token in rest.split_whitespace() {
            let (key, val) = token.split_once('=')?;
            match key {
                "points" => points = Some(val.parse::<u64>().ok()?),
                "metric" => metric = Some(val.to_string()),
                "value" => value = Some(val.parse::<f64>().ok()?),
                "label" => label = Some(val.to_string()),
                _ => {}
            }
        }
        Some(ProgressReport {
            label: label.unwrap_or_default(),
            points: points?,
            metric: metric.filter(|m| !m.is_empty())?,
            value: value?,
        })
    }
}

/// A launcher's view of its job: each node's newest [`ProgressReport`], nodes finished.
#[derive(Debug, Clone)]
pub struct JobProgress {
    nodes: usize,
    finished: usize,
    total: Option<u64>,
    /// Each node's newest report, with the order it arrived in.
    reports: Vec<(String, ProgressReport, u64)>,
    arrivals: u64,
}

/// The width of the bar drawn in [`JobProgress::message`].
const BAR_WIDTH: usize = 16;

impl JobProgress {
    /// A job of `nodes` nodes whose full run records `total` points, when known.
    pub fn new(nodes: usize, total: Option<u64>) -> JobProgress {
        JobProgress {
            nodes,
            finished: 0,
            total: total.filter(|&n| n > 0),
            reports: Vec::new(),
            arrivals: 0,
        }
    }

    /// A line of `node`'s stderr: `true` when it was a report (then not to be printed).
    pub fn offer(&mut self, node: &str, line: &str) -> bool {
        let Some(report) = ProgressReport::parse(line) else {
            return false;
        };
        self.arrivals += 1;
        let seq = self.arrivals;
        match self.reports.iter_mut().find(|(n, _, _)| n == node) {
            Some(slot) => *slot = (node.to_string(), report, seq),
            None => self.reports.push((node.to_string(), report, seq)),
        }
        true
    }

    /// One more node exited successfully.
    pub fn node_finished(&mut self) {
        self.finished = (self.finished + 1).min(self.nodes);
    }

    /// The point shown, with its node: the node with the most points, the newest on a tie.
    pub fn current(&self) -> Option<(&str, &ProgressReport)> {
        self.reports
            .iter()
            .max_by_key(|(_, r, seq)| (r.points, *seq))
            .map(|(n, r, _)| (n.as_str(), r))
    }

    /// The bar's text `elapsed` after the launch, most important first.
    pub fn message(&self, elapsed: Duration) -> String {
        let nodes = format!("{}/{} nodes finished", self.finished, self.nodes);
        let Some((node, r)) = self.current() else {
            return nodes;
        };
        let label = if r.label.is_empty() { node } else { &r.label };
        let figure = format!("{} {:.6}", r.metric, r.value);
        match self.total {
            Some(total) => {
                let pos = r.points.min(total);
                let filled = (pos as usize * BAR_WIDTH) / total as usize;
                let bar = format!("{}{}", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled));
                let left = time_left(elapsed.as_secs_f64(), pos, total);
                format!("[{bar}] {pos}/{total} {figure}{left}; {nodes} ({label})")
            }
            None => format!("point {}, {figure}; {nodes} ({label})", r.points),
        }
    }
}

/// Where a progress thread shows the points.
#[derive(Clone, Copy, PartialEq)]
enum Output {
    /// An indicatif bar (standard error is a terminal).
    Bar,
    /// INFO lines.
    Lines,
    /// [`ProgressReport`] lines on standard error, for the launcher's bar.
    Reports,
}

/// Shows a run's progress until dropped (then one last line).
pub struct TrainProgress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Whether this one set [`EXPECTED_POINTS`] (cleared when dropped).
    expects: bool,
}

impl TrainProgress {
    /// Starts showing `app`'s progress; `passes` (points of a full run) gives a bar and ETA.
    pub fn start(app: &str, passes: Option<u64>) -> TrainProgress {
        let output = if std::io::stderr().is_terminal() {
            Output::Bar
        } else {
            Output::Lines
        };
        EXPECTED_POINTS.store(passes.unwrap_or(0), Ordering::Relaxed);
        let mut p = Self::spawn(app.to_string(), passes, output, POLL);
        p.expects = true;
        p
    }

    /// In a launched node: INFO lines, or [`ProgressReport`] lines with [`REPORTS_ENV`].
    pub fn for_launched_node(label: String) -> TrainProgress {
        if std::env::var_os(REPORTS_ENV).is_some_and(|v| v == "1") {
            Self::spawn(label, None, Output::Reports, POLL)
        } else {
            Self::spawn(label, None, Output::Lines, NODE_POLL)
        }
    }

    fn spawn(label: String, passes: Option<u64>, output: Output, poll: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        // Points of an earlier run in this process are not this run's.
        let before = newest().map_or(0, |p| p.points);
        let thread = std::thread::Builder::new()
            .name("train-progress".into())
            .spawn(move || show(&label, passes, before, &flag, output, poll))
            .ok();
        TrainProgress {
            stop,
            thread,
            expects: false,
        }
    }
}

impl Drop for TrainProgress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if self.expects {
            EXPECTED_POINTS.store(0, Ordering::Relaxed);
        }
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
    output: Output,
    poll: Duration,
) {
    let started = Instant::now();
    let make_bar = || {
        let (bar, template) = match passes {
            Some(n) => (
                ProgressBar::new(n),
                "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, about {eta} left)",
            ),
            None => (
                ProgressBar::new_spinner(),
                "{prefix} {spinner} {pos} points, {msg} ({elapsed})",
            ),
        };
        let style = ProgressStyle::with_template(template);
        let style = style.unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.with_style(style).with_prefix(app.to_string())
    };
    // Drawn from the first point on: a process that only launches nodes draws none.
    let mut bar: Option<ProgressBar> = None;
    // Lines: the first point, at most one per LINE_EVERY, and the last.
    let mut shown: Option<Point> = None;
    let mut last_line = Instant::now();
    loop {
        let done = stop.load(Ordering::Relaxed);
        if let Some(p) = newest().filter(|p| p.points > before) {
            let pos = p.points - before;
            match output {
                Output::Bar => {
                    let bar = bar.get_or_insert_with(make_bar);
                    bar.set_position(pos);
                    bar.set_message(format!("{} {:.6}", p.metric, p.value));
                }
                Output::Reports => {
                    if shown.as_ref() != Some(&p) {
                        let report = ProgressReport {
                            label: app.to_string(),
                            points: pos,
                            metric: p.metric.clone(),
                            value: p.value,
                        };
                        // Not `tracing`, whose filter could drop it.
                        let _ = writeln!(std::io::stderr().lock(), "{}", report.to_line());
                        shown = Some(p);
                    }
                }
                Output::Lines => {
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

/// One INFO line: the point, and the time left when the passes are known.
fn info_line(app: &str, passes: Option<u64>, pos: u64, p: &Point, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    let left = passes.map_or(String::new(), |n| time_left(secs, pos, n));
    let of = passes.map(|n| format!("/{n}")).unwrap_or_default();
    tracing::info!(
        "{app} progress: point {pos}{of}, {} {:.6}, {secs:.1} s{left}",
        p.metric,
        p.value
    );
}

/// `, about N s left` at the pace of `pos` of `total` points in `secs`.
fn time_left(secs: f64, pos: u64, total: u64) -> String {
    if pos == 0 || pos >= total {
        return String::new();
    }
    let left = secs / pos as f64 * (total - pos) as f64;
    format!(", about {left:.0} s left")
}

/// The history figures `--plot` draws (counters and accuracies stay in `history.csv`).
#[cfg(feature = "plot")]
const PLOTTED: [&str; 6] = [
    "objective",
    "heldout_objective",
    "train_rmse",
    "test_rmse",
    "log_loss",
    "loglik_per_token",
];

/// `--plot FILE.svg`: draws the run's history figures (`PLOTTED`) against seconds.
#[cfg(feature = "plot")]
pub fn plot_history(
    out: &std::path::Path,
    svg: &std::path::Path,
) -> Result<Vec<String>, crate::CliError> {
    let m: petrel_ml::job::RunMetrics = super::read_json(&out.join("metrics.json"))?;
    let series: Vec<crate::train::plot::Series> = PLOTTED
        .iter()
        .filter_map(|name| {
            let points: Vec<(f64, f64)> = m
                .history
                .iter()
                .filter_map(|r| r.values.get(*name).map(|v| (r.seconds, *v)))
                .collect();
            (!points.is_empty()).then(|| crate::train::plot::Series {
                name: (*name).to_string(),
                points,
            })
        })
        .collect();
    if series.is_empty() {
        return Err(crate::CliError::Usage(
            "--plot: the run's history has no figure to draw".into(),
        ));
    }
    crate::train::plot::line_plot(
        svg,
        &format!("petrel train {}", m.app),
        "seconds",
        "figure",
        &series,
        false,
    )?;
    Ok(series.into_iter().map(|s| s.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(label: &str, points: u64, value: f64) -> ProgressReport {
        ProgressReport {
            label: label.into(),
            points,
            metric: "loglik_per_token".into(),
            value,
        }
    }

    #[test]
    fn a_report_reads_back_from_its_line() {
        for value in [
            -3.871_234_567_890_123,
            1.0 / 3.0,
            0.0,
            1e-300,
            f64::MAX,
            -0.1,
        ] {
            let r = report("strads-lda-scheduler", 31, value);
            let line = r.to_line();
            assert!(line.starts_with("petrel-progress v1 "), "{line}");
            assert_eq!(ProgressReport::parse(&line), Some(r));
        }
        // Blanks in a label or metric cannot split the fields.
        let mut r = report("a b", 2, 1.5);
        r.metric = "test rmse".into();
        let back = ProgressReport::parse(&r.to_line()).unwrap();
        assert_eq!(
            (back.label.as_str(), back.metric.as_str()),
            ("a_b", "test_rmse")
        );
        // Fields in any order, unknown ones ignored, a trailing \r tolerated.
        let r = ProgressReport::parse(
            "petrel-progress v1 value=2.5 future=x metric=objective points=7\r",
        )
        .unwrap();
        assert_eq!(
            (r.points, r.metric.as_str(), r.value),
            (7, "objective", 2.5)
        );
        assert_eq!(r.label, "");
    }

    #[test]
    fn other_lines_are_not_reports() {
        for line in [
            "",
            "2026-12-04T11:00:00Z  INFO lda progress: point 3, loglik_per_token -4.1",
            "petrel-progress v1",
            "petrel-progress v2 points=1 metric=m value=1",
            "petrel-progress v1x points=1 metric=m value=1",
            "petrel-progress v1 points=-1 metric=m value=1",
            "petrel-progress v1 points=1 metric=m value=abc",
            "petrel-progress v1 points=1 metric= value=1",
            "petrel-progress v1 points=1 value=1",
            "petrel-progress v1 points=1 metric=m",
            "petrel-progress v1 points=1 metric=m value=1 garbage",
            " petrel-progress v1 points=1 metric=m value=1",
            "[w1] petrel-progress v1 points=1 metric=m value=1",
        ] {
            assert_eq!(ProgressReport::parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn the_launcher_bar_shows_the_node_with_the_most_points() {
        let mut job = JobProgress::new(3, Some(31));
        assert_eq!(job.message(Duration::ZERO), "0/3 nodes finished");
        // Log lines are left to be printed.
        assert!(!job.offer("w1", "INFO worker started"));
        assert!(job.current().is_none());
        assert!(job.offer(
            "scheduler",
            &report("strads-lda-scheduler", 10, -4.0).to_line()
        ));
        assert!(job.offer("w1", &report("worker", 2, 9.0).to_line()));
        let (node, r) = job.current().unwrap();
        assert_eq!((node, r.points), ("scheduler", 10));
        assert!(job.offer(
            "scheduler",
            &report("strads-lda-scheduler", 11, -3.9).to_line()
        ));
        assert_eq!(job.current().unwrap().1.value, -3.9);
        job.node_finished();
        // 11 of 31 points in 22 s: 2 s a point, 20 points left.
        assert_eq!(
            job.message(Duration::from_secs(22)),
            "[#####-----------] 11/31 loglik_per_token -3.900000, about 40 s left; \
             1/3 nodes finished (strads-lda-scheduler)"
        );
        // A tie goes to the newest report.
        assert!(job.offer("w2", &report("other", 11, 1.0).to_line()));
        assert_eq!(job.current().unwrap().0, "w2");
        // The end: a full bar, no time left; finished never exceeds the nodes.
        assert!(job.offer(
            "scheduler",
            &report("strads-lda-scheduler", 31, -3.8).to_line()
        ));
        for _ in 0..5 {
            job.node_finished();
        }
        assert_eq!(
            job.message(Duration::from_secs(60)),
            "[################] 31/31 loglik_per_token -3.800000; 3/3 nodes finished \
             (strads-lda-scheduler)"
        );
    }

    #[test]
    fn without_a_total_the_bar_counts_points() {
        let mut job = JobProgress::new(2, None);
        let mut r = report("", 4, 0.25);
        r.metric = "objective".into();
        assert!(job.offer("monitor", &r.to_line()));
        // No label: the node's name.
        assert_eq!(
            job.message(Duration::from_secs(3)),
            "point 4, objective 0.250000; 0/2 nodes finished (monitor)"
        );
        // More points than the total announced: the bar stays full.
        let mut job = JobProgress::new(1, Some(2));
        assert!(job.offer("s", &report("s", 5, 1.0).to_line()));
        assert!(job.message(Duration::from_secs(1)).contains("2/2"));
    }
}
