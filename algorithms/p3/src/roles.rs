//! Built-in P3 roles (`p3-worker`, `p3-shard`) for separate `petrel node` processes.
//!
//! The in-process bench hands the job to its roles through closures; a node process reads
//! it from `[app.p3]` instead ([`P3NodeConfig`]): the model is the emulated-compute model
//! of a profile (built-in name or file) scaled by `scale` on a device of `device_gflops`,
//! exactly as `petrel bench p3` builds it. Each worker writes its report as JSON
//! ([`WorkerReportFile`]) to `report_dir/p3-worker-{i}.json`, which the bench reads.

use crate::core::plan::Mode;
use crate::core::profile::ModelProfile;
use crate::shells::{
    EmulatedModel, ModelFactory, P3Job, SHARD_ROLE, StageModel, WORKER_ROLE, WorkerReport,
    shard_role, worker_role,
};
use petrel_actors::{Cluster, NodeContext, Settings};
use petrel_ml::dnn::SgdMomentum;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `[app.p3]`: one P3 job.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(default)]
pub struct P3NodeConfig {
    /// sequential, fifo or p3.
    pub mode: String,
    /// Built-in profile name (vgg19, resnet50, sockeye) or a profile file.
    pub model: String,
    /// Factor applied to the profile's parameter counts and FLOPs.
    pub scale: f64,
    /// Emulated device speed (GFLOP/s) for the scaled profile.
    pub device_gflops: f64,
    pub batch: usize,
    pub slice_size: u64,
    pub workers: usize,
    pub shards: usize,
    /// Iterations including warm-up.
    pub iterations: u64,
    pub lr: f32,
    pub momentum: f32,
    pub ask_timeout_ms: u64,
    /// Where workers write `p3-worker-{i}.json`.
    pub report_dir: PathBuf,
}

impl Default for P3NodeConfig {
    fn default() -> Self {
        P3NodeConfig {
            mode: "p3".into(),
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
        }
    }
}

/// Loads a profile: a path when `model` has an extension, else a built-in name.
pub fn load_profile(model: &str) -> Result<ModelProfile, String> {
    let p = Path::new(model);
    if p.extension().is_some() {
        ModelProfile::load(p).map_err(|e| format!("profile {model}: {e}"))
    } else {
        ModelProfile::builtin(model).map_err(|e| e.to_string())
    }
}

impl P3NodeConfig {
    /// The scaled profile and the job every node of the cluster derives from it.
    pub fn job(&self, settings: &Settings) -> Result<(P3Job, ModelProfile), String> {
        let mode = Mode::parse(&self.mode).map_err(|e| format!("[app.p3] mode: {e}"))?;
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(format!(
                "[app.p3] scale must be positive, got {}",
                self.scale
            ));
        }
        if !(self.device_gflops.is_finite() && self.device_gflops > 0.0) {
            return Err(format!(
                "[app.p3] device_gflops must be positive, got {}",
                self.device_gflops
            ));
        }
        if self.workers == 0 || self.shards == 0 || self.iterations == 0 || self.batch == 0 {
            return Err("[app.p3] workers, shards, iterations and batch must be >= 1".into());
        }
        let profile = load_profile(&self.model)?.scaled(self.scale);
        let counts: Vec<u64> = profile.layers.iter().map(|l| l.params).collect();
        let job = P3Job {
            mode,
            slice_size: self.slice_size,
            n_workers: self.workers,
            n_shards: self.shards,
            iterations: self.iterations,
            opt: SgdMomentum::new(self.lr, self.momentum),
            initial: Arc::new(counts.iter().map(|&c| vec![0.5; c as usize]).collect()),
            unit_counts: counts,
            net: settings.net.clone(),
            transport: settings.cluster.transport,
            ask_timeout: Duration::from_millis(self.ask_timeout_ms.max(1)),
        };
        job.plan()?;
        Ok((job, profile))
    }
}

/// A worker's report as written to disk: iteration marks in seconds since the first one.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WorkerReportFile {
    pub worker: usize,
    pub mode: String,
    /// `marks_s[i]`: start of iteration `i`; the last entry: all parameters of the last
    /// iteration back.
    pub marks_s: Vec<f64>,
    pub bytes_pushed: u64,
}

impl WorkerReportFile {
    pub fn new(r: &WorkerReport, mode: &str) -> Self {
        let first = r.marks.first().copied();
        WorkerReportFile {
            worker: r.worker,
            mode: mode.to_string(),
            marks_s: r
                .marks
                .iter()
                .map(|m| first.map_or(0.0, |f| m.duration_since(f).as_secs_f64()))
                .collect(),
            bytes_pushed: r.bytes_pushed,
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

    pub fn path(dir: &Path, worker: usize) -> PathBuf {
        dir.join(format!("p3-worker-{worker}.json"))
    }

    pub fn read(dir: &Path, worker: usize) -> Result<Self, String> {
        let path = Self::path(dir, worker);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn config(ctx: &NodeContext) -> Result<P3NodeConfig, String> {
    ctx.settings
        .app::<P3NodeConfig>("p3")
        .map_err(|e| format!("[app.p3]: {e}"))
}

async fn shard(ctx: NodeContext) -> Result<(), String> {
    let (job, _) = config(&ctx)?.job(&ctx.settings)?;
    shard_role(ctx, Arc::new(job)).await
}

async fn worker(ctx: NodeContext) -> Result<(), String> {
    let cfg = config(&ctx)?;
    let (job, profile) = cfg.job(&ctx.settings)?;
    let (device, batch) = (cfg.device_gflops * 1e9, cfg.batch);
    let factory: ModelFactory = Arc::new(move |_| {
        Ok(Box::new(EmulatedModel::new(&profile, device, batch)) as Box<dyn StageModel>)
    });
    let sink: Arc<Mutex<Vec<WorkerReport>>> = Arc::new(Mutex::new(Vec::new()));
    worker_role(ctx, Arc::new(job), factory, None, sink.clone()).await?;
    let reports = std::mem::take(&mut *sink.lock().map_err(|_| "report sink poisoned")?);
    std::fs::create_dir_all(&cfg.report_dir)
        .map_err(|e| format!("cannot create {}: {e}", cfg.report_dir.display()))?;
    for r in &reports {
        let file = WorkerReportFile::new(r, &cfg.mode);
        let path = WorkerReportFile::path(&cfg.report_dir, r.worker);
        let text = serde_json::to_string(&file).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        tracing::info!(worker = r.worker, path = %path.display(), "p3 report written");
    }
    Ok(())
}

/// Registers `p3-worker` and `p3-shard`.
pub fn register(cluster: Cluster) -> Cluster {
    cluster
        .role(SHARD_ROLE, |ctx| Box::pin(shard(ctx)))
        .role(WORKER_ROLE, |ctx| Box::pin(worker(ctx)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_file_measures_iterations() {
        let f = WorkerReportFile {
            worker: 0,
            mode: "p3".into(),
            marks_s: vec![0.0, 1.0, 1.5, 2.0, 2.5],
            bytes_pushed: 10,
        };
        assert_eq!(f.secs_per_iter(1), Some(0.5));
        assert_eq!(f.secs_per_iter(4), None);
        let back: WorkerReportFile =
            serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn config_rejects_bad_mode() {
        let cfg = P3NodeConfig {
            mode: "bogus".into(),
            ..P3NodeConfig::default()
        };
        let settings = petrel_actors::Topology::builder("t")
            .node("w0", &[WORKER_ROLE])
            .build()
            .unwrap();
        let err = cfg.job(&settings).err().unwrap();
        assert!(err.contains("mode"), "{err}");
        let ok = P3NodeConfig::default().job(&settings).unwrap();
        assert_eq!(ok.0.n_workers, 2);
    }
}
