//! `petrel bench lasso-schedulers`: STRADS Lasso with its coefficients split over 1, 2, 4
//! schedulers (and pipeline depths 1, 2) side by side on the same synthetic design, each
//! run until the relative duality gap is below `--gap-tolerance`. Every variant is its own
//! in-process cluster (one node per scheduler, `--workers` worker nodes, QUIC on
//! 127.0.0.1); the table shows medians over `--repeats` runs.

use crate::common::upper_median;
use crate::lasso::{DesignFigures, LassoRunArgs, solve_design};
use crate::scale::write_plot;
use petrel::CliError;
use petrel::train::plot::{Series, absolute};
use petrel_strads::apps::lasso::{LassoSettings, SyntheticLasso};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct LassoSchedulersBenchArgs {
    #[command(flatten)]
    pub runs: LassoRunArgs,
    /// Scheduler counts to compare.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub schedulers: Vec<usize>,
    /// Pipeline depths to compare (per scheduler).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub depths: Vec<usize>,
    /// Run every scheduler of a variant on one node.
    #[arg(long)]
    pub colocate: bool,
    #[arg(long, default_value_t = 1e-5)]
    pub gap_tolerance: f64,
    /// Update rounds per scheduler between synchronised evaluations.
    #[arg(long, default_value_t = 200)]
    pub eval_every: u64,
    #[arg(long, default_value = "target/bench-lasso-schedulers")]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct Variant {
    schedulers: usize,
    depth: usize,
    rounds_per_scheduler: f64,
    updates: u64,
    evaluations: usize,
    seconds: f64,
    seconds_min: f64,
    seconds_max: f64,
    worst_objective_gap: f64,
    worst_kkt: f64,
}

#[derive(Serialize)]
struct Figures {
    #[serde(flatten)]
    design: DesignFigures,
    workers: usize,
    block_size: usize,
    repeats: u64,
    colocate: bool,
    variants: Vec<Variant>,
    plot: String,
}

pub fn run(args: LassoSchedulersBenchArgs) -> Result<(), CliError> {
    if args.schedulers.is_empty() || args.depths.is_empty() || args.runs.repeats == 0 {
        return Err(CliError::Usage(
            "need at least one scheduler count, one depth and one repeat".into(),
        ));
    }
    let base = LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: args.runs.n_samples,
            n_features: args.runs.n_features,
            ..SyntheticLasso::default()
        },
        block_size: args.runs.block_size,
        candidate_pool: args.runs.block_size * 4,
        eval_every: args.eval_every,
        gap_tolerance: Some(args.gap_tolerance),
        ..LassoSettings::default()
    };
    let (design, _) = solve_design("lasso_schedulers", &base)?;
    let (lambda, optimum) = (design.lambda, design.optimum);
    println!(
        "design {}x{}, lambda {lambda:.4}, reference optimum {optimum:.8}; stop at duality gap {:e} (relative)",
        args.runs.n_samples, args.runs.n_features, args.gap_tolerance
    );
    let out = absolute(&args.out)?;
    let mut variants = Vec::new();
    let mut series = Vec::new();
    for &depth in &args.depths {
        for &s in &args.schedulers {
            let runs = args.runs.repeat(args.colocate, |seed| LassoSettings {
                schedulers: s,
                depth,
                seed,
                out_dir: Some(out.join(format!("s{s}-d{depth}-{seed}"))),
                ..base.clone()
            })?;
            let secs: Vec<f64> = runs.iter().map(|m| m.elapsed_s).collect();
            let v = Variant {
                schedulers: s,
                depth,
                rounds_per_scheduler: upper_median(runs.iter().map(|m| m.rounds).collect()) as f64
                    / s as f64,
                updates: upper_median(runs.iter().map(|m| m.updates).collect()),
                evaluations: upper_median(runs.iter().map(|m| m.evaluations.len()).collect()),
                seconds: upper_median(secs.clone()),
                seconds_min: secs.iter().copied().fold(f64::INFINITY, f64::min),
                seconds_max: secs.iter().copied().fold(0.0, f64::max),
                worst_objective_gap: runs
                    .iter()
                    .map(|m| (m.final_objective - optimum) / optimum)
                    .fold(f64::NEG_INFINITY, f64::max),
                worst_kkt: runs
                    .iter()
                    .map(|m| m.final_kkt_violation)
                    .fold(0.0, f64::max),
            };
            if let Some(m) = runs.first() {
                series.push(Series {
                    name: format!("S={s} depth={depth}"),
                    points: m
                        .evaluations
                        .iter()
                        .map(|e| (e.elapsed_s, ((e.objective - optimum) / optimum).max(1e-12)))
                        .collect(),
                });
            }
            variants.push(v);
        }
    }
    let keys = "schedulers depth rounds_per_scheduler updates evaluations seconds seconds_min \
                seconds_max worst_objective_gap worst_kkt";
    crate::common::json_table(&variants, keys).print();
    let plot = write_plot(
        &out.join("lasso_schedulers_objective_vs_time.svg"),
        "STRADS Lasso with S schedulers: (f - f*) / f* at the evaluations",
        "seconds",
        "relative objective gap",
        &series,
        true,
    )?;
    crate::scale::print_figures(&Figures {
        design,
        workers: args.runs.workers,
        block_size: args.runs.block_size,
        repeats: args.runs.repeats,
        colocate: args.colocate,
        variants,
        plot,
    })
}
