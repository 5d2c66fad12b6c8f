//! Shard replies and pushes into the cache (read-my-writes re-applied on fresh data), and
//! installing a new placement.

use super::{CachedRow, ClientCore, raise};
use crate::core::error::PsCoreError;
use crate::core::placement::Placement;
use crate::core::shard::ShardAction;
use crate::core::types::{Clock, Row, RowId, SharedRow, TableId};
use std::collections::VecDeque;

impl ClientCore {
    /// Feeds a reply or push from `from_shard` into the cache (an ESSP push also refreshes
    /// every cached row of that table on that shard).
    pub fn handle(&mut self, from_shard: u32, action: ShardAction) -> Result<(), PsCoreError> {
        if action.worker() != self.worker {
            return Err(PsCoreError::UnknownWorker(action.worker()));
        }
        match action {
            ShardAction::Reply {
                request_id,
                table,
                row,
                row_data,
                row_clock,
                ack_seq,
                ..
            } => {
                if self.moved_away(from_shard, table, row)? {
                    // Sent before its shard handed the row over: ask the new owner.
                    if (self.outstanding.get(&(table, row)))
                        .is_some_and(|&(id, _)| id == request_id)
                    {
                        self.outstanding.remove(&(table, row));
                    }
                    return Ok(());
                }
                raise(&mut self.acked, from_shard, ack_seq);
                raise(&mut self.seen_min, from_shard, row_clock);
                if let Some(done) = self.syncs.get_mut(&request_id) {
                    *done = true;
                    return Ok(());
                }
                if self
                    .outstanding
                    .get(&(table, row))
                    .is_some_and(|&(id, _)| id == request_id)
                {
                    self.outstanding.remove(&(table, row));
                }
                self.install(table, row, row_data, row_clock, ack_seq, true)
            }
            ShardAction::Push {
                table,
                rows,
                clock,
                ack_seq,
                ..
            } => {
                raise(&mut self.acked, from_shard, ack_seq);
                raise(&mut self.seen_min, from_shard, clock);
                for (row, data) in rows {
                    if !self.moved_away(from_shard, table, row)? {
                        self.install(table, row, data, clock, ack_seq, false)?;
                    }
                }
                // Only ESSP rows are all subscribed; ignore stray pushes for other tables.
                if self.table(table)?.consistency.is_essp() {
                    raise(&mut self.push_clock, (table, from_shard), clock);
                }
                Ok(())
            }
            ShardAction::Content {
                table,
                row,
                writer_clocks,
                ..
            } => {
                match row {
                    Some(row) if self.moved_away(from_shard, table, row)? => {}
                    Some(row) => {
                        if let Some(e) = self.cache.get_mut(&(table, row)) {
                            e.writers = writer_clocks;
                        }
                    }
                    // As `push_clock`: a push says every subscribed row is current.
                    None if self.table(table)?.consistency.is_essp() => {
                        let v = self.push_writers.entry((table, from_shard)).or_default();
                        v.resize(v.len().max(writer_clocks.len()), 0);
                        v.iter_mut()
                            .zip(&writer_clocks)
                            .for_each(|(a, &b)| *a = (*a).max(b));
                    }
                    None => {}
                }
                Ok(())
            }
            ShardAction::Ack { ack_seq, .. } => {
                raise(&mut self.acked, from_shard, ack_seq);
                Ok(())
            }
        }
    }

    /// Whether `shard` sent `row` of `table` before it handed the row over (after a
    /// placement change); a row that never lived there is an error.
    fn moved_away(&self, shard: u32, table: TableId, row: RowId) -> Result<bool, PsCoreError> {
        self.table(table)?;
        if self.placement.shard_of(table, row) == shard {
            return Ok(false);
        }
        if self.placement.epoch() > 0 {
            return Ok(true);
        }
        Err(PsCoreError::InvalidConfig(format!(
            "row {row:?} of table {table:?} does not live on shard {shard}"
        )))
    }

    /// The placement rows are sent by now.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Takes a new placement at a clock boundary (the oplog flushed): the cached copies and
    /// reads in flight of rows that moved are dropped, so the next read asks their new
    /// owner (and subscribes there under ESSP). A placement of an older epoch is refused.
    pub fn install_placement(&mut self, next: Placement) -> Result<(), PsCoreError> {
        if self.has_oplog() || next.epoch() < self.placement.epoch() {
            return Err(PsCoreError::InvalidConfig(format!(
                "placement epoch {} taken with unflushed updates or after epoch {}",
                next.epoch(),
                self.placement.epoch()
            )));
        }
        let (old, new) = (&self.placement, &next);
        let moved = |&(t, r): &(TableId, RowId)| old.shard_of(t, r) != new.shard_of(t, r);
        self.cache.retain(|k, _| !moved(k));
        self.outstanding.retain(|k, _| !moved(k));
        self.placement = next;
        Ok(())
    }

    fn install(
        &mut self,
        table: TableId,
        row: RowId,
        data: SharedRow,
        row_clock: Clock,
        ack_seq: u64,
        insert: bool,
    ) -> Result<(), PsCoreError> {
        let spec = self.table(table)?;
        spec.check_delta(row, &data)?;
        let scale = spec.update_rule.local_scale();
        let key = (table, row);
        if !insert && !self.cache.contains_key(&key) {
            // Not cached any more: its in-flight own deltas are unknown, so do not cache it.
            return Ok(());
        }
        let rmw = spec.read_my_writes;
        let e = self.cache.entry(key).or_insert_with(|| CachedRow {
            row: SharedRow::new(Row::Sparse(Vec::new())),
            clock: 0,
            pending: VecDeque::new(),
            writers: Vec::new(),
        });
        while e.pending.front().is_some_and(|(s, _)| *s <= ack_seq) {
            e.pending.pop_front();
        }
        let oplog = self.oplog.get(&key).filter(|_| rmw);
        e.row = if e.pending.is_empty() && oplog.is_none() {
            // Nothing of our own to add: cache the received row as it is (no copy).
            data
        } else {
            let mut visible = data.into_row();
            for (_, d) in &e.pending {
                visible.add_scaled(d, scale);
            }
            if let Some(o) = oplog {
                visible.add_scaled(&o.delta, scale);
            }
            SharedRow::new(visible)
        };
        e.clock = row_clock;
        if insert {
            // A reply: its `Content`, if the table has them, follows.
            e.writers.clear();
        }
        Ok(())
    }
}
