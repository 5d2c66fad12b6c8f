// Over 600 lines: the worker core, table view and final check share the exact-count invariant.
//! Data-parallel LDA on the parameter server (YahooLDA / Bösen): the sans-I/O worker core
//! and the table layout.
//!
//! One sparse table (`WORD_TOPIC`): row `w < V` holds the topic counts of word `w` as
//! `(topic, count)` pairs, row `V` ([`totals_row`]) the topic totals. Each worker owns some
//! documents, their assignments and doc-topic counts; per clock it reads its words' rows
//! (possibly stale, within the SSP bound), samples against that view with the SparseLDA
//! sampler shared with STRADS ([`SparseSampler`]) and sends its own count changes as one
//! sparse delta per touched row.
//!
//! Exactness: counts travel as `f32`, and every value held anywhere is an integer of at
//! most the token count `N`, so all sums are exact while `N <= 2^24` ([`MAX_TOKENS`]);
//! larger corpora are refused ([`check_corpus`]).
//!
//! Stale views may lack others' recent changes, so a view count can be too small (or a
//! total negative): the view clamps ([`WordTopicView::from_rows`]) and the sampler never
//! goes below zero, while the deltas sent are the worker's true changes, tracked apart.

use std::ops::Range;

use crate::core::error::PsCoreError;
use crate::core::types::{Row, RowId, TableId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;

use petrel_ml::topic::{
    LdaConfig, SparseSampler, TopicCounts, check_doc_counts, doc_log_likelihood_part,
    joint_log_likelihood, word_log_likelihood_part,
};

/// The word-topic table (rows `0..V`: words, row `V`: topic totals).
pub const WORD_TOPIC: TableId = TableId(0);

/// Largest corpus (in tokens) whose counts stay exact in `f32` rows: `2^24`.
pub const MAX_TOKENS: u64 = 1 << 24;

/// The row holding the topic totals.
pub fn totals_row(vocab_size: usize) -> RowId {
    RowId(vocab_size as u64)
}

/// Refuses corpora too large for exact `f32` counts or with word ids beyond the vocabulary.
pub fn check_corpus<'a>(
    n_tokens: usize,
    vocab_size: usize,
    docs: impl IntoIterator<Item = &'a [u32]>,
) -> Result<(), PsCoreError> {
    if n_tokens as u64 > MAX_TOKENS {
        return Err(PsCoreError::TooManyTokens {
            tokens: n_tokens as u64,
            max: MAX_TOKENS,
        });
    }
    let mut words = docs.into_iter().flatten();
    if let Some(&word) = words.find(|&&w| w as usize >= vocab_size) {
        return Err(PsCoreError::WordOutOfRange { word, vocab_size });
    }
    Ok(())
}

/// A row's own change: `(local word, sorted (topic, delta))`.
type RowChange = (u32, Vec<(u32, i32)>);

/// A worker's view of its words' rows and the topic totals, as read at the start of a clock
/// and updated by its sampling. Its own changes are the difference from the rows as read
/// (plus the decrements a zero count refused, in `corrections`).
#[derive(Debug, Clone, PartialEq)]
pub struct WordTopicView {
    /// Indexed by the worker's local word index.
    pub rows: Vec<TopicCounts>,
    /// Topic totals (row `V`), clamped like the word rows.
    pub totals: Vec<i64>,
    /// Entries that were negative or not integers and were clamped/rounded.
    pub clamped: u64,
    /// Rows and totals as read (entries sorted by topic).
    base_rows: Vec<TopicCounts>,
    base_totals: Vec<i64>,
    /// `(local word, topic)` of every own decrement the view could not show (count was 0).
    corrections: Vec<(u32, u32)>,
}

/// Whether `x` is an exact count (a non-negative integer).
fn is_count(x: f32) -> bool {
    x.is_finite() && x >= 0.0 && x.fract() == 0.0
}

/// `x` as a count; a value that is not one is clamped and rounded (and counted).
fn count_of(x: f32, clamped: &mut u64) -> u32 {
    if is_count(x) {
        return x as u32;
    }
    *clamped += 1;
    if x.is_finite() {
        x.max(0.0).round() as u32
    } else {
        0
    }
}

/// A row's `(topic, value)` pairs: a sparse row's entries, a dense row's non-zero columns.
fn row_pairs(row: &Row) -> Vec<(u32, f32)> {
    let dense = matches!(row, Row::Dense(_));
    row.entries().filter(|e| !dense || e.1 != 0.0).collect()
}

/// [`row_pairs`] of `row`, refusing a topic `>= n_topics` (`r` names the row).
fn topic_pairs(r: u64, row: Option<&Row>, n_topics: usize) -> Result<Vec<(u32, f32)>, PsCoreError> {
    let pairs = row.map(row_pairs).unwrap_or_default();
    match pairs.iter().find(|(t, _)| *t as usize >= n_topics) {
        Some(&(t, _)) => Err(PsCoreError::BadRow {
            row: r,
            reason: format!("topic column {t} >= K = {n_topics}"),
        }),
        None => Ok(pairs),
    }
}

/// The positive counts of `pairs`, clamped as [`count_of`] does.
fn clamped_counts(pairs: impl IntoIterator<Item = (u32, f32)>, clamped: &mut u64) -> TopicCounts {
    let entries = (pairs.into_iter())
        .map(|(t, x)| (t, count_of(x, clamped)))
        .filter(|e| e.1 > 0)
        .collect();
    TopicCounts { entries }
}

/// `counts` as one value per topic.
fn per_topic(counts: &TopicCounts, n_topics: usize) -> Vec<i64> {
    let mut out = vec![0i64; n_topics];
    for &(t, n) in &counts.entries {
        out[t as usize] = i64::from(n);
    }
    out
}

impl WordTopicView {
    /// Builds the view from rows in [`PsLdaWorker::row_ids`] order; negative entries read as
    /// 0 (counted in `clamped`), a topic `>= K` is an error.
    pub fn from_rows(rows: &[Row], n_words: usize, n_topics: usize) -> Result<Self, PsCoreError> {
        if rows.len() != n_words + 1 {
            return Err(PsCoreError::RowCount(rows.len(), n_words));
        }
        let mut clamped = 0;
        let mut read = |i: usize| -> Result<TopicCounts, PsCoreError> {
            let pairs = topic_pairs(i as u64, Some(&rows[i]), n_topics)?;
            Ok(clamped_counts(pairs, &mut clamped))
        };
        let words = (0..n_words).map(&mut read).collect::<Result<Vec<_>, _>>()?;
        let totals = per_topic(&read(n_words)?, n_topics);
        Ok(WordTopicView {
            base_rows: words.clone(),
            base_totals: totals.clone(),
            rows: words,
            totals,
            clamped,
            corrections: Vec::new(),
        })
    }

    /// The own changes since the last base, per changed local word and per topic; the
    /// current state becomes the new base.
    fn take_changes(&mut self) -> (Vec<RowChange>, Vec<i64>) {
        let mut words = Vec::new();
        let mut corrections = std::mem::take(&mut self.corrections);
        corrections.sort_unstable();
        for (l, (row, base)) in self.rows.iter_mut().zip(&mut self.base_rows).enumerate() {
            let l = l as u32;
            row.entries.sort_unstable();
            let own =
                corrections.partition_point(|c| c.0 < l)..corrections.partition_point(|c| c.0 <= l);
            if row.entries == base.entries && own.is_empty() {
                continue;
            }
            // Now minus as read minus the refused decrements, summed per topic.
            let now = row.entries.iter().map(|&(t, n)| (t, n as i32));
            let read = base.entries.iter().map(|&(t, n)| (t, -(n as i32)));
            let refused = corrections[own].iter().map(|&(_, t)| (t, -1));
            let mut diff: Vec<(u32, i32)> = now.chain(read).chain(refused).collect();
            diff.sort_by_key(|e| e.0);
            diff.dedup_by(|next, kept| {
                let same = next.0 == kept.0;
                if same {
                    kept.1 += next.1;
                }
                same
            });
            diff.retain(|e| e.1 != 0);
            base.entries.clone_from(&row.entries);
            if !diff.is_empty() {
                words.push((l, diff));
            }
        }
        let totals = self
            .totals
            .iter()
            .zip(&self.base_totals)
            .map(|(a, b)| a - b)
            .collect();
        self.base_totals.clone_from(&self.totals);
        (words, totals)
    }
}

/// A worker's own count changes since the last flush: per touched local word, per topic.
#[derive(Debug, Clone, Default)]
struct OwnDeltas {
    words: Vec<Vec<(u32, i32)>>,
    touched: Vec<u32>,
    totals: Vec<i64>,
}

impl OwnDeltas {
    fn new(n_words: usize, n_topics: usize) -> Self {
        OwnDeltas {
            words: vec![Vec::new(); n_words],
            touched: Vec::new(),
            totals: vec![0; n_topics],
        }
    }

    fn add(&mut self, local_word: u32, topic: u32, d: i32) {
        let row = &mut self.words[local_word as usize];
        if row.is_empty() {
            self.touched.push(local_word);
        }
        match row.iter_mut().find(|e| e.0 == topic) {
            Some(e) => e.1 += d,
            None => row.push((topic, d)),
        }
        self.totals[topic as usize] += i64::from(d);
    }
}

/// The data-parallel LDA worker: documents, assignments, doc-topic counts, changes to send.
#[derive(Debug, Clone)]
pub struct PsLdaWorker {
    /// The worker id.
    pub worker: usize,
    n_topics: usize,
    vocab_size: usize,
    alpha: f64,
    /// Distinct global word ids of this worker's documents, ascending.
    words: Vec<u32>,
    doc_ids: Vec<u32>,
    /// Tokens as local word indexes (into `words`).
    docs: Vec<Vec<u32>>,
    assignments: Vec<Vec<u32>>,
    doc_topic: Vec<TopicCounts>,
    /// ChaCha12 (the generator of `StdRng`, whose position a checkpoint can save).
    rng: ChaCha12Rng,
    sampler: SparseSampler,
    deltas: OwnDeltas,
}

/// What a checkpoint saves of a [`PsLdaWorker`]: its assignments and its generator's position.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PsLdaWorkerSaved {
    /// The worker.
    pub worker: usize,
    /// Its documents' global ids.
    pub doc_ids: Vec<u32>,
    /// The topic of every token, per document.
    pub assignments: Vec<Vec<u32>>,
    /// Each document's topic counts, in the worker's order (saved: the sums follow it).
    pub doc_topic: Vec<TopicCounts>,
    /// The generator: seed, stream, word position (low, high).
    pub rng: ([u8; 32], u64, (u64, u64)),
}

impl PsLdaWorker {
    /// Takes documents `(global id, word ids)` and draws every token a random topic.
    pub fn new(
        worker: usize,
        docs: Vec<(u32, Vec<u32>)>,
        vocab_size: usize,
        config: &LdaConfig,
    ) -> Result<Self, PsCoreError> {
        let k = config.n_topics;
        if k == 0 || k > u32::MAX as usize || !(config.alpha > 0.0 && config.beta > 0.0) {
            return Err(PsCoreError::InvalidConfig(
                "need n_topics >= 1 and positive alpha, beta".into(),
            ));
        }
        let n_tokens: usize = docs.iter().map(|d| d.1.len()).sum();
        check_corpus(n_tokens, vocab_size, docs.iter().map(|d| d.1.as_slice()))?;
        let mut words: Vec<u32> = docs.iter().flat_map(|d| d.1.iter().copied()).collect();
        words.sort_unstable();
        words.dedup();
        let mut local = vec![u32::MAX; vocab_size];
        for (i, &w) in words.iter().enumerate() {
            local[w as usize] = i as u32;
        }
        let mut rng = ChaCha12Rng::seed_from_u64(
            config.seed ^ (worker as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F),
        );
        let mut deltas = OwnDeltas::new(words.len(), k);
        let (mut doc_ids, mut local_docs, mut assignments, mut doc_topic) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (id, ws) in docs {
            let mut counts = TopicCounts::default();
            let mut topics = Vec::with_capacity(ws.len());
            let mut ls = Vec::with_capacity(ws.len());
            for w in ws {
                let l = local[w as usize];
                let t = rng.gen_range(0..k as u32);
                counts.increment(t);
                deltas.add(l, t, 1);
                topics.push(t);
                ls.push(l);
            }
            doc_ids.push(id);
            local_docs.push(ls);
            assignments.push(topics);
            doc_topic.push(counts);
        }
        Ok(PsLdaWorker {
            worker,
            n_topics: k,
            vocab_size,
            alpha: config.alpha,
            words,
            doc_ids,
            docs: local_docs,
            assignments,
            doc_topic,
            rng,
            sampler: SparseSampler::new(k, vocab_size, config.alpha, config.beta),
            deltas,
        })
    }

    /// The state a checkpoint saves, between clocks (no count change may be pending).
    pub fn export_state(&self) -> Result<PsLdaWorkerSaved, PsCoreError> {
        if !self.deltas.touched.is_empty() || self.deltas.totals.iter().any(|&d| d != 0) {
            return Err(PsCoreError::InvalidConfig(
                "a worker with count changes not yet sent cannot be checkpointed".into(),
            ));
        }
        let pos = self.rng.get_word_pos();
        Ok(PsLdaWorkerSaved {
            worker: self.worker,
            doc_ids: self.doc_ids.clone(),
            assignments: self.assignments.clone(),
            doc_topic: self.doc_topic.clone(),
            rng: (
                self.rng.get_seed(),
                self.rng.get_stream(),
                (pos as u64, (pos >> 64) as u64),
            ),
        })
    }

    /// Continues from this worker's checkpointed state (refusing another worker's or one
    /// that does not fit its documents); the initial counts are not sent again.
    pub fn import_state(&mut self, saved: PsLdaWorkerSaved) -> Result<(), PsCoreError> {
        let k = self.n_topics;
        let fits = saved.worker == self.worker
            && saved.doc_ids == self.doc_ids
            && saved.assignments.len() == self.docs.len()
            && saved
                .assignments
                .iter()
                .zip(&self.docs)
                .all(|(a, d)| a.len() == d.len() && a.iter().all(|&t| (t as usize) < k));
        if !fits {
            return Err(PsCoreError::InvalidConfig(format!(
                "checkpoint of ps-lda worker {} ({} documents) does not fit worker {} ({} documents, {k} topics)",
                saved.worker,
                saved.doc_ids.len(),
                self.worker,
                self.doc_ids.len(),
            )));
        }
        if saved.doc_topic.len() != saved.assignments.len() {
            return Err(PsCoreError::InvalidConfig(
                "checkpoint of a ps-lda worker: doc-topic counts do not fit the documents".into(),
            ));
        }
        check_doc_counts(self.worker, &saved.doc_topic, &saved.assignments)
            .map_err(|e| PsCoreError::DocCounts(format!("checkpoint: {e}")))?;
        self.doc_topic = saved.doc_topic;
        self.assignments = saved.assignments;
        let (seed, stream, (low, high)) = saved.rng;
        let mut rng = ChaCha12Rng::from_seed(seed);
        rng.set_stream(stream);
        rng.set_word_pos(u128::from(low) | (u128::from(high) << 64));
        self.rng = rng;
        self.deltas = OwnDeltas::new(self.words.len(), k);
        Ok(())
    }

    /// The rows a clock reads: the worker's words, then the totals row.
    pub fn row_ids(&self) -> Vec<RowId> {
        self.words
            .iter()
            .map(|&w| RowId(u64::from(w)))
            .chain(std::iter::once(totals_row(self.vocab_size)))
            .collect()
    }

    /// The view of the rows read in the order of [`PsLdaWorker::row_ids`].
    pub fn view(&self, rows: &[Row]) -> Result<WordTopicView, PsCoreError> {
        WordTopicView::from_rows(rows, self.words.len(), self.n_topics)
    }

    /// Documents `range` split into consecutive chunks of about `tokens` tokens each.
    pub fn doc_chunks(&self, range: Range<usize>, tokens: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let (mut start, mut acc) = (range.start, 0usize);
        for d in range.clone() {
            acc += self.docs[d].len();
            if acc >= tokens.max(1) {
                out.push(start..d + 1);
                start = d + 1;
                acc = 0;
            }
        }
        if start < range.end {
            out.push(start..range.end);
        }
        out
    }

    /// The documents of part `part` of `parts` equal slices (a clock's share of a sweep).
    pub fn part(&self, part: usize, parts: usize) -> Range<usize> {
        let n = self.docs.len();
        let parts = parts.max(1);
        (n * part / parts)..(n * (part + 1) / parts).min(n)
    }

    /// Resamples every token of `docs` against `view` (SparseLDA), updating it as it goes;
    /// returns the tokens sampled.
    pub fn sweep(&mut self, docs: Range<usize>, view: &mut WordTopicView) -> u64 {
        let mut sampled = 0u64;
        self.sampler.begin_sweep(&view.totals);
        for d in docs {
            let Some(words) = self.docs.get(d) else {
                break;
            };
            self.sampler.begin_doc(&self.doc_topic[d]);
            for (pos, &l) in words.iter().enumerate() {
                let old = self.assignments[d][pos];
                let new = self.sampler.resample(
                    old,
                    &mut self.doc_topic[d],
                    &mut view.rows[l as usize],
                    &mut view.totals,
                    &mut self.rng,
                );
                if self.sampler.last_word_decrement_clamped() {
                    view.corrections.push((l, old));
                }
                self.assignments[d][pos] = new;
            }
            sampled += words.len() as u64;
        }
        sampled
    }

    /// This worker's count changes in `view` since the last call (and initial counts not yet
    /// taken), as one sparse delta per changed row.
    pub fn take_deltas(&mut self, view: &mut WordTopicView) -> Vec<(RowId, Row)> {
        let (words, totals) = view.take_changes();
        let mut from_words = vec![0i64; self.n_topics];
        for (l, diff) in words {
            for (t, d) in diff {
                self.deltas.add(l, t, d);
                from_words[t as usize] += i64::from(d);
            }
        }
        // The totals' change is the column sums of the word rows' change.
        debug_assert_eq!(from_words, totals, "view totals drifted from the word rows");
        self.take_initial_deltas()
    }

    /// Hands over (and resets) the counts of the initial assignments.
    pub fn take_initial_deltas(&mut self) -> Vec<(RowId, Row)> {
        let mut out = Vec::with_capacity(self.deltas.touched.len() + 1);
        let mut touched = std::mem::take(&mut self.deltas.touched);
        touched.sort_unstable();
        for l in touched {
            let mut entries = std::mem::take(&mut self.deltas.words[l as usize]);
            entries.retain(|e| e.1 != 0);
            if entries.is_empty() {
                continue;
            }
            entries.sort_unstable_by_key(|e| e.0);
            let row = Row::Sparse(entries.into_iter().map(|(t, d)| (t, d as f32)).collect());
            out.push((RowId(u64::from(self.words[l as usize])), row));
        }
        let totals: Vec<(u32, f32)> = self
            .deltas
            .totals
            .iter_mut()
            .enumerate()
            .filter(|(_, d)| **d != 0)
            .map(|(t, d)| (t as u32, std::mem::take(d) as f32))
            .collect();
        if !totals.is_empty() {
            out.push((totals_row(self.vocab_size), Row::Sparse(totals)));
        }
        out
    }

    /// The document half of the joint log-likelihood for this worker's documents.
    pub fn doc_log_likelihood(&self) -> f64 {
        doc_log_likelihood_part(
            self.doc_topic.iter().zip(self.docs.iter().map(Vec::len)),
            self.n_topics,
            self.alpha,
        )
    }

    /// Checks that the doc-topic counts match the assignments.
    pub fn check_doc_counts(&self) -> Result<(), PsCoreError> {
        check_doc_counts(self.worker, &self.doc_topic, &self.assignments)
            .map_err(|e| PsCoreError::DocCounts(e.to_string()))
    }
}

/// The final word-topic table, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalTable {
    /// Row `w` = counts of word `w` (topic order).
    pub word_topic: Vec<TopicCounts>,
    /// Topic totals (row `V`).
    pub topic_totals: Vec<i64>,
}

impl FinalTable {
    /// Checks the table (`row(w)` for `w` in `0..=V`, `None` = zeros) and converts it: entries
    /// are non-negative integers with topics `< K`, word rows sum to the word frequencies and
    /// the totals row is the column sums.
    pub fn check<'a>(
        row: impl Fn(u64) -> Option<&'a Row>,
        word_frequencies: &[usize],
        n_topics: usize,
    ) -> Result<FinalTable, PsCoreError> {
        let v = word_frequencies.len();
        let read = |r: u64| -> Result<TopicCounts, PsCoreError> {
            let pairs = topic_pairs(r, row(r), n_topics)?;
            if let Some((t, x)) = pairs.iter().find(|p| !is_count(p.1)) {
                return Err(PsCoreError::BadRow {
                    row: r,
                    reason: format!("topic {t}: count {x} is not a non-negative integer"),
                });
            }
            Ok(clamped_counts(pairs, &mut 0))
        };
        let mut column_sums = vec![0i64; n_topics];
        let mut word_topic = Vec::with_capacity(v);
        for (w, &freq) in word_frequencies.iter().enumerate() {
            let counts = read(w as u64)?;
            if counts.total() != freq as u64 {
                return Err(PsCoreError::WordSum {
                    word: w,
                    sum: counts.total(),
                    frequency: freq,
                });
            }
            for &(t, n) in &counts.entries {
                column_sums[t as usize] += i64::from(n);
            }
            word_topic.push(counts);
        }
        let topic_totals = per_topic(&read(v as u64)?, n_topics);
        if topic_totals != column_sums {
            return Err(PsCoreError::Totals {
                totals: topic_totals,
                column_sums,
            });
        }
        let n_tokens: usize = word_frequencies.iter().sum();
        let sum: i64 = topic_totals.iter().sum();
        if sum != n_tokens as i64 {
            return Err(PsCoreError::TableSum {
                sum,
                tokens: n_tokens,
            });
        }
        Ok(FinalTable {
            word_topic,
            topic_totals,
        })
    }

    /// The word half plus the topic half of the joint log-likelihood.
    pub fn word_log_likelihood(&self, beta: f64) -> f64 {
        joint_log_likelihood(
            word_log_likelihood_part(&self.word_topic, beta),
            0.0,
            &self.topic_totals,
            self.word_topic.len(),
            beta,
        )
    }

    /// `(n_wk + beta) / (n_k + V beta)`, `K x V`.
    pub fn topic_word(&self, beta: f64) -> ndarray::Array2<f64> {
        petrel_ml::topic::topic_word_matrix(
            (0u32..).zip(&self.word_topic),
            &self.topic_totals,
            self.word_topic.len(),
            beta,
        )
    }
}

/// Word and topic halves of the log-likelihood from a snapshot taken while workers run (not
/// exact: entries are clamped like a view, topics `>= K` ignored).
pub fn snapshot_word_log_likelihood<'a>(
    row: impl Fn(u64) -> Option<&'a Row>,
    vocab_size: usize,
    n_topics: usize,
    beta: f64,
) -> f64 {
    let mut clamped = 0;
    let mut counts = |r: u64| -> TopicCounts {
        let pairs = row(r).map(row_pairs).unwrap_or_default().into_iter();
        clamped_counts(
            pairs.filter(|(t, _)| (*t as usize) < n_topics),
            &mut clamped,
        )
    };
    let words: Vec<TopicCounts> = (0..vocab_size as u64).map(&mut counts).collect();
    let totals = per_topic(&counts(vocab_size as u64), n_topics);
    joint_log_likelihood(
        word_log_likelihood_part(&words, beta),
        0.0,
        &totals,
        vocab_size,
        beta,
    )
}

mod moves;
pub use moves::{Retaken, share_of};

#[cfg(test)]
mod tests;
