//! PS checkpoints on the runtime's checkpoint set ([`petrel_actors::checkpoint`]: one
//! manifest written last, parts checked by length and FNV-1a 64, the newest two kept).
//!
//! * Job checkpoints (scheme `ps`, round = clock): one part per shard (`shard-<s>`), per
//!   worker (`worker-<w>`) and of the monitor; the manifest's meta is the job's
//!   [`JobShape`], which a resuming job must match.
//! * A shard's own checkpoint (scheme `ps-shard-<s>`, [`write_shard`]): its tables at its
//!   min clock (a valid bounded-staleness state). Every one is kept.
//!
//! Update-rule state (momentum, Adagrad accumulators) is not saved.

use std::path::{Path, PathBuf};

use crate::core::checkpoint::{JobShape, Piece};
use crate::core::error::PsCoreError;
use crate::core::shard::{PsShardCore, TableSnapshot};
use crate::core::types::Clock;
use petrel_actors::checkpoint::{self as set, CheckpointError, CheckpointSet, PartEntry};

/// The scheme of job checkpoints.
pub const SCHEME: &str = "ps";
const TABLES: &str = "tables";

fn bad(path: &Path, reason: impl Into<String>) -> PsCoreError {
    PsCoreError::Checkpoint {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

impl From<CheckpointError> for PsCoreError {
    fn from(e: CheckpointError) -> Self {
        match e {
            CheckpointError::Io { path, source } => PsCoreError::CheckpointIo {
                path: path.display().to_string(),
                source,
            },
            other => bad(other.path(), other.reason()),
        }
    }
}

/// msgpack bytes of a checkpoint piece.
pub(crate) fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, PsCoreError> {
    rmp_serde::to_vec(value).map_err(|e| PsCoreError::Encode(e.to_string()))
}

fn shard_set(dir: &Path, shard: u32) -> CheckpointSet {
    CheckpointSet::new(dir, &format!("ps-shard-{shard}")).keeping(usize::MAX)
}

/// The job checkpoints in `dir`.
pub fn job_set(dir: &Path) -> CheckpointSet {
    CheckpointSet::new(dir, SCHEME)
}

/// Checkpoints `core` at its current min clock; returns that clock.
pub fn write_shard(dir: &Path, shard: u32, core: &PsShardCore) -> Result<Clock, PsCoreError> {
    let (set, clock) = (shard_set(dir, shard), core.min_clock());
    let part = set.write_part(clock, TABLES, &encode(&core.snapshot())?)?;
    set.commit(clock, &[], vec![part])?;
    Ok(clock)
}

/// Loads and verifies the checkpoint of shard `shard` at `clock` from `dir`: its tables.
pub fn load_checkpoint(
    dir: &Path,
    shard: u32,
    clock: Clock,
) -> Result<Vec<TableSnapshot>, PsCoreError> {
    let ck = shard_set(dir, shard).load(clock)?;
    rmp_serde::from_slice(ck.part(TABLES)?).map_err(|e| bad(&ck.path, format!("decode: {e}")))
}

/// A job checkpoint loaded and verified: its clock and every piece's bytes.
#[derive(Debug, Clone)]
pub struct JobCheckpoint {
    /// The clock every worker resumes at.
    pub clock: Clock,
    ck: set::Checkpoint,
}

impl JobCheckpoint {
    /// The bytes of `piece`, or an error naming the checkpoint.
    pub fn piece(&self, piece: Piece) -> Result<&[u8], PsCoreError> {
        Ok(self.ck.part(&piece.part())?)
    }

    /// Shard `s`'s tables.
    pub fn shard_tables(&self, shard: u32) -> Result<Vec<TableSnapshot>, PsCoreError> {
        rmp_serde::from_slice(self.piece(Piece::Shard(shard))?)
            .map_err(|e| bad(&self.ck.path, format!("shard {shard}: decode: {e}")))
    }
}

/// Writes `bytes` durably as `piece` of the checkpoint of `clock`; returns its entry.
pub fn write_piece(
    dir: &Path,
    clock: Clock,
    piece: Piece,
    bytes: &[u8],
) -> Result<PartEntry, PsCoreError> {
    Ok(job_set(dir).write_part(clock, &piece.part(), bytes)?)
}

/// Writes the manifest of `clock` LAST and keeps the newest two; returns its path.
pub fn write_job_manifest(
    dir: &Path,
    clock: Clock,
    shape: &JobShape,
    pieces: Vec<PartEntry>,
) -> Result<PathBuf, PsCoreError> {
    let path = job_set(dir).commit(clock, &encode(shape)?, pieces)?;
    tracing::info!(clock, dir = %dir.display(), "ps checkpoint complete");
    Ok(path)
}

/// The clocks with a job manifest in `dir`, ascending (none when `dir` does not exist).
pub fn job_manifest_clocks(dir: &Path) -> Result<Vec<Clock>, PsCoreError> {
    Ok(job_set(dir).rounds()?)
}

/// Deletes older runs' manifests (refusing a directory of an older format).
pub fn clear_job_checkpoints(dir: &Path) -> Result<(), PsCoreError> {
    Ok(job_set(dir).clear()?)
}

/// Whether `ck` is a complete checkpoint of a job of `shape`.
fn accept(ck: set::Checkpoint, shape: &JobShape) -> Result<JobCheckpoint, CheckpointError> {
    let saved: JobShape = rmp_serde::from_slice(&ck.meta)
        .map_err(|e| ck.invalid(format!("job shape decode: {e}")))?;
    if let Some(why) = shape.difference(&saved) {
        return Err(ck.invalid(why));
    }
    lists_every_piece(&ck, shape.shards, shape.workers).map_err(|why| ck.invalid(why))?;
    Ok(JobCheckpoint {
        clock: ck.round,
        ck,
    })
}

/// Whether `ck` has exactly the pieces of `shards` shards, `workers` workers and a monitor.
fn lists_every_piece(ck: &set::Checkpoint, shards: u32, workers: u32) -> Result<(), String> {
    let mut expected: Vec<String> = (0..shards)
        .map(Piece::Shard)
        .chain((0..workers).map(Piece::Worker))
        .chain([Piece::Monitor])
        .map(|p| p.part())
        .collect();
    let mut listed: Vec<String> = ck.part_names().into_iter().map(String::from).collect();
    expected.sort();
    listed.sort();
    if listed != expected {
        return Err(format!("lists {listed:?}, expected {expected:?}"));
    }
    Ok(())
}

/// The part of [`load_newest_job_checkpoint`]'s check that needs no data (what a launcher
/// checks): `ck` is of `app` on `shards` shards and `workers` workers, with every piece.
pub fn fits_layout(
    ck: &set::Checkpoint,
    app: &str,
    shards: usize,
    workers: usize,
) -> Result<(), String> {
    let saved: JobShape =
        rmp_serde::from_slice(&ck.meta).map_err(|e| format!("job shape decode: {e}"))?;
    let (shards, workers) = (shards as u64, workers as u64);
    if saved.app != app || u64::from(saved.shards) != shards || u64::from(saved.workers) != workers
    {
        return Err(format!(
            "checkpoint of another job: {} on {} shard(s) and {} worker(s), not {app} on \
             {shards} and {workers}",
            saved.app, saved.shards, saved.workers
        ));
    }
    lists_every_piece(ck, saved.shards, saved.workers)
}

/// The newest valid checkpoint in `dir` (skipping invalid ones), else every refusal.
pub fn load_newest_job_checkpoint(
    dir: &Path,
    shape: &JobShape,
) -> Result<JobCheckpoint, PsCoreError> {
    Ok(job_set(dir).newest_valid(|ck| accept(ck, shape))?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::rules::RuleRegistry;
    use crate::core::types::{
        Consistency, Row, RowId, RowUpdate, TableId, TableKind, TableSpec, UpdateBatch, WorkerId,
    };
    use std::fs;

    /// Loads and verifies the checkpoint of `clock`: manifest, job shape and every file.
    pub(crate) fn load_job_checkpoint(
        dir: &Path,
        clock: Clock,
        shape: &JobShape,
    ) -> Result<JobCheckpoint, PsCoreError> {
        Ok(accept(job_set(dir).load(clock)?, shape)?)
    }

    fn specs() -> Vec<TableSpec> {
        vec![
            TableSpec::new(1, "dense", TableKind::Dense { width: 3 }, Consistency::Bsp),
            TableSpec::new(2, "sparse", TableKind::Sparse, Consistency::Bsp),
        ]
    }

    fn shard() -> PsShardCore {
        let mut s = PsShardCore::new(1, specs()).unwrap();
        let mut updates = Vec::new();
        for r in 0..50u64 {
            updates.push(RowUpdate {
                table: TableId(1),
                row: RowId(r),
                delta: Row::Dense(vec![r as f32, 0.5, -1.0]).into(),
            });
            updates.push(RowUpdate {
                table: TableId(2),
                row: RowId(r * 7),
                delta: Row::Sparse(vec![(r as u32, 1.0), (1000, 2.5)]).into(),
            });
        }
        s.apply_updates(WorkerId(0), 0, &UpdateBatch { seq: 1, updates })
            .unwrap();
        s.clock(WorkerId(0), 0).unwrap();
        s
    }

    #[test]
    fn a_shard_checkpoint_round_trips_identical_tables() {
        let dir = tempfile::tempdir().unwrap();
        let s = shard();
        let clock = write_shard(dir.path(), 3, &s).unwrap();
        assert_eq!(clock, 1);
        let tables = load_checkpoint(dir.path(), 3, 1).unwrap();
        assert_eq!(tables, s.snapshot());
        let restored =
            PsShardCore::restore(1, specs(), &RuleRegistry::new(), tables, clock).unwrap();
        assert_eq!(restored.snapshot(), s.snapshot());
        assert_eq!(shard_set(dir.path(), 3).rounds().unwrap(), vec![1]);
        assert!(shard_set(dir.path(), 4).rounds().unwrap().is_empty());
        let e = load_checkpoint(dir.path(), 3, 9).unwrap_err().to_string();
        assert!(e.contains("missing manifest"), "{e}");
    }

    fn job_shape() -> JobShape {
        JobShape {
            app: "test".into(),
            shards: 1,
            workers: 2,
            every: 5,
            tables: specs(),
        }
    }

    /// A complete checkpoint of `clock` (shard 0's tables, two workers, the monitor).
    fn write_job(dir: &Path, clock: Clock) {
        let s = shard();
        let mut files = vec![
            write_piece(dir, clock, Piece::Shard(0), &encode(&s.snapshot()).unwrap()).unwrap(),
        ];
        for piece in [Piece::Worker(0), Piece::Worker(1), Piece::Monitor] {
            let bytes = format!("{piece:?} at {clock}");
            files.push(write_piece(dir, clock, piece, bytes.as_bytes()).unwrap());
        }
        write_job_manifest(dir, clock, &job_shape(), files).unwrap();
    }

    #[test]
    fn job_checkpoints_load_the_newest_valid_and_prune_to_two() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(load_newest_job_checkpoint(d, &job_shape()).is_err());
        for clock in [5, 10, 15] {
            write_job(d, clock);
        }
        // A newer checkpoint in progress (a worker's file, no manifest) survives pruning.
        write_piece(d, 20, Piece::Worker(0), b"early").unwrap();
        write_job(d, 15);
        assert_eq!(job_manifest_clocks(d).unwrap(), vec![10, 15]);
        let part = |clock, p: Piece| d.join(set::part_name(SCHEME, clock, &p.part()));
        assert!(part(20, Piece::Worker(0)).exists());
        assert!(!part(5, Piece::Shard(0)).exists());
        let ck = load_newest_job_checkpoint(d, &job_shape()).unwrap();
        assert_eq!(ck.clock, 15);
        assert_eq!(ck.piece(Piece::Worker(1)).unwrap(), b"Worker(1) at 15");
        assert_eq!(ck.shard_tables(0).unwrap(), shard().snapshot());

        // A damaged piece of clock 15: never loaded, 10 is used.
        let worker = part(15, Piece::Worker(1));
        let orig = fs::read(&worker).unwrap();
        fs::write(&worker, &orig[..orig.len() - 1]).unwrap();
        assert!(
            load_job_checkpoint(d, 15, &job_shape())
                .unwrap_err()
                .to_string()
                .contains("truncated")
        );
        assert_eq!(
            load_newest_job_checkpoint(d, &job_shape()).unwrap().clock,
            10
        );
        // A damaged manifest, or another job's shape: refused, naming why; none valid.
        let m10 = job_set(d).manifest_path(10);
        let mut bytes = fs::read(&m10).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&m10, &bytes).unwrap();
        let e = load_newest_job_checkpoint(d, &job_shape())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no valid checkpoint") && e.contains("checksum"),
            "{e}"
        );
        write_job(d, 25);
        let other = JobShape {
            workers: 3,
            ..job_shape()
        };
        let e = load_newest_job_checkpoint(d, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers 2 in the checkpoint, 3 now"), "{e}");
        // A fresh run clears the manifests: nothing to resume.
        clear_job_checkpoints(d).unwrap();
        assert!(job_manifest_clocks(d).unwrap().is_empty());
    }

    #[test]
    fn an_older_format_is_refused_naming_the_file_and_the_format() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("ps-clock-5.manifest");
        fs::write(&old, b"PSJOBCK1 and an old body").unwrap();
        for e in [
            load_newest_job_checkpoint(dir.path(), &job_shape()).unwrap_err(),
            clear_job_checkpoints(dir.path()).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.contains("ps-clock-5.manifest") && e.contains("older format PSJOBCK1"),
                "{e}"
            );
        }
    }
}
