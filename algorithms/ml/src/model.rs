//! Saved models: the one versioned JSON file every training app writes ([`MODEL_FILE`]),
//! and what `petrel eval` and `petrel predict` do with it.
//!
//! The file holds `format` ([`MODEL_FORMAT`]), `version` ([`MODEL_VERSION`]), `app`, the
//! `settings` it was trained with and `params`: a [`LinearModel`] (lasso, logistic), a
//! [`SoftmaxModel`] (ps-lr), a [`FactorModel`] (strads-mf, ps-mf), a [`TopicModel`] (lda,
//! ps-lda) or a [`NetworkModel`] (p3, evaluated by `petrel_p3`).

use std::collections::HashMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::MlError;
use crate::data::{Corpus, SparseDataset, SparseRow};

/// The file name of a saved model inside an output directory.
pub const MODEL_FILE: &str = "petrel-model.json";
/// The `format` field of every saved model.
pub const MODEL_FORMAT: &str = "petrel-model";
/// The version this code writes and reads.
pub const MODEL_VERSION: u32 = 1;

/// A saved model: what was trained, how, and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedModel {
    /// Always [`MODEL_FORMAT`].
    pub format: String,
    /// [`MODEL_VERSION`] when written by this code.
    pub version: u32,
    /// The app that trained it (`lasso`, `ps-mf`, ...).
    pub app: String,
    /// The settings it was trained with (`[app.<section>]`).
    pub settings: serde_json::Value,
    /// The parameters.
    pub params: ModelParams,
}

/// The parameters of a saved model, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelParams {
    /// Lasso or binary logistic regression.
    Linear(LinearModel),
    /// Multinomial logistic regression.
    Softmax(SoftmaxModel),
    /// Matrix factorisation.
    Factors(FactorModel),
    /// A topic model.
    Topics(TopicModel),
    /// A deep network (P3 training).
    Network(NetworkModel),
}

/// A deep network trained with P3: which network, how it was built, every tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkModel {
    /// The network's name (`mlp`, `lenet`, `resnet18`, `vgg11`).
    pub net: String,
    /// Shape of one example (channels, height, width).
    pub input: Vec<usize>,
    /// The width knob it was built with.
    pub width: usize,
    /// Classes of its head.
    pub classes: usize,
    /// Parameter values per tensor, forward order.
    pub tensors: Vec<Vec<f32>>,
}

/// What a linear model predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearTask {
    /// A real value: `intercept + x . w` (Lasso).
    Regression,
    /// The probability of the positive class: `sigmoid(intercept + x . w)`.
    BinaryClassification,
    /// The class by the sign of the margin `intercept + x . w`, trained under the squared
    /// hinge `max(0, 1 - y m)^2` (an L1-regularised L2-loss SVM).
    SquaredHingeClassification,
}

/// Lasso or binary logistic regression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearModel {
    /// Regression or classification.
    pub task: LinearTask,
    /// The L1 weight of the training objective.
    pub lambda: f64,
    /// The unpenalised constant term.
    pub intercept: f64,
    /// Coefficient of feature `j` (LIBSVM index `j + 1`).
    pub coefficients: Vec<f32>,
}

/// Multinomial logistic regression (ps-lr).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxModel {
    /// The original label of each class.
    pub class_labels: Vec<f32>,
    /// `n_features` weight rows, then the bias row; each as wide as `class_labels`.
    pub weights: Vec<Vec<f32>>,
}

/// Matrix factorisation: `rating = global_mean + user_bias[u] + item_bias[i] + p_u . q_i`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactorModel {
    /// The constant term (0 for a model without one).
    pub global_mean: f32,
    /// The id of each user as written in the training file.
    pub user_ids: Vec<String>,
    /// The id of each item as written in the training file.
    pub item_ids: Vec<String>,
    /// One row of factors per user.
    pub user_factors: Vec<Vec<f32>>,
    /// One row of factors per item.
    pub item_factors: Vec<Vec<f32>>,
    /// One bias per user (empty: no user biases).
    #[serde(default)]
    pub user_bias: Vec<f32>,
    /// One bias per item (empty: no item biases).
    #[serde(default)]
    pub item_bias: Vec<f32>,
}

/// A topic model for fold-in inference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicModel {
    /// Document-topic Dirichlet prior.
    pub alpha: f64,
    /// Topic-word Dirichlet prior (already in `topic_word`).
    pub beta: f64,
    /// `topic_word[k][w]`: probability of word `w` in topic `k`.
    pub topic_word: Vec<Vec<f64>>,
    /// The words, when the model was trained with a vocabulary file.
    pub vocab: Option<Vec<String>>,
}

/// The largest magnitude a saved real parameter may have (beyond it a model diverged).
pub const MAX_PARAMETER: f64 = 1e12;

/// How far a topic's word distribution may sum from 1 (rounding of `K x V` divisions).
const SUM_TOLERANCE: f64 = 1e-6;

/// What a data file held that the model never saw, which eval and predict ignore (a feature
/// counts as 0, a word is dropped, a user or item adds nothing) and note ([`Unseen::note`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unseen {
    /// What was ignored (`feature values`, `tokens`, `pairs`).
    pub entries: usize,
    /// Rows, documents or pairs that held at least one.
    pub records: usize,
    /// Why, for the note: what the model knows.
    pub reason: String,
}

impl Unseen {
    /// One line for a user (`None` when nothing was ignored).
    pub fn note(&self, path: &Path) -> Option<String> {
        (self.entries > 0).then(|| format!("{}: {}", path.display(), self.reason))
    }
}

/// `value` is a finite parameter of sane magnitude (else the reason, naming `field`).
fn sane(field: &str, value: f64) -> Result<(), String> {
    if value.is_finite() && value.abs() <= MAX_PARAMETER {
        return Ok(());
    }
    Err(format!(
        "{field} = {value}: a parameter must be finite and at most {MAX_PARAMETER:e} in \
         magnitude (a diverged or damaged model)"
    ))
}

/// Every value of `values` is [`sane`] (`field[i]` names the first that is not).
fn all_sane(field: &str, values: &[f32]) -> Result<(), String> {
    for (i, &v) in values.iter().enumerate() {
        sane(&format!("{field}[{i}]"), f64::from(v))?;
    }
    Ok(())
}

/// Every row of `rows` is [`all_sane`] (`field[r][i]`).
fn rows_sane(field: &str, rows: &[Vec<f32>]) -> Result<(), String> {
    for (r, row) in rows.iter().enumerate() {
        all_sane(&format!("{field}[{r}]"), row)?;
    }
    Ok(())
}

/// No id of `ids` appears twice (`field` names the list).
fn unique_ids(field: &str, ids: &[String]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    match ids.iter().find(|id| !seen.insert(id.as_str())) {
        Some(id) => Err(format!("{field}: id {id:?} appears twice")),
        None => Ok(()),
    }
}

/// A Dirichlet prior: finite and > 0.
fn prior(field: &str, value: f64) -> Result<(), String> {
    if value.is_finite() && value > 0.0 {
        return Ok(());
    }
    Err(format!(
        "{field} = {value}: a Dirichlet prior must be finite and > 0"
    ))
}

/// The header fields, read first: another version or app is refused by name.
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u32,
    app: String,
}

impl SavedModel {
    /// A model of `app` trained with `settings`.
    pub fn new(app: &str, settings: &impl Serialize, params: ModelParams) -> Self {
        SavedModel {
            format: MODEL_FORMAT.into(),
            version: MODEL_VERSION,
            app: app.into(),
            settings: serde_json::to_value(settings).unwrap_or(serde_json::Value::Null),
            params,
        }
    }

    /// The file's bytes (compact JSON).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Reads `path` (a model file, or a directory holding [`MODEL_FILE`]) written by this
    /// version for `app`.
    pub fn load(path: &Path, app: &str) -> Result<SavedModel, MlError> {
        let path = if path.is_dir() {
            path.join(MODEL_FILE)
        } else {
            path.to_path_buf()
        };
        match std::fs::read(&path) {
            Ok(bytes) => Self::decode(&bytes, &path, app),
            Err(source) => Err(MlError::ModelIo { path, source }),
        }
    }

    /// Decodes a model file's bytes (`path` names it in errors).
    pub fn decode(bytes: &[u8], path: &Path, app: &str) -> Result<SavedModel, MlError> {
        let file = || path.to_path_buf();
        let decode_error = |source: serde_json::Error| {
            if source.is_eof() {
                MlError::ModelTruncated {
                    path: file(),
                    source,
                }
            } else {
                MlError::NotAModel {
                    path: file(),
                    source,
                }
            }
        };
        let header: Header = serde_json::from_slice(bytes).map_err(decode_error)?;
        let (found, path) = (header.format, file());
        if found != MODEL_FORMAT {
            return Err(MlError::WrongFormat { path, found });
        }
        let found = header.version;
        if found != MODEL_VERSION {
            return Err(MlError::WrongVersion { path, found });
        }
        let (found, expected) = (header.app, app.to_string());
        if found != app {
            return Err(MlError::WrongApp {
                path,
                found,
                expected,
            });
        }
        let model: SavedModel = serde_json::from_slice(bytes).map_err(decode_error)?;
        if let Err(reason) = model.check() {
            return Err(MlError::InconsistentModel { path, reason });
        }
        Ok(model)
    }

    /// The parameters' shapes agree and keep their kind's invariants; the reason names the
    /// field.
    fn check(&self) -> Result<(), String> {
        match &self.params {
            ModelParams::Linear(m) => {
                if !(m.lambda.is_finite() && m.lambda >= 0.0) {
                    return Err(format!(
                        "lambda = {}: the L1 weight must be finite and >= 0",
                        m.lambda
                    ));
                }
                sane("intercept", m.intercept)?;
                all_sane("coefficients", &m.coefficients)
            }
            ModelParams::Softmax(m) => {
                let k = m.class_labels.len();
                if k < 2 || m.weights.is_empty() || m.weights.iter().any(|r| r.len() != k) {
                    return Err(format!(
                        "softmax weights must be rows of {k} >= 2 classes with a bias row"
                    ));
                }
                all_sane("class_labels", &m.class_labels)?;
                for (c, l) in m.class_labels.iter().enumerate() {
                    if m.class_labels[..c].contains(l) {
                        return Err(format!("class_labels: label {l} appears twice"));
                    }
                }
                rows_sane("weights", &m.weights)
            }
            ModelParams::Factors(m) => {
                let rank = m.user_factors.first().map_or(0, Vec::len);
                let rows_ok = m
                    .user_factors
                    .iter()
                    .chain(&m.item_factors)
                    .all(|r| r.len() == rank);
                if !rows_ok
                    || m.user_ids.len() != m.user_factors.len()
                    || m.item_ids.len() != m.item_factors.len()
                    || !(m.user_bias.is_empty() || m.user_bias.len() == m.user_ids.len())
                    || !(m.item_bias.is_empty() || m.item_bias.len() == m.item_ids.len())
                {
                    return Err("factor rows, ids and biases disagree in size".into());
                }
                unique_ids("user_ids", &m.user_ids)?;
                unique_ids("item_ids", &m.item_ids)?;
                sane("global_mean", f64::from(m.global_mean))?;
                rows_sane("user_factors", &m.user_factors)?;
                rows_sane("item_factors", &m.item_factors)?;
                all_sane("user_bias", &m.user_bias)?;
                all_sane("item_bias", &m.item_bias)
            }
            ModelParams::Topics(m) => {
                let v = m.topic_word.first().map_or(0, Vec::len);
                if m.topic_word.is_empty() || v == 0 || m.topic_word.iter().any(|r| r.len() != v) {
                    return Err("topic_word must be topics x words, all rows as wide".into());
                }
                if m.vocab.as_ref().is_some_and(|w| w.len() != v) {
                    return Err(format!("vocabulary has not {v} words"));
                }
                prior("alpha", m.alpha)?;
                prior("beta", m.beta)?;
                for (k, row) in m.topic_word.iter().enumerate() {
                    if let Some((w, p)) = row
                        .iter()
                        .enumerate()
                        .find(|(_, p)| !(p.is_finite() && (0.0..=1.0).contains(*p)))
                    {
                        return Err(format!(
                            "topic_word[{k}][{w}] = {p}: a probability must be in [0, 1]"
                        ));
                    }
                    let sum: f64 = row.iter().sum();
                    if (sum - 1.0).abs() > SUM_TOLERANCE {
                        return Err(format!(
                            "topic_word[{k}] sums to {sum}: a topic's word distribution must sum to 1"
                        ));
                    }
                }
                Ok(())
            }
            // Its tensors are checked against its layout by petrel_p3.
            ModelParams::Network(m) => {
                if m.net.is_empty() || m.tensors.is_empty() || m.classes < 2 {
                    return Err("a network needs a name, tensors and >= 2 classes".into());
                }
                Ok(())
            }
        }
    }
}

/// Named figures, in order (what `petrel eval` prints and writes).
pub type Figures = Vec<(&'static str, f64)>;

impl SavedModel {
    /// Held-out figures on `path` (in the app's training format) and what it held that the
    /// model never saw; LDA's fold-in runs `iterations` sweeps seeded by `seed`. An empty
    /// file is refused.
    pub fn evaluate_file(
        &self,
        path: &Path,
        iterations: usize,
        seed: u64,
    ) -> Result<(Figures, Unseen), MlError> {
        use crate::data::{load_bow, load_labelled_ratings, load_libsvm};
        Ok(match &self.params {
            ModelParams::Linear(m) => {
                let data = load_libsvm(path)?;
                require_some(data.rows.len(), "rows", path)?;
                let unseen = unseen_features(&data, m.coefficients.len());
                (m.evaluate(&data), unseen)
            }
            ModelParams::Softmax(m) => {
                let data = load_libsvm(path)?;
                require_some(data.rows.len(), "rows", path)?;
                let unseen = unseen_features(&data, m.n_features());
                (m.evaluate(&data, path)?, unseen)
            }
            ModelParams::Factors(m) => {
                let ratings = load_labelled_ratings(path)?;
                require_some(ratings.len(), "ratings", path)?;
                let unseen = m.unseen(&ratings);
                (m.evaluate(&ratings, path)?, unseen)
            }
            ModelParams::Topics(m) => {
                let (corpus, unseen) = m.known_words(load_bow(path, None)?);
                require_some(corpus.docs.len(), "documents", path)?;
                if !corpus.docs.iter().any(|d| d.len() >= 2) {
                    let why = "no document has 2 or more words the model knows: nothing to score";
                    return Err(MlError::does_not_fit(path, why));
                }
                (m.evaluate(&corpus, iterations, seed), unseen)
            }
            ModelParams::Network(_) => {
                let why = "a P3 network model: use `petrel eval p3`";
                return Err(MlError::does_not_fit(path, why));
            }
        })
    }

    /// With a held-out file, adds the model's figures on it to `metrics`' final figures as
    /// `heldout_<figure>` (leaving out what is not a number).
    pub fn add_heldout(
        &self,
        metrics: &mut crate::job::RunMetrics,
        test_data: Option<&Path>,
        seed: u64,
    ) -> Result<(), MlError> {
        self.add_heldout_with(metrics, test_data, HELDOUT_FOLD_IN_SWEEPS, seed)
    }

    /// [`SavedModel::add_heldout`] with `sweeps` fold-in sweeps for a topic model.
    pub fn add_heldout_with(
        &self,
        metrics: &mut crate::job::RunMetrics,
        test_data: Option<&Path>,
        sweeps: usize,
        seed: u64,
    ) -> Result<(), MlError> {
        let Some(path) = test_data else {
            return Ok(());
        };
        let (figures, unseen) = self.evaluate_file(path, sweeps, seed)?;
        if let Some(note) = unseen.note(path) {
            tracing::warn!("{note}");
        }
        let named = heldout_names(figures, &[]);
        let refs: Vec<(&str, f64)> = named.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        metrics.finals(&refs);
        Ok(())
    }
}

/// Refuses a data file with no `what` (rows, ratings, documents).
pub fn require_some(n: usize, what: &str, path: &Path) -> Result<(), MlError> {
    if n > 0 {
        return Ok(());
    }
    let why = format!("the file holds no {what}: nothing to evaluate or predict");
    Err(MlError::does_not_fit(path, why))
}

/// The feature values of `data` beyond a model of `n_features` features (counted as 0).
pub fn unseen_features(data: &SparseDataset, n_features: usize) -> Unseen {
    let mut u = Unseen::default();
    for row in &data.rows {
        let beyond = row
            .indices
            .iter()
            .filter(|&&j| j as usize >= n_features)
            .count();
        u.entries += beyond;
        u.records += usize::from(beyond > 0);
    }
    u.reason = format!(
        "{} feature value(s) in {} row(s) have an index beyond the model's {n_features} \
         features; ignored (counted as 0)",
        u.entries, u.records
    );
    u
}

/// Fold-in sweeps of the held-out evaluation of an LDA run and of `petrel eval`.
pub const HELDOUT_FOLD_IN_SWEEPS: usize = 50;

mod factor;
mod linear;
mod topic;
pub use factor::{FactorIndex, LabelledRating};
pub use linear::{heldout_names, linear_figures};

#[cfg(test)]
mod tests;
