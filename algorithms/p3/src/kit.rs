//! The P3 kit: train any model data-parallel with P3 by implementing [`StageModel`] and
//! calling [`run_cluster`].
//!
//! # The stage model
//! A model is an **ordered list of stages**, each owning zero or more flat `f32` **parameter
//! tensors**, numbered globally in forward order: the plan layers the
//! [`crate::core::SlicePlan`] cuts into slices (stage 0's first). A worker runs forward stage
//! `k` ([`StageModel::forward_stage`]) as soon as its own tensors are back (each installed
//! with [`StageModel::set_tensor`] when its last slice arrives), so the next forward pass
//! overlaps the tail of the synchronisation; backward runs from the last stage, and P3
//! pushes each stage's gradients at once (`fifo`, `p3`) or after the pass (`sequential`).
//! A model may compute for real (return [`Duration::ZERO`]) or return the compute time it
//! emulates, which the worker waits on a virtual clock ([`crate::models::EmulatedModel`]).
//!
//! # Running a job
//! [`run_cluster`] runs a [`P3Job`]'s workers and shards in this process (one thread each;
//! worker `w`'s model is built on its own thread, so it need not be `Send`) and returns each
//! worker's [`P3WorkerReport`].

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use petrel_actors::{Cluster, Topology, Transport};
use petrel_ml::dnn::FlatSgdMomentum;
use petrel_net::NetConfig;

use crate::checkpoint::{CheckpointConfig, JobShape, LoadedCheckpoint, newest_valid};
use crate::core::{Mode, SlicePlan};
use crate::error::P3Error;
use crate::shells::{SHARD_ROLE, WORKER_ROLE, shard_role, worker_role};

// The CLI's `--mode` values and help, kept out of the sans-I/O core.
impl clap::ValueEnum for Mode {
    fn value_variants<'a>() -> &'a [Self] {
        &Mode::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let value = clap::builder::PossibleValue::new(self.name()).help(self.help());
        Some(match self {
            Mode::Sequential => value.alias("seq"),
            _ => value,
        })
    }
}

/// A model P3 trains stage by stage (see the [module docs](self)).
///
/// P3 guarantees: `set_tensor` gets exactly the tensor's parameter count; `forward_stage`
/// is called for stages `0..n` in order and only after all of the stage's tensors were
/// set for this iteration; `backward_stage` is called for stages `n-1..=0` in order after
/// the forward pass.
pub trait StageModel {
    /// The model's own error; P3 reports it as [`P3Error::Model`] with this as the source.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Parameter count of each tensor of each stage, in forward order:
    /// `stage_tensors()[k]` lists stage `k`'s tensors (empty for a stage without
    /// parameters, such as a ReLU). Must not change during training.
    fn stage_tensors(&self) -> Vec<Vec<u64>>;

    /// Installs new values of parameter tensor `tensor` (global index, forward order).
    fn set_tensor(&mut self, tensor: usize, values: &[f32]) -> Result<(), Self::Error>;

    /// Runs stage `stage` forward for iteration `iter` (stage 0 picks the iteration's batch).
    /// Returns the emulated compute time, or [`Duration::ZERO`] when it computed for real.
    fn forward_stage(&mut self, iter: u64, stage: usize) -> Result<Duration, Self::Error>;

    /// Runs stage `stage` backward and hands over its gradients, one per tensor of the
    /// stage in [`StageModel::stage_tensors`] order.
    fn backward_stage(&mut self, stage: usize) -> Result<StageGrads, Self::Error>;

    /// From the next iteration on, this worker is number `rank` of the `of` workers that
    /// share the iteration's data (the workers may change between iterations). The
    /// default: the model takes no data by rank.
    fn set_rank(&mut self, rank: usize, of: usize) {
        let _ = (rank, of);
    }

    /// Loss and accuracy of the last forward pass, when the model computes them.
    fn stats(&self) -> Option<StepStats> {
        None
    }
}

/// What [`StageModel::backward_stage`] hands to P3.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageGrads {
    /// One gradient per tensor of the stage, each as long as its tensor.
    pub grads: Vec<Vec<f32>>,
    /// Emulated compute time of the backward step ([`Duration::ZERO`] when real).
    pub compute: Duration,
}

/// Loss and accuracy of one worker's mini-batch.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepStats {
    /// Mean loss over the batch.
    pub loss: f32,
    /// Fraction classified correctly (0 when the model does not classify).
    pub accuracy: f32,
}

/// Which global tensors belong to which stage, derived from [`StageModel::stage_tensors`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageLayout {
    counts: Vec<u64>,
    ranges: Vec<Range<usize>>,
}

impl StageLayout {
    /// The layout of `stage_tensors` (stage `k`'s tensors numbered after stage `k-1`'s).
    pub fn new(stage_tensors: &[Vec<u64>]) -> Self {
        let mut counts = Vec::new();
        let mut ranges = Vec::with_capacity(stage_tensors.len());
        for stage in stage_tensors {
            let start = counts.len();
            counts.extend_from_slice(stage);
            ranges.push(start..counts.len());
        }
        StageLayout { counts, ranges }
    }

    /// The layout of a model.
    pub fn of<M: StageModel + ?Sized>(model: &M) -> Self {
        Self::new(&model.stage_tensors())
    }

    /// Number of stages.
    pub fn n_stages(&self) -> usize {
        self.ranges.len()
    }

    /// Global tensor indices of stage `stage` (empty for an unknown stage).
    pub fn stage(&self, stage: usize) -> Range<usize> {
        self.ranges.get(stage).cloned().unwrap_or(0..0)
    }

    /// Parameter count of every tensor, forward order (the plan's layers).
    pub fn tensor_counts(&self) -> &[u64] {
        &self.counts
    }
}

/// Called by every worker after every iteration: (worker, iteration, the model's stats).
pub type Progress = Arc<dyn Fn(usize, u64, Option<StepStats>) + Send + Sync>;

/// Everything a P3 job needs besides the model.
#[derive(Clone, Debug)]
pub struct P3Job {
    /// Sequential, fifo or p3.
    pub mode: Mode,
    /// Parameters per slice in `p3` mode.
    pub slice_size: u64,
    /// Data-parallel workers.
    pub n_workers: usize,
    /// Server shards the slices are spread over.
    pub n_shards: usize,
    /// Iterations to train (a warm-up included, if the caller measures).
    pub iterations: u64,
    /// The update every shard applies to the averaged gradient.
    pub opt: FlatSgdMomentum,
    /// Initial values of every parameter tensor, forward order (all workers and shards
    /// start from them); their lengths are the plan's layers.
    pub initial: Arc<Vec<Vec<f32>>>,
    /// Transport settings of every node (the shaper goes here).
    pub net: NetConfig,
    /// How the in-process cluster's nodes reach each other.
    pub transport: Transport,
    /// How long a push waits for its slice's new values.
    pub ask_timeout: Duration,
    /// Checkpoints of the job, and whether it resumes from one (`None`: neither).
    pub checkpoint: Option<CheckpointConfig>,
}

impl P3Job {
    /// A job starting from `initial` with defaults for the rest: p3 mode, 8192-parameter
    /// slices, 2 workers, 2 shards, 10 iterations, SGD with lr 0.01 and momentum 0.9,
    /// the default transport, a 60 s ask timeout.
    pub fn new(initial: Vec<Vec<f32>>) -> Self {
        P3Job {
            mode: Mode::P3,
            slice_size: 8192,
            n_workers: 2,
            n_shards: 2,
            iterations: 10,
            opt: FlatSgdMomentum::new(0.01, 0.9),
            initial: Arc::new(initial),
            net: NetConfig::default(),
            transport: Transport::default(),
            ask_timeout: Duration::from_secs(60),
            checkpoint: None,
        }
    }

    /// What a checkpoint of this job records about it ([`JobShape`]), given the model and
    /// data `tag`.
    pub fn shape(&self, tag: &str) -> JobShape {
        JobShape {
            tag: tag.to_string(),
            mode: self.mode.name().to_string(),
            slice_size: self.slice_size,
            workers: self.n_workers,
            shards: self.n_shards,
            tensors: self.unit_counts(),
            opt_bits: (self.opt.lr.to_bits(), self.opt.momentum.to_bits()),
        }
    }

    /// The checkpoint this job resumes from (verified), if it resumes.
    pub fn resume_point(&self) -> Result<Option<LoadedCheckpoint>, P3Error> {
        let Some(c) = self.checkpoint.as_ref().filter(|c| c.resume) else {
            return Ok(None);
        };
        Ok(Some(newest_valid(&c.dir, &self.shape(&c.tag))?))
    }

    /// Parameter count of every tensor (the lengths of [`P3Job::initial`]).
    pub fn unit_counts(&self) -> Vec<u64> {
        self.initial.iter().map(|t| t.len() as u64).collect()
    }

    /// The plan every node derives: P3 slices, or whole layers split evenly over shards.
    pub fn plan(&self) -> Result<SlicePlan, P3Error> {
        Ok(SlicePlan::layerwise_split(
            self.mode,
            &self.unit_counts(),
            self.slice_size,
            self.n_shards,
        )?)
    }
}

/// What a worker measured.
#[derive(Debug, Clone)]
pub struct P3WorkerReport {
    /// The worker's index.
    pub worker: usize,
    /// Its first iteration (0, a checkpoint's round, or the one a joiner started at).
    pub start: u64,
    /// `marks[i]`: when forward stage 0 of its `i`-th iteration started; the last entry:
    /// when the parameters of its last iteration were all back.
    pub marks: Vec<Instant>,
    /// Final parameters, one vector per tensor.
    pub params: Vec<Vec<f32>>,
    /// The model's stats per iteration, when it reports them.
    pub stats: Vec<Option<StepStats>>,
    /// Gradient bytes this worker pushed.
    pub bytes_pushed: u64,
    /// `ready_order[r]`: the tensors (units) in the order their round-`r + 1` parameters
    /// came back complete. This is what priority propagation changes: under a backlog the
    /// first layers return first in `p3` mode and last in `fifo` mode.
    pub ready_order: Vec<Vec<usize>>,
    /// The changes of the workers it saw (its own join not included).
    pub changes: Vec<crate::core::RosterChange>,
    /// The workers at the job's end (without this one if it left): the first of them
    /// evaluates and saves the model.
    pub final_workers: Vec<usize>,
    /// The changes of the shards it saw (ids of `p3-shard` nodes).
    pub shard_changes: Vec<crate::core::RosterChange>,
    /// The shards at the job's end.
    pub final_shards: Vec<usize>,
}

impl P3WorkerReport {
    /// Whether this worker is the one that evaluates and saves the final model: the first
    /// of the workers at the end (worker 0 when none changed).
    pub fn is_final_first(&self) -> bool {
        self.final_workers.first() == Some(&self.worker)
    }

    /// Mean seconds per iteration over iterations `skip..` (warm-up excluded).
    pub fn secs_per_iter(&self, skip: usize) -> Option<f64> {
        let n = self.marks.len().checked_sub(1)?;
        if skip >= n {
            return None;
        }
        let span = self.marks[n].duration_since(self.marks[skip]).as_secs_f64();
        Some(span / (n - skip) as f64)
    }
}

/// Runs one job on an in-process cluster: nodes `w0..` (role `p3-worker`) and `s0..` (role
/// `p3-shard`), each on its own thread with its own transport. `factory(w)` builds worker `w`'s
/// model on that worker's thread. Returns the workers' reports in worker order.
pub fn run_cluster<M, F>(
    job: &P3Job,
    factory: F,
    progress: Option<Progress>,
) -> Result<Vec<P3WorkerReport>, P3Error>
where
    M: StageModel + 'static,
    F: Fn(usize) -> Result<M, M::Error> + Send + Sync + 'static,
{
    if job.n_workers == 0 || job.n_shards == 0 {
        return Err(P3Error::Config {
            field: "job",
            detail: "need at least one worker and one shard".into(),
        });
    }
    job.plan()?;
    let mut topo = Topology::builder("p3").transport(job.transport);
    for w in 0..job.n_workers {
        topo = topo.node(&format!("w{w}"), &[WORKER_ROLE]);
    }
    for s in 0..job.n_shards {
        topo = topo.node(&format!("s{s}"), &[SHARD_ROLE]);
    }
    let net = job.net.clone();
    let timeout_ms = job.ask_timeout.as_millis() as u64;
    let settings = topo
        .with(|s| {
            s.net = net;
            s.cluster.request_timeout_ms = timeout_ms;
            // Heartbeats share the shaped links with a full model's worth of traffic; on a
            // slow link and a loaded machine 2 s of silence is not yet a dead peer.
            s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
        })
        .build()?;
    let job = Arc::new(job.clone());
    let factory = Arc::new(factory);
    let sink: Arc<Mutex<Vec<P3WorkerReport>>> = Arc::new(Mutex::new(Vec::new()));
    let (shard_job, worker_job, worker_sink) = (job.clone(), job.clone(), sink.clone());
    let cluster = Cluster::new(settings)
        .role(SHARD_ROLE, move |ctx| shard_role(ctx, shard_job.clone()))
        .role(WORKER_ROLE, move |ctx| {
            let (job, factory, progress, sink) = (
                worker_job.clone(),
                factory.clone(),
                progress.clone(),
                worker_sink.clone(),
            );
            async move {
                let report = worker_role(ctx, job, |w| factory(w), progress).await?;
                // A poisoned sink means another worker panicked; its report is lost anyway.
                if let Ok(mut reports) = sink.lock() {
                    reports.push(report);
                }
                Ok::<(), P3Error>(())
            }
        });
    cluster.run_in_process()?;
    let mut reports = sink
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default();
    reports.sort_by_key(|r| r.worker);
    if reports.len() != job.n_workers {
        return Err(P3Error::MissingReports {
            got: reports.len(),
            expected: job.n_workers,
        });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_numbers_tensors_across_stages() {
        let l = StageLayout::new(&[vec![6, 2], vec![], vec![4]]);
        assert_eq!(l.n_stages(), 3);
        assert_eq!((l.stage(0), l.stage(1), l.stage(2)), (0..2, 2..2, 2..3));
        assert_eq!(l.stage(7), 0..0);
        assert_eq!(l.tensor_counts(), &[6, 2, 4]);
    }

    #[test]
    fn job_defaults_plan_from_the_initial_values() {
        let job = P3Job::new(vec![vec![0.0; 5], vec![0.0; 3]]);
        assert_eq!(job.unit_counts(), vec![5, 3]);
        assert_eq!(job.plan().unwrap().n_layers(), 2);
        let bad = P3Job { n_shards: 0, ..job };
        assert!(matches!(
            bad.plan(),
            Err(P3Error::Core(P3CoreError::ZeroShards))
        ));
    }

    use crate::core::P3CoreError;
}
