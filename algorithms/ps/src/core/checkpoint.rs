//! Decisions of a job's checkpoints (sans-I/O): the pieces, the job's shape, and which
//! checkpoint clock is complete ([`CheckpointTracker`]); [`crate::checkpoint`] writes the
//! files. A checkpoint at clock `c` is one file per shard (its tables as of clock `c`,
//! [`crate::core::shard::PsShardCore::enable_checkpoints`]), one per worker, one of the
//! monitor, and a manifest the monitor writes last.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::types::{Clock, TableSpec};

/// One file of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Piece {
    /// Shard `s`'s tables.
    Shard(u32),
    /// Worker `w`'s state.
    Worker(u32),
    /// The monitor's history.
    Monitor,
}

impl Piece {
    /// Its part name in a checkpoint: `shard-<s>`, `worker-<w>` or `monitor`.
    pub fn part(&self) -> String {
        match self {
            Piece::Shard(s) => format!("shard-{s}"),
            Piece::Worker(w) => format!("worker-{w}"),
            Piece::Monitor => "monitor".into(),
        }
    }
}

/// What a checkpoint must match to be resumed: the app, the cluster's shape and the tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobShape {
    /// The app's name.
    pub app: String,
    /// Shards.
    pub shards: u32,
    /// Workers.
    pub workers: u32,
    /// Clocks between checkpoints.
    pub every: Clock,
    /// The tables (names, shapes, consistency, rules).
    pub tables: Vec<TableSpec>,
}

impl JobShape {
    /// `None` when `saved` is this shape, else what differs (for the refusal).
    pub fn difference(&self, saved: &JobShape) -> Option<String> {
        let field = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            format!("checkpoint of another job: {what} {b:?} in the checkpoint, {a:?} now")
        };
        let (a, b) = (self, saved);
        [
            (a.app != b.app).then(|| field("app", &a.app, &b.app)),
            (a.shards != b.shards).then(|| field("shards", &a.shards, &b.shards)),
            (a.workers != b.workers).then(|| field("workers", &a.workers, &b.workers)),
            (a.every != b.every).then(|| field("checkpoint_every", &a.every, &b.every)),
            (a.tables != b.tables).then(|| field("tables", &a.tables, &b.tables)),
        ]
        .into_iter()
        .flatten()
        .next()
    }
}

/// A durable piece: whose, its file name, its digest.
pub type PieceFile<D> = (Piece, String, D);

/// The monitor's view of checkpoints in progress: which pieces (with digest `D`) of which
/// clock are durable; a clock is complete once every shard and worker reported it.
#[derive(Debug)]
pub struct CheckpointTracker<D> {
    shards: u32,
    workers: u32,
    pending: BTreeMap<Clock, BTreeMap<Piece, (String, D)>>,
    /// The newest clock completed so far.
    completed: Option<Clock>,
}

impl<D> CheckpointTracker<D> {
    /// A tracker for `shards` and `workers`; reports older than `resumed_at` are ignored.
    pub fn new(shards: u32, workers: u32, resumed_at: Option<Clock>) -> Self {
        CheckpointTracker {
            shards,
            workers,
            pending: BTreeMap::new(),
            completed: resumed_at,
        }
    }

    /// Records that `piece` of `clock` is durable as file `name`; returns the clock and its
    /// files once it is complete (dropping older incomplete clocks).
    pub fn record(
        &mut self,
        clock: Clock,
        piece: Piece,
        name: String,
        digest: D,
    ) -> Option<(Clock, Vec<PieceFile<D>>)> {
        if self.completed.is_some_and(|c| clock <= c) || piece == Piece::Monitor {
            return None;
        }
        let in_range = match piece {
            Piece::Shard(s) => s < self.shards,
            Piece::Worker(w) => w < self.workers,
            Piece::Monitor => false,
        };
        if !in_range {
            return None;
        }
        let entry = self.pending.entry(clock).or_default();
        entry.insert(piece, (name, digest));
        if entry.len() < (self.shards + self.workers) as usize {
            return None;
        }
        let pieces = self.pending.remove(&clock)?;
        self.pending.retain(|&c, _| c > clock);
        self.completed = Some(clock);
        Some((
            clock,
            pieces.into_iter().map(|(p, (n, d))| (p, n, d)).collect(),
        ))
    }
}

/// Whether a worker about to start `clock` writes a checkpoint (positive multiple of `every`).
pub fn is_checkpoint_clock(every: Clock, clock: Clock) -> bool {
    every > 0 && clock > 0 && clock.is_multiple_of(every)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::{Consistency, TableKind};

    #[test]
    fn pieces_have_distinct_part_names_and_checkpoint_clocks_are_multiples() {
        let parts = [Piece::Shard(3), Piece::Worker(3), Piece::Monitor].map(|p| p.part());
        assert_eq!(parts, ["shard-3", "worker-3", "monitor"]);
        assert!(is_checkpoint_clock(5, 10));
        assert!(!is_checkpoint_clock(5, 0) && !is_checkpoint_clock(5, 7));
        assert!(!is_checkpoint_clock(0, 10));
    }

    #[test]
    fn a_clock_completes_once_every_shard_and_worker_reported() {
        let mut t = CheckpointTracker::new(2, 2, None);
        let mut rec = |c, p: Piece| t.record(c, p, p.part(), 0u64);
        assert!(rec(5, Piece::Shard(0)).is_none());
        assert!(rec(5, Piece::Worker(0)).is_none());
        assert!(rec(5, Piece::Worker(1)).is_none());
        // A later clock's reports (fast workers) do not complete clock 5.
        assert!(rec(10, Piece::Worker(0)).is_none());
        assert!(rec(5, Piece::Worker(9)).is_none(), "no such worker");
        assert!(rec(5, Piece::Monitor).is_none());
        let (clock, pieces) = rec(5, Piece::Shard(1)).unwrap();
        assert_eq!(clock, 5);
        assert_eq!(pieces.len(), 4);
        // Once complete, a repeat or an older clock is ignored.
        assert!(rec(5, Piece::Shard(1)).is_none());
        assert!(rec(3, Piece::Shard(1)).is_none());
        for p in [Piece::Shard(0), Piece::Shard(1), Piece::Worker(1)] {
            assert!(rec(10, p).is_none() || p == Piece::Worker(1));
        }
        assert_eq!(t.completed, Some(10));
        // A resumed job ignores reports up to its checkpoint.
        let mut r = CheckpointTracker::new(1, 1, Some(10));
        assert!(r.record(10, Piece::Shard(0), String::new(), ()).is_none());
        assert!(r.record(10, Piece::Worker(0), String::new(), ()).is_none());
    }

    #[test]
    fn another_jobs_shape_is_named() {
        let table = TableSpec::new(0, "w", TableKind::Dense { width: 2 }, Consistency::Bsp);
        let a = JobShape {
            app: "ps-mf".into(),
            shards: 2,
            workers: 2,
            every: 5,
            tables: vec![table.clone()],
        };
        assert_eq!(a.difference(&a.clone()), None);
        let more = JobShape {
            workers: 3,
            ..a.clone()
        };
        let why = a.difference(&more).unwrap();
        assert!(why.contains("workers 3 in the checkpoint, 2 now"), "{why}");
        let other = JobShape {
            tables: vec![
                table.with_rule(crate::core::types::UpdateRuleSpec::Sgd { learning_rate: 0.1 }),
            ],
            ..a.clone()
        };
        assert!(a.difference(&other).unwrap().contains("tables"));
    }
}
