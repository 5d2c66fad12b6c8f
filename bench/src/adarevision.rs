//! `petrel bench adarevision`: AdaRevision against the best fixed and the best Adagrad step
//! of a grid, on logistic regression and MF over the parameter server, each run its own
//! in-process cluster read without a bound (`async`) under transient stragglers. The
//! figures: each rule's best time to target, and AdaRevision's at its untuned default step
//! (Bösen's `alpha` = [`ServerRule::DEFAULT_ALPHA`]). A diverged run did not reach the target.
//!
//! Then the delay sweep ([`delays`]): sparse logistic regression with power-law features,
//! the shards holding every update back for `d` later updates, each rule's best final loss
//! over its grid (median of interleaved repeats) per delay.

use crate::BenchError;
use crate::common::{LrDataArgs, PsClusterArgs, TransientArgs, fmt_opt, save_and_print};
use petrel_actors::Transport;
use petrel_ps::{ConsistencyModel, PsError, PsLr, PsLrSettings, PsMf, PsMfSettings, ServerRule};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub mod delays;

/// `petrel bench adarevision`.
#[derive(clap::Args, Debug, Clone)]
pub struct AdaRevisionBenchArgs {
    /// Apps (comma separated): lr, mf.
    #[arg(long, value_delimiter = ',', default_value = "lr,mf")]
    pub apps: Vec<String>,
    #[command(flatten)]
    pub cluster: PsClusterArgs,
    /// Consistency of the shared table.
    #[arg(long, value_enum, default_value_t = ConsistencyModel::Async)]
    pub consistency: ConsistencyModel,
    #[arg(long, default_value_t = 4)]
    pub staleness: u32,
    /// Emulated compute per clock (ms).
    #[arg(long, default_value_t = 10.0)]
    pub clock_ms: f64,
    #[command(flatten)]
    pub stragglers: TransientArgs,
    #[command(flatten)]
    pub lr: LrDataArgs,
    /// Step sizes of the fixed-step SGD grid, per app `lr`.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.3,1,3,10")]
    pub lr_sgd_grid: Vec<f32>,
    /// Step sizes (alpha) of the Adagrad and AdaRevision grid, `lr`.
    #[arg(long, value_delimiter = ',', default_value = "0.03,0.1,0.3,1,3")]
    pub lr_ada_grid: Vec<f32>,
    /// Fixed-step grid, `mf`.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.03,0.1,0.3")]
    pub mf_sgd_grid: Vec<f32>,
    /// Adagrad/AdaRevision grid, `mf`.
    #[arg(long, value_delimiter = ',', default_value = "0.03,0.1,0.3,1,3")]
    pub mf_ada_grid: Vec<f32>,
    /// AdaRevision's untuned step per app (lr, mf); unset: Bösen's default, 0.1.
    #[arg(long, value_delimiter = ',')]
    pub default_alpha: Vec<f32>,
    /// Targets: LR log-loss, MF RMSE.
    #[arg(long, default_value_t = 0.1)]
    pub target_log_loss: f64,
    #[arg(long, default_value_t = 0.4)]
    pub target_rmse: f64,
    /// Per-run time limit (s).
    #[arg(long, default_value_t = 15.0)]
    pub max_seconds: f64,
    #[command(flatten)]
    pub sweep: delays::DelaySweepArgs,
    /// Two grid points per rule, small data: for tests.
    #[arg(long)]
    pub quick: bool,
    /// Where the JSON figures are also written.
    #[arg(long, default_value = "target/bench/adarevision.json")]
    pub json_out: PathBuf,
}

/// One run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleRun {
    pub rule: ServerRule,
    pub alpha: f32,
    pub time_to_target_s: Option<f64>,
    /// Min clock at the target (or the end).
    pub iterations: u64,
    /// Final loss (LR log-loss, MF RMSE); `None` if the run diverged.
    pub final_loss: Option<f64>,
    pub diverged: bool,
}

/// One app's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AdaRevisionAppFigures {
    pub target: f64,
    pub runs: Vec<RuleRun>,
    /// Best time of each rule: `(alpha, seconds)`.
    pub best: BTreeMap<String, Option<(f32, f64)>>,
    /// AdaRevision's untuned step and its time.
    pub adarevision_default: (f32, Option<f64>),
    pub default_alpha_from: String,
    /// The rules whose best step is at an end of their grid.
    pub best_at_grid_edge: Vec<String>,
    pub lowest_final_loss: Option<f64>,
    /// AdaRevision at its default step over the best tuned fixed or Adagrad time.
    pub default_adarevision_over_best_tuned: Option<f64>,
}

/// The JSON line.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AdaRevisionFigures {
    pub consistency: ConsistencyModel,
    pub quick: bool,
    pub apps: BTreeMap<String, AdaRevisionAppFigures>,
    /// The delay sweep, one entry per injected delay.
    pub delays: Vec<delays::DelayFigures>,
    /// The sweep's summary (degradations, the best steps' spread).
    pub delay_summary: delays::DelaySummary,
}

fn run_one(
    args: &AdaRevisionBenchArgs,
    app: &str,
    rule: ServerRule,
    alpha: f32,
) -> Result<Option<RuleRun>, BenchError> {
    let (c, quic, none) = (&args.cluster, Transport::Quic, |_: &mut _| {});
    // (time to target, iterations, final loss)
    let ran = match app {
        "lr" => c
            .run::<PsLr>(lr_config(args, rule, alpha), quic, none)
            .map(|o| {
                let m = o.metrics;
                (m.time_to_target_s, m.iterations, m.final_log_loss)
            }),
        "mf" => c
            .run::<PsMf>(mf_config(args, rule, alpha), quic, none)
            .map(|o| {
                let m = o.metrics;
                (m.time_to_target_s, m.iterations, m.final_rmse)
            }),
        other => {
            tracing::warn!(app = other, "unknown app (lr or mf); skipped");
            return Ok(None);
        }
    };
    let (time_to_target_s, iterations, final_loss) = match ran {
        Ok((t, i, l)) => (t, i, Some(l)),
        Err(e) if diverged(&e) => (None, 0, None),
        Err(e) => return Err(BenchError::run(format!("{app} {rule:?} alpha {alpha}"))(e)),
    };
    Ok(Some(RuleRun {
        rule,
        alpha,
        time_to_target_s,
        iterations,
        final_loss,
        diverged: final_loss.is_none(),
    }))
}

/// Whether a run failed because its loss became NaN or infinite (also through a role's
/// error text).
pub(crate) fn diverged(e: &PsError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if let Some(petrel_ml::MlError::Diverged { .. }) = x.downcast_ref::<petrel_ml::MlError>() {
            return true;
        }
        cur = x.source();
    }
    petrel_actors::error_chain(e).contains("the run diverged")
}

fn lr_config(args: &AdaRevisionBenchArgs, rule: ServerRule, alpha: f32) -> PsLrSettings {
    PsLrSettings {
        learning_rate: alpha,
        rule,
        consistency: args.consistency,
        staleness: args.staleness,
        target_log_loss: Some(args.target_log_loss),
        max_seconds: args.max_seconds,
        stragglers: args.stragglers.settings(args.clock_ms),
        ..args.lr.config(args.quick)
    }
}

fn mf_config(args: &AdaRevisionBenchArgs, rule: ServerRule, alpha: f32) -> PsMfSettings {
    PsMfSettings {
        learning_rate: alpha,
        rule: Some(rule),
        consistency: args.consistency,
        staleness: args.staleness,
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_every: Some(1),
        stragglers: args.stragglers.settings(args.clock_ms),
        ..crate::common::ps_mf(args.quick)
    }
}

/// AdaRevision's untuned step for app number `k` and how it was set (`--default-alpha`
/// wins).
fn default_alpha(args: &AdaRevisionBenchArgs, k: usize) -> (f32, String) {
    match args.default_alpha.get(k).or(args.default_alpha.first()) {
        Some(&a) => (a, "--default-alpha".into()),
        None => (ServerRule::DEFAULT_ALPHA, "Bösen's default".into()),
    }
}

/// A rule's name in the JSON (`sgd`, `adagrad`, `adarevision`).
pub(crate) fn rule_name(r: ServerRule) -> String {
    format!("{r:?}").to_lowercase()
}

/// Runs the grids and returns the figures (tables printed as it goes).
pub fn measure(args: &AdaRevisionBenchArgs) -> Result<AdaRevisionFigures, BenchError> {
    let mut apps = BTreeMap::new();
    for (k, app) in args.apps.iter().enumerate().filter(|(_, a)| !a.is_empty()) {
        let (sgd, ada, target) = match app.as_str() {
            "mf" => (&args.mf_sgd_grid, &args.mf_ada_grid, args.target_rmse),
            _ => (&args.lr_sgd_grid, &args.lr_ada_grid, args.target_log_loss),
        };
        let limit = if args.quick { 2 } else { usize::MAX };
        let pick = |g: &Vec<f32>| -> Vec<f32> { g.iter().copied().take(limit).collect() };
        let (sgd, ada) = (pick(sgd), pick(ada));
        let (default_alpha, default_alpha_from) = default_alpha(args, k);
        let mut revision = ada.clone();
        if !revision.contains(&default_alpha) {
            revision.push(default_alpha);
        }
        let mut runs = Vec::new();
        for (rule, grid) in [
            (ServerRule::Sgd, &sgd),
            (ServerRule::Adagrad, &ada),
            (ServerRule::AdaRevision, &revision),
        ] {
            for &alpha in grid {
                eprintln!("running {app} {} alpha {alpha} ...", rule_name(rule));
                runs.extend(run_one(args, app, rule, alpha)?);
            }
        }
        let (mut best, mut best_at_grid_edge) = (BTreeMap::new(), Vec::new());
        // The edges are the tuned grid's (AdaRevision's default step aside).
        for (rule, grid) in [
            (ServerRule::Sgd, &sgd),
            (ServerRule::Adagrad, &ada),
            (ServerRule::AdaRevision, &ada),
        ] {
            let b = runs
                .iter()
                .filter(|r| r.rule == rule)
                .filter_map(|r| Some((r.alpha, r.time_to_target_s?)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let lo = grid.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = grid.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if b.is_some_and(|(a, _)| a <= lo || a >= hi) {
                best_at_grid_edge.push(rule_name(rule));
            }
            best.insert(rule_name(rule), b);
        }
        let default_time = runs
            .iter()
            .find(|r| r.rule == ServerRule::AdaRevision && r.alpha == default_alpha)
            .and_then(|r| r.time_to_target_s);
        let lowest_final_loss = runs
            .iter()
            .filter_map(|r| r.final_loss)
            .min_by(f64::total_cmp);
        let best_tuned = ["sgd", "adagrad"]
            .iter()
            .filter_map(|n| best.get(*n).copied().flatten().map(|b| b.1))
            .min_by(f64::total_cmp);
        let figures = AdaRevisionAppFigures {
            target,
            default_adarevision_over_best_tuned: crate::common::ratio(default_time, best_tuned),
            adarevision_default: (default_alpha, default_time),
            default_alpha_from,
            best_at_grid_edge,
            lowest_final_loss,
            best,
            runs,
        };
        println!("{app} (target {target}, {})", args.consistency);
        let keys = "rule alpha time_to_target_s iterations final_loss diverged";
        crate::common::json_table(&figures.runs, keys).print();
        println!(
            "adarevision at its default alpha {} ({}) / best tuned sgd or adagrad: {}x; best at a grid edge: {:?}\n",
            default_alpha,
            figures.default_alpha_from,
            fmt_opt(figures.default_adarevision_over_best_tuned),
            figures.best_at_grid_edge,
        );
        apps.insert(app.clone(), figures);
    }
    let (delays, delay_summary) = delays::sweep(args)?;
    Ok(AdaRevisionFigures {
        consistency: args.consistency,
        quick: args.quick,
        apps,
        delays,
        delay_summary,
    })
}

/// Runs the benchmark: tables and one JSON line (also written to `--json-out`).
pub fn run(args: AdaRevisionBenchArgs) -> Result<(), BenchError> {
    save_and_print(&args.json_out, &measure(&args)?)
}
