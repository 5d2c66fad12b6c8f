//! P3 checkpoint files on disk: the I/O half of [`crate::core::checkpoint`], with the
//! durable-file helpers of [`petrel_actors::durable`] (temp file, fsync, rename; the
//! manifest framed with a checksum and written LAST; every file re-verified on load).
//!
//! Resume policy: [`newest_valid`] tries the manifests newest first, logs a warning for
//! each invalid one and loads the newest valid one; if none is valid (or there is none)
//! it fails listing why each was refused: a resumed job never silently starts over.

use std::path::{Path, PathBuf};

use petrel_actors::durable::{self, DurableError, FileDigest};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::core::checkpoint::{
    FileEntry, JobShape, P3_CHECKPOINT_VERSION, P3_CHECKPOINTS_KEPT, P3_MANIFEST_MAGIC, P3Manifest,
    ShardFile, WorkerFile, manifest_name, parse_name,
};

/// Where and how often a P3 job checkpoints, and whether it starts from the newest
/// checkpoint.
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

/// A P3 checkpoint could not be written or is not valid; names the file.
#[derive(Debug, thiserror::Error)]
pub enum P3CheckpointError {
    /// A file could not be read or written, or does not match its manifest.
    #[error(transparent)]
    Durable(#[from] DurableError),
    /// A file's content is not what this job expects.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be encoded.
    #[error("{}: cannot encode: {source}", path.display())]
    Encode {
        /// The file.
        path: PathBuf,
        /// The encoder's error.
        #[source]
        source: rmp_serde::encode::Error,
    },
    /// Resuming was asked for and no checkpoint in the directory is valid.
    #[error("no valid P3 checkpoint to resume from in {}{}", dir.display(), reasons_list(reasons))]
    NoValid {
        /// The directory.
        dir: PathBuf,
        /// Why each checkpoint was refused, newest first.
        reasons: Vec<String>,
    },
}

fn reasons_list(reasons: &[String]) -> String {
    if reasons.is_empty() {
        " (there is none)".into()
    } else {
        format!(": {}", reasons.join("; "))
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> P3CheckpointError {
    P3CheckpointError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn encode(path: &Path, value: &impl Serialize) -> Result<Vec<u8>, P3CheckpointError> {
    rmp_serde::to_vec_named(value).map_err(|source| P3CheckpointError::Encode {
        path: path.to_path_buf(),
        source,
    })
}

fn decode<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, P3CheckpointError> {
    rmp_serde::from_slice(bytes).map_err(|e| invalid(path, format!("cannot decode: {e}")))
}

/// Writes `value` as `dir/name` durably; returns its manifest entry.
fn write_file(
    dir: &Path,
    name: String,
    value: &impl Serialize,
) -> Result<FileEntry, P3CheckpointError> {
    durable::create_dir(dir)?;
    let bytes = encode(&dir.join(&name), value)?;
    durable::write_atomic(dir, &name, &bytes)?;
    durable::sync_dir(dir)?;
    let d = FileDigest::of(&bytes);
    Ok(FileEntry {
        name,
        len: d.len,
        fnv64: d.fnv64,
    })
}

/// Writes a shard's file of its checkpoint round.
pub fn write_shard_file(dir: &Path, file: &ShardFile) -> Result<FileEntry, P3CheckpointError> {
    let name = crate::core::checkpoint::shard_file(file.round, file.shard);
    write_file(dir, name, file)
}

/// Writes a worker's file of its checkpoint round.
pub fn write_worker_file(dir: &Path, file: &WorkerFile) -> Result<FileEntry, P3CheckpointError> {
    let name = crate::core::checkpoint::worker_file(file.round, file.worker);
    write_file(dir, name, file)
}

/// Writes the manifest LAST (every file it lists must be durable already), then deletes
/// all but the newest [`P3_CHECKPOINTS_KEPT`] checkpoints.
pub fn write_manifest(dir: &Path, manifest: &P3Manifest) -> Result<(), P3CheckpointError> {
    let name = manifest_name(manifest.round);
    let body = encode(&dir.join(&name), manifest)?;
    durable::write_atomic(dir, &name, &durable::frame(P3_MANIFEST_MAGIC, &body))?;
    durable::sync_dir(dir)?;
    for stale in durable::prune_plan(
        &durable::list_names(dir)?,
        parse_name,
        manifest.round,
        P3_CHECKPOINTS_KEPT,
    ) {
        durable::remove_if_exists(dir, &stale)?;
    }
    Ok(())
}

/// Deletes every P3 checkpoint file in `dir` (a fresh run starts with none); other files
/// stay. A missing directory is fine.
pub fn clear(dir: &Path) -> Result<(), P3CheckpointError> {
    if !dir.exists() {
        return Ok(());
    }
    for name in durable::prune_plan(&durable::list_names(dir)?, parse_name, u64::MAX, 0) {
        durable::remove_if_exists(dir, &name)?;
    }
    Ok(())
}

/// A verified checkpoint: the manifest and every file it lists.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedCheckpoint {
    /// The manifest.
    pub manifest: P3Manifest,
    /// Every shard's file, in shard order.
    pub shards: Vec<ShardFile>,
    /// Every worker's file, in worker order.
    pub workers: Vec<WorkerFile>,
}

/// Loads the checkpoint of `round` in `dir` for a job of `shape`, verifying the manifest,
/// every file's length and checksum, and their content against the manifest.
pub fn load(
    dir: &Path,
    round: u64,
    shape: &JobShape,
) -> Result<LoadedCheckpoint, P3CheckpointError> {
    let path = dir.join(manifest_name(round));
    let manifest: P3Manifest = decode(&path, &durable::read_framed(&path, P3_MANIFEST_MAGIC)?)?;
    if let Some(why) = manifest.mismatch(round, shape) {
        return Err(invalid(&path, why));
    }
    let read = |e: &FileEntry| -> Result<(PathBuf, Vec<u8>), P3CheckpointError> {
        let digest = FileDigest {
            len: e.len,
            fnv64: e.fnv64,
        };
        Ok((
            dir.join(&e.name),
            durable::read_verified(dir, &e.name, digest)?,
        ))
    };
    let mut shards = Vec::new();
    for (i, e) in manifest.shards.iter().enumerate() {
        let (p, bytes) = read(e)?;
        let f: ShardFile = decode(&p, &bytes)?;
        if f.version != P3_CHECKPOINT_VERSION || f.round != round || f.shard != i {
            return Err(invalid(&p, format!("not shard {i}'s file of this round")));
        }
        shards.push(f);
    }
    let mut workers = Vec::new();
    for (i, e) in manifest.workers.iter().enumerate() {
        let (p, bytes) = read(e)?;
        let f: WorkerFile = decode(&p, &bytes)?;
        if f.version != P3_CHECKPOINT_VERSION || f.round != round || f.worker != i {
            return Err(invalid(&p, format!("not worker {i}'s file of this round")));
        }
        if f.stats.len() as u64 != round {
            return Err(invalid(
                &p,
                format!(
                    "{} iterations of statistics, expected {round}",
                    f.stats.len()
                ),
            ));
        }
        workers.push(f);
    }
    Ok(LoadedCheckpoint {
        manifest,
        shards,
        workers,
    })
}

/// Rounds that have a manifest in `dir`, ascending (not verified; none when `dir` is
/// missing).
pub fn manifest_rounds(dir: &Path) -> Result<Vec<u64>, P3CheckpointError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    Ok(durable::manifest_rounds_among(
        &durable::list_names(dir)?,
        parse_name,
    ))
}

/// The newest valid checkpoint in `dir` for a job of `shape` (the module's resume policy).
pub fn newest_valid(dir: &Path, shape: &JobShape) -> Result<LoadedCheckpoint, P3CheckpointError> {
    let rounds = manifest_rounds(dir)?;
    match durable::choose_newest_valid(&rounds, |r| load(dir, r, shape)) {
        Ok((ck, refused)) => {
            for reason in refused {
                tracing::warn!(%reason, "skipping an invalid P3 checkpoint");
            }
            Ok(ck)
        }
        Err(reasons) => Err(P3CheckpointError::NoValid {
            dir: dir.to_path_buf(),
            reasons,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::checkpoint::{SliceState, shard_file, worker_file};
    use crate::kit::StepStats;

    fn shape() -> JobShape {
        JobShape {
            tag: "mlp".into(),
            mode: "p3".into(),
            slice_size: 4,
            workers: 2,
            shards: 2,
            tensors: vec![3],
            opt_bits: (1, 2),
        }
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
        let manifest = P3Manifest {
            version: P3_CHECKPOINT_VERSION,
            round,
            shape: shape(),
            shards: shards
                .iter()
                .map(|f| write_shard_file(dir, f).unwrap())
                .collect(),
            workers: workers
                .iter()
                .map(|f| write_worker_file(dir, f).unwrap())
                .collect(),
        };
        write_manifest(dir, &manifest).unwrap();
        LoadedCheckpoint {
            manifest,
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
        assert!(!dir.path().join(shard_file(4, 0)).exists());
        let newest = newest_valid(dir.path(), &shape()).unwrap();
        let again = tempfile::tempdir().unwrap();
        assert_eq!(newest, save(again.path(), 12));
        // Another job's shape never loads.
        let other = JobShape {
            shards: 3,
            ..shape()
        };
        let e = newest_valid(dir.path(), &other).unwrap_err().to_string();
        assert!(e.contains("shards is 2 in the checkpoint but 3"), "{e}");
        clear(dir.path()).unwrap();
        assert!(manifest_rounds(dir.path()).unwrap().is_empty());
        assert!(durable::list_names(dir.path()).unwrap().is_empty());
    }

    /// A damaged newest checkpoint is skipped for the older one; damaged both, none loads.
    #[test]
    fn truncated_flipped_or_missing_files_never_load() {
        type Damage = fn(&Path);
        let damages: [(&str, Damage); 5] = [
            ("truncated shard file", |d| {
                let p = d.join(shard_file(8, 1));
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..b.len() - 3]).unwrap();
            }),
            ("flipped byte in a worker file", |d| {
                let p = d.join(worker_file(8, 0));
                let mut b = std::fs::read(&p).unwrap();
                let mid = b.len() / 2;
                b[mid] ^= 0x20;
                std::fs::write(&p, b).unwrap();
            }),
            ("flipped byte in the manifest", |d| {
                let p = d.join(manifest_name(8));
                let mut b = std::fs::read(&p).unwrap();
                b[10] ^= 0x01;
                std::fs::write(&p, b).unwrap();
            }),
            ("missing manifest", |d| {
                std::fs::remove_file(d.join(manifest_name(8))).unwrap();
            }),
            ("missing shard file", |d| {
                std::fs::remove_file(d.join(shard_file(8, 0))).unwrap();
            }),
        ];
        for (what, damage) in damages {
            let dir = tempfile::tempdir().unwrap();
            save(dir.path(), 4);
            save(dir.path(), 8);
            damage(dir.path());
            assert!(load(dir.path(), 8, &shape()).is_err(), "{what}");
            let ck = newest_valid(dir.path(), &shape()).unwrap();
            assert_eq!(ck.manifest.round, 4, "{what}: falls back to the older one");
            // Damage the older one too (its manifest gone): nothing loads, with a reason.
            std::fs::remove_file(dir.path().join(manifest_name(4))).unwrap();
            let e = newest_valid(dir.path(), &shape()).unwrap_err();
            assert!(
                matches!(e, P3CheckpointError::NoValid { .. }),
                "{what}: {e}"
            );
        }
        let empty = tempfile::tempdir().unwrap();
        let e = newest_valid(&empty.path().join("none"), &shape()).unwrap_err();
        assert!(e.to_string().contains("there is none"), "{e}");
    }
}
