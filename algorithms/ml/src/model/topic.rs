//! A [`TopicModel`] (lda, ps-lda): saved from a run, held-out fold-in, topic mixtures.

use super::*;

impl TopicModel {
    /// The saved model of an LDA run: `phi` (`K x V`, the smoothed word-topic counts).
    pub fn saved(
        app: &str,
        settings: &impl Serialize,
        phi: &ndarray::Array2<f64>,
        alpha: f64,
        beta: f64,
        vocab: Option<Vec<String>>,
    ) -> SavedModel {
        SavedModel::new(
            app,
            settings,
            ModelParams::Topics(TopicModel {
                alpha,
                beta,
                topic_word: phi.rows().into_iter().map(|r| r.to_vec()).collect(),
                vocab,
            }),
        )
    }

    /// Topics.
    pub fn n_topics(&self) -> usize {
        self.topic_word.len()
    }

    /// Words.
    pub fn vocab_size(&self) -> usize {
        self.topic_word.first().map_or(0, Vec::len)
    }

    /// `corpus` without the tokens of words beyond the model's vocabulary, and their count.
    pub fn known_words(&self, mut corpus: Corpus) -> (Corpus, Unseen) {
        let v = self.vocab_size();
        let mut u = Unseen::default();
        for doc in &mut corpus.docs {
            let before = doc.len();
            doc.retain(|&w| (w as usize) < v);
            u.entries += before - doc.len();
            u.records += usize::from(doc.len() < before);
        }
        u.reason = format!(
            "{} token(s) in {} document(s) are words beyond the model's vocabulary of {v} \
             words; ignored",
            u.entries, u.records
        );
        (corpus, u)
    }

    /// The topic mixture of a new document by fold-in Gibbs sampling (`p(k) ∝ (n_dk + alpha)
    /// phi_k,w`, phi fixed), averaged over the second half of `iterations` sweeps.
    pub fn fold_in(&self, doc: &[u32], iterations: usize, rng: &mut StdRng) -> Vec<f64> {
        let k = self.n_topics();
        let mut counts = vec![0usize; k];
        let mut z: Vec<usize> = doc
            .iter()
            .map(|_| {
                let t = rng.gen_range(0..k);
                counts[t] += 1;
                t
            })
            .collect();
        let mut weights = vec![0.0f64; k];
        let mut mixture = vec![0.0f64; k];
        let iterations = iterations.max(1);
        let burn_in = iterations / 2;
        let denominator = doc.len() as f64 + k as f64 * self.alpha;
        // Each token's column of phi, contiguous (the sweeps read it K at a time).
        let columns: Vec<f64> = doc
            .iter()
            .flat_map(|&w| self.topic_word.iter().map(move |row| row[w as usize]))
            .collect();
        for sweep in 0..iterations {
            for (token, column) in columns.chunks_exact(k.max(1)).enumerate() {
                counts[z[token]] -= 1;
                let mut total = 0.0;
                for (t, (&phi, weight)) in column.iter().zip(weights.iter_mut()).enumerate() {
                    total += (counts[t] as f64 + self.alpha) * phi;
                    *weight = total;
                }
                let u = rng.r#gen::<f64>() * total;
                let t = weights.iter().position(|&c| c > u).unwrap_or(k - 1);
                z[token] = t;
                counts[t] += 1;
            }
            if sweep >= burn_in {
                for t in 0..k {
                    mixture[t] += (counts[t] as f64 + self.alpha) / denominator;
                }
            }
        }
        let samples = (iterations - burn_in) as f64;
        mixture.iter().map(|m| m / samples).collect()
    }

    /// Held-out perplexity by document completion: even tokens fold in the mixture, odd
    /// tokens are scored; also `uniform_perplexity` (the vocabulary size).
    pub fn evaluate(&self, corpus: &Corpus, iterations: usize, seed: u64) -> Figures {
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut loglik, mut scored) = (0.0f64, 0usize);
        for doc in &corpus.docs {
            if doc.len() < 2 {
                continue;
            }
            let observed: Vec<u32> = doc.iter().step_by(2).copied().collect();
            let theta = self.fold_in(&observed, iterations, &mut rng);
            for &w in doc.iter().skip(1).step_by(2) {
                let p: f64 = theta
                    .iter()
                    .zip(&self.topic_word)
                    .map(|(t, phi)| t * phi[w as usize])
                    .sum();
                loglik += p.max(f64::MIN_POSITIVE).ln();
                scored += 1;
            }
        }
        let per_token = loglik / scored.max(1) as f64;
        vec![
            ("perplexity", (-per_token).exp()),
            ("loglik_per_token", per_token),
            ("uniform_perplexity", self.vocab_size() as f64),
            ("documents", corpus.docs.len() as f64),
            ("scored_tokens", scored as f64),
        ]
    }
}
