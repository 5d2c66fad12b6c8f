//! Built-in P3 roles (`p3-worker`, `p3-shard`) for separate `petrel node` processes.
//!
//! The in-process bench hands the job to its roles through closures
//! ([`crate::kit::run_cluster`]); a node process reads it from `[app.p3]` instead
//! ([`P3NodeConfig`]): the model is the [`EmulatedModel`] of a profile (built-in name or
//! file) scaled by `scale` on a device of `device_gflops`, exactly as `petrel bench p3`
//! builds it. Each worker writes its report as JSON ([`WorkerReportFile`]) to
//! `report_dir/p3-worker-{i}.json`, which the bench reads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use petrel_actors::{Cluster, NodeContext, Settings};
use petrel_ml::dnn::FlatSgdMomentum;
use serde::{Deserialize, Serialize};

use crate::core::{Mode, ModelProfile, ProfileError};
use crate::error::P3Error;
use crate::kit::{P3Job, P3WorkerReport};
use crate::models::EmulatedModel;
use crate::shells::{SHARD_ROLE, WORKER_ROLE, shard_role, worker_role};

/// `[app.p3]`: one P3 job. A bad `mode` is rejected when the section is read.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(default)]
pub struct P3NodeConfig {
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
}

impl Default for P3NodeConfig {
    fn default() -> Self {
        P3NodeConfig {
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
        }
    }
}

/// Loads a profile: a path when `model` has an extension, else a built-in name.
pub fn load_profile(model: &str) -> Result<ModelProfile, ProfileError> {
    let p = Path::new(model);
    if p.extension().is_some() {
        ModelProfile::load(p)
    } else {
        ModelProfile::builtin(model)
    }
}

fn positive(field: &'static str, v: f64) -> Result<(), P3Error> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(P3Error::Config {
            field,
            detail: format!("must be positive, got {v}"),
        })
    }
}

impl P3NodeConfig {
    /// The scaled profile and the job every node of the cluster derives from it.
    pub fn job(&self, settings: &Settings) -> Result<(P3Job, ModelProfile), P3Error> {
        positive("[app.p3] scale", self.scale)?;
        positive("[app.p3] device_gflops", self.device_gflops)?;
        if self.workers == 0 || self.shards == 0 || self.iterations == 0 || self.batch == 0 {
            return Err(P3Error::Config {
                field: "[app.p3]",
                detail: "workers, shards, iterations and batch must be >= 1".into(),
            });
        }
        let profile = load_profile(&self.model)?.scaled(self.scale);
        let initial = profile
            .layers
            .iter()
            .map(|l| vec![0.5; l.params as usize])
            .collect();
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
        };
        job.plan()?;
        Ok((job, profile))
    }
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
        let text = std::fs::read_to_string(&path).map_err(|source| P3Error::ReportIo {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| P3Error::ReportJson { path, source })
    }

    /// Writes this report into `dir` (created if missing); returns the file's path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, P3Error> {
        let path = Self::path(dir, self.worker);
        std::fs::create_dir_all(dir).map_err(|source| P3Error::ReportIo {
            path: dir.to_path_buf(),
            source,
        })?;
        let text = serde_json::to_string(self).map_err(|source| P3Error::ReportJson {
            path: path.clone(),
            source,
        })?;
        std::fs::write(&path, text).map_err(|source| P3Error::ReportIo {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

fn config(ctx: &NodeContext) -> Result<P3NodeConfig, P3Error> {
    Ok(ctx.settings.app::<P3NodeConfig>("p3")?)
}

async fn shard(ctx: NodeContext) -> Result<(), P3Error> {
    let (job, _) = config(&ctx)?.job(&ctx.settings)?;
    shard_role(ctx, Arc::new(job)).await
}

async fn worker(ctx: NodeContext) -> Result<(), P3Error> {
    let cfg = config(&ctx)?;
    let (job, profile) = cfg.job(&ctx.settings)?;
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
        .app_section::<P3NodeConfig>("p3")
        .role(SHARD_ROLE, shard)
        .role(WORKER_ROLE, worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_file_measures_iterations_and_round_trips() {
        let f = WorkerReportFile {
            worker: 0,
            mode: Mode::P3,
            marks_s: vec![0.0, 1.0, 1.5, 2.0, 2.5],
            bytes_pushed: 10,
        };
        assert_eq!(f.secs_per_iter(1), Some(0.5));
        assert_eq!(f.secs_per_iter(4), None);
        let json = serde_json::to_string(&f).unwrap();
        assert!(json.contains("\"mode\":\"p3\""), "{json}");
        let dir = tempfile::tempdir().unwrap();
        let path = f.write(dir.path()).unwrap();
        assert_eq!(path, WorkerReportFile::path(dir.path(), 0));
        assert_eq!(WorkerReportFile::read(dir.path(), 0).unwrap(), f);
        assert!(matches!(
            WorkerReportFile::read(dir.path(), 1),
            Err(P3Error::ReportIo { .. })
        ));
    }

    #[test]
    fn config_rejects_bad_values_when_read() {
        let settings = petrel_actors::Topology::builder("t")
            .node("w0", &[WORKER_ROLE])
            .build()
            .unwrap();
        let ok = P3NodeConfig::default().job(&settings).unwrap();
        assert_eq!(ok.0.n_workers, 2);
        let bad = P3NodeConfig {
            scale: 0.0,
            ..P3NodeConfig::default()
        };
        let err = bad.job(&settings).unwrap_err().to_string();
        assert!(err.contains("scale"), "{err}");
        // A bad mode never gets this far: the section does not deserialize.
        let err = serde_json::from_str::<P3NodeConfig>(r#"{"mode": "bogus"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("valid values: sequential, fifo, p3"), "{err}");
    }
}
