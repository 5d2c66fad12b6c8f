//! P3 checkpoint files on disk: the I/O half of [`crate::core::checkpoint`], on the
//! runtime's checkpoint set ([`petrel_actors::checkpoint`], scheme `p3`: parts
//! `shard-<i>` and `worker-<i>`, the manifest written LAST with the [`JobShape`] as its
//! meta, the newest two kept).
//!
//! Resume policy: [`newest_valid`] loads the newest checkpoint whose files all verify and
//! whose shape is this job's, warning about each invalid newer one; if none is valid (or
//! there is none) it fails listing why each was refused: a resumed job never silently
//! starts over.

use std::path::{Path, PathBuf};

use petrel_actors::checkpoint::{self as set, CheckpointError, CheckpointSet, PartEntry};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::P3Error;
use crate::core::checkpoint::{
    JobShape, P3_CHECKPOINT_VERSION, SCHEME, ShardFile, WorkerFile, shard_part, worker_part,
};

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

/// Writes a shard's file of its checkpoint round.
pub fn write_shard_file(dir: &Path, file: &ShardFile) -> Result<PartEntry, P3Error> {
    write_part(dir, file.round, &shard_part(file.shard), file)
}

/// Writes a worker's file of its checkpoint round.
pub fn write_worker_file(dir: &Path, file: &WorkerFile) -> Result<PartEntry, P3Error> {
    write_part(dir, file.round, &worker_part(file.worker), file)
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
    use crate::core::checkpoint::SliceState;
    use crate::core::checkpoint::tests::shape;
    use crate::kit::StepStats;

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
            .map(|f| write_shard_file(dir, f).unwrap())
            .collect();
        parts.extend(workers.iter().map(|f| write_worker_file(dir, f).unwrap()));
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
