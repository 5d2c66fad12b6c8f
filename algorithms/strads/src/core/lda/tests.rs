use super::*;
use petrel_ml::data::synthetic::{LdaCorpusParams, lda_corpus};
use petrel_ml::topic::ln_gamma;

// The count invariants the tests check after every sync.
impl LdaCluster {
    /// Count invariants: doc-topic sums = doc lengths, word-topic sums = word frequencies,
    /// topic totals = column sums of both tables.
    pub(super) fn check_invariants(
        &self,
        word_frequencies: &[usize],
    ) -> Result<(), StradsModelError> {
        let k = self.config.n_topics;
        let mut from_words = vec![0i64; k];
        for block in &self.blocks {
            for (row, &w) in block.rows.iter().zip(&block.word_ids) {
                if row.total() != word_frequencies[w as usize] as u64 {
                    return Err(StradsModelError::Invariant(format!(
                        "word {w}: counts sum {} != frequency {}",
                        row.total(),
                        word_frequencies[w as usize]
                    )));
                }
                for &(t, n) in &row.entries {
                    from_words[t as usize] += i64::from(n);
                }
            }
        }
        let mut from_docs = vec![0i64; k];
        for worker in &self.workers {
            worker.check_doc_counts()?;
            for (t, n) in from_docs.iter_mut().zip(worker.own_topic_counts()) {
                *t += n;
            }
            if worker.topic_totals != self.topic_totals {
                return Err(StradsModelError::Invariant(format!(
                    "worker {} has stale totals after sync",
                    worker.worker
                )));
            }
        }
        if from_words != self.topic_totals || from_docs != self.topic_totals {
            return Err(StradsModelError::Invariant(format!(
                "topic totals {:?} != word sums {from_words:?} / doc sums {from_docs:?}",
                self.topic_totals
            )));
        }
        Ok(())
    }
}

#[test]
fn ln_gamma_matches_known_values() {
    assert!(ln_gamma(1.0).abs() < 1e-12);
    assert!(ln_gamma(2.0).abs() < 1e-12);
    assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
    assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    assert!((ln_gamma(0.1) - 2.252_712_651_734_206).abs() < 1e-10);
}

#[test]
fn topic_counts_increment_decrement() {
    let mut c = TopicCounts::default();
    c.increment(3);
    c.increment(3);
    c.increment(1);
    assert_eq!((c.get(3), c.get(1), c.total()), (2, 1, 3));
    assert!(c.decrement(3));
    assert!(c.decrement(1));
    assert!(!c.decrement(7), "nothing to decrement");
    assert_eq!(c.entries, vec![(3, 1)]);
}

pub(super) fn corpus() -> Corpus {
    lda_corpus(&LdaCorpusParams {
        n_topics: 5,
        vocab_size: 120,
        n_docs: 120,
        doc_length: 60,
        alpha: 0.1,
        beta: 0.05,
        seed: 17,
    })
    .unwrap()
    .corpus
}

/// Five topics over three workers: the corpus's word frequencies and the cluster.
fn three_workers() -> (Vec<usize>, LdaCluster) {
    let corpus = corpus();
    let config = LdaConfig {
        n_topics: 5,
        alpha: 0.1,
        beta: 0.1,
        n_workers: 3,
        iterations: 0,
        seed: 1,
    };
    let cluster = LdaCluster::new(&corpus, &config).unwrap();
    (corpus.word_frequencies(), cluster)
}

#[test]
fn invariants_hold_after_every_sub_round() {
    let (freq, mut cluster) = three_workers();
    cluster.check_invariants(&freq).unwrap();
    for _ in 0..3 {
        for t in 0..3 {
            cluster.sub_round(t);
            cluster.check_invariants(&freq).unwrap();
        }
    }
}

#[test]
fn log_likelihood_improves() {
    let corpus = corpus();
    let config = LdaConfig {
        n_topics: 5,
        alpha: 0.1,
        beta: 0.1,
        n_workers: 3,
        iterations: 25,
        seed: 2,
    };
    let run = run_lda(&corpus, &config).unwrap();
    let ll = &run.log_likelihood_per_token;
    let (first, last) = (ll[0], *ll.last().unwrap());
    assert!(
        last > first + 0.5,
        "log-likelihood per token {first} -> {last}"
    );
    for row in run.topic_word.rows() {
        assert!((row.sum() - 1.0).abs() < 1e-9);
    }
}

// The serial reference run the tests compare with.

/// Result of [`run_lda`].
#[derive(Debug, Clone, PartialEq)]
pub struct LdaRun {
    /// Before the first and after every iteration.
    pub log_likelihood_per_token: Vec<f64>,
    /// `(n_wk + beta) / (n_k + V beta)`, `K x V`.
    pub topic_word: ndarray::Array2<f64>,
}

/// Serial driver: P in-process workers, `config.iterations` passes.
pub fn run_lda(corpus: &Corpus, config: &LdaConfig) -> Result<LdaRun, StradsModelError> {
    let mut cluster = LdaCluster::new(corpus, config)?;
    let mut log_likelihood_per_token = vec![cluster.log_likelihood_per_token()];
    for _ in 0..config.iterations {
        cluster.iteration();
        log_likelihood_per_token.push(cluster.log_likelihood_per_token());
        tracing::debug!(
            ll = log_likelihood_per_token.last().copied(),
            "lda iteration"
        );
    }
    Ok(LdaRun {
        log_likelihood_per_token,
        topic_word: cluster.topic_word_distributions(),
    })
}

#[test]
fn moved_documents_keep_every_count_and_take_their_tokens_along() {
    let (freq, mut cluster) = three_workers();
    cluster.iteration();
    let tokens =
        |c: &LdaCluster, w: usize| -> u64 { (0..3).map(|b| c.workers[w].tokens_in_block(b)).sum() };
    let before: Vec<u64> = (0..3).map(|w| tokens(&cluster, w)).collect();
    // Worker 0 gives up every other document; worker 2 takes them.
    let kept: Vec<u32> = cluster.workers[0]
        .doc_ids()
        .iter()
        .copied()
        .step_by(2)
        .collect();
    let vocabulary = cluster.vocabulary.clone();
    let moved = cluster.workers[0].release(|d| kept.contains(&d), &vocabulary);
    assert!(!moved.is_empty());
    assert!(moved.iter().all(|d| !kept.contains(&d.id)));
    let moved_tokens: u64 = moved.iter().map(|d| d.words.len() as u64).sum();
    cluster.workers[2].adopt(moved, &vocabulary).unwrap();
    assert_eq!(tokens(&cluster, 0), before[0] - moved_tokens);
    assert_eq!(tokens(&cluster, 2), before[2] + moved_tokens);
    cluster.check_invariants(&freq).unwrap();
    for _ in 0..2 {
        cluster.iteration();
        cluster.check_invariants(&freq).unwrap();
    }
    let bad = MovedDoc {
        id: 0,
        words: vec![0, 1],
        topics: vec![0],
    };
    assert!(cluster.workers[1].adopt(vec![bad], &vocabulary).is_err());
}
