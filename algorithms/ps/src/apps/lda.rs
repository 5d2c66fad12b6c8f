//! Data-parallel LDA on the parameter server (the YahooLDA / Bösen design), the comparison
//! the STRADS paper made against its word-rotation LDA.
//!
//! One sparse PS table `word_topic` ([`WORD_TOPIC`]): row `w < V` = the topic counts of word
//! `w`, row `V` = the topic totals, spread over the shards by the PS's row placement, under
//! the job's consistency model (SSP with staleness `s` by default). Documents are split over
//! the workers exactly as the STRADS app splits them (balanced by length). A worker
//! ([`PsLdaWorker`], the sans-I/O core in `crate::core::lda`):
//!
//! 1. clock 0: draws random topics for its tokens, `batch_inc`s the resulting counts and
//!    calls `barrier()` (Bösen's `GlobalBarrier`), so every initial count is in the table;
//! 2. per clock: reads the rows of its words and the totals row (`get_many`: served from the
//!    cache while at most `s` clocks old, else fetched), samples its share of the sweep
//!    (`clocks_per_iteration` clocks per pass over its documents) with the SparseLDA sampler
//!    shared with the STRADS app, updating its view as it goes, `batch_inc`s one sparse delta
//!    per touched row and calls `clock()`; it yields to the node's event loop every
//!    `chunk_tokens` tokens. The last clock is a `barrier()`, so the table is final when the
//!    workers report.
//!
//! A monitor (role `ps-monitor`) collects per-iteration reports (the document half of the
//! log-likelihood, tokens, sampling time). Once every worker finished iteration `i` and every
//! shard's min clock reached that clock, it snapshots the shards and adds the word half: a
//! curve point. Under SSP faster workers may already be up to `s` clocks further, so
//! intermediate points mix clocks within the staleness bound; the final point is exact (all
//! workers behind a barrier) and the final table is checked ([`FinalTable::check`]: integer,
//! non-negative, rows sum to word frequencies, totals = column sums) before the run counts as
//! successful. Outputs as the STRADS app: `topics.txt`, `topic_word.tsv`, `metrics.json`.
//!
//! Counts are integers kept in `f32`: exact up to 2^24 per entry, so corpora beyond 2^24
//! tokens are refused (see `crate::core::lda`).

use crate::apps::mf::{local_topology, open_monitor, serve_shards, take_monitor_result};
use crate::core::lda::{
    FinalTable, PsLdaWorker, WORD_TOPIC, check_corpus, snapshot_word_log_likelihood,
};
use crate::core::stats::{StalenessReport, StalenessStats};
use crate::core::types::{Consistency, RowId, TableSpec};
use crate::shells::{self, PsClient, PsLayout, ShardQuery, TablesBuilder};
use petrel_actors::{Cluster, Node, NodeContext, Settings};
use petrel_messages::{Priority, remote_message};
use petrel_ml::data::Corpus;
use petrel_ml::topic::LdaConfig;
use petrel_ml::topic::{
    DocumentPartition, LdaMetrics, LoglikPoint, SyntheticCorpus, load_corpus, write_topic_files,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MONITOR_ACTOR: &str = "ps-lda-monitor";

/// Job settings (the flags of `petrel train ps-lda`; serde so a caller can read them from TOML).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PsLdaConfig {
    /// UCI bag-of-words `docword.txt`; the synthetic corpus when unset.
    pub docword: Option<PathBuf>,
    /// UCI `vocab.txt` (readable top words).
    pub vocab: Option<PathBuf>,
    pub synthetic: SyntheticCorpus,
    pub n_topics: usize,
    pub alpha: f64,
    pub beta: f64,
    /// Passes over the corpus.
    pub iterations: usize,
    pub seed: u64,
    pub top_words: usize,
    /// "bsp", "ssp", "essp" or "async".
    pub consistency: String,
    pub staleness: u32,
    /// Clocks per pass over a worker's documents (each samples `1 / clocks_per_iteration`).
    pub clocks_per_iteration: u32,
    /// Tokens sampled between yields to the node's event loop.
    pub chunk_tokens: usize,
    /// Output directory (topics.txt, topic_word.tsv, metrics.json).
    pub out: Option<PathBuf>,
}

impl Default for PsLdaConfig {
    fn default() -> Self {
        PsLdaConfig {
            docword: None,
            vocab: None,
            synthetic: SyntheticCorpus::default(),
            n_topics: 20,
            alpha: 0.1,
            beta: 0.1,
            iterations: 20,
            seed: 0,
            top_words: 10,
            consistency: "ssp".into(),
            staleness: 1,
            clocks_per_iteration: 1,
            chunk_tokens: 20_000,
            out: None,
        }
    }
}

impl PsLdaConfig {
    pub fn consistency(&self) -> Result<Consistency, String> {
        Consistency::from_name(&self.consistency, self.staleness)
    }

    pub fn tables(&self) -> Result<Vec<TableSpec>, String> {
        TablesBuilder::new()
            .sparse("word_topic", self.consistency()?)
            .build()
            .map_err(|e| e.to_string())
    }

    /// Loads the corpus and checks it fits exact `f32` counts.
    pub fn load(&self) -> Result<Corpus, String> {
        let corpus = load_corpus(
            self.docword.as_deref(),
            self.vocab.as_deref(),
            &self.synthetic,
        )
        .map_err(|e| e.to_string())?;
        check_corpus(corpus.n_tokens(), corpus.vocab_size, &corpus.docs)
            .map_err(|e| e.to_string())?;
        Ok(corpus)
    }

    fn lda_config(&self, workers: usize) -> LdaConfig {
        LdaConfig {
            n_topics: self.n_topics,
            alpha: self.alpha,
            beta: self.beta,
            n_workers: workers,
            iterations: self.iterations,
            seed: self.seed,
        }
    }
}

/// A worker finished pass `iteration` (0 = the initial assignments) at clock `clock`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IterationReport {
    pub worker: u32,
    pub iteration: usize,
    pub clock: u64,
    /// The document half of the log-likelihood for its documents.
    pub doc_loglik: f64,
    /// Tokens sampled so far.
    pub tokens: u64,
    /// Seconds since its sampling started (after the initial barrier).
    pub sampling_s: f64,
}

/// Worker -> monitor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LdaReport {
    Iteration(IterationReport),
    /// The worker is done (after its final barrier).
    Done {
        worker: u32,
        clocks: u64,
        tokens: u64,
        sampling_s: f64,
        /// Seconds in the sampler (the rest of `sampling_s`: waits and PS client work).
        sweep_s: f64,
        wait_s: f64,
        doc_loglik: f64,
        staleness: StalenessStats,
        clamped: u64,
        rows_fetched: u64,
    },
}
remote_message!(LdaReport => (), "petrel.ps.lda.report");

/// `metrics.json`: the STRADS app's fields plus the parameter-server ones.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PsLdaMetrics {
    #[serde(flatten)]
    pub lda: LdaMetrics,
    pub consistency: String,
    /// SSP/ESSP bound (0 for BSP, none for async).
    pub staleness: Option<u32>,
    pub shards: u32,
    pub clocks_per_iteration: u32,
    pub worker_clocks: Vec<u64>,
    /// Seconds each worker spent waiting for rows (`get_many`).
    pub per_worker_wait_s: Vec<f64>,
    /// Seconds each worker spent sampling (the sweeps alone).
    pub per_worker_sweep_s: Vec<f64>,
    /// Observed staleness of the row reads (clocks).
    pub read_staleness: StalenessReport,
    /// Row fetches sent to the shards (cache misses).
    pub rows_fetched: u64,
    /// View entries clamped (negative or non-integer counts in a read row).
    pub clamped_entries: u64,
}

/// What an in-process run returns: the metrics and the checked final table.
#[derive(Debug, Clone)]
pub struct PsLdaOutcome {
    pub metrics: PsLdaMetrics,
    pub table: FinalTable,
}

/// The shared pieces of a job, built once per process.
pub struct PsLdaJob {
    pub cfg: PsLdaConfig,
    pub corpus: Corpus,
    pub docs: DocumentPartition,
    pub layout: PsLayout,
    pub monitor_node: String,
    pub result: Mutex<Option<PsLdaOutcome>>,
}

/// The role names of a PS-LDA job. In-process jobs (`petrel train ps-lda`) use the generic
/// `ps-*` names; the roles built into `petrel node` are `ps-lda-*`, since the generic names
/// belong to the MF app there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsLdaRoles {
    pub shard: &'static str,
    pub worker: &'static str,
    pub monitor: &'static str,
}

pub const LOCAL_ROLES: PsLdaRoles = PsLdaRoles {
    shard: "ps-shard",
    worker: "ps-worker",
    monitor: "ps-monitor",
};

pub const BUILTIN_ROLES: PsLdaRoles = PsLdaRoles {
    shard: "ps-lda-shard",
    worker: "ps-lda-worker",
    monitor: "ps-lda-monitor",
};

impl PsLdaJob {
    pub fn new(settings: &Settings, cfg: PsLdaConfig) -> Result<PsLdaJob, String> {
        Self::with_roles(settings, cfg, LOCAL_ROLES)
    }

    /// A job whose nodes are found by the given role names.
    pub fn with_roles(
        settings: &Settings,
        cfg: PsLdaConfig,
        roles: PsLdaRoles,
    ) -> Result<PsLdaJob, String> {
        let with = |role: &str| -> Vec<String> {
            settings
                .nodes
                .iter()
                .filter(|n| n.roles.iter().any(|r| r == role))
                .map(|n| n.name.clone())
                .collect()
        };
        let layout = PsLayout {
            shard_nodes: with(roles.shard),
            worker_nodes: with(roles.worker),
        };
        if layout.shard_nodes.is_empty() || layout.worker_nodes.is_empty() {
            return Err(format!(
                "a ps-lda job needs nodes with roles {} and {}",
                roles.shard, roles.worker
            ));
        }
        let monitors = with(roles.monitor);
        let [monitor_node] = monitors.as_slice() else {
            return Err(format!(
                "a ps-lda job needs exactly one {} node, found {}",
                roles.monitor,
                monitors.len()
            ));
        };
        if cfg.n_topics == 0 || !(cfg.alpha > 0.0 && cfg.beta > 0.0) {
            return Err("need topics >= 1 and positive alpha, beta".into());
        }
        cfg.tables()?;
        let corpus = cfg.load()?;
        let docs = DocumentPartition::balanced(&corpus, layout.worker_nodes.len());
        Ok(PsLdaJob {
            monitor_node: monitor_node.clone(),
            cfg,
            corpus,
            docs,
            layout,
            result: Mutex::new(None),
        })
    }
}

async fn shard_role(ctx: NodeContext, job: Arc<PsLdaJob>) -> Result<(), String> {
    serve_shards(&ctx, &job.layout, job.cfg.tables()?).await
}

async fn worker_role(ctx: NodeContext, job: Arc<PsLdaJob>) -> Result<(), String> {
    shells::wait_for_shards(&ctx.node, &job.layout, Duration::from_secs(30)).await?;
    let mut workers = Vec::new();
    for w in job.layout.workers_on(&ctx.spec.name) {
        let client = PsClient::start(&ctx.node, &job.layout, w, job.cfg.tables()?)
            .map_err(|e| e.to_string())?;
        workers.push(run_worker(ctx.node.clone(), job.clone(), client));
    }
    for r in futures::future::join_all(workers).await {
        r?;
    }
    Ok(())
}

async fn run_worker(node: Node, job: Arc<PsLdaJob>, client: PsClient) -> Result<(), String> {
    let cfg = &job.cfg;
    let w = client.worker();
    let n_workers = job.layout.n_workers() as usize;
    let e = |e: shells::ClientError| e.to_string();
    let docs = job.docs.docs_of(&job.corpus, w as usize);
    let mut core = PsLdaWorker::new(
        w as usize,
        docs,
        job.corpus.vocab_size,
        &cfg.lda_config(n_workers),
    )
    .map_err(|e| format!("worker {w}: {e}"))?;
    let rows: Vec<RowId> = core.row_ids();
    let monitor = node
        .actor_at::<LdaReport>(&job.monitor_node, MONITOR_ACTOR)
        .map_err(|e| e.to_string())?;
    let report = |r: LdaReport| {
        monitor
            .tell(r, Priority::HIGH)
            .map_err(|e| format!("worker {w}: report to the monitor: {e}"))
    };
    // Clock 0: the initial counts, then a barrier so that every worker starts sampling from
    // the complete table.
    for (row, delta) in core.take_initial_deltas() {
        client.batch_inc(WORD_TOPIC, row, &delta).map_err(e)?;
    }
    client.barrier().await.map_err(e)?;
    report(LdaReport::Iteration(IterationReport {
        worker: w,
        iteration: 0,
        clock: client.current_clock(),
        doc_loglik: core.doc_log_likelihood(),
        tokens: 0,
        sampling_s: 0.0,
    }))?;
    let start = Instant::now();
    let (mut tokens, mut clamped, mut wait_s, mut sweep_s) = (0u64, 0u64, 0.0f64, 0.0f64);
    let parts = cfg.clocks_per_iteration.max(1) as usize;
    let is_async = cfg.consistency()? == Consistency::Async;
    for iteration in 1..=cfg.iterations {
        for part in 0..parts {
            let t = Instant::now();
            if is_async {
                // Async tables serve cached rows forever: ask for fresh copies (used from
                // the next clock on) without waiting for them.
                client.prefetch(WORD_TOPIC, &rows).map_err(e)?;
            }
            let got = client.get_many(WORD_TOPIC, &rows).await.map_err(e)?;
            wait_s += t.elapsed().as_secs_f64();
            let mut view = core.view(&got).map_err(|e| format!("worker {w}: {e}"))?;
            clamped += view.clamped;
            for chunk in core.doc_chunks(core.part(part, parts), cfg.chunk_tokens) {
                let t = Instant::now();
                tokens += core.sweep(chunk, &mut view);
                sweep_s += t.elapsed().as_secs_f64();
                // Let the node's actors (replies, heartbeats) run between chunks.
                tokio::task::yield_now().await;
            }
            for (row, delta) in core.take_deltas(&mut view) {
                client.batch_inc(WORD_TOPIC, row, &delta).map_err(e)?;
            }
            if iteration == cfg.iterations && part + 1 == parts {
                // The last clock is a barrier: the table is final once every worker is past it.
                client.barrier().await.map_err(e)?;
            } else {
                client.clock().map_err(e)?;
            }
        }
        report(LdaReport::Iteration(IterationReport {
            worker: w,
            iteration,
            clock: client.current_clock(),
            doc_loglik: core.doc_log_likelihood(),
            tokens,
            sampling_s: start.elapsed().as_secs_f64(),
        }))?;
    }
    let sampling_s = start.elapsed().as_secs_f64();
    core.check_doc_counts()
        .map_err(|e| format!("worker {w}: {e}"))?;
    client.leave().map_err(e)?;
    let done = LdaReport::Done {
        worker: w,
        clocks: client.current_clock(),
        tokens,
        sampling_s,
        sweep_s,
        wait_s,
        doc_loglik: core.doc_log_likelihood(),
        staleness: client.table_stats(WORD_TOPIC),
        clamped,
        rows_fetched: client.reads_sent(),
    };
    tracing::info!(
        worker = w,
        tokens,
        sampling_s,
        sweep_s,
        wait_s,
        "ps-lda worker done"
    );
    monitor
        .ask(done, Priority::HIGH, node.default_timeout())
        .await
        .map_err(|e| format!("worker {w}: report to the monitor: {e}"))
}

/// Waits until every shard's min clock is at least `clock` (every update of the clocks
/// before it applied).
async fn wait_min_clock(node: &Node, layout: &PsLayout, clock: u64) -> Result<(), String> {
    let deadline = Instant::now() + node.default_timeout();
    loop {
        let states =
            shells::snapshot_all(node, layout, ShardQuery::Ping, node.default_timeout()).await?;
        if states.iter().all(|s| s.min_clock >= clock) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "ps shards did not reach clock {clock} within {:?}",
                node.default_timeout()
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn monitor_role(ctx: NodeContext, job: Arc<PsLdaJob>) -> Result<(), String> {
    let cfg = &job.cfg;
    let (reports, notify) = open_monitor::<LdaReport>(&ctx.node, MONITOR_ACTOR)?;
    shells::wait_for_shards(&ctx.node, &job.layout, Duration::from_secs(30)).await?;
    let start = Instant::now();
    let timeout = ctx.node.default_timeout();
    let n_workers = job.layout.n_workers() as usize;
    let (v, k, beta) = (job.corpus.vocab_size, cfg.n_topics, cfg.beta);
    let n_tokens = job.corpus.n_tokens();
    let mut pending: BTreeMap<usize, Vec<IterationReport>> = BTreeMap::new();
    let mut done = Vec::new();
    let mut curve: Vec<LoglikPoint> = Vec::new();
    let mut next = 0usize;
    loop {
        let n = notify.notified();
        for r in reports.borrow_mut().drain(..) {
            match r {
                LdaReport::Iteration(it) => pending.entry(it.iteration).or_default().push(it),
                d @ LdaReport::Done { .. } => done.push(d),
            }
        }
        while pending.get(&next).is_some_and(|r| r.len() == n_workers) {
            let reps = pending.remove(&next).unwrap_or_default();
            let clock = reps.iter().map(|r| r.clock).max().unwrap_or(0);
            wait_min_clock(&ctx.node, &job.layout, clock).await?;
            let states =
                shells::snapshot_all(&ctx.node, &job.layout, ShardQuery::Snapshot, timeout).await?;
            let merged = shells::merge_tables(&states);
            let table = merged.get(&WORD_TOPIC);
            let word =
                snapshot_word_log_likelihood(|r| table.and_then(|t| t.get(&RowId(r))), v, k, beta);
            let doc: f64 = reps.iter().map(|r| r.doc_loglik).sum();
            let point = LoglikPoint {
                iteration: next,
                elapsed_s: reps.iter().map(|r| r.sampling_s).fold(0.0, f64::max),
                tokens_sampled: reps.iter().map(|r| r.tokens).sum(),
                loglik_per_token: (word + doc) / n_tokens.max(1) as f64,
            };
            tracing::debug!(iteration = next, ll = point.loglik_per_token, "ps-lda pass");
            curve.push(point);
            next += 1;
        }
        if done.len() >= n_workers {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(500), n).await;
    }
    // Every worker finished with a barrier: the table is final. Check it and compute the
    // exact log-likelihood.
    let states =
        shells::snapshot_all(&ctx.node, &job.layout, ShardQuery::Snapshot, timeout).await?;
    let merged = shells::merge_tables(&states);
    let rows = merged.get(&WORD_TOPIC);
    let table = FinalTable::check(
        |r| rows.and_then(|t| t.get(&RowId(r))),
        &job.corpus.word_frequencies(),
        k,
    )
    .map_err(|e| format!("ps-lda final table violates the count invariants: {e}"))?;
    let mut stats = StalenessStats::new();
    let (mut tokens, mut sampling_s, mut doc_ll, mut clamped, mut fetched) =
        (0u64, 0.0f64, 0.0f64, 0u64, 0u64);
    let mut per_worker: Vec<(u32, u64, f64, f64)> = Vec::new();
    for d in &done {
        if let LdaReport::Done {
            worker,
            clocks,
            tokens: t,
            sampling_s: s,
            sweep_s,
            wait_s,
            doc_loglik,
            staleness,
            clamped: c,
            rows_fetched,
        } = d
        {
            tokens += t;
            sampling_s = sampling_s.max(*s);
            doc_ll += doc_loglik;
            clamped += c;
            fetched += rows_fetched;
            stats.merge(staleness);
            per_worker.push((*worker, *clocks, *wait_s, *sweep_s));
        }
    }
    per_worker.sort_by_key(|p| p.0);
    let final_ll = (table.word_log_likelihood(beta) + doc_ll) / n_tokens.max(1) as f64;
    if let Some(last) = curve.last_mut()
        && last.iteration == cfg.iterations
    {
        last.loglik_per_token = final_ll;
    }
    let consistency = cfg.consistency()?;
    let metrics = PsLdaMetrics {
        lda: LdaMetrics {
            n_docs: job.corpus.docs.len(),
            vocab_size: v,
            n_tokens,
            n_topics: k,
            workers: n_workers,
            iterations: cfg.iterations,
            elapsed_s: start.elapsed().as_secs_f64(),
            sampling_s,
            tokens_sampled: tokens,
            tokens_per_s_per_worker: if sampling_s > 0.0 {
                tokens as f64 / sampling_s / n_workers as f64
            } else {
                0.0
            },
            loglik: curve,
            final_loglik_per_token: final_ll,
            // Rotation-only figures: PS-LDA has no scheduler and no blocks.
            scheduler_bytes: 0,
            block_bytes: 0,
            collect_bytes: 0,
            rounds: 0,
        },
        consistency: cfg.consistency.to_ascii_lowercase(),
        staleness: match consistency {
            Consistency::Bsp => Some(0),
            Consistency::Ssp { staleness } | Consistency::Essp { staleness } => Some(staleness),
            Consistency::Async => None,
        },
        shards: job.layout.n_shards(),
        clocks_per_iteration: cfg.clocks_per_iteration.max(1),
        worker_clocks: per_worker.iter().map(|p| p.1).collect(),
        per_worker_wait_s: per_worker.iter().map(|p| p.2).collect(),
        per_worker_sweep_s: per_worker.iter().map(|p| p.3).collect(),
        read_staleness: stats.report(),
        rows_fetched: fetched,
        clamped_entries: clamped,
    };
    tracing::info!(
        loglik_per_token = final_ll,
        tokens_per_s_per_worker = format!("{:.0}", metrics.lda.tokens_per_s_per_worker),
        "ps-lda finished"
    );
    if let Some(out) = &cfg.out {
        write_topic_files(out, &table.topic_word(beta), &job.corpus, cfg.top_words)
            .map_err(|e| e.to_string())?;
        let json = serde_json::to_vec_pretty(&metrics).map_err(|e| e.to_string())?;
        petrel_ml::topic::write_file(out, "metrics.json", &json).map_err(|e| e.to_string())?;
    }
    if let Ok(mut slot) = job.result.lock() {
        *slot = Some(PsLdaOutcome { metrics, table });
    }
    Ok(())
}

/// Registers the roles `ps-shard`, `ps-worker` and `ps-monitor` for `job`.
pub fn register(cluster: Cluster, job: Arc<PsLdaJob>) -> Cluster {
    let (j1, j2, j3) = (job.clone(), job.clone(), job);
    cluster
        .role(LOCAL_ROLES.shard, move |ctx| {
            Box::pin(shard_role(ctx, j1.clone()))
        })
        .role(LOCAL_ROLES.worker, move |ctx| {
            Box::pin(worker_role(ctx, j2.clone()))
        })
        .role(LOCAL_ROLES.monitor, move |ctx| {
            Box::pin(monitor_role(ctx, j3.clone()))
        })
}

/// The built-in roles `ps-lda-shard`, `ps-lda-worker` and `ps-lda-monitor` of `petrel
/// node`, so `petrel run` can launch a PS-LDA job as separate processes. The job comes from
/// `[app.ps_lda]` (a [`PsLdaConfig`]); it is built once per process, on first use, and a
/// bad section fails the role with the reason.
pub fn register_builtin(cluster: Cluster) -> Cluster {
    let get = petrel_actors::topology::lazy_job(cluster.settings().clone(), "ps_lda", |s, cfg| {
        PsLdaJob::with_roles(s, cfg, BUILTIN_ROLES)
    });
    let (g1, g2, g3) = (get.clone(), get.clone(), get);
    cluster
        .role(BUILTIN_ROLES.shard, move |ctx| {
            let j = g1();
            async move { Ok::<(), petrel_actors::RoleError>(shard_role(ctx, j?).await?) }
        })
        .role(BUILTIN_ROLES.worker, move |ctx| {
            let j = g2();
            async move { Ok::<(), petrel_actors::RoleError>(worker_role(ctx, j?).await?) }
        })
        .role(BUILTIN_ROLES.monitor, move |ctx| {
            let j = g3();
            async move { Ok::<(), petrel_actors::RoleError>(monitor_role(ctx, j?).await?) }
        })
}

/// Runs PS-LDA on an in-process cluster (QUIC on 127.0.0.1, or the memory transport):
/// `shards` shard nodes (the first also runs the monitor) and `workers` worker nodes.
pub fn run_local(
    cfg: PsLdaConfig,
    shards: usize,
    workers: usize,
    transport: &str,
) -> Result<PsLdaOutcome, String> {
    run_local_with(cfg, shards, workers, transport, |_| {})
}

/// `run_local` with a hook to adjust the cluster settings.
pub fn run_local_with(
    cfg: PsLdaConfig,
    shards: usize,
    workers: usize,
    transport: &str,
    tweak: impl FnOnce(&mut Settings),
) -> Result<PsLdaOutcome, String> {
    let settings = local_topology(
        "ps-lda",
        shards,
        workers,
        transport
            .parse()
            .map_err(|e: petrel_actors::NodeError| e.to_string())?,
    )
    .with(|s| {
        // Two cores shared by every node thread: sampling sweeps delay heartbeats.
        s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
        tweak(s);
    })
    .build()
    .map_err(|e| e.to_string())?;
    let job = Arc::new(PsLdaJob::new(&settings, cfg)?);
    register(Cluster::new(settings), job.clone())
        .run_in_process()
        .map_err(|e| e.to_string())?;
    take_monitor_result(&job.result)
}

/// `petrel train ps-lda`.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
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
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    #[arg(long, default_value_t = 0.1)]
    pub alpha: f64,
    #[arg(long, default_value_t = 0.1)]
    pub beta: f64,
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// bsp, ssp, essp or async.
    #[arg(long, default_value = "ssp")]
    pub consistency: String,
    #[arg(long, default_value_t = 1)]
    pub staleness: u32,
    /// Clocks per pass over a worker's documents.
    #[arg(long, default_value_t = 1)]
    pub clocks_per_iteration: u32,
    #[arg(long, default_value_t = 10)]
    pub top_words: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seconds a row read may wait for slower workers (a clock of a large corpus is long).
    #[arg(long, default_value_t = 300)]
    pub request_timeout_s: u64,
    /// quic (127.0.0.1) or memory.
    #[arg(long, default_value = "quic")]
    pub transport: String,
}

/// Runs `petrel train ps-lda` on an in-process cluster and prints a summary.
pub fn train_cli(a: TrainArgs) -> Result<(), String> {
    let cfg = PsLdaConfig {
        docword: a.docword.clone(),
        vocab: a.vocab.clone(),
        n_topics: a.topics,
        alpha: a.alpha,
        beta: a.beta,
        iterations: a.iterations,
        seed: a.seed,
        top_words: a.top_words,
        consistency: a.consistency.clone(),
        staleness: a.staleness,
        clocks_per_iteration: a.clocks_per_iteration,
        out: Some(a.out.clone()),
        ..PsLdaConfig::default()
    };
    let timeout_ms = a.request_timeout_s.max(1).saturating_mul(1000);
    let r = run_local_with(cfg, a.shards, a.workers, &a.transport, |s| {
        s.cluster.request_timeout_ms = timeout_ms;
    })?;
    let m = &r.metrics;
    println!(
        "ps-lda ({}, staleness {:?}) {} topics: {} docs, {} words, {} tokens; log-likelihood per token {:.4}; {:.0} tokens/s per worker; wrote {}",
        m.consistency,
        m.staleness,
        m.lda.n_topics,
        m.lda.n_docs,
        m.lda.vocab_size,
        m.lda.n_tokens,
        m.lda.final_loglik_per_token,
        m.lda.tokens_per_s_per_worker,
        a.out.display()
    );
    Ok(())
}
