//! Managed communication (Wei et al., SoCC 2015): spend a per-tick bandwidth budget on
//! sending the most significant pending oplog rows early, as `ShardBatch`es with
//! `end_of_clock = false` that the shard applies without advancing the worker's clock; the
//! rest goes at `Clock()`. Updates only arrive sooner, so the SSP guarantee holds.

use serde::{Deserialize, Serialize};
use std::ops::Range;

use crate::core::client::ClientCore;
use crate::core::types::{RowId, ShardBatch, TableId};

/// Order in which pending rows are considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SendPolicy {
    /// Oldest first (first `Inc` into the oplog).
    // The aliases read settings files written before the kebab-case spelling.
    #[serde(alias = "Fifo")]
    Fifo,
    /// Uniformly shuffled (seeded, reproducible).
    #[serde(alias = "Random")]
    Random,
    /// Largest `|delta|_1 / (|value|_1 + eps)` first, ties oldest first.
    #[serde(alias = "RelativeMagnitude")]
    RelativeMagnitude,
}

/// Bytes `bytes_per_s` allows in `seconds` (0 for a negative or non-finite time).
pub fn budget_for(bytes_per_s: u64, seconds: f64) -> usize {
    if seconds.is_finite() && seconds > 0.0 {
        (bytes_per_s as f64 * seconds) as usize
    } else {
        0
    }
}

/// `0..len` cut into at most `slices` consecutive ranges of `ceil(len / slices)` items.
pub fn slice_ranges(len: usize, slices: usize) -> Vec<Range<usize>> {
    let step = len.div_ceil(slices.max(1)).max(1);
    (0..len)
        .step_by(step)
        .map(|s| s..(s + step).min(len))
        .collect()
}

/// A pending oplog row offered for early sending.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The table.
    pub table: TableId,
    /// The row.
    pub row: RowId,
    /// Estimated encoded size (`Row::wire_size`).
    pub bytes: usize,
    /// `|delta|_1 / (|value|_1 + eps)`, value the cached view of the row (0 if not cached).
    pub relative_magnitude: f32,
    /// Insertion order into the oplog.
    pub order: u64,
}

impl ClientCore {
    /// Every row of the oplog as a `Candidate`, in oplog key order.
    pub fn oplog_candidates(&self, eps: f32) -> Vec<Candidate> {
        self.oplog
            .iter()
            .map(|(&(table, row), e)| {
                let value = self.cached(table, row).map_or(0.0, |(r, _)| r.l1_norm());
                Candidate {
                    table,
                    row,
                    bytes: e.delta.wire_size(),
                    relative_magnitude: e.delta.l1_norm() / (value + eps),
                    order: e.order,
                }
            })
            .collect()
    }
}

/// Picks rows to send early under a bandwidth budget.
#[derive(Debug, Clone)]
pub struct BandwidthManager {
    /// Bytes that may be sent per tick (unused budget is not carried over).
    pub budget_bytes_per_tick: usize,
    /// Which rows go first.
    pub policy: SendPolicy,
    /// Guards the relative magnitude against zero values.
    pub eps: f32,
    rng: u64,
}

impl BandwidthManager {
    /// A manager sending at most `budget_bytes_per_tick` per tick (`seed`: the `Random` order).
    pub fn new(budget_bytes_per_tick: usize, policy: SendPolicy, seed: u64) -> Self {
        BandwidthManager {
            budget_bytes_per_tick,
            policy,
            eps: 1e-6,
            rng: seed | 1,
        }
    }

    /// Sets the next tick's budget from its measured length.
    pub fn set_tick_seconds(&mut self, bytes_per_s: u64, seconds: f64) {
        self.budget_bytes_per_tick = budget_for(bytes_per_s, seconds);
    }

    /// xorshift64*: no `rand` dependency in the library.
    fn next_u64(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Orders candidates by the policy.
    pub fn rank(&mut self, cands: &mut [Candidate]) {
        match self.policy {
            SendPolicy::Fifo => cands.sort_by_key(|c| c.order),
            SendPolicy::RelativeMagnitude => cands.sort_by(|a, b| {
                b.relative_magnitude
                    .total_cmp(&a.relative_magnitude)
                    .then(a.order.cmp(&b.order))
            }),
            SendPolicy::Random => {
                cands.sort_by_key(|c| c.order);
                for i in (1..cands.len()).rev() {
                    let j = (self.next_u64() % (i as u64 + 1)) as usize;
                    cands.swap(i, j);
                }
            }
        }
    }

    /// Greedy selection in policy order (a row that does not fit is skipped).
    pub fn select(&mut self, mut cands: Vec<Candidate>) -> Vec<(TableId, RowId)> {
        self.rank(&mut cands);
        let mut left = self.budget_bytes_per_tick;
        let mut out = Vec::new();
        for c in cands {
            if c.bytes <= left {
                left -= c.bytes;
                out.push((c.table, c.row));
            }
        }
        out
    }

    /// One tick: takes the chosen rows out of `client`'s oplog as early batches.
    pub fn tick(&mut self, client: &mut ClientCore) -> Vec<ShardBatch> {
        let cands = client.oplog_candidates(self.eps);
        let chosen = self.select(cands);
        client.take_early(&chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::shard::{PsShardCore, ShardAction};
    use crate::core::types::{Consistency, Row, TableKind, TableSpec, WorkerId};

    const T: TableId = TableId(0);

    fn spec() -> TableSpec {
        TableSpec::new(0, "t", TableKind::Dense { width: 1 }, Consistency::Async)
    }

    fn client_with_values() -> ClientCore {
        let mut c = ClientCore::new(WorkerId(0), 1, vec![spec()]).unwrap();
        // Cached values: row0 = 100, row1 = 1, row2 = 10.
        for (r, v) in [(0u64, 100.0f32), (1, 1.0), (2, 10.0)] {
            c.handle(
                0,
                ShardAction::Reply {
                    worker: WorkerId(0),
                    request_id: 0,
                    table: T,
                    row: RowId(r),
                    row_data: Row::Dense(vec![v]).into(),
                    row_clock: 0,
                    ack_seq: 0,
                },
            )
            .unwrap();
        }
        // Deltas (in this insertion order): row0 += 5 (rel .05), row1 += .5 (.5), row2 += 4 (.4).
        c.inc(T, RowId(0), 0, 5.0).unwrap();
        c.inc(T, RowId(1), 0, 0.5).unwrap();
        c.inc(T, RowId(2), 0, 4.0).unwrap();
        c
    }

    #[test]
    fn a_policy_reads_in_both_spellings() {
        #[derive(serde::Deserialize)]
        struct S {
            managed: SendPolicy,
        }
        for (text, want) in [
            (
                "managed = \"relative-magnitude\"",
                SendPolicy::RelativeMagnitude,
            ),
            (
                "managed = \"RelativeMagnitude\"",
                SendPolicy::RelativeMagnitude,
            ),
            ("managed = \"fifo\"", SendPolicy::Fifo),
            ("managed = \"Random\"", SendPolicy::Random),
        ] {
            let s: S = toml::from_str(text).unwrap();
            assert_eq!(s.managed, want, "{text}");
        }
        assert!(toml::from_str::<S>("managed = \"magnitude\"").is_err());
    }

    #[test]
    fn settings_slices_budget_and_checks() {
        assert_eq!(slice_ranges(10, 4), vec![0..3, 3..6, 6..9, 9..10]);
        assert_eq!(slice_ranges(3, 8), vec![0..1, 1..2, 2..3]);
        assert!(slice_ranges(0, 4).is_empty());
        assert_eq!(slice_ranges(5, 1), vec![0..5]);
        let mut m = BandwidthManager::new(budget_for(1000, 0.5), SendPolicy::Fifo, 1);
        assert_eq!(m.budget_bytes_per_tick, 500);
        m.set_tick_seconds(1000, 0.25);
        assert_eq!(m.budget_bytes_per_tick, 250);
        m.set_tick_seconds(1000, f64::NAN);
        assert_eq!(m.budget_bytes_per_tick, 0);
    }

    #[test]
    fn relative_magnitude_order_and_budget() {
        let mut c = client_with_values();
        let row_bytes = Row::Dense(vec![0.0]).wire_size();
        let mut m = BandwidthManager::new(2 * row_bytes, SendPolicy::RelativeMagnitude, 1);
        let batches = m.tick(&mut c);
        assert_eq!(batches.len(), 1);
        assert!(!batches[0].end_of_clock);
        let rows: Vec<u64> = batches[0].batch.updates.iter().map(|u| u.row.0).collect();
        assert_eq!(rows, vec![1, 2]);
        assert_eq!(c.oplog.len(), 1);
        assert!(c.oplog.get(&(T, RowId(0))).map(|e| &e.delta).is_some());
        // Own writes stay visible after the early send.
        assert_eq!(c.cached(T, RowId(1)).unwrap().0, &Row::Dense(vec![1.5]));
    }

    #[test]
    fn fifo_and_random_policies() {
        let mut c = client_with_values();
        let mut m = BandwidthManager::new(1000, SendPolicy::Fifo, 1);
        let mut cands = c.oplog_candidates(1e-6);
        m.rank(&mut cands);
        let order: Vec<u64> = cands.iter().map(|c| c.row.0).collect();
        assert_eq!(order, vec![0, 1, 2]);
        // Random: a permutation, reproducible from the seed.
        let mut a = BandwidthManager::new(1000, SendPolicy::Random, 42);
        let mut b = BandwidthManager::new(1000, SendPolicy::Random, 42);
        let sa = a.select(c.oplog_candidates(1e-6));
        let sb = b.select(c.oplog_candidates(1e-6));
        assert_eq!(sa, sb);
        let mut sorted: Vec<u64> = sa.iter().map(|k| k.1.0).collect();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2]);
        // Zero budget sends nothing.
        let mut z = BandwidthManager::new(0, SendPolicy::Fifo, 1);
        assert!(z.tick(&mut c).is_empty());
        assert_eq!(c.oplog.len(), 3);
    }

    #[test]
    fn shard_accepts_early_then_clock_flush() {
        let mut c = client_with_values();
        let mut s = PsShardCore::new(1, vec![spec()]).unwrap();
        let mut m = BandwidthManager::new(1000, SendPolicy::RelativeMagnitude, 1);
        c.inc(T, RowId(3), 0, 1.0).unwrap();
        let early = m.tick(&mut c);
        c.inc(T, RowId(3), 0, 1.0).unwrap(); // after the early send: goes at clock()
        for b in early {
            assert!(s.handle_batch(&b).unwrap().is_empty());
        }
        assert_eq!(s.worker_clock(WorkerId(0)).unwrap(), 0);
        assert_eq!(s.row(T, RowId(3)), Some(&Row::Dense(vec![1.0])));
        for b in c.clock() {
            s.handle_batch(&b).unwrap();
        }
        assert_eq!(s.row(T, RowId(3)), Some(&Row::Dense(vec![2.0])));
        assert_eq!(s.row(T, RowId(0)), Some(&Row::Dense(vec![5.0])));
        assert_eq!(s.min_clock(), 1);
    }
}
