//! Durable files under the checkpoint set ([`crate::checkpoint`]):
//! - [`write_atomic`] (temp file, `fsync`, `rename`) then [`sync_dir`]: a reader never sees
//!   a half-written file under the final name;
//! - [`frame`] / [`unframe`]: `magic (8 bytes) | body | FNV-1a 64 of body (LE)`, so a
//!   truncated or bit-flipped manifest is refused;
//! - [`FileDigest`] + [`read_verified`]: each data file's length and FNV-1a 64, re-checked
//!   on load. Every error names the file ([`DurableError`]).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// FNV-1a 64-bit hash (integrity check, not cryptographic).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update(bytes);
    h.finish()
}

/// Streaming FNV-1a 64 (for fingerprints of data that is not one contiguous slice).
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a64 {
    /// The hash of nothing (the FNV offset basis).
    pub fn new() -> Self {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }

    /// Hashes `bytes` after what came before.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// Why bytes are not a valid manifest, or a manifest entry is unsafe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The bytes do not start with the magic, or are too short.
    #[error("not a manifest (bad magic or truncated)")]
    NotAManifest,
    /// The body's checksum does not match (bit flip or partial write).
    #[error("manifest checksum mismatch")]
    ChecksumMismatch,
    /// A listed file name would leave the checkpoint directory (or is empty or hidden).
    #[error("invalid file name {0:?}")]
    BadFileName(String),
}

/// A checkpoint file is invalid or could not be read/written; always names the file.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// The file's content is wrong (the reason says how).
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A manifest is corrupt or lists an unsafe name.
    #[error("{}: {source}", path.display())]
    Manifest {
        /// The manifest (or checkpoint directory).
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ManifestError,
    },
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl DurableError {
    /// An [`Invalid`](Self::Invalid) error about `path`.
    pub fn invalid(path: &Path, reason: impl Into<String>) -> Self {
        DurableError::Invalid {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DurableError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            DurableError::Invalid { path, .. }
            | DurableError::Manifest { path, .. }
            | DurableError::Io { path, .. } => path,
        }
    }

    /// The reason without the path.
    pub fn reason(&self) -> String {
        match self {
            DurableError::Invalid { reason, .. } => reason.clone(),
            DurableError::Manifest { source, .. } => source.to_string(),
            DurableError::Io { source, .. } => source.to_string(),
        }
    }
}

/// Length and checksum of a file, as a manifest records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Length in bytes.
    pub len: u64,
    /// FNV-1a 64 of the content.
    pub fnv64: u64,
}

impl FileDigest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        FileDigest {
            len: bytes.len() as u64,
            fnv64: fnv1a64(bytes),
        }
    }
}

/// Writes `bytes` to `dir/name` atomically: temp file `.name.tmp`, fsync, rename. Call
/// [`sync_dir`] afterwards (once for several files) to make the rename durable.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, DurableError> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let target = dir.join(name);
    (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })()
    .map_err(|e| DurableError::io(&tmp, e))?;
    fs::rename(&tmp, &target).map_err(|e| DurableError::io(&target, e))?;
    Ok(target)
}

/// Makes the renames in `dir` durable (POSIX); opening a directory read-only works on Linux.
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| DurableError::io(dir, e))
}

/// `magic | body | fnv1a64(body) (LE)`.
pub fn frame(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(body.len() + 16);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(&fnv1a64(body).to_le_bytes());
    bytes
}

/// The body of a [`frame`], or why it is not one.
pub fn unframe<'a>(magic: &[u8; 8], bytes: &'a [u8]) -> Result<&'a [u8], ManifestError> {
    if bytes.len() < magic.len() + 8 || &bytes[..magic.len()] != magic {
        return Err(ManifestError::NotAManifest);
    }
    let (body, sum) = bytes[magic.len()..].split_at(bytes.len() - magic.len() - 8);
    let mut sum8 = [0u8; 8];
    sum8.copy_from_slice(sum);
    if fnv1a64(body) != u64::from_le_bytes(sum8) {
        return Err(ManifestError::ChecksumMismatch);
    }
    Ok(body)
}

/// A file name read from a manifest must stay inside the checkpoint directory.
pub fn check_file_name(name: &str) -> Result<(), ManifestError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(ManifestError::BadFileName(name.to_string()));
    }
    Ok(())
}

/// Reads `dir/name` and checks it against the manifest's `expected` length and checksum.
pub fn read_verified(
    dir: &Path,
    name: &str,
    expected: FileDigest,
) -> Result<Vec<u8>, DurableError> {
    check_file_name(name).map_err(|source| DurableError::Manifest {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(DurableError::invalid(
                &path,
                "data file listed in the manifest is missing",
            ));
        }
        Err(e) => return Err(DurableError::io(&path, e)),
    };
    let got = bytes.len();
    if got as u64 != expected.len {
        let reason = format!("length {got} != {} in manifest (truncated?)", expected.len);
        return Err(DurableError::invalid(&path, reason));
    }
    if fnv1a64(&bytes) != expected.fnv64 {
        return Err(DurableError::invalid(&path, "checksum mismatch"));
    }
    Ok(bytes)
}

/// Removes `dir/name`; a file that is already gone is fine.
pub fn remove_if_exists(dir: &Path, name: &str) -> Result<(), DurableError> {
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DurableError::io(&path, e)),
    }
}

/// Names of the entries of `dir` (non-UTF-8 names are skipped).
pub fn list_names(dir: &Path) -> Result<Vec<String>, DurableError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| DurableError::io(dir, e))? {
        let entry = entry.map_err(|e| DurableError::io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

/// Creates `dir` (and parents).
pub fn create_dir(dir: &Path) -> Result<(), DurableError> {
    fs::create_dir_all(dir).map_err(|e| DurableError::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: &[u8; 8] = b"TESTMAN1";

    #[test]
    fn fnv_known_values_and_streaming() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv1a64::new();
        h.update(b"hello ");
        h.update(b"world");
        assert_eq!(h.finish(), fnv1a64(b"hello world"));
    }

    #[test]
    fn frame_round_trip_and_corruption() {
        let f = frame(MAGIC, b"body bytes");
        assert_eq!(unframe(MAGIC, &f).unwrap(), b"body bytes");
        for cut in 0..f.len() {
            assert!(unframe(MAGIC, &f[..cut]).is_err(), "cut {cut}");
        }
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert!(unframe(MAGIC, &g).is_err(), "flip {i}");
        }
        assert!(unframe(b"OTHERMAG", &f).is_err());
    }

    #[test]
    fn atomic_write_and_verified_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_atomic(dir.path(), "a.bin", b"0123456789").unwrap();
        sync_dir(dir.path()).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"0123456789");
        let d = FileDigest::of(b"0123456789");
        assert_eq!(
            read_verified(dir.path(), "a.bin", d).unwrap(),
            b"0123456789"
        );
        fs::write(&p, b"01234").unwrap();
        let e = read_verified(dir.path(), "a.bin", d).unwrap_err();
        assert!(e.to_string().contains("a.bin") && e.to_string().contains("truncated"));
        fs::write(&p, b"0123456780").unwrap();
        assert!(
            read_verified(dir.path(), "a.bin", d)
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
        fs::remove_file(&p).unwrap();
        assert!(
            read_verified(dir.path(), "a.bin", d)
                .unwrap_err()
                .to_string()
                .contains("missing")
        );
        assert!(read_verified(dir.path(), "../x", d).is_err());
        assert!(
            list_names(dir.path())
                .unwrap()
                .iter()
                .all(|n| !n.ends_with(".tmp"))
        );
        remove_if_exists(dir.path(), "a.bin").unwrap();
    }
}
