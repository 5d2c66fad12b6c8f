//! `petrel bench mf`: CCD++ matrix factorisation with block rotation on the STRADS
//! runtime, on synthetic low-rank ratings, for several worker counts side by side: train
//! RMSE against time, time to a target RMSE, final train and test RMSE.

use crate::bench::strads_plot::{Series, line_plot};
use crate::report::{Table, print_json};
use crate::strads::run_mf_job;
use petrel_algorithms::apps::mf::{MfJob, MfMetrics, SyntheticRatings};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, default_value_t = 20000)]
    pub users: usize,
    #[arg(long, default_value_t = 10000)]
    pub items: usize,
    /// Rank of the generating factors and of the model.
    #[arg(long, default_value_t = 10)]
    pub rank: usize,
    #[arg(long, default_value_t = 0.01)]
    pub observed_fraction: f64,
    #[arg(long, default_value_t = 0.1)]
    pub noise_std: f32,
    #[arg(long, default_value_t = 0.05)]
    pub lambda: f32,
    #[arg(long, default_value_t = 12)]
    pub iterations: usize,
    /// Train RMSE whose first crossing is `time_to_target_s` (1.5x the noise level).
    #[arg(long, default_value_t = 0.15)]
    pub target_rmse: f64,
    /// Worker counts to compare (the JSON reports the last one).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// memory | quic
    #[arg(long, default_value = "quic")]
    pub transport: String,
    #[arg(long, default_value = "target/bench-mf")]
    pub out: PathBuf,
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
    plot: String,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.workers.is_empty() {
        return Err("--workers needs at least one count".into());
    }
    let out = std::path::absolute(&args.out).map_err(|e| e.to_string())?;
    let mut table = Table::new(&[
        "workers",
        "train ratings per worker",
        "time to target (s)",
        "total (s)",
        "final train RMSE",
        "test RMSE",
    ]);
    let mut runs: Vec<(usize, MfMetrics)> = Vec::new();
    for &p in &args.workers {
        let job = MfJob {
            synthetic: SyntheticRatings {
                n_users: args.users,
                n_items: args.items,
                rank: args.rank,
                observed_fraction: args.observed_fraction,
                noise_std: args.noise_std,
                seed: 42,
            },
            rank: args.rank,
            lambda: args.lambda,
            outer_iterations: args.iterations,
            target_rmse: Some(args.target_rmse),
            out_dir: Some(out.join(format!("p{p}"))),
            timeout_s: 120,
            ..MfJob::default()
        };
        let m = run_mf_job(&job, p, &args.transport)?;
        table.row(vec![
            p.to_string(),
            format!("{:?}", m.worker_ratings),
            m.time_to_target_s
                .map_or("not reached".into(), |t| format!("{t:.2}")),
            format!("{:.2}", m.elapsed_s),
            format!("{:.4}", m.final_train_rmse),
            format!("{:.4}", m.final_test_rmse),
        ]);
        runs.push((p, m));
    }
    table.print();
    let plot = out.join("mf_rmse_vs_time.svg");
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
    line_plot(
        &plot,
        "STRADS CCD++: train RMSE against time",
        "seconds",
        "train RMSE",
        &series,
        true,
    )?;
    println!("plot: {}", plot.display());
    let (p, last) = runs.last().ok_or("no runs")?;
    let single = runs
        .iter()
        .find(|(p, _)| *p == 1)
        .and_then(|(_, m)| m.time_to_target_s);
    print_json(&Figures {
        bench: "mf",
        users: last.n_users,
        items: last.n_items,
        train_ratings: last.train_ratings,
        rank: last.rank,
        workers: *p,
        time_to_target_s: last.time_to_target_s,
        target_rmse: args.target_rmse,
        final_rmse: last.final_test_rmse,
        final_train_rmse: last.final_train_rmse,
        elapsed_s: last.elapsed_s,
        single_worker_time_to_target_s: single,
        plot: plot.display().to_string(),
    })
    .map_err(|e| e.to_string())
}
