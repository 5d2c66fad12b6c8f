//! Topic-model math shared by the STRADS and parameter-server LDA apps: sparse topic
//! counts, the SparseLDA sampler, log-likelihoods, the corpus source and the topic files.

use rand::Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::MlError;

mod corpus;

pub use corpus::{
    CorpusShare, DocumentPartition, LdaMetrics, LoglikPoint, load_corpus, load_corpus_digested,
    load_corpus_share, write_file, write_topic_files,
};

/// Sparse topic-count vector: `(topic, count)` pairs with count > 0, unordered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicCounts {
    /// On the wire as raw little-endian `u32` pairs (a block carries many rows).
    #[serde(with = "pair_bytes")]
    pub entries: Vec<(u32, u32)>,
}

impl TopicCounts {
    /// The count of `topic` (0 if absent).
    pub fn get(&self, topic: u32) -> u32 {
        self.entries
            .iter()
            .find(|e| e.0 == topic)
            .map_or(0, |e| e.1)
    }

    /// Adds one to `topic`.
    pub fn increment(&mut self, topic: u32) {
        match self.entries.iter_mut().find(|e| e.0 == topic) {
            Some(e) => e.1 += 1,
            None => self.entries.push((topic, 1)),
        }
    }

    /// Decrements `topic` (a zero count is left alone); returns whether there was a count.
    pub fn decrement(&mut self, topic: u32) -> bool {
        match self.entries.iter().position(|e| e.0 == topic) {
            Some(pos) => {
                if self.entries[pos].1 <= 1 {
                    self.entries.swap_remove(pos);
                } else {
                    self.entries[pos].1 -= 1;
                }
                true
            }
            None => false,
        }
    }

    /// Sum of the counts (the document's or word's tokens).
    pub fn total(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.1)).sum()
    }
}

/// LDA hyper-parameters (symmetric priors).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaConfig {
    /// Number of topics.
    pub n_topics: usize,
    /// Dirichlet prior of the document-topic distributions.
    pub alpha: f64,
    /// Dirichlet prior of the topic-word distributions.
    pub beta: f64,
    /// Number of workers (the corpus and the vocabulary are split into this many parts).
    pub n_workers: usize,
    /// Full passes over the corpus (each = P sub-rounds).
    pub iterations: usize,
    /// RNG seed.
    pub seed: u64,
}

/// Checks that every document's topic counts match its token assignments.
pub fn check_doc_counts(
    worker: usize,
    doc_topic: &[TopicCounts],
    assignments: &[Vec<u32>],
) -> Result<(), MlError> {
    for (d, (counts, topics)) in doc_topic.iter().zip(assignments).enumerate() {
        if counts.total() != topics.len() as u64 {
            return Err(MlError::DocCountTotal {
                worker,
                doc: d,
                counted: counts.total(),
                tokens: topics.len(),
            });
        }
        let mut recount = TopicCounts::default();
        topics.iter().for_each(|&t| recount.increment(t));
        for &(t, n) in &recount.entries {
            if counts.get(t) != n {
                return Err(MlError::DocTopicCount {
                    worker,
                    doc: d,
                    topic: t,
                    counted: counts.get(t),
                    assigned: n,
                });
            }
        }
    }
    Ok(())
}

/// The SparseLDA sampler state (Yao et al. 2009) of the STRADS and parameter-server workers.
///
/// The full conditional `(alpha + n_dt)(beta + n_wt) / (beta V + n_t)` is split into the
/// smoothing bucket `s = sum_t alpha beta / (beta V + n_t)`, the document bucket
/// `r = sum_{t: n_dt > 0} n_dt beta / (beta V + n_t)` and the word bucket
/// `q = sum_{t: n_wt > 0} n_wt (alpha + n_dt) / (beta V + n_t)`; s and r are kept current
/// incrementally, only q is computed per token. A stale view never gives a negative weight:
/// negative totals count as zero and a zero count is never decremented.
#[derive(Debug, Clone)]
pub struct SparseSampler {
    n_topics: usize,
    alpha: f64,
    beta: f64,
    vocab_size: usize,
    inverse_denominators: Vec<f64>,
    coefficients: Vec<f64>,
    word_bucket: Vec<(u32, f64)>,
    smoothing: f64,
    doc_bucket: f64,
    /// Whether the last `resample` found no count of the old topic in the word row.
    word_clamped: bool,
}

impl SparseSampler {
    /// A sampler for `n_topics` topics over `vocab_size` words with priors `alpha`, `beta`.
    pub fn new(n_topics: usize, vocab_size: usize, alpha: f64, beta: f64) -> Self {
        SparseSampler {
            n_topics,
            alpha,
            beta,
            vocab_size,
            inverse_denominators: vec![0.0; n_topics],
            coefficients: vec![0.0; n_topics],
            word_bucket: Vec::with_capacity(n_topics),
            smoothing: 0.0,
            doc_bucket: 0.0,
            word_clamped: false,
        }
    }

    /// Whether the last [`SparseSampler::resample`] found no count of the old topic in the
    /// word row (a stale view), which was left at zero.
    pub fn last_word_decrement_clamped(&self) -> bool {
        self.word_clamped
    }

    fn inverse_denominator(&self, total: i64) -> f64 {
        let beta_v = self.beta * self.vocab_size as f64;
        1.0 / (beta_v + total.max(0) as f64)
    }

    /// Starts a sweep against `topic_totals` (negative totals count as zero).
    pub fn begin_sweep(&mut self, topic_totals: &[i64]) {
        for t in 0..self.n_topics {
            self.inverse_denominators[t] =
                self.inverse_denominator(topic_totals.get(t).copied().unwrap_or(0));
        }
        let (alpha, beta) = (self.alpha, self.beta);
        self.smoothing = self
            .inverse_denominators
            .iter()
            .map(|inv| alpha * beta * inv)
            .sum();
    }

    /// Per-document setup: coefficients `(alpha + n_dt) / (beta V + n_t)` and bucket r.
    pub fn begin_doc(&mut self, doc: &TopicCounts) {
        let (alpha, beta) = (self.alpha, self.beta);
        for t in 0..self.n_topics {
            self.coefficients[t] = alpha * self.inverse_denominators[t];
        }
        self.doc_bucket = 0.0;
        for &(t, n) in &doc.entries {
            let t = t as usize;
            self.coefficients[t] = (alpha + f64::from(n)) * self.inverse_denominators[t];
            self.doc_bucket += f64::from(n) * beta * self.inverse_denominators[t];
        }
    }

    /// Resamples one token of the current document assigned to `old`: removes it from the
    /// document, word row and totals, draws and adds back a new topic, which it returns.
    pub fn resample(
        &mut self,
        old: u32,
        doc: &mut TopicCounts,
        word_row: &mut TopicCounts,
        topic_totals: &mut [i64],
        rng: &mut impl Rng,
    ) -> u32 {
        self.change_topic_counts(old, doc, word_row, topic_totals, -1);
        let new = self.draw_topic(doc, word_row, rng);
        self.change_topic_counts(new, doc, word_row, topic_totals, 1);
        new
    }

    /// Adds `sign` (+1/-1) to `topic` in the doc, word row and totals, keeping s, r, the
    /// denominators and coefficients current.
    fn change_topic_counts(
        &mut self,
        topic: u32,
        doc: &mut TopicCounts,
        word_row: &mut TopicCounts,
        topic_totals: &mut [i64],
        sign: i64,
    ) {
        let t = topic as usize;
        let (alpha, beta) = (self.alpha, self.beta);
        let n_dt_before = f64::from(doc.get(topic));
        self.smoothing -= alpha * beta * self.inverse_denominators[t];
        self.doc_bucket -= n_dt_before * beta * self.inverse_denominators[t];
        if sign > 0 {
            doc.increment(topic);
            word_row.increment(topic);
        } else {
            doc.decrement(topic);
            self.word_clamped = !word_row.decrement(topic);
        }
        topic_totals[t] += sign;
        self.inverse_denominators[t] = self.inverse_denominator(topic_totals[t]);
        let n_dt_after = f64::from(doc.get(topic));
        self.smoothing += alpha * beta * self.inverse_denominators[t];
        self.doc_bucket += n_dt_after * beta * self.inverse_denominators[t];
        self.coefficients[t] = (alpha + n_dt_after) * self.inverse_denominators[t];
    }

    fn draw_topic(&mut self, doc: &TopicCounts, word_row: &TopicCounts, rng: &mut impl Rng) -> u32 {
        self.word_bucket.clear();
        let mut word_total = 0.0;
        for &(t, n) in &word_row.entries {
            let weight = f64::from(n) * self.coefficients[t as usize];
            word_total += weight;
            self.word_bucket.push((t, weight));
        }
        let (smoothing, doc_bucket) = (self.smoothing, self.doc_bucket);
        let total = smoothing.max(0.0) + doc_bucket.max(0.0) + word_total;
        let mut u = rng.gen_range(0.0..1.0) * total;
        if u < word_total {
            for &(t, weight) in &self.word_bucket {
                if u < weight {
                    return t;
                }
                u -= weight;
            }
            return self.word_bucket.last().map_or(0, |e| e.0);
        }
        u -= word_total;
        let beta = self.beta;
        if u < doc_bucket {
            for &(t, n) in &doc.entries {
                let weight = f64::from(n) * beta * self.inverse_denominators[t as usize];
                if u < weight {
                    return t;
                }
                u -= weight;
            }
            if let Some(&(t, _)) = doc.entries.last() {
                return t;
            }
        }
        u -= doc_bucket.max(0.0);
        let ab = self.alpha * beta;
        for t in 0..self.n_topics {
            let weight = ab * self.inverse_denominators[t];
            if u < weight {
                return t as u32;
            }
            u -= weight;
        }
        (self.n_topics - 1) as u32
    }
}

/// `rows`' share of the word half of the joint log-likelihood.
pub fn word_log_likelihood_part<'a>(
    rows: impl IntoIterator<Item = &'a TopicCounts>,
    beta: f64,
) -> f64 {
    let ln_gamma_beta = ln_gamma(beta);
    rows.into_iter()
        .flat_map(|row| &row.entries)
        .map(|&(_, n)| ln_gamma(f64::from(n) + beta) - ln_gamma_beta)
        .sum()
}

/// `(doc-topic counts, doc length)`s' share of the document half of the joint
/// log-likelihood.
pub fn doc_log_likelihood_part<'a>(
    docs: impl IntoIterator<Item = (&'a TopicCounts, usize)>,
    n_topics: usize,
    alpha: f64,
) -> f64 {
    let k_alpha = n_topics as f64 * alpha;
    let ln_gamma_alpha = ln_gamma(alpha);
    docs.into_iter()
        .map(|(counts, len)| {
            ln_gamma(k_alpha) - ln_gamma(len as f64 + k_alpha)
                + counts
                    .entries
                    .iter()
                    .map(|&(_, n)| ln_gamma(f64::from(n) + alpha) - ln_gamma_alpha)
                    .sum::<f64>()
        })
        .sum()
}

/// Estimated topic-word distributions `(n_wk + beta) / (n_k + V beta)`, `K x V`, from word
/// rows `(word id, counts)` and the topic totals (ids out of range ignored).
pub fn topic_word_matrix<'a>(
    rows: impl IntoIterator<Item = (u32, &'a TopicCounts)>,
    topic_totals: &[i64],
    vocab_size: usize,
    beta: f64,
) -> ndarray::Array2<f64> {
    let mut phi = ndarray::Array2::from_elem((topic_totals.len(), vocab_size), beta);
    for (w, row) in rows {
        for &(t, n) in &row.entries {
            if let Some(x) = phi.get_mut([t as usize, w as usize]) {
                *x += f64::from(n);
            }
        }
    }
    for (mut row, &n) in phi.rows_mut().into_iter().zip(topic_totals) {
        let denominator = n.max(0) as f64 + beta * vocab_size as f64;
        row.mapv_inplace(|x| x / denominator);
    }
    phi
}

/// Lanczos approximation of `ln Gamma(x)` for `x > 0` (|error| < 1e-13 there).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, &c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// Joint `log p(w, z)` from the summed parts and the global topic totals.
pub fn joint_log_likelihood(
    word_parts: f64,
    doc_parts: f64,
    topic_totals: &[i64],
    vocab_size: usize,
    beta: f64,
) -> f64 {
    let beta_v = beta * vocab_size as f64;
    let topic_part: f64 = topic_totals
        .iter()
        .map(|&n| ln_gamma(beta_v) - ln_gamma(n.max(0) as f64 + beta_v))
        .sum();
    word_parts + doc_parts + topic_part
}

/// Assigns each index to one of `n_buckets` buckets, heaviest first to the least-loaded.
pub fn balanced_buckets(loads: &[usize], n_buckets: usize) -> Vec<u32> {
    let n_buckets = n_buckets.max(1);
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by_key(|&i| (Reverse(loads[i]), i));
    let mut heap: BinaryHeap<Reverse<(usize, usize)>> =
        (0..n_buckets).map(|b| Reverse((0, b))).collect();
    let mut bucket_of = vec![0u32; loads.len()];
    for i in order {
        if let Some(Reverse((load, b))) = heap.pop() {
            bucket_of[i] = b as u32;
            heap.push(Reverse((load + loads[i], b)));
        }
    }
    bucket_of
}

/// `(u32, u32)` pairs as little-endian bytes.
mod pair_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(pairs: &[(u32, u32)], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = pairs
            .iter()
            .flat_map(|&(a, b)| a.to_le_bytes().into_iter().chain(b.to_le_bytes()))
            .collect();
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u32, u32)>, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(d)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(format!(
                "topic-count payload of {} bytes is not a multiple of 8",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| {
                (
                    u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect())
    }
}
