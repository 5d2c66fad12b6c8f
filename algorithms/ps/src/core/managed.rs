//! Managed communication (Bösen's `SSPAggrBgWorker`, Wei et al., SoCC 2015).
//!
//! - `Clock()` forces out only the rows whose oldest pending update is from a clock at or
//!   before `c + 1 - s + tolerance` ([`BandwidthManager::clock`]), plus one batch of the
//!   highest-priority other rows; every other row stays in the oplog and keeps merging.
//! - Between clocks a background sender ([`BandwidthManager::tick`]) sends the top rows one
//!   batch (`batch_bytes`, 100 kB) at a time whenever the [`Pacer`] allows: after `N` bytes
//!   it waits `N / rate`. The clock's sends count against the same pacer, in wall time.
//! - A row's priority is `sum_j |delta_j / x_j|` over every `Inc` since it was last sent
//!   (`|delta_j|` where `x_j = 0` or the row is not cached), reset when it is sent.
//!
//! Early rows travel as `ShardBatch`es with `end_of_clock = false`, applied without
//! advancing the worker's clock. A held row may reach the shards up to `s - tolerance`
//! clocks after its clock ended, as in Bösen: the freshness bound is the price of spending
//! the link only where it helps. [`ClientCore::take_all_early`] flushes what is left
//! before a worker leaves.

use serde::{Deserialize, Serialize};
use std::ops::Range;

use crate::core::client::ClientCore;
use crate::core::types::{Clock, Row, RowId, ShardBatch, TableId};

/// Order in which pending rows are considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SendPolicy {
    /// Oldest first (first `Inc` into the oplog).
    // The aliases read settings files written before the kebab-case spelling.
    #[serde(alias = "Fifo")]
    Fifo,
    /// Largest accumulated `sum_j |delta_j / x_j|` first, ties oldest first.
    #[serde(alias = "RelativeMagnitude")]
    RelativeMagnitude,
}

/// Bösen's default `oplog_push_staleness_tolerance`.
pub const DEFAULT_TOLERANCE: u32 = 2;

/// Bösen's batch of a background send (and of the clock's priority batch), bytes.
pub const DEFAULT_BATCH_BYTES: usize = 100_000;

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

/// Bösen's priority of one `Inc`: `sum_j |delta_j / x_j|` over the delta's columns, `x`
/// the value before it (`|delta_j|` where `x_j = 0` or there is no value).
pub fn relative_change(value: Option<&Row>, delta: &Row) -> f32 {
    delta
        .entries()
        .map(|(j, d)| match value.map_or(0.0, |v| v.get(j)) {
            0.0 => d.abs(),
            x => (d / x).abs(),
        })
        .sum()
}

/// Bösen's send pacing in wall time: every send adds its bytes to a debt that drains at
/// `bytes_per_s`; a background send waits until the debt is paid. Unused time earns no
/// credit. A rate of 0 never drains (only forced sends go).
#[derive(Debug, Clone, PartialEq)]
pub struct Pacer {
    bytes_per_s: f64,
    debt: f64,
    at_s: f64,
}

impl Pacer {
    /// A pacer draining at `bytes_per_s`.
    pub fn new(bytes_per_s: u64) -> Self {
        Pacer {
            bytes_per_s: bytes_per_s as f64,
            debt: 0.0,
            at_s: 0.0,
        }
    }

    fn drain(&mut self, now_s: f64) {
        if now_s > self.at_s {
            self.debt = (self.debt - (now_s - self.at_s) * self.bytes_per_s).max(0.0);
            self.at_s = now_s;
        }
    }

    /// Whether a send may start at `now_s` (the debt is paid).
    pub fn ready(&mut self, now_s: f64) -> bool {
        self.drain(now_s);
        self.debt <= 0.0
    }

    /// Counts `bytes` sent at `now_s`.
    pub fn charge(&mut self, now_s: f64, bytes: usize) {
        self.drain(now_s);
        self.debt += bytes as f64;
    }

    /// Counts `bytes` sent at the last time it was told (a send that knows no time).
    pub fn charge_now(&mut self, bytes: usize) {
        self.debt += bytes as f64;
    }

    /// Seconds from `now_s` until the debt is paid (infinite at rate 0 with a debt).
    pub fn wait_s(&mut self, now_s: f64) -> f64 {
        self.drain(now_s);
        if self.debt <= 0.0 {
            0.0
        } else if self.bytes_per_s > 0.0 {
            self.debt / self.bytes_per_s
        } else {
            f64::INFINITY
        }
    }
}

/// What a [`BandwidthManager`] sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedStats {
    /// Background sends (ticks that sent something).
    pub early_sends: u64,
    /// Rows sent by background sends.
    pub early_rows: u64,
    /// Their bytes (`Row::wire_size`).
    pub early_bytes: u64,
    /// Rows sent at clocks (forced by age plus the priority batch).
    pub clock_rows: u64,
    /// Their bytes.
    pub clock_bytes: u64,
    /// Rows left in the oplog at clocks, summed over clocks.
    pub held_rows: u64,
}

/// A pending oplog row offered for sending.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The table.
    pub table: TableId,
    /// The row.
    pub row: RowId,
    /// Estimated encoded size (`Row::wire_size`).
    pub bytes: usize,
    /// Its priority (accumulated relative change since it was last sent).
    pub relative_magnitude: f32,
    /// Insertion order into the oplog.
    pub order: u64,
}

impl ClientCore {
    /// Every row of the oplog as a `Candidate`, in oplog key order, with the clock of its
    /// oldest pending update.
    pub fn oplog_candidates(&self) -> Vec<(Candidate, Clock)> {
        self.oplog
            .iter()
            .map(|(&(table, row), e)| {
                let c = Candidate {
                    table,
                    row,
                    bytes: e.delta.wire_size(),
                    relative_magnitude: e.priority,
                    order: e.order,
                };
                (c, e.since)
            })
            .collect()
    }
}

/// Picks rows to send: Bösen's clock-time and background sends under one pacer.
#[derive(Debug, Clone)]
pub struct BandwidthManager {
    /// Which rows go first.
    pub policy: SendPolicy,
    /// Bytes of one background send and of the clock's priority batch.
    pub batch_bytes: usize,
    /// Bösen's `oplog_push_staleness_tolerance`.
    pub tolerance: u32,
    /// The shared wall-clock budget.
    pub pacer: Pacer,
    stats: ManagedStats,
}

impl BandwidthManager {
    /// A manager pacing its sends at `bytes_per_s`.
    pub fn new(bytes_per_s: u64, policy: SendPolicy) -> Self {
        BandwidthManager {
            policy,
            batch_bytes: DEFAULT_BATCH_BYTES,
            tolerance: DEFAULT_TOLERANCE,
            pacer: Pacer::new(bytes_per_s),
            stats: ManagedStats::default(),
        }
    }

    /// What it sent so far.
    pub fn stats(&self) -> ManagedStats {
        self.stats
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
        }
    }

    /// Greedy selection in policy order within `budget` bytes (a row that does not fit is
    /// skipped; the first row goes even if it alone is larger, so a big row is never stuck).
    pub fn select(&mut self, mut cands: Vec<Candidate>, budget: usize) -> Vec<(TableId, RowId)> {
        self.rank(&mut cands);
        let mut left = budget;
        let mut out = Vec::new();
        for c in cands {
            if c.bytes <= left || (out.is_empty() && budget > 0) {
                left = left.saturating_sub(c.bytes);
                out.push((c.table, c.row));
            }
        }
        out
    }

    /// The background sender at `now_s`: one batch of the top rows if the pacer allows.
    pub fn tick(&mut self, client: &mut ClientCore, now_s: f64) -> Vec<ShardBatch> {
        if client.oplog.is_empty() || !self.pacer.ready(now_s) {
            return Vec::new();
        }
        let cands = client.oplog_candidates().into_iter().map(|c| c.0).collect();
        let chosen = self.select(cands, self.batch_bytes);
        let batches = client.take_early(&chosen);
        let bytes = wire_bytes(&batches);
        self.pacer.charge(now_s, bytes);
        if !batches.is_empty() {
            self.stats.early_sends += 1;
            self.stats.early_rows += chosen.len() as u64;
            self.stats.early_bytes += bytes as u64;
        }
        batches
    }

    /// `Clock()` at `now_s`: the rows whose oldest update is from a clock at or before
    /// `c + 1 - s + tolerance` (every row when that reaches `c + 1`; none under `Async`,
    /// which has no bound), plus one priority batch of the rest; the rest stays. Charged
    /// to the pacer.
    pub fn clock(&mut self, client: &mut ClientCore, now_s: f64) -> Vec<ShardBatch> {
        let next = client.current_clock() + 1;
        let up_to = client
            .min_staleness()
            .map(|s| (next + u64::from(self.tolerance)).checked_sub(u64::from(s)));
        let (mut forced, mut rest) = (Vec::new(), Vec::new());
        for (c, since) in client.oplog_candidates() {
            match up_to {
                Some(Some(up_to)) if since <= up_to => forced.push((c.table, c.row)),
                _ => rest.push(c),
            }
        }
        let extra = self.select(rest, self.batch_bytes);
        self.stats.held_rows += (client.oplog.len() - forced.len() - extra.len()) as u64;
        forced.extend(extra);
        let batches = client.clock_with(&forced);
        let bytes = wire_bytes(&batches);
        self.pacer.charge(now_s, bytes);
        self.stats.clock_rows += forced.len() as u64;
        self.stats.clock_bytes += bytes as u64;
        batches
    }
}

/// Row bytes (`Row::wire_size`) of `batches`.
pub fn wire_bytes(batches: &[ShardBatch]) -> usize {
    (batches.iter())
        .flat_map(|b| &b.batch.updates)
        .map(|u| u.delta.wire_size())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::shard::{PsShardCore, ShardAction};
    use crate::core::types::{Consistency, TableKind, TableSpec, WorkerId};

    const T: TableId = TableId(0);

    fn spec(consistency: Consistency) -> TableSpec {
        TableSpec::new(0, "t", TableKind::Dense { width: 2 }, consistency)
    }

    fn row_bytes() -> usize {
        Row::Dense(vec![0.0; 2]).wire_size()
    }

    /// A prioritising client whose cache holds row0 = [100, 0], row1 = [1, 0], row2 = [10, 0].
    fn client(consistency: Consistency) -> ClientCore {
        let mut c = ClientCore::new(WorkerId(0), 1, vec![spec(consistency)]).unwrap();
        c.set_prioritise(true);
        for (r, v) in [(0u64, 100.0f32), (1, 1.0), (2, 10.0)] {
            let reply = ShardAction::Reply {
                worker: WorkerId(0),
                request_id: 0,
                table: T,
                row: RowId(r),
                row_data: Row::Dense(vec![v, 0.0]).into(),
                row_clock: 0,
                ack_seq: 0,
            };
            c.handle(0, reply).unwrap();
        }
        c
    }

    fn priority(c: &ClientCore, row: u64) -> f32 {
        let cands = c.oplog_candidates();
        let found = cands.iter().find(|(k, _)| k.row == RowId(row));
        found.map_or(0.0, |(k, _)| k.relative_magnitude)
    }

    fn rows_of(batches: &[ShardBatch]) -> Vec<u64> {
        let mut rows: Vec<u64> = (batches.iter())
            .flat_map(|b| b.batch.updates.iter().map(|u| u.row.0))
            .collect();
        rows.sort();
        rows
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
        ] {
            let s: S = toml::from_str(text).unwrap();
            assert_eq!(s.managed, want, "{text}");
        }
        assert!(toml::from_str::<S>("managed = \"magnitude\"").is_err());
    }

    #[test]
    fn slices_and_budgets() {
        assert_eq!(slice_ranges(10, 4), vec![0..3, 3..6, 6..9, 9..10]);
        assert_eq!(slice_ranges(3, 8), vec![0..1, 1..2, 2..3]);
        assert!(slice_ranges(0, 4).is_empty());
        assert_eq!(slice_ranges(5, 1), vec![0..5]);
        assert_eq!(budget_for(1000, 0.5), 500);
        assert_eq!(budget_for(1000, f64::NAN), 0);
    }

    #[test]
    fn priority_is_per_element_accumulated_and_reset_on_send() {
        let mut c = client(Consistency::Ssp { staleness: 4 });
        // Row 0: |5/100| + |3| (x_1 = 0) = 3.05; then |-5/105| more: gross, not net.
        c.batch_inc(T, RowId(0), &Row::Dense(vec![5.0, 3.0]))
            .unwrap();
        assert!((priority(&c, 0) - 3.05).abs() < 1e-5, "{}", priority(&c, 0));
        c.inc(T, RowId(0), 0, -5.0).unwrap();
        let want = 3.05 + 5.0 / 105.0;
        assert!((priority(&c, 0) - want).abs() < 1e-5, "{}", priority(&c, 0));
        // Uncached row 7: plain |delta|, no division by a tiny epsilon.
        c.inc(T, RowId(7), 1, -0.5).unwrap();
        assert_eq!(priority(&c, 7), 0.5);
        // Sent: the priority starts again from the next Inc.
        let mut m = BandwidthManager::new(1_000_000, SendPolicy::RelativeMagnitude);
        m.batch_bytes = row_bytes();
        assert_eq!(rows_of(&m.tick(&mut c, 0.0)), vec![0]);
        c.inc(T, RowId(0), 0, 1.0).unwrap();
        // The cached row 0 is now [100, 3]: 1/100.
        assert!((priority(&c, 0) - 0.01).abs() < 1e-6, "{}", priority(&c, 0));
        // Without prioritising (clock-boundary mode) nothing is accumulated.
        let mut plain = ClientCore::new(WorkerId(0), 1, vec![spec(Consistency::Bsp)]).unwrap();
        plain.inc(T, RowId(0), 0, 1.0).unwrap();
        assert_eq!(priority(&plain, 0), 0.0);
    }

    #[test]
    fn the_pacer_charges_wall_time_and_earns_no_credit() {
        let mut p = Pacer::new(1000);
        assert!(p.ready(0.0));
        p.charge(0.0, 500);
        assert!(!p.ready(0.25));
        assert!((p.wait_s(0.25) - 0.25).abs() < 1e-9);
        assert!(p.ready(0.5));
        // Idle time is not saved up: a second later, one send again puts it in debt.
        p.charge(10.0, 100);
        assert!(!p.ready(10.05));
        assert!(p.ready(10.11));
        let mut zero = Pacer::new(0);
        zero.charge(0.0, 1);
        assert_eq!(zero.wait_s(5.0), f64::INFINITY);
    }

    #[test]
    fn background_sends_go_in_priority_order_one_batch_per_paced_slot() {
        let mut c = client(Consistency::Ssp { staleness: 4 });
        // Priorities: row0 5/100, row1 .5/1, row2 4/10.
        c.inc(T, RowId(0), 0, 5.0).unwrap();
        c.inc(T, RowId(1), 0, 0.5).unwrap();
        c.inc(T, RowId(2), 0, 4.0).unwrap();
        // Two rows per batch, 1 row's bytes per second.
        let mut m = BandwidthManager::new(row_bytes() as u64, SendPolicy::RelativeMagnitude);
        m.batch_bytes = 2 * row_bytes();
        let first = m.tick(&mut c, 0.0);
        assert!(!first[0].end_of_clock);
        assert_eq!(rows_of(&first), vec![1, 2]);
        // Two rows' bytes take two seconds to pay off.
        assert!(m.tick(&mut c, 1.5).is_empty());
        assert_eq!(rows_of(&m.tick(&mut c, 2.0)), vec![0]);
        assert!(c.oplog.is_empty());
        assert_eq!(m.stats().early_rows, 3);
        assert_eq!(m.stats().early_bytes, 3 * row_bytes() as u64);
        // Own writes stay visible after the early send.
        assert_eq!(
            c.cached(T, RowId(1)).unwrap().0,
            &Row::Dense(vec![1.5, 0.0])
        );
        // Fifo order.
        let mut f = client(Consistency::Bsp);
        for r in [2, 0, 1] {
            f.inc(T, RowId(r), 0, 1.0).unwrap();
        }
        let mut fifo = BandwidthManager::new(1, SendPolicy::Fifo);
        let mut cands: Vec<_> = f.oplog_candidates().into_iter().map(|c| c.0).collect();
        fifo.rank(&mut cands);
        assert_eq!(cands.iter().map(|c| c.row.0).collect::<Vec<_>>(), [2, 0, 1]);
    }

    #[test]
    fn a_clock_forces_only_aged_rows_plus_one_priority_batch() {
        // s = 4, tolerance 2: at the end of clock c the rows from clocks <= c - 1 go.
        let mut c = client(Consistency::Ssp { staleness: 4 });
        let mut m = BandwidthManager::new(1000, SendPolicy::RelativeMagnitude);
        m.batch_bytes = row_bytes();
        c.inc(T, RowId(0), 0, 1.0).unwrap(); // priority .01
        c.inc(T, RowId(1), 0, 1.0).unwrap(); // priority 1: the priority batch
        let end0 = m.clock(&mut c, 0.0);
        assert_eq!(end0.len(), 1);
        assert!(end0[0].end_of_clock);
        assert_eq!(rows_of(&end0), vec![1]);
        assert_eq!(c.current_clock(), 1);
        // Row 0 (from clock 0) stays and merges; row 2 is new at clock 1.
        c.inc(T, RowId(0), 0, 1.0).unwrap();
        c.inc(T, RowId(2), 0, 100.0).unwrap(); // priority 10: the priority batch
        let end1 = m.clock(&mut c, 0.01);
        assert_eq!(rows_of(&end1), vec![0, 2], "row 0 is aged, row 2 the top");
        let merged = &end1[0].batch.updates[0];
        assert_eq!(&*merged.delta, &Row::Dense(vec![2.0, 0.0]));
        assert_eq!(m.stats().held_rows, 1);
        // The clock's bytes count against the background budget: 3 rows at 1000 B/s.
        assert!(m.tick(&mut c, 0.01).is_empty());
        assert!(m.pacer.wait_s(0.01) > 0.0);
        assert_eq!(m.stats().clock_bytes, 3 * row_bytes() as u64);
        // BSP forces everything at every clock.
        let mut b = client(Consistency::Bsp);
        let mut mb = BandwidthManager::new(1000, SendPolicy::RelativeMagnitude);
        mb.batch_bytes = 0;
        for r in 0..3 {
            b.inc(T, RowId(r), 0, 1.0).unwrap();
        }
        assert_eq!(rows_of(&mb.clock(&mut b, 0.0)), vec![0, 1, 2]);
    }

    #[test]
    fn held_rows_reach_the_shard_early_or_when_the_worker_leaves() {
        let sp = spec(Consistency::Ssp { staleness: 8 });
        let mut c = client(Consistency::Ssp { staleness: 8 });
        let mut s = PsShardCore::new(1, vec![sp]).unwrap();
        let mut m = BandwidthManager::new(1_000_000, SendPolicy::RelativeMagnitude);
        m.batch_bytes = 0;
        c.inc(T, RowId(3), 0, 1.0).unwrap();
        for b in m.clock(&mut c, 0.0) {
            s.handle_batch(&b).unwrap();
        }
        // The clock advanced at the shard; row 3 is held.
        assert_eq!(s.worker_clock(WorkerId(0)).unwrap(), 1);
        assert_eq!(s.row(T, RowId(3)), None);
        m.batch_bytes = DEFAULT_BATCH_BYTES;
        for b in m.tick(&mut c, 1.0) {
            assert!(s.handle_batch(&b).unwrap().is_empty());
        }
        assert_eq!(s.row(T, RowId(3)), Some(&Row::Dense(vec![1.0, 0.0])));
        c.inc(T, RowId(4), 1, 2.0).unwrap();
        for b in c.take_all_early() {
            s.handle_batch(&b).unwrap();
        }
        assert_eq!(s.row(T, RowId(4)), Some(&Row::Dense(vec![0.0, 2.0])));
        assert!(c.oplog.is_empty());
    }
}
