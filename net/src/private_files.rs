//! Key files and the directories that hold them, created so that no other local user can
//! own, read or redirect them.
//!
//! - Keys are created `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 from the first byte
//!   ([`write_secret`]): anything already at the path is refused, never followed.
//! - Public files beside them are not written through a symlink ([`write_public`]).
//! - A private directory ([`create_private_dir`]) is 0700; an existing one must be a real
//!   directory owned by this user, else another user could read or swap it.
//! - Leftovers of dead processes are swept by name prefix ([`remove_leftovers`]).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Writes a new secret file: refuses an existing file or symlink at `path`.
pub fn write_secret(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => io::Error::new(
                e.kind(),
                "already exists: a key file is never replaced (remove it first)",
            ),
            _ => e,
        })?;
    file.write_all(data)?;
    file.sync_all()
}

/// Writes (or replaces) a public file, refusing to follow a symlink at `path`.
pub fn write_public(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::other("is a symbolic link: refused"),
            _ => e,
        })?;
    file.write_all(data)
}

/// Creates `dir` (and missing parents) with mode 0700, or checks an existing one: it must
/// be a directory, not a symlink, owned by this user; its mode is then set to 0700.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(io::Error::other(
            "is a symbolic link: a private directory must be a real one",
        ));
    }
    if !meta.is_dir() {
        return Err(io::Error::other("exists and is not a directory"));
    }
    let me = current_uid();
    if meta.uid() != me {
        let uid = meta.uid();
        let why = format!("is owned by uid {uid}, not by this user (uid {me}): refused");
        return Err(io::Error::other(why));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// This process's effective user id: who owns what it creates.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Offers each entry of `dir` whose name starts with `prefix` to `remove`, which deletes it
/// if it is a leftover and says whether it did; returns the paths it deleted (none when `dir`
/// cannot be read).
pub fn remove_leftovers(
    dir: &Path,
    prefix: &str,
    mut remove: impl FnMut(&Path) -> bool,
) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with(prefix) && remove(&path) {
            removed.push(path);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_created_0600_and_never_replaced_nor_followed() {
        let d = tempfile::tempdir().unwrap();
        let key = d.path().join("a.key");
        write_secret(&key, b"k").unwrap();
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = write_secret(&key, b"other").unwrap_err();
        assert!(again.to_string().contains("never replaced"), "{again}");
        assert_eq!(std::fs::read(&key).unwrap(), b"k");
        let target = d.path().join("target");
        std::fs::write(&target, b"victim").unwrap();
        let link = d.path().join("b.key");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_secret(&link, b"k").is_err());
        assert!(write_public(&link, b"cert").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"victim");
    }

    #[test]
    fn a_private_dir_is_0700_and_a_symlinked_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run/certs");
        create_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        create_private_dir(&dir).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let refused = create_private_dir(&link).unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
    }
}
