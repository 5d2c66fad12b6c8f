//! Run directories and key files: a relative run directory works; keys and run
//! directories cannot be planted, redirected or read by another local user (keys are
//! created exclusively, 0600, never through a symlink; a run directory that is a symlink or
//! someone else's is refused).

use crate::common;
use crate::common::succeeded;
use common::PETREL;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn certs(dir: &std::path::Path, nodes: &str) -> std::process::Output {
    Command::new(PETREL)
        .args(["certs", "--dir"])
        .arg(dir)
        .args(["--nodes", nodes])
        .output()
        .unwrap()
}

#[test]
fn keys_are_created_0600_and_a_planted_key_or_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let out = certs(&dir, "a");
    succeeded(&out);
    for key in ["ca.key", "a.key"] {
        let mode = std::fs::metadata(dir.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // A key someone else planted (here: a symlink to a file they can read) is refused, and
    // nothing is written through it.
    let planted = tmp.path().join("planted");
    std::fs::write(&planted, "").unwrap();
    std::os::unix::fs::symlink(&planted, dir.join("b.key")).unwrap();
    let out = certs(&dir, "b");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("b.key"), "{stderr}");
    assert_eq!(std::fs::read(&planted).unwrap(), b"");
    // An existing key is never replaced.
    let before = std::fs::read(dir.join("a.key")).unwrap();
    let out = certs(&dir, "a");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("never replaced"));
    assert_eq!(std::fs::read(dir.join("a.key")).unwrap(), before);
}

#[test]
fn a_symlinked_certs_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = certs(&link, "a");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

/// A run directory owned by another user is refused before anything is written into it
/// (needs root to give a directory away; skipped otherwise).
#[test]
fn a_run_dir_owned_by_someone_else_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root to chown a directory to another user");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(65534), Some(65534)).unwrap();
    let out = Command::new(PETREL)
        .args(["run", "examples/cluster.toml", "--run-dir"])
        .arg(&run)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("owned by uid 65534"), "{stderr}");
    assert_eq!(std::fs::read_dir(&run).unwrap().count(), 0);
}

/// `petrel run --run-dir out/run`, relative to where the user stands, runs (the node
/// settings inside name their certificates by absolute path) and keeps its files there.
#[test]
fn a_relative_run_dir_works() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster.toml");
    let out = Command::new(PETREL)
        .arg("run")
        .arg(&cfg)
        .args(["--run-dir", "out/run"])
        .env("PETREL_APP__DEMO__ROUNDS", "3")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        tmp.path().join("out/run/cluster.toml").is_file(),
        "{stderr}"
    );
}
