//! Skewed synthetic data for `bench managed`: power-law popularity of users, items and
//! words (the regime where a few rows change much and most change little), written as
//! files the apps read (`user item rating` triplets, UCI bag of words).

use crate::BenchError;
use petrel_ml::data::synthetic::{power_law, power_law_weights};
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;

fn zipf(n: usize, exponent: f64) -> Result<WeightedIndex<f64>, BenchError> {
    power_law(n, exponent).map_err(|e| BenchError::Incomplete(format!("power-law weights: {e}")))
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(BenchError::io(dir.display().to_string()))?;
    }
    let what = || format!("write {}", path.display());
    let mut f = std::fs::File::create(path).map_err(BenchError::io(what()))?;
    f.write_all(text.as_bytes()).map_err(BenchError::io(what()))
}

/// Ratings of a rank-`rank` model (factors `N(0, 1/rank)`-like, noise 0.1) on `n` distinct
/// (user, item) pairs, users and items drawn with power-law weights of `exponent`.
pub fn write_ratings(
    path: &Path,
    (users, items, rank, n): (usize, usize, usize, usize),
    exponent: f64,
    seed: u64,
) -> Result<(), BenchError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let scale = 1.0 / (rank as f64).sqrt();
    let mut factor = |count: usize| -> Vec<Vec<f64>> {
        (0..count)
            .map(|_| {
                (0..rank)
                    .map(|_| scale * (2.0 * rng.r#gen::<f64>() - 1.0) * 1.7)
                    .collect()
            })
            .collect()
    };
    let (p, q) = (factor(users), factor(items));
    let (pick_u, pick_i) = (zipf(users, exponent)?, zipf(items, exponent)?);
    let mut seen = HashSet::new();
    let mut text = String::new();
    // Distinct pairs; the attempts are bounded so a too-dense request still ends.
    for _ in 0..n * 20 {
        if seen.len() >= n {
            break;
        }
        let (u, i) = (pick_u.sample(&mut rng), pick_i.sample(&mut rng));
        if !seen.insert((u, i)) {
            continue;
        }
        let dot: f64 = p[u].iter().zip(&q[i]).map(|(a, b)| a * b).sum();
        let r = dot + 0.1 * (2.0 * rng.r#gen::<f64>() - 1.0) * 1.7;
        text.push_str(&format!("{} {} {r:.5}\n", u + 1, i + 1));
    }
    write(path, &text)
}

/// A UCI bag-of-words corpus: `docs` documents of `doc_length` tokens over `vocab` words
/// and `topics` topics; a topic's word weights are a power law of `exponent` over the
/// words times a random factor in `[0, 1)^4`, so a few words are frequent in every topic;
/// a document mixes two topics.
pub fn write_corpus(
    path: &Path,
    (docs, vocab, doc_length, topics): (usize, usize, usize, usize),
    exponent: f64,
    seed: u64,
) -> Result<(), BenchError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut samplers = Vec::with_capacity(topics);
    for _ in 0..topics {
        let w = power_law_weights(vocab, exponent).map(|p| p * rng.r#gen::<f64>().powi(4));
        samplers.push(
            WeightedIndex::new(w).map_err(|e| BenchError::Incomplete(format!("topic: {e}")))?,
        );
    }
    let mut lines = Vec::new();
    for d in 0..docs {
        let (a, b) = (rng.gen_range(0..topics), rng.gen_range(0..topics));
        let share: f64 = rng.r#gen();
        let mut counts: BTreeMap<usize, u32> = BTreeMap::new();
        for _ in 0..doc_length {
            let k = if rng.r#gen::<f64>() < share { a } else { b };
            *counts.entry(samplers[k].sample(&mut rng)).or_default() += 1;
        }
        for (w, c) in counts {
            lines.push(format!("{} {} {c}", d + 1, w + 1));
        }
    }
    let text = format!("{docs}\n{vocab}\n{}\n{}\n", lines.len(), lines.join("\n"));
    write(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_are_skewed_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().join("r.txt");
        write_ratings(&r, (200, 100, 3, 2000), 1.0, 1).unwrap();
        let ratings = petrel_ml::data::load_ratings(&r).unwrap();
        assert_eq!(ratings.entries.len(), 2000);
        let mut per_user: BTreeMap<u32, usize> = BTreeMap::new();
        for e in &ratings.entries {
            *per_user.entry(e.0).or_default() += 1;
        }
        let mut counts: Vec<usize> = per_user.values().copied().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        // The top tenth of users hold far more than a tenth of the ratings.
        let top: usize = counts.iter().take(20).sum();
        assert!(top * 3 > 2000, "top users hold {top} of 2000");
        let c = dir.path().join("docword.txt");
        write_corpus(&c, (50, 300, 40, 5), 1.0, 1).unwrap();
        let corpus = petrel_ml::data::load_bow(&c, None).unwrap();
        assert_eq!(corpus.n_tokens(), 50 * 40);
    }
}
