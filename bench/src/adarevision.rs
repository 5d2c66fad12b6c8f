//! `petrel bench adarevision`: AdaRevision against the best fixed step and the best Adagrad
//! step of a small grid, on logistic regression and MF over the parameter server.
//!
//! Every run is its own in-process cluster with the shards' update rule set by the app's
//! `--rule` (workers send gradients; AdaRevision's workers also send the gradient sums `z`
//! they read). The table is read without a bound (`async` by default) with transient
//! stragglers, so gradients are computed on stale weights: the case AdaRevision was made
//! for. For each rule the grid of step sizes runs; the figures are each rule's best time to
//! the target, and AdaRevision's at its default step, which is not tuned but derived from the
//! scale of the solution ([`alpha_for_radius`]): `sqrt(2)` for LR (unit-scale features,
//! weights of order one) and `sqrt(2) * PsMfData::factor_scale(rank)` for MF (the size of a
//! factor coordinate that reproduces the ratings' spread). `--default-alpha` overrides it.
//! A run that diverges is kept as a run that did not reach the target.

use petrel::report::{Table, fmt, print_json, save_json};
use petrel_actors::{Settings, Transport};
use petrel_ps::apps::mf::PsMfData;
use petrel_ps::core::rules::alpha_for_radius;
use petrel_ps::{ConsistencyModel, PsError, PsLr, PsLrConfig, PsMf, PsMfConfig, ServerRule};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Why the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum AdaRevisionBenchError {
    /// One run failed.
    #[error("{app} {rule:?} alpha {alpha}")]
    Run {
        /// The app.
        app: String,
        /// The rule.
        rule: ServerRule,
        /// The step.
        alpha: f32,
        /// Why.
        #[source]
        source: PsError,
    },
    /// The figures file could not be written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The JSON line could not be written.
    #[error("json figures")]
    Json(#[from] serde_json::Error),
}

/// `petrel bench adarevision`.
#[derive(clap::Args, Debug, Clone)]
pub struct AdaRevisionBenchArgs {
    /// Apps (comma separated): lr, mf.
    #[arg(long, value_delimiter = ',', default_value = "lr,mf")]
    pub apps: Vec<String>,
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Consistency of the shared table.
    #[arg(long, value_enum, default_value_t = ConsistencyModel::Async)]
    pub consistency: ConsistencyModel,
    #[arg(long, default_value_t = 4)]
    pub staleness: u32,
    /// Emulated compute per clock (ms).
    #[arg(long, default_value_t = 10.0)]
    pub clock_ms: f64,
    /// Probability that a clock is slowed, and by how much.
    #[arg(long, default_value_t = 0.1)]
    pub transient_probability: f64,
    #[arg(long, default_value_t = 4.0)]
    pub transient_factor: f64,
    /// LR data: synthetic samples, features, classes, and samples per clock and worker.
    #[arg(long, default_value_t = 8000)]
    pub lr_samples: usize,
    #[arg(long, default_value_t = 200)]
    pub lr_features: usize,
    #[arg(long, default_value_t = 10)]
    pub lr_classes: usize,
    #[arg(long, default_value_t = 20)]
    pub lr_batch: usize,
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
    /// AdaRevision's untuned step per app (lr, mf); unset: derived from the solution's
    /// scale (see the module docs).
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
    /// Two grid points per rule, small data: for tests.
    #[arg(long)]
    pub quick: bool,
    /// Where the JSON figures are also written.
    #[arg(long, default_value = "target/bench/adarevision.json")]
    pub json_out: PathBuf,
}

/// One run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RuleRun {
    /// The rule.
    pub rule: ServerRule,
    /// Its step size.
    pub alpha: f32,
    /// Seconds to the target.
    pub time_to_target_s: Option<f64>,
    /// Min clock at the target (or the end).
    pub iterations: u64,
    /// Final loss (LR log-loss, MF RMSE); `None` if the run diverged.
    pub final_loss: Option<f64>,
    /// The run diverged (a loss became NaN or infinite).
    #[serde(default)]
    pub diverged: bool,
}

/// One app's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AdaRevisionAppFigures {
    /// The target.
    pub target: f64,
    /// Every run.
    pub runs: Vec<RuleRun>,
    /// Best time of each rule: `(alpha, seconds)`.
    pub best: BTreeMap<String, Option<(f32, f64)>>,
    /// AdaRevision's untuned step and its time.
    pub adarevision_default: (f32, Option<f64>),
    /// How the untuned step was set.
    #[serde(default)]
    pub default_alpha_from: String,
    /// The rules whose best step is at an end of their grid (the grid may miss a better
    /// step).
    #[serde(default)]
    pub best_at_grid_edge: Vec<String>,
    /// The lowest final loss of any run (how close the target is to what the time limit
    /// allows).
    #[serde(default)]
    pub lowest_final_loss: Option<f64>,
    /// AdaRevision at its default step over the best tuned fixed or Adagrad time (<= 1:
    /// no worse than the best tuned schedule).
    pub default_adarevision_over_best_tuned: Option<f64>,
}

/// The JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AdaRevisionFigures {
    /// Consistency of the shared table.
    pub consistency: ConsistencyModel,
    /// Quick mode.
    pub quick: bool,
    /// Per app.
    pub apps: BTreeMap<String, AdaRevisionAppFigures>,
}

fn tweak(s: &mut Settings) {
    s.cluster.failure_timeout_ms = 10_000;
}

fn run_one(
    args: &AdaRevisionBenchArgs,
    app: &str,
    rule: ServerRule,
    alpha: f32,
) -> Result<Option<RuleRun>, AdaRevisionBenchError> {
    let fail = |source| AdaRevisionBenchError::Run {
        app: app.into(),
        rule,
        alpha,
        source,
    };
    let (w, sh) = (args.workers, args.shards);
    let diverged_run = || RuleRun {
        rule,
        alpha,
        time_to_target_s: None,
        iterations: 0,
        final_loss: None,
        diverged: true,
    };
    Ok(Some(match app {
        "lr" => {
            let cfg = lr_config(args, rule, alpha);
            let r = match petrel_ps::run_local_with::<PsLr>(cfg, sh, w, Transport::Quic, tweak) {
                Ok(o) => o.metrics,
                Err(e) if diverged(&e) => return Ok(Some(diverged_run())),
                Err(e) => return Err(fail(e)),
            };
            RuleRun {
                rule,
                alpha,
                time_to_target_s: r.time_to_target_s,
                iterations: r.iterations,
                final_loss: Some(r.final_log_loss),
                diverged: false,
            }
        }
        "mf" => {
            let cfg = mf_config(args, rule, alpha);
            let r = match petrel_ps::run_local_with::<PsMf>(cfg, sh, w, Transport::Quic, tweak) {
                Ok(o) => o.metrics,
                Err(e) if diverged(&e) => return Ok(Some(diverged_run())),
                Err(e) => return Err(fail(e)),
            };
            RuleRun {
                rule,
                alpha,
                time_to_target_s: r.time_to_target_s,
                iterations: r.iterations,
                final_loss: Some(r.final_rmse),
                diverged: false,
            }
        }
        other => {
            tracing::warn!(app = other, "unknown app (lr or mf); skipped");
            return Ok(None);
        }
    }))
}

/// Whether a run failed because its loss became NaN or infinite (the monitor's check, also
/// when it reached us through a role's error text).
fn diverged(e: &PsError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if x.downcast_ref::<petrel_ml::job::Diverged>().is_some() {
            return true;
        }
        cur = x.source();
    }
    petrel_actors::error_chain(e).contains("the run diverged")
}

fn lr_config(args: &AdaRevisionBenchArgs, rule: ServerRule, alpha: f32) -> PsLrConfig {
    PsLrConfig {
        synthetic_samples: if args.quick { 1000 } else { args.lr_samples },
        synthetic_features: if args.quick { 40 } else { args.lr_features },
        synthetic_classes: if args.quick { 4 } else { args.lr_classes },
        learning_rate: alpha,
        rule,
        batch_size: args.lr_batch,
        consistency: args.consistency,
        staleness: args.staleness,
        max_clocks: u64::MAX,
        eval_ms: 50,
        target_log_loss: Some(args.target_log_loss),
        max_seconds: args.max_seconds,
        stragglers: petrel_ps::kit::settings::StragglerSettings {
            clock_ms: args.clock_ms,
            transient_probability: args.transient_probability,
            transient_factor: args.transient_factor,
            ..Default::default()
        },
        ..PsLrConfig::default()
    }
}

fn mf_config(args: &AdaRevisionBenchArgs, rule: ServerRule, alpha: f32) -> PsMfConfig {
    let (users, items) = if args.quick { (400, 200) } else { (2000, 1000) };
    PsMfConfig {
        synthetic_users: users,
        synthetic_items: items,
        synthetic_observed: if args.quick { 0.05 } else { 0.02 },
        rank: 8,
        learning_rate: alpha,
        rule: Some(rule),
        consistency: args.consistency,
        staleness: args.staleness,
        batches_per_epoch: 4,
        max_clocks: Some(u64::MAX),
        max_seconds: args.max_seconds,
        target_rmse: Some(args.target_rmse),
        eval_ms: 50,
        stragglers: petrel_ps::kit::settings::StragglerSettings {
            clock_ms: args.clock_ms,
            transient_probability: args.transient_probability,
            transient_factor: args.transient_factor,
            ..Default::default()
        },
        init_scale: 0.3,
        regularization: 0.02,
        ..PsMfConfig::default()
    }
}

/// AdaRevision's untuned step for `app` and how it was set (`--default-alpha` wins).
fn default_alpha(
    args: &AdaRevisionBenchArgs,
    k: usize,
    app: &str,
) -> Result<(f32, String), AdaRevisionBenchError> {
    if let Some(a) = args
        .default_alpha
        .get(k)
        .or(args.default_alpha.first())
        .copied()
    {
        return Ok((a, "--default-alpha".into()));
    }
    Ok(match app {
        "mf" => {
            let cfg = mf_config(args, ServerRule::AdaRevision, 1.0);
            let data = PsMfData::load(&cfg).map_err(|source| AdaRevisionBenchError::Run {
                app: app.into(),
                rule: ServerRule::AdaRevision,
                alpha: 1.0,
                source,
            })?;
            let r = data.factor_scale(cfg.rank);
            (
                alpha_for_radius(r),
                format!(
                    "sqrt(2) * factor scale {r:.3} (ratings' sd, rank {})",
                    cfg.rank
                ),
            )
        }
        _ => (
            alpha_for_radius(1.0),
            "sqrt(2) * 1 (unit-scale features, weights of order one)".into(),
        ),
    })
}

fn rule_name(r: ServerRule) -> &'static str {
    match r {
        ServerRule::Sgd => "sgd",
        ServerRule::Adagrad => "adagrad",
        ServerRule::AdaRevision => "adarevision",
    }
}

/// Runs the grids and returns the figures (tables printed as it goes).
pub fn measure(args: &AdaRevisionBenchArgs) -> Result<AdaRevisionFigures, AdaRevisionBenchError> {
    let mut apps = BTreeMap::new();
    for (k, app) in args.apps.iter().enumerate() {
        let (sgd, ada, target) = match app.as_str() {
            "mf" => (&args.mf_sgd_grid, &args.mf_ada_grid, args.target_rmse),
            _ => (&args.lr_sgd_grid, &args.lr_ada_grid, args.target_log_loss),
        };
        let pick = |g: &Vec<f32>| -> Vec<f32> {
            if args.quick {
                g.iter().copied().take(2).collect()
            } else {
                g.clone()
            }
        };
        let (default_alpha, default_alpha_from) = default_alpha(args, k, app)?;
        let mut plan: Vec<(ServerRule, f32)> = Vec::new();
        plan.extend(pick(sgd).into_iter().map(|a| (ServerRule::Sgd, a)));
        plan.extend(pick(ada).into_iter().map(|a| (ServerRule::Adagrad, a)));
        let mut ada_grid = pick(ada);
        if !ada_grid.contains(&default_alpha) {
            ada_grid.push(default_alpha);
        }
        plan.extend(ada_grid.into_iter().map(|a| (ServerRule::AdaRevision, a)));
        let mut runs = Vec::new();
        for (rule, alpha) in plan {
            eprintln!("running {app} {} alpha {alpha} ...", rule_name(rule));
            if let Some(r) = run_one(args, app, rule, alpha)? {
                runs.push(r);
            }
        }
        let mut best = BTreeMap::new();
        for rule in [
            ServerRule::Sgd,
            ServerRule::Adagrad,
            ServerRule::AdaRevision,
        ] {
            let b = runs
                .iter()
                .filter(|r| r.rule == rule)
                .filter_map(|r| Some((r.alpha, r.time_to_target_s?)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            best.insert(rule_name(rule).to_string(), b);
        }
        let default_time = runs
            .iter()
            .find(|r| r.rule == ServerRule::AdaRevision && r.alpha == default_alpha)
            .and_then(|r| r.time_to_target_s);
        let mut best_at_grid_edge = Vec::new();
        for (rule, grid) in [
            (ServerRule::Sgd, pick(sgd)),
            (ServerRule::Adagrad, pick(ada)),
            (ServerRule::AdaRevision, pick(ada)),
        ] {
            let (lo, hi) = (
                grid.iter().copied().fold(f32::INFINITY, f32::min),
                grid.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            );
            if let Some(Some((a, _))) = best.get(rule_name(rule))
                && (*a <= lo || *a >= hi)
            {
                best_at_grid_edge.push(rule_name(rule).to_string());
            }
        }
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
            default_adarevision_over_best_tuned: match (default_time, best_tuned) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            },
            adarevision_default: (default_alpha, default_time),
            default_alpha_from,
            best_at_grid_edge,
            lowest_final_loss,
            best,
            runs,
        };
        println!("{app} (target {target}, {})", args.consistency);
        let mut table = Table::new(&["rule", "alpha", "time to target (s)", "iterations", "final"]);
        for r in &figures.runs {
            table.row(vec![
                rule_name(r.rule).into(),
                r.alpha.to_string(),
                r.time_to_target_s.map_or("-".into(), fmt),
                r.iterations.to_string(),
                r.final_loss.map_or("diverged".into(), fmt),
            ]);
        }
        table.print();
        println!(
            "adarevision at its default alpha {} ({}) / best tuned sgd or adagrad: {}x; best at a grid edge: {:?}\n",
            default_alpha,
            figures.default_alpha_from,
            figures
                .default_adarevision_over_best_tuned
                .map_or("-".into(), fmt),
            figures.best_at_grid_edge,
        );
        apps.insert(app.clone(), figures);
    }
    Ok(AdaRevisionFigures {
        consistency: args.consistency,
        quick: args.quick,
        apps,
    })
}

/// Runs the benchmark: tables and one JSON line (also written to `--json-out`).
pub fn run(args: AdaRevisionBenchArgs) -> Result<(), AdaRevisionBenchError> {
    let figures = measure(&args)?;
    save_json(&args.json_out, &figures).map_err(|source| AdaRevisionBenchError::Io {
        path: args.json_out.clone(),
        source,
    })?;
    Ok(print_json(&figures)?)
}
