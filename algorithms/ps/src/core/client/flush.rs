//! The oplog's flush: `Clock()`, early pushes of chosen rows, and the per-shard batches.

use super::{ClientCore, MAX_PENDING_PER_ROW};
use crate::core::types::{Row, RowId, RowUpdate, ShardBatch, SharedRow, TableId, UpdateBatch};
use std::collections::BTreeMap;

impl ClientCore {
    /// `Clock()`: one batch per shard (each needs the tick, even empty), then advances.
    pub fn clock(&mut self) -> Vec<ShardBatch> {
        let oplog = std::mem::take(&mut self.oplog);
        let batches = self.build_batches(oplog.into_iter().map(|(k, e)| (k, e.delta)), true);
        self.clock += 1;
        batches
    }

    /// `Clock()` sending only `rows` of the oplog (one batch per shard, each ends the
    /// clock); the other rows stay and keep merging (managed communication).
    pub fn clock_with(&mut self, rows: &[(TableId, RowId)]) -> Vec<ShardBatch> {
        let taken = self.take_rows(rows);
        let batches = self.build_batches(taken.into_iter(), true);
        self.clock += 1;
        batches
    }

    /// Takes the given rows out of the oplog as early batches (`end_of_clock = false`), one
    /// per shard (managed communication).
    pub fn take_early(&mut self, rows: &[(TableId, RowId)]) -> Vec<ShardBatch> {
        let taken = self.take_rows(rows);
        if taken.is_empty() {
            return Vec::new();
        }
        self.build_batches(taken.into_iter(), false)
    }

    /// The whole oplog as early batches: what a managed worker still holds when it leaves.
    pub fn take_all_early(&mut self) -> Vec<ShardBatch> {
        let rows: Vec<_> = self.oplog.keys().copied().collect();
        self.take_early(&rows)
    }

    fn take_rows(&mut self, rows: &[(TableId, RowId)]) -> Vec<((TableId, RowId), Row)> {
        (rows.iter())
            .filter_map(|k| self.oplog.remove(k).map(|e| (*k, e.delta)))
            .collect()
    }

    /// Whether the oplog holds any row.
    pub fn has_oplog(&self) -> bool {
        !self.oplog.is_empty()
    }

    /// Makes `Inc`s accumulate managed communication's per-row priority.
    pub fn set_prioritise(&mut self, on: bool) {
        self.prioritise = on;
    }

    /// The smallest staleness bound of the tables (`None`: all `Async`): Bösen's clock
    /// forces rows by it.
    pub fn min_staleness(&self) -> Option<u32> {
        (self.tables.values())
            .filter_map(|t| t.consistency.staleness_bound())
            .min()
    }

    fn build_batches(
        &mut self,
        rows: impl Iterator<Item = ((TableId, RowId), Row)>,
        all_shards: bool,
    ) -> Vec<ShardBatch> {
        let mut per_shard: BTreeMap<u32, Vec<RowUpdate>> = if all_shards {
            (self.placement.shards().into_iter())
                .map(|s| (s, Vec::new()))
                .collect()
        } else {
            BTreeMap::new()
        };
        for ((table, row), delta) in rows {
            per_shard
                .entry(self.placement.shard_of(table, row))
                .or_default()
                .push(RowUpdate {
                    table,
                    row,
                    delta: SharedRow::new(delta),
                });
        }
        let mut out = Vec::with_capacity(per_shard.len());
        for (shard, updates) in per_shard {
            let seq = self.next_seq;
            self.next_seq += 1;
            for u in &updates {
                let key = (u.table, u.row);
                if !self.tables.get(&u.table).is_some_and(|t| t.read_my_writes) {
                    continue;
                }
                if let Some(c) = self.cache.get_mut(&key) {
                    c.pending.push_back((seq, u.delta.clone()));
                    if c.pending.len() > MAX_PENDING_PER_ROW {
                        self.cache.remove(&key);
                    }
                }
            }
            out.push(ShardBatch {
                shard,
                worker: self.worker,
                clock: self.clock,
                end_of_clock: all_shards,
                batch: UpdateBatch { seq, updates },
            });
        }
        out
    }
}
