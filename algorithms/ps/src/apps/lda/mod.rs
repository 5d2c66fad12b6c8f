//! Data-parallel LDA on the parameter server ([`PsLda`]; the YahooLDA / Bösen design), the
//! comparison the STRADS paper made against its word-rotation LDA.
//!
//! One sparse table `word_topic` ([`WORD_TOPIC`]): row `w < V` holds the topic counts of
//! word `w`, row `V` the topic totals, under the job's consistency model. Documents are
//! split over the current workers as the STRADS app splits them, and follow the workers
//! that join and leave (`elastic.rs`). A worker ([`PsLdaWorker`]):
//! clock 0 draws random topics, `batch_inc`s the counts and ends with `barrier()`; then per
//! clock it reads its words' rows and the totals (`get_many`), samples its share of a pass
//! (`clocks_per_iteration` clocks per pass) with the SparseLDA sampler shared with STRADS,
//! `batch_inc`s one sparse delta per touched row and calls `clock()`, yielding every
//! `chunk_tokens` tokens. The last clock is a barrier, so the table is final when the
//! workers report. With `managed` a clock is cut into `compute_slices` document batches,
//! each reading its rows through the cache (rows pushed meanwhile reach it) and handing
//! its deltas to the oplog, which the background sender may send early
//! (`managed_rows_sent` counts them).
//!
//! The monitor adds a curve point once every worker finished a pass and the shards' min
//! clock reached it (under SSP, points mix clocks within the bound; the final one is exact),
//! and checks the final table ([`FinalTable::check`]) before the run counts. Outputs as the
//! STRADS app: `topics.txt`, `topic_word.tsv`, `metrics.json`. Under `petrel node` the roles
//! are `ps-lda-*` with `[app.ps_lda]`. Counts are `f32` integers, exact up to 2^24, so
//! larger corpora are refused (see `crate::core::lda`).

use crate::core::lda::{
    FinalTable, PsLdaWorker, WORD_TOPIC, check_corpus, share_of, snapshot_word_log_likelihood,
};
use crate::core::managed::{SendPolicy, slice_ranges};
use crate::core::server_push::ServerPushConfig;
use crate::core::stats::{StalenessReport, StalenessStats};
use crate::core::types::{Consistency, ConsistencyModel, RowId, TableSpec};
use crate::error::PsError;
use crate::kit::settings::{ManagedSettings, RunFiles};
use crate::kit::{
    MonitorCtx, MonitorState, PsApp, PsCheckpointing, PsRoles, PsStep, WorkerChange, WorkerCtx,
    WorkerDone, decode, encode,
};
use crate::shells::{PsLayout, TablesBuilder};
use petrel_actors::Settings;
use petrel_messages::remote_message;
use petrel_ml::data::Corpus;
use petrel_ml::data::synthetic::LdaCorpusParams;
use petrel_ml::job::{InvalidSetting, SettingChecks};
use petrel_ml::topic::{LdaConfig, LdaMetrics, LoglikPoint, load_corpus, write_topic_files};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod config;
mod elastic;
mod report;

pub use config::*;
pub use report::*;

/// The ps-lda app: config, corpus and the documents of each worker.
pub struct PsLda {
    /// The settings.
    pub cfg: PsLdaSettings,
    /// The corpus.
    pub corpus: Corpus,
    tables: Vec<TableSpec>,
}

/// A ps-lda worker between clocks: its core, where it is in the sweep, its counters.
pub struct PsLdaWorkerState {
    core: PsLdaWorker,
    rows: Vec<RowId>,
    /// The current workers its documents are its share among.
    members: Vec<u32>,
    start: Instant,
    p: PsLdaProgress,
}

/// Where a ps-lda worker is and what it counted: saved at a checkpoint as it is.
#[derive(Clone, Default, Serialize, Deserialize)]
struct PsLdaProgress {
    /// Clock 0 (the initial counts) is done.
    started: bool,
    /// The pass in progress (1-based) and the part of it.
    iteration: usize,
    part: usize,
    /// A finished pass not yet reported (sent once the worker's clock advanced).
    report_due: Option<usize>,
    tokens: u64,
    clamped: u64,
    wait_s: f64,
    sweep_s: f64,
    /// Rows sent before a clock boundary.
    managed_rows: u64,
    /// Every pass report sent so far (a resumed worker sends them again).
    sent: Vec<PsLdaIteration>,
}

/// What a ps-lda worker saves at a checkpoint (between clocks).
#[derive(Serialize, Deserialize)]
struct PsLdaWorkerSaved {
    core: crate::core::lda::PsLdaWorkerSaved,
    start_elapsed_s: f64,
    progress: PsLdaProgress,
}

/// The ps-lda monitor: reports per pass not yet complete, the final reports, the curve.
#[derive(Default, Serialize, Deserialize)]
pub struct PsLdaMonitor {
    pending: BTreeMap<usize, Vec<PsLdaIteration>>,
    #[serde(skip)]
    done: Vec<PsLdaDone>,
    curve: Vec<LoglikPoint>,
    /// The newest worker clock among the reports of each curve point.
    point_clocks: Vec<u64>,
    next: usize,
    /// The last pass each worker reported (a resumed worker sends its reports again).
    #[serde(skip)]
    reported: BTreeMap<u32, usize>,
}

impl PsLdaMonitor {
    /// Keeps a pass report for its curve point (one per worker and pass: a resumed worker
    /// sends its reports again).
    fn record(&mut self, it: PsLdaIteration) {
        let last = self.reported.entry(it.worker).or_default();
        *last = (*last).max(it.iteration);
        if it.iteration >= self.next {
            let pass = self.pending.entry(it.iteration).or_default();
            if pass.iter().all(|r| r.worker != it.worker) {
                pass.push(it);
            }
        }
    }

    /// Whether pass `pass` has its curve point: some worker reported it and every current
    /// worker reached it (a joiner's first report is the pass before its first; a worker
    /// that left is no longer current).
    fn pass_ready(&self, pass: usize, current: &[u32]) -> bool {
        self.pending.get(&pass).is_some_and(|r| !r.is_empty())
            && (current.iter()).all(|w| self.reported.get(w).is_some_and(|&p| p >= pass))
    }
}

impl MonitorState for PsLdaMonitor {
    /// What the workers had sent before saving at `clock`; the resumed run redoes the rest.
    fn save(&self, clock: u64) -> Result<Vec<u8>, PsError> {
        let kept = self.point_clocks.iter().take_while(|&&c| c < clock).count();
        let saved = PsLdaMonitor {
            pending: (self.pending.iter())
                .filter(|(pass, _)| **pass >= kept)
                .map(|(&pass, reps)| {
                    let reps = reps.iter().filter(|r| r.clock < clock).cloned().collect();
                    (pass, reps)
                })
                .collect(),
            done: Vec::new(),
            curve: self.curve[..kept].to_vec(),
            point_clocks: self.point_clocks[..kept].to_vec(),
            next: kept,
            reported: BTreeMap::new(),
        };
        Ok(encode(&saved)?)
    }

    fn resume(what: &str, saved: &[u8]) -> Result<Self, PsError> {
        decode(what, saved)
    }
}

impl PsApp for PsLda {
    type Config = PsLdaSettings;
    type Worker = PsLdaWorkerState;
    type Report = PsLdaReport;
    type Monitor = PsLdaMonitor;
    type Output = PsLdaOutcome;

    const NAME: &'static str = "ps-lda";
    const SECTION: &'static str = "ps_lda";
    const BUILTIN_ROLES: PsRoles = PsRoles {
        shard: "ps-lda-shard",
        worker: "ps-lda-worker",
        monitor: "ps-lda-monitor",
    };
    const MONITOR_ACTOR: &'static str = "ps-lda-monitor";
    const TRAIN_REQUEST_TIMEOUT_S: Option<u64> = Some(300);
    const ELASTIC: bool = true;

    fn validate_config(cfg: &PsLdaSettings) -> Result<(), InvalidSetting> {
        cfg.validate()
    }

    fn new(cfg: PsLdaSettings, _layout: &PsLayout) -> Result<Self, PsError> {
        let tables = cfg.tables()?;
        let corpus = cfg.load()?;
        Ok(PsLda {
            cfg,
            corpus,
            tables,
        })
    }

    fn tables(&self) -> Vec<TableSpec> {
        self.tables.clone()
    }

    fn tune_local(settings: &mut Settings) {
        // Two cores shared by every node thread: sampling sweeps delay heartbeats.
        settings.cluster.failure_timeout_ms = settings.cluster.failure_timeout_ms.max(10_000);
    }

    fn checkpointing(cfg: &PsLdaSettings) -> Result<Option<PsCheckpointing>, PsError> {
        cfg.files.checkpointing(Self::NAME, cfg.checkpoint_every)
    }

    fn save_worker(
        &self,
        st: &PsLdaWorkerState,
        _ctx: &WorkerCtx<'_, PsLdaReport>,
    ) -> Result<Vec<u8>, PsError> {
        let saved = PsLdaWorkerSaved {
            core: st.core.export_state()?,
            start_elapsed_s: st.start.elapsed().as_secs_f64(),
            progress: st.p.clone(),
        };
        Ok(encode(&saved)?)
    }

    fn resume_worker(
        &self,
        saved: &[u8],
        ctx: &WorkerCtx<'_, PsLdaReport>,
    ) -> Result<PsLdaWorkerState, PsError> {
        let saved: PsLdaWorkerSaved = decode("ps-lda worker checkpoint", saved)?;
        let mut st = self.start_worker(ctx)?;
        st.core.import_state(saved.core)?;
        let elapsed = Duration::from_secs_f64(saved.start_elapsed_s.max(0.0));
        st.start = Instant::now()
            .checked_sub(elapsed)
            .unwrap_or_else(Instant::now);
        for report in &saved.progress.sent {
            ctx.report(PsLdaReport::Iteration(report.clone()))?;
        }
        st.p = saved.progress;
        Ok(st)
    }

    fn server_push(&self) -> Option<ServerPushConfig> {
        // Managed communication goes both ways, as in Bösen: shards push too.
        let comm = &self.cfg.comm;
        (comm.managed).map(|policy| ServerPushConfig::at_rate(policy, comm.managed_bytes_per_s, 10))
    }

    fn start_worker(&self, ctx: &WorkerCtx<'_, PsLdaReport>) -> Result<PsLdaWorkerState, PsError> {
        let (w, members) = (ctx.worker(), ctx.current_workers());
        let docs = share_of(&self.corpus, &members, w);
        let lda = self.cfg.lda_config(ctx.n_workers() as usize);
        let core = PsLdaWorker::new(w as usize, docs, self.corpus.vocab_size, &lda)?;
        if let Some(manager) = self.cfg.comm.manager() {
            ctx.client.start_managed(manager);
        }
        let mut st = PsLdaWorkerState {
            rows: core.row_ids(),
            core,
            members,
            start: Instant::now(),
            p: PsLdaProgress {
                iteration: 1,
                ..PsLdaProgress::default()
            },
        };
        if let Some(clock) = ctx.joined_at().filter(|&c| c > 0) {
            self.join(&mut st, ctx, clock)?;
        }
        Ok(st)
    }

    fn leave_worker(
        &self,
        st: &mut PsLdaWorkerState,
        ctx: &WorkerCtx<'_, PsLdaReport>,
    ) -> Result<bool, PsError> {
        // A worker past its last pass keeps its documents: the others are done too.
        if !st.p.started || st.p.iteration > self.cfg.iterations {
            return Ok(false);
        }
        self.retake(st, ctx, Vec::new())?;
        Ok(true)
    }

    async fn step(
        &self,
        st: &mut PsLdaWorkerState,
        ctx: &WorkerCtx<'_, PsLdaReport>,
    ) -> Result<PsStep, PsError> {
        let (cfg, client) = (&self.cfg, ctx.client);
        if !st.p.started {
            // Clock 0: the initial counts, then a barrier before anyone samples.
            for (row, delta) in st.core.take_initial_deltas() {
                client.batch_inc(WORD_TOPIC, row, &delta)?;
            }
            st.p.started = true;
            st.p.report_due = Some(0);
            return Ok(PsStep::Barrier);
        }
        if let Some(iteration) = st.p.report_due.take() {
            let report = PsLdaIteration {
                worker: ctx.worker(),
                iteration,
                clock: client.current_clock(),
                doc_loglik: st.core.doc_log_likelihood(),
                tokens: st.p.tokens,
                sampling_s: if iteration == 0 {
                    0.0
                } else {
                    st.start.elapsed().as_secs_f64()
                },
            };
            if self.cfg.files.checkpoint_dir.is_some() {
                st.p.sent.push(report.clone());
            }
            ctx.report(PsLdaReport::Iteration(report))?;
            if iteration == 0 {
                st.start = Instant::now();
            }
        }
        let moved = self.follow_members(st, ctx)?;
        if st.p.iteration > cfg.iterations {
            // Documents taken after the last pass still reach the shards with a clock.
            return Ok(if moved { PsStep::Clock } else { PsStep::Done });
        }
        let parts = cfg.clocks_per_iteration.max(1) as usize;
        let t = Instant::now();
        if cfg.consistency == ConsistencyModel::Async {
            // Async tables serve cached rows forever: refresh them for the next clock.
            client.prefetch(WORD_TOPIC, &st.rows)?;
        }
        let got = client.get_many(WORD_TOPIC, &st.rows).await?;
        st.p.wait_s += t.elapsed().as_secs_f64();
        let mut view = st.core.view(&got)?;
        st.p.clamped += view.clamped;
        let range = st.core.part(st.p.part, parts);
        // The clock's documents in slices (document batches), whose changes managed
        // communication may send early.
        let slices = cfg.comm.slices();
        for (k, slice) in slice_ranges(range.len(), slices).into_iter().enumerate() {
            if k > 0 {
                // Reads go through the cache: rows pushed since the last batch (and own
                // writes) reach this one.
                let t = Instant::now();
                let got = client.get_many(WORD_TOPIC, &st.rows).await?;
                st.p.wait_s += t.elapsed().as_secs_f64();
                view = st.core.view(&got)?;
                st.p.clamped += view.clamped;
            }
            let docs = range.start + slice.start..range.start + slice.end;
            for chunk in st.core.doc_chunks(docs, cfg.chunk_tokens) {
                let t = Instant::now();
                st.p.tokens += st.core.sweep(chunk, &mut view);
                st.p.sweep_s += t.elapsed().as_secs_f64();
                // Let the node's actors (replies, heartbeats) run between chunks, and the
                // background sender use the link while sampling holds the thread.
                tokio::task::yield_now().await;
                client.pace()?;
            }
            for (row, delta) in st.core.take_deltas(&mut view) {
                client.batch_inc(WORD_TOPIC, row, &delta)?;
            }
        }
        if let Some(m) = client.managed_stats() {
            st.p.managed_rows = m.early_rows;
        }
        st.p.part += 1;
        if st.p.part < parts {
            return Ok(PsStep::Clock);
        }
        st.p.report_due = Some(st.p.iteration);
        st.p.iteration += 1;
        st.p.part = 0;
        // The last clock is a barrier: the table is final once every worker is past it.
        Ok(if st.p.iteration > cfg.iterations {
            PsStep::Barrier
        } else {
            PsStep::Clock
        })
    }

    fn finish_worker(
        &self,
        st: PsLdaWorkerState,
        ctx: &WorkerCtx<'_, PsLdaReport>,
    ) -> Result<PsLdaReport, PsError> {
        let sampling_s = st.start.elapsed().as_secs_f64();
        st.core.check_doc_counts()?;
        let (worker, client) = (ctx.worker(), ctx.client);
        tracing::info!(
            worker,
            tokens = st.p.tokens,
            sampling_s,
            sweep_s = st.p.sweep_s,
            wait_s = st.p.wait_s,
            "ps-lda worker done"
        );
        Ok(PsLdaReport::Done(PsLdaDone {
            base: ctx.measured(WORD_TOPIC, st.p.sweep_s, st.p.wait_s, sampling_s),
            tokens: st.p.tokens,
            doc_loglik: st.core.doc_log_likelihood(),
            clamped: st.p.clamped,
            rows_fetched: client.reads_sent(),
            managed_rows: st.p.managed_rows,
        }))
    }

    fn is_final(report: &PsLdaReport) -> bool {
        matches!(report, PsLdaReport::Done(_))
    }

    fn eval_interval(&self) -> Duration {
        Duration::from_millis(500)
    }

    fn progress_points(cfg: &PsLdaSettings) -> Option<u64> {
        // One point per pass and one after the initial assignment (iteration 0).
        Some(cfg.iterations as u64 + 1)
    }

    async fn observe(
        &self,
        m: &mut PsLdaMonitor,
        ctx: &MonitorCtx<'_>,
        reports: Vec<PsLdaReport>,
        _all_done: bool,
    ) -> Result<Option<String>, PsError> {
        for r in reports {
            match r {
                PsLdaReport::Iteration(it) => m.record(it),
                PsLdaReport::Done(d) => m.done.push(d),
            }
        }
        let current = ctx.current_workers();
        let (v, k, beta) = (self.corpus.vocab_size, self.cfg.n_topics, self.cfg.beta);
        let n_tokens = self.corpus.n_tokens();
        while m.pass_ready(m.next, &current) {
            let reps = m.pending.remove(&m.next).unwrap_or_default();
            let clock = reps.iter().map(|r| r.clock).max().unwrap_or(0);
            ctx.wait_for_min_clock(clock).await?;
            let (merged, _) = ctx.tables().await?;
            let table = merged.get(&WORD_TOPIC);
            let word =
                snapshot_word_log_likelihood(|r| table.and_then(|t| t.get(&RowId(r))), v, k, beta);
            let doc: f64 = reps.iter().map(|r| r.doc_loglik).sum();
            let point = LoglikPoint {
                iteration: m.next,
                elapsed_s: reps.iter().map(|r| r.sampling_s).fold(0.0, f64::max),
                tokens_sampled: reps.iter().map(|r| r.tokens).sum(),
                loglik_per_token: (word + doc) / n_tokens.max(1) as f64,
            };
            tracing::debug!(
                iteration = m.next,
                ll = point.loglik_per_token,
                "ps-lda pass"
            );
            ctx.progress("loglik_per_token", point.loglik_per_token);
            m.curve.push(point);
            m.point_clocks.push(clock);
            m.next += 1;
        }
        Ok(None)
    }

    async fn finish(
        &self,
        mut m: PsLdaMonitor,
        ctx: &MonitorCtx<'_>,
    ) -> Result<PsLdaOutcome, PsError> {
        let cfg = &self.cfg;
        let n_workers = ctx.layout.n_workers() as usize;
        let (v, k, beta) = (self.corpus.vocab_size, cfg.n_topics, cfg.beta);
        let n_tokens = self.corpus.n_tokens();
        // Every worker finished with a barrier: the table is final.
        let (merged, _) = ctx.tables().await?;
        let rows = merged.get(&WORD_TOPIC);
        let table = FinalTable::check(
            |r| rows.and_then(|t| t.get(&RowId(r))),
            &self.corpus.word_frequencies(),
            k,
        )?;
        let mut stats = StalenessStats::new();
        let (mut sampling_s, mut doc_ll) = (0.0f64, 0.0f64);
        m.done.sort_by_key(|d| d.base.worker);
        for d in &m.done {
            sampling_s = sampling_s.max(d.base.run_s);
            doc_ll += d.doc_loglik;
            stats.merge(&d.base.staleness);
        }
        let bases: Vec<WorkerDone> = m.done.iter().map(|d| d.base.clone()).collect();
        let sum = |count: fn(&PsLdaDone) -> u64| m.done.iter().map(count).sum::<u64>();
        let (tokens, clamped) = (sum(|d| d.tokens), sum(|d| d.clamped));
        let (fetched, early) = (sum(|d| d.rows_fetched), sum(|d| d.managed_rows));
        let final_ll = (table.word_log_likelihood(beta) + doc_ll) / n_tokens.max(1) as f64;
        if let Some(last) = m.curve.last_mut()
            && last.iteration == cfg.iterations
        {
            last.loglik_per_token = final_ll;
        }
        let metrics = PsLdaMetrics {
            lda: LdaMetrics {
                n_docs: self.corpus.docs.len(),
                vocab_size: v,
                n_tokens,
                n_topics: k,
                workers: n_workers,
                iterations: cfg.iterations,
                elapsed_s: ctx.elapsed_s(),
                sampling_s,
                tokens_sampled: tokens,
                tokens_per_s_per_worker: if sampling_s > 0.0 {
                    tokens as f64 / sampling_s / n_workers as f64
                } else {
                    0.0
                },
                loglik: m.curve,
                final_loglik_per_token: final_ll,
                // Rotation-only figures: PS-LDA has no scheduler and no blocks.
                scheduler_bytes: 0,
                block_bytes: 0,
                collect_bytes: 0,
                rounds: 0,
            },
            consistency: cfg.consistency,
            staleness: cfg.consistency().staleness_bound(),
            shards: ctx.layout.n_shards(),
            clocks_per_iteration: cfg.clocks_per_iteration.max(1),
            worker_clocks: m.done.iter().map(|d| d.base.clocks).collect(),
            per_worker_wait_s: m.done.iter().map(|d| d.base.wait_s).collect(),
            per_worker_sweep_s: m.done.iter().map(|d| d.base.compute_s).collect(),
            read_staleness: stats.report(),
            rows_fetched: fetched,
            clamped_entries: clamped,
            managed: cfg.comm.managed,
            managed_rows_sent: early,
            per_worker_sent_bytes: m.done.iter().map(|d| d.base.sent_bytes).collect(),
            per_worker_received_bytes: m.done.iter().map(|d| d.base.received_bytes).collect(),
            changes: ctx.changes(&bases),
        };
        tracing::info!(
            loglik_per_token = final_ll,
            tokens_per_s_per_worker = format!("{:.0}", metrics.lda.tokens_per_s_per_worker),
            "ps-lda finished"
        );
        Ok(PsLdaOutcome { metrics, table })
    }

    fn write_outputs(&self, out: &PsLdaOutcome) -> Result<(), PsError> {
        let Some(dir) = &self.cfg.files.out else {
            return Ok(());
        };
        let mut run = ps_lda_run_metrics(&out.metrics, &self.cfg);
        let advice = "check alpha and beta";
        run.check_finite(advice)?;
        let phi = out.table.topic_word(self.cfg.beta);
        write_topic_files(dir, &phi, &self.corpus, self.cfg.top_words)?;
        let saved = petrel_ml::model::TopicModel::saved(
            PsLda::NAME,
            &self.cfg,
            &phi,
            self.cfg.alpha,
            self.cfg.beta,
            self.corpus.vocab.clone(),
        );
        saved.add_heldout(&mut run, self.cfg.test_data.as_deref(), self.cfg.seed)?;
        let saved = crate::kit::to_json(petrel_ml::model::MODEL_FILE, &saved)?;
        crate::kit::finish(dir, &run, &[(petrel_ml::model::MODEL_FILE, &saved)], advice)
    }

    fn summary(cfg: &PsLdaSettings, out: &PsLdaOutcome) -> String {
        let m = &out.metrics;
        let dir = cfg.files.out_shown();
        format!(
            "ps-lda ({}, staleness {:?}) {} topics: {} docs, {} words, {} tokens; log-likelihood per token {:.4}; {:.0} tokens/s per worker; wrote {}",
            m.consistency,
            m.staleness,
            m.lda.n_topics,
            m.lda.n_docs,
            m.lda.vocab_size,
            m.lda.n_tokens,
            m.lda.final_loglik_per_token,
            m.lda.tokens_per_s_per_worker,
            dir.display()
        )
    }
}

#[cfg(test)]
mod tests;
