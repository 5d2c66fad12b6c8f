// Over 600 lines: it holds every synthetic generator; each is short and they share seeding.
//! Seeded synthetic problems with known ground truth, deterministic for a given seed.

use ndarray::Array2;
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_distr::{Gamma, Normal, StandardNormal};

use super::libsvm::{SparseColumns, SparseDataset, SparseRow};
use super::{Corpus, MlError, Ratings};

fn invalid(message: impl Into<String>) -> MlError {
    MlError::InvalidParameter(message.into())
}

/// Parameters of [`correlated_lasso`].
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelatedLassoParams {
    /// Number of rows of `x`.
    pub n_samples: usize,
    /// Number of columns of `x`.
    pub n_features: usize,
    /// Consecutive features `[g * group_size, (g + 1) * group_size)` form a group.
    pub group_size: usize,
    /// Population correlation between two features of the same group, in `[0, 1)`.
    pub correlation: f32,
    /// Number of non-zero true coefficients.
    pub n_nonzero: usize,
    /// Standard deviation of the Gaussian noise added to `y`.
    pub noise_std: f32,
    /// RNG seed.
    pub seed: u64,
}

/// A Lasso problem; `x` is dense row-major with unit-norm columns (so `x_j^T x_k` is their
/// correlation).
#[derive(Debug, Clone, PartialEq)]
pub struct LassoProblem {
    /// The design matrix, columns scaled to unit L2 norm.
    pub x: Array2<f32>,
    /// The responses.
    pub y: Vec<f32>,
    /// The true coefficients.
    pub b_true: Vec<f32>,
}

impl LassoProblem {
    /// Column-major (CSC) copy of `x`.
    pub fn columns(&self) -> SparseColumns {
        SparseColumns::from_dense(&self.x)
    }
}

/// Correlated design: `x_ij = sqrt(c) z_ig + sqrt(1 - c) e_ij` in a group (correlation `c`),
/// columns normalised; `b_true` has `n_nonzero` entries of magnitude in `[1, 2)` and random
/// sign; `y = X b_true + N(0, noise_std^2)`.
pub fn correlated_lasso(params: &CorrelatedLassoParams) -> Result<LassoProblem, MlError> {
    let (n, d, group_size) = (params.n_samples, params.n_features, params.group_size);
    let (correlation, n_nonzero) = (params.correlation, params.n_nonzero);
    if n == 0 || d == 0 || group_size == 0 {
        return Err(invalid(
            "n_samples, n_features and group_size must be positive",
        ));
    }
    let noise = lasso_noise(correlation, n_nonzero, d, params.noise_std)?;
    let mut rng = StdRng::seed_from_u64(params.seed);
    let n_groups = d.div_ceil(group_size);
    let shared_weight = correlation.sqrt();
    let own_weight = (1.0 - correlation).sqrt();
    let mut x = Array2::<f32>::zeros((n, d));
    for i in 0..n {
        let shared: Vec<f32> = (0..n_groups).map(|_| rng.sample(StandardNormal)).collect();
        for j in 0..d {
            let own: f32 = rng.sample(StandardNormal);
            x[[i, j]] = shared_weight * shared[j / group_size] + own_weight * own;
        }
    }
    for mut column in x.columns_mut() {
        let norm = column.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            column.mapv_inplace(|v| v / norm);
        }
    }
    let b_true = true_coefficients(&mut rng, d, n_nonzero);
    let y = (0..n)
        .map(|i| {
            let signal: f32 = x.row(i).iter().zip(&b_true).map(|(a, b)| a * b).sum();
            signal + noise.sample(&mut rng)
        })
        .collect();
    Ok(LassoProblem { x, y, b_true })
}

/// The checks both Lasso generators share, then their label noise.
fn lasso_noise(
    correlation: f32,
    n_nonzero: usize,
    d: usize,
    noise_std: f32,
) -> Result<Normal<f32>, MlError> {
    if !(0.0..1.0).contains(&correlation) {
        return Err(invalid(format!("correlation {correlation} outside [0, 1)")));
    }
    if n_nonzero > d {
        return Err(invalid(format!("n_nonzero {n_nonzero} > n_features {d}")));
    }
    noise(noise_std)
}

/// N(0, noise_std^2) label noise (a negative deviation counts as none).
fn noise(noise_std: f32) -> Result<Normal<f32>, MlError> {
    Normal::new(0.0f32, noise_std.max(0.0)).map_err(|e| invalid(format!("noise_std: {e}")))
}

/// `d` true coefficients, `n_nonzero` of them of magnitude in `[1, 2)` and random sign.
fn true_coefficients(rng: &mut StdRng, d: usize, n_nonzero: usize) -> Vec<f32> {
    let mut b_true = vec![0.0f32; d];
    for j in sample(rng, d, n_nonzero) {
        let magnitude = rng.gen_range(1.0f32..2.0);
        b_true[j] = if rng.gen_bool(0.5) {
            magnitude
        } else {
            -magnitude
        };
    }
    b_true
}

/// Parameters of [`sparse_correlated_lasso`].
#[derive(Debug, Clone, PartialEq)]
pub struct SparseLassoParams {
    /// Rows.
    pub n_samples: usize,
    /// Columns.
    pub n_features: usize,
    /// Consecutive features `[g * group_size, (g + 1) * group_size)` form a group.
    pub group_size: usize,
    /// Non-zeros per column (every column of a group has the same rows).
    pub nnz_per_column: usize,
    /// Correlation between two features of a group, in `[0, 1)`.
    pub correlation: f32,
    /// Non-zero true coefficients.
    pub n_nonzero: usize,
    /// Standard deviation of the noise of `y`.
    pub noise_std: f32,
    /// Seed.
    pub seed: u64,
}

/// A sparse design generated column by column (CSC), without a dense matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseLassoProblem {
    /// The requested rows of the design (all rows, or a row block renumbered from 0).
    pub x: SparseColumns,
    /// The responses of those rows.
    pub y: Vec<f32>,
    /// The true coefficients.
    pub b_true: Vec<f32>,
}

/// Mixes a seed with a stream id so every column and group has its own RNG.
fn stream_rng(seed: u64, stream: u64, index: u64) -> StdRng {
    let mut z = seed
        ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

/// Sparse correlated design at any size: a group's features share a random support of
/// `nnz_per_column` rows and a factor `z` on it, column `j` being `sqrt(c) z + sqrt(1 - c)
/// e_j` there, scaled to unit norm; `y` as in [`correlated_lasso`]. Every group and column
/// has its own seeded stream, so `rows` yields exactly those rows of the whole design
/// (renumbered from 0) without building the rest. Built on [`SparseLassoColumns`].
pub fn sparse_correlated_lasso(
    params: &SparseLassoParams,
    rows: Option<std::ops::Range<usize>>,
) -> Result<SparseLassoProblem, MlError> {
    let mut generator = SparseLassoColumns::new(params)?;
    let n = params.n_samples;
    let rows = rows.unwrap_or(0..n);
    if rows.start > rows.end || rows.end > n {
        return Err(invalid(format!("row block {rows:?} outside 0..{n}")));
    }
    let y = generator.labels();
    let mut x = SparseColumns::empty(rows.len());
    for j in 0..params.n_features {
        let (support, column) = generator.column(j);
        x.push_column_rows(support, column, &rows);
    }
    Ok(SparseLassoProblem {
        x,
        y: y[rows].to_vec(),
        b_true: generator.b_true,
    })
}

/// The design of [`sparse_correlated_lasso`] one column at a time, over all rows, in
/// `O(nnz_per_column)` memory; bit for bit the whole problem's.
#[derive(Debug, Clone)]
pub struct SparseLassoColumns {
    params: SparseLassoParams,
    noise: Normal<f32>,
    b_true: Vec<f32>,
    /// The group whose support and shared factor are cached (`usize::MAX`: none).
    group: usize,
    support: Vec<u32>,
    shared: Vec<f64>,
    raw: Vec<f64>,
    column: Vec<f32>,
}

impl SparseLassoColumns {
    /// The generator of `params`' design (checked as [`sparse_correlated_lasso`] does).
    pub fn new(params: &SparseLassoParams) -> Result<Self, MlError> {
        let p = params;
        let (n, d, k, n_nonzero) = (p.n_samples, p.n_features, p.nnz_per_column, p.n_nonzero);
        if n == 0 || d == 0 || p.group_size == 0 || k == 0 {
            return Err(invalid(
                "n_samples, n_features, group_size and nnz_per_column must be positive",
            ));
        }
        if k > n || n > u32::MAX as usize {
            return Err(invalid(format!(
                "nnz_per_column {k} must be at most n_samples {n} (and n_samples below 2^32)"
            )));
        }
        let noise = lasso_noise(p.correlation, n_nonzero, d, p.noise_std)?;
        let b_true = true_coefficients(&mut stream_rng(p.seed, 1, 0), d, n_nonzero);
        Ok(SparseLassoColumns {
            params: params.clone(),
            noise,
            b_true,
            group: usize::MAX,
            support: Vec::new(),
            shared: Vec::new(),
            raw: vec![0.0; k],
            column: vec![0.0; k],
        })
    }

    /// Every column holds exactly `nnz_per_column` non-zeros (its group's support).
    pub fn nnz_per_column(&self) -> usize {
        self.params.nnz_per_column
    }

    /// Column `j < n_features` over all rows: its rows (increasing) and values (cheapest in
    /// increasing `j`).
    pub fn column(&mut self, j: usize) -> (&[u32], &[f32]) {
        let p = &self.params;
        if j / p.group_size != self.group {
            self.group = j / p.group_size;
            let mut g = stream_rng(p.seed, 2, self.group as u64);
            let mut rows_of_group: Vec<u32> = sample(&mut g, p.n_samples, p.nnz_per_column)
                .into_iter()
                .map(|i| i as u32)
                .collect();
            rows_of_group.sort_unstable();
            self.support = rows_of_group;
            self.shared = (0..p.nnz_per_column)
                .map(|_| g.sample::<f64, _>(StandardNormal))
                .collect();
        }
        let shared_weight = f64::from(p.correlation).sqrt();
        let own_weight = (1.0 - f64::from(p.correlation)).sqrt();
        let mut c = stream_rng(p.seed, 3, j as u64);
        for (v, z) in self.raw.iter_mut().zip(&self.shared) {
            *v = shared_weight * z + own_weight * c.sample::<f64, _>(StandardNormal);
        }
        let norm = self.raw.iter().map(|v| v * v).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        for (stored, v) in self.column.iter_mut().zip(&self.raw) {
            *stored = (v * scale) as f32;
        }
        (&self.support, &self.column)
    }

    /// The labels of all rows, `X b_true + noise` (only the columns of `b_true`'s support).
    pub fn labels(&mut self) -> Vec<f32> {
        let mut y_full: Vec<f64> = vec![0.0; self.params.n_samples];
        for j in 0..self.b_true.len() {
            let b_j = self.b_true[j];
            if b_j == 0.0 {
                continue;
            }
            let (support, column) = self.column(j);
            for (&i, &v) in support.iter().zip(column) {
                y_full[i as usize] += f64::from(v) * f64::from(b_j);
            }
        }
        let mut noise_rng = stream_rng(self.params.seed, 4, 0);
        y_full
            .iter()
            .map(|&signal| (signal + f64::from(self.noise.sample(&mut noise_rng))) as f32)
            .collect()
    }
}

/// Parameters of [`low_rank_ratings`]; also STRADS MF's `synthetic` settings table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LowRankParams {
    /// Number of users.
    pub n_users: usize,
    /// Number of items.
    pub n_items: usize,
    /// Rank of the true factors.
    pub rank: usize,
    /// Probability that a (user, item) cell is observed.
    pub observed_fraction: f64,
    /// Standard deviation of the Gaussian noise added to each rating.
    pub noise_std: f32,
    /// RNG seed.
    pub seed: u64,
}

impl Default for LowRankParams {
    fn default() -> Self {
        LowRankParams {
            n_users: 2000,
            n_items: 1000,
            rank: 10,
            observed_fraction: 0.05,
            noise_std: 0.1,
            seed: 42,
        }
    }
}

impl LowRankParams {
    /// Range checks of the `synthetic` table, keys prefixed with `prefix` (`synthetic.`).
    pub fn check(&self, prefix: &str, c: &mut crate::job::SettingChecks) {
        let key = |k: &str| format!("{prefix}{k}");
        c.at_least(&key("n_users"), self.n_users, 1);
        c.at_least(&key("n_items"), self.n_items, 1);
        c.at_least(&key("rank"), self.rank, 1);
        c.require(
            self.observed_fraction.is_finite()
                && self.observed_fraction > 0.0
                && self.observed_fraction <= 1.0,
            &key("observed_fraction"),
            self.observed_fraction,
            "must be in (0, 1]",
        );
        c.non_negative(&key("noise_std"), self.noise_std);
    }
}

/// Low-rank ratings with their generating factors: `rating = w_u . h_i + noise`.
#[derive(Debug, Clone, PartialEq)]
pub struct LowRankProblem {
    /// The observed ratings.
    pub ratings: Ratings,
    /// `n_users x rank`.
    pub user_factors: Array2<f32>,
    /// `n_items x rank`.
    pub item_factors: Array2<f32>,
}

/// Factors have i.i.d. `N(0, 1/sqrt(rank))` entries; each cell is observed with
/// `observed_fraction`.
pub fn low_rank_ratings(params: &LowRankParams) -> Result<LowRankProblem, MlError> {
    let mut entries = Vec::new();
    let mut problem = stream_low_rank_ratings(params, |user, item, rating| {
        entries.push((user, item, rating))
    })?;
    problem.ratings.entries = entries;
    Ok(problem)
}

/// [`low_rank_ratings`] handing each `(user, item, rating)` to `visit` as it is drawn;
/// returns the problem without entries.
pub fn stream_low_rank_ratings(
    params: &LowRankParams,
    mut visit: impl FnMut(u32, u32, f32),
) -> Result<LowRankProblem, MlError> {
    let (n_users, n_items, rank) = (params.n_users, params.n_items, params.rank);
    let observed_fraction = params.observed_fraction;
    if rank == 0 || n_users > u32::MAX as usize || n_items > u32::MAX as usize {
        return Err(invalid("rank must be positive and dimensions fit u32"));
    }
    if !(0.0..=1.0).contains(&observed_fraction) {
        return Err(invalid(format!(
            "observed_fraction {observed_fraction} outside [0, 1]"
        )));
    }
    let noise = noise(params.noise_std)?;
    let factor = Normal::new(0.0f32, (rank as f32).powf(-0.25))
        .map_err(|e| invalid(format!("factor scale: {e}")))?;
    let mut rng = StdRng::seed_from_u64(params.seed);
    let user_factors = Array2::from_shape_fn((n_users, rank), |_| factor.sample(&mut rng));
    let item_factors = Array2::from_shape_fn((n_items, rank), |_| factor.sample(&mut rng));
    for u in 0..n_users {
        for i in 0..n_items {
            if rng.gen_bool(observed_fraction) {
                let clean = user_factors.row(u).dot(&item_factors.row(i));
                visit(u as u32, i as u32, clean + noise.sample(&mut rng));
            }
        }
    }
    Ok(LowRankProblem {
        ratings: Ratings {
            n_users,
            n_items,
            ..Ratings::default()
        },
        user_factors,
        item_factors,
    })
}

/// Parameters of [`lda_corpus`]; also the LDA apps' `synthetic` settings table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LdaCorpusParams {
    /// Number of topics.
    pub n_topics: usize,
    /// Number of distinct words.
    pub vocab_size: usize,
    /// Number of documents.
    pub n_docs: usize,
    /// Tokens per document (fixed).
    pub doc_length: usize,
    /// Dirichlet prior of the document-topic distributions.
    pub alpha: f64,
    /// Dirichlet prior of the topic-word distributions.
    pub beta: f64,
    /// RNG seed.
    pub seed: u64,
}

impl LdaCorpusParams {
    /// Range checks of the `synthetic` table, keys prefixed with `prefix` (`synthetic.`).
    pub fn check(&self, prefix: &str, c: &mut crate::job::SettingChecks) {
        let key = |k: &str| format!("{prefix}{k}");
        c.at_least(&key("n_topics"), self.n_topics, 1);
        c.at_least(&key("vocab_size"), self.vocab_size, 1);
        c.at_least(&key("n_docs"), self.n_docs, 1);
        c.at_least(&key("doc_length"), self.doc_length, 1);
        c.positive(&key("alpha"), self.alpha);
        c.positive(&key("beta"), self.beta);
    }
}

impl Default for LdaCorpusParams {
    fn default() -> Self {
        LdaCorpusParams {
            n_topics: 20,
            vocab_size: 5000,
            n_docs: 2000,
            doc_length: 100,
            alpha: 0.1,
            beta: 0.1,
            seed: 42,
        }
    }
}

/// A corpus drawn from the LDA generative model, with the distributions that drew it.
#[derive(Debug, Clone, PartialEq)]
pub struct LdaCorpusProblem {
    /// The generated documents.
    pub corpus: Corpus,
    /// `n_topics x vocab_size`, rows sum to 1.
    pub topic_word: Array2<f64>,
    /// `n_docs x n_topics`, rows sum to 1.
    pub doc_topic: Array2<f64>,
}

fn dirichlet(rng: &mut StdRng, gamma: &Gamma<f64>, len: usize) -> Vec<f64> {
    let mut draws: Vec<f64> = (0..len).map(|_| gamma.sample(rng)).collect();
    let total: f64 = draws.iter().sum();
    if total > 0.0 {
        draws.iter_mut().for_each(|v| *v /= total);
    } else {
        // Tiny concentrations can underflow every draw; fall back to one random atom.
        let hot = rng.gen_range(0..len);
        draws[hot] = 1.0;
    }
    draws
}

/// The documents of [`lda_corpus`], drawn one at a time (the same corpus).
pub struct LdaDocs {
    rng: StdRng,
    word_samplers: Vec<WeightedIndex<f64>>,
    alpha_gamma: Gamma<f64>,
    n_topics: usize,
    n_docs: usize,
    doc_length: usize,
    next: usize,
}

impl LdaDocs {
    /// The generator of `params`'s corpus and its topics' word distributions.
    pub fn new(params: &LdaCorpusParams) -> Result<(LdaDocs, Array2<f64>), MlError> {
        let (n_topics, vocab_size) = (params.n_topics, params.vocab_size);
        if n_topics == 0 || vocab_size == 0 || vocab_size > u32::MAX as usize {
            return Err(invalid(
                "n_topics and vocab_size must be positive (vocab fits u32)",
            ));
        }
        let gamma = |prior: f64, name: &str| {
            Gamma::new(prior, 1.0).map_err(|e| invalid(format!("{name}: {e}")))
        };
        let (alpha_gamma, beta_gamma) =
            (gamma(params.alpha, "alpha")?, gamma(params.beta, "beta")?);
        let mut rng = StdRng::seed_from_u64(params.seed);
        let mut topic_word = Array2::zeros((n_topics, vocab_size));
        let mut word_samplers = Vec::with_capacity(n_topics);
        for k in 0..n_topics {
            let phi = dirichlet(&mut rng, &beta_gamma, vocab_size);
            word_samplers
                .push(WeightedIndex::new(&phi).map_err(|e| invalid(format!("topic {k}: {e}")))?);
            topic_word.row_mut(k).assign(&ndarray::Array1::from(phi));
        }
        let docs = LdaDocs {
            rng,
            word_samplers,
            alpha_gamma,
            n_topics,
            n_docs: params.n_docs,
            doc_length: params.doc_length,
            next: 0,
        };
        Ok((docs, topic_word))
    }
}

impl Iterator for LdaDocs {
    /// A document's topic mixture `theta_d` and its tokens.
    type Item = Result<(Vec<f64>, Vec<u32>), MlError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.n_docs {
            return None;
        }
        let d = self.next;
        self.next += 1;
        let theta = dirichlet(&mut self.rng, &self.alpha_gamma, self.n_topics);
        let topic_sampler = match WeightedIndex::new(&theta) {
            Ok(s) => s,
            Err(e) => return Some(Err(invalid(format!("doc {d}: {e}")))),
        };
        let doc: Vec<u32> = (0..self.doc_length)
            .map(|_| {
                self.word_samplers[topic_sampler.sample(&mut self.rng)].sample(&mut self.rng) as u32
            })
            .collect();
        Some(Ok((theta, doc)))
    }
}

/// phi_k ~ Dir(beta), theta_d ~ Dir(alpha), z ~ Cat(theta_d), w ~ Cat(phi_z).
pub fn lda_corpus(params: &LdaCorpusParams) -> Result<LdaCorpusProblem, MlError> {
    let (generator, topic_word) = LdaDocs::new(params)?;
    let mut doc_topic = Array2::zeros((params.n_docs, params.n_topics));
    let mut docs = Vec::with_capacity(params.n_docs);
    for (d, drawn) in generator.enumerate() {
        let (theta, doc) = drawn?;
        doc_topic.row_mut(d).assign(&ndarray::Array1::from(theta));
        docs.push(doc);
    }
    Ok(LdaCorpusProblem {
        corpus: Corpus {
            n_docs: params.n_docs,
            vocab_size: params.vocab_size,
            docs,
            vocab: None,
        },
        topic_word,
        doc_topic,
    })
}

/// Parameters of [`separable_classification`].
#[derive(Debug, Clone, PartialEq)]
pub struct ClassificationParams {
    /// Number of examples.
    pub n_samples: usize,
    /// Number of features.
    pub n_features: usize,
    /// At least 2.
    pub n_classes: usize,
    /// Minimum gap between the best and second-best class score of every sample.
    pub margin: f32,
    /// RNG seed.
    pub seed: u64,
}

/// Linearly separable data with the weights that separate it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassificationProblem {
    /// Dense features stored as sparse rows; labels are class indices `0..n_classes` as f32.
    pub dataset: SparseDataset,
    /// `n_classes x n_features`; `label = argmax_c w_c . x` for every sample.
    pub true_weights: Array2<f32>,
}

/// Draws `x ~ N(0, I)` labelled `argmax_c w_c . x` for random `w`, with at least `margin`.
pub fn separable_classification(
    params: &ClassificationParams,
) -> Result<ClassificationProblem, MlError> {
    let n_features = params.n_features;
    check_classification(params)?;
    let mut rng = StdRng::seed_from_u64(params.seed);
    let true_weights = class_weights(&mut rng, params, n_features);
    labelled(params, true_weights, &mut rng, |rng| SparseRow {
        indices: (0..n_features as u32).collect(),
        values: (0..n_features)
            .map(|_| rng.sample(StandardNormal))
            .collect(),
    })
}

/// Sparse separable classes with power-law feature frequencies, as in click and text data:
/// every sample has `nnz` distinct features, feature `j` drawn with weight `(j + 1)^-exponent`,
/// values `N(0, 1)`, labelled `argmax_c w_c . x` with at least `margin` as in
/// [`separable_classification`]. Rare features get few, bursty updates: the setting where
/// a per-coordinate step matters.
pub fn power_law_classification(
    params: &ClassificationParams,
    nnz: usize,
    exponent: f64,
) -> Result<ClassificationProblem, MlError> {
    let n_features = params.n_features;
    check_classification(params)?;
    if nnz == 0 || nnz > n_features / 2 {
        return Err(invalid(format!(
            "nnz {nnz} must be in 1..={} (half the features)",
            n_features / 2
        )));
    }
    let pick = power_law(n_features, exponent)?;
    let mut rng = StdRng::seed_from_u64(params.seed);
    let true_weights = class_weights(&mut rng, params, nnz);
    labelled(params, true_weights, &mut rng, |rng| {
        let mut indices = std::collections::BTreeSet::new();
        while indices.len() < nnz {
            indices.insert(pick.sample(rng) as u32);
        }
        SparseRow {
            values: indices.iter().map(|_| rng.sample(StandardNormal)).collect(),
            indices: indices.into_iter().collect(),
        }
    })
}

/// Weights `(i + 1)^-exponent` for `i < n`: power-law (Zipf) popularity.
pub fn power_law_weights(n: usize, exponent: f64) -> impl Iterator<Item = f64> {
    (1..=n).map(move |i| (i as f64).powf(-exponent))
}

/// A sampler of `0..n` with [`power_law_weights`]: a few indices are drawn most of the time.
pub fn power_law(n: usize, exponent: f64) -> Result<WeightedIndex<f64>, MlError> {
    if !exponent.is_finite() || exponent < 0.0 {
        return Err(invalid(format!("exponent {exponent} must be >= 0")));
    }
    WeightedIndex::new(power_law_weights(n, exponent)).map_err(|e| invalid(e.to_string()))
}

fn check_classification(params: &ClassificationParams) -> Result<(), MlError> {
    let (n_features, n_classes, margin) = (params.n_features, params.n_classes, params.margin);
    if n_classes < 2 || n_features == 0 || n_features > u32::MAX as usize {
        return Err(invalid("need n_classes >= 2 and n_features > 0"));
    }
    if margin.is_nan() || margin < 0.0 {
        return Err(invalid(format!("margin {margin} must be >= 0")));
    }
    Ok(())
}

/// `n_classes x n_features` weights `N(0, 1 / active)`, `active` the nonzeros of a sample,
/// so that scores are of order one.
fn class_weights(rng: &mut StdRng, params: &ClassificationParams, active: usize) -> Array2<f32> {
    let scale = 1.0 / (active as f32).sqrt();
    Array2::from_shape_fn((params.n_classes, params.n_features), |_| {
        scale * rng.sample::<f32, _>(StandardNormal)
    })
}

/// `params.n_samples` samples from `draw`, labelled by `true_weights`, keeping those whose
/// best class wins by at least `params.margin`.
fn labelled(
    params: &ClassificationParams,
    true_weights: Array2<f32>,
    rng: &mut StdRng,
    mut draw: impl FnMut(&mut StdRng) -> SparseRow,
) -> Result<ClassificationProblem, MlError> {
    let (n_samples, n_classes, margin) = (params.n_samples, params.n_classes, params.margin);
    let mut dataset = SparseDataset {
        n_features: params.n_features,
        labels: Vec::with_capacity(n_samples),
        rows: Vec::with_capacity(n_samples),
    };
    let max_attempts = 1000 * n_samples.max(1);
    let mut attempts = 0;
    while dataset.rows.len() < n_samples {
        attempts += 1;
        if attempts > max_attempts {
            return Err(invalid(format!("margin {margin} is too large to reach")));
        }
        let x = draw(rng);
        let scores: Vec<f32> = true_weights
            .rows()
            .into_iter()
            .map(|w| {
                (x.indices.iter().zip(&x.values))
                    .map(|(&j, v)| w[j as usize] * v)
                    .sum()
            })
            .collect();
        let best = (1..n_classes).fold(0, |b, c| if scores[c] > scores[b] { c } else { b });
        let runner_up = (0..n_classes)
            .filter(|&c| c != best)
            .map(|c| scores[c])
            .fold(f32::NEG_INFINITY, f32::max);
        if scores[best] - runner_up < margin {
            continue;
        }
        dataset.labels.push(best as f32);
        dataset.rows.push(x);
    }
    Ok(ClassificationProblem {
        dataset,
        true_weights,
    })
}

#[cfg(test)]
mod tests;
