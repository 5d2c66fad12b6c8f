//! P3 checkpoints, sans I/O: when one is due, what its files are called and hold, and
//! whether a manifest belongs to this job. The I/O is in [`crate::checkpoint`].
//!
//! Training is synchronous: a worker's parameters of iteration `t + 1` are all back only
//! once every shard applied every worker's gradients of iteration `t`. A checkpoint of
//! round `t + 1` (the first iteration a resumed run trains) is taken at that point: each
//! shard saves its slices (parameters and momentum) at iteration `t + 1`, each worker its
//! training statistics so far (its data cursor is a pure function of the iteration, and
//! its parameters are the shards'), and worker 0 writes LAST the manifest listing every
//! file with its length and checksum.
//!
//! Parts (all nodes must see the directory: one machine or a shared file system):
//! `shard-<i>` and `worker-<i>` of the runtime's checkpoint set, scheme [`SCHEME`].

use serde::{Deserialize, Serialize};

use crate::core::error::EngineError;
use crate::core::slicing::SlicePlan;
use crate::kit::StepStats;

/// Version of the file formats below.
pub const P3_CHECKPOINT_VERSION: u32 = 1;

/// The checkpoint scheme of P3 (`p3-round-<r>...`).
pub const SCHEME: &str = "p3";

/// Shard `i`'s part.
pub fn shard_part(shard: usize) -> String {
    format!("shard-{shard}")
}

/// Worker `i`'s part.
pub fn worker_part(worker: usize) -> String {
    format!("worker-{worker}")
}

/// When to checkpoint: after iteration `t` when `t + 1` is a multiple of `every` (0 =
/// never) and iterations remain (a checkpoint after the last one would never be resumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    every: u64,
    iterations: u64,
}

impl CheckpointPolicy {
    /// Every `every` iterations of a job of `iterations`.
    pub fn new(every: u64, iterations: u64) -> Self {
        CheckpointPolicy { every, iterations }
    }

    /// Whether a checkpoint (of round `iter + 1`) follows iteration `iter`.
    pub fn due_after(&self, iter: u64) -> bool {
        let next = iter + 1;
        self.every > 0 && next.is_multiple_of(self.every) && next < self.iterations
    }
}

/// What a checkpoint must match to be resumed by a job: the same model and data (`tag`),
/// the same optimiser, cluster and slicing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobShape {
    /// The model and data as the roles describe them (net, width, seed, batch, data).
    pub tag: String,
    /// The plan's mode (the slicing depends on it).
    pub mode: String,
    /// Parameters per slice.
    pub slice_size: u64,
    /// Data-parallel workers.
    pub workers: usize,
    /// Server shards.
    pub shards: usize,
    /// Parameters of every tensor.
    pub tensors: Vec<u64>,
    /// Learning rate and momentum, as bits (exact).
    pub opt_bits: (u32, u32),
}

impl JobShape {
    /// What differs between a checkpoint's shape (`self`) and the job's, if anything.
    pub fn mismatch(&self, job: &JobShape) -> Option<String> {
        // Debug text is equal exactly when these values are.
        let d = |v: &dyn std::fmt::Debug| format!("{v:?}");
        let fields = [
            ("the model and data", d(&self.tag), d(&job.tag)),
            ("mode", d(&self.mode), d(&job.mode)),
            ("slice_size", d(&self.slice_size), d(&job.slice_size)),
            ("workers", d(&self.workers), d(&job.workers)),
            ("shards", d(&self.shards), d(&job.shards)),
            ("the tensor sizes", d(&self.tensors), d(&job.tensors)),
        ];
        if let Some((what, a, b)) = fields.into_iter().find(|(_, a, b)| a != b) {
            return Some(format!(
                "{what} is {a} in the checkpoint but {b} in this job"
            ));
        }
        (self.opt_bits != job.opt_bits).then(|| "the learning rate or momentum differs".into())
    }
}

/// One slice's state in a shard file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SliceState {
    /// The slice id in the plan.
    pub id: usize,
    /// Its parameters.
    pub params: Vec<f32>,
    /// Its momentum.
    pub velocity: Vec<f32>,
}

/// A shard's part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardFile {
    /// [`P3_CHECKPOINT_VERSION`].
    pub version: u32,
    /// The first iteration after the checkpoint.
    pub round: u64,
    /// The shard's index.
    pub shard: usize,
    /// Every slice the shard owns, by id.
    pub slices: Vec<SliceState>,
}

/// A worker's part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerFile {
    /// [`P3_CHECKPOINT_VERSION`].
    pub version: u32,
    /// The first iteration after the checkpoint.
    pub round: u64,
    /// The worker's index.
    pub worker: usize,
    /// Its mini-batch loss and accuracy of every iteration before `round`.
    pub stats: Vec<Option<StepStats>>,
}

/// Every tensor's parameters, assembled from the shards' slices of `plan`: what a resumed
/// worker starts from. Fails naming the first slice that is missing or of the wrong length.
pub fn assemble_params(
    plan: &SlicePlan,
    shards: &[ShardFile],
) -> Result<Vec<Vec<f32>>, EngineError> {
    let mut params: Vec<Vec<f32>> = (0..plan.n_layers())
        .map(|l| {
            let n: u64 = plan.layer_slices(l).iter().map(|s| s.len).sum();
            vec![0.0; n as usize]
        })
        .collect();
    let mut seen = vec![false; plan.slices().len()];
    for state in shards.iter().flat_map(|f| &f.slices) {
        let s = plan
            .slice(state.id)
            .ok_or(crate::core::error::PlanError::UnknownSlice {
                id: state.id,
                n_slices: plan.slices().len(),
            })?;
        if state.params.len() as u64 != s.len {
            return Err(EngineError::Length {
                slice: s.id,
                expected: s.len as usize,
                got: state.params.len(),
            });
        }
        let a = s.offset as usize;
        params[s.layer][a..a + state.params.len()].copy_from_slice(&state.params);
        seen[s.id] = true;
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Err(EngineError::NotInitialised { slice: missing });
    }
    Ok(params)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::mode::Mode;

    #[test]
    fn checkpoints_follow_every_n_iterations_but_not_the_last() {
        let p = CheckpointPolicy::new(4, 10);
        let due: Vec<u64> = (0..10).filter(|&i| p.due_after(i)).collect();
        assert_eq!(due, vec![3, 7]);
        assert!(!CheckpointPolicy::new(5, 10).due_after(9));
        assert!((0..100).all(|i| !CheckpointPolicy::new(0, 100).due_after(i)));
    }

    /// A job's shape for the checkpoint tests.
    pub(crate) fn shape() -> JobShape {
        JobShape {
            tag: "mlp".into(),
            mode: "p3".into(),
            slice_size: 4,
            workers: 2,
            shards: 2,
            tensors: vec![5, 3],
            opt_bits: (1, 2),
        }
    }

    #[test]
    fn a_checkpoint_of_another_job_is_refused_with_the_reason() {
        assert_eq!(shape().mismatch(&shape()), None);
        let three = JobShape {
            workers: 3,
            ..shape()
        };
        let why = shape().mismatch(&three).unwrap();
        assert!(
            why.contains("workers is 2 in the checkpoint but 3"),
            "{why}"
        );
        let lr = JobShape {
            opt_bits: (9, 2),
            ..shape()
        };
        assert!(shape().mismatch(&lr).unwrap().contains("learning rate"));
    }

    #[test]
    fn parameters_assemble_from_every_shard_and_a_missing_slice_is_refused() {
        let plan = SlicePlan::layerwise_split(Mode::P3, &[5, 3], 4, 2).unwrap();
        let files: Vec<ShardFile> = (0..2)
            .map(|shard| ShardFile {
                version: P3_CHECKPOINT_VERSION,
                round: 1,
                shard,
                slices: plan
                    .shard_slices(shard)
                    .map(|s| SliceState {
                        id: s.id,
                        params: (0..s.len)
                            .map(|i| (s.layer * 10) as f32 + (s.offset + i) as f32)
                            .collect(),
                        velocity: vec![0.0; s.len as usize],
                    })
                    .collect(),
            })
            .collect();
        let p = assemble_params(&plan, &files).unwrap();
        assert_eq!(p, vec![vec![0., 1., 2., 3., 4.], vec![10., 11., 12.]]);
        assert!(matches!(
            assemble_params(&plan, &files[..1]),
            Err(EngineError::NotInitialised { .. })
        ));
    }
}
