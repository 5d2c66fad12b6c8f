//! `petrel bench elastic`: the built-in apps whose workers may join and leave a running
//! job (the scheduled Lasso and logistic regression with dynamic dealing; strads-mf and
//! LDA; ps-lr,
//! ps-mf and ps-lda, in `elastic_ps.rs`; P3's emulated model, in `elastic_p3.rs`), each run
//! once with a fixed membership and once with a standby worker joining and a worker leaving
//! (`--plan`), and ps-lr (ps-mf too without `--quick`) once more with a standby shard
//! joining and a shard leaving at the plan's times (`kind`: `workers` or `shards`), on the
//! same synthetic design: whether the final model is the same
//! (`identical`: bit for bit; `within_tolerance`: the objective to 1e-6 relative), the job
//! time each change cost (`seconds_lost_per_change` = (elastic - fixed) / changes), node
//! processes left behind (`orphans`, with `--transport processes`) and runs that did not
//! end within `--max-seconds` (`hangs`). strads-mf runs on synthetic low-rank ratings
//! (`--quick`: 80 users x 50 items); its changed workers rebuild their residuals from the
//! data, so `identical` compares the factor files and `within_tolerance` the train and
//! test RMSE (to 1e-4 relative; `objective_rel_diff` is the train RMSE's). LDA runs on a
//! synthetic corpus (`--quick`: 80 documents of 20 words); after a change Gibbs sampling
//! follows another chain, so `identical` compares the topic-word files and
//! `within_tolerance` the log-likelihood per token (to 2e-2 relative, `bench balance`'s
//! LDA tolerance). The apps that keep a fixed membership are listed in
//! `fixed_membership`.

use petrel::CliError;
use petrel::train::{Membership, run_job_with};
use petrel_actors::{JobTransport, MembershipArgs};
use petrel_ml::data::synthetic::LdaCorpusParams;
use petrel_strads::apps::lasso::metrics::RowDealing;
use petrel_strads::apps::lasso::{Balance, LassoApp, LassoSettings, LassoSolver, SyntheticLasso};
use petrel_strads::apps::lda::{LdaApp, LdaSettings};
use petrel_strads::apps::logistic::LogisticApp;
use petrel_strads::apps::mf::{MfApp, StradsMfSettings};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct ElasticBenchArgs {
    /// A small design and few rounds (tests).
    #[arg(long)]
    pub quick: bool,
    /// Rows of the sparse synthetic design (`--quick`: 300).
    #[arg(long, default_value_t = 20_000)]
    pub n_samples: usize,
    /// Features (`--quick`: 300).
    #[arg(long, default_value_t = 2000)]
    pub n_features: usize,
    /// Starting workers (one more is standby).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Coordinates per round (`--quick`: 8).
    #[arg(long, default_value_t = 32)]
    pub block_size: usize,
    /// Rounds of each run (`--quick`: 1500).
    #[arg(long, default_value_t = 4000)]
    pub rounds: u64,
    /// The membership plan of the elastic runs (`w<workers>` is the standby worker;
    /// `--quick` with this default: `at=200ms add w2; at=700ms remove w0`).
    #[arg(long, default_value = PLAN)]
    pub plan: String,
    /// How the nodes run.
    #[arg(long, value_enum, default_value_t = JobTransport::Processes)]
    pub transport: JobTransport,
    /// The apps to run (default: every elastic app).
    #[arg(long, value_delimiter = ',')]
    pub apps: Vec<String>,
    /// A run not done after this long counts as a hang.
    #[arg(long, default_value_t = 600)]
    pub max_seconds: u64,
    #[arg(long, default_value = "target/bench-elastic")]
    pub out: PathBuf,
}

const PLAN: &str = "at=1s add w2; at=2s remove w0";

/// The built-in apps whose workers join and leave, in the bench's order.
pub const ELASTIC_APPS: [&str; 8] = [
    "lasso",
    "logistic",
    "strads-mf",
    "lda",
    "ps-lr",
    "ps-mf",
    "ps-lda",
    "p3",
];

/// One app, fixed membership against a join and a leave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppFigures {
    pub app: String,
    /// What joins and leaves: `workers`, or `shards` (ps-lr, ps-mf).
    #[serde(default)]
    pub kind: String,
    /// Joins and leaves the elastic run made.
    pub changes: u64,
    /// The final coefficients are the fixed run's bit for bit.
    pub identical: Option<bool>,
    /// The final objectives agree to 1e-6 relative.
    pub within_tolerance: bool,
    pub objective_rel_diff: f64,
    pub fixed_s: f64,
    pub elastic_s: f64,
    pub seconds_lost_per_change: f64,
    /// Node processes still alive after the run.
    pub orphans: usize,
    /// Runs that did not end within `max_seconds`.
    pub hangs: usize,
    /// Rows per worker after the last change (STRADS apps; empty for ps-lr and ps-mf).
    pub rows: Vec<u64>,
}

/// The JSON line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ElasticFigures {
    pub bench: String,
    pub quick: bool,
    pub n_samples: usize,
    pub n_features: usize,
    pub workers: usize,
    pub rounds: u64,
    pub plan: String,
    pub transport: String,
    pub apps: Vec<AppFigures>,
    /// Built-in apps that keep a fixed membership.
    pub fixed_membership: Vec<String>,
}

impl ElasticBenchArgs {
    fn sized(&self) -> ElasticBenchArgs {
        if !self.quick {
            return self.clone();
        }
        ElasticBenchArgs {
            n_samples: 300,
            n_features: 300,
            block_size: 8,
            rounds: 1500,
            plan: match self.plan.as_str() {
                PLAN => "at=200ms add w2; at=700ms remove w0".into(),
                other => other.into(),
            },
            ..self.clone()
        }
    }

    /// The scheduled `app`'s job with dynamic dealing, run to `rounds`, into `out/<app>/<run>`.
    fn job(&self, app: &str, run: &str) -> LassoSettings {
        LassoSettings {
            synthetic: SyntheticLasso {
                n_samples: self.n_samples,
                n_features: self.n_features,
                ..SyntheticLasso::default()
            },
            solver: LassoSolver::Scheduled,
            block_size: self.block_size,
            candidate_pool: self.block_size * 4,
            max_rounds: self.rounds,
            gap_tolerance: Some(0.0),
            balance: Balance::Dynamic,
            out_dir: Some(self.out.join(app).join(run)),
            ..LassoSettings::default()
        }
    }
}

impl ElasticBenchArgs {
    /// strads-mf's job with dynamic dealing, into `out/strads-mf/<run>`.
    fn mf_job(&self, run: &str) -> StradsMfSettings {
        let (n_users, n_items, iterations) = match self.quick {
            true => (80, 50, 50),
            false => (2000, 1000, 20),
        };
        StradsMfSettings {
            synthetic: petrel_ml::data::synthetic::LowRankParams {
                n_users,
                n_items,
                ..Default::default()
            },
            outer_iterations: iterations,
            balance: Balance::Dynamic,
            out_dir: Some(self.out.join("strads-mf").join(run)),
            ..StradsMfSettings::default()
        }
    }

    /// LDA's job with dynamic dealing on a synthetic corpus, into `out/lda/<run>`.
    fn lda_job(&self, run: &str) -> LdaSettings {
        let (vocab_size, n_docs, doc_length, iterations) = match self.quick {
            true => (200, 80, 20, 400),
            false => (5000, 4000, 100, 200),
        };
        LdaSettings {
            synthetic: LdaCorpusParams {
                vocab_size,
                n_docs,
                doc_length,
                ..LdaCorpusParams::default()
            },
            iterations,
            balance: Balance::Dynamic,
            out_dir: Some(self.out.join("lda").join(run)),
            ..LdaSettings::default()
        }
    }

    /// The membership of the elastic runs: one standby worker and the plan.
    fn elastic_membership(&self) -> Membership {
        Membership {
            plan: MembershipArgs {
                standby_workers: 1,
                scale: Some(self.plan.clone()),
                ..MembershipArgs::default()
            },
            ..Membership::default()
        }
    }
}

/// Runs `f` on its own thread; `None` if it did not end in `max_seconds` (a hang).
fn within<T: Send + 'static>(
    max_seconds: u64,
    (app, run): (&str, &str),
    f: impl FnOnce() -> Result<T, CliError> + Send + 'static,
) -> Result<Option<T>, CliError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let Ok(result) = rx.recv_timeout(Duration::from_secs(max_seconds)) else {
        tracing::warn!(app, run, "run did not end in time: a hang");
        return Ok(None);
    };
    result.map(Some)
}

/// What the comparison reads of one run.
struct Run {
    elapsed_s: f64,
    objective: f64,
    coefficients: Vec<f32>,
    balance: Option<RowDealing>,
}

/// Runs `app` with `membership` on a thread; `None` if it did not end in `max_seconds`.
fn run_app(
    args: &ElasticBenchArgs,
    app: &str,
    membership: Membership,
) -> Result<Option<Run>, CliError> {
    let run = if membership == Membership::default() {
        "fixed"
    } else {
        "elastic"
    };
    let job = args.job(app, run);
    let (workers, transport) = (args.workers, args.transport);
    let app_name = app.to_string();
    let thread_job = job.clone();
    let result = within(args.max_seconds, (app, run), move || {
        let job = thread_job;
        match app_name.as_str() {
            "lasso" => run_job_with::<LassoApp>(&job, workers, transport, &membership)
                .map(|m| (m.elapsed_s, m.final_objective, m.balance)),
            _ => run_job_with::<LogisticApp>(&job, workers, transport, &membership)
                .map(|m| (m.elapsed_s, m.final_objective, m.balance)),
        }
    })?;
    let Some((elapsed_s, objective, balance)) = result else {
        return Ok(None);
    };
    let dir = job.out_dir.unwrap_or_default();
    let coefficients = read_coefficients(&dir.join("coefficients.tsv"))?;
    tracing::info!(app, run, seconds = elapsed_s, "elastic bench run");
    Ok(Some(Run {
        elapsed_s,
        objective,
        coefficients,
        balance,
    }))
}

/// The values of a `coefficients.tsv` (the last column of each line).
fn read_coefficients(path: &std::path::Path) -> Result<Vec<f32>, CliError> {
    let text = std::fs::read_to_string(path).map_err(CliError::io(path))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split('\t').next_back()?.trim().parse::<f32>().ok())
        .collect())
}

/// Child processes of this one still alive (the launcher's nodes, after a run). Threads
/// leave no process, and counting then would count another caller's children: 0.
pub(crate) fn orphans(transport: JobTransport) -> usize {
    if transport != JobTransport::Processes {
        return 0;
    }
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // `pid (comm) state ppid ...`: after the command's closing parenthesis.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            fields.get(1) == Some(&me.as_str()) && !matches!(fields.first(), Some(&"Z" | &"X"))
        })
        .count()
}

/// `app` with a fixed membership against a join and a leave.
fn compare(args: &ElasticBenchArgs, app: &str) -> Result<AppFigures, CliError> {
    let fixed = run_app(args, app, Membership::default())?;
    let elastic = run_app(args, app, args.elastic_membership())?;
    let orphans = orphans(args.transport);
    let hangs = usize::from(fixed.is_none()) + usize::from(elastic.is_none());
    let (Some(fixed), Some(elastic)) = (fixed, elastic) else {
        return Ok(hung(app, orphans, hangs));
    };
    let dealing = elastic.balance.unwrap_or_default();
    let changes = changes_of(&dealing);
    let diff = (elastic.objective - fixed.objective).abs() / fixed.objective.abs();
    let runs = (fixed.elapsed_s, elastic.elapsed_s);
    let identical = fixed.coefficients.len() == elastic.coefficients.len()
        && (fixed.coefficients.iter())
            .zip(&elastic.coefficients)
            .all(|(a, b)| a.to_bits() == b.to_bits());
    Ok(AppFigures {
        identical: Some(identical),
        within_tolerance: diff <= 1e-6,
        objective_rel_diff: diff,
        ..timed(app, runs, changes, (orphans, hangs), dealing.rows)
    })
}

/// The figures of `app` whose `(fixed, elastic)` runs took `runs` seconds, before the
/// comparison of their models.
fn timed(
    app: &str,
    runs: (f64, f64),
    changes: u64,
    (orphans, hangs): (usize, usize),
    rows: Vec<u64>,
) -> AppFigures {
    let (fixed_s, elastic_s) = runs;
    AppFigures {
        app: app.into(),
        kind: "workers".into(),
        changes,
        identical: None,
        within_tolerance: false,
        objective_rel_diff: f64::NAN,
        fixed_s,
        elastic_s,
        seconds_lost_per_change: (elastic_s - fixed_s) / changes.max(1) as f64,
        orphans,
        hangs,
        rows,
    }
}

/// The figures of `app` when a run hung.
fn hung(app: &str, orphans: usize, hangs: usize) -> AppFigures {
    timed(app, (f64::NAN, f64::NAN), 0, (orphans, hangs), Vec::new())
}

/// Joins and leaves of a run.
fn changes_of(dealing: &RowDealing) -> u64 {
    (dealing.changes.iter())
        .map(|c| (c.joined.len() + c.left.len()) as u64)
        .sum()
}

/// A STRADS ring app (strads-mf, LDA) with a fixed membership against a join and a
/// leave: `identical` compares its output `files`, `within_tolerance` the figures
/// `figures` reads of its metrics to `tolerance` relative (`objective_rel_diff` is the
/// first one's); the changes and rows come from its `metrics.json`.
fn compare_ring<A: petrel::train::apps::StradsTrainApp>(
    args: &ElasticBenchArgs,
    (app, files): (&'static str, &[&str]),
    job: impl Fn(&str) -> A::Config,
    figures: fn(&A::Metrics) -> (f64, Vec<f64>),
    tolerance: f64,
) -> Result<AppFigures, CliError>
where
    A::Config: Serialize + Send + 'static,
    A::Metrics: Send + 'static,
{
    let run = |membership: Membership, run: &str| {
        let job = job(run);
        let (workers, transport) = (args.workers, args.transport);
        let f = move || run_job_with::<A>(&job, workers, transport, &membership);
        within(args.max_seconds, (app, run), f)
    };
    let fixed = run(Membership::default(), "fixed")?;
    let elastic = run(args.elastic_membership(), "elastic")?;
    let orphans = orphans(args.transport);
    let hangs = usize::from(fixed.is_none()) + usize::from(elastic.is_none());
    let (Some(fixed), Some(elastic)) = (fixed, elastic) else {
        return Ok(hung(app, orphans, hangs));
    };
    let read = |run: &str, name: &str| {
        let path = args.out.join(app).join(run).join(name);
        std::fs::read_to_string(&path).map_err(CliError::io(&path))
    };
    let outputs = |run: &str| -> Result<String, CliError> {
        files.iter().map(|name| read(run, name)).collect()
    };
    let metrics: serde_json::Value = serde_json::from_str(&read("elastic", "metrics.json")?)
        .map_err(|e| CliError::Usage(format!("{app}'s metrics.json: {e}")))?;
    let dealing: RowDealing =
        serde_json::from_value(metrics["balance"].clone()).unwrap_or_default();
    let ((fixed_s, f), (elastic_s, e)) = (figures(&fixed), figures(&elastic));
    let rel: Vec<f64> = (f.iter().zip(&e))
        .map(|(f, e)| (e - f).abs() / f.abs())
        .collect();
    let changes = changes_of(&dealing);
    Ok(AppFigures {
        identical: Some(outputs("fixed")? == outputs("elastic")?),
        within_tolerance: rel.iter().all(|&r| r <= tolerance),
        objective_rel_diff: rel.first().copied().unwrap_or(f64::NAN),
        ..timed(
            app,
            (fixed_s, elastic_s),
            changes,
            (orphans, hangs),
            dealing.rows,
        )
    })
}

/// strads-mf: identical factor files, train and test RMSE within 1e-4.
fn compare_mf(args: &ElasticBenchArgs) -> Result<AppFigures, CliError> {
    let files = ("strads-mf", &["user_factors.tsv", "item_factors.tsv"][..]);
    let figures = |m: &petrel_strads::apps::mf::MfMetrics| {
        (m.elapsed_s, vec![m.final_train_rmse, m.final_test_rmse])
    };
    compare_ring::<MfApp>(args, files, |run| args.mf_job(run), figures, 1e-4)
}

/// LDA: identical topic-word files, log-likelihood per token within 2e-2 (after a
/// re-deal Gibbs sampling follows another chain).
fn compare_lda(args: &ElasticBenchArgs) -> Result<AppFigures, CliError> {
    let files = ("lda", &["topic_word.tsv"][..]);
    let figures = |m: &petrel_ml::topic::LdaMetrics| (m.elapsed_s, vec![m.final_loglik_per_token]);
    compare_ring::<LdaApp>(args, files, |run| args.lda_job(run), figures, 2e-2)
}

/// Runs the comparison and returns its figures (the table is printed on the way).
pub fn measure(args: &ElasticBenchArgs) -> Result<ElasticFigures, CliError> {
    let args = args.sized();
    let out = petrel::train::plot::absolute(&args.out)?;
    let args = ElasticBenchArgs { out, ..args };
    if let Some(unknown) = (args.apps.iter()).find(|a| !ELASTIC_APPS.contains(&a.as_str())) {
        return Err(CliError::Usage(format!(
            "--apps {unknown}: not an elastic app (one of {})",
            ELASTIC_APPS.join(", ")
        )));
    }
    let wants = |app: &str| args.apps.is_empty() || args.apps.iter().any(|a| a == app);
    let mut apps = Vec::new();
    let mut shards = Vec::new();
    for app in ELASTIC_APPS.into_iter().filter(|a| wants(a)) {
        match app {
            "ps-lr" | "ps-mf" | "ps-lda" => {
                let (workers, shard) = crate::elastic_ps::compare(&args, app)?;
                apps.push(workers);
                shards.extend(shard);
            }
            "strads-mf" => apps.push(compare_mf(&args)?),
            "lda" => apps.push(compare_lda(&args)?),
            "p3" => apps.push(crate::elastic_p3::compare(&args)?),
            _ => apps.push(compare(&args, app)?),
        }
    }
    apps.extend(shards);
    let keys = "app kind changes identical within_tolerance objective_rel_diff fixed_s elastic_s \
                seconds_lost_per_change orphans hangs rows";
    crate::common::json_table(&apps, keys).print();
    let fixed_membership = ["lasso (gauss-seidel)", "logistic (gauss-seidel)"];
    Ok(ElasticFigures {
        bench: "elastic".into(),
        quick: args.quick,
        n_samples: args.n_samples,
        n_features: args.n_features,
        workers: args.workers,
        rounds: args.rounds,
        plan: args.plan.clone(),
        transport: format!("{:?}", args.transport).to_lowercase(),
        apps,
        fixed_membership: fixed_membership.map(String::from).to_vec(),
    })
}

pub fn run(args: ElasticBenchArgs) -> Result<(), CliError> {
    crate::scale::print_figures(&measure(&args)?)
}
