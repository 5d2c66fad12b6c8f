//! `petrel bench mf`: CCD++ matrix factorisation with block rotation on the STRADS
//! runtime, on synthetic low-rank ratings, for several worker counts side by side: train
//! RMSE against time, time to a target RMSE, final train and test RMSE, and the bytes per
//! round through the scheduler (the H blocks rotate worker to worker).

use crate::scale::{WorkerCountsArgs, write_plot};
use petrel::CliError;
use petrel::train::plot::{Series, absolute};
use petrel::train::run_job;
use petrel_ml::data::synthetic::LowRankParams;
use petrel_strads::apps::mf::{MfApp, MfMetrics, StradsMfSettings};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct StradsMfBenchArgs {
    #[arg(long, default_value_t = 20000)]
    pub users: usize,
    #[arg(long, default_value_t = 10000)]
    pub items: usize,
    #[arg(long, default_value_t = 0.01)]
    pub observed_fraction: f64,
    #[command(flatten)]
    pub model: MfArgs,
    #[command(flatten)]
    pub runs: WorkerCountsArgs,
    #[arg(long, default_value = "target/bench-mf")]
    pub out: PathBuf,
}

/// The data and model flags of `mf` and `mf-scale` beside their sizes.
#[derive(clap::Args, Debug, Clone)]
pub struct MfArgs {
    /// Rank of the generating factors and of the model.
    #[arg(long, default_value_t = 10)]
    pub rank: usize,
    /// Standard deviation of the ratings' noise.
    #[arg(long, default_value_t = 0.1)]
    pub noise_std: f32,
    /// L2 weight.
    #[arg(long, default_value_t = 0.05)]
    pub lambda: f32,
    /// Sweeps over the rank-one coordinates (the run does them all; the target only
    /// stops the clock).
    #[arg(long, default_value_t = 12)]
    pub iterations: usize,
    /// Train RMSE whose first crossing stops the clock (1.5x the default noise level).
    #[arg(long, default_value_t = 0.15)]
    pub target_rmse: f64,
}

impl MfArgs {
    /// The job on synthetic ratings of `users` x `items` at `observed_fraction`, writing to
    /// `out`.
    pub(crate) fn job(
        &self,
        (users, items): (usize, usize),
        observed_fraction: f64,
        out: PathBuf,
        timeout_s: u64,
    ) -> StradsMfSettings {
        StradsMfSettings {
            synthetic: LowRankParams {
                n_users: users,
                n_items: items,
                rank: self.rank,
                observed_fraction,
                noise_std: self.noise_std,
                seed: 42,
            },
            rank: self.rank,
            lambda: self.lambda,
            outer_iterations: self.iterations,
            target_rmse: Some(self.target_rmse),
            out_dir: Some(out),
            timeout_s,
            ..StradsMfSettings::default()
        }
    }
}

#[derive(Serialize)]
struct Figures {
    bench: &'static str,
    users: usize,
    items: usize,
    train_ratings: usize,
    rank: usize,
    workers: usize,
    time_to_target_s: Option<f64>,
    target_rmse: f64,
    final_rmse: f64,
    final_train_rmse: f64,
    elapsed_s: f64,
    single_worker_time_to_target_s: Option<f64>,
    /// Bytes the scheduler node sent + received per sub-round of the last run (measured,
    /// without the final Collect round): the H blocks travel worker to worker, so this is
    /// block ids, flags and squared errors.
    scheduler_bytes_per_round: f64,
    /// What a sub-round would move through the scheduler if the blocks were routed
    /// through it (every block out in a task and back in a partial): 2 x the blocks'
    /// size, plus the ring's own traffic.
    star_bytes_per_round_estimate: f64,
    plot: String,
}

/// `(measured ring bytes per sub-round, estimated star bytes per sub-round)` of a run.
fn bytes_per_round(m: &MfMetrics) -> (f64, f64) {
    let ring = m.scheduler_bytes.saturating_sub(m.collect_bytes) as f64
        / m.rounds.saturating_sub(1).max(1) as f64;
    (ring, ring + 2.0 * m.block_bytes as f64)
}

pub fn run(args: StradsMfBenchArgs) -> Result<(), CliError> {
    let out = absolute(&args.out)?;
    let runs = args.runs.run_each(|p| {
        let dims = (args.users, args.items);
        let job = args
            .model
            .job(dims, args.observed_fraction, out.join(format!("p{p}")), 120);
        run_job::<MfApp>(&job, p, args.runs.transport)
    })?;
    let rows = runs.iter().map(|(p, m)| {
        let (ring, star) = bytes_per_round(m);
        let mut row = serde_json::to_value(m).unwrap_or_default();
        row["workers"] = (*p).into();
        row["scheduler_bytes_per_round"] = ring.into();
        row["star_estimate"] = star.into();
        row
    });
    let keys = "workers worker_ratings time_to_target_s elapsed_s final_train_rmse \
                final_test_rmse scheduler_bytes_per_round star_estimate";
    crate::common::json_table(rows, keys).print();
    let series: Vec<Series> = runs
        .iter()
        .map(|(p, m)| Series {
            name: format!("{p} worker(s)"),
            points: m
                .train_rmse
                .iter()
                .map(|r| (r.elapsed_s, r.train_rmse))
                .collect(),
        })
        .collect();
    let plot = write_plot(
        &out.join("mf_rmse_vs_time.svg"),
        "STRADS CCD++: train RMSE against time",
        "seconds",
        "train RMSE",
        &series,
        true,
    )?;
    let (p, last) = runs
        .last()
        .ok_or_else(|| CliError::Usage("no runs".into()))?;
    let single = runs
        .iter()
        .find(|(p, _)| *p == 1)
        .and_then(|(_, m)| m.time_to_target_s);
    crate::scale::print_figures(&Figures {
        bench: "mf",
        users: last.n_users,
        items: last.n_items,
        train_ratings: last.train_ratings,
        rank: last.rank,
        workers: *p,
        time_to_target_s: last.time_to_target_s,
        target_rmse: args.model.target_rmse,
        final_rmse: last.final_test_rmse,
        final_train_rmse: last.final_train_rmse,
        elapsed_s: last.elapsed_s,
        single_worker_time_to_target_s: single,
        scheduler_bytes_per_round: bytes_per_round(last).0,
        star_bytes_per_round_estimate: bytes_per_round(last).1,
        plot,
    })
}
