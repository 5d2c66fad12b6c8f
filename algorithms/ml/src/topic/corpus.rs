//! The LDA apps' inputs and outputs: the corpus source (a file or a synthetic [`LdaCorpusParams`]), the
//! document partition, `metrics.json` ([`LdaMetrics`]) and the topic files.

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::balanced_buckets;
use crate::MlError;
use crate::data::bow::parse_docword_part;
use crate::data::synthetic::{LdaCorpusParams, LdaDocs, lda_corpus};
use crate::data::{Corpus, CorpusStats};

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
    /// Tokens sampled per second per worker.
    pub tokens_per_s_per_worker: f64,
    /// The log-likelihood trace, one point per pass.
    pub loglik: Vec<LoglikPoint>,
    /// The final log-likelihood per token.
    pub final_loglik_per_token: f64,
    /// Bytes the scheduler node sent and received during the run (0 without a network).
    #[serde(default)]
    pub scheduler_bytes: u64,
    /// Serialized size of all word-topic blocks at the end.
    #[serde(default)]
    pub block_bytes: u64,
    /// Serialized size of the final Collect round's partials (in `scheduler_bytes`).
    #[serde(default)]
    pub collect_bytes: u64,
    /// Scheduler rounds (sub-rounds plus the Collect round).
    #[serde(default)]
    pub rounds: u64,
}

/// Writes `topics.txt` (each topic's top words of `phi`) and `topic_word.tsv` (`phi`).
pub fn write_topic_files(
    dir: &std::path::Path,
    phi: &ndarray::Array2<f64>,
    corpus: &Corpus,
    top: usize,
) -> Result<(), MlError> {
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
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> Result<(), MlError> {
    let path = dir.join(name);
    crate::job::write_atomic(&path, contents).map_err(|source| MlError::Io { path, source })
}

/// The corpus of an LDA job: a bag-of-words file (with an optional `vocab`) or, without
/// `docword`, a synthetic corpus.
pub fn load_corpus(
    docword: Option<&Path>,
    vocab: Option<&Path>,
    synthetic: &LdaCorpusParams,
) -> Result<Corpus, MlError> {
    Ok(load_corpus_digested(docword, vocab, synthetic)?.0)
}

/// [`load_corpus`] and, for a file, the digest of every value read
/// ([`CorpusShare::read`]).
pub fn load_corpus_digested(
    docword: Option<&Path>,
    vocab: Option<&Path>,
    synthetic: &LdaCorpusParams,
) -> Result<(Corpus, Option<u64>), MlError> {
    let (corpus, read) = match docword {
        Some(path) => {
            let (corpus, read) = crate::data::load_bow_digested(path, vocab)?;
            (corpus, Some(read.value()))
        }
        None => (lda_corpus(synthetic)?.corpus, None),
    };
    if corpus.n_tokens() == 0 {
        return Err(no_tokens());
    }
    Ok((corpus, read))
}

fn no_tokens() -> MlError {
    MlError::InvalidParameter("the corpus has no tokens".into())
}

/// One worker's share of an LDA job's corpus, read without holding the whole corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusShare {
    /// The whole corpus's document lengths and word frequencies.
    pub stats: CorpusStats,
    /// Which worker samples each document ([`DocumentPartition::balanced`] of the corpus).
    pub partition: DocumentPartition,
    /// The worker's documents, `(global id, tokens)` in id order.
    pub docs: Vec<(u32, Vec<u32>)>,
    /// A file's digest of every value read; `None` for a synthetic corpus.
    pub read: Option<u64>,
}

/// Worker `worker`'s share of [`load_corpus`]'s corpus among `workers`, never holding the
/// whole corpus: a file is read twice (statistics, then the documents), a synthetic corpus
/// drawn once. With `worker` `None` (a worker that joins a running job and is dealt its
/// documents then) the share holds no documents and a file is read once.
pub fn load_corpus_share(
    docword: Option<&Path>,
    synthetic: &LdaCorpusParams,
    workers: usize,
    worker: Option<usize>,
) -> Result<CorpusShare, MlError> {
    let share = match docword {
        Some(path) => file_share(
            &mut || {
                let file = std::fs::File::open(path).map_err(|e| MlError::io(path, e))?;
                let meta = file.metadata().map_err(|e| MlError::io(path, e))?;
                // A pipe's or a device's length says nothing about what it holds.
                let bytes = meta.is_file().then_some(meta.len());
                Ok((Box::new(std::io::BufReader::new(file)), bytes))
            },
            path,
            workers,
            worker,
        )?,
        None => {
            let lengths = vec![synthetic.doc_length; synthetic.n_docs];
            let partition = DocumentPartition::from_lengths(&lengths, workers);
            let (generator, _) = LdaDocs::new(synthetic)?;
            let mut word_frequencies = vec![0usize; synthetic.vocab_size];
            let mut docs = Vec::new();
            for (d, drawn) in generator.enumerate() {
                let (_, doc) = drawn?;
                for &w in &doc {
                    word_frequencies[w as usize] += 1;
                }
                if worker == Some(partition.doc_worker[d] as usize) {
                    docs.push((d as u32, doc));
                }
            }
            CorpusShare {
                stats: CorpusStats {
                    n_docs: synthetic.n_docs,
                    vocab_size: synthetic.vocab_size,
                    doc_lengths: lengths,
                    word_frequencies,
                },
                partition,
                docs,
                read: None,
            }
        }
    };
    if share.stats.n_tokens() == 0 {
        return Err(no_tokens());
    }
    Ok(share)
}

/// A docword source opened, with its size in bytes when known.
type SizedReader = (Box<dyn std::io::BufRead>, Option<u64>);

/// A docword file read through `open`: the partition, then (for a `worker`) its documents.
fn file_share(
    open: &mut dyn FnMut() -> Result<SizedReader, MlError>,
    path: &Path,
    workers: usize,
    worker: Option<usize>,
) -> Result<CorpusShare, MlError> {
    let limits = crate::data::DataLimits::from_env()?;
    let mut read_part = |keep: &dyn Fn(usize) -> bool| {
        let (reader, bytes) = open()?;
        let size = crate::data::limits::SizeRule::new(bytes)?;
        parse_docword_part(reader, path, &limits, size, keep)
    };
    let (_, stats, first) = read_part(&|_| false)?;
    let partition = DocumentPartition::from_lengths(&stats.doc_lengths, workers);
    let Some(worker) = worker else {
        return Ok(CorpusShare {
            stats,
            partition,
            docs: Vec::new(),
            read: Some(first.value()),
        });
    };
    let mine = |d: usize| partition.doc_worker.get(d) == Some(&(worker as u32));
    let (corpus, _, second) = read_part(&mine)?;
    // The partition and statistics are the first read's: the documents must be too.
    if second.finish() != first.finish() {
        return Err(MlError::ChangedWhileRead {
            path: path.to_path_buf(),
        });
    }
    let docs = partition.take_docs_of(corpus.docs, worker);
    Ok(CorpusShare {
        stats,
        partition,
        docs,
        read: Some(first.value()),
    })
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
        Self::from_lengths(&lengths, workers)
    }

    /// The same split from the documents' lengths alone.
    pub fn from_lengths(lengths: &[usize], workers: usize) -> Self {
        DocumentPartition {
            doc_worker: balanced_buckets(lengths, workers),
        }
    }

    /// [`DocumentPartition::docs_of`] by value: worker `w`'s documents moved out of `docs`.
    pub fn take_docs_of(&self, docs: Vec<Vec<u32>>, w: usize) -> Vec<(u32, Vec<u32>)> {
        docs.into_iter()
            .enumerate()
            .filter(|(d, _)| self.doc_worker.get(*d) == Some(&(w as u32)))
            .map(|(d, doc)| (d as u32, doc))
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> LdaCorpusParams {
        LdaCorpusParams {
            n_topics: 4,
            vocab_size: 60,
            n_docs: 37,
            doc_length: 11,
            alpha: 0.2,
            beta: 0.1,
            seed: 9,
        }
    }

    /// Every worker's share is exactly its documents of the whole corpus, and the share's
    /// statistics are the whole corpus's, from a synthetic source and from a file.
    #[test]
    fn a_share_is_the_workers_documents_of_the_whole_corpus() {
        let synthetic = params();
        let whole = load_corpus(None, None, &synthetic).unwrap();
        // The same corpus as a UCI file, with uneven document lengths (doc 2 empty).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docword.txt");
        let mut entries = Vec::new();
        for (d, doc) in whole.docs.iter().enumerate() {
            let mut counts = std::collections::BTreeMap::new();
            for &w in doc.iter().take(if d == 2 { 0 } else { 1 + d % doc.len() }) {
                *counts.entry(w).or_insert(0) += 1;
            }
            for (w, c) in counts {
                entries.push(format!("{} {} {c}", d + 1, w + 1));
            }
        }
        let text = format!(
            "{}\n{}\n{}\n{}\n",
            whole.n_docs,
            whole.vocab_size,
            entries.len(),
            entries.join("\n")
        );
        std::fs::write(&path, text).unwrap();
        let from_file = load_corpus(Some(&path), None, &synthetic).unwrap();
        for (source, corpus) in [(None, &whole), (Some(path.as_path()), &from_file)] {
            for workers in [1, 3] {
                let partition = DocumentPartition::balanced(corpus, workers);
                let mut read = None;
                for w in 0..workers {
                    let share = load_corpus_share(source, &synthetic, workers, Some(w)).unwrap();
                    assert_eq!(share.stats, CorpusStats::of(corpus));
                    assert_eq!(share.partition, partition);
                    assert_eq!(share.docs, partition.docs_of(corpus, w), "worker {w}");
                    read = share.read;
                }
                // A joiner's share: the same layout and digest, no documents.
                let none = load_corpus_share(source, &synthetic, workers, None).unwrap();
                assert_eq!(none.stats, CorpusStats::of(corpus));
                assert_eq!((none.partition, none.read), (partition, read));
                assert!(none.docs.is_empty());
            }
        }
    }

    /// Reading a share checks every line as reading the whole file does.
    #[test]
    fn a_share_of_a_bad_file_is_refused_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("docword.txt");
        std::fs::write(&path, "2\n3\n2\n1 1 2\n2 4 1\n").unwrap();
        let err = load_corpus_share(Some(&path), &params(), 2, Some(0)).unwrap_err();
        assert!(matches!(err, MlError::Malformed { line: 5, .. }), "{err:?}");
        std::fs::write(&path, "2\n3\n0\n").unwrap();
        let err = load_corpus_share(Some(&path), &params(), 2, None).unwrap_err();
        assert!(err.to_string().contains("no tokens"), "{err}");
    }

    /// A file that reads differently the second time is refused, even when every document
    /// keeps its length and every word its frequency (two occurrences swapped between
    /// documents); one that reads the same is not.
    #[test]
    fn a_share_of_a_file_that_changed_between_its_reads_is_refused() {
        let first = "2\n3\n3\n1 1 2\n1 2 1\n2 3 1\n";
        let swapped = "2\n3\n3\n1 1 2\n1 3 1\n2 2 1\n";
        let path = Path::new("docword.txt");
        for (second, same) in [(first, true), (swapped, false)] {
            let mut reads = [first, second].into_iter();
            let mut open = || -> Result<SizedReader, MlError> {
                let text = reads.next().unwrap_or_default();
                let bytes = Some(text.len() as u64);
                Ok((
                    Box::new(std::io::Cursor::new(text.as_bytes().to_vec())),
                    bytes,
                ))
            };
            match file_share(&mut open, path, 2, Some(0)) {
                Ok(share) => assert!(same, "a changed file was read as {:?}", share.stats),
                Err(e) => {
                    assert!(!same, "{e}");
                    assert!(matches!(e, MlError::ChangedWhileRead { .. }), "{e:?}");
                    assert!(e.to_string().contains("changed while it was read"), "{e}");
                }
            }
        }
    }
}
