//! Round checkpoints of any STRADS app, sans-I/O: when one is due, what its parts are
//! called and hold and whether the workers' answers form a consistent cut. The shells
//! ([`crate::shells::checkpoint`]) do the I/O on the runtime's checkpoint set
//! ([`petrel_actors::checkpoint`], scheme [`SCHEME`]).
//!
//! A checkpoint is taken at a round boundary `r` with nothing in flight (a *drain point*):
//! every round below `r` committed, none at or above `r` dispatched. It holds the scheduler
//! half's state ([`Schedule::snapshot_state`](super::app::Schedule::snapshot_state)), every
//! worker half's state and, for ring apps, the blocks each worker holds, so that a cluster
//! restarted from it continues exactly as the uninterrupted run did after round `r - 1`.
//!
//! Parts (all nodes must see the directory: one machine or a shared file system):
//! `worker-<i>` (written by worker `i`) and `scheduler`; the manifest's meta is the app's
//! settings section, so a checkpoint of another app never loads.

use serde::{Deserialize, Serialize};

/// The checkpoint scheme of the kit's apps (`strads-round-<r>...`).
pub const SCHEME: &str = "strads";

/// The scheduler's part.
pub const SCHEDULER_PART: &str = "scheduler";

/// Worker `i`'s part.
pub fn worker_part(worker: u32) -> String {
    format!("worker-{worker}")
}

/// What a checkpoint (its meta and part names) does not match in this job, if anything.
pub fn checkpoint_mismatch(
    meta: &[u8],
    parts: &[&str],
    app: &str,
    workers: usize,
) -> Option<String> {
    if meta != app.as_bytes() {
        let theirs = String::from_utf8_lossy(meta);
        return Some(format!("taken by app {theirs:?}, this job is {app:?}"));
    }
    if parts.len() != workers + 1 {
        return Some(format!(
            "taken with {} workers, this job has {workers}",
            parts.len().saturating_sub(1)
        ));
    }
    let expected =
        std::iter::once(SCHEDULER_PART.to_string()).chain((0..workers as u32).map(worker_part));
    for (part, name) in parts.iter().zip(expected) {
        if *part != name {
            return Some(format!("lists {part:?} where {name:?} belongs"));
        }
    }
    None
}

/// When to checkpoint: once `every` rounds committed since the last checkpoint (0 = never),
/// at the next drain point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundCheckpointPolicy {
    every: u64,
    since: u64,
    /// The app's progress at the last checkpoint (see [`Self::due`]).
    mark: u64,
}

impl RoundCheckpointPolicy {
    /// Every `every` committed rounds (0 = never).
    pub fn new(every: u64) -> Self {
        RoundCheckpointPolicy {
            every,
            since: 0,
            mark: 0,
        }
    }

    /// A round committed.
    pub fn round_committed(&mut self) {
        self.since += 1;
    }

    /// A checkpoint should be taken at the next drain point: the scheduler stops
    /// dispatching until the rounds in flight committed. `progress` is the app's own count
    /// of the rounds that count
    /// ([`Schedule::checkpoint_progress`](super::app::Schedule::checkpoint_progress));
    /// `None`: every committed round counts.
    pub fn due(&self, progress: Option<u64>) -> bool {
        let since = progress.map_or(self.since, |p| p.saturating_sub(self.mark));
        self.every > 0 && since >= self.every
    }

    /// A checkpoint was written (or restored) at the app's `progress`.
    pub fn reset(&mut self, progress: Option<u64>) {
        self.since = 0;
        self.mark = progress.unwrap_or(0);
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

/// The scheduler's part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerRoundFile {
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

/// A worker's part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRoundFile {
    /// The worker half's state ([`Push::snapshot_state`](super::app::Push::snapshot_state)).
    #[serde(with = "serde_bytes")]
    pub state: Vec<u8>,
    /// Ring apps: the blocks the worker held.
    pub blocks: Vec<HeldBlockRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_due_after_every_rounds_and_never_with_zero() {
        let mut p = RoundCheckpointPolicy::new(3);
        for _ in 0..2 {
            p.round_committed();
        }
        assert!(!p.due(None));
        p.round_committed();
        assert!(p.due(None));
        p.reset(None);
        assert!(!p.due(None));
        let mut never = RoundCheckpointPolicy::new(0);
        for _ in 0..100 {
            never.round_committed();
        }
        assert!(!never.due(None));
        // An app that counts its own rounds: due 3 of them after the last checkpoint.
        p.reset(Some(10));
        assert!(!p.due(Some(12)));
        assert!(p.due(Some(13)));
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
    fn a_checkpoint_of_another_job_is_refused_with_the_reason() {
        let parts = ["scheduler", "worker-0", "worker-1"];
        assert_eq!(
            checkpoint_mismatch(b"strads_mf", &parts, "strads_mf", 2),
            None
        );
        assert!(
            checkpoint_mismatch(b"strads_mf", &parts, "lda", 2)
                .unwrap()
                .contains("lda")
        );
        assert!(
            checkpoint_mismatch(b"strads_mf", &parts, "strads_mf", 3)
                .unwrap()
                .contains("2 workers")
        );
        let swapped = ["scheduler", "worker-1", "worker-0"];
        assert!(
            checkpoint_mismatch(b"strads_mf", &swapped, "strads_mf", 2)
                .unwrap()
                .contains("belongs")
        );
    }
}
