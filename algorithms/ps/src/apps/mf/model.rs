//! ps-mf's data, SGD math, metrics and model.

use super::*;

/// Train/test ratings and the global mean of the training ratings.
#[derive(Debug, Clone)]
pub struct PsMfData {
    /// Training ratings.
    pub train: Ratings,
    /// Held-out ratings.
    pub test: Ratings,
    /// Mean training rating.
    pub mean: f32,
}

impl PsMfData {
    /// The typical coordinate size of a rank-`rank` model of these ratings,
    /// `sqrt(sd) * rank^(-1/4)` (`sd`: the ratings' standard deviation), so that dot products
    /// spread like the ratings: the radius for
    /// [`alpha_for_radius`](crate::core::rules::alpha_for_radius).
    pub fn factor_scale(&self, rank: u32) -> f64 {
        let n = self.train.entries.len().max(1) as f64;
        let mean = f64::from(self.mean);
        let var = self
            .train
            .entries
            .iter()
            .map(|e| (f64::from(e.2) - mean).powi(2))
            .sum::<f64>()
            / n;
        var.sqrt().sqrt() * f64::from(rank.max(1)).powf(-0.25)
    }

    /// Loads (or generates) the ratings and splits them.
    pub fn load(cfg: &PsMfSettings) -> Result<PsMfData, PsError> {
        let all = match &cfg.data {
            Some(p) => load_ratings(p)?,
            None => {
                low_rank_ratings(&LowRankParams {
                    n_users: cfg.synthetic_users,
                    n_items: cfg.synthetic_items,
                    rank: cfg.synthetic_rank,
                    observed_fraction: cfg.synthetic_observed,
                    noise_std: cfg.synthetic_noise,
                    seed: cfg.seed,
                })?
                .ratings
            }
        };
        if all.entries.is_empty() {
            return Err(PsError::InvalidConfig {
                app: PsMf::NAME,
                reason: "no ratings".into(),
            });
        }
        let (train, test) = match &cfg.test_data {
            // Pairs of unseen users or items are left to the saved model's evaluation.
            Some(path) => {
                let (test, _left_out) = all.held_out_from(path)?;
                (all, test)
            }
            None => all.train_test_split(cfg.test_fraction, cfg.seed ^ 0x5eed)?,
        };
        let mean = if train.entries.is_empty() {
            0.0
        } else {
            (train.entries.iter().map(|e| f64::from(e.2)).sum::<f64>() / train.entries.len() as f64)
                as f32
        };
        Ok(PsMfData { train, test, mean })
    }
}

/// Deterministic initial value of `(table, row, col)`: uniform in `[-scale, scale]`.
pub fn init_value(table: TableId, row: u64, col: u32, scale: f32) -> f32 {
    let z = row
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(col).wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(u64::from(table.0) << 56);
    let z = crate::core::types::mix64(z);
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    ((2.0 * u - 1.0) as f32) * scale
}

/// The model value of a row: initial value plus the stored offset; with `biases`, users
/// `[u, b_user, 1]`, items `[v, 1, b_item]`, the biases starting at 0.
pub fn factor_row(
    table: TableId,
    row: u64,
    stored: Option<&Row>,
    rank: u32,
    biases: bool,
    scale: f32,
) -> Vec<f32> {
    let mut v: Vec<f32> = (0..rank)
        .map(|c| init_value(table, row, c, scale))
        .collect();
    if biases {
        let constant_last = table == USERS;
        v.extend(if constant_last {
            [0.0, 1.0]
        } else {
            [1.0, 0.0]
        });
    }
    if let Some(r) = stored {
        for (c, x) in v.iter_mut().enumerate() {
            *x += r.get(c as u32);
        }
    }
    v
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One sequential SGD pass over `batch` on local factor copies.
pub fn sgd_pass(
    batch: &[(u32, u32, f32)],
    users: &mut HashMap<u32, Vec<f32>>,
    items: &mut HashMap<u32, Vec<f32>>,
    mean: f32,
    lr: f32,
    reg: f32,
    fixed: Option<(usize, usize)>,
) {
    let (fixed_u, fixed_i) = fixed.unwrap_or((usize::MAX, usize::MAX));
    for &(u, i, r) in batch {
        let (Some(pu), Some(qi)) = (users.get_mut(&u), items.get_mut(&i)) else {
            continue;
        };
        let e = r - mean - dot(pu, qi);
        for k in 0..pu.len().min(qi.len()) {
            let (p, q) = (pu[k], qi[k]);
            if k != fixed_u {
                pu[k] += lr * (e * q - reg * p);
            }
            if k != fixed_i {
                qi[k] += lr * (e * p - reg * q);
            }
        }
    }
}

/// The gradient of the squared error plus L2 over `batch` at fixed factors, per id.
pub fn batch_gradient(
    batch: &[(u32, u32, f32)],
    users: &HashMap<u32, Vec<f32>>,
    items: &HashMap<u32, Vec<f32>>,
    mean: f32,
    reg: f32,
    fixed: Option<(usize, usize)>,
) -> (HashMap<u32, Vec<f32>>, HashMap<u32, Vec<f32>>) {
    let (fixed_u, fixed_i) = fixed.unwrap_or((usize::MAX, usize::MAX));
    let (mut gu, mut gi): (HashMap<u32, Vec<f32>>, HashMap<u32, Vec<f32>>) = Default::default();
    for &(u, i, r) in batch {
        let (Some(pu), Some(qi)) = (users.get(&u), items.get(&i)) else {
            continue;
        };
        let e = r - mean - dot(pu, qi);
        let k = pu.len().min(qi.len());
        let a = gu.entry(u).or_insert_with(|| vec![0.0; k]);
        for c in (0..k).filter(|&c| c != fixed_u) {
            a[c] += -e * qi[c] + reg * pu[c];
        }
        let b = gi.entry(i).or_insert_with(|| vec![0.0; k]);
        for c in (0..k).filter(|&c| c != fixed_i) {
            b[c] += -e * pu[c] + reg * qi[c];
        }
    }
    (gu, gi)
}

/// Root mean squared error of `mean + p_u . q_i` on `entries`.
pub fn rmse(
    entries: &[(u32, u32, f32)],
    user: impl Fn(u32) -> Vec<f32>,
    item: impl Fn(u32) -> Vec<f32>,
    mean: f32,
) -> f64 {
    if entries.is_empty() {
        return 0.0;
    }
    let mut uc: HashMap<u32, Vec<f32>> = HashMap::new();
    let mut ic: HashMap<u32, Vec<f32>> = HashMap::new();
    let mut se = 0.0f64;
    for &(u, i, r) in entries {
        let p = uc.entry(u).or_insert_with(|| user(u));
        let q = ic.entry(i).or_insert_with(|| item(i));
        let e = f64::from(r - mean - dot(p, q));
        se += e * e;
    }
    (se / entries.len() as f64).sqrt()
}

/// One point of the convergence curve.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct RmsePoint {
    /// Seconds since the monitor started.
    pub seconds: f64,
    /// Min clock over shards (every worker completed this many clocks).
    pub clock: u64,
    /// Held-out RMSE.
    pub rmse: f64,
}

impl EvalPoint for RmsePoint {
    fn clock(&self) -> u64 {
        self.clock
    }
    fn headline(&self) -> (&'static str, f64) {
        ("rmse", self.rmse)
    }
}

/// What a run measured (`metrics.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsMfResult {
    /// The items table's consistency model.
    pub consistency: ConsistencyModel,
    /// Its staleness bound (0 for BSP, none for async).
    pub staleness_bound: Option<u32>,
    /// Workers.
    pub n_workers: u32,
    /// Shards.
    pub n_shards: u32,
    /// Training ratings.
    pub train_ratings: usize,
    /// Held-out ratings.
    pub test_ratings: usize,
    /// RMSE of the initial model (step 0 of the curve).
    pub initial_rmse: f64,
    /// RMSE of the final model.
    pub final_rmse: f64,
    /// The target, if any.
    pub target_rmse: Option<f64>,
    /// Whether the target was reached.
    pub reached_target: bool,
    /// Seconds until it was.
    pub time_to_target_s: Option<f64>,
    /// Min clock when the target was reached (or at the end).
    pub iterations: u64,
    /// Seconds of the whole run.
    pub wall_s: f64,
    /// Clocks each worker completed.
    pub worker_clocks: Vec<u64>,
    /// Observed staleness of the items reads.
    pub staleness: StalenessReport,
    /// The same per worker (in worker order).
    #[serde(default)]
    pub per_worker_staleness: Vec<StalenessReport>,
    /// Content staleness of the items reads: per read and other worker, the clocks of its
    /// updates the copy lacked.
    #[serde(default)]
    pub content_staleness: StalenessReport,
    /// Seconds each worker waited for rows.
    pub per_worker_wait_s: Vec<f64>,
    /// Bytes each worker's node sent over the whole run.
    #[serde(default)]
    pub per_worker_sent_bytes: Vec<u64>,
    /// Bytes each worker's node received over the whole run (replies, server pushes).
    #[serde(default)]
    pub per_worker_received_bytes: Vec<u64>,
    /// Seconds each worker spent in a clock's compute (emulated time included).
    #[serde(default)]
    pub per_worker_compute_s: Vec<f64>,
    /// What each worker's reads cost (round trips, time blocked).
    #[serde(default)]
    pub per_worker_reads: Vec<ReadStats>,
    /// Seconds each worker ran (first step to its report).
    #[serde(default)]
    pub per_worker_run_s: Vec<f64>,
    /// Workers that joined or left the running job, by clock (none with a fixed membership).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<WorkerChange>,
    /// The convergence curve.
    pub curve: Vec<RmsePoint>,
}

impl PsMfResult {
    /// The metrics: a record per evaluation (step: the slowest worker's clock).
    pub fn run_metrics(&self, cfg: &PsMfSettings) -> petrel_ml::job::RunMetrics {
        let mut m = petrel_ml::job::RunMetrics::new(PsMf::NAME, cfg, self, self.wall_s);
        for p in &self.curve {
            m.record(p.clock, p.seconds, &[("test_rmse", p.rmse)]);
        }
        m.finals(&[
            ("test_rmse", self.final_rmse),
            ("clocks", self.iterations as f64),
        ]);
        m.converged = self.reached_target;
        m.stop_reason = match (self.target_rmse, self.reached_target) {
            (Some(t), true) => format!("test RMSE reached target_rmse {t}"),
            (Some(t), false) => format!(
                "stopped at the clock or time limit before target_rmse {t}: test RMSE {:.4}",
                self.final_rmse
            ),
            (None, _) => format!("ran {} clocks", cfg.clocks()),
        };
        m
    }
}

/// The learned model (`model.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsMfModel {
    /// Factor rank.
    pub rank: u32,
    /// Mean training rating.
    pub global_mean: f32,
    /// Original user ids (data files only).
    pub user_ids: Option<Vec<String>>,
    /// Original item ids (data files only).
    pub item_ids: Option<Vec<String>>,
    /// User factors.
    pub users: Vec<Vec<f32>>,
    /// Item factors.
    pub items: Vec<Vec<f32>>,
    /// User biases (with `biases`; absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_bias: Vec<f32>,
    /// Item biases (with `biases`; absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_bias: Vec<f32>,
}

impl PsMfModel {
    /// The saved model `petrel eval` and `petrel predict` read.
    pub fn saved(&self, cfg: &PsMfSettings) -> SavedModel {
        let labels = |given: &Option<Vec<String>>, n: usize| {
            given
                .clone()
                .unwrap_or_else(|| (0..n).map(|i| i.to_string()).collect())
        };
        SavedModel::new(
            PsMf::NAME,
            cfg,
            ModelParams::Factors(FactorModel {
                global_mean: self.global_mean,
                user_ids: labels(&self.user_ids, self.users.len()),
                item_ids: labels(&self.item_ids, self.items.len()),
                user_factors: self.users.clone(),
                item_factors: self.items.clone(),
                user_bias: self.user_bias.clone(),
                item_bias: self.item_bias.clone(),
            }),
        )
    }
}

/// What an in-process run returns: the metrics and the model.
#[derive(Debug, Clone)]
pub struct PsMfOutcome {
    /// `metrics.json`.
    pub metrics: PsMfResult,
    /// `model.json`.
    pub model: PsMfModel,
}
