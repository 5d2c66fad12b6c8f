//! Built-in P3 roles (`p3-worker`, `p3-shard`) for separate `petrel node` processes.
//!
//! The in-process bench hands the job to its roles through closures
//! ([`crate::kit::run_cluster`]); a node process reads it from `[app.p3]` instead
//! ([`P3Settings`]). The model is either the [`EmulatedModel`] of a profile (built-in
//! name or file) scaled by `scale` on a device of `device_gflops`, exactly as `petrel
//! bench p3` builds it, or, when `net` names one, a real candle model
//! ([`crate::models::nets`]) trained by [`CandleStageModel`](crate::models::CandleStageModel)
//! on `train_data`, evaluated by worker 0 on `test_data` and saved to `model_out` (the
//! `candle` feature; without it such a job is refused). Each worker writes its report as
//! JSON ([`WorkerReportFile`]) to `report_dir/p3-worker-{i}.json`, which the bench reads.
//! The range checks of `[app.p3]` ([`P3Settings::validate`]) run before any node starts
//! (`petrel train p3`, and `Cluster::check_settings` for `petrel run` and `petrel node`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use petrel_actors::{Cluster, NodeContext, Settings};
use petrel_ml::dnn::FlatSgdMomentum;
use petrel_ml::job::{InvalidSetting, SettingChecks};
use petrel_ml::model::NetworkModel;
use serde::{Deserialize, Serialize};

use crate::core::{Mode, ModelProfile, P3CoreError, RosterChange};
use crate::error::P3Error;
use crate::kit::StepStats;
use crate::kit::{P3Job, P3WorkerReport};
use crate::models::EmulatedModel;
use crate::shells::{SHARD_ROLE, WORKER_ROLE, shard_role, worker_role};
use petrel_ml::dnn::cifar::{read_cifar10_files, synthetic_cifar};
use petrel_ml::dnn::data::{Dataset, load_idx_dataset};

/// `[app.p3]`: one P3 job. A bad `mode` or an unknown key is rejected when the section is
/// read, a value out of range by [`P3Settings::validate`].
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct P3Settings {
    /// sequential, fifo or p3.
    pub mode: Mode,
    /// Built-in profile name (vgg19, resnet50, sockeye) or a profile file.
    pub model: String,
    /// Factor applied to the profile's parameter counts and FLOPs.
    pub scale: f64,
    /// Emulated device speed (GFLOP/s) for the scaled profile.
    pub device_gflops: f64,
    /// Samples per worker per iteration.
    pub batch: usize,
    /// Parameters per slice in p3 mode.
    pub slice_size: u64,
    /// Data-parallel workers.
    pub workers: usize,
    /// Server shards.
    pub shards: usize,
    /// Iterations including warm-up.
    pub iterations: u64,
    /// SGD learning rate.
    pub lr: f32,
    /// SGD momentum.
    pub momentum: f32,
    /// How long a push waits for its slice's new values, in ms.
    pub ask_timeout_ms: u64,
    /// Where workers write `p3-worker-{i}.json`.
    pub report_dir: PathBuf,
    /// A real candle model to train instead of the emulated profile: `mlp`, `lenet`,
    /// `resnet18` or `vgg11` (empty: emulate `model`).
    pub net: String,
    /// Channel width of `resnet18`/`vgg11` (64 is the published layout; the hidden layer
    /// of `mlp` is `8 * width`).
    pub width: usize,
    /// Seed of the real model's initial parameters (every node derives the same ones).
    pub seed: u64,
    /// Training data of a real model: `synthetic:N` (CIFAR-shaped, seeded by `seed`),
    /// `cifar:FILE[,FILE…]` (CIFAR-10 binary) or `idx:IMAGES,LABELS` (MNIST format).
    pub train_data: String,
    /// Test data in the same syntax (`synthetic:N` draws N more examples of the same
    /// classes); empty: no evaluation.
    pub test_data: String,
    /// Where worker 0 saves the trained real model ([`save_model`]); empty: not saved.
    pub model_out: PathBuf,
    /// Checkpoint directory every node sees ([`crate::checkpoint`]); empty: no checkpoints.
    pub checkpoint_dir: PathBuf,
    /// Iterations between checkpoints (0 = none written).
    pub checkpoint_every: u64,
    /// Start from the newest valid checkpoint in `checkpoint_dir` (an error if none is).
    pub resume: bool,
}

impl Default for P3Settings {
    fn default() -> Self {
        P3Settings {
            mode: Mode::P3,
            model: "vgg19".into(),
            scale: 1e-3,
            device_gflops: 100.0,
            batch: 32,
            slice_size: 8192,
            workers: 2,
            shards: 2,
            iterations: 10,
            lr: 0.01,
            momentum: 0.9,
            ask_timeout_ms: 120_000,
            report_dir: PathBuf::from("p3-reports"),
            net: String::new(),
            width: 16,
            seed: 1,
            train_data: "synthetic:2048".into(),
            test_data: String::new(),
            model_out: PathBuf::new(),
            checkpoint_dir: PathBuf::new(),
            checkpoint_every: 0,
            resume: false,
        }
    }
}

/// The largest SGD learning rate accepted. Momentum SGD on these networks diverges well
/// below it; anything larger is a typo (`1e3` for `1e-3`), not a tuning.
pub const MAX_LR: f32 = 10.0;

/// The most workers or shards of one job: each is a node (a process with `petrel train p3`).
pub const MAX_NODES: usize = 1024;

impl P3Settings {
    /// Every value in range (keys as in `[app.p3]`): at least one worker, shard, iteration
    /// and sample; `lr` finite in (0, [`MAX_LR`]]; `momentum` finite in [0, 1) (at 1 or
    /// above the velocity never decays).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        for (key, n) in [("workers", self.workers), ("shards", self.shards)] {
            c.at_least(key, n, 1);
            c.at_most(key, n, MAX_NODES, "one node each");
        }
        c.at_least("iterations", self.iterations, 1);
        c.at_least("batch", self.batch, 1);
        c.at_least("slice_size", self.slice_size, 1);
        c.require(
            self.lr.is_finite() && self.lr > 0.0 && self.lr <= MAX_LR,
            "lr",
            self.lr,
            "must be a finite number in (0, 10]",
        );
        c.require(
            self.momentum.is_finite() && (0.0..1.0).contains(&self.momentum),
            "momentum",
            self.momentum,
            "must be a finite number in [0, 1)",
        );
        c.positive("scale", self.scale);
        c.positive("device_gflops", self.device_gflops);
        c.at_least("ask_timeout_ms", self.ask_timeout_ms, 1);
        if !self.net.is_empty() {
            c.at_least("width", self.width, 1);
        }
        c.finish()
    }
}

/// Loads a profile: a path when `model` has an extension, else a built-in name.
pub fn load_profile(model: &str) -> Result<ModelProfile, P3CoreError> {
    let p = Path::new(model);
    if p.extension().is_some() {
        ModelProfile::load(p)
    } else {
        ModelProfile::builtin(model)
    }
}

impl P3Settings {
    /// The scaled profile and the job every node of the cluster derives from it (the
    /// settings first checked by [`P3Settings::validate`]).
    pub fn job(&self, settings: &Settings) -> Result<(P3Job, ModelProfile), P3Error> {
        self.validate().map_err(|e| P3Error::Config {
            field: "[app.p3]",
            detail: e.to_string(),
        })?;
        let profile = load_profile(&self.model)?.scaled(self.scale);
        let initial = match network::initial(self)? {
            Some(initial) => initial,
            None => profile
                .layers
                .iter()
                .map(|l| vec![0.5; l.params as usize])
                .collect(),
        };
        let job = P3Job {
            mode: self.mode,
            slice_size: self.slice_size,
            n_workers: self.workers,
            n_shards: self.shards,
            iterations: self.iterations,
            opt: FlatSgdMomentum::new(self.lr, self.momentum),
            initial: Arc::new(initial),
            net: settings.net.clone(),
            transport: settings.cluster.transport,
            ask_timeout: Duration::from_millis(self.ask_timeout_ms.max(1)),
            checkpoint: self.checkpoint(),
        };
        job.plan()?;
        Ok((job, profile))
    }

    /// The job's checkpoint settings (`None` without a `checkpoint_dir`). The tag names
    /// what a checkpoint must share with a job resuming it besides the cluster and
    /// optimiser: the model and its data.
    pub fn checkpoint(&self) -> Option<crate::checkpoint::CheckpointConfig> {
        if self.checkpoint_dir.as_os_str().is_empty() {
            return None;
        }
        let tag = if self.net.is_empty() {
            format!(
                "emulated {} scale {} batch {}",
                self.model, self.scale, self.batch
            )
        } else {
            format!(
                "net {} width {} seed {} batch {} train {}",
                self.net, self.width, self.seed, self.batch, self.train_data
            )
        };
        Some(crate::checkpoint::CheckpointConfig {
            dir: self.checkpoint_dir.clone(),
            every: self.checkpoint_every,
            resume: self.resume,
            tag,
        })
    }

    /// Checks that `net` is empty (the job emulates a profile) or names a real model this
    /// build can train.
    pub fn check_net(&self) -> Result<(), P3Error> {
        network::check(self)
    }

    /// Shape of one training example: `[3, 32, 32]` for CIFAR and synthetic data, `[1,
    /// rows, cols]` from an IDX images file's header.
    pub fn input_shape(&self) -> Result<Vec<usize>, P3Error> {
        if self.net.is_empty() {
            return Ok(vec![3, 32, 32]);
        }
        Ok(
            match DataSpec::parse("[app.p3] train_data", &self.train_data)? {
                DataSpec::Idx(images, _) => {
                    let i = petrel_ml::dnn::data::read_idx_images(images)?;
                    vec![1, i.rows, i.cols]
                }
                _ => vec![3, 32, 32],
            },
        )
    }

    /// The data sets of a real model (training, and test when `test_data` is set).
    pub fn data(&self) -> Result<(Dataset, Option<Dataset>), P3Error> {
        let train = DataSpec::parse("[app.p3] train_data", &self.train_data)?;
        let test = if self.test_data.is_empty() {
            None
        } else {
            Some(DataSpec::parse("[app.p3] test_data", &self.test_data)?)
        };
        load_data(&train, test.as_ref(), self.seed)
    }
}

/// Where a data spec's examples come from (see [`P3Settings::train_data`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSpec {
    /// `synthetic:N`: N CIFAR-shaped examples of 10 template classes.
    Synthetic(usize),
    /// `cifar:FILE[,FILE…]`: CIFAR-10 binary files.
    Cifar(Vec<PathBuf>),
    /// `idx:IMAGES,LABELS`: an MNIST-format pair.
    Idx(PathBuf, PathBuf),
}

impl DataSpec {
    /// Parses `spec`; `field` names the setting in errors.
    pub fn parse(field: &'static str, spec: &str) -> Result<Self, P3Error> {
        let bad = |detail: String| P3Error::Config { field, detail };
        // Without a colon, no kind matches.
        let (kind, rest) = spec.split_once(':').unwrap_or_default();
        let files: Vec<PathBuf> = rest
            .split(',')
            .filter(|f| !f.is_empty())
            .map(PathBuf::from)
            .collect();
        match kind {
            "synthetic" => rest
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .map(DataSpec::Synthetic)
                .ok_or_else(|| bad(format!("{spec:?}: N must be a positive integer"))),
            "cifar" if !files.is_empty() => Ok(DataSpec::Cifar(files)),
            "idx" if files.len() == 2 => Ok(DataSpec::Idx(files[0].clone(), files[1].clone())),
            _ => Err(bad(format!(
                "{spec:?}: expected synthetic:N, cifar:FILE[,FILE...] or idx:IMAGES,LABELS"
            ))),
        }
    }
}

/// Noise of the synthetic CIFAR-shaped classes: high enough that a model must learn.
const SYNTHETIC_NOISE: f32 = 0.35;

/// Loads `train` and `test` (if any); synthetic sets are drawn together so the test
/// examples share the training classes' templates.
pub fn load_data(
    train: &DataSpec,
    test: Option<&DataSpec>,
    seed: u64,
) -> Result<(Dataset, Option<Dataset>), P3Error> {
    let one = |spec: &DataSpec, seed| -> Result<Dataset, P3Error> {
        Ok(match spec {
            DataSpec::Synthetic(n) => synthetic_cifar(*n, 10, SYNTHETIC_NOISE, seed)?,
            DataSpec::Cifar(files) => read_cifar10_files(files)?,
            DataSpec::Idx(images, labels) => load_idx_dataset(images, labels, 10)?,
        })
    };
    if let (DataSpec::Synthetic(a), Some(DataSpec::Synthetic(b))) = (train, test) {
        let all = synthetic_cifar(a + b, 10, SYNTHETIC_NOISE, seed)?;
        let (x, y) = all.select(&(0..*a).collect::<Vec<_>>());
        let (tx, ty) = all.select(&(*a..a + b).collect::<Vec<_>>());
        let set = |x, y| Dataset {
            x,
            y,
            n_classes: 10,
        };
        return Ok((set(x, y), Some(set(tx, ty))));
    }
    Ok((one(train, seed)?, test.map(|t| one(t, 0)).transpose()?))
}

/// The `app` of a P3 model in its model file.
pub const MODEL_APP: &str = "p3";

/// Writes `model`, trained with `trained`, as a safetensors model file
/// ([`crate::model_file`]) to `path`, atomically; `names` gives each tensor's name and
/// shape, forward order ([`crate::models::StagedNet::named_specs`]).
pub fn save_model(
    model: &NetworkModel,
    names: &[(String, Vec<usize>)],
    trained: &crate::model_file::TrainedWith,
    path: &Path,
) -> Result<(), P3Error> {
    let bytes = crate::model_file::encode(model, names, trained).map_err(|source| {
        P3Error::ModelFormat {
            path: path.to_path_buf(),
            source: Box::new(source),
        }
    })?;
    petrel_ml::job::write_atomic(path, &bytes).map_err(|source| P3Error::Io {
        path: path.to_path_buf(),
        what: "model file",
        source,
    })
}

/// A worker's report as written to disk: iteration marks in seconds since the first one.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WorkerReportFile {
    /// The worker's index.
    pub worker: usize,
    /// The mode the job ran in.
    pub mode: Mode,
    /// `marks_s[i]`: start of iteration `i`; the last entry: all parameters of the last
    /// iteration back.
    pub marks_s: Vec<f64>,
    /// Gradient bytes the worker pushed.
    pub bytes_pushed: u64,
    /// The model's loss and accuracy per iteration (empty for emulated models).
    #[serde(default)]
    pub stats: Vec<Option<StepStats>>,
    /// Test-set loss and accuracy of the final model (worker 0 of a real model with `test_data`).
    #[serde(default)]
    pub test: Option<StepStats>,
    /// The worker's first iteration (a joiner's is after 0).
    #[serde(default)]
    pub start: u64,
    /// The changes of the workers it saw ([`crate::core::roster`]).
    #[serde(default)]
    pub changes: Vec<RosterChange>,
    /// The workers at the job's end ([`P3WorkerReport::final_workers`]).
    #[serde(default)]
    pub final_workers: Vec<usize>,
    /// The changes of the shards it saw.
    #[serde(default)]
    pub shard_changes: Vec<RosterChange>,
    /// The shards at the job's end.
    #[serde(default)]
    pub final_shards: Vec<usize>,
    /// Its final parameters' checksum ([`params_digest`]): equal digests, equal models.
    #[serde(default)]
    pub params_digest: String,
}

impl WorkerReportFile {
    /// The file form of a report of a job in `mode`.
    pub fn new(r: &P3WorkerReport, mode: Mode) -> Self {
        let first = r.marks.first().copied();
        WorkerReportFile {
            worker: r.worker,
            mode,
            marks_s: r
                .marks
                .iter()
                .map(|m| first.map_or(0.0, |f| m.duration_since(f).as_secs_f64()))
                .collect(),
            bytes_pushed: r.bytes_pushed,
            stats: r.stats.clone(),
            test: None,
            start: r.start,
            changes: r.changes.clone(),
            final_workers: r.final_workers.clone(),
            shard_changes: r.shard_changes.clone(),
            final_shards: r.final_shards.clone(),
            params_digest: params_digest(&r.params),
        }
    }

    /// Mean seconds per iteration over iterations `skip..`.
    pub fn secs_per_iter(&self, skip: usize) -> Option<f64> {
        let n = self.marks_s.len().checked_sub(1)?;
        if skip >= n {
            return None;
        }
        Some((self.marks_s[n] - self.marks_s[skip]) / (n - skip) as f64)
    }

    /// Where worker `worker` writes its report in `dir`.
    pub fn path(dir: &Path, worker: usize) -> PathBuf {
        dir.join(format!("p3-worker-{worker}.json"))
    }

    /// Reads worker `worker`'s report from `dir`.
    pub fn read(dir: &Path, worker: usize) -> Result<Self, P3Error> {
        let path = Self::path(dir, worker);
        let text = std::fs::read_to_string(&path).map_err(report_io(&path))?;
        serde_json::from_str(&text).map_err(|source| P3Error::Json {
            path,
            what: "worker report",
            source,
        })
    }

    /// Writes this report into `dir` (created if missing); returns the file's path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, P3Error> {
        let path = Self::path(dir, self.worker);
        std::fs::create_dir_all(dir).map_err(report_io(dir))?;
        let text = serde_json::to_string(self).map_err(|source| P3Error::Json {
            path: path.clone(),
            what: "worker report",
            source,
        })?;
        std::fs::write(&path, text).map_err(report_io(&path))?;
        Ok(path)
    }
}

/// A checksum of every parameter's bits (FNV-1a over the tensors in order, as hex): two
/// runs that end with the same digest ended with the same model, bit for bit.
pub fn params_digest(params: &[Vec<f32>]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in params.iter().flatten() {
        for b in v.to_bits().to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Refuses the membership settings a P3 job cannot take. Workers join and leave (standby
/// worker nodes, a scale plan); refused are `on_node_death = "leave"` (a dead worker never
/// pushes, so every slice would wait for it), checkpoints with these settings (one file
/// per worker of a fixed set) and a plan that removes the first shard (it runs the
/// coordinator). Shards join (standby nodes) and leave, their slices moving at an
/// iteration boundary.
pub fn check_membership(settings: &Settings, cfg: &P3Settings) -> Result<(), P3Error> {
    if !settings.allows_membership_changes() {
        return Ok(());
    }
    let shard_names: Vec<&str> = settings
        .nodes
        .iter()
        .filter(|n| n.roles.iter().any(|r| r == SHARD_ROLE))
        .map(|n| n.name.as_str())
        .collect();
    let plan = settings.scale_plan()?;
    let detail = if settings.cluster.on_node_death == petrel_actors::settings::OnNodeDeath::Leave {
        "on_node_death = \"leave\": a dead p3 worker never pushes its gradients, so every slice would wait for it; workers join and leave by standby nodes and a scale plan"
    } else if cfg.checkpoint_every > 0 && !cfg.checkpoint_dir.as_os_str().is_empty() {
        "checkpoints and p3 workers that join or leave do not mix: set checkpoint_every = 0"
    } else if plan.removed().any(|(_, n)| shard_names.first() == Some(&n)) {
        "the first p3-shard node runs the coordinator and keeps slice 0: the scale plan may not remove it"
    } else {
        return Ok(());
    };
    Err(P3Error::Config {
        field: "[cluster]",
        detail: detail.into(),
    })
}

/// A worker report's I/O error at `path`.
fn report_io(path: &Path) -> impl FnOnce(std::io::Error) -> P3Error + '_ {
    move |source| P3Error::Io {
        path: path.to_path_buf(),
        what: "worker report",
        source,
    }
}

fn config(ctx: &NodeContext) -> Result<P3Settings, P3Error> {
    Ok(ctx.settings.app::<P3Settings>("p3")?)
}

async fn shard(ctx: NodeContext) -> Result<(), P3Error> {
    let cfg = config(&ctx)?;
    check_membership(&ctx.settings, &cfg)?;
    let (job, _) = cfg.job(&ctx.settings)?;
    shard_role(ctx, Arc::new(job)).await
}

async fn worker(ctx: NodeContext) -> Result<(), P3Error> {
    let cfg = config(&ctx)?;
    check_membership(&ctx.settings, &cfg)?;
    let (job, profile) = cfg.job(&ctx.settings)?;
    if !cfg.net.is_empty() {
        return network::worker(ctx, cfg, job).await;
    }
    let (device, batch) = (cfg.device_gflops * 1e9, cfg.batch);
    let factory = move |_| Ok(EmulatedModel::new(&profile, device, batch));
    let report = worker_role(ctx, Arc::new(job), factory, None).await?;
    let path = WorkerReportFile::new(&report, cfg.mode).write(&cfg.report_dir)?;
    tracing::info!(worker = report.worker, path = %path.display(), "p3 report written");
    Ok(())
}

/// Registers `p3-worker` and `p3-shard`.
pub fn register(cluster: Cluster) -> Cluster {
    cluster
        .app_section_checked::<P3Settings, _>("p3", P3Settings::validate)
        .role(SHARD_ROLE, shard)
        .role(WORKER_ROLE, worker)
}

// Real networks need candle; without it, `network` refuses every job and model that names
// one, and a node emulates profiles only.
#[cfg(feature = "candle")]
mod network;
#[cfg(not(feature = "candle"))]
mod network {
    use super::*;

    fn refused(net: &str) -> P3Error {
        P3Error::real_model(net, P3Error::NoCandle)
    }

    pub(super) fn check(cfg: &P3Settings) -> Result<(), P3Error> {
        match cfg.net.as_str() {
            "" => Ok(()),
            net => Err(refused(net)),
        }
    }

    pub(super) fn initial(cfg: &P3Settings) -> Result<Option<Vec<Vec<f32>>>, P3Error> {
        check(cfg).map(|()| None)
    }

    pub(super) async fn worker(_: NodeContext, cfg: P3Settings, _: P3Job) -> Result<(), P3Error> {
        Err(refused(&cfg.net))
    }

    /// Refused: this build has no candle.
    pub fn tensor_names(
        net: &str,
        _: &[usize],
        _: usize,
        _: usize,
    ) -> Result<Vec<(String, Vec<usize>)>, P3Error> {
        Err(refused(net))
    }

    /// Refused: this build has no candle.
    pub fn evaluate_network(m: &NetworkModel, _: &Dataset) -> Result<StepStats, P3Error> {
        Err(refused(&m.net))
    }

    /// Refused: this build has no candle.
    pub fn predict_network(m: &NetworkModel, _: &Dataset) -> Result<Vec<Vec<f32>>, P3Error> {
        Err(refused(&m.net))
    }
}
pub use network::*;

#[cfg(test)]
mod tests;
