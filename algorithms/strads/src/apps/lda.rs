//! LDA by collapsed Gibbs sampling (SparseLDA) with word rotation on the STRADS runtime.
//!
//! Documents are split over the P workers (balanced by length), the vocabulary into P
//! blocks (balanced by frequency). Word-topic blocks rotate around the ring of workers
//! ([`crate::shells::ring`]): in sub-round `t` worker `w` samples the tokens of the
//! words in block `(w + t) mod P` ([`RotationSchedule`]) and then hands the block to worker
//! `w - 1` directly, so no two workers write the same word-topic row and the blocks never
//! pass through the scheduler. The scheduler's tasks carry the block id and the next
//! holder; after every sub-round the workers' topic-total changes (K numbers each) are
//! summed by the scheduler and re-broadcast in the commit (stale within a sub-round, as in
//! the reference). At the end of a pass each worker also reports the word half of the
//! log-likelihood of the block it holds. The first rotation only builds the word-topic
//! counts from the workers' random initial assignments; a final Collect round brings the
//! blocks to the scheduler for the outputs.
//!
//! The message sequence equals the serial driver [`crate::core::lda::LdaCluster`], so
//! for a seed the distributed run gives exactly the serial run's counts.
//!
//! Roles `strads-lda-scheduler` / `strads-lda-worker`, settings `[app.lda]`; outputs
//! `topics.txt` (top words per topic), `topic_word.tsv` and `metrics.json`.

use std::path::PathBuf;
use std::time::Duration;

use crate::core::ModelError;
use crate::core::app::{
    BlockFate, BlockId, Plan, RingApp, RingOutput, RingPush, Schedule, Step, StradsApp,
};
use crate::error::StradsError;
use crate::kit::{FinishedRun, JobShape, RingHalf, StradsJob, write_json};
use crate::shells::SchedulerOptions;
use serde::{Deserialize, Serialize};

use crate::core::lda::{LdaWorker, TopicTotalsDelta, VocabularyPartition, WordTopicBlock};
use crate::core::mf::RotationSchedule;
use petrel_ml::data::Corpus;
use petrel_ml::topic::{
    DocumentPartition, LdaConfig, LdaMetrics, LoglikPoint, SyntheticCorpus, load_corpus,
    write_topic_files,
};
use petrel_ml::topic::{joint_log_likelihood, topic_word_matrix};

/// The scheduler's role.
pub const SCHEDULER_ROLE: &str = "strads-lda-scheduler";
/// The workers' role (and actor).
pub const WORKER_ROLE: &str = "strads-lda-worker";

/// `[app.lda]` and the flags of `petrel train lda`: one settings struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
pub struct LdaJob {
    /// UCI bag-of-words docword file (`D`, `W`, `NNZ` header, then `doc word count`).
    /// Without it: a corpus sampled from the LDA generative model.
    #[arg(long)]
    pub docword: Option<PathBuf>,
    /// UCI vocab file (one word per line) for readable topics.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// The synthetic corpus used without a docword file (TOML only).
    #[arg(skip)]
    pub synthetic: SyntheticCorpus,
    /// Topics.
    #[arg(long = "topics", default_value_t = 20)]
    pub n_topics: usize,
    /// Document-topic prior.
    #[arg(long, default_value_t = 0.1)]
    pub alpha: f64,
    /// Topic-word prior.
    #[arg(long, default_value_t = 0.1)]
    pub beta: f64,
    /// Gibbs sweeps.
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Sampler seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Top words listed per topic in `topics.txt`.
    #[arg(long, default_value_t = 10)]
    pub top_words: usize,
    /// Where the scheduler writes the topics and `metrics.json` (`--out`).
    #[arg(skip)]
    pub out_dir: Option<PathBuf>,
    /// Timeout of one round's requests, in seconds.
    #[arg(long, default_value_t = 120)]
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
    /// The corpus, identical on every node.
    pub fn load(&self) -> Result<Corpus, StradsError> {
        Ok(load_corpus(
            self.docword.as_deref(),
            self.vocab.as_deref(),
            &self.synthetic,
        )?)
    }

    /// The sampler's parameters for `workers` workers.
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
    /// Words by block.
    pub vocabulary: VocabularyPartition,
    /// Documents by worker.
    pub docs: DocumentPartition,
}

impl LdaLayout {
    /// Balanced blocks and buckets of `corpus` for `workers` workers.
    pub fn new(corpus: &Corpus, workers: usize) -> Self {
        LdaLayout {
            vocabulary: VocabularyPartition::balanced(&corpus.word_frequencies(), workers),
            docs: DocumentPartition::balanced(corpus, workers),
        }
    }
}

/// Marker type of the LDA wire types.
pub struct LdaApp;

/// Scheduler -> worker: names the vocabulary block; the block travels worker to worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LdaTask {
    /// Add the worker's initial assignments of the block's words (first rotation).
    Init {
        /// The block.
        block: usize,
        /// Worker that gets the block afterwards.
        pass_to: u32,
        /// Report the log-likelihood parts (the block's last visit).
        report: bool,
    },
    /// Resample the worker's tokens of the block's words.
    Sample {
        /// The block.
        block: usize,
        /// Worker that gets the block afterwards.
        pass_to: u32,
        /// Report the log-likelihood parts (the block's last visit).
        report: bool,
    },
    /// Send the block to the scheduler (it leaves the ring), for the outputs.
    Collect {
        /// The block.
        block: usize,
    },
}

/// Worker -> scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LdaPartial {
    /// A visit is done.
    Visited {
        /// The block visited.
        block: usize,
        /// Init: the worker's own topic counts; Sample: its change since the last sync.
        totals: TopicTotalsDelta,
        /// With `report`: the document half of the log-likelihood.
        doc_log_likelihood: Option<f64>,
        /// With `report` (the block's last visit of a pass): the block's share of the word
        /// half of the log-likelihood.
        word_log_likelihood: Option<f64>,
        tokens: u64,
    },
    Collected(WordTopicBlock),
}

/// The summed topic totals, re-broadcast after every sub-round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaCommit {
    /// The summed totals (`None` after the Collect round).
    pub topic_totals: Option<Vec<i64>>,
}

impl StradsApp for LdaApp {
    const DISPATCH_NAME: &'static str = "petrel.strads.lda.dispatch";
    const COMMIT_NAME: &'static str = "petrel.strads.lda.commit";
    type Task = LdaTask;
    type Partial = LdaPartial;
    type Commit = LdaCommit;
}

impl RingApp for LdaApp {
    const HANDOFF_NAME: &'static str = "petrel.strads.lda.handoff";
    type Block = WordTopicBlock;

    fn block_needed(task: &LdaTask) -> Option<BlockId> {
        match task {
            LdaTask::Init { block, .. }
            | LdaTask::Sample { block, .. }
            | LdaTask::Collect { block } => Some(*block as BlockId),
        }
    }
}

/// Worker half.
pub struct LdaWorkerApp {
    worker: LdaWorker,
    vocabulary: VocabularyPartition,
    n_topics: usize,
    beta: f64,
    tokens_per_block: Vec<u64>,
}

impl LdaWorkerApp {
    /// Worker `index`'s documents of `corpus` under `layout`.
    pub fn new(
        index: usize,
        corpus: &Corpus,
        layout: &LdaLayout,
        config: &LdaConfig,
    ) -> Result<Self, ModelError> {
        let docs = layout.docs.docs_of(corpus, index);
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
            beta: config.beta,
            tokens_per_block,
        })
    }
}

/// The blocks worker `index` holds before the first sub-round: its empty word-topic block.
pub fn initial_ring_blocks(index: usize, layout: &LdaLayout) -> Vec<(BlockId, WordTopicBlock)> {
    let schedule = RotationSchedule {
        p: layout.vocabulary.block_words.len(),
    };
    layout
        .vocabulary
        .empty_blocks()
        .into_iter()
        .filter(|b| schedule.holder(b.block, 0) == index)
        .map(|b| (b.block as BlockId, b))
        .collect()
}

impl RingPush<LdaApp> for LdaWorkerApp {
    fn push(
        &mut self,
        _round: u64,
        task: &LdaTask,
        block: Option<WordTopicBlock>,
    ) -> Result<RingOutput<LdaPartial, WordTopicBlock>, ModelError> {
        let (expected, pass_to, report, init) = match task {
            LdaTask::Init {
                block,
                pass_to,
                report,
            } => (*block, *pass_to, *report, true),
            LdaTask::Sample {
                block,
                pass_to,
                report,
            } => (*block, *pass_to, *report, false),
            LdaTask::Collect { block } => (*block, 0, false, false),
        };
        let mut block = block
            .ok_or_else(|| ModelError::protocol("no word-topic block for a task that needs one"))?;
        if block.block != expected
            || block.block >= self.tokens_per_block.len()
            || block.word_ids.len() != block.rows.len()
        {
            return Err(ModelError::protocol(format!(
                "malformed word-topic block {} (expected {expected})",
                block.block
            )));
        }
        if let LdaTask::Collect { .. } = task {
            return Ok(RingOutput {
                partial: LdaPartial::Collected(block),
                block: BlockFate::Consumed,
            });
        }
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
        let word_log_likelihood = report.then(|| block.log_likelihood_part(self.beta));
        if init && report {
            // Last visit of the init rotation: same canonical row order as the serial
            // driver's initial tables.
            block.canonicalize();
        }
        Ok(RingOutput {
            partial: LdaPartial::Visited {
                block: expected,
                totals,
                doc_log_likelihood: report.then(|| self.worker.log_likelihood_part()),
                word_log_likelihood,
                tokens,
            },
            block: BlockFate::PassTo {
                worker: pass_to,
                block,
            },
        })
    }

    fn commit(&mut self, _round: u64, commit: &LdaCommit) -> Result<(), ModelError> {
        if let Some(totals) = &commit.topic_totals {
            if totals.len() != self.n_topics {
                return Err(ModelError::DimensionMismatch(format!(
                    "{} topic totals for {} topics",
                    totals.len(),
                    self.n_topics
                )));
            }
            self.worker.set_topic_totals(totals);
        }
        Ok(())
    }
}

/// Scheduler half: the rotation plan and the topic totals. The word-topic blocks stay
/// with the workers and come back only in the final Collect round.
pub struct LdaScheduling {
    schedule: RotationSchedule,
    blocks: Vec<Option<WordTopicBlock>>,
    collected: bool,
    topic_totals: Vec<i64>,
    vocab_size: usize,
    beta: f64,
    iterations: usize,
    /// 0 = the init rotation, then 1..=iterations.
    pass: usize,
    t: usize,
    init_end_s: f64,
    metrics: LdaMetrics,
    /// The words (when a vocabulary was read), for `topics.txt`.
    vocab: Option<Vec<String>>,
}

impl LdaScheduling {
    /// The rotation of `corpus` under `layout` over `workers` workers.
    pub fn new(corpus: &Corpus, layout: &LdaLayout, job: &LdaJob, workers: usize) -> Self {
        LdaScheduling {
            schedule: RotationSchedule { p: workers },
            blocks: vec![None; layout.vocabulary.block_words.len()],
            collected: false,
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
                scheduler_bytes: 0,
                block_bytes: 0,
                collect_bytes: 0,
                rounds: 0,
            },
            vocab: corpus.vocab.clone(),
        }
    }

    /// Records the bytes the scheduler node moved during the run.
    pub fn set_scheduler_bytes(&mut self, bytes: u64) {
        self.metrics.scheduler_bytes = bytes;
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &LdaMetrics {
        &self.metrics
    }

    /// The topic totals `n_k`.
    pub fn topic_totals(&self) -> &[i64] {
        &self.topic_totals
    }

    /// The word-topic blocks (present once the final Collect round ran).
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
        let p = self.schedule.p;
        if self.pass > self.iterations {
            if self.collected {
                return Step::Done;
            }
            // Every rotation has P sub-rounds, so the blocks are back where they started.
            return Step::Run(Plan::PerWorker(
                (0..p)
                    .map(|w| LdaTask::Collect {
                        block: self.schedule.block_held(w, 0),
                    })
                    .collect(),
            ));
        }
        let report = self.t + 1 == p;
        Step::Run(Plan::PerWorker(
            (0..p)
                .map(|w| {
                    let block = self.schedule.block_held(w, self.t);
                    let pass_to = self.schedule.next_holder(w) as u32;
                    if self.pass == 0 {
                        LdaTask::Init {
                            block,
                            pass_to,
                            report,
                        }
                    } else {
                        LdaTask::Sample {
                            block,
                            pass_to,
                            report,
                        }
                    }
                })
                .collect(),
        ))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LdaPartial>,
        elapsed: Duration,
    ) -> Result<LdaCommit, ModelError> {
        let p = self.schedule.p;
        self.metrics.rounds = round + 1;
        if self.pass > self.iterations {
            let mut block_bytes = 0u64;
            self.metrics.collect_bytes = partials.iter().map(encoded_len).sum();
            for (w, partial) in partials.into_iter().enumerate() {
                let expected = self.schedule.block_held(w, 0);
                let LdaPartial::Collected(block) = partial else {
                    return Err(ModelError::protocol(format!(
                        "worker {w} answered collect with a visit"
                    )));
                };
                if block.block != expected {
                    return Err(ModelError::protocol(format!(
                        "worker {w} returned block {} instead of {expected}",
                        block.block
                    )));
                }
                block_bytes += encoded_len(&block);
                self.blocks[expected] = Some(block);
            }
            self.metrics.block_bytes = block_bytes;
            self.collected = true;
            return Ok(LdaCommit { topic_totals: None });
        }
        let mut doc_ll = 0.0;
        let mut word_ll = vec![0.0; p];
        let mut reported = 0;
        for (w, partial) in partials.into_iter().enumerate() {
            let expected = self.schedule.block_held(w, self.t);
            let LdaPartial::Visited {
                block,
                totals,
                doc_log_likelihood,
                word_log_likelihood,
                tokens,
            } = partial
            else {
                return Err(ModelError::protocol(format!(
                    "worker {w} answered a visit with its block"
                )));
            };
            if block != expected {
                return Err(ModelError::protocol(format!(
                    "worker {w} visited block {block} instead of {expected}"
                )));
            }
            if totals.deltas.len() != self.topic_totals.len() {
                return Err(ModelError::DimensionMismatch(format!(
                    "worker {w}: {} topic deltas",
                    totals.deltas.len()
                )));
            }
            for (t, d) in self.topic_totals.iter_mut().zip(&totals.deltas) {
                *t += d;
            }
            if let (Some(doc), Some(word)) = (doc_log_likelihood, word_log_likelihood) {
                doc_ll += doc;
                word_ll[expected] = word;
                reported += 1;
            }
            self.metrics.tokens_sampled += tokens;
        }
        let now = elapsed.as_secs_f64();
        self.metrics.elapsed_s = now;
        if reported == p {
            // Summed in block order, as over the whole table.
            let word: f64 = word_ll.iter().sum();
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
            // (The init rotation's last visitors canonicalised the blocks.)
            self.t = 0;
            self.pass += 1;
        }
        Ok(LdaCommit {
            topic_totals: Some(self.topic_totals.clone()),
        })
    }
}

/// Size of `value` as a message body.
fn encoded_len<T: Serialize>(value: &T) -> u64 {
    let mut bytes = Vec::new();
    match petrel_messages::encode_body(value, &mut bytes) {
        Ok(()) => bytes.len() as u64,
        Err(_) => 0,
    }
}

/// Writes `topics.txt` (per topic: the top `top` words with probabilities),
/// `topic_word.tsv` (`K x V` probabilities) and `metrics.json`.
pub fn write_outputs(
    dir: &std::path::Path,
    sched: &LdaScheduling,
    top: usize,
) -> Result<(), StradsError> {
    // Only the vocabulary is read from the corpus here.
    let words = Corpus {
        n_docs: 0,
        vocab_size: sched.vocab_size,
        docs: Vec::new(),
        vocab: sched.vocab.clone(),
    };
    write_topic_files(dir, &sched.topic_word(), &words, top)?;
    write_json(dir, "metrics.json", sched.metrics())
}

impl StradsJob for LdaApp {
    const SECTION: &'static str = "lda";
    const SCHEDULER_ROLE: &'static str = SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = WORKER_ROLE;
    type Config = LdaJob;
    type Scheduler = LdaScheduling;
    type Worker = RingHalf<LdaApp, LdaWorkerApp>;

    fn scheduler_options(job: &LdaJob) -> SchedulerOptions {
        SchedulerOptions {
            timeout: Duration::from_secs(job.timeout_s.max(1)),
            ..SchedulerOptions::default()
        }
    }

    fn scheduler(job: &LdaJob, shape: &JobShape) -> Result<LdaScheduling, StradsError> {
        let corpus = job.load()?;
        let layout = LdaLayout::new(&corpus, shape.workers);
        Ok(LdaScheduling::new(&corpus, &layout, job, shape.workers))
    }

    fn worker(
        job: &LdaJob,
        index: usize,
        shape: &JobShape,
    ) -> Result<RingHalf<LdaApp, LdaWorkerApp>, StradsError> {
        let corpus = job.load()?;
        let layout = LdaLayout::new(&corpus, shape.workers);
        let worker = LdaWorkerApp::new(index, &corpus, &layout, &job.config(shape.workers))?;
        Ok(RingHalf::new(worker, initial_ring_blocks(index, &layout)))
    }

    fn finish(
        job: &LdaJob,
        mut scheduler: LdaScheduling,
        run: &FinishedRun,
    ) -> Result<(), StradsError> {
        scheduler.set_scheduler_bytes(run.scheduler_bytes);
        let m = scheduler.metrics();
        tracing::info!(
            loglik_per_token = m.final_loglik_per_token,
            tokens_per_s_per_worker = format!("{:.0}", m.tokens_per_s_per_worker),
            "lda finished"
        );
        if let Some(dir) = &job.out_dir {
            write_outputs(dir, &scheduler, job.top_words)?;
        }
        Ok(())
    }
}

/// Registers the LDA roles.
pub fn register(cluster: petrel_actors::Cluster) -> petrel_actors::Cluster {
    crate::kit::register::<LdaApp>(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lda::LdaCluster;
    use crate::kit::serial::Delivery;

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
        drive_with(job, p, Delivery::Late)
    }

    /// Both halves without actors, through the runtime's ring cores: the word-topic blocks
    /// are handed from worker to worker in the order `delivery` picks.
    fn drive_with(job: &LdaJob, p: usize, delivery: Delivery) -> (LdaScheduling, Corpus) {
        let corpus = job.load().unwrap();
        let (sched, run) = crate::kit::run_serial::<LdaApp>(job, p, delivery).unwrap();
        assert!(
            run.held.iter().all(Vec::is_empty),
            "collect empties the ring"
        );
        // Count invariants on the collected tables: word-topic rows sum to the word
        // frequencies and the totals to their column sums.
        let freq = corpus.word_frequencies();
        let mut from_words = vec![0i64; job.n_topics];
        assert_eq!(sched.blocks().len(), p);
        for b in sched.blocks() {
            for (row, &w) in b.rows.iter().zip(&b.word_ids) {
                assert_eq!(row.total(), freq[w as usize] as u64);
                for &(t, n) in &row.entries {
                    from_words[t as usize] += i64::from(n);
                }
            }
        }
        assert_eq!(from_words, sched.topic_totals());
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
    fn any_handoff_order_gives_the_same_counts() {
        let job = LdaJob {
            iterations: 3,
            ..small_job()
        };
        let (late, _) = drive_with(&job, 3, Delivery::Late);
        for seed in [1, 2, 3] {
            let (shuffled, _) = drive_with(&job, 3, Delivery::Shuffled(seed));
            assert_eq!(late.topic_totals(), shuffled.topic_totals());
            assert_eq!(late.blocks(), shuffled.blocks());
            assert_eq!(late.metrics().loglik, shuffled.metrics().loglik);
        }
    }

    #[test]
    fn scheduler_messages_carry_no_blocks() {
        let job = small_job();
        let corpus = job.load().unwrap();
        let layout = LdaLayout::new(&corpus, 2);
        let mut sched = LdaScheduling::new(&corpus, &layout, &job, 2);
        let Step::Run(Plan::PerWorker(tasks)) = sched.schedule(0, 0) else {
            panic!("first round");
        };
        assert_eq!(
            tasks[1],
            LdaTask::Init {
                block: 1,
                pass_to: 0,
                report: false
            }
        );
        for t in &tasks {
            let mut out = Vec::new();
            petrel_messages::encode_body(t, &mut out).unwrap();
            assert!(out.len() < 64, "{t:?}: {} bytes", out.len());
        }
    }

    #[test]
    fn outputs_list_top_words() {
        let job = small_job();
        let (sched, _) = drive(&job, 2);
        let dir = tempfile::tempdir().unwrap();
        write_outputs(dir.path(), &sched, 5).unwrap();
        let topics = std::fs::read_to_string(dir.path().join("topics.txt")).unwrap();
        assert_eq!(topics.lines().count(), 4);
        assert!(
            topics.lines().all(|l| l.split(' ').count() == 2 + 5),
            "{topics}"
        );
    }
}
