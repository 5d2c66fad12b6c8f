//! Atomic checkpoints of a shard's tables.
//!
//! Layout in the checkpoint directory, per shard `S` and clock `C`:
//! * `shard-S-clock-C-table-T.bin`: the rows of table `T` (`TableSnapshot`, msgpack);
//! * `shard-S-clock-C.manifest`: magic, msgpack `Manifest` listing every data file with its
//!   length and FNV-1a 64 checksum, then the FNV-1a 64 of the manifest body.
//!
//! Every file is written to a temp file in the same directory, fsynced, renamed into place,
//! and the directory is fsynced. The manifest is written last, so a checkpoint exists only
//! once all its data is durable; a crash mid-way leaves no manifest (never loads) and an older
//! checkpoint stays valid. Loading verifies the manifest and every file's length and checksum.
//!
//! What a checkpoint at clock `C` contains: the shard's rows when written, i.e. every update
//! of clocks `< C` (write it when `min_clock() == C`) and possibly some newer ones of faster
//! workers, which is itself a valid bounded-staleness state. Update-rule state (momentum,
//! Adagrad accumulators) is not saved.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::checkpoint::{self as plan, JobShape, Piece, parse_name, piece_name};
use crate::core::error::PsCoreError;
use crate::core::shard::{PsShardCore, TableSnapshot};
use crate::core::types::{Clock, TableId};
pub use petrel_actors::durable::fnv1a64;
use petrel_actors::durable::{self, DurableError, FileDigest};

const MANIFEST_MAGIC: &[u8; 8] = b"PSMANIF1";
const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ManifestEntry {
    name: String,
    table: TableId,
    len: u64,
    fnv64: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    shard: u32,
    clock: Clock,
    files: Vec<ManifestEntry>,
}

/// A loaded, verified checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The shard.
    pub shard: u32,
    /// The min clock the checkpoint was taken at.
    pub clock: Clock,
    /// Its rows.
    pub tables: Vec<TableSnapshot>,
}

fn manifest_name(shard: u32, clock: Clock) -> String {
    format!("shard-{shard}-clock-{clock}.manifest")
}

fn data_name(shard: u32, clock: Clock, table: TableId) -> String {
    format!("shard-{shard}-clock-{clock}-table-{}.bin", table.0)
}

fn bad(path: &Path, reason: impl Into<String>) -> PsCoreError {
    PsCoreError::Checkpoint {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

impl From<DurableError> for PsCoreError {
    fn from(e: DurableError) -> Self {
        match e {
            DurableError::Invalid { path, reason } => bad(&path, reason),
            DurableError::Manifest { path, source } => bad(&path, source.to_string()),
            DurableError::Io { path, source } => PsCoreError::CheckpointIo {
                path: path.display().to_string(),
                source,
            },
        }
    }
}

/// Writes all `tables` of shard `shard` at `clock` into `dir` (created if needed) and returns
/// the manifest path.
pub fn write_checkpoint(
    dir: &Path,
    shard: u32,
    clock: Clock,
    tables: &[TableSnapshot],
) -> Result<PathBuf, PsCoreError> {
    durable::create_dir(dir)?;
    let mut files = Vec::with_capacity(tables.len());
    for t in tables {
        let bytes = rmp_serde::to_vec(t).map_err(|e| PsCoreError::Encode(e.to_string()))?;
        let name = data_name(shard, clock, t.table);
        durable::write_atomic(dir, &name, &bytes)?;
        files.push(ManifestEntry {
            name,
            table: t.table,
            len: bytes.len() as u64,
            fnv64: fnv1a64(&bytes),
        });
    }
    durable::sync_dir(dir)?;
    let manifest = Manifest {
        version: FORMAT_VERSION,
        shard,
        clock,
        files,
    };
    let body = rmp_serde::to_vec(&manifest).map_err(|e| PsCoreError::Encode(e.to_string()))?;
    let name = manifest_name(shard, clock);
    durable::write_atomic(dir, &name, &durable::frame(MANIFEST_MAGIC, &body))?;
    durable::sync_dir(dir)?;
    tracing::debug!(shard, clock, dir = %dir.display(), "checkpoint written");
    Ok(dir.join(name))
}

/// Checkpoints `core` at its current min clock; returns that clock.
pub fn write_shard(dir: &Path, shard: u32, core: &PsShardCore) -> Result<Clock, PsCoreError> {
    let clock = core.min_clock();
    write_checkpoint(dir, shard, clock, &core.snapshot())?;
    Ok(clock)
}

fn read_manifest(path: &Path) -> Result<Manifest, PsCoreError> {
    let body = durable::read_framed(path, MANIFEST_MAGIC)?;
    let m: Manifest =
        rmp_serde::from_slice(&body).map_err(|e| bad(path, format!("manifest decode: {e}")))?;
    if m.version != FORMAT_VERSION {
        return Err(bad(path, format!("unsupported version {}", m.version)));
    }
    Ok(m)
}

/// Loads and verifies the checkpoint of shard `shard` at `clock` from `dir`.
pub fn load_checkpoint(dir: &Path, shard: u32, clock: Clock) -> Result<Checkpoint, PsCoreError> {
    let mpath = dir.join(manifest_name(shard, clock));
    let m = read_manifest(&mpath)?;
    if m.shard != shard || m.clock != clock {
        return Err(bad(
            &mpath,
            format!("manifest is for shard {} clock {}", m.shard, m.clock),
        ));
    }
    let mut tables = Vec::with_capacity(m.files.len());
    for e in &m.files {
        // The name comes from a file: never let it leave the directory.
        durable::check_file_name(&e.name).map_err(|reason| bad(&mpath, reason.to_string()))?;
        let path = dir.join(&e.name);
        let bytes = durable::read_verified(
            dir,
            &e.name,
            FileDigest {
                len: e.len,
                fnv64: e.fnv64,
            },
        )?;
        let snap: TableSnapshot =
            rmp_serde::from_slice(&bytes).map_err(|err| bad(&path, format!("decode: {err}")))?;
        if snap.table != e.table {
            return Err(bad(&path, "table id differs from manifest"));
        }
        tables.push(snap);
    }
    Ok(Checkpoint {
        shard,
        clock,
        tables,
    })
}

/// Clocks that have a manifest for `shard` in `dir`, ascending (not yet verified: use
/// `load_checkpoint`, falling back to an older clock if the newest fails).
pub fn list_checkpoints(dir: &Path, shard: u32) -> Result<Vec<Clock>, PsCoreError> {
    let prefix = format!("shard-{shard}-clock-");
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(c) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".manifest"))
            .and_then(|c| c.parse::<Clock>().ok())
        {
            out.push(c);
        }
    }
    out.sort_unstable();
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Job checkpoints: every shard, every worker and the monitor at one clock, one manifest.
// ---------------------------------------------------------------------------------------

const JOB_MANIFEST_MAGIC: &[u8; 8] = b"PSJOBCK1";
/// Checkpoints kept: the newest complete one and the one before.
pub const KEEP: usize = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct JobManifest {
    version: u32,
    clock: Clock,
    shape: JobShape,
    files: Vec<(Piece, String, FileDigest)>,
}

/// A job checkpoint loaded and verified: its clock and every piece's bytes.
#[derive(Debug, Clone)]
pub struct JobCheckpoint {
    /// The clock every worker resumes at.
    pub clock: Clock,
    /// Every file's content, by piece.
    pub pieces: std::collections::BTreeMap<Piece, Vec<u8>>,
}

impl JobCheckpoint {
    /// The bytes of `piece`, or an error naming the checkpoint.
    pub fn piece(&self, piece: Piece) -> Result<&[u8], PsCoreError> {
        self.pieces.get(&piece).map(Vec::as_slice).ok_or_else(|| {
            bad(
                Path::new(&plan::manifest_name(self.clock)),
                format!("no file for {piece:?}"),
            )
        })
    }

    /// Shard `s`'s tables.
    pub fn shard_tables(&self, shard: u32) -> Result<Vec<TableSnapshot>, PsCoreError> {
        let bytes = self.piece(Piece::Shard(shard))?;
        rmp_serde::from_slice(bytes).map_err(|e| {
            bad(
                Path::new(&piece_name(self.clock, Piece::Shard(shard))),
                format!("decode: {e}"),
            )
        })
    }
}

/// Writes `bytes` as `piece` of the checkpoint of `clock` in `dir` (created if needed),
/// durably; returns the file's name and digest for the manifest.
pub fn write_piece(
    dir: &Path,
    clock: Clock,
    piece: Piece,
    bytes: &[u8],
) -> Result<(String, FileDigest), PsCoreError> {
    durable::create_dir(dir)?;
    let name = piece_name(clock, piece);
    durable::write_atomic(dir, &name, bytes)?;
    durable::sync_dir(dir)?;
    Ok((name, FileDigest::of(bytes)))
}

/// Shard `shard`'s piece: its tables, msgpack.
pub fn write_shard_piece(
    dir: &Path,
    clock: Clock,
    shard: u32,
    tables: &[TableSnapshot],
) -> Result<(String, FileDigest), PsCoreError> {
    let bytes = rmp_serde::to_vec(tables).map_err(|e| PsCoreError::Encode(e.to_string()))?;
    write_piece(dir, clock, Piece::Shard(shard), &bytes)
}

/// Writes the manifest of `clock` LAST (every listed file is already durable), then
/// deletes all but the newest [`KEEP`] checkpoints at or below `clock` (files of newer
/// checkpoints still in progress are left alone). Returns the manifest's path.
pub fn write_job_manifest(
    dir: &Path,
    clock: Clock,
    shape: &JobShape,
    files: Vec<(Piece, String, FileDigest)>,
) -> Result<PathBuf, PsCoreError> {
    let manifest = JobManifest {
        version: FORMAT_VERSION,
        clock,
        shape: shape.clone(),
        files,
    };
    let body = rmp_serde::to_vec(&manifest).map_err(|e| PsCoreError::Encode(e.to_string()))?;
    let name = plan::manifest_name(clock);
    durable::write_atomic(dir, &name, &durable::frame(JOB_MANIFEST_MAGIC, &body))?;
    durable::sync_dir(dir)?;
    let names: Vec<String> = durable::list_names(dir)?
        .into_iter()
        .filter(|n| parse_name(n).is_some_and(|(c, _)| c <= clock))
        .collect();
    for doomed in durable::prune_plan(&names, parse_name, clock, KEEP) {
        durable::remove_if_exists(dir, &doomed)?;
    }
    tracing::info!(clock, dir = %dir.display(), "ps checkpoint complete");
    Ok(dir.join(name))
}

/// The clocks with a job manifest in `dir`, ascending (none when `dir` does not exist).
pub fn job_manifest_clocks(dir: &Path) -> Result<Vec<Clock>, PsCoreError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    Ok(durable::manifest_rounds_among(
        &durable::list_names(dir)?,
        parse_name,
    ))
}

/// A fresh run makes older runs' checkpoints obsolete: deletes every file of this scheme
/// in `dir` (manifests first). Called by the monitor before it can complete a checkpoint.
pub fn clear_job_checkpoints(dir: &Path) -> Result<(), PsCoreError> {
    if !dir.exists() {
        return Ok(());
    }
    let names = durable::list_names(dir)?;
    // Manifests only: shards may already be writing this run's data files.
    for name in names
        .iter()
        .filter(|n| parse_name(n).is_some_and(|(_, manifest)| manifest))
    {
        durable::remove_if_exists(dir, name)?;
    }
    Ok(())
}

/// Loads and verifies the checkpoint of `clock`: its manifest, the job's shape and every
/// file (each node verifies them all, so every node chooses the same checkpoint).
pub fn load_job_checkpoint(
    dir: &Path,
    clock: Clock,
    shape: &JobShape,
) -> Result<JobCheckpoint, PsCoreError> {
    let mpath = dir.join(plan::manifest_name(clock));
    let body = durable::read_framed(&mpath, JOB_MANIFEST_MAGIC)?;
    let m: JobManifest =
        rmp_serde::from_slice(&body).map_err(|e| bad(&mpath, format!("manifest decode: {e}")))?;
    if m.version != FORMAT_VERSION {
        return Err(bad(&mpath, format!("unsupported version {}", m.version)));
    }
    if m.clock != clock {
        return Err(bad(&mpath, format!("manifest is for clock {}", m.clock)));
    }
    if let Some(why) = shape.difference(&m.shape) {
        return Err(bad(&mpath, why));
    }
    let mut pieces = std::collections::BTreeMap::new();
    for (piece, name, digest) in m.files {
        if name != piece_name(clock, piece) {
            return Err(bad(&mpath, format!("unexpected file name {name:?}")));
        }
        pieces.insert(piece, durable::read_verified(dir, &name, digest)?);
    }
    let expected = (shape.shards + shape.workers + 1) as usize;
    if pieces.len() != expected {
        return Err(bad(
            &mpath,
            format!("{} files listed, {expected} expected", pieces.len()),
        ));
    }
    Ok(JobCheckpoint { clock, pieces })
}

/// The newest valid checkpoint in `dir` (invalid newer ones are warned about and skipped);
/// an error listing every refusal when none is valid.
pub fn load_newest_job_checkpoint(
    dir: &Path,
    shape: &JobShape,
) -> Result<JobCheckpoint, PsCoreError> {
    let clocks = job_manifest_clocks(dir)?;
    match durable::choose_newest_valid(&clocks, |c| load_job_checkpoint(dir, c, shape)) {
        Ok((ck, refused)) => {
            for reason in refused {
                tracing::warn!(%reason, "skipping an invalid ps checkpoint");
            }
            Ok(ck)
        }
        Err(reasons) => Err(bad(
            dir,
            if reasons.is_empty() {
                "no checkpoint to resume from".to_string()
            } else {
                format!("no valid checkpoint to resume from: {}", reasons.join("; "))
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rules::RuleRegistry;
    use crate::core::types::{
        Consistency, Row, RowId, RowUpdate, TableKind, TableSpec, UpdateBatch, WorkerId,
    };

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

    fn assert_invalid(r: Result<Checkpoint, PsCoreError>, needle: &str) {
        match r {
            Err(PsCoreError::Checkpoint { reason, .. }) => {
                assert!(
                    reason.contains(needle),
                    "reason {reason:?} lacks {needle:?}"
                )
            }
            other => panic!("expected checkpoint error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_identical() {
        let dir = tempfile::tempdir().unwrap();
        let s = shard();
        let clock = write_shard(dir.path(), 3, &s).unwrap();
        assert_eq!(clock, 1);
        let ck = load_checkpoint(dir.path(), 3, 1).unwrap();
        assert_eq!(ck.tables, s.snapshot());
        let restored =
            PsShardCore::restore(1, specs(), &RuleRegistry::new(), ck.tables, ck.clock).unwrap();
        assert_eq!(restored.snapshot(), s.snapshot());
        assert_eq!(list_checkpoints(dir.path(), 3).unwrap(), vec![1]);
        assert!(list_checkpoints(dir.path(), 4).unwrap().is_empty());
        // No temp files left behind.
        for e in fs::read_dir(dir.path()).unwrap() {
            assert!(!e.unwrap().file_name().to_string_lossy().ends_with(".tmp"));
        }
    }

    #[test]
    fn missing_manifest_never_loads() {
        let dir = tempfile::tempdir().unwrap();
        write_shard(dir.path(), 0, &shard()).unwrap();
        fs::remove_file(dir.path().join(manifest_name(0, 1))).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 1), "missing manifest");
        assert_invalid(load_checkpoint(dir.path(), 0, 9), "missing manifest");
    }

    #[test]
    fn truncated_or_corrupt_data_never_loads() {
        let dir = tempfile::tempdir().unwrap();
        write_shard(dir.path(), 0, &shard()).unwrap();
        let data = dir.path().join(data_name(0, 1, TableId(2)));
        let orig = fs::read(&data).unwrap();
        fs::write(&data, &orig[..orig.len() / 2]).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 1), "truncated");
        let mut flipped = orig.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        fs::write(&data, &flipped).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 1), "checksum");
        fs::remove_file(&data).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 1), "missing");
        fs::write(&data, &orig).unwrap();
        assert!(load_checkpoint(dir.path(), 0, 1).is_ok());
    }

    #[test]
    fn truncated_or_corrupt_manifest_never_loads() {
        let dir = tempfile::tempdir().unwrap();
        write_shard(dir.path(), 0, &shard()).unwrap();
        let mp = dir.path().join(manifest_name(0, 1));
        let orig = fs::read(&mp).unwrap();
        for cut in [0, 4, 12, orig.len() - 1] {
            fs::write(&mp, &orig[..cut]).unwrap();
            assert!(load_checkpoint(dir.path(), 0, 1).is_err(), "cut at {cut}");
        }
        let mut flipped = orig.clone();
        flipped[10] ^= 1;
        fs::write(&mp, &flipped).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 1), "checksum");
        // A manifest copied under another clock's name is rejected too.
        fs::write(dir.path().join(manifest_name(0, 2)), &orig).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 2), "manifest is for");
    }

    #[test]
    fn hostile_file_names_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest {
            version: FORMAT_VERSION,
            shard: 0,
            clock: 0,
            files: vec![ManifestEntry {
                name: "../etc/passwd".into(),
                table: TableId(1),
                len: 0,
                fnv64: 0,
            }],
        };
        let body = rmp_serde::to_vec(&m).unwrap();
        let mut bytes = MANIFEST_MAGIC.to_vec();
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&fnv1a64(&body).to_le_bytes());
        fs::write(dir.path().join(manifest_name(0, 0)), bytes).unwrap();
        assert_invalid(load_checkpoint(dir.path(), 0, 0), "invalid file name");
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
        let mut files = vec![];
        let (n, d) = write_shard_piece(dir, clock, 0, &s.snapshot()).unwrap();
        files.push((Piece::Shard(0), n, d));
        for piece in [Piece::Worker(0), Piece::Worker(1), Piece::Monitor] {
            let bytes = format!("{piece:?} at {clock}");
            let (n, d) = write_piece(dir, clock, piece, bytes.as_bytes()).unwrap();
            files.push((piece, n, d));
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
        // A newer checkpoint in progress (a shard's file, no manifest) survives pruning.
        write_piece(d, 20, Piece::Worker(0), b"early").unwrap();
        write_job(d, 15);
        assert_eq!(job_manifest_clocks(d).unwrap(), vec![10, 15]);
        assert!(d.join(piece_name(20, Piece::Worker(0))).exists());
        assert!(!d.join(piece_name(5, Piece::Shard(0))).exists());
        let ck = load_newest_job_checkpoint(d, &job_shape()).unwrap();
        assert_eq!(ck.clock, 15);
        assert_eq!(ck.piece(Piece::Worker(1)).unwrap(), b"Worker(1) at 15");
        assert_eq!(ck.shard_tables(0).unwrap(), shard().snapshot());

        // Truncated, flipped or missing files of clock 15: never loaded, 10 is used.
        let worker = d.join(piece_name(15, Piece::Worker(1)));
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
        let mut flipped = orig.clone();
        flipped[0] ^= 1;
        fs::write(&worker, &flipped).unwrap();
        assert!(
            load_job_checkpoint(d, 15, &job_shape())
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
        fs::remove_file(&worker).unwrap();
        assert!(
            load_job_checkpoint(d, 15, &job_shape())
                .unwrap_err()
                .to_string()
                .contains("missing")
        );
        assert_eq!(
            load_newest_job_checkpoint(d, &job_shape()).unwrap().clock,
            10
        );
        // A damaged manifest, or another job's shape: refused, naming why; none valid.
        let m10 = d.join(plan::manifest_name(10));
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
    fn fnv_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
