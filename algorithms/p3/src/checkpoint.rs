//! P3 checkpoints: when one is due, what its files hold, whether a manifest belongs to
//! this job, and the files on disk, on the runtime's checkpoint set
//! ([`petrel_actors::checkpoint`], scheme [`SCHEME`]: parts `shard-<i>` and `worker-<i>`,
//! the manifest written LAST with the [`JobShape`] as its meta, the newest two kept).
//!
//! Training is synchronous: a worker's parameters of iteration `t + 1` are all back only
//! once every shard applied every worker's gradients of iteration `t`. A checkpoint of
//! round `t + 1` (the first iteration a resumed run trains) is taken at that point: each
//! shard saves its slices (parameters and momentum) at iteration `t + 1`, each worker its
//! training statistics so far (its data cursor is a pure function of the iteration, and
//! its parameters are the shards'), and worker 0 writes LAST the manifest listing every
//! file with its length and checksum. All nodes must see the directory (one machine or a
//! shared file system).
//!
//! Resume policy: [`newest_valid`] loads the newest checkpoint whose files all verify and
//! whose shape is this job's, warning about each invalid newer one; if none is valid (or
//! there is none) it fails listing why each was refused: a resumed job never silently
//! starts over.

use std::path::{Path, PathBuf};

use petrel_actors::checkpoint::{self as set, CheckpointError, CheckpointSet, PartEntry};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::P3Error;
use crate::core::error::P3CoreError;
use crate::core::shard::SliceState;
use crate::core::slicing::SlicePlan;
use crate::kit::StepStats;

/// Version of the file formats below.
pub const P3_CHECKPOINT_VERSION: u32 = 1;

/// The checkpoint scheme of P3 (`p3-round-<r>...`).
pub const SCHEME: &str = "p3";

/// Shard `i`'s part.
fn shard_part(shard: usize) -> String {
    format!("shard-{shard}")
}

/// Worker `i`'s part.
fn worker_part(worker: usize) -> String {
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
) -> Result<Vec<Vec<f32>>, P3CoreError> {
    let mut params: Vec<Vec<f32>> = (0..plan.n_layers())
        .map(|l| {
            let n: u64 = plan.layer_slices(l).iter().map(|s| s.len).sum();
            vec![0.0; n as usize]
        })
        .collect();
    let mut seen = vec![false; plan.slices().len()];
    for state in shards.iter().flat_map(|f| &f.slices) {
        let s = plan.slice(state.id).ok_or(P3CoreError::UnknownSlice {
            id: state.id,
            n_slices: plan.slices().len(),
        })?;
        if state.params.len() as u64 != s.len {
            return Err(P3CoreError::Length {
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
        return Err(P3CoreError::NotInitialised { slice: missing });
    }
    Ok(params)
}

/// Where and how often a P3 job checkpoints, and whether it starts from the newest checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointConfig {
    /// The directory every node of the job sees.
    pub dir: PathBuf,
    /// Iterations between checkpoints (0 = never write; `resume` may still read).
    pub every: u64,
    /// Continue from the newest valid checkpoint in `dir`.
    pub resume: bool,
    /// The model and data, as [`JobShape::tag`] records them.
    pub tag: String,
}

fn checkpoints(dir: &Path) -> CheckpointSet {
    CheckpointSet::new(dir, SCHEME)
}

fn encode(path: &Path, value: &impl Serialize) -> Result<Vec<u8>, P3Error> {
    rmp_serde::to_vec_named(value).map_err(|source| P3Error::CheckpointEncode {
        path: path.to_path_buf(),
        source,
    })
}

fn decode<T: DeserializeOwned>(ck: &set::Checkpoint, part: &str) -> Result<T, CheckpointError> {
    rmp_serde::from_slice(ck.part(part)?)
        .map_err(|e| ck.invalid(format!("part {part}: cannot decode: {e}")))
}

/// Writes shard `shard`'s file of the checkpoint of `round`.
pub fn write_shard_file(
    dir: &Path,
    round: u64,
    shard: usize,
    slices: Vec<SliceState>,
) -> Result<PartEntry, P3Error> {
    let file = ShardFile {
        version: P3_CHECKPOINT_VERSION,
        round,
        shard,
        slices,
    };
    write_part(dir, round, &shard_part(shard), &file)
}

/// Writes worker `worker`'s file of the checkpoint of `round`.
pub fn write_worker_file(
    dir: &Path,
    round: u64,
    worker: usize,
    stats: Vec<Option<StepStats>>,
) -> Result<PartEntry, P3Error> {
    let file = WorkerFile {
        version: P3_CHECKPOINT_VERSION,
        round,
        worker,
        stats,
    };
    write_part(dir, round, &worker_part(worker), &file)
}

fn write_part(
    dir: &Path,
    round: u64,
    part: &str,
    file: &impl Serialize,
) -> Result<PartEntry, P3Error> {
    let bytes = encode(dir, file)?;
    Ok(checkpoints(dir).write_part(round, part, &bytes)?)
}

/// Writes the manifest of `round` LAST (every part it lists must be durable already), then
/// deletes all but the newest two checkpoints.
pub fn write_manifest(
    dir: &Path,
    round: u64,
    shape: &JobShape,
    parts: Vec<PartEntry>,
) -> Result<(), P3Error> {
    let meta = encode(dir, shape)?;
    checkpoints(dir).commit(round, &meta, parts)?;
    Ok(())
}

/// Deletes every P3 manifest in `dir` (a fresh run starts with none; their parts go with
/// the next prune); other files stay. A missing directory is fine.
pub fn clear(dir: &Path) -> Result<(), P3Error> {
    Ok(checkpoints(dir).clear()?)
}

/// A verified checkpoint: every file it lists.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedCheckpoint {
    /// The first iteration after the checkpoint.
    pub round: u64,
    /// Every shard's file, in shard order.
    pub shards: Vec<ShardFile>,
    /// Every worker's file, in worker order.
    pub workers: Vec<WorkerFile>,
}

/// Whether `ck` is a checkpoint of a job of `shape`, with files whose content matches.
fn accept(ck: set::Checkpoint, shape: &JobShape) -> Result<LoadedCheckpoint, CheckpointError> {
    let saved: JobShape = rmp_serde::from_slice(&ck.meta)
        .map_err(|e| ck.invalid(format!("job shape: cannot decode: {e}")))?;
    if let Some(why) = saved.mismatch(shape) {
        return Err(ck.invalid(why));
    }
    let expected: Vec<String> = (0..shape.shards)
        .map(shard_part)
        .chain((0..shape.workers).map(worker_part))
        .collect();
    if ck.part_names() != expected {
        return Err(ck.invalid("it does not list one file per shard and per worker"));
    }
    let round = ck.round;
    let mut shards = Vec::new();
    for i in 0..shape.shards {
        let f: ShardFile = decode(&ck, &shard_part(i))?;
        if f.version != P3_CHECKPOINT_VERSION || f.round != round || f.shard != i {
            return Err(ck.invalid(format!("not shard {i}'s file of this round")));
        }
        shards.push(f);
    }
    let mut workers = Vec::new();
    for i in 0..shape.workers {
        let f: WorkerFile = decode(&ck, &worker_part(i))?;
        if f.version != P3_CHECKPOINT_VERSION || f.round != round || f.worker != i {
            return Err(ck.invalid(format!("not worker {i}'s file of this round")));
        }
        if f.stats.len() as u64 != round {
            return Err(ck.invalid(format!(
                "worker {i}: {} iterations of statistics, expected {round}",
                f.stats.len()
            )));
        }
        workers.push(f);
    }
    Ok(LoadedCheckpoint {
        round,
        shards,
        workers,
    })
}

/// Loads the checkpoint of `round` in `dir` for a job of `shape`, verifying the manifest,
/// every file's length and checksum, and their content against the manifest.
pub fn load(dir: &Path, round: u64, shape: &JobShape) -> Result<LoadedCheckpoint, P3Error> {
    Ok(accept(checkpoints(dir).load(round)?, shape)?)
}

/// Rounds that have a manifest in `dir`, ascending (not verified; none when `dir` is missing).
pub fn manifest_rounds(dir: &Path) -> Result<Vec<u64>, P3Error> {
    Ok(checkpoints(dir).rounds()?)
}

/// The newest valid checkpoint in `dir` for a job of `shape` (the module's resume policy).
pub fn newest_valid(dir: &Path, shape: &JobShape) -> Result<LoadedCheckpoint, P3Error> {
    Ok(checkpoints(dir).newest_valid(|ck| accept(ck, shape))?)
}

#[cfg(test)]
mod tests {
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
    fn shape() -> JobShape {
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
            Err(P3CoreError::NotInitialised { .. })
        ));
    }

    /// Writes a complete checkpoint of `round` as the nodes do; returns its files.
    fn save(dir: &Path, round: u64) -> LoadedCheckpoint {
        let shards: Vec<ShardFile> = (0..2)
            .map(|shard| ShardFile {
                version: P3_CHECKPOINT_VERSION,
                round,
                shard,
                slices: vec![SliceState {
                    id: shard,
                    params: vec![round as f32, shard as f32],
                    velocity: vec![0.5, 0.25],
                }],
            })
            .collect();
        let workers: Vec<WorkerFile> = (0..2)
            .map(|worker| WorkerFile {
                version: P3_CHECKPOINT_VERSION,
                round,
                worker,
                stats: vec![
                    Some(StepStats {
                        loss: 1.0,
                        accuracy: 0.5
                    });
                    round as usize
                ],
            })
            .collect();
        let mut parts: Vec<PartEntry> = shards
            .iter()
            .map(|f| write_shard_file(dir, round, f.shard, f.slices.clone()).unwrap())
            .collect();
        parts.extend(
            workers
                .iter()
                .map(|f| write_worker_file(dir, round, f.worker, f.stats.clone()).unwrap()),
        );
        write_manifest(dir, round, &shape(), parts).unwrap();
        LoadedCheckpoint {
            round,
            shards,
            workers,
        }
    }

    #[test]
    fn a_saved_checkpoint_loads_and_only_the_newest_two_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        for r in [4, 8, 12] {
            save(dir.path(), r);
        }
        assert_eq!(manifest_rounds(dir.path()).unwrap(), vec![8, 12]);
        let newest = newest_valid(dir.path(), &shape()).unwrap();
        let again = tempfile::tempdir().unwrap();
        assert_eq!(newest, save(again.path(), 12));
        assert_eq!(load(dir.path(), 8, &shape()).unwrap().round, 8);
        // Another job's shape never loads.
        let other = JobShape {
            shards: 3,
            ..shape()
        };
        let e = newest_valid(dir.path(), &other).unwrap_err().to_string();
        assert!(e.contains("shards is 2 in the checkpoint but 3"), "{e}");
        clear(dir.path()).unwrap();
        assert!(manifest_rounds(dir.path()).unwrap().is_empty());
        let e = newest_valid(&dir.path().join("none"), &shape()).unwrap_err();
        assert!(e.to_string().contains("there is none"), "{e}");
        // A file in P3's older format is refused, naming it and the format.
        std::fs::write(dir.path().join("p3-round-4.manifest"), b"PETRP3M1 old").unwrap();
        let e = newest_valid(dir.path(), &shape()).unwrap_err().to_string();
        assert!(
            e.contains("p3-round-4.manifest") && e.contains("older format PETRP3M1"),
            "{e}"
        );
    }
}
