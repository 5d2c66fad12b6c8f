// Over 600 lines: the shard is one state machine (reads, updates, clocks, checkpoints, push).
//! `PsShardCore`: the state machine of one server shard for the rows it owns.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::core::delay::UpdateDelay;
use crate::core::error::PsCoreError;
use crate::core::managed::{Candidate, relative_change};
use crate::core::placement::Placement;
use crate::core::rules::{RuleRegistry, UpdateRule};
use crate::core::server_push::{PushPending, ServerPush, ServerPushConfig, ServerPushStats};
use crate::core::types::{
    Clock, Consistency, ReadRequest, Row, RowId, ShardBatch, SharedRow, TableId, TableSpec,
    UpdateBatch, WorkerId,
};

/// What a shard asks the runtime to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ShardAction {
    /// Answer to a read, reflecting every update of clocks `< row_clock`.
    Reply {
        /// The reader.
        worker: WorkerId,
        /// Its request id.
        request_id: u64,
        /// The table.
        table: TableId,
        /// The row.
        row: RowId,
        /// The row value: the stored row itself, shared until the shard writes it again.
        row_data: SharedRow,
        /// The shard min clock the value reflects.
        row_clock: Clock,
        /// Updates of this worker the value includes (sequence number).
        ack_seq: u64,
    },
    /// ESSP push after the min clock advanced to `clock`: the subscribed rows changed since
    /// last sent (possibly none: the others are current as of `clock` too).
    Push {
        /// The subscriber.
        worker: WorkerId,
        /// The table.
        table: TableId,
        /// The changed rows (shared with the stored rows, as a reply's).
        rows: Vec<(RowId, SharedRow)>,
        /// The new min clock.
        clock: Clock,
        /// Updates of this worker the rows include (sequence number).
        ack_seq: u64,
    },
    /// What the reply or push just before it holds, on a table with
    /// `TableSpec::content_clocks`: every update of writer `w`'s clocks
    /// `< writer_clocks[w]` (content staleness, beside the row clock's bound).
    Content {
        /// The reader.
        worker: WorkerId,
        /// The table.
        table: TableId,
        /// The replied row; `None` after a push (every subscribed row of the table).
        row: Option<RowId>,
        /// Per writer (worker id), the clocks it completed whose updates are applied.
        writer_clocks: Vec<Clock>,
    },
    /// Answer to [`PsShardCore::ack`]: `worker`'s batches up to `ack_seq` are applied.
    Ack {
        /// The worker.
        worker: WorkerId,
        /// Its last applied batch.
        ack_seq: u64,
    },
}

impl ShardAction {
    /// The worker the action goes to.
    pub fn worker(&self) -> WorkerId {
        match self {
            ShardAction::Reply { worker, .. }
            | ShardAction::Push { worker, .. }
            | ShardAction::Content { worker, .. }
            | ShardAction::Ack { worker, .. } => *worker,
        }
    }
}

/// All rows of one table held by a shard (checkpoint unit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSnapshot {
    /// The table.
    pub table: TableId,
    /// Sorted by row id.
    pub rows: Vec<(RowId, Row)>,
}

impl TableSnapshot {
    /// The snapshot of `rows` of `table`, sorted by row id.
    fn of<'a>(table: TableId, rows: impl Iterator<Item = (&'a RowId, &'a SharedRow)>) -> Self {
        let mut rows: Vec<(RowId, Row)> = rows.map(|(&k, v)| (k, (**v).clone())).collect();
        rows.sort_by_key(|r| r.0);
        TableSnapshot { table, rows }
    }
}

struct StoredRow {
    /// Shared with the replies and pushes that carry it (copied on write).
    data: SharedRow,
    /// Shard-wide modification counter value of the last update (0 = never written).
    stamp: u64,
}

struct TableState {
    spec: TableSpec,
    rule: Box<dyn UpdateRule>,
    rows: HashMap<RowId, StoredRow>,
    /// ESSP: row -> subscriber -> stamp of the version last sent to that subscriber.
    subs: HashMap<RowId, HashMap<WorkerId, u64>>,
    /// ESSP: workers with at least one subscription in this table.
    sub_workers: BTreeSet<WorkerId>,
    /// ESSP: rows modified since the last min-clock advance.
    dirty: HashSet<RowId>,
    /// Server push: rows modified since they were last pushed, with their accumulated change.
    changed: HashMap<RowId, PushPending>,
    /// Updates held back (`TableSpec::update_delay`): row, delta, clock, writer.
    delay: Option<UpdateDelay<(RowId, SharedRow, Clock, WorkerId)>>,
    /// Per writer, the clocks of its held updates, oldest first (a writer's clocks never
    /// decrease and the queue is FIFO, so the front is its oldest).
    held_clocks: HashMap<WorkerId, VecDeque<Clock>>,
}

impl StoredRow {
    /// `data`, never written since (stamp 0).
    fn new(data: Row) -> Self {
        let data = SharedRow::new(data);
        StoredRow { data, stamp: 0 }
    }
}

impl TableState {
    fn stamp_of(&self, row: RowId) -> u64 {
        self.rows.get(&row).map_or(0, |r| r.stamp)
    }

    fn data_of(&self, row: RowId) -> SharedRow {
        self.rows
            .get(&row)
            .map_or_else(|| SharedRow::new(self.spec.zero_row()), |r| r.data.clone())
    }

    /// Marks `row`'s stored version as sent to each subscriber that was last sent an older
    /// one (not one only subscribed, `u64::MAX`); returns them with the row.
    fn send_to_stale(&mut self, row: RowId) -> Vec<(WorkerId, SharedRow)> {
        let (Some(stored), Some(subs)) = (self.rows.get(&row), self.subs.get_mut(&row)) else {
            return Vec::new();
        };
        (subs.iter_mut())
            .filter(|(_, sent)| **sent < stored.stamp)
            .map(|(&w, sent)| {
                *sent = stored.stamp;
                (w, stored.data.clone())
            })
            .collect()
    }
}

/// Where a worker stands in a shard's clock table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// Counted in the min clock.
    Member,
    /// Of a standby node that has not joined: not counted, not dead ([`PsShardCore::admit`]).
    Absent,
    /// Left or removed: not counted, its later messages refused.
    Left,
}

#[derive(Debug, Clone)]
struct WorkerState {
    /// Number of completed clocks (= the clock the worker is in).
    clock: Clock,
    presence: Presence,
    /// Last applied `UpdateBatch::seq` from this worker.
    applied_seq: u64,
}

/// The server shard's state machine. Inputs are method calls; outputs are `ShardAction`s.
/// A removed worker (`remove_worker`) leaves the min clock, its queued reads and its
/// subscriptions; its applied updates stay and its later messages are refused. Workers of
/// standby nodes start absent (`set_absent`): outside the min clock until `admit`.
pub struct PsShardCore {
    tables: BTreeMap<TableId, TableState>,
    workers: Vec<WorkerState>,
    min_clock: Clock,
    /// Queued reads keyed by the min clock they wait for.
    pending: BTreeMap<Clock, Vec<ReadRequest>>,
    next_stamp: u64,
    cuts: ClockCuts,
    /// Managed communication from server to clients, when enabled.
    push: Option<ServerPush>,
    /// With shards that join and leave: this shard's id and the placement in force; it
    /// refuses updates and reads of rows it does not own.
    placement: Option<(u32, Placement)>,
}

/// The rows of every table as of one clock boundary.
type CutRows = BTreeMap<TableId, HashMap<RowId, SharedRow>>;

/// Consistent cuts at checkpoint and evaluation clocks `c`: the rows with every update of
/// clocks `< c` applied and none of `>= c`.
#[derive(Default)]
struct ClockCuts {
    /// Clocks between checkpoints; 0 = no checkpoints.
    every: Clock,
    /// Clocks between evaluation cuts; 0 = none.
    eval_every: Clock,
    /// Whether cuts can be exact (every table's rule keeps its whole state in the row).
    exact: bool,
    /// The smallest cut clock not yet emitted (`> min_clock` once emitted; 0 = no cuts).
    next: Clock,
    /// Cuts in progress, by clock.
    open: BTreeMap<Clock, CutRows>,
    /// Complete checkpoint cuts waiting for [`PsShardCore::take_checkpoints`].
    ready: Vec<(Clock, Vec<TableSnapshot>)>,
    /// Complete evaluation cuts waiting for [`PsShardCore::take_eval_cuts`].
    eval_ready: Vec<(Clock, Vec<TableSnapshot>)>,
}

impl ClockCuts {
    /// The first multiple of `every` after `clock`.
    fn after(every: Clock, clock: Clock) -> Clock {
        (clock / every + 1) * every
    }

    /// The first cut clock (checkpoint or evaluation) after `clock`; 0 when there are none.
    fn next_after(&self, clock: Clock) -> Clock {
        [self.every, self.eval_every]
            .into_iter()
            .filter(|&e| e > 0)
            .map(|e| Self::after(e, clock))
            .min()
            .unwrap_or(0)
    }

    fn is_checkpoint(&self, c: Clock) -> bool {
        self.every > 0 && c.is_multiple_of(self.every)
    }

    fn is_eval(&self, c: Clock) -> bool {
        self.eval_every > 0 && c.is_multiple_of(self.eval_every)
    }
}

impl std::fmt::Debug for PsShardCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PsShardCore")
            .field("tables", &self.tables.keys().collect::<Vec<_>>())
            .field("workers", &self.workers)
            .field("min_clock", &self.min_clock)
            .field("pending_reads", &self.pending_reads())
            .finish()
    }
}

/// Why `tables` cannot be checkpointed (a rule keeps state outside the rows), if so.
pub fn not_checkpointable<'a>(tables: impl IntoIterator<Item = &'a TableSpec>) -> Option<String> {
    let t = tables.into_iter().find(|t| !t.update_rule.state_in_row())?;
    Some(format!(
        "table {:?} uses a server rule that keeps state outside its rows ({:?}): \
         checkpoints need sum or sgd (set checkpoint_every = 0)",
        t.name, t.update_rule
    ))
}

impl PsShardCore {
    /// A shard for `n_workers` workers (all at clock 0) and `tables`, built-in rules only.
    pub fn new(n_workers: u32, tables: Vec<TableSpec>) -> Result<Self, PsCoreError> {
        Self::with_registry(n_workers, tables, &RuleRegistry::new())
    }

    /// Like `new`, building update rules (including custom ones) from `registry`.
    pub fn with_registry(
        n_workers: u32,
        tables: Vec<TableSpec>,
        registry: &RuleRegistry,
    ) -> Result<Self, PsCoreError> {
        if n_workers == 0 {
            return Err(PsCoreError::InvalidConfig(
                "a shard needs at least one worker".into(),
            ));
        }
        let mut map = BTreeMap::new();
        for spec in tables {
            let rule = registry.build(&spec.update_rule)?;
            let id = spec.id;
            let spec_delay = usize::try_from(spec.update_delay).unwrap_or(usize::MAX);
            let st = TableState {
                spec,
                rule,
                rows: HashMap::new(),
                subs: HashMap::new(),
                sub_workers: BTreeSet::new(),
                dirty: HashSet::new(),
                changed: HashMap::new(),
                delay: (spec_delay > 0).then(|| UpdateDelay::new(spec_delay)),
                held_clocks: HashMap::new(),
            };
            if map.insert(id, st).is_some() {
                return Err(PsCoreError::DuplicateTable(id));
            }
        }
        Ok(PsShardCore {
            tables: map,
            workers: vec![
                WorkerState {
                    clock: 0,
                    presence: Presence::Member,
                    applied_seq: 0,
                };
                n_workers as usize
            ],
            min_clock: 0,
            pending: BTreeMap::new(),
            next_stamp: 1,
            cuts: ClockCuts::default(),
            push: None,
            placement: None,
        })
    }

    /// Rebuilds a shard from a checkpoint (rows, every worker at `clock`; no rule state).
    pub fn restore(
        n_workers: u32,
        tables: Vec<TableSpec>,
        registry: &RuleRegistry,
        snapshots: Vec<TableSnapshot>,
        clock: Clock,
    ) -> Result<Self, PsCoreError> {
        let mut core = Self::with_registry(n_workers, tables, registry)?;
        for snap in snapshots {
            let t = core.table_mut(snap.table)?;
            for (id, data) in snap.rows {
                t.spec.check_delta(id, &data)?;
                t.rows.insert(id, StoredRow::new(data));
            }
        }
        for w in &mut core.workers {
            w.clock = clock;
        }
        core.min_clock = clock;
        Ok(core)
    }

    /// Checkpoints at every multiple `c` of `every` (0: none): once the min clock reaches
    /// `c`, [`Self::take_checkpoints`] returns the rows with exactly the updates of clocks
    /// `< c`, even if faster workers already sent later ones: the first update of a clock
    /// `>= c` copies the rows (copy on write), and later updates of clocks `< c` go to that
    /// copy too. Applying a delta twice is only right for `sum` and `sgd`; tables with
    /// other rules are refused.
    pub fn enable_checkpoints(&mut self, every: Clock) -> Result<(), PsCoreError> {
        if every > 0
            && let Some(reason) = not_checkpointable(self.tables.values().map(|t| &t.spec))
        {
            return Err(PsCoreError::InvalidConfig(reason));
        }
        self.cuts.every = every;
        self.reset_cuts();
        Ok(())
    }

    /// Keeps the tables at every multiple of `every` (0: none) for the monitor's history
    /// ([`Self::take_eval_cuts`]), as checkpoints do; with a rule keeping state outside the
    /// rows, a cut is the rows when the min clock reached it.
    pub fn enable_eval_cuts(&mut self, every: Clock) {
        self.cuts.eval_every = every;
        self.reset_cuts();
    }

    fn reset_cuts(&mut self) {
        self.cuts.exact = not_checkpointable(self.tables.values().map(|t| &t.spec)).is_none();
        self.cuts.open.clear();
        self.cuts.next = self.cuts.next_after(self.min_clock);
    }

    /// The checkpoints `(clock, tables)` completed since the last call, in clock order.
    pub fn take_checkpoints(&mut self) -> Vec<(Clock, Vec<TableSnapshot>)> {
        std::mem::take(&mut self.cuts.ready)
    }

    /// The evaluation cuts completed since the last call, in clock order.
    pub fn take_eval_cuts(&mut self) -> Vec<(Clock, Vec<TableSnapshot>)> {
        std::mem::take(&mut self.cuts.eval_ready)
    }

    /// Opens a cut at every cut clock in `(min_clock, clock]` that has none, before the first
    /// update of clock `clock` is applied.
    fn open_cuts_up_to(&mut self, clock: Clock) {
        if self.cuts.next == 0 || !self.cuts.exact {
            return;
        }
        let mut c = self.cuts.next;
        while c <= clock {
            if !self.cuts.open.contains_key(&c) {
                let rows: CutRows = self
                    .tables
                    .iter()
                    .map(|(&id, t)| {
                        let rows = t.rows.iter().map(|(&r, s)| (r, s.data.clone())).collect();
                        (id, rows)
                    })
                    .collect();
                self.cuts.open.insert(c, rows);
            }
            c = self.cuts.next_after(c);
        }
    }

    /// Emits every checkpoint clock the min clock has reached.
    fn close_cuts(&mut self) {
        while self.cuts.next > 0 && self.cuts.next <= self.min_clock {
            let c = self.cuts.next;
            let snapshot = match self.cuts.open.remove(&c) {
                Some(cut) => (cut.iter())
                    .map(|(&table, rows)| TableSnapshot::of(table, rows.iter()))
                    .collect(),
                // No update of clock >= c arrived: the live rows are the cut.
                None => self.snapshot(),
            };
            if self.cuts.is_eval(c) && self.cuts.is_checkpoint(c) {
                self.cuts.eval_ready.push((c, snapshot.clone()));
                self.cuts.ready.push((c, snapshot));
            } else if self.cuts.is_eval(c) {
                self.cuts.eval_ready.push((c, snapshot));
            } else {
                self.cuts.ready.push((c, snapshot));
            }
            self.cuts.next = self.cuts.next_after(c);
        }
    }

    /// Minimum completed-clock count over live workers.
    pub fn min_clock(&self) -> Clock {
        self.min_clock
    }

    /// The shard's clock-table entry for `worker` (its number of completed clocks).
    pub fn worker_clock(&self, worker: WorkerId) -> Result<Clock, PsCoreError> {
        self.worker(worker).map(|w| w.clock)
    }

    /// Current value of a stored row (`None` if never written).
    pub fn row(&self, table: TableId, row: RowId) -> Option<&Row> {
        self.tables.get(&table)?.rows.get(&row).map(|r| &*r.data)
    }

    /// Number of reads waiting for the min clock.
    pub fn pending_reads(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }

    /// All rows of every table, sorted by row id (for checkpoints and tests).
    pub fn snapshot(&self) -> Vec<TableSnapshot> {
        (self.tables.iter())
            .map(|(&table, t)| TableSnapshot::of(table, t.rows.iter().map(|(k, r)| (k, &r.data))))
            .collect()
    }

    fn table_mut(&mut self, table: TableId) -> Result<&mut TableState, PsCoreError> {
        self.tables
            .get_mut(&table)
            .ok_or(PsCoreError::UnknownTable(table))
    }

    fn worker(&self, worker: WorkerId) -> Result<&WorkerState, PsCoreError> {
        let w = self
            .workers
            .get(worker.0 as usize)
            .ok_or(PsCoreError::UnknownWorker(worker))?;
        if w.presence == Presence::Member {
            Ok(w)
        } else {
            Err(PsCoreError::DeadWorker(worker))
        }
    }

    /// A live worker whose current clock is `clock`.
    fn worker_at(&self, worker: WorkerId, clock: Clock) -> Result<&WorkerState, PsCoreError> {
        let w = self.worker(worker)?;
        if w.clock != clock {
            return Err(PsCoreError::ClockMismatch {
                worker,
                expected: w.clock,
                got: clock,
            });
        }
        Ok(w)
    }

    /// Applies a worker's oplog for its current clock `clock` with each table's rule, without
    /// advancing its clock (managed communication sends several per clock). All or nothing;
    /// `batch.seq` must exceed the last applied one.
    pub fn apply_updates(
        &mut self,
        worker: WorkerId,
        clock: Clock,
        batch: &UpdateBatch,
    ) -> Result<(), PsCoreError> {
        let w = self.worker_at(worker, clock)?;
        if batch.seq <= w.applied_seq {
            return Err(PsCoreError::InvalidConfig(format!(
                "update batch seq {} of worker {} not above last applied {}",
                batch.seq, worker.0, w.applied_seq
            )));
        }
        for u in &batch.updates {
            let t = self
                .tables
                .get(&u.table)
                .ok_or(PsCoreError::UnknownTable(u.table))?;
            t.spec.check_delta(u.row, &u.delta)?;
            self.check_owner(u.table, u.row)?;
        }
        self.open_cuts_up_to(clock);
        for u in &batch.updates {
            let Some(t) = self.tables.get_mut(&u.table) else {
                continue; // validated above
            };
            let update = (u.row, u.delta.clone(), clock, worker);
            let due = match t.delay.as_mut() {
                Some(held) => {
                    t.held_clocks.entry(worker).or_default().push_back(clock);
                    let due = held.push(update);
                    if let Some(w) = due.as_ref().and_then(|d| t.held_clocks.get_mut(&d.3)) {
                        w.pop_front();
                    }
                    due
                }
                None => Some(update),
            };
            if let Some((row, delta, at, _)) = due {
                self.apply_one(u.table, row, &delta, at);
            }
        }
        self.workers[worker.0 as usize].applied_seq = batch.seq;
        Ok(())
    }

    /// Folds one update of clock `clock` into `row` of `table` with the table's rule.
    fn apply_one(&mut self, table: TableId, row: RowId, delta: &Row, clock: Clock) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let tracking = self.push.is_some();
        let Some(t) = self.tables.get_mut(&table) else {
            return;
        };
        let stored = t
            .rows
            .entry(row)
            .or_insert_with(|| StoredRow::new(t.spec.zero_row()));
        // Server push's priority: the change relative to the value before it.
        let change = if tracking {
            relative_change(Some(&stored.data), delta)
        } else {
            0.0
        };
        t.rule.apply(row, stored.data.make_mut(), delta);
        stored.stamp = stamp;
        // Cuts of later checkpoint clocks take this update too (cuts open only when every
        // table's rule keeps its whole state in the row).
        for cut in self.cuts.open.range_mut(clock + 1..).map(|(_, c)| c) {
            let zero = t.spec.zero_row();
            let r = cut.entry(table).or_default().entry(row);
            let r = r.or_insert_with(|| SharedRow::new(zero));
            t.rule.apply(row, r.make_mut(), delta);
        }
        if t.spec.consistency.is_essp() {
            t.dirty.insert(row);
        }
        if tracking {
            let p = t.changed.entry(row).or_insert(PushPending {
                order: stamp,
                magnitude: 0.0,
            });
            p.magnitude += change;
        }
    }

    /// The worker completed clock `completed` (its current one). Returns the reads released
    /// and ESSP pushes if the min clock advanced.
    pub fn clock(
        &mut self,
        worker: WorkerId,
        completed: Clock,
    ) -> Result<Vec<ShardAction>, PsCoreError> {
        self.worker_at(worker, completed)?;
        self.workers[worker.0 as usize].clock = completed + 1;
        Ok(self.recompute_min())
    }

    /// Convenience for a `ShardBatch` message: `apply_updates`, then `clock` if it ends a clock.
    pub fn handle_batch(&mut self, msg: &ShardBatch) -> Result<Vec<ShardAction>, PsCoreError> {
        self.apply_updates(msg.worker, msg.clock, &msg.batch)?;
        if msg.end_of_clock {
            self.clock(msg.worker, msg.clock)
        } else {
            Ok(Vec::new())
        }
    }

    /// A read of `(r.table, r.row)` needing min clock `>= r.min_clock`: served at once if it
    /// is (or the table is `Async`), else queued. On an ESSP table it subscribes the reader.
    pub fn handle_read(&mut self, r: &ReadRequest) -> Result<Vec<ShardAction>, PsCoreError> {
        self.read(r, false)
    }

    /// [`handle_read`](Self::handle_read) that always waits for the min clock and never
    /// subscribes: a client's `barrier()` probe.
    pub fn handle_sync(&mut self, r: &ReadRequest) -> Result<Vec<ShardAction>, PsCoreError> {
        self.read(r, true)
    }

    fn read(&mut self, r: &ReadRequest, sync: bool) -> Result<Vec<ShardAction>, PsCoreError> {
        self.worker(r.worker)?;
        if !sync {
            self.check_owner(r.table, r.row)?;
        }
        let pushing = self.push.is_some();
        let t = self.table_mut(r.table)?;
        let consistency = t.spec.consistency;
        // Server push needs the holders of every row, as ESSP does.
        if (consistency.is_essp() || pushing) && !sync {
            // u64::MAX = subscribed, not replied yet; `reply` records the stamp it sends.
            let subs = t.subs.entry(r.row).or_default();
            subs.entry(r.worker).or_insert(u64::MAX);
            t.sub_workers.insert(r.worker);
        }
        if (consistency == Consistency::Async && !sync) || r.min_clock <= self.min_clock {
            let mut out = vec![self.reply(r)];
            out.extend(
                (!sync)
                    .then(|| self.content(r.worker, r.table, Some(r.row)))
                    .flatten(),
            );
            Ok(out)
        } else {
            self.pending.entry(r.min_clock).or_default().push(r.clone());
            Ok(Vec::new())
        }
    }

    /// Turns on server push: the shard tracks which workers hold which rows and what
    /// changed, for [`server_push_tick`](Self::server_push_tick).
    pub fn enable_server_push(&mut self, cfg: ServerPushConfig) {
        self.push = Some(ServerPush::new(cfg));
    }

    /// The server-push settings, when enabled.
    pub fn server_push_config(&self) -> Option<&ServerPushConfig> {
        self.push.as_ref().map(|p| &p.cfg)
    }

    /// What server push has sent so far (all zero when disabled).
    pub fn server_push_stats(&self) -> ServerPushStats {
        self.push
            .as_ref()
            .map_or_else(ServerPushStats::default, |p| p.stats)
    }

    /// One server-push tick at `now_s` (seconds on any fixed clock): when the pacer allows,
    /// the changed rows, in the policy's order, whose pushes to all their stale holders fit
    /// one batch; one [`ShardAction::Push`] per (worker, table) at the current min clock.
    /// Rows left out wait for later ticks or the next min-clock advance.
    pub fn server_push_tick(&mut self, now_s: f64) -> Vec<ShardAction> {
        let Some(push) = self.push.as_mut() else {
            return Vec::new();
        };
        push.stats.ticks += 1;
        if !push.manager.pacer.ready(now_s) {
            return Vec::new();
        }
        let budget = push.manager.batch_bytes;
        let (out, bytes) = self.push_changed(Some(budget));
        if let Some(push) = self.push.as_mut() {
            push.manager.pacer.charge(now_s, bytes as usize);
            push.stats.max_tick_bytes = push.stats.max_tick_bytes.max(bytes);
        }
        out
    }

    /// Pushes changed rows to their stale holders: the policy's top rows within `budget`
    /// bytes, or every one (`None`). Returns the pushes and their row bytes.
    fn push_changed(&mut self, budget: Option<usize>) -> (Vec<ShardAction>, u64) {
        let Some(push) = self.push.as_mut() else {
            return (Vec::new(), 0);
        };
        let mut cands = Vec::new();
        for (&table, t) in self.tables.iter_mut() {
            let (rows, subs) = (&t.rows, &t.subs);
            t.changed.retain(|row, pending| {
                let Some(stored) = rows.get(row) else {
                    return false;
                };
                let stale = (subs.get(row)).map_or(0, |s| {
                    s.values().filter(|&&sent| sent < stored.stamp).count()
                });
                if stale == 0 {
                    return false;
                }
                cands.push(Candidate {
                    table,
                    row: *row,
                    bytes: stored.data.wire_size() * stale,
                    relative_magnitude: pending.magnitude,
                    order: pending.order,
                });
                true
            });
        }
        let chosen = match budget {
            Some(b) => push.manager.select(cands, b),
            // Every row, in row order (as ESSP's pushes).
            None => {
                let mut all: Vec<_> = cands.iter().map(|c| (c.table, c.row)).collect();
                all.sort();
                all
            }
        };
        let mut per: BTreeMap<(WorkerId, TableId), Vec<(RowId, SharedRow)>> = BTreeMap::new();
        let (mut bytes, mut rows_sent) = (0u64, 0u64);
        for (table, row) in chosen {
            let Some(t) = self.tables.get_mut(&table) else {
                continue;
            };
            t.changed.remove(&row);
            for (w, data) in t.send_to_stale(row) {
                bytes += data.wire_size() as u64;
                rows_sent += 1;
                per.entry((w, table)).or_default().push((row, data));
            }
        }
        push.stats.bytes += bytes;
        push.stats.rows += rows_sent;
        let out = (per.into_iter())
            .map(|((worker, table), rows)| ShardAction::Push {
                worker,
                table,
                rows,
                clock: self.min_clock,
                ack_seq: self.workers[worker.0 as usize].applied_seq,
            })
            .collect();
        (out, bytes)
    }

    /// Tells `worker` which of its update batches (all sent before this, FIFO) are applied.
    pub fn ack(&mut self, worker: WorkerId) -> Result<Vec<ShardAction>, PsCoreError> {
        let w = self.worker(worker)?;
        Ok(vec![ShardAction::Ack {
            worker,
            ack_seq: w.applied_seq,
        }])
    }

    /// Marks `workers` (of standby nodes) absent before the run: they hold back no min clock
    /// and get no pushes until [`Self::admit`] lets them in.
    pub fn set_absent(&mut self, workers: &[WorkerId]) -> Result<Vec<ShardAction>, PsCoreError> {
        for &w in workers {
            self.worker(w)?;
            self.workers[w.0 as usize].presence = Presence::Absent;
        }
        Ok(self.recompute_min())
    }

    /// Admits `worker` (absent, or a member that joined at a lower clock and has sent
    /// nothing since) at `max(clock, min clock)`, which never lowers the min clock; returns
    /// that clock. A joiner asks every shard and, if the answers differ, asks again with the
    /// largest: a shard only raises it, so all agree on the clock it starts at.
    pub fn admit(&mut self, worker: WorkerId, clock: Clock) -> Result<Clock, PsCoreError> {
        let min = self.min_clock;
        let w =
            (self.workers.get_mut(worker.0 as usize)).ok_or(PsCoreError::UnknownWorker(worker))?;
        let at = clock.max(min).max(if w.presence == Presence::Member {
            w.clock
        } else {
            0
        });
        match w.presence {
            Presence::Left => return Err(PsCoreError::DeadWorker(worker)),
            Presence::Member if w.applied_seq > 0 && at != w.clock => {
                return Err(PsCoreError::ClockMismatch {
                    worker,
                    expected: w.clock,
                    got: clock,
                });
            }
            _ => {}
        }
        w.presence = Presence::Member;
        w.clock = at;
        tracing::debug!(worker = worker.0, clock = at, "worker admitted");
        Ok(at)
    }

    /// Workers counted in the min clock now.
    pub fn members(&self) -> usize {
        (self.workers.iter())
            .filter(|w| w.presence == Presence::Member)
            .count()
    }

    /// Declares `worker` dead (see the type docs). Returns what its departure releases.
    pub fn remove_worker(&mut self, worker: WorkerId) -> Result<Vec<ShardAction>, PsCoreError> {
        self.worker(worker)?;
        self.workers[worker.0 as usize].presence = Presence::Left;
        for reads in self.pending.values_mut() {
            reads.retain(|r| r.worker != worker);
        }
        self.pending.retain(|_, v| !v.is_empty());
        for t in self.tables.values_mut() {
            t.sub_workers.remove(&worker);
            for subs in t.subs.values_mut() {
                subs.remove(&worker);
            }
            t.subs.retain(|_, s| !s.is_empty());
        }
        Ok(self.recompute_min())
    }

    /// Refuses a row this shard does not own under its placement (never sent by a client
    /// that follows the protocol: updates and reads go to a row's owner at their epoch).
    fn check_owner(&self, table: TableId, row: RowId) -> Result<(), PsCoreError> {
        match &self.placement {
            Some((me, p)) if p.shard_of(table, row) != *me => {
                Err(PsCoreError::InvalidConfig(format!(
                    "row {row:?} of table {table:?} is not on shard {me} at placement epoch {}",
                    p.epoch()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Makes this shard `me` under `placement` (a job whose shards join and leave). A shard
    /// that joins takes the workers `members` at clock `cut` (the others absent), its
    /// rows coming by [`Self::take_over`]; a starting one keeps its clock table.
    pub fn set_placement(
        &mut self,
        me: u32,
        placement: Placement,
        joining: Option<(Clock, &[WorkerId])>,
    ) -> Result<(), PsCoreError> {
        if let Some((cut, members)) = joining {
            for (i, w) in self.workers.iter_mut().enumerate() {
                let member = members.contains(&WorkerId(i as u32));
                w.presence = if member {
                    Presence::Member
                } else {
                    Presence::Absent
                };
                w.clock = cut;
            }
            self.min_clock = cut;
            self.reset_cuts();
        }
        self.placement = Some((me, placement));
        Ok(())
    }

    /// This shard's id and placement, when its job's shards join and leave.
    pub fn placement(&self) -> Option<&(u32, Placement)> {
        self.placement.as_ref()
    }

    /// Hands over the rows `next` places elsewhere, at a clock boundary: every member has
    /// completed the min clock and sent nothing since, and no update is held back. The
    /// rows leave this shard with their subscriptions and the reads waiting for them (the
    /// readers drop their copies and ask the new owner); returns them by table.
    pub fn hand_over(&mut self, next: Placement) -> Result<Vec<TableSnapshot>, PsCoreError> {
        let Some((me, _)) = self.placement.take() else {
            return Err(PsCoreError::InvalidConfig(
                "hand-over on a shard without a placement".into(),
            ));
        };
        let min = self.min_clock;
        let busy = (self.workers.iter()).any(|w| w.presence == Presence::Member && w.clock != min);
        let held = (self.tables.values()).any(|t| t.held_clocks.values().any(|q| !q.is_empty()));
        if busy || held || !self.cuts.open.is_empty() {
            self.placement = Some((me, next));
            return Err(PsCoreError::InvalidConfig(format!(
                "shard {me}: hand-over at min clock {min} off a clock boundary"
            )));
        }
        let gone = |t: TableId, r: RowId| next.shard_of(t, r) != me;
        for reads in self.pending.values_mut() {
            reads.retain(|r| !gone(r.table, r.row));
        }
        self.pending.retain(|_, v| !v.is_empty());
        let mut out = Vec::new();
        for (&table, t) in self.tables.iter_mut() {
            let moved: Vec<RowId> = t.rows.keys().copied().filter(|&r| gone(table, r)).collect();
            let rows = moved
                .iter()
                .filter_map(|r| t.rows.remove(r).map(|s| (*r, s.data)));
            let rows: Vec<(RowId, Row)> = rows.map(|(r, d)| (r, d.into_row())).collect();
            t.subs.retain(|&r, _| !gone(table, r));
            t.dirty.retain(|&r| !gone(table, r));
            t.changed.retain(|&r, _| !gone(table, r));
            let subs = &t.subs;
            t.sub_workers
                .retain(|w| subs.values().any(|s| s.contains_key(w)));
            let mut snap = TableSnapshot { table, rows };
            snap.rows.sort_by_key(|r| r.0);
            out.push(snap);
        }
        self.placement = Some((me, next));
        Ok(out)
    }

    /// Takes the rows another shard handed over (each must be placed here and not held yet:
    /// a row is never applied twice).
    pub fn take_over(&mut self, tables: Vec<TableSnapshot>) -> Result<(), PsCoreError> {
        for snap in tables {
            for (row, _) in &snap.rows {
                self.check_owner(snap.table, *row)?;
            }
            let stamp = self.next_stamp;
            self.next_stamp += 1;
            let t = self.table_mut(snap.table)?;
            for (row, data) in snap.rows {
                t.spec.check_delta(row, &data)?;
                if t.rows.contains_key(&row) {
                    return Err(PsCoreError::InvalidConfig(format!(
                        "row {row:?} of table {:?} handed over twice",
                        snap.table
                    )));
                }
                let mut stored = StoredRow::new(data);
                stored.stamp = stamp;
                t.rows.insert(row, stored);
            }
        }
        Ok(())
    }

    fn reply(&mut self, r: &ReadRequest) -> ShardAction {
        let ack_seq = self.workers[r.worker.0 as usize].applied_seq;
        let min_clock = self.min_clock;
        let (row_data, stamp) = match self.tables.get(&r.table) {
            Some(t) => (t.data_of(r.row), t.stamp_of(r.row)),
            None => (SharedRow::new(Row::Sparse(Vec::new())), 0),
        };
        if let Some(t) = self.tables.get_mut(&r.table)
            && let Some(s) = t.subs.get_mut(&r.row).and_then(|s| s.get_mut(&r.worker))
        {
            *s = stamp;
        }
        ShardAction::Reply {
            worker: r.worker,
            request_id: r.request_id,
            table: r.table,
            row: r.row,
            row_data,
            row_clock: min_clock,
            ack_seq,
        }
    }

    /// The [`ShardAction::Content`] of a reply to `worker` of `row` of `table` (`None` =
    /// after a push), when the table asks for it. Updates are applied on arrival, FIFO per
    /// writer, so every row holds each writer's updates of the clocks it completed here;
    /// with an injected delay (`update_delay`) the held ones are not yet in, and the writer
    /// counts as of its oldest held update's clock.
    fn content(&self, worker: WorkerId, table: TableId, row: Option<RowId>) -> Option<ShardAction> {
        let t = self.tables.get(&table).filter(|t| t.spec.content_clocks)?;
        let mut writer_clocks: Vec<Clock> = self.workers.iter().map(|w| w.clock).collect();
        for (w, held) in &t.held_clocks {
            if let (Some(c), Some(&at)) = (writer_clocks.get_mut(w.0 as usize), held.front()) {
                *c = (*c).min(at);
            }
        }
        Some(ShardAction::Content {
            worker,
            table,
            row,
            writer_clocks,
        })
    }

    fn recompute_min(&mut self) -> Vec<ShardAction> {
        let Some(new_min) = self
            .workers
            .iter()
            .filter(|w| w.presence == Presence::Member)
            .map(|w| w.clock)
            .min()
        else {
            return Vec::new();
        };
        if new_min <= self.min_clock {
            return Vec::new();
        }
        self.min_clock = new_min;
        tracing::trace!(min_clock = new_min, "shard min clock advanced");
        self.close_cuts();
        let mut out = Vec::new();
        // Release reads: keys <= new_min.
        let still_waiting = self.pending.split_off(&(new_min + 1));
        let ready = std::mem::replace(&mut self.pending, still_waiting);
        for r in ready.into_values().flatten() {
            out.push(self.reply(&r));
            out.extend(self.content(r.worker, r.table, Some(r.row)));
        }
        // ESSP pushes, after the replies so that rows just replied are not pushed again.
        for (&table, t) in self.tables.iter_mut() {
            if !t.spec.consistency.is_essp() || t.sub_workers.is_empty() {
                t.dirty.clear();
                continue;
            }
            let mut per_worker: BTreeMap<WorkerId, Vec<(RowId, SharedRow)>> =
                t.sub_workers.iter().map(|&w| (w, Vec::new())).collect();
            let mut dirty: Vec<RowId> = t.dirty.drain().collect();
            dirty.sort();
            for row in dirty {
                for (w, data) in t.send_to_stale(row) {
                    if let Some(v) = per_worker.get_mut(&w) {
                        v.push((row, data));
                    }
                }
            }
            for (worker, rows) in per_worker {
                out.push(ShardAction::Push {
                    worker,
                    table,
                    rows,
                    clock: new_min,
                    ack_seq: self.workers[worker.0 as usize].applied_seq,
                });
            }
        }
        // Server push: every changed row to its stale holders, charged to the pacer.
        let (pushed, bytes) = self.push_changed(None);
        if let Some(push) = self.push.as_mut() {
            push.manager.pacer.charge_now(bytes as usize);
            push.stats.clock_bytes += bytes;
        }
        out.extend(pushed);
        // What the pushes' readers now hold, after them.
        let readers: Vec<(WorkerId, TableId)> = (out.iter())
            .filter_map(|a| match a {
                ShardAction::Push { worker, table, .. } => Some((*worker, *table)),
                _ => None,
            })
            .collect();
        for (worker, table) in readers {
            out.extend(self.content(worker, table, None));
        }
        out
    }
}

#[cfg(test)]
mod tests;
