//! The delay sweep of `petrel bench adarevision`: McMahan & Streeter's setting, where a
//! gradient is applied `d` updates after the read it was computed from. Sparse logistic
//! regression with power-law feature frequencies, read without a bound (`async`), the shards
//! holding every update back for `d` later ones (`update_delay`). Every run has the same
//! number of clocks; a run's figure is its final held-out log-loss, a rule's the best over
//! its step grid of the median over interleaved repeats (a diverged run counts as infinite).

use super::{AdaRevisionBenchArgs, diverged, rule_name};
use crate::BenchError;
use crate::common::{fmt_opt, median, ratio};
use petrel_actors::Transport;
use petrel_ps::{ConsistencyModel, PsLr, PsLrSettings, ServerRule};
use serde::Serialize;
use std::collections::BTreeMap;

/// The delay sweep's settings.
#[derive(clap::Args, Debug, Clone)]
pub struct DelaySweepArgs {
    /// Injected delays, in updates per shard (empty: no sweep).
    #[arg(long, value_delimiter = ',', default_value = "0,100,1000,10000")]
    pub delays: Vec<u64>,
    /// Interleaved repeats of every run (the figure is their median).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Clocks per worker and run.
    #[arg(long, default_value_t = 150)]
    pub sweep_clocks: u64,
    /// Features of the sparse data.
    #[arg(long, default_value_t = 2000)]
    pub sweep_features: usize,
    /// Nonzero features per sample.
    #[arg(long, default_value_t = 10)]
    pub sweep_nnz: usize,
    /// Feature `j` is drawn with weight `(j + 1)^-exponent`.
    #[arg(long, default_value_t = 1.1)]
    pub sweep_exponent: f64,
    /// Samples (train and test).
    #[arg(long, default_value_t = 6000)]
    pub sweep_samples: usize,
}

/// One rule at one step and delay over the repeats.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepRun {
    pub rule: ServerRule,
    pub alpha: f32,
    /// Final log-loss per repeat; `None` = diverged.
    pub losses: Vec<Option<f64>>,
    /// Their median (`None` if at least half diverged).
    pub median_loss: Option<f64>,
}

/// One delay's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DelayFigures {
    pub delay: u64,
    pub adarevision_best_loss: Option<f64>,
    pub adagrad_best_loss: Option<f64>,
    pub sgd_best_loss: Option<f64>,
    pub adarevision_best_alpha: Option<f32>,
    pub adagrad_best_alpha: Option<f32>,
    pub sgd_best_alpha: Option<f32>,
    /// Untuned: AdaRevision and Adagrad at Bösen's `alpha` ([`ServerRule::DEFAULT_ALPHA`]).
    pub adarevision_default_loss: Option<f64>,
    pub adagrad_default_loss: Option<f64>,
    pub runs: Vec<SweepRun>,
}

/// The sweep in a few ratios.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DelaySummary {
    /// The smallest and largest delay.
    pub delay_range: Option<(u64, u64)>,
    /// Best loss at the largest delay over best loss at the smallest, per rule.
    pub adarevision_degradation: Option<f64>,
    pub adagrad_degradation: Option<f64>,
    pub sgd_degradation: Option<f64>,
    /// Largest over smallest best step of AdaRevision across delays.
    pub adarevision_best_alpha_spread: Option<f64>,
    pub adagrad_best_alpha_spread: Option<f64>,
    /// The data and run size the figures come from.
    pub setting: String,
}

fn config(args: &AdaRevisionBenchArgs, rule: ServerRule, alpha: f32, delay: u64) -> PsLrSettings {
    let s = &args.sweep;
    let (samples, features, clocks) = if args.quick {
        (800, 200, 30)
    } else {
        (s.sweep_samples, s.sweep_features, s.sweep_clocks)
    };
    PsLrSettings {
        learning_rate: alpha,
        rule,
        consistency: ConsistencyModel::Async,
        update_delay: delay,
        synthetic_samples: samples,
        synthetic_features: features,
        synthetic_classes: args.lr.lr_classes.min(4),
        synthetic_nnz: s.sweep_nnz.min(features / 2),
        synthetic_exponent: s.sweep_exponent,
        batch_size: args.lr.lr_batch,
        max_clocks: clocks,
        eval_every: Some((clocks / 5).max(1)),
        max_seconds: args.max_seconds.max(60.0),
        checkpoint_every: 0,
        ..PsLrSettings::default()
    }
}

/// One run's final log-loss; `None` if it diverged.
fn run_one(
    args: &AdaRevisionBenchArgs,
    rule: ServerRule,
    alpha: f32,
    delay: u64,
) -> Result<Option<f64>, BenchError> {
    let cfg = config(args, rule, alpha, delay);
    match (args.cluster).run::<PsLr>(cfg, Transport::Memory, |_| {}) {
        Ok(o) => Ok(Some(o.metrics.final_log_loss).filter(|l| l.is_finite())),
        Err(e) if diverged(&e) => Ok(None),
        Err(e) => Err(BenchError::run(format!(
            "delay {delay} {} alpha {alpha}",
            rule_name(rule)
        ))(e)),
    }
}

/// The median of `losses`, a divergence counting as infinite.
fn median_loss(losses: &[Option<f64>]) -> Option<f64> {
    let xs: Vec<f64> = losses.iter().map(|l| l.unwrap_or(f64::INFINITY)).collect();
    median(&xs).filter(|m| m.is_finite())
}

/// The grid of `rule` (sgd: the fixed-step grid; the others: the Adagrad grid).
fn grid(args: &AdaRevisionBenchArgs, rule: ServerRule) -> Vec<f32> {
    let g = match rule {
        ServerRule::Sgd => &args.lr_sgd_grid,
        ServerRule::Adagrad | ServerRule::AdaRevision => &args.lr_ada_grid,
    };
    let limit = if args.quick { 2 } else { usize::MAX };
    let mut g: Vec<f32> = g.iter().copied().take(limit).collect();
    if rule != ServerRule::Sgd && !g.contains(&ServerRule::DEFAULT_ALPHA) {
        g.push(ServerRule::DEFAULT_ALPHA);
    }
    g
}

const RULES: [ServerRule; 3] = [
    ServerRule::AdaRevision,
    ServerRule::Adagrad,
    ServerRule::Sgd,
];

/// Runs the sweep: every (delay, rule, step) once per repeat, repeats outermost.
pub fn sweep(args: &AdaRevisionBenchArgs) -> Result<(Vec<DelayFigures>, DelaySummary), BenchError> {
    let s = &args.sweep;
    let repeats = if args.quick { 1 } else { s.repeats.max(1) };
    let mut losses: BTreeMap<(u64, usize, u32), Vec<Option<f64>>> = BTreeMap::new();
    for r in 0..repeats {
        for &delay in &s.delays {
            for (k, rule) in RULES.into_iter().enumerate() {
                for alpha in grid(args, rule) {
                    eprintln!(
                        "repeat {r}: delay {delay} {} alpha {alpha} ...",
                        rule_name(rule)
                    );
                    let l = run_one(args, rule, alpha, delay)?;
                    losses
                        .entry((delay, k, alpha.to_bits()))
                        .or_default()
                        .push(l);
                }
            }
        }
    }
    let figures: Vec<DelayFigures> = (s.delays.iter())
        .map(|&d| delay_figures(args, d, &losses))
        .collect();
    print(&figures);
    let summary = summarize(args, &figures);
    Ok((figures, summary))
}

fn delay_figures(
    args: &AdaRevisionBenchArgs,
    delay: u64,
    losses: &BTreeMap<(u64, usize, u32), Vec<Option<f64>>>,
) -> DelayFigures {
    let mut runs = Vec::new();
    let mut best = [(None, None); 3];
    for (k, rule) in RULES.into_iter().enumerate() {
        for alpha in grid(args, rule) {
            let l = losses
                .get(&(delay, k, alpha.to_bits()))
                .cloned()
                .unwrap_or_default();
            let m = median_loss(&l);
            if m.is_some_and(|m| best[k].0.is_none_or(|b| m < b)) {
                best[k] = (m, Some(alpha));
            }
            runs.push(SweepRun {
                rule,
                alpha,
                losses: l,
                median_loss: m,
            });
        }
    }
    let default = |rule: ServerRule| {
        (runs.iter())
            .find(|r| r.rule == rule && r.alpha == ServerRule::DEFAULT_ALPHA)
            .and_then(|r| r.median_loss)
    };
    DelayFigures {
        delay,
        adarevision_best_loss: best[0].0,
        adagrad_best_loss: best[1].0,
        sgd_best_loss: best[2].0,
        adarevision_best_alpha: best[0].1,
        adagrad_best_alpha: best[1].1,
        sgd_best_alpha: best[2].1,
        adarevision_default_loss: default(ServerRule::AdaRevision),
        adagrad_default_loss: default(ServerRule::Adagrad),
        runs,
    }
}

fn print(figures: &[DelayFigures]) {
    println!("delay sweep (async, sparse power-law LR; median final log-loss)");
    let keys = "delay adarevision_best_loss adarevision_best_alpha adagrad_best_loss \
                adagrad_best_alpha sgd_best_loss sgd_best_alpha adarevision_default_loss \
                adagrad_default_loss";
    crate::common::json_table(figures, keys).print();
}

/// Largest over smallest of `xs` (all known and positive), else `None`.
fn spread(xs: impl Iterator<Item = Option<f32>>) -> Option<f64> {
    let xs: Option<Vec<f64>> = xs.map(|x| x.map(f64::from)).collect();
    let xs = xs.filter(|v| !v.is_empty())?;
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    ratio(Some(hi), Some(lo))
}

fn summarize(args: &AdaRevisionBenchArgs, figures: &[DelayFigures]) -> DelaySummary {
    let lo = figures.iter().min_by_key(|f| f.delay);
    let hi = figures.iter().max_by_key(|f| f.delay);
    let degradation = |get: fn(&DelayFigures) -> Option<f64>| {
        ratio(hi.and_then(get), lo.and_then(get)).filter(|_| figures.len() > 1)
    };
    let cfg = config(args, ServerRule::AdaRevision, ServerRule::DEFAULT_ALPHA, 0);
    let summary = DelaySummary {
        delay_range: lo.zip(hi).map(|(a, b)| (a.delay, b.delay)),
        adarevision_degradation: degradation(|f| f.adarevision_best_loss),
        adagrad_degradation: degradation(|f| f.adagrad_best_loss),
        sgd_degradation: degradation(|f| f.sgd_best_loss),
        adarevision_best_alpha_spread: spread(figures.iter().map(|f| f.adarevision_best_alpha)),
        adagrad_best_alpha_spread: spread(figures.iter().map(|f| f.adagrad_best_alpha)),
        setting: format!(
            "{} workers, {} shards, async, {} clocks of {} samples per worker; {} samples, \
             {} features ({} per sample, exponent {}), {} classes; {} repeats",
            args.cluster.workers,
            args.cluster.shards,
            cfg.max_clocks,
            cfg.batch_size,
            cfg.synthetic_samples,
            cfg.synthetic_features,
            cfg.synthetic_nnz,
            cfg.synthetic_exponent,
            cfg.synthetic_classes,
            if args.quick {
                1
            } else {
                args.sweep.repeats.max(1)
            },
        ),
    };
    println!(
        "best loss at the largest delay / at the smallest: adarevision {}, adagrad {}, sgd {}; \
         best alpha spread across delays: adarevision {}, adagrad {}\n",
        fmt_opt(summary.adarevision_degradation),
        fmt_opt(summary.adagrad_degradation),
        fmt_opt(summary.sgd_degradation),
        fmt_opt(summary.adarevision_best_alpha_spread),
        fmt_opt(summary.adagrad_best_alpha_spread),
    );
    summary
}
