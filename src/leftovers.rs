//! What a SIGKILLed launcher or node leaves behind, removed by the next launch: only this
//! user's run directories whose launcher (pid and start time) is provably gone, and stale slots.

use std::path::{Path, PathBuf};

/// The file in a run directory naming the launcher that owns it.
pub const OWNER_FILE: &str = "launcher.pid";

/// Prefix of temporary run directories.
pub const RUN_DIR_PREFIX: &str = "petrel-run-";

/// A process's start time (clock ticks since boot), from `/proc/<pid>/stat`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the command name (field 2) may hold spaces, so count after its ')'.
    stat.get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Marks `dir` as this process's run directory.
pub fn mark_run_dir(dir: &Path) -> std::io::Result<()> {
    let me = std::process::id();
    let started = start_time(me).unwrap_or(0);
    std::fs::write(dir.join(OWNER_FILE), format!("{me} {started}\n"))
}

/// The launcher that marked `dir` is gone: its pid is not running, or started at another time.
fn owner_is_gone(dir: &Path) -> bool {
    let Ok(mark) = std::fs::read_to_string(dir.join(OWNER_FILE)) else {
        return false;
    };
    let mut fields = mark.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(pid)), Some(Ok(started))) = (fields.next(), fields.next()) else {
        return false;
    };
    match u32::try_from(pid).ok().map(start_time) {
        Some(now) => now != Some(started),
        None => false,
    }
}

/// Removes this user's `petrel-run-*` directories in `tmp` whose launcher is gone.
pub fn remove_dead_run_dirs(tmp: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let me = petrel_net::private_files::current_uid();
    petrel_net::private_files::remove_leftovers(tmp, RUN_DIR_PREFIX, |path| {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == me)
            && owner_is_gone(path)
            && std::fs::remove_dir_all(path).is_ok()
    })
}

/// Removes (and logs) what dead predecessors left: run directories and slot files.
pub fn clean_up(shared_memory_dir: Option<&Path>) {
    let dirs = remove_dead_run_dirs(&std::env::temp_dir());
    let slots = shared_memory_dir.map(petrel_net::shm::remove_stale_slots);
    for path in dirs.iter().chain(slots.iter().flatten()) {
        tracing::info!(path = %path.display(), "removed what a killed launcher or node left behind");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_run_dirs_of_launchers_that_are_gone_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let mine = dir("petrel-run-live");
        mark_run_dir(&mine).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = start_time(pid);
        child.wait().unwrap();
        let dead = dir("petrel-run-dead");
        std::fs::write(
            dead.join(OWNER_FILE),
            format!("{pid} {}", started.unwrap_or(1)),
        )
        .unwrap();
        let reused = dir("petrel-run-reused");
        std::fs::write(dead.join("ca.key"), "k").unwrap();
        std::fs::write(reused.join(OWNER_FILE), format!("{} 1", std::process::id())).unwrap();
        let unmarked = dir("petrel-run-unmarked");
        let other = dir("unrelated");
        std::fs::write(other.join(OWNER_FILE), format!("{pid} 1")).unwrap();
        let mut removed = remove_dead_run_dirs(tmp.path());
        removed.sort();
        assert_eq!(removed, vec![dead, reused]);
        assert!(mine.exists() && unmarked.exists() && other.exists());
    }
}
