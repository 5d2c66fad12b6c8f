//! LDA by collapsed Gibbs sampling (SparseLDA) with word rotation on the STRADS runtime.
//!
//! Documents are split over the P workers (balanced by length), the vocabulary into P
//! blocks (balanced by frequency). Word-topic blocks live with the scheduler between
//! visits; in sub-round `t` worker `w` samples the tokens of the words in block
//! `(w + t) mod P` ([`RotationSchedule`]), so no two workers write the same word-topic row.
//! After every sub-round the workers' topic-total changes are summed by the scheduler and
//! re-broadcast in the commit (stale within a sub-round, as in the reference). The first
//! rotation only builds the word-topic counts from the workers' random initial assignments.
//!
//! The message sequence equals the serial driver [`crate::strads::lda::LdaCluster`], so
//! for a seed the distributed run gives exactly the serial run's counts.
//!
//! Roles `strads-lda-scheduler` / `strads-lda-worker`, settings `[app.lda]`; outputs
//! `topics.txt` (top words per topic), `topic_word.tsv` and `metrics.json`.

use std::path::PathBuf;
use std::time::Duration;

use petrel_actors::strads::{
    Plan, Push, Schedule, SchedulerOptions, Step, StradsApp, WorkerSet, run_scheduler, start_worker,
};
use petrel_actors::{Cluster, NodeContext};
use petrel_messages::Priority;
use serde::{Deserialize, Serialize};

use super::{AppError, write_output};
use crate::data::Corpus;
use crate::data::synthetic::{LdaCorpusParams, lda_corpus};
use crate::strads::lda::{
    LdaConfig, LdaWorker, TopicTotalsDelta, VocabularyPartition, WordTopicBlock,
    joint_log_likelihood, topic_word_matrix,
};
use crate::strads::mf::{RotationSchedule, balanced_buckets};

pub const SCHEDULER_ROLE: &str = "strads-lda-scheduler";
pub const WORKER_ROLE: &str = "strads-lda-worker";
const WORKER_ACTOR: &str = "strads-lda-worker";
const READY_BARRIER: &str = "strads.lda.ready";

/// Synthetic corpus from the LDA generative model (see [`lda_corpus`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyntheticCorpus {
    pub n_topics: usize,
    pub vocab_size: usize,
    pub n_docs: usize,
    pub doc_length: usize,
    pub alpha: f64,
    pub beta: f64,
    pub seed: u64,
}

impl Default for SyntheticCorpus {
    fn default() -> Self {
        SyntheticCorpus {
            n_topics: 20,
            vocab_size: 5000,
            n_docs: 2000,
            doc_length: 100,
            alpha: 0.1,
            beta: 0.1,
            seed: 42,
        }
    }
}

/// `[app.lda]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LdaJob {
    /// UCI bag-of-words `docword.txt`; unset = synthetic corpus.
    pub docword: Option<PathBuf>,
    /// UCI `vocab.txt` (for readable top words).
    pub vocab: Option<PathBuf>,
    pub synthetic: SyntheticCorpus,
    pub n_topics: usize,
    pub alpha: f64,
    pub beta: f64,
    pub iterations: usize,
    pub seed: u64,
    /// Top words listed per topic in `topics.txt`.
    pub top_words: usize,
    pub out_dir: Option<PathBuf>,
    pub timeout_s: u64,
}

impl Default for LdaJob {
    fn default() -> Self {
        LdaJob {
            docword: None,
            vocab: None,
            synthetic: SyntheticCorpus::default(),
            n_topics: 20,
            alpha: 0.1,
            beta: 0.1,
            iterations: 20,
            seed: 0,
            top_words: 10,
            out_dir: None,
            timeout_s: 120,
        }
    }
}

impl LdaJob {
    pub fn load(&self) -> Result<Corpus, AppError> {
        let corpus = match &self.docword {
            Some(path) => crate::data::load_bow(path, self.vocab.as_deref())?,
            None => {
                let s = &self.synthetic;
                lda_corpus(&LdaCorpusParams {
                    n_topics: s.n_topics,
                    vocab_size: s.vocab_size,
                    n_docs: s.n_docs,
                    doc_length: s.doc_length,
                    alpha: s.alpha,
                    beta: s.beta,
                    seed: s.seed,
                })?
                .corpus
            }
        };
        if corpus.n_tokens() == 0 {
            return Err(AppError::Config("the corpus has no tokens".into()));
        }
        Ok(corpus)
    }

    pub fn config(&self, workers: usize) -> LdaConfig {
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

/// Where every document and word goes, identical on every node.
pub struct LdaLayout {
    pub vocabulary: VocabularyPartition,
    pub doc_worker: Vec<u32>,
}

impl LdaLayout {
    pub fn new(corpus: &Corpus, workers: usize) -> Self {
        let lengths: Vec<usize> = corpus.docs.iter().map(Vec::len).collect();
        LdaLayout {
            vocabulary: VocabularyPartition::balanced(&corpus.word_frequencies(), workers),
            doc_worker: balanced_buckets(&lengths, workers),
        }
    }

    /// Documents `(global id, tokens)` of worker `w`.
    pub fn docs_of(&self, corpus: &Corpus, w: usize) -> Vec<(u32, Vec<u32>)> {
        corpus
            .docs
            .iter()
            .enumerate()
            .filter(|(d, _)| self.doc_worker[*d] as usize == w)
            .map(|(d, doc)| (d as u32, doc.clone()))
            .collect()
    }
}

/// Marker type of the LDA wire types.
pub struct LdaApp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LdaTask {
    /// Add the worker's initial assignments of the block's words (first rotation).
    Init { block: WordTopicBlock, report: bool },
    /// Resample the worker's tokens of the block's words.
    Sample { block: WordTopicBlock, report: bool },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaPartial {
    pub block: WordTopicBlock,
    /// Init: the worker's own topic counts; Sample: its change since the last sync.
    pub totals: TopicTotalsDelta,
    /// With `report`: the document half of the log-likelihood, and the tokens sampled.
    pub doc_log_likelihood: Option<f64>,
    pub tokens: u64,
}

/// The summed topic totals, re-broadcast after every sub-round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaCommit {
    pub topic_totals: Option<Vec<i64>>,
}

impl StradsApp for LdaApp {
    const DISPATCH_NAME: &'static str = "petrel.strads.lda.dispatch";
    const COMMIT_NAME: &'static str = "petrel.strads.lda.commit";
    type Task = LdaTask;
    type Partial = LdaPartial;
    type Commit = LdaCommit;
}

/// Worker half.
pub struct LdaWorkerApp {
    worker: LdaWorker,
    vocabulary: VocabularyPartition,
    n_topics: usize,
    tokens_per_block: Vec<u64>,
}

impl LdaWorkerApp {
    pub fn new(
        index: usize,
        corpus: &Corpus,
        layout: &LdaLayout,
        config: &LdaConfig,
    ) -> Result<Self, AppError> {
        let docs = layout.docs_of(corpus, index);
        let mut tokens_per_block = vec![0u64; layout.vocabulary.block_words.len()];
        for (_, doc) in &docs {
            for &w in doc {
                tokens_per_block[layout.vocabulary.word_block[w as usize] as usize] += 1;
            }
        }
        Ok(LdaWorkerApp {
            worker: LdaWorker::new(index, docs, &layout.vocabulary, config)?,
            vocabulary: layout.vocabulary.clone(),
            n_topics: config.n_topics,
            tokens_per_block,
        })
    }
}

impl Push<LdaApp> for LdaWorkerApp {
    fn push(&mut self, _round: u64, task: &LdaTask) -> Result<LdaPartial, String> {
        let (block, report, init) = match task {
            LdaTask::Init { block, report } => (block, *report, true),
            LdaTask::Sample { block, report } => (block, *report, false),
        };
        if block.block >= self.tokens_per_block.len() || block.word_ids.len() != block.rows.len() {
            return Err(format!("malformed word-topic block {}", block.block));
        }
        let mut block = block.clone();
        let (totals, tokens) = if init {
            self.worker.add_initial_counts(&mut block, &self.vocabulary);
            let deltas = if report {
                self.worker.own_topic_counts()
            } else {
                vec![0; self.n_topics]
            };
            (
                TopicTotalsDelta {
                    worker: self.worker.worker,
                    deltas,
                },
                0,
            )
        } else {
            self.worker.sample_block(&mut block, &self.vocabulary);
            (
                self.worker.take_totals_delta(),
                self.tokens_per_block[block.block],
            )
        };
        Ok(LdaPartial {
            block,
            totals,
            doc_log_likelihood: report.then(|| self.worker.log_likelihood_part()),
            tokens,
        })
    }

    fn commit(&mut self, _round: u64, commit: &LdaCommit) -> Result<(), String> {
        if let Some(totals) = &commit.topic_totals {
            if totals.len() != self.n_topics {
                return Err(format!(
                    "{} topic totals for {} topics",
                    totals.len(),
                    self.n_topics
                ));
            }
            self.worker.set_topic_totals(totals);
        }
        Ok(())
    }
}

/// One point of the log-likelihood trace (after a full pass over the corpus).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoglikPoint {
    pub iteration: usize,
    pub elapsed_s: f64,
    pub tokens_sampled: u64,
    pub loglik_per_token: f64,
}

/// `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaMetrics {
    pub n_docs: usize,
    pub vocab_size: usize,
    pub n_tokens: usize,
    pub n_topics: usize,
    pub workers: usize,
    pub iterations: usize,
    pub elapsed_s: f64,
    /// Seconds spent in sampling rounds (excludes the initial count rotation).
    pub sampling_s: f64,
    pub tokens_sampled: u64,
    /// Tokens sampled per second divided by the number of workers (one sampling thread
    /// each).
    pub tokens_per_s_per_worker: f64,
    pub loglik: Vec<LoglikPoint>,
    pub final_loglik_per_token: f64,
}

/// Scheduler half: rotation of the word-topic blocks and the topic totals.
pub struct LdaScheduling {
    schedule: RotationSchedule,
    blocks: Vec<Option<WordTopicBlock>>,
    topic_totals: Vec<i64>,
    vocab_size: usize,
    beta: f64,
    iterations: usize,
    /// 0 = the init rotation, then 1..=iterations.
    pass: usize,
    t: usize,
    init_end_s: f64,
    metrics: LdaMetrics,
}

impl LdaScheduling {
    pub fn new(corpus: &Corpus, layout: &LdaLayout, job: &LdaJob, workers: usize) -> Self {
        LdaScheduling {
            schedule: RotationSchedule { p: workers },
            blocks: layout
                .vocabulary
                .empty_blocks()
                .into_iter()
                .map(Some)
                .collect(),
            topic_totals: vec![0; job.n_topics],
            vocab_size: corpus.vocab_size,
            beta: job.beta,
            iterations: job.iterations,
            pass: 0,
            t: 0,
            init_end_s: 0.0,
            metrics: LdaMetrics {
                n_docs: corpus.docs.len(),
                vocab_size: corpus.vocab_size,
                n_tokens: corpus.n_tokens(),
                n_topics: job.n_topics,
                workers,
                iterations: job.iterations,
                elapsed_s: 0.0,
                sampling_s: 0.0,
                tokens_sampled: 0,
                tokens_per_s_per_worker: 0.0,
                loglik: Vec::new(),
                final_loglik_per_token: f64::NAN,
            },
        }
    }

    pub fn metrics(&self) -> &LdaMetrics {
        &self.metrics
    }

    pub fn topic_totals(&self) -> &[i64] {
        &self.topic_totals
    }

    /// The word-topic blocks (all present once the job finished).
    pub fn blocks(&self) -> Vec<&WordTopicBlock> {
        self.blocks.iter().flatten().collect()
    }

    /// `(n_wk + beta) / (n_k + V beta)`, `K x V`.
    pub fn topic_word(&self) -> ndarray::Array2<f64> {
        topic_word_matrix(
            self.blocks
                .iter()
                .flatten()
                .flat_map(|b| b.word_ids.iter().copied().zip(&b.rows)),
            &self.topic_totals,
            self.vocab_size,
            self.beta,
        )
    }
}

impl Schedule<LdaApp> for LdaScheduling {
    fn schedule(&mut self, _round: u64, in_flight: usize) -> Step<LdaTask> {
        if in_flight > 0 {
            return Step::Wait;
        }
        if self.pass > self.iterations {
            return Step::Done;
        }
        let p = self.schedule.p;
        let report = self.t + 1 == p;
        let mut tasks = Vec::with_capacity(p);
        for w in 0..p {
            let b = self.schedule.block_held(w, self.t);
            let Some(block) = self.blocks[b].take() else {
                return Step::Done;
            };
            tasks.push(if self.pass == 0 {
                LdaTask::Init { block, report }
            } else {
                LdaTask::Sample { block, report }
            });
        }
        Step::Run(Plan::PerWorker(tasks))
    }

    fn pull(
        &mut self,
        _round: u64,
        partials: Vec<LdaPartial>,
        elapsed: Duration,
    ) -> Result<LdaCommit, String> {
        let p = self.schedule.p;
        let mut doc_ll = 0.0;
        let mut reported = 0;
        for (w, partial) in partials.into_iter().enumerate() {
            let expected = self.schedule.block_held(w, self.t);
            if partial.block.block != expected {
                return Err(format!(
                    "worker {w} returned block {} instead of {expected}",
                    partial.block.block
                ));
            }
            if partial.totals.deltas.len() != self.topic_totals.len() {
                return Err(format!(
                    "worker {w}: {} topic deltas",
                    partial.totals.deltas.len()
                ));
            }
            for (t, d) in self.topic_totals.iter_mut().zip(&partial.totals.deltas) {
                *t += d;
            }
            if let Some(ll) = partial.doc_log_likelihood {
                doc_ll += ll;
                reported += 1;
            }
            self.metrics.tokens_sampled += partial.tokens;
            self.blocks[expected] = Some(partial.block);
        }
        let now = elapsed.as_secs_f64();
        self.metrics.elapsed_s = now;
        if reported == p {
            let word: f64 = self
                .blocks
                .iter()
                .flatten()
                .map(|b| b.log_likelihood_part(self.beta))
                .sum();
            let ll =
                joint_log_likelihood(word, doc_ll, &self.topic_totals, self.vocab_size, self.beta)
                    / self.metrics.n_tokens.max(1) as f64;
            if self.pass == 0 {
                self.init_end_s = now;
            }
            self.metrics.loglik.push(LoglikPoint {
                iteration: self.pass,
                elapsed_s: now,
                tokens_sampled: self.metrics.tokens_sampled,
                loglik_per_token: ll,
            });
            self.metrics.final_loglik_per_token = ll;
            tracing::debug!(iteration = self.pass, ll, "lda pass");
        }
        self.metrics.sampling_s = (now - self.init_end_s).max(0.0);
        if self.metrics.sampling_s > 0.0 {
            self.metrics.tokens_per_s_per_worker =
                self.metrics.tokens_sampled as f64 / self.metrics.sampling_s / p as f64;
        }
        self.t += 1;
        if self.t == p {
            if self.pass == 0 {
                // Same canonical row order as the serial driver's initial tables.
                self.blocks
                    .iter_mut()
                    .flatten()
                    .for_each(WordTopicBlock::canonicalize);
            }
            self.t = 0;
            self.pass += 1;
        }
        Ok(LdaCommit {
            topic_totals: Some(self.topic_totals.clone()),
        })
    }
}

/// Writes `topics.txt` (per topic: the top words with probabilities), `topic_word.tsv`
/// (`K x V` probabilities) and `metrics.json`.
pub fn write_outputs(
    dir: &std::path::Path,
    sched: &LdaScheduling,
    corpus: &Corpus,
    top: usize,
) -> Result<(), AppError> {
    write_topic_files(dir, &sched.topic_word(), corpus, top)?;
    let json =
        serde_json::to_vec_pretty(sched.metrics()).map_err(|e| AppError::Config(e.to_string()))?;
    write_output(dir, "metrics.json", &json)
}

/// Writes `topics.txt` (per topic: the top words of `phi` with probabilities) and
/// `topic_word.tsv` (`phi`, `K x V`); shared by the STRADS and parameter-server LDA apps.
pub fn write_topic_files(
    dir: &std::path::Path,
    phi: &ndarray::Array2<f64>,
    corpus: &Corpus,
    top: usize,
) -> Result<(), AppError> {
    let mut topics = String::new();
    let mut table = String::new();
    for (k, row) in phi.rows().into_iter().enumerate() {
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| {
            row[b]
                .partial_cmp(&row[a])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let words: Vec<String> = order
            .iter()
            .take(top)
            .map(|&w| {
                let name = corpus
                    .vocab
                    .as_ref()
                    .and_then(|v| v.get(w).cloned())
                    .unwrap_or_else(|| format!("w{w}"));
                format!("{name}:{:.4}", row[w])
            })
            .collect();
        topics.push_str(&format!("topic {k}: {}\n", words.join(" ")));
        let values: Vec<String> = row.iter().map(|v| format!("{v:.6e}")).collect();
        table.push_str(&values.join("\t"));
        table.push('\n');
    }
    write_output(dir, "topics.txt", topics.as_bytes())?;
    write_output(dir, "topic_word.tsv", table.as_bytes())
}

async fn scheduler_role(ctx: NodeContext) -> Result<(), String> {
    let job: LdaJob = ctx.settings.app("lda").map_err(|e| e.to_string())?;
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    if workers.is_empty() {
        return Err(format!("no node runs {WORKER_ROLE}"));
    }
    let (n_workers, loader) = (workers.len(), job.clone());
    let (corpus, mut app) = super::off_loop(move || {
        let corpus = loader.load()?;
        let layout = LdaLayout::new(&corpus, n_workers);
        let app = LdaScheduling::new(&corpus, &layout, &loader, n_workers);
        Ok((corpus, app))
    })
    .await?;
    ctx.barrier(READY_BARRIER)
        .await
        .map_err(|e| e.to_string())?;
    let set = WorkerSet::<LdaApp>::resolve(&ctx.node, &workers, WORKER_ACTOR)
        .map_err(|e| e.to_string())?;
    let opts = SchedulerOptions {
        timeout: Duration::from_secs(job.timeout_s.max(1)),
        priority: Priority::NORMAL,
        ..SchedulerOptions::default()
    };
    run_scheduler(&mut app, &set, &opts)
        .await
        .map_err(|e| e.to_string())?;
    let m = app.metrics();
    tracing::info!(
        loglik_per_token = m.final_loglik_per_token,
        tokens_per_s_per_worker = format!("{:.0}", m.tokens_per_s_per_worker),
        "lda finished"
    );
    if let Some(dir) = &job.out_dir {
        write_outputs(dir, &app, &corpus, job.top_words).map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn worker_role(ctx: NodeContext) -> Result<(), String> {
    let job: LdaJob = ctx.settings.app("lda").map_err(|e| e.to_string())?;
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    let index = workers
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or("worker not in its own role list")?;
    let (n_workers, loader) = (workers.len(), job.clone());
    let app = super::off_loop(move || {
        let corpus = loader.load()?;
        let layout = LdaLayout::new(&corpus, n_workers);
        LdaWorkerApp::new(index, &corpus, &layout, &loader.config(n_workers))
    })
    .await?;
    start_worker::<LdaApp, _>(&ctx.node, WORKER_ACTOR, index as u32, app)
        .map_err(|e| e.to_string())?;
    ctx.barrier(READY_BARRIER).await.map_err(|e| e.to_string())
}

/// Registers the LDA roles.
pub fn register(cluster: Cluster) -> Cluster {
    cluster
        .role(SCHEDULER_ROLE, |ctx| Box::pin(scheduler_role(ctx)))
        .role(WORKER_ROLE, |ctx| Box::pin(worker_role(ctx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strads::lda::LdaCluster;
    use petrel_actors::strads::{PipelineAction, PipelineCore};

    fn small_job() -> LdaJob {
        LdaJob {
            synthetic: SyntheticCorpus {
                n_topics: 4,
                vocab_size: 60,
                n_docs: 40,
                doc_length: 30,
                alpha: 0.1,
                beta: 0.1,
                seed: 3,
            },
            n_topics: 4,
            iterations: 8,
            seed: 9,
            ..LdaJob::default()
        }
    }

    fn drive(job: &LdaJob, p: usize) -> (LdaScheduling, Corpus) {
        let corpus = job.load().unwrap();
        let layout = LdaLayout::new(&corpus, p);
        let mut sched = LdaScheduling::new(&corpus, &layout, job, p);
        let mut ws: Vec<LdaWorkerApp> = (0..p)
            .map(|w| LdaWorkerApp::new(w, &corpus, &layout, &job.config(p)).unwrap())
            .collect();
        let mut core = PipelineCore::new(1);
        let freq = corpus.word_frequencies();
        loop {
            match core.next_action() {
                PipelineAction::Schedule(r) => {
                    let step = sched.schedule(r, core.in_flight());
                    core.scheduled(&step).unwrap();
                    let Step::Run(Plan::PerWorker(tasks)) = step else {
                        continue;
                    };
                    let parts = ws
                        .iter_mut()
                        .zip(&tasks)
                        .map(|(w, t)| w.push(r, t).unwrap())
                        .collect();
                    let c = sched.pull(r, parts, Duration::ZERO).unwrap();
                    core.committed(r).unwrap();
                    for w in &mut ws {
                        w.commit(r, &c).unwrap();
                    }
                    // Invariant after every completed rotation: word-topic rows sum to the
                    // word frequencies and the totals to their column sums.
                    if sched.t == 0 {
                        let mut from_words = vec![0i64; job.n_topics];
                        for b in sched.blocks() {
                            for (row, &w) in b.rows.iter().zip(&b.word_ids) {
                                assert_eq!(row.total(), freq[w as usize] as u64);
                                for &(t, n) in &row.entries {
                                    from_words[t as usize] += i64::from(n);
                                }
                            }
                        }
                        assert_eq!(from_words, sched.topic_totals());
                    }
                }
                PipelineAction::AwaitOldest => unreachable!(),
                PipelineAction::Stop => break,
            }
        }
        (sched, corpus)
    }

    #[test]
    fn rotation_matches_the_serial_driver_exactly() {
        let job = small_job();
        let (sched, corpus) = drive(&job, 3);
        let mut serial = LdaCluster::new(&corpus, &job.config(3)).unwrap();
        for _ in 0..job.iterations {
            serial.iteration();
        }
        assert_eq!(serial.topic_totals, sched.topic_totals());
        let a = serial.log_likelihood_per_token();
        let b = sched.metrics().final_loglik_per_token;
        assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        let trace = &sched.metrics().loglik;
        assert_eq!(trace.len(), job.iterations + 1);
        assert!(trace.last().unwrap().loglik_per_token > trace[0].loglik_per_token);
        assert_eq!(
            sched.metrics().tokens_sampled as usize,
            corpus.n_tokens() * job.iterations
        );
    }

    #[test]
    fn outputs_list_top_words() {
        let job = small_job();
        let (sched, corpus) = drive(&job, 2);
        let dir = tempfile::tempdir().unwrap();
        write_outputs(dir.path(), &sched, &corpus, 5).unwrap();
        let topics = std::fs::read_to_string(dir.path().join("topics.txt")).unwrap();
        assert_eq!(topics.lines().count(), 4);
        assert!(
            topics.lines().all(|l| l.split(' ').count() == 2 + 5),
            "{topics}"
        );
    }
}
