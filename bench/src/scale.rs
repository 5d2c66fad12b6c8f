//! The scale benches' harness: sizes x worker counts, then the table, the plot and the
//! JSON line. `mf-scale` and `lda-scale` run [`grid`]; `lasso-scale` and `logistic-scale`
//! implement [`CdScale`]: per size the design is solved to its optimum f*, then `--repeats`
//! interleaved repeats time the single-threaded baseline and a STRADS run per worker count
//! to `f* (1 + tolerance)`. Each runner reports its median run, and `ratio` the median of
//! the repeats' ratios, each against its own repeat's baseline (the host is shared).

use crate::common::{json_table, median, name_of};
use petrel::CliError;
use petrel::report::print_json;
use petrel::train::plot::{Series, absolute, line_plot};
use petrel::train::{NodeMemory, TrainTransport};
use petrel_actors::JobTransport;
use petrel_strads::StradsError;
use petrel_strads::apps::lasso::LassoSettings;
use petrel_strads::kit::StradsSettings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The largest over the smallest `y` of `points` (1 is flat).
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

/// Writes the line plot to `path`, says where, and returns the path for the JSON.
pub(crate) fn write_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<String, CliError> {
    line_plot(path, title, x_label, y_label, series, log_y)?;
    println!("plot: {}", path.display());
    Ok(path.display().to_string())
}

/// Prints a STRADS bench's JSON line.
pub(crate) fn print_figures<T: Serialize>(figures: &T) -> Result<(), CliError> {
    print_json(figures).map_err(|source| CliError::Json {
        path: PathBuf::new(),
        source,
    })
}

/// Runs `run(size, workers)` for every size and worker count, prints the table of the
/// rows it returns (at `keys`, as [`json_table`]) and returns the runs size by size.
pub(crate) fn grid<S, R>(
    sizes: &[S],
    workers: &[usize],
    keys: &str,
    mut run: impl FnMut(&S, usize) -> Result<(R, serde_json::Value), CliError>,
) -> Result<Vec<Vec<R>>, CliError> {
    if sizes.is_empty() || workers.is_empty() {
        return Err(CliError::Usage(
            "need at least one size and one worker count".into(),
        ));
    }
    let (mut rows, mut out) = (Vec::new(), Vec::new());
    for size in sizes {
        let mut runs = Vec::new();
        for &w in workers {
            let (r, row) = run(size, w)?;
            rows.push(row);
            runs.push(r);
        }
        out.push(runs);
    }
    json_table(&rows, keys).print();
    Ok(out)
}

/// The flags of `mf-scale` and `lda-scale` beside their sizes.
#[derive(clap::Args, Debug, Clone)]
pub struct GridArgs {
    /// STRADS worker counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// How the nodes run.
    #[arg(long, value_enum, default_value_t = JobTransport::Quic)]
    pub transport: JobTransport,
    /// Timeout of one round, seconds.
    #[arg(long, default_value_t = 1200)]
    pub timeout_s: u64,
}

/// The worker counts and transport of `mf` and `lda`.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerCountsArgs {
    /// Worker counts to compare (the JSON reports the last one).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// How the nodes run.
    #[arg(long, value_enum, default_value_t = JobTransport::Quic)]
    pub transport: JobTransport,
}

impl WorkerCountsArgs {
    /// `run(workers)` for every worker count in order, beside its count.
    pub(crate) fn run_each<M>(
        &self,
        mut run: impl FnMut(usize) -> Result<M, CliError>,
    ) -> Result<Vec<(usize, M)>, CliError> {
        if self.workers.is_empty() {
            return Err(CliError::Usage("--workers needs at least one count".into()));
        }
        self.workers.iter().map(|&p| Ok((p, run(p)?))).collect()
    }
}

/// Per worker count, the [`spread`] of `points(workers)` and its plot series.
pub(crate) fn per_core(
    worker_counts: &[usize],
    points: impl Fn(usize) -> Vec<(f64, f64)>,
) -> (BTreeMap<usize, f64>, Vec<Series>) {
    let mut spreads = BTreeMap::new();
    let mut series = Vec::new();
    for &workers in worker_counts {
        let points = points(workers);
        if let Some(s) = spread(&points) {
            spreads.insert(workers, s);
        }
        series.push(Series {
            name: format!("{workers} worker(s)"),
            points,
        });
    }
    (spreads, series)
}

/// One design size, `ROWSxFEATURESxNNZ_PER_COLUMN`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DesignSize {
    pub(crate) n_samples: usize,
    pub(crate) n_features: usize,
    pub(crate) nnz_per_column: usize,
}

impl std::str::FromStr for DesignSize {
    type Err = String;

    /// `ROWSxFEATURESxNNZ_PER_COLUMN`, three positive numbers.
    fn from_str(s: &str) -> Result<Self, String> {
        let [n_samples, n_features, nnz_per_column] = crate::common::dims(s).ok_or_else(|| {
            format!("{s:?}: expected three positive numbers ROWSxFEATURESxNNZ_PER_COLUMN")
        })?;
        Ok(DesignSize {
            n_samples,
            n_features,
            nnz_per_column,
        })
    }
}

/// The flags the coordinate-descent scale benches share.
#[derive(clap::Args, Debug, Clone)]
pub struct CdScaleArgs {
    /// STRADS worker counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// The worker count whose figures are the headline keys of each size.
    #[arg(long, default_value_t = 2)]
    pub headline_workers: usize,
    /// How the STRADS nodes run.
    #[arg(long, value_enum, default_value_t = TrainTransport::Processes)]
    pub transport: TrainTransport,
    /// Timeout of one round, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// Interleaved repeats of the timed runs at each size: each runner's figures are its
    /// median run's, and `ratio` the median of the repeats' ratios. In process, runs before
    /// the last repeat share this process's copy of the design (`--repeats 1` to avoid).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// One worker count's figures at one size: its median run's (`E`: the bench's own keys).
/// `petrel_s` and `petrel_updates` are to the target (`None`: not reached); `ratio` is the
/// median of `ratios`, every repeat's petrel / baseline in run order, as `runs_s`;
/// `wall_s` is the whole command's; `rss_mb` the largest peak of a node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CdRun<E> {
    pub workers: usize,
    pub petrel_s: Option<f64>,
    pub petrel_updates: Option<u64>,
    pub ratio: Option<f64>,
    pub ratios: Vec<Option<f64>>,
    pub runs_s: Vec<Option<f64>>,
    pub us_per_update: Option<f64>,
    pub wall_s: f64,
    pub rounds: u64,
    pub final_objective: f64,
    pub rss_mb: Option<f64>,
    #[serde(flatten)]
    pub memory: NodeMemory,
    #[serde(flatten)]
    pub extra: E,
}

impl<E> CdRun<E> {
    /// The run of median time among a runner's repeats (one that missed the target counts
    /// as the slowest), with the repeats' ratios and times; `None` without runs.
    pub(crate) fn median_of(runs: Vec<Self>) -> Option<Self> {
        let slowest_last = |v: Option<f64>| v.unwrap_or(f64::INFINITY);
        let runs_s: Vec<Option<f64>> = runs.iter().map(|r| r.petrel_s).collect();
        let ratios: Vec<Option<f64>> = runs.iter().map(|r| r.ratio).collect();
        let ratio = median(&ratios.iter().map(|&r| slowest_last(r)).collect::<Vec<_>>())
            .filter(|r| r.is_finite());
        let mut order = runs;
        order.sort_by(|a, b| slowest_last(a.petrel_s).total_cmp(&slowest_last(b.petrel_s)));
        let middle = order.len().checked_sub(1)? / 2;
        Some(CdRun {
            ratio,
            ratios,
            runs_s,
            ..order.swap_remove(middle)
        })
    }
}

/// One design size: the baseline (`baseline_s` the median of `baseline_runs_s`), the
/// headline worker count's `petrel_s`, `petrel_updates`, `ratio` and `rss_mb`, and every
/// worker count's figures (`S`: the bench's own keys).
#[derive(Debug, Clone, Serialize)]
pub struct CdSize<R, S> {
    pub n_samples: usize,
    pub n_features: usize,
    pub nnz: usize,
    pub lambda: f32,
    pub optimum: f64,
    pub baseline_s: f64,
    pub baseline_runs_s: Vec<f64>,
    pub baseline_updates: u64,
    pub baseline_us_per_update: f64,
    pub petrel_s: Option<f64>,
    pub petrel_updates: Option<u64>,
    pub ratio: Option<f64>,
    pub rss_mb: Option<f64>,
    pub per_workers: BTreeMap<usize, CdRun<R>>,
    #[serde(flatten)]
    pub extra: S,
}

/// The JSON line of a coordinate-descent scale bench (`E`: the bench's own keys).
#[derive(Debug, Serialize)]
pub struct CdScaleFigures<R, S, E> {
    pub bench: &'static str,
    pub solver: String,
    pub tolerance: f64,
    pub headline_workers: usize,
    pub transport: String,
    pub repeats: usize,
    pub sizes: Vec<CdSize<R, S>>,
    pub plot: String,
    #[serde(flatten)]
    pub extra: E,
}

/// A size's design (what the baseline runs on), solved to its optimum f*.
pub(crate) struct Prepared<D, S> {
    pub design: D,
    pub nnz: usize,
    pub lambda: f32,
    pub optimum: f64,
    pub extra: S,
}

/// One STRADS run of a [`CdScale`] bench: its job (target and output directory set), on
/// `workers` workers, and the baseline's seconds of the same repeat.
pub(crate) struct PetrelRun<'a> {
    pub job: &'a LassoSettings,
    pub workers: usize,
    pub transport: JobTransport,
    pub baseline_s: f64,
}

/// A coordinate-descent scale bench: the single-threaded baseline against STRADS per
/// worker count, to `f* (1 + tolerance)`, on designs of growing size. The harness
/// validates each size's job before any work and sets every timed run's target.
pub(crate) trait CdScale {
    /// A run's, a size's and the figures' own keys.
    type Run: Serialize + Clone + Default;
    type Size: Serialize;
    type Top: Serialize;
    /// What the baseline runs on.
    type Design;
    const NAME: &'static str;
    /// The table's keys after the shared ones (as [`json_table`]).
    const EXTRA_KEYS: &'static str;
    /// The plot's file name, title and y label.
    const PLOT: [&'static str; 3];

    /// The shared flags, the sizes, the target's relative gap and the output directory.
    fn args(&self) -> (&CdScaleArgs, &[DesignSize], f64, &Path);
    fn solver(&self) -> String;
    fn job(&self, size: &DesignSize) -> LassoSettings;
    /// What one of `workers` workers holds, MB.
    fn holds_mb(&self, nnz: usize, size: &DesignSize, workers: usize) -> f64;
    /// Generates the design of `job` and solves it to its optimum.
    fn prepare(
        &self,
        size: &DesignSize,
        job: &LassoSettings,
    ) -> Result<Prepared<Self::Design, Self::Size>, CliError>;
    /// One timed baseline run of `job`: seconds and updates (`last`: the last repeat).
    fn baseline(
        &self,
        design: &mut Self::Design,
        job: &LassoSettings,
        last: bool,
    ) -> Result<(f64, u64), CliError>;
    /// One STRADS run; the harness sets the workers, wall time, memory, ratios and
    /// `us_per_update` (`rss_mb` stands where the nodes were not processes).
    fn petrel(&self, run: PetrelRun) -> Result<CdRun<Self::Run>, CliError>;
    fn top(&self) -> Self::Top;
}

/// The keys of the columns every coordinate-descent scale table starts with.
const CD_KEYS: &str =
    "design nnz runner petrel_s petrel_updates us_per_update ratio ratio_range wall_s";

/// Figures of a [`CdScale`] bench.
pub(crate) type FiguresOf<B> =
    CdScaleFigures<<B as CdScale>::Run, <B as CdScale>::Size, <B as CdScale>::Top>;

/// Runs every size, repeat and worker count of `bench`, prints the table and plots.
pub(crate) fn measure_cd<B: CdScale>(bench: &B) -> Result<FiguresOf<B>, CliError> {
    let (c, design_sizes, tolerance, out) = bench.args();
    if design_sizes.is_empty() || c.workers.is_empty() || c.repeats == 0 {
        return Err(CliError::Usage(
            "need at least one size, one worker count and one repeat".into(),
        ));
    }
    let transport = c.transport.cluster().ok_or_else(|| {
        CliError::Usage(
            "the scale benches compare STRADS runs: --transport memory, quic or processes".into(),
        )
    })?;
    let out = absolute(out)?;
    let (mut rows, mut sizes) = (Vec::new(), Vec::new());
    for size in design_sizes {
        sizes.push(measure_size(
            bench, size, tolerance, transport, &out, &mut rows,
        )?);
    }
    json_table(&rows, &format!("{CD_KEYS} {}", B::EXTRA_KEYS)).print();
    let top = bench.top();
    let mut series = vec![Series {
        name: "baseline (1 thread)".into(),
        points: sizes
            .iter()
            .map(|s| (s.nnz as f64, s.baseline_us_per_update))
            .collect(),
    }];
    for &workers in &c.workers {
        series.push(Series {
            name: format!("petrel, {workers} worker(s)"),
            points: sizes
                .iter()
                .filter_map(|s| Some((s.nnz as f64, s.per_workers.get(&workers)?.us_per_update?)))
                .collect(),
        });
    }
    let [file, title, y_label] = B::PLOT;
    let plot = write_plot(
        &out.join(file),
        title,
        "non-zeros of X",
        y_label,
        &series,
        true,
    )?;
    Ok(CdScaleFigures {
        bench: B::NAME,
        solver: bench.solver(),
        tolerance,
        headline_workers: c.headline_workers,
        transport: name_of(&c.transport),
        repeats: c.repeats,
        sizes,
        plot,
        extra: top,
    })
}

/// One design size: its optimum, the repeated baseline and STRADS runs, and their rows.
fn measure_size<B: CdScale>(
    bench: &B,
    size: &DesignSize,
    tolerance: f64,
    transport: JobTransport,
    out: &Path,
    rows: &mut Vec<serde_json::Value>,
) -> Result<CdSize<B::Run, B::Size>, CliError> {
    let c = bench.args().0;
    let base = bench.job(size);
    base.validate().map_err(StradsError::from)?;
    let mut p = bench.prepare(size, &base)?;
    let target = LassoSettings {
        target_objective: Some(p.optimum * (1.0 + tolerance)),
        ..base
    };
    let label = format!("{}x{}", size.n_samples, size.n_features);
    tracing::info!(bench = B::NAME, size = %label, nnz = p.nnz, optimum = p.optimum, "design solved");
    let mut baseline_runs_s = Vec::with_capacity(c.repeats);
    let mut baseline_updates = 0;
    let mut runs: BTreeMap<usize, Vec<CdRun<B::Run>>> = BTreeMap::new();
    for repeat in 0..c.repeats {
        let (baseline_s, updates) =
            bench.baseline(&mut p.design, &target, repeat + 1 == c.repeats)?;
        baseline_runs_s.push(baseline_s);
        baseline_updates = updates;
        for &workers in &c.workers {
            let dir = out.join(format!("{label}-p{workers}"));
            let job = LassoSettings {
                out_dir: Some(dir.clone()),
                ..target.clone()
            };
            let started = Instant::now();
            let job = &job;
            let mut run = bench.petrel(PetrelRun {
                job,
                workers,
                transport,
                baseline_s,
            })?;
            run.workers = workers;
            run.wall_s = started.elapsed().as_secs_f64();
            let holds = bench.holds_mb(p.nnz, size, workers);
            run.memory = NodeMemory::of_run(Some(&dir), transport, holds);
            let nodes_peak = run.memory.worker_rss_mb.zip(run.memory.scheduler_rss_mb);
            run.rss_mb = nodes_peak.map(|(w, s)| w.max(s)).or(run.rss_mb);
            run.us_per_update =
                (run.petrel_s.zip(run.petrel_updates)).map(|(s, u)| 1e6 * s / u.max(1) as f64);
            run.ratio = run.petrel_s.map(|s| s / baseline_s);
            run.ratios = vec![run.ratio];
            run.runs_s = vec![run.petrel_s];
            tracing::info!(bench = B::NAME, size = %label, workers, repeat, ratio = run.ratio, "run");
            runs.entry(workers).or_default().push(run);
        }
    }
    drop(p.design);
    let baseline_s = median(&baseline_runs_s).unwrap_or(f64::NAN);
    let baseline_us_per_update = 1e6 * baseline_s / baseline_updates.max(1) as f64;
    rows.push(serde_json::json!({
        "design": label, "nnz": p.nnz, "runner": "baseline", "petrel_s": baseline_s,
        "petrel_updates": baseline_updates, "us_per_update": baseline_us_per_update, "ratio": 1,
    }));
    let mut per_workers = BTreeMap::new();
    for (workers, runs) in runs {
        let Some(f) = CdRun::median_of(runs) else {
            continue;
        };
        let reached: Vec<f64> = f.ratios.iter().flatten().copied().collect();
        let mut row = serde_json::to_value(&f).unwrap_or_default();
        row["design"] = label.clone().into();
        row["nnz"] = p.nnz.into();
        row["runner"] = format!("petrel {workers}w").into();
        row["ratio_range"] = range_cell(&reached).into();
        rows.push(row);
        per_workers.insert(workers, f);
    }
    let headline = per_workers.get(&c.headline_workers);
    Ok(CdSize {
        n_samples: size.n_samples,
        n_features: size.n_features,
        nnz: p.nnz,
        lambda: p.lambda,
        optimum: p.optimum,
        baseline_s,
        baseline_runs_s,
        baseline_updates,
        baseline_us_per_update,
        petrel_s: headline.and_then(|h| h.petrel_s),
        petrel_updates: headline.and_then(|h| h.petrel_updates),
        ratio: headline.and_then(|h| h.ratio),
        rss_mb: headline.and_then(|h| h.rss_mb),
        per_workers,
        extra: p.extra,
    })
}

#[cfg(test)]
mod tests;
