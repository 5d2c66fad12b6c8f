//! The one checkpoint set every system uses (PS, STRADS, P3): numbered checkpoints in a
//! directory, each a few opaque *parts* written by the nodes owning them and a manifest
//! written LAST. For scheme `<s>` and round `<r>`:
//! - `<s>-round-<r>-<part>.bin`: a part's serialized bytes ([`CheckpointSet::write_part`]);
//! - `<s>-round-<r>.manifest`: `PETRCKPT | msgpack body | FNV-1a 64 of the body (LE)`, the
//!   body holding version 1, scheme, round, the system's `meta` bytes and every part's
//!   name, length and FNV-1a 64 ([`CheckpointSet::commit`]).
//!
//! Every file is written atomically ([`durable::write_atomic`]) and the manifest last, so
//! a crash at any point leaves the previous checkpoint valid.
//!
//! After a commit of round `r` the newest `keep` ([`DEFAULT_KEEP`]) manifests at or below
//! `r` are kept; other manifests are deleted first, then unowned parts and temp files at or
//! below `r` (newer rounds may be in progress, [`prune_plan`]). Writing a part of `r`
//! deletes a stale manifest of `r` first.
//!
//! [`CheckpointSet::newest_valid`] tries manifests newest first; a checkpoint is valid when
//! its manifest and every part verify and the system's `accept` takes it. Invalid ones are
//! skipped with a warning; with none valid it fails listing every reason
//! ([`CheckpointError::NoValid`]): resuming never silently starts afresh. Manifests of
//! replaced formats ([`LEGACY_FORMATS`]) are refused with [`CheckpointError::OldFormat`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable::{self, FileDigest};

/// Magic of a manifest.
pub const MAGIC: &[u8; 8] = b"PETRCKPT";
/// Version of the manifest body.
pub const VERSION: u32 = 1;
/// Complete checkpoints kept by default.
pub const DEFAULT_KEEP: usize = 2;

/// The formats this one replaced: magic and what wrote it.
pub const LEGACY_FORMATS: [(&[u8; 8], &str); 5] = [
    (b"PSMANIF1", "parameter-server shard checkpoint"),
    (b"PSJOBCK1", "parameter-server job checkpoint"),
    (b"PSTRCKP1", "STRADS round checkpoint"),
    (b"PLASSOM1", "STRADS Lasso checkpoint"),
    (b"PETRP3M1", "P3 checkpoint"),
];

/// The older format whose magic `bytes` start with, as `(magic, what wrote it)`.
pub fn legacy_format(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    LEGACY_FORMATS
        .iter()
        .find(|(magic, _)| bytes.starts_with(*magic))
        .and_then(|(magic, what)| Some((std::str::from_utf8(*magic).ok()?, *what)))
}

/// A checkpoint or one of its files could not be written or loaded; every variant names
/// the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes do not start with the manifest magic, or are too short.
    #[error("{}: not a manifest (bad magic or truncated)", path.display())]
    NotAManifest {
        /// The manifest.
        path: PathBuf,
    },
    /// The manifest body's checksum does not match (bit flip or partial write).
    #[error("{}: manifest checksum mismatch", path.display())]
    ManifestChecksum {
        /// The manifest.
        path: PathBuf,
    },
    /// A file name from a manifest would leave the checkpoint directory (or is empty or
    /// hidden).
    #[error("{}: invalid file name {name:?}", path.display())]
    BadFileName {
        /// The manifest (or checkpoint directory).
        path: PathBuf,
        /// The refused name.
        name: String,
    },
    /// A manifest of a format this version no longer reads.
    #[error(
        "{}: checkpoint in the older format {magic} ({what}), which this version does not read: delete the old checkpoints or choose another checkpoint directory",
        path.display()
    )]
    OldFormat {
        /// The old manifest.
        path: PathBuf,
        /// Its magic.
        magic: &'static str,
        /// What wrote it.
        what: &'static str,
    },
    /// A file's content is wrong, or a checkpoint is not one this job can use (the reason
    /// says why).
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The manifest, part or file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Resuming found no valid checkpoint.
    #[error("{} holds no valid checkpoint to resume from{}", dir.display(), reasons_list(.reasons))]
    NoValid {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why each manifest was refused, newest first.
        reasons: Vec<String>,
    },
}

impl CheckpointError {
    /// An [`Invalid`](Self::Invalid) error about `path`.
    pub fn invalid(path: &Path, reason: impl Into<String>) -> Self {
        CheckpointError::Invalid {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            CheckpointError::Io { path, .. }
            | CheckpointError::NotAManifest { path }
            | CheckpointError::ManifestChecksum { path }
            | CheckpointError::BadFileName { path, .. }
            | CheckpointError::OldFormat { path, .. }
            | CheckpointError::Invalid { path, .. } => path,
            CheckpointError::NoValid { dir, .. } => dir,
        }
    }

    /// The reason without the path.
    pub fn reason(&self) -> String {
        match self {
            CheckpointError::Io { source, .. } => source.to_string(),
            CheckpointError::Invalid { reason, .. } => reason.clone(),
            CheckpointError::NotAManifest { .. }
            | CheckpointError::ManifestChecksum { .. }
            | CheckpointError::BadFileName { .. }
            | CheckpointError::OldFormat { .. }
            | CheckpointError::NoValid { .. } => {
                let text = self.to_string();
                let path = self.path().display().to_string();
                text.strip_prefix(&path)
                    .map(|t| t.trim_start_matches([':', ' ']).to_string())
                    .unwrap_or(text)
            }
        }
    }
}

fn reasons_list(reasons: &[String]) -> String {
    if reasons.is_empty() {
        " (no manifest found)".into()
    } else {
        format!(": {}", reasons.join("; "))
    }
}

/// One part as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartEntry {
    /// The part's name (`worker-3`, `scheduler`, ...).
    pub part: String,
    /// Length and checksum of its file.
    pub digest: FileDigest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    scheme: String,
    round: u64,
    #[serde(with = "serde_bytes")]
    meta: Vec<u8>,
    parts: Vec<PartEntry>,
}

/// A loaded checkpoint: its manifest verified and every part's bytes read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Its round.
    pub round: u64,
    /// The manifest's path.
    pub path: PathBuf,
    /// The system's bytes given to [`CheckpointSet::commit`].
    pub meta: Vec<u8>,
    /// Every part, in the manifest's order.
    pub parts: Vec<(PartEntry, Vec<u8>)>,
}

impl Checkpoint {
    /// The bytes of part `name`.
    pub fn part(&self, name: &str) -> Result<&[u8], CheckpointError> {
        self.parts
            .iter()
            .find(|(e, _)| e.part == name)
            .map(|(_, b)| b.as_slice())
            .ok_or_else(|| self.invalid(format!("lists no part {name:?}")))
    }

    /// The names of its parts, in order.
    pub fn part_names(&self) -> Vec<&str> {
        self.parts.iter().map(|(e, _)| e.part.as_str()).collect()
    }

    /// An [`CheckpointError::Invalid`] naming this checkpoint's manifest.
    pub fn invalid(&self, reason: impl Into<String>) -> CheckpointError {
        CheckpointError::invalid(&self.path, reason)
    }
}

/// What a file name is to a scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A manifest.
    Manifest,
    /// A part.
    Part,
    /// A leftover temp file of either.
    Temp,
}

fn valid_part(part: &str) -> bool {
    !part.is_empty()
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `<scheme>-round-<round>.manifest`.
pub fn manifest_name(scheme: &str, round: u64) -> String {
    format!("{scheme}-round-{round}.manifest")
}

/// `<scheme>-round-<round>-<part>.bin`.
pub fn part_name(scheme: &str, round: u64, part: &str) -> String {
    format!("{scheme}-round-{round}-{part}.bin")
}

/// The round and kind of one of `scheme`'s file names; `None` for any other file.
pub fn parse_name(scheme: &str, name: &str) -> Option<(u64, FileKind)> {
    let temp = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp"));
    let rest = temp
        .unwrap_or(name)
        .strip_prefix(scheme)?
        .strip_prefix("-round-")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let round = rest[..digits].parse().ok()?;
    let tail = &rest[digits..];
    let ours = tail == ".manifest"
        || tail
            .strip_prefix('-')
            .and_then(|t| t.strip_suffix(".bin"))
            .is_some_and(valid_part);
    let kind = match (temp.is_some(), tail == ".manifest") {
        (true, _) => FileKind::Temp,
        (false, true) => FileKind::Manifest,
        (false, false) => FileKind::Part,
    };
    ours.then_some((round, kind))
}

/// The rounds with a manifest among `names`, ascending.
pub fn manifest_rounds(scheme: &str, names: &[String]) -> Vec<u64> {
    let mut rounds: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_name(scheme, n))
        .filter(|&(_, kind)| kind == FileKind::Manifest)
        .map(|(r, _)| r)
        .collect();
    rounds.sort_unstable();
    rounds.dedup();
    rounds
}

/// The files among `names` to delete once the checkpoint of round `newest` is complete:
/// every manifest but the `keep` newest at or below `newest`, then the parts and temp files
/// at or below `newest` no kept manifest owns. Manifests come first, so a crash while
/// pruning never leaves a manifest whose parts are gone.
pub fn prune_plan(scheme: &str, names: &[String], newest: u64, keep: usize) -> Vec<String> {
    let mut kept: Vec<u64> = manifest_rounds(scheme, names)
        .into_iter()
        .filter(|&r| r <= newest)
        .collect();
    kept.reverse();
    kept.truncate(keep);
    let mut doomed: Vec<(bool, &String)> = names
        .iter()
        .filter_map(|n| parse_name(scheme, n).map(|(r, kind)| (r, kind, n)))
        .filter(|&(r, kind, _)| !kept.contains(&r) && (kind == FileKind::Manifest || r <= newest))
        .map(|(_, kind, n)| (kind != FileKind::Manifest, n))
        .collect();
    doomed.sort_by_key(|&(data, _)| data);
    doomed.into_iter().map(|(_, n)| n.clone()).collect()
}

/// Tries `rounds` (ascending) newest first; returns the first that `validate` accepts and
/// the reasons the newer ones were refused, or every reason if none is valid.
pub fn choose_newest_valid<T, E: std::fmt::Display>(
    rounds: &[u64],
    mut validate: impl FnMut(u64) -> Result<T, E>,
) -> Result<(T, Vec<String>), Vec<String>> {
    let mut refused = Vec::new();
    for &r in rounds.iter().rev() {
        match validate(r) {
            Ok(t) => return Ok((t, refused)),
            Err(e) => refused.push(e.to_string()),
        }
    }
    Err(refused)
}

/// The checkpoints of one scheme in one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSet {
    dir: PathBuf,
    scheme: String,
    keep: usize,
}

impl CheckpointSet {
    /// The checkpoints of `scheme` in `dir`, keeping [`DEFAULT_KEEP`].
    pub fn new(dir: impl Into<PathBuf>, scheme: &str) -> Self {
        CheckpointSet {
            dir: dir.into(),
            scheme: scheme.to_string(),
            keep: DEFAULT_KEEP,
        }
    }

    /// Keeps the newest `keep` complete checkpoints (at least one).
    pub fn keeping(mut self, keep: usize) -> Self {
        self.keep = keep.max(1);
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the manifest of `round`.
    pub fn manifest_path(&self, round: u64) -> PathBuf {
        self.dir.join(manifest_name(&self.scheme, round))
    }

    /// Writes part `part` of the checkpoint of `round` durably (creating the directory) and
    /// returns its manifest entry. A stale manifest of `round` is deleted first.
    pub fn write_part(
        &self,
        round: u64,
        part: &str,
        bytes: &[u8],
    ) -> Result<PartEntry, CheckpointError> {
        if !valid_part(part) {
            return Err(CheckpointError::invalid(
                &self.dir,
                format!("bad part name {part:?}"),
            ));
        }
        durable::create_dir(&self.dir)?;
        durable::remove_if_exists(&self.dir, &manifest_name(&self.scheme, round))?;
        durable::write_atomic(&self.dir, &part_name(&self.scheme, round, part), bytes)?;
        durable::sync_dir(&self.dir)?;
        Ok(PartEntry {
            part: part.to_string(),
            digest: FileDigest::of(bytes),
        })
    }

    /// Completes the checkpoint of `round`: writes its manifest (every part must be durable
    /// already), then prunes ([`prune_plan`]). Returns the manifest's path. A directory
    /// holding an older format is refused.
    pub fn commit(
        &self,
        round: u64,
        meta: &[u8],
        parts: Vec<PartEntry>,
    ) -> Result<PathBuf, CheckpointError> {
        let path = self.manifest_path(round);
        let manifest = Manifest {
            version: VERSION,
            scheme: self.scheme.clone(),
            round,
            meta: meta.to_vec(),
            parts,
        };
        let body = rmp_serde::to_vec(&manifest).map_err(|e| {
            CheckpointError::invalid(&path, format!("cannot encode the manifest: {e}"))
        })?;
        self.check_format()?;
        durable::create_dir(&self.dir)?;
        let name = manifest_name(&self.scheme, round);
        durable::write_atomic(&self.dir, &name, &durable::frame(MAGIC, &body))?;
        durable::sync_dir(&self.dir)?;
        let names = durable::list_names(&self.dir)?;
        for doomed in prune_plan(&self.scheme, &names, round, self.keep) {
            durable::remove_if_exists(&self.dir, &doomed)?;
        }
        tracing::debug!(scheme = %self.scheme, round, dir = %self.dir.display(), "checkpoint complete");
        Ok(path)
    }

    /// Rounds with a manifest, ascending (not verified; none when the directory is missing).
    pub fn rounds(&self) -> Result<Vec<u64>, CheckpointError> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        Ok(manifest_rounds(
            &self.scheme,
            &durable::list_names(&self.dir)?,
        ))
    }

    /// Refuses a directory holding a manifest of an older format
    /// ([`CheckpointError::OldFormat`]).
    pub fn check_format(&self) -> Result<(), CheckpointError> {
        if !self.dir.exists() {
            return Ok(());
        }
        for name in durable::list_names(&self.dir)? {
            if name.ends_with(".manifest") && !name.starts_with('.') {
                let path = self.dir.join(&name);
                let mut head = [0u8; 8];
                let n = match std::fs::File::open(&path)
                    .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
                {
                    Ok(n) => n,
                    // Deleted meanwhile (a stale manifest of a round being rewritten).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(source) => return Err(CheckpointError::Io { path, source }),
                };
                old_format(&path, &head[..n])?;
            }
        }
        Ok(())
    }

    /// Loads the checkpoint of `round`: its manifest and every part, verified.
    pub fn load(&self, round: u64) -> Result<Checkpoint, CheckpointError> {
        let path = self.manifest_path(round);
        let bytes = std::fs::read(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => {
                CheckpointError::invalid(&path, "missing manifest: checkpoint absent or incomplete")
            }
            _ => CheckpointError::io(&path, source),
        })?;
        old_format(&path, &bytes)?;
        let body = durable::unframe(&path, MAGIC, &bytes)?;
        let m: Manifest = rmp_serde::from_slice(body)
            .map_err(|e| CheckpointError::invalid(&path, format!("manifest decode: {e}")))?;
        if m.version != VERSION {
            return Err(CheckpointError::invalid(
                &path,
                format!("unsupported version {}", m.version),
            ));
        }
        if m.scheme != self.scheme || m.round != round {
            let reason = format!("manifest is for {} round {}", m.scheme, m.round);
            return Err(CheckpointError::invalid(&path, reason));
        }
        let parts = m
            .parts
            .into_iter()
            .map(|e| self.read_part(round, &e).map(|bytes| (e, bytes)))
            .collect::<Result<_, _>>()?;
        Ok(Checkpoint {
            round,
            path,
            meta: m.meta,
            parts,
        })
    }

    /// Reads part `entry` of the checkpoint of `round`, checked against its length and
    /// checksum.
    pub fn read_part(&self, round: u64, entry: &PartEntry) -> Result<Vec<u8>, CheckpointError> {
        if !valid_part(&entry.part) {
            return Err(CheckpointError::BadFileName {
                path: self.manifest_path(round),
                name: entry.part.clone(),
            });
        }
        let name = part_name(&self.scheme, round, &entry.part);
        durable::read_verified(&self.dir, &name, entry.digest)
    }

    /// The newest checkpoint that loads and that `accept` takes (see the module docs).
    pub fn newest_valid<T>(
        &self,
        mut accept: impl FnMut(Checkpoint) -> Result<T, CheckpointError>,
    ) -> Result<T, CheckpointError> {
        self.check_format()?;
        let rounds = self.rounds()?;
        match choose_newest_valid(&rounds, |r| self.load(r).and_then(&mut accept)) {
            Ok((t, refused)) => {
                for reason in refused {
                    tracing::warn!(%reason, "skipping an invalid checkpoint");
                }
                Ok(t)
            }
            Err(reasons) => Err(CheckpointError::NoValid {
                dir: self.dir.clone(),
                reasons,
            }),
        }
    }

    /// Deletes every manifest of the scheme, for a fresh run (parts go with the next prune;
    /// this run's may be in progress). Refuses a directory of an older format.
    pub fn clear(&self) -> Result<(), CheckpointError> {
        self.check_format()?;
        for round in self.rounds()? {
            durable::remove_if_exists(&self.dir, &manifest_name(&self.scheme, round))?;
        }
        Ok(())
    }
}

fn old_format(path: &Path, head: &[u8]) -> Result<(), CheckpointError> {
    match legacy_format(head) {
        Some((magic, what)) => Err(CheckpointError::OldFormat {
            path: path.to_path_buf(),
            magic,
            what,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
