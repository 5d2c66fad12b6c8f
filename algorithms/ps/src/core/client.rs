//! `ClientCore`: a worker's row cache, coalescing oplog and read decision.
//!
//! One `ClientCore` per worker (not per process, as Bösen shares one): clocks, the
//! read-my-writes view and staleness statistics are per worker.
//!
//! Read-my-writes: a cached row is *server data + own deltas the server had not applied
//! when it produced that data + the unflushed oplog*. Flushed batches carry a `seq`; shards
//! echo the last applied one (`ack_seq`), so on fresh data the client drops acknowledged
//! own deltas and re-applies the rest. This needs FIFO delivery per (client, shard) pair.

mod flush;
mod replies;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::core::error::PsCoreError;
use crate::core::managed::relative_change;
use crate::core::placement::Placement;
use crate::core::stats::StalenessStats;
use crate::core::types::{
    Clock, ReadRequest, Row, RowId, ShardBatch, SharedRow, TableId, TableKind, TableSpec, WorkerId,
};

/// A cached row with more unacknowledged own deltas than this is evicted (bounds memory).
pub const MAX_PENDING_PER_ROW: usize = 256;

/// Staleness values above this are counted with it by [`ClientCore::take_observed`].
pub const MAX_OBSERVED_STALENESS: usize = 64;

/// Outcome of [`ClientCore::get_shared`].
#[derive(Debug, Clone, PartialEq)]
pub enum GetOutcome {
    /// Served from the cache (own writes included, shared with it); the staleness was
    /// recorded.
    Hit(SharedRow),
    /// Send this request to its shard, then call `get` again once the reply has been handled.
    Fetch(ReadRequest),
    /// A sufficient fetch of this row is already in flight: wait for it, then `get` again.
    Wait,
}

/// A push sent at once ([`ClientCore::push_now`]), done once its shard acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushTicket {
    /// The shard the push went to.
    pub shard: u32,
    /// The sequence number of its batch.
    pub seq: u64,
}

#[derive(Debug, Clone)]
struct CachedRow {
    /// Visible value: server data + `pending` + unflushed oplog delta (each scaled by the
    /// table's local scale). Shared with the reads that returned it (`get_shared`).
    row: SharedRow,
    /// Row clock of the server data.
    clock: Clock,
    /// Own flushed deltas not yet acknowledged by the shard, oldest first.
    pending: VecDeque<(u64, SharedRow)>,
    /// Per writer, the clocks whose updates the server data holds (`ShardAction::Content`;
    /// empty until known).
    writers: Vec<Clock>,
}

#[derive(Debug, Clone)]
pub(crate) struct OplogEntry {
    pub(crate) delta: Row,
    /// Insertion order (for FIFO managed communication).
    pub(crate) order: u64,
    /// The clock of its oldest update (managed communication holds young rows).
    pub(crate) since: Clock,
    /// Managed communication's priority: `sum |delta_j / x_j|` over its `Inc`s.
    pub(crate) priority: f32,
}

/// One worker's client-side state machine.
#[derive(Debug)]
pub struct ClientCore {
    worker: WorkerId,
    n_shards: u32,
    /// Which shard owns each row now (changed at a clock boundary, `install_placement`).
    placement: Placement,
    tables: HashMap<TableId, TableSpec>,
    clock: Clock,
    cache: HashMap<(TableId, RowId), CachedRow>,
    pub(crate) oplog: BTreeMap<(TableId, RowId), OplogEntry>,
    next_order: u64,
    next_seq: u64,
    next_request: u64,
    outstanding: HashMap<(TableId, RowId), (u64, Clock)>,
    /// ESSP: latest push clock per (table, shard); every cached row of an ESSP table is
    /// subscribed, so a push means the row is current as of that clock unless it was in it.
    push_clock: HashMap<(TableId, u32), Clock>,
    table_stats: HashMap<TableId, StalenessStats>,
    /// Content staleness per table: per read and other writer, the clocks of its updates
    /// the copy lacks, `c - writer_clock` (tables with `content_clocks`).
    content_stats: HashMap<TableId, StalenessStats>,
    /// ESSP: per (table, shard), the writers' clocks of the latest push (as `push_clock`).
    push_writers: HashMap<(TableId, u32), Vec<Clock>>,
    /// Reads per observed staleness value since [`ClientCore::take_observed`], per table.
    observed: HashMap<TableId, Vec<u64>>,
    /// Barrier (sync) requests in flight: request id -> answered.
    syncs: HashMap<u64, bool>,
    /// Highest own batch `seq` each shard said it applied (replies, pushes, acks).
    acked: HashMap<u32, u64>,
    /// Highest min clock each shard reported (row clocks of replies, push clocks).
    seen_min: HashMap<u32, Clock>,
    /// Whether `Inc`s accumulate managed communication's priority (off: no extra pass).
    prioritise: bool,
}

impl ClientCore {
    /// A client for `worker` of a job with `n_shards` shards and these tables.
    pub fn new(
        worker: WorkerId,
        n_shards: u32,
        tables: Vec<TableSpec>,
    ) -> Result<Self, PsCoreError> {
        if n_shards == 0 {
            return Err(PsCoreError::InvalidConfig("n_shards must be >= 1".into()));
        }
        let mut map = HashMap::new();
        for t in tables {
            let id = t.id;
            if map.insert(id, t).is_some() {
                return Err(PsCoreError::DuplicateTable(id));
            }
        }
        let all: Vec<u32> = (0..n_shards).collect();
        Ok(ClientCore {
            worker,
            n_shards,
            placement: Placement::new(&all)?,
            tables: map,
            clock: 0,
            cache: HashMap::new(),
            oplog: BTreeMap::new(),
            next_order: 0,
            next_seq: 1,
            next_request: 1,
            outstanding: HashMap::new(),
            push_clock: HashMap::new(),
            table_stats: HashMap::new(),
            content_stats: HashMap::new(),
            push_writers: HashMap::new(),
            observed: HashMap::new(),
            syncs: HashMap::new(),
            acked: HashMap::new(),
            seen_min: HashMap::new(),
            prioritise: false,
        })
    }

    /// This worker.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// Starts this (fresh) client at clock `clock`, resuming from a checkpoint.
    pub fn resume_at(&mut self, clock: Clock) -> Result<(), PsCoreError> {
        if self.clock != 0 || !self.oplog.is_empty() || !self.cache.is_empty() {
            return Err(PsCoreError::InvalidConfig(
                "resume_at on a client that already ran".into(),
            ));
        }
        self.clock = clock;
        Ok(())
    }

    /// Shards of the job.
    pub fn n_shards(&self) -> u32 {
        self.n_shards
    }

    /// The worker's clock: number of `clock()` calls so far.
    pub fn current_clock(&self) -> Clock {
        self.clock
    }

    /// Staleness of the reads of one table (empty stats if it was never read).
    pub fn table_stats(&self, table: TableId) -> StalenessStats {
        self.table_stats.get(&table).cloned().unwrap_or_default()
    }

    /// Content staleness of the reads of one table (empty without `content_clocks`).
    pub fn content_stats(&self, table: TableId) -> StalenessStats {
        self.content_stats.get(&table).cloned().unwrap_or_default()
    }

    /// Records, for a read at the current clock of a copy holding `writers`' clocks, how
    /// many clocks of each other writer's updates it lacks (nothing while unknown).
    fn record_content(&mut self, table: TableId, row: RowId, writers: &[Clock]) {
        let shard = self.placement.shard_of(table, row);
        let pushed = (self.push_writers.get(&(table, shard))).map_or(&[][..], |v| v);
        let n = writers.len().max(pushed.len());
        if n == 0 {
            return;
        }
        let stats = self.content_stats.entry(table).or_default();
        for w in (0..n).filter(|&w| w != self.worker.0 as usize) {
            let held = writers.get(w).max(pushed.get(w)).copied().unwrap_or(0);
            stats.record(self.clock.saturating_sub(held));
        }
    }

    /// A non-blocking refresh of `(table, row)` (`min_clock = 0`) unless a fetch is in flight:
    /// keeps `Async` tables, whose cached copies never expire, fresh.
    pub fn prefetch(
        &mut self,
        table: TableId,
        row: RowId,
    ) -> Result<Option<ReadRequest>, PsCoreError> {
        self.table(table)?;
        if self.outstanding.contains_key(&(table, row)) {
            return Ok(None);
        }
        Ok(Some(self.fetch(table, row, 0)))
    }

    /// Bösen's per-clock prefetch: a read that makes `(table, row)` servable at the *next*
    /// clock without a round trip, so it overlaps the current clock's compute; `None` when
    /// the cached copy will still do, a sufficient fetch is in flight, the table is `Async`,
    /// or an ESSP shard pushes the row. Records no staleness.
    pub fn prefetch_next_clock(
        &mut self,
        table: TableId,
        row: RowId,
    ) -> Result<Option<ReadRequest>, PsCoreError> {
        let consistency = self.table(table)?.consistency;
        let Some(required) = consistency.required_row_clock(self.clock + 1) else {
            return Ok(None);
        };
        if let Some(e) = self.cache.get(&(table, row))
            && (consistency.is_essp() || self.effective_clock(table, row, e) >= required)
        {
            return Ok(None);
        }
        if let Some(&(_, m)) = self.outstanding.get(&(table, row))
            && m >= required
        {
            return Ok(None);
        }
        Ok(Some(self.fetch(table, row, required)))
    }

    /// A new read of `(table, row)` needing `min_clock`, recorded as outstanding.
    fn fetch(&mut self, table: TableId, row: RowId, min_clock: Clock) -> ReadRequest {
        let request_id = self.next_request;
        self.next_request += 1;
        self.outstanding
            .insert((table, row), (request_id, min_clock));
        ReadRequest {
            shard: self.placement.shard_of(table, row),
            worker: self.worker,
            request_id,
            table,
            row,
            min_clock,
        }
    }

    /// A barrier probe for `shard` (a *sync* read) answered once every worker completed the
    /// current clock there; `sync_done` tells whether it arrived.
    pub fn sync_request(&mut self, shard: u32) -> Result<ReadRequest, PsCoreError> {
        let table = *self
            .tables
            .keys()
            .min()
            .ok_or_else(|| PsCoreError::InvalidConfig("no tables".into()))?;
        let row = (0..u64::from(self.placement.partitions()) * 64 + 1024)
            .map(RowId)
            .find(|&r| self.placement.shard_of(table, r) == shard)
            .ok_or_else(|| PsCoreError::InvalidConfig(format!("no row maps to shard {shard}")))?;
        let request_id = self.next_request;
        self.next_request += 1;
        self.syncs.insert(request_id, false);
        Ok(ReadRequest {
            shard,
            worker: self.worker,
            request_id,
            table,
            row,
            min_clock: self.clock,
        })
    }

    /// Whether the sync request `request_id` was answered (forgets it once it was).
    pub fn sync_done(&mut self, request_id: u64) -> bool {
        if self.syncs.get(&request_id) == Some(&true) {
            self.syncs.remove(&request_id);
            true
        } else {
            false
        }
    }

    /// The highest min clock `shard` has reported to this worker (replies and pushes).
    pub fn seen_min_clock(&self, shard: u32) -> Clock {
        self.seen_min.get(&shard).copied().unwrap_or(0)
    }

    /// Whether a read of `(table, row)` now needs more than the shard's min clock last seen
    /// ([`seen_min_clock`](Self::seen_min_clock)), i.e. may wait for slower workers.
    pub fn needs_beyond_seen(&self, table: TableId, row: RowId) -> Result<bool, PsCoreError> {
        let required = self
            .table(table)?
            .consistency
            .required_row_clock(self.clock);
        let shard = self.placement.shard_of(table, row);
        Ok(required.is_some_and(|r| r > self.seen_min_clock(shard)))
    }

    /// Cached visible value and the clock it is current as of (no staleness recorded).
    pub fn cached(&self, table: TableId, row: RowId) -> Option<(&Row, Clock)> {
        let e = self.cache.get(&(table, row))?;
        Some((&*e.row, self.effective_clock(table, row, e)))
    }

    /// The spec of `table`.
    pub fn table(&self, table: TableId) -> Result<&TableSpec, PsCoreError> {
        self.tables
            .get(&table)
            .ok_or(PsCoreError::UnknownTable(table))
    }

    fn effective_clock(&self, table: TableId, row: RowId, e: &CachedRow) -> Clock {
        let pushed = self
            .push_clock
            .get(&(table, self.placement.shard_of(table, row)))
            .copied()
            .unwrap_or(0);
        e.clock.max(pushed)
    }

    /// `Inc(table, row, col, delta)`: into the oplog and the cached row.
    pub fn inc(
        &mut self,
        table: TableId,
        row: RowId,
        col: u32,
        delta: f32,
    ) -> Result<(), PsCoreError> {
        let d = Row::Sparse(vec![(col, delta)]);
        self.batch_inc(table, row, &d)
    }

    /// `BatchInc(table, row, deltas)`: summed into the oplog and the cached row (local scale).
    pub fn batch_inc(
        &mut self,
        table: TableId,
        row: RowId,
        delta: &Row,
    ) -> Result<(), PsCoreError> {
        self.add_delta(table, row, Cow::Borrowed(delta))
    }

    /// `Push(table, row, delta)`: [`batch_inc`](Self::batch_inc) moving the delta into the
    /// oplog without a copy when the row has no unflushed delta yet.
    pub fn push(&mut self, table: TableId, row: RowId, delta: Row) -> Result<(), PsCoreError> {
        self.add_delta(table, row, Cow::Owned(delta))
    }

    /// [`batch_inc`](Self::batch_inc) of a borrowed delta or a [`push`](Self::push) of an
    /// owned one, moved into the oplog when the row has none yet and its kind fits.
    fn add_delta(
        &mut self,
        table: TableId,
        row: RowId,
        delta: Cow<'_, Row>,
    ) -> Result<(), PsCoreError> {
        let spec = (self.tables.get(&table)).ok_or(PsCoreError::UnknownTable(table))?;
        spec.check_delta(row, &delta)?;
        let priority = if self.prioritise {
            let cached = self.cache.get(&(table, row)).map(|c| &*c.row);
            relative_change(cached, &delta)
        } else {
            0.0
        };
        if spec.read_my_writes
            && let Some(c) = self.cache.get_mut(&(table, row))
        {
            c.row
                .make_mut()
                .add_scaled(&delta, spec.update_rule.local_scale());
        }
        match self.oplog.entry((table, row)) {
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let e = e.get_mut();
                e.delta.add(&delta);
                e.priority += priority;
            }
            std::collections::btree_map::Entry::Vacant(v) => {
                let delta = match (spec.kind, delta) {
                    (TableKind::Dense { .. }, Cow::Owned(d @ Row::Dense(_)))
                    | (TableKind::Sparse, Cow::Owned(d @ Row::Sparse(_))) => d,
                    // `0 + x` in one exact-size pass: the same bits as adding into a zeroed
                    // buffer (-0.0 becomes 0.0), without allocating and zeroing it first.
                    (TableKind::Dense { .. }, Cow::Borrowed(Row::Dense(d))) => {
                        Row::Dense(d.iter().map(|x| 0.0 + x).collect())
                    }
                    // Dense tables coalesce into a dense buffer only once touched.
                    (_, delta) => {
                        let mut z = spec.zero_row();
                        z.add(&delta);
                        z
                    }
                };
                let order = self.next_order;
                self.next_order += 1;
                v.insert(OplogEntry {
                    delta,
                    order,
                    since: self.clock,
                    priority,
                });
            }
        }
        Ok(())
    }

    /// [`push`](Self::push), then the row's unflushed delta as an early batch at once; the
    /// ticket is done once the shard acknowledged it ([`push_done`](Self::push_done)).
    pub fn push_now(
        &mut self,
        table: TableId,
        row: RowId,
        delta: Row,
    ) -> Result<(ShardBatch, PushTicket), PsCoreError> {
        self.push(table, row, delta)?;
        let batch = self
            .take_early(&[(table, row)])
            .pop()
            .ok_or_else(|| PsCoreError::InvalidConfig("push_now: nothing to send".into()))?;
        let ticket = PushTicket {
            shard: batch.shard,
            seq: batch.batch.seq,
        };
        Ok((batch, ticket))
    }

    /// Whether the shard of `ticket` said it has applied its push.
    pub fn push_done(&self, ticket: &PushTicket) -> bool {
        self.acked
            .get(&ticket.shard)
            .is_some_and(|&s| s >= ticket.seq)
    }

    /// A read request for `(table, row)` if the cache cannot serve it now and no sufficient
    /// fetch is in flight (the start of a pull). Records no staleness.
    pub fn pull_request(
        &mut self,
        table: TableId,
        row: RowId,
    ) -> Result<Option<ReadRequest>, PsCoreError> {
        if self.fresh(table, row)?.1.is_some() {
            return Ok(None);
        }
        match self.get_shared(table, row)? {
            GetOutcome::Fetch(req) => Ok(Some(req)),
            GetOutcome::Hit(_) | GetOutcome::Wait => Ok(None),
        }
    }

    /// The row clock needed now, and the cached copy's effective clock if any.
    fn fresh(
        &self,
        table: TableId,
        row: RowId,
    ) -> Result<(Option<Clock>, Option<Clock>), PsCoreError> {
        let spec = self.table(table)?;
        let required = spec.consistency.required_row_clock(self.clock);
        // Read-my-writes holds under every rule: a copy missing own flushed deltas that the
        // cache cannot add itself (local scale 0) waits for the shard's acknowledging copy.
        let follows = spec.update_rule.local_scale() != 0.0 || !spec.read_my_writes;
        let eff = (self.cache.get(&(table, row)))
            .filter(|e| follows || e.pending.is_empty())
            .map(|e| self.effective_clock(table, row, e))
            .filter(|&eff| required.is_none_or(|r| eff >= r));
        Ok((required, eff))
    }

    /// `Get(table, row)` decision at the current clock `c`: a hit if the cached row clock is
    /// `>= c - s` (any copy for Async), recording the staleness `max(0, c - row_clock)`; a
    /// hit is the cached row itself, shared.
    pub fn get_shared(&mut self, table: TableId, row: RowId) -> Result<GetOutcome, PsCoreError> {
        let (required, fresh) = self.fresh(table, row)?;
        if let Some(eff) = fresh
            && let Some(e) = self.cache.get(&(table, row))
        {
            let st = self.clock.saturating_sub(eff);
            self.table_stats.entry(table).or_default().record(st);
            let counts = self.observed.entry(table).or_default();
            let at = usize::try_from(st)
                .unwrap_or(usize::MAX)
                .min(MAX_OBSERVED_STALENESS);
            if counts.len() <= at {
                counts.resize(at + 1, 0);
            }
            counts[at] += 1;
            let (hit, writers) = (e.row.clone(), e.writers.clone());
            if self.tables.get(&table).is_some_and(|t| t.content_clocks) {
                self.record_content(table, row, &writers);
            }
            return Ok(GetOutcome::Hit(hit));
        }
        let min_clock = required.unwrap_or(0);
        // An in-flight fetch suffices if its row will be fresh enough and the shard can
        // serve it without this worker's own clock advancing (a fetch for the next clock,
        // `prefetch_next_clock`, may need it: waiting for that one here would never end).
        if let Some(&(_, m)) = self.outstanding.get(&(table, row))
            && m >= min_clock
            && m <= self.clock
        {
            return Ok(GetOutcome::Wait);
        }
        Ok(GetOutcome::Fetch(self.fetch(table, row, min_clock)))
    }

    /// Reads per observed staleness (capped at [`MAX_OBSERVED_STALENESS`]) per table since
    /// the last call.
    pub fn take_observed(&mut self) -> Vec<(TableId, Vec<u64>)> {
        let mut out: Vec<_> = self.observed.drain().collect();
        out.sort_by_key(|(t, _)| *t);
        out
    }
}

/// Raises `map[key]` (0 when absent) to at least `value`.
fn raise<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u64>, key: K, value: u64) {
    let e = map.entry(key).or_insert(0);
    *e = (*e).max(value);
}

#[cfg(test)]
mod tests;
