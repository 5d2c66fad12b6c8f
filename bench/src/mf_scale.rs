//! `petrel bench mf-scale`: STRADS matrix factorisation (CCD++ with block rotation) on
//! ratings of growing size, per worker count: seconds to a training RMSE, ratings/s per
//! core against the data size, and the speed-up over one worker. Each size has the same
//! rank, noise, observed fraction and two users per item, so ratings/s per core should
//! stay flat.

use crate::mf::MfArgs;
use crate::scale::{GridArgs, grid, per_core, write_plot};
use petrel::CliError;
use petrel::train::plot::absolute;
use petrel::train::{NodeMemory, run_job};
use petrel_actors::JobTransport;
use petrel_strads::StradsError;
use petrel_strads::apps::lasso::metrics::peak_rss_mb;
use petrel_strads::apps::mf::{MfApp, MfMetrics};
use petrel_strads::kit::StradsSettings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `petrel bench mf-scale` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct MfScaleBenchArgs {
    /// Data sizes in ratings (train and test together, before the random draw), smallest
    /// first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000000,4000000,16000000"
    )]
    pub ratings: Vec<usize>,
    /// The worker counts, transport and round timeout.
    #[command(flatten)]
    pub grid: GridArgs,
    /// Probability that a (user, item) cell is rated (fixed across sizes).
    #[arg(long, default_value_t = 0.02)]
    pub observed_fraction: f64,
    /// The rank, noise, L2 weight, sweeps and target.
    #[command(flatten)]
    pub model: MfArgs,
    /// Output directory (each run's files and the plot).
    #[arg(long, default_value = "target/bench-mf-scale")]
    pub out: PathBuf,
}

/// One run: a data size and a worker count (one entry of the JSON's `sizes`). `ratings`
/// counts train and test; to target means to the first train RMSE at the target (sweeps
/// fractional); per core divides by the workers; `all_sweeps` is over every sweep of the
/// scheduler's rounds; `rss_mb` is this process's peak (none with processes).
#[derive(Debug, Clone, Serialize)]
pub struct MfScaleRun {
    pub ratings: usize,
    pub train_ratings: usize,
    pub users: usize,
    pub items: usize,
    pub workers: usize,
    pub seconds_to_target: Option<f64>,
    pub sweeps_to_target: Option<f64>,
    pub ratings_per_s_per_core: Option<f64>,
    pub ratings_per_s_per_core_all_sweeps: Option<f64>,
    /// One worker's seconds to target over this run's.
    pub speedup_over_1: Option<f64>,
    pub final_rmse: f64,
    pub final_test_rmse: f64,
    pub train_s: f64,
    pub wall_s: f64,
    pub rss_mb: Option<f64>,
    #[serde(flatten)]
    pub memory: NodeMemory,
}

/// What one of `workers` workers holds, MB: its share of the ratings and of W, and H.
fn worker_holds_mb(ratings: usize, users: usize, items: usize, rank: usize, workers: usize) -> f64 {
    let w = workers.max(1) as f64;
    let ratings_bytes = ratings as f64 / w * 12.0;
    let factor_bytes = (users as f64 / w + items as f64) * rank as f64 * 4.0;
    (ratings_bytes + factor_bytes) / (1024.0 * 1024.0)
}

/// The bench's JSON line; `per_core_spread`: per worker count, fastest over slowest
/// ratings/s per core across the sizes; `per_core_trend`: the largest size's over the
/// smallest's; `speedup_2_at_largest`: 2 workers over one at the largest size.
#[derive(Debug, Serialize)]
pub struct MfScaleFigures {
    pub bench: &'static str,
    pub rank: usize,
    pub observed_fraction: f64,
    pub noise_std: f32,
    pub iterations: usize,
    pub target_rmse: f64,
    pub transport: String,
    pub sizes: Vec<MfScaleRun>,
    pub per_core_spread: BTreeMap<usize, f64>,
    pub per_core_trend: BTreeMap<usize, f64>,
    pub speedup_2_at_largest: Option<f64>,
    pub plot: String,
}

/// Users and items for about `ratings` ratings at `observed_fraction`, two users an item.
fn dimensions(ratings: usize, observed_fraction: f64) -> (usize, usize) {
    let items = (ratings as f64 / (2.0 * observed_fraction)).sqrt().round() as usize;
    let items = items.max(1);
    (2 * items, items)
}

/// Sweeps done when the train RMSE first reached `target` (the point's updates are those
/// before the one it reports on).
fn sweeps_to_target(
    m: &MfMetrics,
    target: f64,
    steps_per_sweep: usize,
    total: usize,
) -> Option<f64> {
    let point = m.train_rmse.iter().find(|p| p.train_rmse <= target)?;
    let updates = (point.coordinate_updates + 1).min(total as u64);
    Some(updates as f64 / steps_per_sweep.max(1) as f64)
}

/// Runs the bench, prints its table and JSON line.
pub fn run(args: MfScaleBenchArgs) -> Result<(), CliError> {
    crate::scale::print_figures(&measure(&args)?)
}

/// Runs every size and worker count, prints the table and writes the plot.
pub fn measure(args: &MfScaleBenchArgs) -> Result<MfScaleFigures, CliError> {
    if args.grid.workers.contains(&0) || args.ratings.contains(&0) {
        return Err(CliError::Usage(
            "--ratings and --workers must be positive".into(),
        ));
    }
    if !(args.observed_fraction > 0.0 && args.observed_fraction <= 1.0) {
        return Err(CliError::Usage(
            "--observed-fraction must be in (0, 1]".into(),
        ));
    }
    let out = absolute(&args.out)?;
    let mut one_worker_s = BTreeMap::new();
    let sizes: Vec<MfScaleRun> = grid(
        &args.ratings,
        &args.grid.workers,
        "ratings users items workers seconds_to_target sweeps_to_target ratings_per_s_per_core \
         ratings_per_s_per_core_all_sweeps speedup_over_1 train_s wall_s final_rmse \
         final_test_rmse rss_mb worker_rss_mb worker_holds_mb worker_rss_over_holds \
         worker_heap_over_holds scheduler_rss_mb",
        |&n, workers| {
            let run = run_one(
                args,
                &out,
                n,
                workers,
                one_worker_s.get(&n).copied().flatten(),
            )?;
            if workers == 1 {
                one_worker_s.insert(n, run.seconds_to_target);
            }
            let row = serde_json::to_value(&run).unwrap_or_default();
            Ok((run, row))
        },
    )?
    .into_iter()
    .flatten()
    .collect();
    let (per_core_spread, series) = per_core(&args.grid.workers, |workers| {
        sizes
            .iter()
            .filter(|r| r.workers == workers)
            .filter_map(|r| Some((r.ratings as f64, r.ratings_per_s_per_core?)))
            .collect()
    });
    let per_core_trend: BTreeMap<usize, f64> = series
        .iter()
        .zip(&args.grid.workers)
        .filter_map(|(s, &w)| {
            let (first, last) = (s.points.first()?, s.points.last()?);
            (s.points.len() > 1 && first.1 > 0.0).then(|| (w, last.1 / first.1))
        })
        .collect();
    let largest = sizes.iter().map(|r| r.ratings).max();
    let speedup_2_at_largest = sizes
        .iter()
        .find(|r| Some(r.ratings) == largest && r.workers == 2)
        .and_then(|r| r.speedup_over_1);
    for (workers, trend) in &per_core_trend {
        println!(
            "{workers} worker(s): ratings/s per core at the largest size {trend:.2}x the smallest's"
        );
    }
    if let Some(s) = speedup_2_at_largest {
        println!("2 workers at the largest size: {s:.2}x one worker (target >= 1.7x)");
    }
    let plot = write_plot(
        &out.join("mf_scale_ratings_per_s_per_core.svg"),
        "MF (CCD++, block rotation): ratings/s per core to the target RMSE against data size",
        "ratings",
        "ratings x sweeps / s / worker",
        &series,
        false,
    )?;
    Ok(MfScaleFigures {
        bench: "mf-scale",
        rank: args.model.rank,
        observed_fraction: args.observed_fraction,
        noise_std: args.model.noise_std,
        iterations: args.model.iterations,
        target_rmse: args.model.target_rmse,
        transport: crate::common::name_of(&args.grid.transport),
        sizes,
        per_core_spread,
        per_core_trend,
        speedup_2_at_largest,
        plot,
    })
}

/// One run: about `requested` ratings on `workers` workers.
fn run_one(
    args: &MfScaleBenchArgs,
    out: &Path,
    requested: usize,
    workers: usize,
    one_worker_s: Option<f64>,
) -> Result<MfScaleRun, CliError> {
    let job = args.model.job(
        dimensions(requested, args.observed_fraction),
        args.observed_fraction,
        out.join(format!("r{requested}-p{workers}")),
        args.grid.timeout_s,
    );
    job.validate().map_err(StradsError::from)?;
    let steps_per_sweep = job.layout().width();
    // Resets this process's peak resident memory (`VmHWM`) where allowed.
    let rss_tracked = args.grid.transport != JobTransport::Processes
        && std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let started = Instant::now();
    let m = run_job::<MfApp>(&job, workers, args.grid.transport)?;
    let wall_s = started.elapsed().as_secs_f64();
    let rss_mb = rss_tracked.then(peak_rss_mb);
    let seconds = m.time_to_target_s;
    let sweeps = sweeps_to_target(
        &m,
        args.model.target_rmse,
        steps_per_sweep,
        args.model.iterations * steps_per_sweep,
    );
    let per_core = seconds
        .zip(sweeps)
        .filter(|(s, _)| *s > 0.0)
        .map(|(s, n)| m.train_ratings as f64 * n / s / workers as f64);
    let all_sweeps = (m.elapsed_s > 0.0).then(|| {
        m.train_ratings as f64 * args.model.iterations as f64 / m.elapsed_s / workers as f64
    });
    let one_worker_s = if workers == 1 { seconds } else { one_worker_s };
    let speedup = crate::common::ratio(one_worker_s, seconds);
    let holds = worker_holds_mb(
        m.train_ratings + m.test_ratings,
        m.n_users,
        m.n_items,
        args.model.rank,
        workers,
    );
    let memory = NodeMemory::of_run(job.out_dir.as_deref(), args.grid.transport, holds);
    Ok(MfScaleRun {
        ratings: m.train_ratings + m.test_ratings,
        train_ratings: m.train_ratings,
        users: m.n_users,
        items: m.n_items,
        workers,
        seconds_to_target: seconds,
        sweeps_to_target: sweeps,
        ratings_per_s_per_core: per_core,
        ratings_per_s_per_core_all_sweeps: all_sweeps,
        speedup_over_1: speedup,
        final_rmse: m.final_train_rmse,
        final_test_rmse: m.final_test_rmse,
        train_s: m.elapsed_s,
        wall_s,
        rss_mb,
        memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_keep_the_fraction_and_two_users_per_item() {
        let (users, items) = dimensions(1_000_000, 0.02);
        assert_eq!(users, 2 * items);
        let expected = users as f64 * items as f64 * 0.02;
        assert!((expected - 1e6).abs() / 1e6 < 0.01, "{expected}");
        assert_eq!(dimensions(0, 0.5), (2, 1));
    }
}
