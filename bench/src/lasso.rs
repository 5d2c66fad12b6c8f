//! `petrel bench lasso`: STRADS Lasso with dynamic, random (Shotgun-like) and cyclic
//! scheduling side by side, on a synthetic correlated design, each until the objective is
//! within `--tolerance` (relative) of the optimum found by a long serial reference run.
//! Every variant runs on the actor runtime (one scheduler node and `--workers` worker
//! nodes, as threads of this process talking QUIC over 127.0.0.1 by default).

use crate::common::upper_median;
use petrel::CliError;
use petrel::report::fmt;
use petrel::train::plot::{Series, line_plot};
use petrel::train::run_lasso_job;
use petrel_actors::JobTransport;
use petrel_strads::apps::lasso::baseline::solve_baseline;
use petrel_strads::apps::lasso::{LassoMetrics, LassoSettings, ObjectivePoint, SyntheticLasso};
use petrel_strads::core::scheduler::ScheduleMode;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct LassoBenchArgs {
    #[command(flatten)]
    pub runs: LassoRunArgs,
    /// Features per correlated group.
    #[arg(long, default_value_t = 10)]
    pub group_size: usize,
    /// Correlation inside a group.
    #[arg(long, default_value_t = 0.8)]
    pub correlation: f32,
    #[arg(long, default_value_t = 10)]
    pub n_nonzero: usize,
    /// lambda = fraction * max_j |x_j^T y|.
    #[arg(long, default_value_t = 0.2)]
    pub lambda_fraction: f64,
    /// U': candidates per round before the dependency check.
    #[arg(long, default_value_t = 64)]
    pub candidate_pool: usize,
    /// Dependency-check threshold (dynamic and cyclic).
    #[arg(long, default_value_t = 0.3)]
    pub rho: f32,
    /// Priority floor of dynamic scheduling.
    #[arg(long, default_value_t = 1e-6)]
    pub eta: f64,
    /// Dynamic priority is |delta b_j|^p + eta (1 = reference code, 2 = paper).
    #[arg(long, default_value_t = 1.0)]
    pub priority_exponent: f64,
    /// Give the random (Shotgun) baseline the dependency check too.
    #[arg(long)]
    pub random_filter: bool,
    /// Run cyclic without the dependency check (diverges on correlated neighbours).
    #[arg(long)]
    pub cyclic_plain: bool,
    /// Rounds in flight.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Relative objective gap to reach.
    #[arg(long, default_value_t = 1e-3)]
    pub tolerance: f64,
    #[arg(long, default_value_t = 30_000)]
    pub max_rounds: u64,
    #[arg(long, default_value = "target/bench-lasso")]
    pub out: PathBuf,
}

/// The design and the runs of the Lasso benches.
#[derive(clap::Args, Debug, Clone)]
pub struct LassoRunArgs {
    #[arg(long, default_value_t = 400)]
    pub n_samples: usize,
    #[arg(long, default_value_t = 5000)]
    pub n_features: usize,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// U: coordinates per round (of each scheduler).
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Runs per variant (scheduler seeds 0..repeats); the table shows the median.
    #[arg(long, default_value_t = 3)]
    pub repeats: u64,
    /// How the nodes run.
    #[arg(long, value_enum, default_value_t = JobTransport::Quic)]
    pub transport: JobTransport,
}

impl LassoRunArgs {
    /// `--repeats` runs (seeds 0, 1, ...) of `job(seed)` on `--workers` workers.
    pub(crate) fn repeat(
        &self,
        colocate: bool,
        job: impl Fn(u64) -> LassoSettings,
    ) -> Result<Vec<LassoMetrics>, CliError> {
        (0..self.repeats.max(1))
            .map(|seed| {
                let job = job(seed);
                let m = run_lasso_job(&job, self.workers, self.transport, colocate)?;
                tracing::info!(mode = %job.mode, schedulers = job.schedulers, depth = job.depth, seed,
                    updates = ?m.target_updates, seconds = m.elapsed_s, "lasso bench run");
                Ok(m)
            })
            .collect()
    }
}

/// The keys the Lasso benches' JSON lines open with.
#[derive(Serialize)]
pub(crate) struct DesignFigures {
    bench: &'static str,
    n_samples: usize,
    n_features: usize,
    pub lambda: f32,
    pub optimum: f64,
}

#[derive(Serialize)]
struct Figures {
    #[serde(flatten)]
    design: DesignFigures,
    block_size: usize,
    workers: usize,
    repeats: u64,
    dynamic_updates: Option<u64>,
    random_updates: Option<u64>,
    cyclic_updates: Option<u64>,
    dynamic_s: Option<f64>,
    random_s: Option<f64>,
    cyclic_s: Option<f64>,
    updates_ratio: Option<f64>,
    time_ratio: Option<f64>,
    objective_gap: f64,
    dynamic_kkt: f64,
    plot: String,
}

pub fn run(args: LassoBenchArgs) -> Result<(), CliError> {
    let base = base_job(&args);
    let (design, m) = solve_design("lasso", &base)?;
    let (lambda, optimum) = (design.lambda, design.optimum);
    println!(
        "design {}x{} (groups of {} at corr {}), lambda {lambda:.4}; reference optimum {optimum:.8} \
         after {} serial updates ({:.1} s, KKT {:.1e})",
        args.runs.n_samples,
        args.runs.n_features,
        args.group_size,
        args.correlation,
        m.updates,
        m.elapsed_s,
        m.final_kkt_violation
    );
    let target = optimum * (1.0 + args.tolerance);
    let out = petrel::train::plot::absolute(&args.out)?;
    let variants: [(ScheduleMode, Option<f32>); 3] = [
        (ScheduleMode::Dynamic, Some(args.rho)),
        (ScheduleMode::Random, args.random_filter.then_some(args.rho)),
        (
            ScheduleMode::Cyclic,
            (!args.cyclic_plain).then_some(args.rho),
        ),
    ];
    let mut results: Vec<(String, Vec<LassoMetrics>)> = Vec::new();
    let mut worst_gap: f64 = 0.0;
    let mut medians = std::collections::HashMap::new();
    let mut rows = Vec::new();
    for (mode, rho) in variants {
        let runs = args.runs.repeat(false, |seed| LassoSettings {
            mode,
            rho,
            seed,
            target_objective: Some(target),
            out_dir: Some(out.join(format!("{mode}-{seed}"))),
            ..base.clone()
        })?;
        let reached = runs.iter().filter(|m| m.target_updates.is_some()).count();
        // A median to the target only when every run reached it.
        let all = reached == runs.len();
        let upd = all.then(|| upper_median(runs.iter().filter_map(|m| m.target_updates).collect()));
        let secs = all.then(|| upper_median(runs.iter().filter_map(|m| m.target_s).collect()));
        let gaps: Vec<f64> = (runs.iter())
            .map(|m| (m.final_objective - optimum) / optimum)
            .collect();
        worst_gap = gaps.iter().copied().fold(worst_gap, f64::max);
        let kkt = upper_median(runs.iter().map(|m| m.final_kkt_violation).collect());
        rows.push(serde_json::json!({
            "mode": mode.to_string(), "rho": rho, "updates_to_tol": upd, "seconds": secs,
            "rounds": upper_median(runs.iter().map(|m| m.rounds).collect()),
            "final_rel_gap": upper_median(gaps), "kkt": kkt,
            "runs_reached": format!("{reached}/{}", runs.len()),
        }));
        medians.insert(mode, (upd, secs, kkt));
        results.push((mode.to_string(), runs));
    }
    let keys = "mode rho updates_to_tol seconds rounds final_rel_gap kkt runs_reached";
    crate::common::json_table(rows, keys).print();
    let plot = write_plots(&out, &results, optimum)?;
    let get = |m| medians.get(&m).copied().unwrap_or((None, None, f64::NAN));
    let (du, ds, dk) = get(ScheduleMode::Dynamic);
    let (ru, rs, _) = get(ScheduleMode::Random);
    let (cu, cs, _) = get(ScheduleMode::Cyclic);
    let figures = Figures {
        design,
        block_size: args.runs.block_size,
        workers: args.runs.workers,
        repeats: args.runs.repeats,
        dynamic_updates: du,
        random_updates: ru,
        cyclic_updates: cu,
        dynamic_s: ds,
        random_s: rs,
        cyclic_s: cs,
        updates_ratio: du.zip(ru).map(|(d, r)| r as f64 / d as f64),
        time_ratio: ds.zip(rs).map(|(d, r)| r / d),
        objective_gap: worst_gap,
        dynamic_kkt: dk,
        plot: plot.display().to_string(),
    };
    if let Some(r) = figures.updates_ratio {
        println!("updates ratio random/dynamic: {}", fmt(r));
    }
    crate::scale::print_figures(&figures)
}

/// The job every variant runs: the bench's design and scheduler flags, no evaluation.
fn base_job(args: &LassoBenchArgs) -> LassoSettings {
    let synthetic = SyntheticLasso {
        n_samples: args.runs.n_samples,
        n_features: args.runs.n_features,
        group_size: args.group_size,
        correlation: args.correlation,
        n_nonzero: args.n_nonzero,
        noise_std: 0.1,
        nnz_per_column: 0,
        seed: 42,
    };
    LassoSettings {
        synthetic,
        lambda_fraction: args.lambda_fraction,
        block_size: args.runs.block_size,
        candidate_pool: args.candidate_pool,
        eta: args.eta,
        priority_exponent: args.priority_exponent,
        depth: args.depth,
        max_rounds: args.max_rounds,
        eval_every: 0,
        gap_tolerance: None,
        ..LassoSettings::default()
    }
}

/// The design of `base`, its lambda and its reference optimum: the one-thread baseline
/// (cyclic coordinate descent) to a relative duality gap of 1e-10, far tighter than the
/// objective targets, whose metrics come second.
pub(crate) fn solve_design(
    bench: &'static str,
    base: &LassoSettings,
) -> Result<(DesignFigures, LassoMetrics), CliError> {
    let (x, y) = base.load()?;
    let job = LassoSettings {
        gap_tolerance: Some(1e-10),
        target_objective: None,
        ..base.clone()
    };
    let m = solve_baseline(&x, &y, &job)?.metrics;
    let design = DesignFigures {
        bench,
        n_samples: base.synthetic.n_samples,
        n_features: base.synthetic.n_features,
        lambda: base.resolve_lambda(&x, &y),
        optimum: m.final_objective,
    };
    Ok((design, m))
}

/// Plots the first run of each mode: relative objective gap against time and against
/// updates. Returns the time plot's path.
fn write_plots(
    out: &Path,
    results: &[(String, Vec<LassoMetrics>)],
    optimum: f64,
) -> Result<PathBuf, CliError> {
    let series_of = |f: &dyn Fn(&ObjectivePoint) -> f64| {
        results
            .iter()
            .map(|(mode, runs)| Series {
                name: mode.clone(),
                points: runs
                    .first()
                    .map(|m| {
                        m.objective
                            .iter()
                            .map(|p| (f(p), (p.objective - optimum) / optimum))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect::<Vec<_>>()
    };
    let plot = out.join("lasso_objective_vs_time.svg");
    line_plot(
        &plot,
        "STRADS Lasso: (f - f*) / f* against time",
        "seconds",
        "relative objective gap",
        &series_of(&|p| p.elapsed_s),
        true,
    )?;
    let plot_updates = out.join("lasso_objective_vs_updates.svg");
    line_plot(
        &plot_updates,
        "STRADS Lasso: (f - f*) / f* against coordinate updates",
        "coordinate updates",
        "relative objective gap",
        &series_of(&|p| p.updates as f64),
        true,
    )?;
    println!("plots: {} and {}", plot.display(), plot_updates.display());
    Ok(plot)
}
