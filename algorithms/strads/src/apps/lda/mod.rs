//! LDA by collapsed Gibbs sampling (SparseLDA) with word rotation on the STRADS runtime.
//!
//! Documents are split over the P workers (balanced by length), the vocabulary into P
//! blocks (balanced by frequency). Word-topic blocks rotate around the ring
//! ([`crate::shells::ring`], [`RotationSchedule`](crate::core::mf::RotationSchedule)): in
//! sub-round `t` worker `w` samples the tokens of block `(w + t) mod P`, then hands it to
//! worker `w - 1`. After every sub-round the scheduler sums the workers' topic-total
//! changes and re-broadcasts them in the commit (stale within a sub-round, as in the
//! reference). The first rotation only builds the counts from the random initial
//! assignments; a final Collect round brings the blocks to the scheduler. For a seed the
//! run gives exactly the counts of the serial driver [`crate::core::lda::LdaCluster`].
//!
//! With `balance = "dynamic"` the scheduler re-deals the documents between passes by each
//! worker's measured sampling time per document ([`crate::core::balance::RowDealer`]): in a
//! deal round each worker releases the documents it no longer owns, with their topic
//! assignments, and the commit hands them to their new owners. The word-topic blocks and
//! topic totals do not change, so every token keeps its topic and is sampled once a pass.
//! Workers join and leave at a pass boundary under dynamic dealing: a Collect round
//! gathers the blocks, then an epoch round ([`LdaEpoch`] in a
//! [`RingEpoch`](crate::core::roster::RingEpoch)) re-forms the ring over the
//! workers of the moment, the vocabulary split into one block per worker and the
//! documents dealt evenly with their topic assignments.
//!
//! Roles `strads-lda-scheduler` / `strads-lda-worker`, settings `[app.lda]`; outputs
//! `topics.txt` (top words per topic), `topic_word.tsv` and `metrics.json`.

use std::path::PathBuf;

use crate::apps::lasso::Balance;
use crate::core::app::{BlockId, RingApp, strads_app};
use crate::core::roster::RingControl;
use crate::error::StradsError;
use crate::kit::dealing::Straggler;
use crate::kit::{FinishedRun, JobShape, RingHalf, StradsJob, StradsSettings};
use crate::shells::{RoundCheckpointSettings, SchedulerOptions};
use serde::{Deserialize, Serialize};

use crate::core::lda::{MovedDoc, TopicTotalsDelta, VocabularyPartition, WordTopicBlock};
use petrel_ml::data::Corpus;
use petrel_ml::data::synthetic::LdaCorpusParams;
use petrel_ml::topic::{
    CorpusShare, DocumentPartition, LdaConfig, load_corpus, load_corpus_share, write_topic_files,
};

mod scheduling;
mod worker;

pub use scheduling::{HeldoutFigures, LdaHeldout, LdaScheduling};
pub use worker::{LdaWorkerApp, initial_ring_blocks};

/// Fold-in sweeps of the held-out evaluation unless `heldout_sweeps` says otherwise.
pub const DEFAULT_HELDOUT_SWEEPS: usize = 5;

/// The scheduler's role.
pub const SCHEDULER_ROLE: &str = "strads-lda-scheduler";
/// The workers' role (and actor).
pub const WORKER_ROLE: &str = "strads-lda-worker";

/// `[app.lda]` and the flags of `petrel train lda`: one settings struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct LdaSettings {
    /// UCI bag-of-words docword file (`D`, `W`, `NNZ` header, then `doc word count`).
    /// Without it: a corpus sampled from the LDA generative model.
    #[arg(long)]
    pub docword: Option<PathBuf>,
    /// Held-out docword file (same vocabulary): its perplexity by document completion
    /// goes to every history record and to the final figures as `heldout_*`.
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// Fold-in Gibbs sweeps per test document of the held-out evaluation (the first half
    /// burns in; `petrel eval` uses 50).
    #[arg(long, default_value_t = DEFAULT_HELDOUT_SWEEPS)]
    pub heldout_sweeps: usize,
    /// UCI vocab file (one word per line) for readable topics.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// The synthetic corpus used without a docword file (TOML only).
    #[arg(skip)]
    pub synthetic: LdaCorpusParams,
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
    #[serde(rename = "out", alias = "out_dir")]
    pub out_dir: Option<PathBuf>,
    /// Timeout of one round's requests, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_s: u64,
    /// Round checkpoint directory, shared by all nodes (`petrel train`: `<out>/checkpoints`).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Rounds (sub-rounds of the rotation) between two checkpoints (0 = never write).
    #[arg(long, default_value_t = 8)]
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
    /// How documents are dealt to the workers: `static` (once, balanced by length) or
    /// `dynamic` (re-dealt between passes by each worker's measured time per document;
    /// a moved document takes its topic assignments along).
    #[arg(long, value_enum, default_value_t = Balance::Static)]
    pub balance: Balance,
    /// Emulated slow worker (benches, tests): this worker's sampling takes
    /// `straggler_factor` times as long.
    #[arg(long)]
    pub straggler: Option<u32>,
    /// How many times as long the straggler's sampling takes.
    #[arg(long, default_value_t = 1.0)]
    pub straggler_factor: f64,
}

// Every default is written once, on its flag.
impl Default for LdaSettings {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl LdaSettings {
    /// The corpus, identical on every node.
    pub fn load(&self) -> Result<Corpus, StradsError> {
        Ok(load_corpus(
            self.docword.as_deref(),
            self.vocab.as_deref(),
            &self.synthetic,
        )?)
    }

    /// Worker `worker`'s documents (none for `None`: a joiner's) and the layout's
    /// statistics ([`load_corpus_share`]).
    pub fn load_share(
        &self,
        workers: usize,
        worker: Option<usize>,
    ) -> Result<CorpusShare, StradsError> {
        Ok(load_corpus_share(
            self.docword.as_deref(),
            &self.synthetic,
            workers,
            worker,
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

impl StradsSettings for LdaSettings {
    /// Every value in range (keys as in `[app.lda]`), checked before any node starts.
    fn validate(&self) -> Result<(), petrel_ml::job::InvalidSetting> {
        let mut c = petrel_ml::job::SettingChecks::new();
        if self.docword.is_none() {
            self.synthetic.check("synthetic.", &mut c);
        }
        c.at_least("n_topics", self.n_topics, 1);
        c.positive("alpha", self.alpha);
        c.positive("beta", self.beta);
        c.at_least("iterations", self.iterations, 1);
        c.at_least("heldout_sweeps", self.heldout_sweeps, 1);
        c.at_least("top_words", self.top_words, 1);
        c.at_least("timeout_s", self.timeout_s, 1);
        RoundCheckpointSettings::check_resume(&mut c, self.resume, &self.checkpoint_dir);
        crate::kit::dealing::check_dealing(
            &mut c,
            self.balance,
            self.straggler_factor,
            &self.checkpoint_dir,
            self.resume,
        );
        c.finish()
    }

    /// Round checkpoints every `checkpoint_every` rounds into `checkpoint_dir`.
    fn round_checkpoints(&self) -> Option<RoundCheckpointSettings> {
        RoundCheckpointSettings::of(&self.checkpoint_dir, self.checkpoint_every, self.resume)
    }

    /// Depth 1: a ring round starts from every earlier commit.
    fn scheduler_options(&self) -> SchedulerOptions {
        SchedulerOptions::with_depth_and_timeout(1, self.timeout_s)
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

    /// The same layout from a worker's share (its statistics are the whole corpus's).
    pub fn of_share(share: &CorpusShare, workers: usize) -> Self {
        LdaLayout {
            vocabulary: VocabularyPartition::balanced(&share.stats.word_frequencies, workers),
            docs: share.partition.clone(),
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
    /// A re-deal of the documents (between passes), or a change of the workers (after a
    /// Collect round gathered the blocks, at a pass boundary): the ring re-forms over the
    /// workers of the moment; each worker releases the documents it no longer owns (the
    /// commit deals them) and rebuilds its token index.
    Ring(RingControl<LdaEpoch>),
}

/// LDA's part of a change of the workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaEpoch {
    /// The starting static split whose [`deal_order`](crate::core::balance::deal_order)
    /// the ranges are positions of.
    pub doc_owner: Vec<u32>,
    /// Each ring worker's documents: positions `start..end` of the deal order.
    pub ranges: Vec<(u64, u64)>,
    /// The word-topic blocks, one per ring worker, with the current counts.
    pub blocks: Vec<WordTopicBlock>,
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
        /// With `report`: the block's share of the word half of the log-likelihood.
        word_log_likelihood: Option<f64>,
        /// With `report` and a test set: a copy of the block, for the held-out evaluation.
        snapshot: Option<WordTopicBlock>,
        /// Tokens sampled.
        tokens: u64,
        /// Seconds the worker has spent sampling in all (what dynamic dealing measures).
        #[serde(default)]
        busy_s: f64,
    },
    /// The block (Collect).
    Collected(WordTopicBlock),
    /// The documents the worker gave up in a deal round, with their topic assignments.
    Released(Vec<MovedDoc>),
}

/// The summed topic totals, re-broadcast after every sub-round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaCommit {
    /// The summed totals (`None` after the Collect round and a deal round).
    pub topic_totals: Option<Vec<i64>>,
    /// After a deal round: every released document; each worker takes those it now owns.
    #[serde(default)]
    pub moved: Vec<MovedDoc>,
}

strads_app!(LdaApp, "petrel.strads.lda", LdaTask, LdaPartial, LdaCommit);

impl LdaPartial {
    /// The documents of a deal round's answer (`None`: another answer).
    pub fn released(self) -> Option<Vec<MovedDoc>> {
        match self {
            LdaPartial::Released(docs) => Some(docs),
            _ => None,
        }
    }
}

impl RingApp for LdaApp {
    const HANDOFF_NAME: &'static str = "petrel.strads.lda.handoff";
    type Block = WordTopicBlock;

    fn block_needed(task: &LdaTask) -> Option<BlockId> {
        match task {
            LdaTask::Init { block, .. }
            | LdaTask::Sample { block, .. }
            | LdaTask::Collect { block } => Some(*block as BlockId),
            LdaTask::Ring(_) => None,
        }
    }

    fn new_ring(task: &LdaTask) -> Option<&[String]> {
        match task {
            LdaTask::Ring(control) => control.new_ring(),
            _ => None,
        }
    }
}

/// Writes `topics.txt` (per topic: the top `top` words with probabilities),
/// `topic_word.tsv` (`K x V` probabilities) and `metrics.json`.
pub fn write_outputs(
    dir: &std::path::Path,
    sched: &LdaScheduling,
    job: &LdaSettings,
) -> Result<(), StradsError> {
    let mut run = lda_run_metrics(sched, job);
    run.check_finite("check alpha and beta")?;
    if job.test_data.is_some() {
        // What the held-out history cost (every pass end, the scheduler's thread).
        run.finals(&[("test_set_scoring_s", sched.heldout_seconds())]);
    }
    let top = job.top_words;
    // Only the vocabulary is read from the corpus here.
    let words = Corpus {
        n_docs: 0,
        vocab_size: sched.vocab_size,
        docs: Vec::new(),
        vocab: sched.vocab.clone(),
    };
    let phi = sched.topic_word();
    write_topic_files(dir, &phi, &words, top)?;
    let saved = petrel_ml::model::TopicModel::saved(
        "lda",
        job,
        &phi,
        job.alpha,
        job.beta,
        sched.vocab.clone(),
    );
    // The history's estimator (same sweeps and seed): the last record is these figures.
    saved.add_heldout_with(
        &mut run,
        job.test_data.as_deref(),
        job.heldout_sweeps,
        job.seed,
    )?;
    crate::kit::write_saved_model(dir, &saved)?;
    crate::kit::write_run_metrics(dir, &run)
}

/// The one metrics format of an LDA run: a record per pass (log-likelihood per token and
/// the held-out figures of that pass).
pub fn lda_run_metrics(sched: &LdaScheduling, job: &LdaSettings) -> petrel_ml::job::RunMetrics {
    let (lda, heldout) = (sched.metrics(), sched.heldout_trace());
    /// The run's figures and, with `balance = "dynamic"`, how the documents were dealt.
    #[derive(Serialize)]
    struct Details<'a> {
        #[serde(flatten)]
        lda: &'a petrel_ml::topic::LdaMetrics,
        #[serde(skip_serializing_if = "Option::is_none")]
        balance: Option<crate::core::balance::RowDealing>,
    }
    let details = Details {
        lda,
        balance: sched.dealing(),
    };
    let mut m = petrel_ml::job::RunMetrics::new("lda", job, &details, lda.elapsed_s);
    for p in &lda.loglik {
        let mut values = vec![
            ("loglik_per_token", p.loglik_per_token),
            ("tokens_sampled", p.tokens_sampled as f64),
        ];
        if let Some(h) = heldout.get(&p.iteration) {
            values.extend(h.iter().map(|(k, v)| (k.as_str(), *v)));
        }
        m.record(p.iteration as u64, p.elapsed_s, &values);
    }
    m.finals(&[
        ("loglik_per_token", lda.final_loglik_per_token),
        ("tokens_per_s_per_worker", lda.tokens_per_s_per_worker),
    ]);
    m.converged = false;
    m.stop_reason = format!(
        "ran iterations = {} (a Gibbs sampler has no convergence test)",
        lda.iterations
    );
    m
}

impl StradsJob for LdaApp {
    const SECTION: &'static str = "lda";
    const SCHEDULER_ROLE: &'static str = SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = WORKER_ROLE;
    type Config = LdaSettings;
    type Scheduler = LdaScheduling;
    type Worker = RingHalf<LdaApp, LdaWorkerApp>;

    fn scheduler(job: &LdaSettings, shape: &JobShape) -> Result<LdaScheduling, StradsError> {
        let (corpus, read) = petrel_ml::topic::load_corpus_digested(
            job.docword.as_deref(),
            job.vocab.as_deref(),
            &job.synthetic,
        )?;
        let layout = LdaLayout::new(&corpus, shape.workers);
        let mut half = LdaScheduling::new(&corpus, &layout, job, shape.workers)?;
        half.heldout = LdaHeldout::of(job, corpus.vocab_size)?;
        // A file: every value, as each worker's first pass digests it; a synthetic corpus
        // (drawn from the settings): its statistics.
        let digest = read.unwrap_or_else(|| petrel_ml::data::CorpusStats::of(&corpus).digest());
        half.data_digest = Some(digest);
        Ok(half)
    }

    fn worker(
        job: &LdaSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<RingHalf<LdaApp, LdaWorkerApp>, StradsError> {
        // Only this worker's documents: a worker never holds the whole corpus.
        lda_worker(job, index, shape, Some(index))
    }

    /// No documents: the change that admits it deals it its documents.
    fn joiner(
        job: &LdaSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<RingHalf<LdaApp, LdaWorkerApp>, StradsError> {
        lda_worker(job, index, shape, None)
    }

    fn finish(
        job: &LdaSettings,
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
            write_outputs(dir, &scheduler, job)?;
        }
        Ok(())
    }
}

/// Worker `index`'s half holding the documents of worker `share_of`'s share (none for
/// `None`).
fn lda_worker(
    job: &LdaSettings,
    index: usize,
    shape: &JobShape,
    share_of: Option<usize>,
) -> Result<RingHalf<LdaApp, LdaWorkerApp>, StradsError> {
    let share = job.load_share(shape.workers, share_of)?;
    let layout = LdaLayout::of_share(&share, shape.workers);
    let config = job.config(shape.workers);
    let digest = share.read.unwrap_or_else(|| share.stats.digest());
    let worker = LdaWorkerApp::with_docs(index, share.docs, &layout, &config)?
        .with_snapshots(job.test_data.is_some())
        .with_dealing(job.balance == Balance::Dynamic, &layout)
        .with_straggler(Straggler::of(job.straggler, job.straggler_factor, index));
    Ok(RingHalf::new(worker, initial_ring_blocks(index, &layout)).with_data_digest(digest))
}

/// Registers the LDA roles. They take joins and leaves of workers with `balance =
/// "dynamic"`; a worker's death (`on_node_death = "leave"`) loses its word-topic block,
/// so it is refused.
pub fn register(cluster: petrel_actors::Cluster) -> petrel_actors::Cluster {
    crate::kit::register_elastic_ring::<LdaApp>(cluster, supports_membership_changes)
}

/// Whether `job` takes workers that join and leave: with `balance = "dynamic"`, whose
/// dealer deals the documents over the workers of the moment.
pub fn supports_membership_changes(job: &LdaSettings) -> bool {
    job.balance == Balance::Dynamic
}

#[cfg(test)]
mod epoch_tests;
#[cfg(test)]
mod tests;
