//! Multinomial logistic regression by mini-batch SGD on the parameter server.
//!
//! One PS table `weights` (id 0): row `j` holds the `n_classes` weights of feature `j`, row
//! `n_features` the biases. The optimizer lives on the shards: the table uses the server-side
//! `Sgd { learning_rate }` rule, so workers send raw gradients (`batch_inc`) and read-my-writes
//! applies `-learning_rate * gradient` locally. Worker `w` owns the training samples
//! `i % n_workers == w`; per clock it takes its next mini-batch, reads the rows of the features
//! present in it (`get_many`, under the job's consistency model), computes the softmax
//! cross-entropy gradient and calls `clock()`. A monitor snapshots the shards every `eval_ms`
//! and records held-out accuracy and log-loss; at the end it writes `model.json` (weights
//! `n_features + 1` rows x `n_classes`, and the class labels) and `metrics.json`.
//!
//! Data: LIBSVM files (`label idx:val ...`; labels may be any numbers, mapped in sorted order to
//! classes) or synthetic separable classes.

use crate::apps::mf::{WorkerDone, open_monitor, serve_shards, take_monitor_result};
use crate::core::stats::{StalenessReport, StalenessStats};
use crate::core::types::{Consistency, Row, RowId, TableId, TableSpec, UpdateRuleSpec};
use crate::shells::{self, PsClient, PsLayout, ShardQuery, TablesBuilder};
use petrel_actors::{Cluster, Node, NodeContext};
use petrel_messages::Priority;
use petrel_ml::data::libsvm::{SparseDataset, SparseRow, load_libsvm};
use petrel_ml::data::synthetic::{ClassificationParams, separable_classification};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const WEIGHTS: TableId = TableId(0);
const MONITOR_ACTOR: &str = "ps-lr-monitor";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LrConfig {
    /// LIBSVM file; synthetic separable classes when unset.
    pub data: Option<PathBuf>,
    pub synthetic_samples: usize,
    pub synthetic_features: usize,
    pub synthetic_classes: usize,
    pub seed: u64,
    pub test_fraction: f64,
    pub learning_rate: f32,
    pub batch_size: usize,
    /// "bsp", "ssp", "essp" or "async".
    pub consistency: String,
    pub staleness: u32,
    pub max_clocks: u64,
    pub eval_ms: u64,
    pub out: Option<PathBuf>,
}

impl Default for LrConfig {
    fn default() -> Self {
        Self {
            data: None,
            synthetic_samples: 2000,
            synthetic_features: 20,
            synthetic_classes: 3,
            seed: 11,
            test_fraction: 0.2,
            learning_rate: 0.5,
            batch_size: 50,
            consistency: "ssp".into(),
            staleness: 2,
            max_clocks: 100,
            eval_ms: 100,
            out: None,
        }
    }
}

/// Samples as sparse rows with class indices.
#[derive(Debug, Clone)]
pub struct LrData {
    pub n_features: usize,
    /// Original label of class `c`.
    pub class_labels: Vec<f32>,
    pub train: Vec<(SparseRow, usize)>,
    pub test: Vec<(SparseRow, usize)>,
}

impl LrData {
    pub fn load(cfg: &LrConfig) -> Result<LrData, String> {
        let ds: SparseDataset = match &cfg.data {
            Some(p) => load_libsvm(p).map_err(|e| e.to_string())?,
            None => {
                separable_classification(&ClassificationParams {
                    n_samples: cfg.synthetic_samples,
                    n_features: cfg.synthetic_features,
                    n_classes: cfg.synthetic_classes,
                    margin: 0.5,
                    seed: cfg.seed,
                })
                .map_err(|e| e.to_string())?
                .dataset
            }
        };
        if ds.rows.is_empty() {
            return Err("no samples".into());
        }
        let mut labels: Vec<f32> = ds.labels.clone();
        labels.sort_by(f32::total_cmp);
        labels.dedup();
        if labels.len() < 2 {
            return Err(format!("need at least 2 classes, found {}", labels.len()));
        }
        let class_of = |l: f32| labels.iter().position(|&x| x == l).unwrap_or(0);
        let mut all: Vec<(SparseRow, usize)> = ds
            .rows
            .iter()
            .cloned()
            .zip(ds.labels.iter().map(|&l| class_of(l)))
            .collect();
        all.shuffle(&mut StdRng::seed_from_u64(cfg.seed ^ 0x1f));
        let n_test = ((cfg.test_fraction.clamp(0.0, 0.9)) * all.len() as f64).round() as usize;
        let test = all.split_off(all.len() - n_test);
        Ok(LrData {
            n_features: ds.n_features,
            class_labels: labels,
            train: all,
            test,
        })
    }

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

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LrPoint {
    pub seconds: f64,
    pub clock: u64,
    pub accuracy: f64,
    pub log_loss: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LrResult {
    pub consistency: String,
    pub n_workers: u32,
    pub n_shards: u32,
    pub train_samples: usize,
    pub test_samples: usize,
    pub n_features: usize,
    pub n_classes: usize,
    pub initial_log_loss: f64,
    pub final_log_loss: f64,
    pub final_accuracy: f64,
    pub wall_s: f64,
    pub worker_clocks: Vec<u64>,
    pub staleness: StalenessReport,
    pub curve: Vec<LrPoint>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LrModel {
    pub class_labels: Vec<f32>,
    /// `n_features` weight rows then the bias row, each `n_classes` wide.
    pub weights: Vec<Vec<f32>>,
}

pub struct LrJob {
    pub cfg: LrConfig,
    pub data: LrData,
    pub layout: PsLayout,
    pub monitor_node: String,
    pub result: Mutex<Option<LrResult>>,
}

impl LrJob {
    fn tables(&self) -> Result<Vec<TableSpec>, String> {
        let c = match self.cfg.consistency.to_ascii_lowercase().as_str() {
            "bsp" => Consistency::Bsp,
            "ssp" => Consistency::Ssp {
                staleness: self.cfg.staleness,
            },
            "essp" => Consistency::Essp {
                staleness: self.cfg.staleness,
            },
            "async" => Consistency::Async,
            o => return Err(format!("unknown consistency {o:?}")),
        };
        TablesBuilder::new()
            .dense("weights", self.data.n_classes() as u32, c)
            .rule(UpdateRuleSpec::Sgd {
                learning_rate: self.cfg.learning_rate,
            })
            .build()
            .map_err(|e| e.to_string())
    }

    fn bias(&self) -> u32 {
        self.data.n_features as u32
    }

    fn weights(&self, states: &[shells::ShardState]) -> HashMap<u32, Vec<f32>> {
        let k = self.data.n_classes();
        shells::merge_tables(states)
            .remove(&WEIGHTS)
            .unwrap_or_default()
            .into_iter()
            .map(|(r, row)| (r.0 as u32, row.to_dense(k)))
            .collect()
    }
}

async fn shard_role(ctx: NodeContext, job: Arc<LrJob>) -> Result<(), String> {
    serve_shards(&ctx, &job.layout, job.tables()?).await
}

async fn worker_role(ctx: NodeContext, job: Arc<LrJob>) -> Result<(), String> {
    shells::wait_for_shards(&ctx.node, &job.layout, Duration::from_secs(30)).await?;
    let mut ws = Vec::new();
    for w in job.layout.workers_on(&ctx.spec.name) {
        let c =
            PsClient::start(&ctx.node, &job.layout, w, job.tables()?).map_err(|e| e.to_string())?;
        ws.push(run_worker(ctx.node.clone(), job.clone(), c));
    }
    for r in futures::future::join_all(ws).await {
        r?;
    }
    Ok(())
}

async fn run_worker(node: Node, job: Arc<LrJob>, c: PsClient) -> Result<(), String> {
    let w = c.worker();
    let nw = job.layout.n_workers() as usize;
    let mine: Vec<&(SparseRow, usize)> = job
        .data
        .train
        .iter()
        .enumerate()
        .filter(|(i, _)| i % nw == w as usize)
        .map(|(_, s)| s)
        .collect();
    let (k, bias, b) = (job.data.n_classes(), job.bias(), job.cfg.batch_size.max(1));
    let e = |e: shells::ClientError| e.to_string();
    while c.current_clock() < job.cfg.max_clocks && !mine.is_empty() {
        let start = (c.current_clock() as usize * b) % mine.len();
        let batch: Vec<&(SparseRow, usize)> = (0..b.min(mine.len()))
            .map(|i| mine[(start + i) % mine.len()])
            .collect();
        let feats: Vec<u32> = batch
            .iter()
            .flat_map(|s| s.0.indices.iter().copied())
            .chain(std::iter::once(bias))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let ids: Vec<RowId> = feats.iter().map(|&j| RowId(u64::from(j))).collect();
        let got = c.get_many(WEIGHTS, &ids).await.map_err(e)?;
        let rows: HashMap<u32, Vec<f32>> = feats
            .iter()
            .zip(got)
            .map(|(&j, r)| (j, r.to_dense(k)))
            .collect();
        for (j, g) in gradient(&batch, &rows, bias, k) {
            c.batch_inc(WEIGHTS, RowId(u64::from(j)), &Row::Dense(g))
                .map_err(e)?;
        }
        c.clock().map_err(e)?;
        tokio::task::yield_now().await;
    }
    c.leave().map_err(e)?;
    let done = WorkerDone {
        worker: w,
        clocks: c.current_clock(),
        staleness: c.table_stats(WEIGHTS),
        compute_s: 0.0,
        wait_s: 0.0,
    };
    node.actor_at::<WorkerDone>(&job.monitor_node, MONITOR_ACTOR)
        .map_err(|e| e.to_string())?
        .ask(done, Priority::HIGH, node.default_timeout())
        .await
        .map_err(|e| format!("worker {w}: report to monitor: {e}"))
}

async fn monitor_role(ctx: NodeContext, job: Arc<LrJob>) -> Result<(), String> {
    let (reports, notify) = open_monitor::<WorkerDone>(&ctx.node, MONITOR_ACTOR)?;
    shells::wait_for_shards(&ctx.node, &job.layout, Duration::from_secs(30)).await?;
    let (k, bias) = (job.data.n_classes(), job.bias());
    let timeout = ctx.node.default_timeout();
    let start = Instant::now();
    let mut curve = Vec::new();
    let n_workers = job.layout.n_workers() as usize;
    let weights = loop {
        let all_done = reports.borrow().len() >= n_workers;
        let states =
            shells::snapshot_all(&ctx.node, &job.layout, ShardQuery::Snapshot, timeout).await?;
        let wts = job.weights(&states);
        let (accuracy, log_loss) = evaluate(&job.data.test, &wts, bias, k);
        curve.push(LrPoint {
            seconds: start.elapsed().as_secs_f64(),
            clock: states.iter().map(|s| s.min_clock).min().unwrap_or(0),
            accuracy,
            log_loss,
        });
        if all_done {
            break wts;
        }
        let n = notify.notified();
        let _ = tokio::time::timeout(Duration::from_millis(job.cfg.eval_ms.max(1)), n).await;
    };
    let mut reps = reports.borrow().clone();
    reps.sort_by_key(|r| r.worker);
    let mut st = StalenessStats::new();
    for r in &reps {
        st.merge(&r.staleness);
    }
    let (first, last) = (curve.first().copied(), curve.last().copied());
    let result = LrResult {
        consistency: job.cfg.consistency.to_ascii_lowercase(),
        n_workers: job.layout.n_workers(),
        n_shards: job.layout.n_shards(),
        train_samples: job.data.train.len(),
        test_samples: job.data.test.len(),
        n_features: job.data.n_features,
        n_classes: k,
        initial_log_loss: first.map_or(0.0, |p| p.log_loss),
        final_log_loss: last.map_or(0.0, |p| p.log_loss),
        final_accuracy: last.map_or(0.0, |p| p.accuracy),
        wall_s: start.elapsed().as_secs_f64(),
        worker_clocks: reps.iter().map(|r| r.clocks).collect(),
        staleness: st.report(),
        curve,
    };
    if let Some(out) = &job.cfg.out {
        let model = LrModel {
            class_labels: job.data.class_labels.clone(),
            weights: (0..=bias)
                .map(|j| weights.get(&j).cloned().unwrap_or_else(|| vec![0.0; k]))
                .collect(),
        };
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let write = |name: &str, text: String| {
            let p = out.join(name);
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
        };
        write(
            "model.json",
            serde_json::to_string(&model).map_err(|e| e.to_string())?,
        )?;
        write(
            "metrics.json",
            serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?,
        )?;
    }
    if let Ok(mut slot) = job.result.lock() {
        *slot = Some(result);
    }
    Ok(())
}

/// Runs logistic regression on an in-process cluster (QUIC on 127.0.0.1 or memory).
pub fn run_local(
    cfg: LrConfig,
    shards: usize,
    workers: usize,
    transport: &str,
) -> Result<LrResult, String> {
    let settings = crate::apps::mf::local_topology(
        "ps-lr",
        shards,
        workers,
        transport
            .parse()
            .map_err(|e: petrel_actors::NodeError| e.to_string())?,
    )
    .with(|s| s.cluster.failure_timeout_ms = 10_000)
    .build()
    .map_err(|e| e.to_string())?;
    let layout = PsLayout {
        shard_nodes: (0..shards.max(1)).map(|s| format!("shard-{s}")).collect(),
        worker_nodes: (0..workers.max(1)).map(|w| format!("worker-{w}")).collect(),
    };
    let data = LrData::load(&cfg)?;
    let job = Arc::new(LrJob {
        cfg,
        data,
        layout,
        monitor_node: "shard-0".into(),
        result: Mutex::new(None),
    });
    job.tables()?;
    let (j1, j2, j3) = (job.clone(), job.clone(), job.clone());
    Cluster::new(settings)
        .role("ps-shard", move |ctx| Box::pin(shard_role(ctx, j1.clone())))
        .role("ps-worker", move |ctx| {
            Box::pin(worker_role(ctx, j2.clone()))
        })
        .role("ps-monitor", move |ctx| {
            Box::pin(monitor_role(ctx, j3.clone()))
        })
        .run_in_process()
        .map_err(|e| e.to_string())?;
    take_monitor_result(&job.result)
}

/// `petrel train ps-lr`.
#[derive(clap::Args, Debug, Clone)]
pub struct TrainArgs {
    /// LIBSVM file (`label idx:val ...`); synthetic separable classes when omitted.
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value = "out")]
    pub out: PathBuf,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    #[arg(long, default_value = "ssp")]
    pub consistency: String,
    #[arg(long, default_value_t = 2)]
    pub staleness: u32,
    #[arg(long, default_value_t = 0.5)]
    pub learning_rate: f32,
    #[arg(long, default_value_t = 50)]
    pub batch_size: usize,
    #[arg(long, default_value_t = 200)]
    pub clocks: u64,
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,
    #[arg(long, default_value = "quic")]
    pub transport: String,
}

pub fn train_cli(a: TrainArgs) -> Result<(), String> {
    let cfg = LrConfig {
        data: a.data,
        test_fraction: a.test_fraction,
        learning_rate: a.learning_rate,
        batch_size: a.batch_size,
        consistency: a.consistency,
        staleness: a.staleness,
        max_clocks: a.clocks,
        eval_ms: 250,
        out: Some(a.out.clone()),
        ..LrConfig::default()
    };
    let r = run_local(cfg, a.shards, a.workers, &a.transport)?;
    println!(
        "logistic regression ({}): {} classes, {} train / {} test samples, test log-loss {:.4} -> {:.4}, accuracy {:.4}; wrote {}/model.json and metrics.json",
        r.consistency,
        r.n_classes,
        r.train_samples,
        r.test_samples,
        r.initial_log_loss,
        r.final_log_loss,
        r.final_accuracy,
        a.out.display()
    );
    Ok(())
}
