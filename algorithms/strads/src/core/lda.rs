//! LDA by collapsed Gibbs sampling with STRADS word rotation.
//!
//! Documents are split over P workers (balanced by token count); each worker owns the topic
//! assignments and doc-topic counts of its documents. The vocabulary is split into P blocks
//! (balanced by word frequency); a [`WordTopicBlock`] carries the word-topic count rows of
//! its words and travels around the ring ([`RotationSchedule`]), so a worker samples only
//! the tokens whose word is in the block it holds and no two workers write the same row.
//! Only the K topic totals are shared: each worker samples against its own copy and the
//! [`TopicTotalsDelta`]s are summed and re-broadcast after every sub-round (so they are
//! slightly stale within a sub-round, as in the reference).
//!
//! The sampler is SparseLDA (Yao et al. 2009): the full conditional
//! `(alpha + n_dt)(beta + n_wt) / (beta V + n_t)` is split into the smoothing bucket
//! `s = sum_t alpha beta / (beta V + n_t)`, the document bucket
//! `r = sum_{t: n_dt > 0} n_dt beta / (beta V + n_t)` and the word bucket
//! `q = sum_{t: n_wt > 0} n_wt (alpha + n_dt) / (beta V + n_t)`; only q is computed per
//! token, over the word's non-zero topics. The decomposition is exact.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::StradsModelError;
use super::mf::RotationSchedule;
use petrel_ml::data::Corpus;
use petrel_ml::topic::{
    LdaConfig, SparseSampler, TopicCounts, balanced_buckets, check_doc_counts,
    doc_log_likelihood_part, joint_log_likelihood, topic_word_matrix, word_log_likelihood_part,
};

/// Word-topic rows of one vocabulary block: the unit that rotates between workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WordTopicBlock {
    /// The block's index.
    pub block: usize,
    /// Global word ids; `rows[i]` belongs to `word_ids[i]`.
    pub word_ids: Vec<u32>,
    /// Topic counts per word of the block.
    pub rows: Vec<TopicCounts>,
}

impl WordTopicBlock {
    /// Sorts every row's entries by topic: the sampler walks entries in order, so a block
    /// built in a different order (e.g. by a rotation) samples identically once both are
    /// canonical.
    pub fn canonicalize(&mut self) {
        for row in &mut self.rows {
            row.entries.sort_unstable();
        }
    }

    /// `sum over non-zero (w, k) of lnGamma(n_wk + beta) - lnGamma(beta)`: this block's
    /// share of the word half of the joint log-likelihood.
    pub fn log_likelihood_part(&self, beta: f64) -> f64 {
        word_log_likelihood_part(&self.rows, beta)
    }
}

/// A worker's change of the topic totals since the last synchronisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicTotalsDelta {
    /// The worker.
    pub worker: usize,
    /// Change per topic since the last sync.
    pub deltas: Vec<i64>,
}

/// Which block and row every word lives in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VocabularyPartition {
    /// Block of each word.
    pub word_block: Vec<u32>,
    /// Index of each word within its block.
    pub word_local: Vec<u32>,
    /// Words of each block.
    pub block_words: Vec<Vec<u32>>,
}

impl VocabularyPartition {
    /// Blocks balanced by token count (heaviest words first to the lightest block).
    pub fn balanced(word_frequencies: &[usize], n_blocks: usize) -> Self {
        let n_blocks = n_blocks.max(1);
        let word_block = balanced_buckets(word_frequencies, n_blocks);
        let mut block_words = vec![Vec::new(); n_blocks];
        let mut word_local = vec![0u32; word_block.len()];
        for (w, &b) in word_block.iter().enumerate() {
            word_local[w] = block_words[b as usize].len() as u32;
            block_words[b as usize].push(w as u32);
        }
        VocabularyPartition {
            word_block,
            word_local,
            block_words,
        }
    }

    /// Empty word-topic blocks for this partition.
    pub fn empty_blocks(&self) -> Vec<WordTopicBlock> {
        self.block_words
            .iter()
            .enumerate()
            .map(|(b, words)| WordTopicBlock {
                block: b,
                word_ids: words.clone(),
                rows: vec![TopicCounts::default(); words.len()],
            })
            .collect()
    }
}

/// A document moving between workers on a re-deal: its words and their topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovedDoc {
    /// Global id.
    pub id: u32,
    /// Word ids.
    pub words: Vec<u32>,
    /// Topic of every word.
    pub topics: Vec<u32>,
}

/// Refuses a word id outside the vocabulary.
fn check_words(words: &[u32], vocab_size: usize) -> Result<(), StradsModelError> {
    match words.iter().find(|&&w| w as usize >= vocab_size) {
        Some(w) => Err(StradsModelError::DimensionMismatch(format!(
            "word {w} >= vocab size {vocab_size}"
        ))),
        None => Ok(()),
    }
}

/// One worker: its documents, their topic assignments and doc-topic counts, the tokens of
/// each vocabulary block, and its view of the topic totals.
#[derive(Debug, Clone)]
pub struct LdaWorker {
    /// The worker's index.
    pub worker: usize,
    n_topics: usize,
    alpha: f64,
    /// Global ids of the documents held.
    doc_ids: Vec<u32>,
    docs: Vec<Vec<u32>>,
    assignments: Vec<Vec<u32>>,
    doc_topic: Vec<TopicCounts>,
    /// Per vocabulary block: `(local doc, token position)` sorted by doc.
    tokens_by_block: Vec<Vec<(u32, u32)>>,
    topic_totals: Vec<i64>,
    totals_delta: Vec<i64>,
    /// ChaCha12, the generator rand 0.8's `StdRng` is, used by name so a checkpoint can
    /// save its exact position.
    rng: ChaCha12Rng,
    sampler: SparseSampler,
}

/// The mutable part of an [`LdaWorker`]: what a checkpoint saves (the documents and the
/// token index come from the data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaWorkerState {
    /// The worker's index.
    pub worker: usize,
    /// Global ids of its documents (to check the checkpoint fits).
    pub doc_ids: Vec<u32>,
    /// Topic of every token.
    pub assignments: Vec<Vec<u32>>,
    /// Topic counts of every document.
    pub doc_topic: Vec<TopicCounts>,
    /// The worker's view of the topic totals.
    pub topic_totals: Vec<i64>,
    /// Changes since the last synchronisation.
    pub totals_delta: Vec<i64>,
    /// The sampler's generator: seed, stream and word position (low, high 64 bits).
    pub rng: ([u8; 32], u64, (u64, u64)),
}

impl LdaWorker {
    /// Takes documents `(global id, tokens)` and assigns every token a uniformly random
    /// topic. Word ids must be `< vocab_size`.
    pub fn new(
        worker: usize,
        docs: Vec<(u32, Vec<u32>)>,
        vocabulary: &VocabularyPartition,
        config: &LdaConfig,
    ) -> Result<Self, StradsModelError> {
        let k = config.n_topics;
        if k == 0 || !(config.alpha > 0.0 && config.beta > 0.0) {
            return Err(StradsModelError::InvalidConfig(
                "need n_topics >= 1 and positive alpha, beta".into(),
            ));
        }
        let vocab_size = vocabulary.word_block.len();
        let mut rng =
            ChaCha12Rng::seed_from_u64(config.seed ^ (worker as u64).wrapping_mul(0x9E37_79B9));
        let mut doc_ids = Vec::with_capacity(docs.len());
        let mut assignments = Vec::with_capacity(docs.len());
        let mut doc_topic = Vec::with_capacity(docs.len());
        let mut topic_totals = vec![0i64; k];
        let mut words_of_docs = Vec::with_capacity(docs.len());
        for (id, words) in docs {
            check_words(&words, vocab_size)?;
            let mut counts = TopicCounts::default();
            let mut topics = Vec::with_capacity(words.len());
            for _ in &words {
                let topic = rng.gen_range(0..k as u32);
                counts.increment(topic);
                topic_totals[topic as usize] += 1;
                topics.push(topic);
            }
            doc_ids.push(id);
            words_of_docs.push(words);
            assignments.push(topics);
            doc_topic.push(counts);
        }
        let mut lda = LdaWorker {
            worker,
            n_topics: k,
            alpha: config.alpha,
            doc_ids,
            docs: words_of_docs,
            assignments,
            doc_topic,
            tokens_by_block: Vec::new(),
            totals_delta: vec![0; k],
            topic_totals,
            rng,
            sampler: SparseSampler::new(k, vocab_size, config.alpha, config.beta),
        };
        lda.reindex(vocabulary);
        Ok(lda)
    }

    /// Rebuilds the per-block token index of the documents held.
    fn reindex(&mut self, vocabulary: &VocabularyPartition) {
        let mut tokens_by_block = vec![Vec::new(); vocabulary.block_words.len()];
        for (local_doc, words) in self.docs.iter().enumerate() {
            for (pos, &w) in words.iter().enumerate() {
                let block = vocabulary.word_block[w as usize] as usize;
                tokens_by_block[block].push((local_doc as u32, pos as u32));
            }
        }
        self.tokens_by_block = tokens_by_block;
    }

    /// Global ids of the documents held.
    pub fn doc_ids(&self) -> &[u32] {
        &self.doc_ids
    }

    /// Tokens of the documents held whose word is in vocabulary block `block`.
    pub fn tokens_in_block(&self, block: usize) -> u64 {
        self.tokens_by_block
            .get(block)
            .map_or(0, |t| t.len() as u64)
    }

    /// Gives up every document `keep` refuses, with its words and topic assignments (a
    /// re-deal moves them to another worker; the word-topic counts and topic totals stay
    /// as they are, since the tokens keep their topics).
    pub fn release(
        &mut self,
        keep: impl Fn(u32) -> bool,
        vocabulary: &VocabularyPartition,
    ) -> Vec<MovedDoc> {
        let mut moved = Vec::new();
        let held = std::mem::take(&mut self.doc_ids).into_iter();
        let docs = std::mem::take(&mut self.docs).into_iter();
        let topics = std::mem::take(&mut self.assignments).into_iter();
        let counts = std::mem::take(&mut self.doc_topic).into_iter();
        for (((id, words), topics), counts) in held.zip(docs).zip(topics).zip(counts) {
            if keep(id) {
                self.doc_ids.push(id);
                self.docs.push(words);
                self.assignments.push(topics);
                self.doc_topic.push(counts);
            } else {
                moved.push(MovedDoc { id, words, topics });
            }
        }
        self.reindex(vocabulary);
        moved
    }

    /// Takes documents another worker released, their topic assignments as they were.
    pub fn adopt(
        &mut self,
        moved: Vec<MovedDoc>,
        vocabulary: &VocabularyPartition,
    ) -> Result<(), StradsModelError> {
        for doc in &moved {
            check_words(&doc.words, vocabulary.word_block.len())?;
            if doc.topics.len() != doc.words.len()
                || doc.topics.iter().any(|&t| t as usize >= self.n_topics)
            {
                return Err(StradsModelError::protocol(format!(
                    "moved document {}: {} topics for {} words ({} topics)",
                    doc.id,
                    doc.topics.len(),
                    doc.words.len(),
                    self.n_topics
                )));
            }
        }
        for doc in moved {
            let mut counts = TopicCounts::default();
            doc.topics.iter().for_each(|&t| counts.increment(t));
            self.doc_ids.push(doc.id);
            self.docs.push(doc.words);
            self.assignments.push(doc.topics);
            self.doc_topic.push(counts);
        }
        self.reindex(vocabulary);
        Ok(())
    }

    /// The state a checkpoint saves.
    pub fn export_state(&self) -> LdaWorkerState {
        let pos = self.rng.get_word_pos();
        LdaWorkerState {
            worker: self.worker,
            doc_ids: self.doc_ids.clone(),
            assignments: self.assignments.clone(),
            doc_topic: self.doc_topic.clone(),
            topic_totals: self.topic_totals.clone(),
            totals_delta: self.totals_delta.clone(),
            rng: (
                self.rng.get_seed(),
                self.rng.get_stream(),
                (pos as u64, (pos >> 64) as u64),
            ),
        }
    }

    /// Continues from a checkpointed state of this worker; refuses another worker, other
    /// documents, or assignments that do not match the documents' lengths or topics.
    pub fn import_state(&mut self, state: LdaWorkerState) -> Result<(), StradsModelError> {
        let fits = state.worker == self.worker
            && state.doc_ids == self.doc_ids
            && state.doc_topic.len() == self.docs.len()
            && state.topic_totals.len() == self.n_topics
            && state.totals_delta.len() == self.n_topics
            && state.assignments.len() == self.docs.len()
            && state.assignments.iter().zip(&self.docs).all(|(a, d)| {
                a.len() == d.len() && a.iter().all(|&t| (t as usize) < self.n_topics)
            });
        if !fits {
            return Err(StradsModelError::DimensionMismatch(format!(
                "checkpoint of LDA worker {} ({} documents) does not fit worker {} ({} documents, {} topics)",
                state.worker,
                state.doc_ids.len(),
                self.worker,
                self.doc_ids.len(),
                self.n_topics
            )));
        }
        check_doc_counts(self.worker, &state.doc_topic, &state.assignments)
            .map_err(|e| StradsModelError::Invariant(format!("checkpoint: {e}")))?;
        let (seed, stream, (low, high)) = state.rng;
        let mut rng = ChaCha12Rng::from_seed(seed);
        rng.set_stream(stream);
        rng.set_word_pos(u128::from(low) | (u128::from(high) << 64));
        self.assignments = state.assignments;
        self.doc_topic = state.doc_topic;
        self.topic_totals = state.topic_totals;
        self.totals_delta = state.totals_delta;
        self.rng = rng;
        Ok(())
    }

    /// Counts of this worker's own tokens per topic (for the initial global totals).
    pub fn own_topic_counts(&self) -> Vec<i64> {
        let mut counts = vec![0i64; self.n_topics];
        for doc in &self.doc_topic {
            for &(t, n) in &doc.entries {
                counts[t as usize] += i64::from(n);
            }
        }
        counts
    }

    /// Adds this worker's initial assignments of the block's words into the block (used
    /// once, in an initialisation rotation).
    pub fn add_initial_counts(&self, block: &mut WordTopicBlock, vocabulary: &VocabularyPartition) {
        for &(d, pos) in &self.tokens_by_block[block.block] {
            let (d, pos) = (d as usize, pos as usize);
            let word = self.docs[d][pos] as usize;
            let local = vocabulary.word_local[word] as usize;
            block.rows[local].increment(self.assignments[d][pos]);
        }
    }

    /// Replaces the topic-totals view with the re-broadcast global totals.
    pub fn set_topic_totals(&mut self, totals: &[i64]) {
        self.topic_totals.copy_from_slice(totals);
    }

    /// Hands over (and resets) the changes since the last synchronisation.
    pub fn take_totals_delta(&mut self) -> TopicTotalsDelta {
        let deltas = std::mem::replace(&mut self.totals_delta, vec![0; self.n_topics]);
        TopicTotalsDelta {
            worker: self.worker,
            deltas,
        }
    }

    /// Resamples every token of this worker whose word is in `block` (SparseLDA).
    /// `word_local` maps global word ids to rows of the block.
    pub fn sample_block(&mut self, block: &mut WordTopicBlock, vocabulary: &VocabularyPartition) {
        self.sampler.begin_sweep(&self.topic_totals);
        let tokens = std::mem::take(&mut self.tokens_by_block[block.block]);
        let mut index = 0;
        while index < tokens.len() {
            let doc = tokens[index].0 as usize;
            self.sampler.begin_doc(&self.doc_topic[doc]);
            while index < tokens.len() && tokens[index].0 as usize == doc {
                let pos = tokens[index].1 as usize;
                index += 1;
                let word = self.docs[doc][pos] as usize;
                let row = vocabulary.word_local[word] as usize;
                let old = self.assignments[doc][pos];
                let new = self.sampler.resample(
                    old,
                    &mut self.doc_topic[doc],
                    &mut block.rows[row],
                    &mut self.topic_totals,
                    &mut self.rng,
                );
                self.totals_delta[old as usize] -= 1;
                self.totals_delta[new as usize] += 1;
                self.assignments[doc][pos] = new;
            }
        }
        self.tokens_by_block[block.block] = tokens;
    }

    /// `sum_d [lnGamma(K alpha) - lnGamma(n_d + K alpha) + sum_{k: n_dk > 0}
    /// (lnGamma(n_dk + alpha) - lnGamma(alpha))]`: this worker's share of the document half.
    pub fn log_likelihood_part(&self) -> f64 {
        doc_log_likelihood_part(
            self.doc_topic.iter().zip(self.docs.iter().map(Vec::len)),
            self.n_topics,
            self.alpha,
        )
    }

    /// Checks that every document's topic counts match its assignments.
    pub fn check_doc_counts(&self) -> Result<(), StradsModelError> {
        check_doc_counts(self.worker, &self.doc_topic, &self.assignments)
            .map_err(|e| StradsModelError::Invariant(e.to_string()))
    }
}

/// A whole LDA job in one process.
pub struct LdaCluster {
    /// The sampler's parameters.
    pub config: LdaConfig,
    /// The rotation.
    pub schedule: RotationSchedule,
    /// Words by block.
    pub vocabulary: VocabularyPartition,
    /// The workers.
    pub workers: Vec<LdaWorker>,
    /// The word-topic blocks.
    pub blocks: Vec<WordTopicBlock>,
    /// Topic totals `n_k`.
    pub topic_totals: Vec<i64>,
    n_tokens: usize,
}

impl LdaCluster {
    /// Splits documents over workers (balanced by length) and words into blocks (balanced by
    /// frequency), draws initial assignments and builds the count tables.
    pub fn new(corpus: &Corpus, config: &LdaConfig) -> Result<Self, StradsModelError> {
        let p = config.n_workers.max(1);
        if corpus
            .docs
            .iter()
            .flatten()
            .any(|&w| w as usize >= corpus.vocab_size)
        {
            return Err(StradsModelError::DimensionMismatch(
                "word id >= vocab_size".into(),
            ));
        }
        let vocabulary = VocabularyPartition::balanced(&corpus.word_frequencies(), p);
        let lengths: Vec<usize> = corpus.docs.iter().map(Vec::len).collect();
        let doc_worker = balanced_buckets(&lengths, p);
        let mut per_worker: Vec<Vec<(u32, Vec<u32>)>> = vec![Vec::new(); p];
        for (d, doc) in corpus.docs.iter().enumerate() {
            per_worker[doc_worker[d] as usize].push((d as u32, doc.clone()));
        }
        let workers = per_worker
            .into_iter()
            .enumerate()
            .map(|(w, docs)| LdaWorker::new(w, docs, &vocabulary, config))
            .collect::<Result<Vec<_>, _>>()?;
        let mut blocks = vocabulary.empty_blocks();
        for worker in &workers {
            for block in &mut blocks {
                worker.add_initial_counts(block, &vocabulary);
            }
        }
        blocks.iter_mut().for_each(WordTopicBlock::canonicalize);
        let mut topic_totals = vec![0i64; config.n_topics];
        for worker in &workers {
            for (t, n) in topic_totals.iter_mut().zip(worker.own_topic_counts()) {
                *t += n;
            }
        }
        let mut cluster = LdaCluster {
            config: config.clone(),
            schedule: RotationSchedule { p },
            vocabulary,
            workers,
            blocks,
            topic_totals,
            n_tokens: corpus.n_tokens(),
        };
        cluster.broadcast_totals();
        Ok(cluster)
    }

    fn broadcast_totals(&mut self) {
        for worker in &mut self.workers {
            worker.set_topic_totals(&self.topic_totals);
        }
    }

    /// One sub-round: every worker samples the block it holds, then topic totals are summed
    /// and re-broadcast.
    pub fn sub_round(&mut self, subround: usize) {
        for w in 0..self.schedule.p {
            let b = self.schedule.block_held(w, subround);
            self.workers[w].sample_block(&mut self.blocks[b], &self.vocabulary);
        }
        for w in 0..self.schedule.p {
            let delta = self.workers[w].take_totals_delta();
            for (t, d) in self.topic_totals.iter_mut().zip(delta.deltas) {
                *t += d;
            }
        }
        self.broadcast_totals();
    }

    /// One pass over every token (P sub-rounds).
    pub fn iteration(&mut self) {
        for t in 0..self.schedule.p {
            self.sub_round(t);
        }
    }

    /// Joint log-likelihood divided by the number of tokens.
    pub fn log_likelihood_per_token(&self) -> f64 {
        let beta = self.config.beta;
        let word: f64 = self
            .blocks
            .iter()
            .map(|b| b.log_likelihood_part(beta))
            .sum();
        let doc: f64 = self
            .workers
            .iter()
            .map(LdaWorker::log_likelihood_part)
            .sum();
        let ll = joint_log_likelihood(
            word,
            doc,
            &self.topic_totals,
            self.vocabulary.word_block.len(),
            beta,
        );
        ll / self.n_tokens.max(1) as f64
    }

    /// Estimated topic-word distributions `(n_wk + beta) / (n_k + V beta)`, `K x V`.
    pub fn topic_word_distributions(&self) -> ndarray::Array2<f64> {
        topic_word_matrix(
            self.blocks
                .iter()
                .flat_map(|b| b.word_ids.iter().copied().zip(&b.rows)),
            &self.topic_totals,
            self.vocabulary.word_block.len(),
            self.config.beta,
        )
    }
}

mod epoch;
pub use epoch::{rows_by_word, split_rows};

#[cfg(test)]
mod tests;
