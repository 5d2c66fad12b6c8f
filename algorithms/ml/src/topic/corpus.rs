//! The LDA apps' inputs and outputs: the corpus source (a file or a synthetic [`LdaCorpusParams`]), the
//! document partition, `metrics.json` ([`LdaMetrics`]) and the topic files.

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::balanced_buckets;
use crate::data::synthetic::{LdaCorpusParams, lda_corpus};
use crate::data::{Corpus, DataError};

/// One point of the log-likelihood trace (after a full pass over the corpus).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoglikPoint {
    /// Passes over the corpus so far.
    pub iteration: usize,
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// Tokens sampled so far.
    pub tokens_sampled: u64,
    /// Joint log-likelihood divided by the number of tokens.
    pub loglik_per_token: f64,
}

/// `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LdaMetrics {
    /// Number of documents.
    pub n_docs: usize,
    /// Number of distinct words.
    pub vocab_size: usize,
    /// Tokens in the corpus.
    pub n_tokens: usize,
    /// Number of topics.
    pub n_topics: usize,
    /// Worker nodes.
    pub workers: usize,
    /// Passes over the corpus.
    pub iterations: usize,
    /// Seconds of the whole run.
    pub elapsed_s: f64,
    /// Seconds spent in sampling rounds (excludes the initial count rotation).
    pub sampling_s: f64,
    /// Tokens sampled in total.
    pub tokens_sampled: u64,
    /// Tokens sampled per second divided by the number of workers (one sampling thread
    /// each).
    pub tokens_per_s_per_worker: f64,
    /// The log-likelihood trace, one point per pass.
    pub loglik: Vec<LoglikPoint>,
    /// The final log-likelihood per token.
    pub final_loglik_per_token: f64,
    /// Bytes the scheduler node sent and received during the run (0 without a network):
    /// block ids, topic-total deltas and log-likelihood parts; the word-topic blocks
    /// travel worker to worker.
    #[serde(default)]
    pub scheduler_bytes: u64,
    /// Serialized size of all word-topic blocks at the end: what one sub-round would move
    /// through the scheduler twice (out and back) if the blocks were routed through it.
    #[serde(default)]
    pub block_bytes: u64,
    /// Serialized size of the final Collect round's partials (the blocks), included in
    /// `scheduler_bytes`.
    #[serde(default)]
    pub collect_bytes: u64,
    /// Scheduler rounds (sub-rounds plus the Collect round).
    #[serde(default)]
    pub rounds: u64,
}

/// Writes `topics.txt` (per topic: the top words of `phi` with probabilities) and
/// `topic_word.tsv` (`phi`, `K x V`); shared by the STRADS and parameter-server LDA apps.
pub fn write_topic_files(
    dir: &std::path::Path,
    phi: &ndarray::Array2<f64>,
    corpus: &Corpus,
    top: usize,
) -> Result<(), DataError> {
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
    write_file(dir, "topics.txt", topics.as_bytes())?;
    write_file(dir, "topic_word.tsv", table.as_bytes())
}

/// Writes `contents` to `dir/name`, creating `dir`; the error names the file.
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> Result<(), DataError> {
    let path = dir.join(name);
    crate::job::write_atomic(&path, contents).map_err(|source| DataError::Io { path, source })
}

/// The corpus of an LDA job: a UCI bag-of-words file (`docword`, with an optional `vocab`
/// for readable top words) or, when `docword` is unset, a synthetic corpus.
pub fn load_corpus(
    docword: Option<&Path>,
    vocab: Option<&Path>,
    synthetic: &LdaCorpusParams,
) -> Result<Corpus, DataError> {
    let corpus = match docword {
        Some(path) => crate::data::load_bow(path, vocab)?,
        None => lda_corpus(synthetic)?.corpus,
    };
    if corpus.n_tokens() == 0 {
        return Err(DataError::InvalidParameter(
            "the corpus has no tokens".into(),
        ));
    }
    Ok(corpus)
}

/// Which worker samples each document: balanced by token count, identical on every node.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentPartition {
    /// `doc_worker[d]` is the worker that owns document `d`.
    pub doc_worker: Vec<u32>,
}

impl DocumentPartition {
    /// Splits `corpus` over `workers` by token count ([`balanced_buckets`]).
    pub fn balanced(corpus: &Corpus, workers: usize) -> Self {
        let lengths: Vec<usize> = corpus.docs.iter().map(Vec::len).collect();
        DocumentPartition {
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
