//! `petrel bench balance`: STRADS with one worker slowed `--straggler-factor` times (its
//! compute takes that much longer, as the parameter-server benches' persistent straggler),
//! static against dynamic dealing side by side in one run, in `--repeats` interleaved
//! pairs (medians): the same work (Lasso and
//! logistic: as many rounds, `gap_tolerance = 0`; MF: as many sweeps; LDA: as many
//! passes), the wall time of
//! each and how far apart their final objectives are. Dynamic dealing re-deals the
//! scheduled Lasso's and logistic regression's rows by the workers' measured time per row
//! (both on the same sparse design, logistic labelled by the response's sign), MF's users
//! by the time per user (synthetic low-rank ratings) and LDA's documents by the time per
//! document (a synthetic corpus). Every STRADS app deals dynamically, so the figures'
//! `static_only` is empty.

use petrel::CliError;
use petrel::train::{run_job, run_lasso_job};
use petrel_actors::JobTransport;
use petrel_ml::data::synthetic::{LdaCorpusParams, LowRankParams};
use petrel_strads::apps::lasso::metrics::RowDealing;
use petrel_strads::apps::lasso::{Balance, LassoSettings, LassoSolver, SyntheticLasso};
use petrel_strads::apps::lda::{LdaApp, LdaSettings};
use petrel_strads::apps::logistic::LogisticApp;
use petrel_strads::apps::mf::{MfApp, StradsMfSettings};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct BalanceBenchArgs {
    /// A small design and few rounds (tests).
    #[arg(long)]
    pub quick: bool,
    /// Rows of the sparse synthetic design (`--quick`: 4000).
    #[arg(long, default_value_t = 200_000)]
    pub n_samples: usize,
    /// Features (`--quick`: 200).
    #[arg(long, default_value_t = 2000)]
    pub n_features: usize,
    /// Non-zeros per column (`--quick`: 100). A round's compute must be well above the
    /// couple of milliseconds its messages take, or that fixed cost, which no dealing
    /// shortens, caps the speed-up (5000: Lasso 1.30, MF at 2 % observed 1.16).
    #[arg(long, default_value_t = 10_000)]
    pub nnz_per_column: usize,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Coordinates per round (`--quick`: 32).
    #[arg(long, default_value_t = 512)]
    pub block_size: usize,
    /// Rounds of each run, evaluations included (`--quick`: 60).
    #[arg(long, default_value_t = 1000)]
    pub rounds: u64,
    /// MF: users of the synthetic ratings (`--quick`: 400).
    #[arg(long, default_value_t = 40_000)]
    pub mf_users: usize,
    /// MF: items (`--quick`: 80).
    #[arg(long, default_value_t = 4000)]
    pub mf_items: usize,
    /// MF: share of the (user, item) cells rated (`--quick`: 0.3); 5 %: a rotation step's
    /// compute well above its messages (see `--nnz-per-column`).
    #[arg(long, default_value_t = 0.05)]
    pub mf_observed: f64,
    /// MF: rank (`--quick`: 3).
    #[arg(long, default_value_t = 10)]
    pub mf_rank: usize,
    /// MF: sweeps over the coordinates (`--quick`: 8); enough for the re-deals, each of
    /// which moves users' ratings through the scheduler, to pay.
    #[arg(long, default_value_t = 16)]
    pub mf_iterations: usize,
    /// LDA: documents of the synthetic corpus (`--quick`: 300).
    #[arg(long, default_value_t = 10_000)]
    pub lda_docs: usize,
    /// LDA: tokens per document (`--quick`: 60).
    #[arg(long, default_value_t = 100)]
    pub lda_doc_length: usize,
    /// LDA: vocabulary size (`--quick`: 200).
    #[arg(long, default_value_t = 5000)]
    pub lda_vocab: usize,
    /// LDA: topics (`--quick`: 4).
    #[arg(long, default_value_t = 20)]
    pub lda_topics: usize,
    /// LDA: Gibbs passes of each run (`--quick`: 16).
    #[arg(long, default_value_t = 60)]
    pub lda_iterations: usize,
    /// How many times as long worker 0's compute takes.
    #[arg(long, default_value_t = 2.0)]
    pub straggler_factor: f64,
    /// How the nodes run.
    #[arg(long, value_enum, default_value_t = JobTransport::Quic)]
    pub transport: JobTransport,
    /// Interleaved static/dynamic pairs per app (times are medians; 1 under `--quick`): a
    /// run's time swings by a third from run to run on a shared machine.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// The apps to run (default: every STRADS app).
    #[arg(long, value_delimiter = ',')]
    pub apps: Vec<String>,
    #[arg(long, default_value = "target/bench-balance")]
    pub out: PathBuf,
}

/// The STRADS apps, in the bench's order.
const BALANCE_APPS: [&str; 4] = ["lasso", "logistic", "strads-mf", "lda"];

/// One app, static against dynamic dealing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppFigures {
    pub app: String,
    pub static_s: f64,
    pub dynamic_s: f64,
    /// Static time over dynamic time: the median of [`Self::pair_ratios`].
    pub dynamic_over_static: f64,
    /// Each interleaved pair's static time over its dynamic time.
    pub pair_ratios: Vec<f64>,
    /// `|f_dynamic - f_static| / |f_static|` of the final objectives (MF: the train
    /// RMSE; LDA: the log-likelihood per token).
    pub objective_rel_diff: f64,
    /// How far apart the app's objectives may be: Lasso and logistic 1e-6 (the same
    /// updates; a re-deal only groups the rows' partial sums differently); MF 1e-4 (the
    /// same updates; a moved user's residuals are computed afresh, so they round
    /// differently); LDA 2e-2 (a re-deal changes which generator draws which token, so the
    /// chains part by about the spread of seeds).
    pub objective_tolerance: f64,
    pub static_objective: f64,
    pub dynamic_objective: f64,
    /// Coordinate updates (MF: rank-one ones; LDA: tokens sampled).
    pub static_updates: u64,
    pub dynamic_updates: u64,
    /// Re-deals of the dynamic run.
    pub deals: u64,
    /// The dynamic run's rows (MF: users; LDA: documents) per worker at the end (worker 0 is the
    /// slow one).
    pub dynamic_rows: Vec<u64>,
}

/// The JSON line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BalanceFigures {
    pub bench: String,
    pub quick: bool,
    pub n_samples: usize,
    pub n_features: usize,
    pub nnz_per_column: usize,
    pub workers: usize,
    pub block_size: usize,
    pub rounds: u64,
    pub straggler: u32,
    pub straggler_factor: f64,
    pub repeats: usize,
    pub apps: Vec<AppFigures>,
    /// STRADS apps that deal their work statically only.
    pub static_only: Vec<String>,
}

impl BalanceBenchArgs {
    /// The arguments with `--quick`'s small sizes.
    fn sized(&self) -> BalanceBenchArgs {
        if !self.quick {
            return self.clone();
        }
        BalanceBenchArgs {
            n_samples: 4000,
            n_features: 200,
            nnz_per_column: 100,
            block_size: 32,
            rounds: 60,
            mf_users: 400,
            mf_items: 80,
            mf_observed: 0.3,
            mf_rank: 3,
            mf_iterations: 8,
            lda_docs: 300,
            lda_doc_length: 60,
            lda_vocab: 200,
            lda_topics: 4,
            lda_iterations: 16,
            repeats: 1,
            ..self.clone()
        }
    }

    /// The scheduled `app` (`lasso`, `logistic`) on the sparse design, worker 0 slowed,
    /// run to `rounds`.
    fn job(&self, app: &str, balance: Balance) -> LassoSettings {
        // The Lasso's outputs keep their directories of before logistic joined.
        let out = match app {
            "lasso" => self.out.clone(),
            _ => self.out.join(app),
        };
        LassoSettings {
            synthetic: SyntheticLasso {
                n_samples: self.n_samples,
                n_features: self.n_features,
                nnz_per_column: self.nnz_per_column,
                correlation: 0.0,
                ..SyntheticLasso::default()
            },
            solver: LassoSolver::Scheduled,
            block_size: self.block_size,
            candidate_pool: self.block_size,
            // Nearly orthogonal sparse columns: no dependency check, so the rounds are the
            // workers' compute and not the scheduler's.
            rho: None,
            max_rounds: self.rounds,
            gap_tolerance: Some(0.0),
            balance,
            straggler: Some(0),
            straggler_factor: self.straggler_factor,
            out_dir: Some(out.join(balance.to_string())),
            ..LassoSettings::default()
        }
    }
}

impl BalanceBenchArgs {
    /// CCD++ on the synthetic ratings, worker 0 slowed, for `mf_iterations` sweeps.
    fn mf_job(&self, balance: Balance) -> StradsMfSettings {
        StradsMfSettings {
            synthetic: LowRankParams {
                n_users: self.mf_users,
                n_items: self.mf_items,
                rank: self.mf_rank,
                observed_fraction: self.mf_observed,
                ..LowRankParams::default()
            },
            rank: self.mf_rank,
            outer_iterations: self.mf_iterations,
            balance,
            straggler: Some(0),
            straggler_factor: self.straggler_factor,
            out_dir: Some(self.out.join("strads-mf").join(balance.to_string())),
            ..StradsMfSettings::default()
        }
    }

    /// LDA on the synthetic corpus, worker 0 slowed, for `lda_iterations` passes.
    fn lda_job(&self, balance: Balance) -> LdaSettings {
        LdaSettings {
            synthetic: LdaCorpusParams {
                n_topics: self.lda_topics,
                vocab_size: self.lda_vocab,
                n_docs: self.lda_docs,
                doc_length: self.lda_doc_length,
                ..LdaCorpusParams::default()
            },
            n_topics: self.lda_topics,
            iterations: self.lda_iterations,
            balance,
            straggler: Some(0),
            straggler_factor: self.straggler_factor,
            out_dir: Some(self.out.join("lda").join(balance.to_string())),
            ..LdaSettings::default()
        }
    }
}

/// What the comparison reads of one run.
struct Run {
    elapsed_s: f64,
    final_objective: f64,
    updates: u64,
    balance: Option<RowDealing>,
}

/// Runs `app` with `balance`.
fn run_app(args: &BalanceBenchArgs, app: &str, balance: Balance) -> Result<Run, CliError> {
    let job = args.job(app, balance);
    let run = if app == "strads-mf" {
        let m = run_job::<MfApp>(&args.mf_job(balance), args.workers, args.transport)?;
        Run {
            elapsed_s: m.elapsed_s,
            final_objective: m.final_train_rmse,
            updates: m.train_rmse.last().map_or(0, |p| p.coordinate_updates),
            balance: m.balance,
        }
    } else if app == "lda" {
        let job = args.lda_job(balance);
        let m = run_job::<LdaApp>(&job, args.workers, args.transport)?;
        Run {
            elapsed_s: m.elapsed_s,
            final_objective: m.final_loglik_per_token,
            updates: m.tokens_sampled,
            balance: job
                .out_dir
                .as_deref()
                .map(dealing_of)
                .transpose()?
                .flatten(),
        }
    } else if app == "lasso" {
        let m = run_lasso_job(&job, args.workers, args.transport, false)?;
        Run {
            elapsed_s: m.elapsed_s,
            final_objective: m.final_objective,
            updates: m.updates,
            balance: m.balance,
        }
    } else {
        let m = run_job::<LogisticApp>(&job, args.workers, args.transport)?;
        Run {
            elapsed_s: m.elapsed_s,
            final_objective: m.final_objective,
            updates: m.updates,
            balance: m.balance,
        }
    };
    tracing::info!(app, %balance, seconds = run.elapsed_s, "balance bench run");
    Ok(run)
}

/// The `balance` figures of the `metrics.json` in `out` (none with static dealing).
fn dealing_of(out: &std::path::Path) -> Result<Option<RowDealing>, CliError> {
    #[derive(Deserialize)]
    struct Dealt {
        balance: Option<RowDealing>,
    }
    let m: Dealt = petrel::train::read_json(&out.join("metrics.json"))?;
    Ok(m.balance)
}

/// `app` static against dynamic dealing, `--repeats` pairs interleaved: the times are
/// medians, the ratio the median of the pairs' ratios (each pair ran under the same load),
/// and the objective difference the largest of any pair.
fn compare(args: &BalanceBenchArgs, app: &str) -> Result<AppFigures, CliError> {
    let mut pairs = Vec::new();
    for _ in 0..args.repeats.max(1) {
        pairs.push((
            run_app(args, app, Balance::Static)?,
            run_app(args, app, Balance::Dynamic)?,
        ));
    }
    let median_of = |f: &dyn Fn(&(Run, Run)) -> f64| {
        crate::common::median(&pairs.iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    };
    let rel_diff = |(fixed, dynamic): &(Run, Run)| {
        (dynamic.final_objective - fixed.final_objective).abs() / fixed.final_objective.abs()
    };
    let ratios: Vec<f64> = pairs
        .iter()
        .map(|(fixed, dynamic)| fixed.elapsed_s / dynamic.elapsed_s)
        .collect();
    let (fixed, dynamic) = pairs
        .last()
        .ok_or_else(|| CliError::Usage("no run".into()))?;
    let dealing = dynamic.balance.clone().unwrap_or_default();
    Ok(AppFigures {
        app: app.into(),
        static_s: median_of(&|(f, _)| f.elapsed_s),
        dynamic_s: median_of(&|(_, d)| d.elapsed_s),
        dynamic_over_static: crate::common::median(&ratios).unwrap_or(f64::NAN),
        pair_ratios: ratios,
        objective_rel_diff: pairs.iter().map(rel_diff).fold(0.0, f64::max),
        objective_tolerance: match app {
            "lda" => 2e-2,
            "strads-mf" => 1e-4,
            _ => 1e-6,
        },
        static_objective: fixed.final_objective,
        dynamic_objective: dynamic.final_objective,
        static_updates: fixed.updates,
        dynamic_updates: dynamic.updates,
        deals: dealing.deals,
        dynamic_rows: dealing.rows,
    })
}

/// Runs the comparison and returns its figures (the table is printed on the way).
pub fn measure(args: &BalanceBenchArgs) -> Result<BalanceFigures, CliError> {
    let args = args.sized();
    let out = petrel::train::plot::absolute(&args.out)?;
    let args = BalanceBenchArgs { out, ..args };
    if let Some(unknown) = (args.apps.iter()).find(|a| !BALANCE_APPS.contains(&a.as_str())) {
        return Err(CliError::Usage(format!(
            "--apps {unknown}: not a STRADS app (one of {})",
            BALANCE_APPS.join(", ")
        )));
    }
    let apps = BALANCE_APPS
        .into_iter()
        .filter(|app| args.apps.is_empty() || args.apps.iter().any(|a| a == app))
        .map(|app| compare(&args, app))
        .collect::<Result<Vec<_>, _>>()?;
    let keys = "app static_s dynamic_s dynamic_over_static objective_rel_diff static_updates \
                dynamic_updates deals dynamic_rows";
    crate::common::json_table(&apps, keys).print();
    Ok(BalanceFigures {
        bench: "balance".into(),
        quick: args.quick,
        n_samples: args.n_samples,
        n_features: args.n_features,
        nnz_per_column: args.nnz_per_column,
        workers: args.workers,
        block_size: args.block_size,
        rounds: args.rounds,
        straggler: 0,
        straggler_factor: args.straggler_factor,
        repeats: args.repeats.max(1),
        apps,
        static_only: Vec::new(),
    })
}

pub fn run(args: BalanceBenchArgs) -> Result<(), CliError> {
    crate::scale::print_figures(&measure(&args)?)
}
