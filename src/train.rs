//! `petrel train lasso`: STRADS Lasso on a user's LIBSVM file (or a synthetic design), with
//! a scheduler node and worker nodes run in this process (memory or QUIC transport) or as
//! separate processes (`--transport processes`).

use petrel_actors::{Settings, Topology};
use petrel_ml::topic::LdaMetrics;
use petrel_strads::apps::lasso::{
    LassoJob, LassoMetrics, SyntheticLasso, WORKER_ROLE, checkpoint, multi,
};
use petrel_strads::apps::lda::{self, LdaJob};
use petrel_strads::apps::logistic::{self, LogisticMetrics};
use petrel_strads::apps::mf::{self, MfJob, MfMetrics};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct LassoArgs {
    /// LIBSVM file (the label is the response y). Without it: a synthetic correlated design.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Output directory: coefficients.tsv and metrics.json.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// dynamic | random | cyclic
    #[arg(long, default_value = "dynamic")]
    pub mode: String,
    /// Absolute lambda (default: --lambda-fraction of lambda_max = max |x_j^T y|).
    #[arg(long)]
    pub lambda: Option<f32>,
    #[arg(long, default_value_t = 0.2)]
    pub lambda_fraction: f64,
    /// U: coordinates updated per round.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// U': candidates before the dependency check.
    #[arg(long, default_value_t = 64)]
    pub candidate_pool: usize,
    /// Dependency-check threshold on |corr(x_j, x_k)|.
    #[arg(long, default_value_t = 0.3)]
    pub rho: f32,
    /// Disable the dependency check.
    #[arg(long)]
    pub no_filter: bool,
    /// Rounds in flight.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    #[arg(long, default_value_t = 20_000)]
    pub max_rounds: u64,
    /// Update rounds between exact KKT / duality-gap evaluations.
    #[arg(long, default_value_t = 200)]
    pub eval_every: u64,
    /// Stop when duality gap / objective falls below this.
    #[arg(long, default_value_t = 1e-5)]
    pub gap_tolerance: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// memory | quic (nodes as threads of this process) | processes (one process per node)
    #[arg(long, default_value = "quic")]
    pub transport: String,
    /// Synthetic design (without --data): rows, features, group size, in-group
    /// correlation, true non-zeros, seed.
    #[arg(long, default_value_t = 400)]
    pub synthetic_samples: usize,
    #[arg(long, default_value_t = 5000)]
    pub synthetic_features: usize,
    #[arg(long, default_value_t = 10)]
    pub synthetic_group: usize,
    #[arg(long, default_value_t = 0.8)]
    pub synthetic_correlation: f32,
    #[arg(long, default_value_t = 10)]
    pub synthetic_nonzero: usize,
    #[arg(long, default_value_t = 42)]
    pub synthetic_seed: u64,
    /// Schedulers splitting the coefficients (contiguous column ranges of equal weight).
    #[arg(long, default_value_t = 1)]
    pub schedulers: usize,
    /// Run every scheduler on one node (default: one node per scheduler).
    #[arg(long)]
    pub colocate_schedulers: bool,
    /// Lasso only: write checkpoints to this directory (shared by all nodes).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Update rounds between two checkpoints (0 = never write).
    #[arg(long, default_value_t = 500)]
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
}

impl LassoArgs {
    pub fn job(&self) -> Result<LassoJob, String> {
        let data = match &self.data {
            Some(p) => Some(
                std::fs::canonicalize(p).map_err(|e| format!("data file {}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(LassoJob {
            data,
            synthetic: SyntheticLasso {
                n_samples: self.synthetic_samples,
                n_features: self.synthetic_features,
                group_size: self.synthetic_group,
                correlation: self.synthetic_correlation,
                n_nonzero: self.synthetic_nonzero,
                noise_std: 0.1,
                seed: self.synthetic_seed,
            },
            lambda: self.lambda,
            lambda_fraction: self.lambda_fraction,
            mode: self.mode.clone(),
            block_size: self.block_size,
            candidate_pool: self.candidate_pool,
            rho: (!self.no_filter).then_some(self.rho),
            depth: self.depth,
            max_rounds: self.max_rounds,
            eval_every: self.eval_every,
            gap_tolerance: Some(self.gap_tolerance),
            seed: self.seed,
            out_dir: Some(absolute(&self.out)?),
            schedulers: self.schedulers,
            checkpoint_dir: self.checkpoint_dir.as_deref().map(absolute).transpose()?,
            checkpoint_every: self.checkpoint_every,
            resume: self.resume,
            ..LassoJob::default()
        })
    }
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
    std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Drops `null`s (TOML has none) so the settings survive a round trip through a file.
fn strip_nulls(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// A star cluster: node `scheduler` running `scheduler_role` plus `w0..w{n-1}` running
/// `worker_role`, with `[app.<section>] = job`.
pub fn star_settings<T: serde::Serialize>(
    section: &str,
    job: &T,
    scheduler_role: &str,
    worker_role: &str,
    workers: usize,
    transport: &str,
    timeout_s: u64,
) -> Result<Settings, String> {
    star_settings_with(
        section,
        job,
        &[("scheduler".into(), vec![scheduler_role.into()])],
        worker_role,
        workers,
        transport,
        timeout_s,
    )
}

/// [`star_settings`] with any scheduler nodes (`(name, roles)`, in order) before the
/// workers `w0..w{n-1}`.
pub fn star_settings_with<T: serde::Serialize>(
    section: &str,
    job: &T,
    scheduler_nodes: &[(String, Vec<String>)],
    worker_role: &str,
    workers: usize,
    transport: &str,
    timeout_s: u64,
) -> Result<Settings, String> {
    if workers == 0 {
        return Err("need at least one worker".into());
    }
    let mut topo = Topology::builder(&format!("strads-{section}")).transport(
        transport
            .parse()
            .map_err(|e: petrel_actors::NodeError| e.to_string())?,
    );
    for (name, roles) in scheduler_nodes {
        let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
        topo = topo.node(name, &roles);
    }
    for w in 0..workers {
        topo = topo.node(&format!("w{w}"), &[worker_role]);
    }
    let value = strip_nulls(serde_json::to_value(job).map_err(|e| e.to_string())?);
    topo.with(|s| {
        s.app.insert(section.into(), value);
        s.cluster.request_timeout_ms = timeout_s.max(1) * 1000;
        // Workers compute between messages; on a loaded 2-core machine a 2 s silence is
        // not a failure.
        s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
    })
    .build()
    .map_err(|e| e.to_string())
}

/// Runs a cluster: nodes as threads of this process ("memory" or "quic") or as separate
/// processes ("processes"; run files go to `run_dir`).
pub fn run_cluster(settings: Settings, transport: &str, run_dir: &Path) -> Result<(), String> {
    match transport {
        "memory" | "quic" => crate::roles::builtin(settings)
            .run_in_process()
            .map_err(|e| e.to_string()),
        "processes" => {
            let config = crate::launcher::prepare(settings, run_dir).map_err(|e| e.to_string())?;
            let mut opts = crate::launcher::LaunchOptions::new().map_err(|e| e.to_string())?;
            opts.run_dir = Some(run_dir.to_path_buf());
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?
                .block_on(crate::launcher::run(&config, opts))
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        other => Err(format!(
            "transport {other:?}: expected memory, quic or processes"
        )),
    }
}

fn cluster_transport(transport: &str) -> &str {
    if transport == "processes" {
        "quic"
    } else {
        transport
    }
}

/// The scheduler nodes of a Lasso job with `schedulers` schedulers: node `scheduler` runs
/// scheduler 0 and, when `colocate`, every other one; otherwise scheduler `s` gets node
/// `scheduler-<s>`.
pub fn lasso_scheduler_nodes(schedulers: usize, colocate: bool) -> Vec<(String, Vec<String>)> {
    let roles = |r: std::ops::Range<usize>| r.map(multi::scheduler_role_name).collect();
    if colocate {
        vec![("scheduler".into(), roles(0..schedulers.max(1)))]
    } else {
        std::iter::once(("scheduler".to_string(), roles(0..1)))
            .chain((1..schedulers).map(|s| (format!("scheduler-{s}"), roles(s..s + 1))))
            .collect()
    }
}

/// A star cluster for a Lasso job (one node per scheduler).
pub fn lasso_settings(job: &LassoJob, workers: usize, transport: &str) -> Result<Settings, String> {
    lasso_settings_on(job, workers, transport, false)
}

/// A cluster for a Lasso job, its schedulers colocated on one node or not.
pub fn lasso_settings_on(
    job: &LassoJob,
    workers: usize,
    transport: &str,
    colocate: bool,
) -> Result<Settings, String> {
    star_settings_with(
        "lasso",
        job,
        &lasso_scheduler_nodes(job.schedulers, colocate),
        WORKER_ROLE,
        workers,
        transport,
        job.timeout_s,
    )
}

/// Runs a Lasso job on a cluster and returns the metrics the scheduler wrote.
pub fn run_lasso_job(
    job: &LassoJob,
    workers: usize,
    transport: &str,
) -> Result<LassoMetrics, String> {
    run_lasso_job_on(job, workers, transport, false)
}

/// [`run_lasso_job`] with the schedulers colocated on one node (`colocate`) or not.
pub fn run_lasso_job_on(
    job: &LassoJob,
    workers: usize,
    transport: &str,
    colocate: bool,
) -> Result<LassoMetrics, String> {
    let out = job
        .out_dir
        .clone()
        .ok_or("the job needs an output directory")?;
    let settings = lasso_settings_on(job, workers, cluster_transport(transport), colocate)?;
    run_cluster(settings, transport, &out.join("run"))?;
    read_metrics(&out.join("metrics.json"))
}

/// Runs an MF job on a cluster and returns the metrics the scheduler wrote.
pub fn run_mf_job(job: &MfJob, workers: usize, transport: &str) -> Result<MfMetrics, String> {
    let out = job
        .out_dir
        .clone()
        .ok_or("the job needs an output directory")?;
    let settings = star_settings(
        "strads_mf",
        job,
        mf::SCHEDULER_ROLE,
        mf::WORKER_ROLE,
        workers,
        cluster_transport(transport),
        job.timeout_s,
    )?;
    run_cluster(settings, transport, &out.join("run"))?;
    read_json(&out.join("metrics.json"))
}

pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[derive(clap::Args, Debug, Clone)]
pub struct MfArgs {
    /// Ratings: `user item rating` triplets, or MatrixMarket coordinate format. Without it:
    /// synthetic low-rank ratings.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Output directory: user_factors.tsv, item_factors.tsv, metrics.json.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value_t = 10)]
    pub rank: usize,
    #[arg(long, default_value_t = 0.05)]
    pub lambda: f32,
    /// Sweeps over all rank-one coordinates.
    #[arg(long, default_value_t = 5)]
    pub iterations: usize,
    /// (h_k, w_k) alternations per coordinate and sweep.
    #[arg(long, default_value_t = 1)]
    pub inner: usize,
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    #[arg(long)]
    pub target_rmse: Option<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// memory | quic | processes
    #[arg(long, default_value = "quic")]
    pub transport: String,
}

/// `petrel train strads-mf`.
pub fn train_mf(args: MfArgs) -> Result<(), String> {
    let data = match &args.data {
        Some(p) => {
            Some(std::fs::canonicalize(p).map_err(|e| format!("data file {}: {e}", p.display()))?)
        }
        None => None,
    };
    let job = MfJob {
        data,
        rank: args.rank,
        lambda: args.lambda,
        outer_iterations: args.iterations,
        inner_iterations: args.inner,
        test_fraction: args.test_fraction,
        target_rmse: args.target_rmse,
        seed: args.seed,
        out_dir: Some(absolute(&args.out)?),
        ..MfJob::default()
    };
    let m = run_mf_job(&job, args.workers, &args.transport)?;
    println!(
        "mf rank {}: {} users x {} items, {} train ratings; train RMSE {:.4}, test RMSE {:.4}, {:.2} s; wrote {}",
        m.rank,
        m.n_users,
        m.n_items,
        m.train_ratings,
        m.final_train_rmse,
        m.final_test_rmse,
        m.elapsed_s,
        args.out.display()
    );
    Ok(())
}

pub fn read_metrics(path: &Path) -> Result<LassoMetrics, String> {
    read_json(path)
}

/// `petrel train lasso`.
pub fn train_lasso(args: LassoArgs) -> Result<(), String> {
    let job = args.job()?;
    if job.schedulers > 1 && (job.checkpoint_dir.is_some() || job.resume) {
        return Err(multi::MultiError::CheckpointUnsupported.to_string());
    }
    // Pre-flight: fail at once rather than after the cluster's failure timeout. (The
    // scheduler still verifies the checkpoint fully, and says why one is refused.)
    if let Some(dir) = job.checkpoint_dir.as_ref().filter(|_| job.resume) {
        let rounds = checkpoint::manifest_rounds(dir).map_err(|e| e.to_string())?;
        if rounds.is_empty() {
            return Err(checkpoint::CheckpointError::NoValid {
                dir: dir.clone(),
                reasons: Vec::new(),
            }
            .to_string());
        }
    }
    let m = run_lasso_job_on(
        &job,
        args.workers,
        &args.transport,
        args.colocate_schedulers,
    )?;
    println!(
        "lasso {} ({} scheduler(s)): {} rounds, {} coordinate updates, {:.2} s; objective {:.6}, KKT violation {:.3e}, duality gap {:.3e}; {} non-zeros; wrote {}",
        m.mode,
        job.schedulers,
        m.rounds,
        m.updates,
        m.elapsed_s,
        m.final_objective,
        m.final_kkt_violation,
        m.final_duality_gap,
        m.evaluations.last().map(|e| e.nonzeros).unwrap_or(0),
        args.out.display()
    );
    Ok(())
}

/// Runs an LDA job on a cluster and returns the metrics the scheduler wrote.
pub fn run_lda_job(job: &LdaJob, workers: usize, transport: &str) -> Result<LdaMetrics, String> {
    let out = job
        .out_dir
        .clone()
        .ok_or("the job needs an output directory")?;
    let settings = star_settings(
        "lda",
        job,
        lda::SCHEDULER_ROLE,
        lda::WORKER_ROLE,
        workers,
        cluster_transport(transport),
        job.timeout_s,
    )?;
    run_cluster(settings, transport, &out.join("run"))?;
    read_json(&out.join("metrics.json"))
}

#[derive(clap::Args, Debug, Clone)]
pub struct LdaArgs {
    /// UCI bag-of-words docword file (`D`, `W`, `NNZ` header, then `doc word count`).
    /// Without it: a corpus sampled from the LDA generative model.
    #[arg(long)]
    pub docword: Option<PathBuf>,
    /// UCI vocab file (one word per line) for readable topics.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// Output directory: topics.txt, topic_word.tsv, metrics.json.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    #[arg(long, default_value_t = 0.1)]
    pub alpha: f64,
    #[arg(long, default_value_t = 0.1)]
    pub beta: f64,
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    #[arg(long, default_value_t = 10)]
    pub top_words: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// memory | quic | processes
    #[arg(long, default_value = "quic")]
    pub transport: String,
}

/// `petrel train lda`.
pub fn train_lda(args: LdaArgs) -> Result<(), String> {
    let canon = |p: &Option<PathBuf>| -> Result<Option<PathBuf>, String> {
        p.as_ref()
            .map(|p| std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display())))
            .transpose()
    };
    let job = LdaJob {
        docword: canon(&args.docword)?,
        vocab: canon(&args.vocab)?,
        n_topics: args.topics,
        alpha: args.alpha,
        beta: args.beta,
        iterations: args.iterations,
        top_words: args.top_words,
        seed: args.seed,
        out_dir: Some(absolute(&args.out)?),
        ..LdaJob::default()
    };
    let m = run_lda_job(&job, args.workers, &args.transport)?;
    println!(
        "lda {} topics: {} docs, {} words, {} tokens; log-likelihood per token {:.4}; {:.0} tokens/s per worker; wrote {}",
        m.n_topics,
        m.n_docs,
        m.vocab_size,
        m.n_tokens,
        m.final_loglik_per_token,
        m.tokens_per_s_per_worker,
        args.out.display()
    );
    Ok(())
}

/// `petrel train logistic`: sparse logistic regression with the Lasso options (labels > 0
/// are the positive class; `--max-rounds` rounds; without `--data`, separable synthetic
/// data of `--synthetic-samples x --synthetic-features`).
pub fn train_logistic(args: LassoArgs) -> Result<(), String> {
    if args.schedulers != 1 || args.colocate_schedulers {
        return Err("--schedulers and --colocate-schedulers apply to lasso only".into());
    }
    if args.checkpoint_dir.is_some() || args.resume {
        return Err(
            "--checkpoint-dir / --resume: checkpointing is implemented for lasso only".into(),
        );
    }
    let job = args.job()?;
    let out = job
        .out_dir
        .clone()
        .ok_or("the job needs an output directory")?;
    let settings = star_settings(
        "logistic",
        &job,
        logistic::SCHEDULER_ROLE,
        logistic::WORKER_ROLE,
        args.workers,
        cluster_transport(&args.transport),
        job.timeout_s,
    )?;
    run_cluster(settings, &args.transport, &out.join("run"))?;
    let m: LogisticMetrics = read_json(&out.join("metrics.json"))?;
    println!(
        "logistic {}: {} rounds, {} coordinate updates, {:.2} s; objective {:.6}, training accuracy {:.4}; {} non-zeros; wrote {}",
        m.mode,
        m.rounds,
        m.updates,
        m.elapsed_s,
        m.final_objective,
        m.final_training_accuracy,
        m.nonzeros,
        args.out.display()
    );
    Ok(())
}
