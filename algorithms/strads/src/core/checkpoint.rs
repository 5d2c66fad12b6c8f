//! Round checkpoints of any STRADS app, sans-I/O: when one is due, what its files are
//! called and hold and whether the workers' answers form a consistent cut. The shells
//! ([`crate::shells::checkpoint`]) do the I/O, and choose which old files to delete.
//!
//! A checkpoint is taken at a round boundary `r` with nothing in flight (a *drain point*):
//! every round below `r` committed, none at or above `r` dispatched. It holds the scheduler
//! half's state ([`Schedule::snapshot_state`](super::app::Schedule::snapshot_state)), every
//! worker half's state and, for ring apps, the blocks each worker holds, so that a cluster
//! restarted from it continues exactly as the uninterrupted run did after round `r - 1`.
//!
//! Files in the checkpoint directory (all nodes must see it: one machine or a shared file
//! system): `strads-round-<r>-worker-<i>.bin` (written by worker `i`),
//! `strads-round-<r>-scheduler.bin`, and LAST `strads-round-<r>.manifest`, which lists
//! every file with its length and checksum. A checkpoint without its manifest, or whose
//! files do not match it, never loads.

use serde::{Deserialize, Serialize};

/// Version of the file formats below.
pub const ROUND_CHECKPOINT_VERSION: u32 = 1;

/// Complete checkpoints kept on disk (older ones are deleted once a newer one is complete).
pub const ROUND_CHECKPOINTS_KEPT: usize = 2;

const PREFIX: &str = "strads-round-";

/// `strads-round-<r>.manifest`.
pub fn round_manifest_name(round: u64) -> String {
    format!("{PREFIX}{round}.manifest")
}

/// `strads-round-<r>-scheduler.bin`.
pub fn round_scheduler_file(round: u64) -> String {
    format!("{PREFIX}{round}-scheduler.bin")
}

/// `strads-round-<r>-worker-<i>.bin`.
pub fn round_worker_file(round: u64, worker: u32) -> String {
    format!("{PREFIX}{round}-worker-{worker}.bin")
}

/// `(round, is_manifest)` of one of our file names, `None` for anything else.
pub fn parse_round_file(name: &str) -> Option<(u64, bool)> {
    let rest = name.strip_prefix(PREFIX)?;
    if let Some(r) = rest.strip_suffix(".manifest") {
        return r.parse().ok().map(|r| (r, true));
    }
    let (r, tail) = rest.split_once('-')?;
    let data = tail == "scheduler.bin"
        || tail
            .strip_prefix("worker-")
            .and_then(|w| w.strip_suffix(".bin"))
            .is_some_and(|w| w.parse::<u32>().is_ok());
    if !data {
        return None;
    }
    r.parse().ok().map(|r| (r, false))
}

/// When to checkpoint: once `every` rounds committed since the last checkpoint (0 = never),
/// at the next drain point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundCheckpointPolicy {
    every: u64,
    since: u64,
}

impl RoundCheckpointPolicy {
    /// Every `every` committed rounds (0 = never).
    pub fn new(every: u64) -> Self {
        RoundCheckpointPolicy { every, since: 0 }
    }

    /// A round committed.
    pub fn round_committed(&mut self) {
        self.since += 1;
    }

    /// A checkpoint should be taken at the next drain point: the scheduler stops
    /// dispatching until the rounds in flight committed.
    pub fn due(&self) -> bool {
        self.every > 0 && self.since >= self.every
    }

    /// A checkpoint was written (or restored).
    pub fn reset(&mut self) {
        self.since = 0;
    }
}

/// Whether no block is in transit between ring workers: every handoff worker `i` sent to
/// worker `j` (`sent[i][j]`) was received by `j` before it saved (`received[j][i]`). Star
/// workers report empty counts, which are consistent.
pub fn handoffs_settled(sent: &[Vec<u64>], received: &[Vec<u64>]) -> bool {
    let count = |m: &[Vec<u64>], a: usize, b: usize| m.get(a).and_then(|r| r.get(b)).copied();
    let n = sent.len().max(received.len());
    (0..n).all(|i| {
        (0..n).all(|j| count(sent, i, j).unwrap_or(0) == count(received, j, i).unwrap_or(0))
    })
}

/// One file as a manifest lists it: name, length and FNV-1a 64 checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundFileEntry {
    /// File name in the checkpoint directory.
    pub name: String,
    /// Length in bytes.
    pub len: u64,
    /// FNV-1a 64 of the content.
    pub fnv64: u64,
}

/// `strads-round-<r>.manifest`: what a complete checkpoint consists of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundManifest {
    /// [`ROUND_CHECKPOINT_VERSION`].
    pub version: u32,
    /// The app's settings section (a checkpoint of another app never loads).
    pub app: String,
    /// The first round after the checkpoint.
    pub round: u64,
    /// The scheduler's file.
    pub scheduler: RoundFileEntry,
    /// One per worker, in worker order.
    pub workers: Vec<RoundFileEntry>,
}

/// `strads-round-<r>-scheduler.bin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerRoundFile {
    /// [`ROUND_CHECKPOINT_VERSION`].
    pub version: u32,
    /// The app's settings section.
    pub app: String,
    /// The first round after the checkpoint.
    pub round: u64,
    /// Run time up to the checkpoint (a resumed run's clock continues from it).
    pub elapsed_s: f64,
    /// The scheduler half's state ([`Schedule::snapshot_state`](super::app::Schedule::snapshot_state)).
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
}

/// A block a ring worker held at the checkpoint, encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldBlockRecord {
    /// The block's id.
    pub id: u64,
    /// The round whose push produced this version (`None`: an initial block).
    pub produced: Option<u64>,
    /// The block, as a message body.
    #[serde(with = "serde_bytes")]
    pub block: Vec<u8>,
}

/// `strads-round-<r>-worker-<i>.bin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRoundFile {
    /// [`ROUND_CHECKPOINT_VERSION`].
    pub version: u32,
    /// The app's settings section.
    pub app: String,
    /// The first round after the checkpoint.
    pub round: u64,
    /// The worker's index.
    pub worker: u32,
    /// The worker half's state ([`Push::snapshot_state`](super::app::Push::snapshot_state)).
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    /// Ring apps: the blocks the worker held.
    pub blocks: Vec<HeldBlockRecord>,
}

/// What a manifest does not match in this job, if anything.
pub fn manifest_mismatch(
    m: &RoundManifest,
    app: &str,
    round: u64,
    workers: usize,
) -> Option<String> {
    if m.version != ROUND_CHECKPOINT_VERSION {
        return Some(format!("format version {} is not supported", m.version));
    }
    if m.app != app {
        return Some(format!("taken by app {:?}, this job is {app:?}", m.app));
    }
    if m.round != round {
        return Some(format!("manifest names round {}", m.round));
    }
    if m.workers.len() != workers {
        return Some(format!(
            "taken with {} workers, this job has {workers}",
            m.workers.len()
        ));
    }
    let expected = std::iter::once(round_scheduler_file(round))
        .chain((0..workers as u32).map(|w| round_worker_file(round, w)));
    for (entry, name) in std::iter::once(&m.scheduler)
        .chain(&m.workers)
        .zip(expected)
    {
        if entry.name != name {
            return Some(format!("lists {:?} where {name:?} belongs", entry.name));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_foreign_files_are_ignored() {
        assert_eq!(parse_round_file(&round_manifest_name(12)), Some((12, true)));
        assert_eq!(parse_round_file(&round_scheduler_file(3)), Some((3, false)));
        assert_eq!(parse_round_file(&round_worker_file(7, 2)), Some((7, false)));
        for other in [
            "lasso-round-3.manifest",
            "strads-round-x.manifest",
            "strads-round-3-worker-x.bin",
            "strads-round-3-other.bin",
            ".strads-round-3.manifest.tmp",
        ] {
            assert_eq!(parse_round_file(other), None, "{other}");
        }
    }

    #[test]
    fn a_checkpoint_is_due_after_every_rounds_and_never_with_zero() {
        let mut p = RoundCheckpointPolicy::new(3);
        for _ in 0..2 {
            p.round_committed();
        }
        assert!(!p.due());
        p.round_committed();
        assert!(p.due());
        p.reset();
        assert!(!p.due());
        let mut never = RoundCheckpointPolicy::new(0);
        for _ in 0..100 {
            never.round_committed();
        }
        assert!(!never.due());
    }

    #[test]
    fn a_block_in_transit_makes_the_cut_inconsistent() {
        // Worker 0 sent 2 blocks to worker 1 and 1 to worker 2.
        let sent = vec![vec![0, 2, 1], vec![1, 0, 0], vec![0, 0, 0]];
        let mut received = vec![vec![0, 1, 0], vec![2, 0, 0], vec![1, 0, 0]];
        assert!(handoffs_settled(&sent, &received));
        received[1][0] = 1;
        assert!(!handoffs_settled(&sent, &received));
        assert!(handoffs_settled(&[vec![], vec![]], &[vec![], vec![]]));
    }

    #[test]
    fn a_manifest_of_another_job_is_refused_with_the_reason() {
        let entry = |name: String| RoundFileEntry {
            name,
            len: 1,
            fnv64: 2,
        };
        let m = RoundManifest {
            version: ROUND_CHECKPOINT_VERSION,
            app: "strads_mf".into(),
            round: 5,
            scheduler: entry(round_scheduler_file(5)),
            workers: vec![
                entry(round_worker_file(5, 0)),
                entry(round_worker_file(5, 1)),
            ],
        };
        assert_eq!(manifest_mismatch(&m, "strads_mf", 5, 2), None);
        assert!(manifest_mismatch(&m, "lda", 5, 2).unwrap().contains("lda"));
        assert!(
            manifest_mismatch(&m, "strads_mf", 5, 3)
                .unwrap()
                .contains("2 workers")
        );
        let mut swapped = m.clone();
        swapped.workers.swap(0, 1);
        assert!(
            manifest_mismatch(&swapped, "strads_mf", 5, 2)
                .unwrap()
                .contains("belongs")
        );
    }
}
