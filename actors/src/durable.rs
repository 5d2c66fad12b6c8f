//! Durable files under the checkpoint set ([`crate::checkpoint`]):
//! - [`write_atomic`] (temp file, `fsync`, `rename`) then [`sync_dir`]: a reader never sees
//!   a half-written file under the final name;
//! - [`frame`] / [`unframe`]: `magic (8 bytes) | body | FNV-1a 64 of body (LE)`, so a
//!   truncated or bit-flipped manifest is refused;
//! - [`FileDigest`] + [`read_verified`]: each data file's length and FNV-1a 64, re-checked
//!   on load. Every error names the file ([`CheckpointError`]).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointError;

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
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, CheckpointError> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let target = dir.join(name);
    (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })()
    .map_err(|e| CheckpointError::io(&tmp, e))?;
    fs::rename(&tmp, &target).map_err(|e| CheckpointError::io(&target, e))?;
    Ok(target)
}

/// Makes the renames in `dir` durable (POSIX); opening a directory read-only works on Linux.
pub fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CheckpointError::io(dir, e))
}

/// `magic | body | fnv1a64(body) (LE)`.
pub fn frame(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(body.len() + 16);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(&fnv1a64(body).to_le_bytes());
    bytes
}

/// The body of a [`frame`] read from `path`, or why it is not one.
pub fn unframe<'a>(
    path: &Path,
    magic: &[u8; 8],
    bytes: &'a [u8],
) -> Result<&'a [u8], CheckpointError> {
    let path = || path.to_path_buf();
    if bytes.len() < magic.len() + 8 || &bytes[..magic.len()] != magic {
        return Err(CheckpointError::NotAManifest { path: path() });
    }
    let (body, sum) = bytes[magic.len()..].split_at(bytes.len() - magic.len() - 8);
    let mut sum8 = [0u8; 8];
    sum8.copy_from_slice(sum);
    if fnv1a64(body) != u64::from_le_bytes(sum8) {
        return Err(CheckpointError::ManifestChecksum { path: path() });
    }
    Ok(body)
}

/// A file name read from a manifest must stay inside the checkpoint directory `dir`.
pub fn check_file_name(dir: &Path, name: &str) -> Result<(), CheckpointError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(CheckpointError::BadFileName {
            path: dir.to_path_buf(),
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Reads `dir/name` and checks it against the manifest's `expected` length and checksum.
pub fn read_verified(
    dir: &Path,
    name: &str,
    expected: FileDigest,
) -> Result<Vec<u8>, CheckpointError> {
    check_file_name(dir, name)?;
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CheckpointError::invalid(
                &path,
                "data file listed in the manifest is missing",
            ));
        }
        Err(e) => return Err(CheckpointError::io(&path, e)),
    };
    let got = bytes.len();
    if got as u64 != expected.len {
        let reason = format!("length {got} != {} in manifest (truncated?)", expected.len);
        return Err(CheckpointError::invalid(&path, reason));
    }
    if fnv1a64(&bytes) != expected.fnv64 {
        return Err(CheckpointError::invalid(&path, "checksum mismatch"));
    }
    Ok(bytes)
}

/// Removes `dir/name`; a file that is already gone is fine.
pub fn remove_if_exists(dir: &Path, name: &str) -> Result<(), CheckpointError> {
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CheckpointError::io(&path, e)),
    }
}

/// Names of the entries of `dir` (non-UTF-8 names are skipped).
pub fn list_names(dir: &Path) -> Result<Vec<String>, CheckpointError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| CheckpointError::io(dir, e))? {
        let entry = entry.map_err(|e| CheckpointError::io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

/// Creates `dir` (and parents).
pub fn create_dir(dir: &Path) -> Result<(), CheckpointError> {
    fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, e))
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
        assert_eq!(unframe(Path::new("m"), MAGIC, &f).unwrap(), b"body bytes");
        for cut in 0..f.len() {
            assert!(
                unframe(Path::new("m"), MAGIC, &f[..cut]).is_err(),
                "cut {cut}"
            );
        }
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert!(unframe(Path::new("m"), MAGIC, &g).is_err(), "flip {i}");
        }
        assert!(unframe(Path::new("m"), b"OTHERMAG", &f).is_err());
        let text = |bytes: &[u8]| {
            unframe(Path::new("m"), MAGIC, bytes)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(text(b"short"), "m: not a manifest (bad magic or truncated)");
        let mut flipped = f.clone();
        flipped[9] ^= 1;
        assert_eq!(text(&flipped), "m: manifest checksum mismatch");
        let bad = check_file_name(Path::new("d"), "../x").unwrap_err();
        assert_eq!(bad.to_string(), "d: invalid file name \"../x\"");
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
