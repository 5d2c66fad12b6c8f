//! ps-lr's data, softmax gradient, metrics and model.

use super::*;

/// Samples as sparse rows with class indices.
#[derive(Debug, Clone)]
pub struct PsLrData {
    /// Features per sample (the bias row is row `n_features`).
    pub n_features: usize,
    /// Original label of class `c`.
    pub class_labels: Vec<f32>,
    /// Training samples.
    pub train: Vec<(SparseRow, usize)>,
    /// Held-out samples.
    pub test: Vec<(SparseRow, usize)>,
}

impl PsLrData {
    /// Loads (or generates) the samples, maps labels to classes and splits them.
    pub fn load(cfg: &PsLrSettings) -> Result<PsLrData, PsError> {
        let invalid = |reason: String| PsError::InvalidConfig {
            app: PsLr::NAME,
            reason,
        };
        let ds: SparseDataset = match &cfg.data {
            Some(p) => load_libsvm(p)?,
            None => {
                let params = ClassificationParams {
                    n_samples: cfg.synthetic_samples,
                    n_features: cfg.synthetic_features,
                    n_classes: cfg.synthetic_classes,
                    margin: 0.5,
                    seed: cfg.seed,
                };
                match cfg.synthetic_nnz {
                    0 => separable_classification(&params)?.dataset,
                    nnz => power_law_classification(&params, nnz, cfg.synthetic_exponent)?.dataset,
                }
            }
        };
        if ds.rows.is_empty() {
            return Err(invalid("no samples".into()));
        }
        if let Some((row, l)) = ds.labels.iter().enumerate().find(|(_, l)| l.fract() != 0.0) {
            return Err(invalid(format!(
                "row {}: label {l} is not a class id; ps-lr needs integer class labels (regression targets belong to lasso)",
                row + 1
            )));
        }
        let mut labels: Vec<f32> = ds.labels.clone();
        labels.sort_by(f32::total_cmp);
        labels.dedup();
        if labels.len() < 2 {
            return Err(invalid(format!(
                "need at least 2 classes, found {}",
                labels.len()
            )));
        }
        let class_of = |l: f32| labels.iter().position(|&x| x == l).unwrap_or(0);
        let mut all: Vec<(SparseRow, usize)> = ds
            .rows
            .iter()
            .cloned()
            .zip(ds.labels.iter().map(|&l| class_of(l)))
            .collect();
        all.shuffle(&mut StdRng::seed_from_u64(cfg.seed ^ 0x1f));
        let test = match &cfg.test_data {
            Some(path) => {
                let held = load_libsvm(path)?;
                let mut test = Vec::with_capacity(held.rows.len());
                for (row, (x, l)) in held.rows.into_iter().zip(held.labels).enumerate() {
                    let class = labels.iter().position(|&c| c == l).ok_or_else(|| {
                        invalid(format!(
                            "{} row {}: label {l} is not one of the training classes {labels:?}",
                            path.display(),
                            row + 1
                        ))
                    })?;
                    test.push((x, class));
                }
                test
            }
            None => {
                let n_test =
                    ((cfg.test_fraction.clamp(0.0, 0.9)) * all.len() as f64).round() as usize;
                all.split_off(all.len() - n_test)
            }
        };
        Ok(PsLrData {
            n_features: ds.n_features,
            class_labels: labels,
            train: all,
            test,
        })
    }

    /// Number of classes.
    pub fn n_classes(&self) -> usize {
        self.class_labels.len()
    }
}

/// Softmax probabilities of a sample given the weight rows (`bias` = the bias row).
pub fn probabilities(
    x: &SparseRow,
    rows: &HashMap<u32, Vec<f32>>,
    bias: u32,
    k: usize,
) -> Vec<f64> {
    let mut z: Vec<f64> = rows.get(&bias).map_or_else(
        || vec![0.0; k],
        |b| b.iter().map(|&v| f64::from(v)).collect(),
    );
    for (&j, &v) in x.indices.iter().zip(&x.values) {
        if let Some(w) = rows.get(&j) {
            for (zc, wc) in z.iter_mut().zip(w) {
                *zc += f64::from(v) * f64::from(*wc);
            }
        }
    }
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut s = 0.0;
    for zc in z.iter_mut() {
        *zc = (*zc - m).exp();
        s += *zc;
    }
    z.iter().map(|e| e / s).collect()
}

/// Mean softmax cross-entropy gradient of `batch`, per weight row.
pub fn gradient(
    batch: &[&(SparseRow, usize)],
    rows: &HashMap<u32, Vec<f32>>,
    bias: u32,
    k: usize,
) -> HashMap<u32, Vec<f32>> {
    let mut g: HashMap<u32, Vec<f32>> = HashMap::new();
    let n = batch.len().max(1) as f32;
    for (x, y) in batch.iter().map(|s| (&s.0, s.1)) {
        let p = probabilities(x, rows, bias, k);
        let err: Vec<f32> = (0..k)
            .map(|c| (p[c] - if c == y { 1.0 } else { 0.0 }) as f32 / n)
            .collect();
        for (&j, &v) in x
            .indices
            .iter()
            .zip(&x.values)
            .chain(std::iter::once((&bias, &1.0)))
        {
            let e = g.entry(j).or_insert_with(|| vec![0.0; k]);
            for (gc, ec) in e.iter_mut().zip(&err) {
                *gc += v * ec;
            }
        }
    }
    g
}

/// (accuracy, mean log-loss) on `samples`.
pub fn evaluate(
    samples: &[(SparseRow, usize)],
    rows: &HashMap<u32, Vec<f32>>,
    bias: u32,
    k: usize,
) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let (mut correct, mut loss) = (0usize, 0.0f64);
    for (x, y) in samples {
        let p = probabilities(x, rows, bias, k);
        let best = (0..k).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap_or(0);
        correct += usize::from(best == *y);
        loss -= p[*y].max(1e-12).ln();
    }
    (
        correct as f64 / samples.len() as f64,
        loss / samples.len() as f64,
    )
}

/// One point of the convergence curve.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PsLrPoint {
    /// Seconds since the monitor started.
    pub seconds: f64,
    /// Min clock over the shards.
    pub clock: u64,
    /// Held-out accuracy.
    pub accuracy: f64,
    /// Held-out mean log-loss.
    pub log_loss: f64,
}

impl EvalPoint for PsLrPoint {
    fn clock(&self) -> u64 {
        self.clock
    }
    fn headline(&self) -> (&'static str, f64) {
        ("log_loss", self.log_loss)
    }
}

/// What a run measured (`metrics.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PsLrResult {
    /// The weights table's consistency model.
    pub consistency: ConsistencyModel,
    /// Workers.
    pub n_workers: u32,
    /// Shards.
    pub n_shards: u32,
    /// Training samples.
    pub train_samples: usize,
    /// Held-out samples.
    pub test_samples: usize,
    /// Features.
    pub n_features: usize,
    /// Classes.
    pub n_classes: usize,
    /// Log-loss of the initial model (step 0 of the curve: all weights zero).
    pub initial_log_loss: f64,
    /// Log-loss at the last evaluation.
    pub final_log_loss: f64,
    /// Accuracy at the last evaluation.
    pub final_accuracy: f64,
    /// The target log-loss, if any.
    pub target_log_loss: Option<f64>,
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
    /// Observed staleness of the weight reads.
    pub staleness: StalenessReport,
    /// Content staleness of the weight reads: per read and other worker, the clocks of its
    /// updates the copy lacked.
    #[serde(default)]
    pub content_staleness: StalenessReport,
    /// What each worker's reads cost (round trips, time blocked).
    #[serde(default)]
    pub per_worker_reads: Vec<ReadStats>,
    /// Workers that joined or left the running job, by clock (none with a fixed membership).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<WorkerChange>,
    /// The convergence curve.
    pub curve: Vec<PsLrPoint>,
}

impl PsLrResult {
    /// The metrics: a record per evaluation (step: the slowest worker's clock).
    pub fn run_metrics(&self, cfg: &PsLrSettings) -> petrel_ml::job::RunMetrics {
        let mut m = petrel_ml::job::RunMetrics::new(PsLr::NAME, cfg, self, self.wall_s);
        for p in &self.curve {
            m.record(
                p.clock,
                p.seconds,
                &[("test_accuracy", p.accuracy), ("test_log_loss", p.log_loss)],
            );
        }
        m.finals(&[
            ("test_accuracy", self.final_accuracy),
            ("test_log_loss", self.final_log_loss),
        ]);
        m.converged = false;
        m.stop_reason = format!(
            "ran max_clocks = {} (SGD has no convergence test)",
            cfg.max_clocks
        );
        m
    }
}

/// The learned model (`model.json`): `n_features` weight rows then the bias row.
pub type PsLrModel = SoftmaxModel;

/// What an in-process run returns: the metrics and the model.
#[derive(Debug, Clone)]
pub struct PsLrOutcome {
    /// `metrics.json`.
    pub metrics: PsLrResult,
    /// `model.json`.
    pub model: PsLrModel,
}
