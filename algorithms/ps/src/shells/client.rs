// Over 600 lines: the client handle is one API (reads, pushes, clocks, barriers, managed sending, shard changes) over one shared state.
//! The client handle a worker's code calls ([`PsClient`]) and the inbox actor that feeds
//! shard replies into its [`ClientCore`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::Notify;

use crate::core::client::{ClientCore, GetOutcome, PushTicket};
use crate::core::error::PsCoreError;
use crate::core::managed::{BandwidthManager, ManagedStats};
use crate::core::placement::{AtBoundary, Placement, WorkerPause};
use crate::core::stats::{ReadStats, StalenessStats};
use crate::core::types::{
    Clock, ReadRequest, Row, RowId, ShardBatch, SharedRow, TableId, TableSpec, WorkerId,
};
use crate::error::PsError;
use crate::shells::layout::PsLayout;
use crate::shells::messages::{
    PS_PRIORITY, PlacementNote, ToClient, ToShard, client_actor_name, shard_actor_name,
};
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::HandlerError;
use petrel_actors::node::Node;

struct ClientShared {
    core: ClientCore,
    error: Option<String>,
    stop: Option<String>,
    /// Managed communication's manager, shared by `clock()` and the background sender.
    managed: Option<BandwidthManager>,
    /// What a change of the shard set asks of this worker.
    pause: WorkerPause,
    /// The coordinator of shard changes, which hears where this worker pauses.
    coordinator: Option<ActorRef<PlacementNote>>,
}

/// Bösen's idle poll of the background sender when there is nothing to send (ms).
const SENDER_IDLE_MS: u64 = 5;

/// Sends `batches` to their shards (`shards[b.shard]`).
fn send_batches(shards: &[ActorRef<ToShard>], batches: Vec<ShardBatch>) -> Result<usize, String> {
    let mut rows = 0;
    for b in batches {
        rows += b.batch.updates.len();
        let shard = b.shard;
        let r = (shards.get(shard as usize)).ok_or_else(|| format!("no shard {shard}"))?;
        r.tell(ToShard::Batch(b), PS_PRIORITY)
            .map_err(|e| format!("send to ps shard {shard}: {e}"))?;
    }
    Ok(rows)
}

/// The actor that feeds shard replies and pushes into a worker's `ClientCore`.
pub struct ClientInbox {
    shared: Rc<RefCell<ClientShared>>,
    notify: Rc<Notify>,
}

impl Actor for ClientInbox {
    type Context = Context<Self>;
}

impl Handler<Msg<ToClient>> for ClientInbox {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<ToClient>, _: &mut Context<Self>) -> Self::Result {
        let mut s = self.shared.borrow_mut();
        match msg.body {
            ToClient::Actions { shard, actions } => {
                for a in actions {
                    if let Err(e) = s.core.handle(shard, a) {
                        let w = s.core.worker().0;
                        s.error.get_or_insert(format!(
                            "worker {w}: bad message from shard {shard}: {e}"
                        ));
                    }
                }
            }
            ToClient::Stop { reason } => {
                s.stop.get_or_insert(reason);
            }
            ToClient::Pause { epoch } => {
                // Answered here: the worker may be waiting in a read for a paused one.
                let s = &mut *s;
                let next = s.core.current_clock() + 1;
                // Without a coordinator yet, the pause is asked again.
                if let Some(c) = &s.coordinator
                    && let Some(clock) = s.pause.ask(epoch, next)
                {
                    let worker = s.core.worker().0;
                    let note = PlacementNote::Paused { worker, clock };
                    if let Err(e) = c.tell(note, petrel_messages::Priority::HIGH) {
                        s.error
                            .get_or_insert(format!("worker {worker}: report a pause: {e}"));
                    }
                }
            }
            ToClient::Cut { epoch, cut } => s.pause.cut(epoch, cut),
            ToClient::Resume { placement } => s.pause.resume(placement),
        }
        drop(s);
        self.notify.notify_waiters();
        Ok(())
    }
}

/// A pull started by [`PsClient::pull`]; [`PsClient::wait_pull`] returns its rows.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a pull ticket does nothing until waited on"]
pub struct PullTicket {
    table: TableId,
    rows: Vec<RowId>,
}

/// One worker's parameter-server client; not `Send`: it lives on its node's thread.
pub struct PsClient {
    worker: u32,
    shared: Rc<RefCell<ClientShared>>,
    notify: Rc<Notify>,
    shards: Vec<ActorRef<ToShard>>,
    layout: PsLayout,
    timeout: Duration,
    reads: std::cell::Cell<ReadStats>,
    /// The node's name, for `/metrics`.
    node_name: String,
    /// The zero of the wall time given to managed communication's pacer.
    epoch: std::time::Instant,
}

impl PsClient {
    /// Creates worker `worker`'s client on this node and registers its inbox.
    pub fn start(
        node: &Node,
        layout: &PsLayout,
        worker: u32,
        tables: Vec<TableSpec>,
    ) -> Result<PsClient, PsError> {
        Self::start_at(node, layout, worker, tables, 0)
    }

    /// Like `start`, resuming at `clock` (the clock of the checkpoint the shards restored).
    pub fn start_at(
        node: &Node,
        layout: &PsLayout,
        worker: u32,
        tables: Vec<TableSpec>,
        clock: Clock,
    ) -> Result<PsClient, PsError> {
        let mut core = ClientCore::new(WorkerId(worker), layout.n_shards(), tables)?;
        core.resume_at(clock)?;
        let shared = Rc::new(RefCell::new(ClientShared {
            core,
            error: None,
            stop: None,
            managed: None,
            pause: WorkerPause::default(),
            coordinator: None,
        }));
        let notify = Rc::new(Notify::new());
        let inbox = ClientInbox {
            shared: shared.clone(),
            notify: notify.clone(),
        }
        .start();
        node.register(&client_actor_name(worker), inbox)?
            .accept::<ToClient>();
        let shards = layout
            .shard_nodes
            .iter()
            .enumerate()
            .map(|(s, n)| {
                // Local shards must already be registered; remote ones resolve lazily.
                node.actor_at::<ToShard>(n, &shard_actor_name(s as u32))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PsClient {
            worker,
            shared,
            notify,
            shards,
            layout: layout.clone(),
            timeout: node.default_timeout(),
            reads: std::cell::Cell::new(ReadStats::default()),
            node_name: node.name().to_string(),
            epoch: std::time::Instant::now(),
        })
    }

    /// This worker's id.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// The job's layout.
    pub fn layout(&self) -> &PsLayout {
        &self.layout
    }

    /// The worker's clock (number of `clock()` calls).
    pub fn current_clock(&self) -> Clock {
        self.shared.borrow().core.current_clock()
    }

    /// Staleness of the reads of one table.
    pub fn table_stats(&self, table: TableId) -> StalenessStats {
        self.shared.borrow().core.table_stats(table)
    }

    /// Content staleness of the reads of one table (`TableSpec::content_clocks`).
    pub fn content_stats(&self, table: TableId) -> StalenessStats {
        self.shared.borrow().core.content_stats(table)
    }

    /// Why a stop was requested (by a controller's `ToClient::Stop`), if it was.
    pub fn stop_requested(&self) -> Option<String> {
        self.shared.borrow().stop.clone()
    }

    fn failed(&self, what: String) -> PsError {
        PsError::ClientFailed {
            worker: self.worker,
            what,
        }
    }

    fn check(&self) -> Result<(), PsError> {
        match &self.shared.borrow().error {
            Some(e) => Err(self.failed(e.clone())),
            None => Ok(()),
        }
    }

    fn send(&self, shard: u32, msg: ToShard) -> Result<(), PsError> {
        let r = (self.shards.get(shard as usize))
            .ok_or_else(|| self.failed(format!("no shard {shard}")))?;
        r.tell(msg, PS_PRIORITY).map_err(|e| {
            let node = &self.layout.shard_nodes[shard as usize];
            self.failed(format!("send to ps shard {shard} (node {node}): {e}"))
        })
    }

    /// Number of row reads sent to shards so far (cache misses and prefetches).
    pub fn reads_sent(&self) -> u64 {
        self.reads.get().rows_requested
    }

    /// What this worker's reads cost so far: requests, blocking round trips, time blocked.
    pub fn read_stats(&self) -> ReadStats {
        self.reads.get()
    }

    fn count_reads(&self, f: impl FnOnce(&mut ReadStats)) {
        let mut r = self.reads.get();
        f(&mut r);
        self.reads.set(r);
    }

    fn send_reads(&self, reqs: Vec<ReadRequest>, sync: bool) -> Result<(), PsError> {
        let mut per: HashMap<u32, Vec<ReadRequest>> = HashMap::new();
        for r in reqs {
            per.entry(r.shard).or_default().push(r);
        }
        if !sync {
            self.count_reads(|c| {
                c.rows_requested += per.values().map(|v| v.len() as u64).sum::<u64>();
                c.request_messages += per.len() as u64;
            });
        }
        for (s, v) in per {
            let msg = if sync {
                ToShard::Syncs(v)
            } else {
                ToShard::Reads(v)
            };
            self.send(s, msg)?;
        }
        Ok(())
    }

    async fn wait_notified(&self, shard_hint: u32) -> Result<(), PsError> {
        let n = self.notify.notified();
        match tokio::time::timeout(self.timeout, n).await {
            Ok(()) => self.check(),
            Err(_) => Err(PsError::ClientTimeout {
                worker: self.worker,
                shard: shard_hint,
                node: self
                    .layout
                    .shard_nodes
                    .get(shard_hint as usize)
                    .cloned()
                    .unwrap_or_default(),
                timeout: self.timeout,
            }),
        }
    }

    /// `Get(table, row)` under the table's consistency model, own writes included.
    pub async fn get(&self, table: TableId, row: RowId) -> Result<Row, PsError> {
        let mut rows = self.get_many(table, &[row]).await?;
        rows.pop().ok_or_else(|| self.failed("empty get".into()))
    }

    /// `Get` of many rows at once (round trips overlap), in the order asked.
    pub async fn get_many(&self, table: TableId, rows: &[RowId]) -> Result<Vec<Row>, PsError> {
        self.check()?;
        let out = self.read_rows(table, rows).await?;
        Ok(out.into_iter().map(SharedRow::into_row).collect())
    }

    /// The read loop of `get_many` and `wait_pull`: `get_shared` every row, send the fetches,
    /// wait, repeat for the rows not yet served; counts round trips and time blocked.
    async fn read_rows(&self, table: TableId, rows: &[RowId]) -> Result<Vec<SharedRow>, PsError> {
        let mut out: Vec<Option<SharedRow>> = vec![None; rows.len()];
        let mut missing: Vec<usize> = (0..rows.len()).collect();
        let mut blocked: Option<(std::time::Instant, bool)> = None;
        loop {
            let mut fetch = Vec::new();
            let mut still = Vec::new();
            let mut beyond_seen = false;
            {
                let mut s = self.shared.borrow_mut();
                for i in missing {
                    match s.core.get_shared(table, rows[i])? {
                        GetOutcome::Hit(r) => out[i] = Some(r),
                        GetOutcome::Fetch(req) => {
                            fetch.push(req);
                            still.push(i);
                        }
                        GetOutcome::Wait => still.push(i),
                    }
                }
                if blocked.is_none() && !still.is_empty() {
                    for &i in &still {
                        beyond_seen |= s.core.needs_beyond_seen(table, rows[i])?;
                    }
                }
            }
            if still.is_empty() {
                break;
            }
            // A new round trip: the first wait of this read, or new fetches after a wake-up.
            if blocked.is_none() || !fetch.is_empty() {
                self.count_reads(|c| {
                    c.blocking_rounds += 1;
                    c.bound_rounds += u64::from(beyond_seen);
                });
            }
            let (_, bound) = blocked.get_or_insert((std::time::Instant::now(), false));
            *bound |= beyond_seen;
            let hint = (self.shared.borrow().core.placement()).shard_of(table, rows[still[0]]);
            self.send_reads(fetch, false)?;
            // Replies are handled on this thread, so none can slip in before we wait.
            self.wait_notified(hint).await?;
            missing = still;
        }
        if let Some((since, bound)) = blocked {
            let s = since.elapsed().as_secs_f64();
            self.count_reads(|c| {
                c.blocked_s += s;
                if bound {
                    c.bound_blocked_s += s;
                }
            });
        }
        let empty = || SharedRow::new(Row::Sparse(Vec::new()));
        Ok(out.into_iter().map(|r| r.unwrap_or_else(empty)).collect())
    }

    /// `get_many` without copies: [`pull`](Self::pull) then [`wait_pull`](Self::wait_pull).
    pub async fn get_many_shared(
        &self,
        table: TableId,
        rows: &[RowId],
    ) -> Result<Vec<SharedRow>, PsError> {
        let ticket = self.pull(table, rows)?;
        self.wait_pull(ticket).await
    }

    /// Starts a pull of `rows` (ps-lite's `Pull`): rows the cache cannot serve are requested
    /// now; [`wait_pull`](Self::wait_pull) returns them, within the bound at its clock.
    pub fn pull(&self, table: TableId, rows: &[RowId]) -> Result<PullTicket, PsError> {
        self.check()?;
        self.request_rows(table, rows, ClientCore::pull_request)?;
        Ok(PullTicket {
            table,
            rows: rows.to_vec(),
        })
    }

    /// Waits for a pull's rows (in the order asked), shared with the cache.
    pub async fn wait_pull(&self, ticket: PullTicket) -> Result<Vec<SharedRow>, PsError> {
        self.read_rows(ticket.table, &ticket.rows).await
    }

    /// `Push(table, row, delta)`: [`batch_inc`](Self::batch_inc) taking the delta by value.
    pub fn push(&self, table: TableId, row: RowId, delta: Row) -> Result<(), PsError> {
        Ok(self.shared.borrow_mut().core.push(table, row, delta)?)
    }

    /// A push sent at once as an early batch (ps-lite's `Push` + `Wait`):
    /// [`wait_push`](Self::wait_push) returns once the shard applied it.
    pub fn push_now(&self, table: TableId, row: RowId, delta: Row) -> Result<PushTicket, PsError> {
        self.check()?;
        let (batch, ticket) = self.shared.borrow_mut().core.push_now(table, row, delta)?;
        let shard = batch.shard;
        self.send(shard, ToShard::Batch(batch))?;
        self.send(
            shard,
            ToShard::Ack {
                worker: WorkerId(self.worker),
            },
        )?;
        Ok(ticket)
    }

    /// Waits until the shard of `ticket` has applied its push.
    pub async fn wait_push(&self, ticket: &PushTicket) -> Result<(), PsError> {
        loop {
            if self.shared.borrow().core.push_done(ticket) {
                return self.check();
            }
            // No yield between the check above and registering for the wake-up.
            self.wait_notified(ticket.shard).await?;
        }
    }

    /// Starts non-blocking refreshes of `rows` (for `Async` tables, never expiring otherwise).
    pub fn prefetch(&self, table: TableId, rows: &[RowId]) -> Result<(), PsError> {
        self.request_rows(table, rows, ClientCore::prefetch)?;
        Ok(())
    }

    /// Sends the reads `request` asks for `rows` (one message per shard); returns how many.
    fn request_rows(
        &self,
        table: TableId,
        rows: &[RowId],
        request: impl Fn(&mut ClientCore, TableId, RowId) -> Result<Option<ReadRequest>, PsCoreError>,
    ) -> Result<u64, PsError> {
        let reqs = {
            let mut s = self.shared.borrow_mut();
            (rows.iter())
                .filter_map(|&r| request(&mut s.core, table, r).transpose())
                .collect::<Result<Vec<_>, _>>()?
        };
        let n = reqs.len() as u64;
        self.send_reads(reqs, false)?;
        Ok(n)
    }

    /// Bösen's per-clock prefetch: requests now every row of `rows` the *next* clock could
    /// not read from the cache, so the round trip overlaps this clock's compute.
    pub fn prefetch_next_clock(&self, table: TableId, rows: &[RowId]) -> Result<(), PsError> {
        self.check()?;
        let n = self.request_rows(table, rows, ClientCore::prefetch_next_clock)?;
        self.count_reads(|c| c.rows_ahead += n);
        Ok(())
    }

    /// `Inc(table, row, col, delta)`.
    pub fn inc(&self, table: TableId, row: RowId, col: u32, delta: f32) -> Result<(), PsError> {
        Ok(self.shared.borrow_mut().core.inc(table, row, col, delta)?)
    }

    /// `BatchInc(table, row, deltas)`.
    pub fn batch_inc(&self, table: TableId, row: RowId, delta: &Row) -> Result<(), PsError> {
        Ok(self.shared.borrow_mut().core.batch_inc(table, row, delta)?)
    }

    /// `Clock()`: flushes the oplog to every shard and advances this worker's clock; under
    /// managed communication ([`start_managed`](Self::start_managed)) only the aged rows
    /// and one priority batch go, charged to the pacer.
    pub fn clock(&self) -> Result<(), PsError> {
        self.clock_flushing(false)
    }

    /// `Clock()`, flushing the whole oplog when `all`.
    fn clock_flushing(&self, all: bool) -> Result<(), PsError> {
        self.check()?;
        let now_s = self.epoch.elapsed().as_secs_f64();
        let (batches, observed, clock) = {
            let s = &mut *self.shared.borrow_mut();
            let batches = match s.managed.as_mut() {
                Some(m) if !all => m.clock(&mut s.core, now_s),
                _ => s.core.clock(),
            };
            (batches, s.core.take_observed(), s.core.current_clock())
        };
        let m = &petrel_observe::metrics().ps;
        m.worker_clock(&self.node_name, self.worker, clock);
        for (table, counts) in observed {
            m.staleness(&self.node_name, &table.0.to_string(), &counts);
        }
        for b in batches {
            self.send(b.shard, ToShard::Batch(b))?;
        }
        Ok(())
    }

    /// `GlobalBarrier()`: `clock()`, then waits until every worker completed it on every shard.
    /// Flushes the whole oplog, managed or not: a barrier's table is complete.
    pub async fn barrier(&self) -> Result<(), PsError> {
        self.clock_flushing(true)?;
        let reqs = {
            let mut s = self.shared.borrow_mut();
            (s.core.placement().shards().into_iter())
                .map(|sh| s.core.sync_request(sh))
                .collect::<Result<Vec<_>, _>>()?
        };
        let mut pending: Vec<(u64, u32)> = reqs.iter().map(|r| (r.request_id, r.shard)).collect();
        self.send_reads(reqs, true)?;
        loop {
            pending.retain(|(id, _)| !self.shared.borrow_mut().core.sync_done(*id));
            let Some(&(_, shard)) = pending.first() else {
                return Ok(());
            };
            // No yield between the check above and registering for the wake-up.
            self.wait_notified(shard).await?;
        }
    }

    /// Starts managed communication with `manager`: `Inc`s accumulate priorities, `clock()`
    /// sends what the manager forces, and a background task on this thread sends the top
    /// rows whenever the pacer allows, while the worker computes or waits.
    pub fn start_managed(&self, manager: BandwidthManager) {
        {
            let mut s = self.shared.borrow_mut();
            s.core.set_prioritise(true);
            s.managed = Some(manager);
        }
        let (weak, shards, epoch) = (Rc::downgrade(&self.shared), self.shards.clone(), self.epoch);
        actix::spawn(async move {
            while let Some(wait) = sender_tick(&weak, &shards, epoch) {
                tokio::time::sleep(wait).await;
            }
        });
    }

    /// A background send now if one is due: for a worker computing without yielding to
    /// the timer (call it between pieces of work). Returns the rows sent.
    pub fn pace(&self) -> Result<usize, PsError> {
        self.check()?;
        let now_s = self.epoch.elapsed().as_secs_f64();
        let batches = {
            let s = &mut *self.shared.borrow_mut();
            match s.managed.as_mut() {
                Some(m) => m.tick(&mut s.core, now_s),
                None => return Ok(0),
            }
        };
        send_batches(&self.shards, batches).map_err(|e| self.failed(e))
    }

    /// What managed communication sent so far (`None` when it is off).
    pub fn managed_stats(&self) -> Option<ManagedStats> {
        self.shared.borrow().managed.as_ref().map(|m| m.stats())
    }

    /// Sends rows by `placement` from now (the job's shards join and leave; the
    /// starting placement, or one a [`ToClient::Resume`] brought).
    pub fn install_placement(&self, placement: Placement) -> Result<(), PsError> {
        Ok(self.shared.borrow_mut().core.install_placement(placement)?)
    }

    /// Makes this worker take part in changes of the shard set that `coordinator` runs.
    pub fn follow_shard_changes(&self, coordinator: ActorRef<PlacementNote>) {
        self.shared.borrow_mut().coordinator = Some(coordinator);
    }

    /// At a clock boundary, what a change of the shard set asks of this worker
    /// ([`WorkerPause`]): reports to `coordinator` and waits while paused, takes the new
    /// placement once resumed; returns when the worker may run its next clock.
    pub async fn shard_change_boundary(
        &self,
        coordinator: &ActorRef<PlacementNote>,
    ) -> Result<(), PsError> {
        loop {
            self.check()?;
            let step = {
                let s = &mut *self.shared.borrow_mut();
                s.pause.at_boundary(s.core.current_clock())
            };
            match step {
                AtBoundary::Step => return Ok(()),
                AtBoundary::Install(p) => {
                    tracing::debug!(worker = self.worker, epoch = p.epoch(), "new placement");
                    return self.install_placement(p);
                }
                AtBoundary::Report(clock) => {
                    self.flush_held().await?;
                    let note = PlacementNote::Paused {
                        worker: self.worker,
                        clock,
                    };
                    coordinator
                        .tell(note, petrel_messages::Priority::HIGH)
                        .map_err(|e| self.failed(format!("report a pause: {e}")))?;
                }
                // Other workers may take a few clocks to reach the cut: wait on.
                AtBoundary::Wait => {
                    let _ = tokio::time::timeout(self.timeout, self.notify.notified()).await;
                }
            }
        }
    }

    /// Sends the rows managed communication holds across clocks as early batches and waits
    /// until their shards applied them: at a cut, before the rows move.
    async fn flush_held(&self) -> Result<(), PsError> {
        let batches = self.shared.borrow_mut().core.take_all_early();
        let mut tickets = Vec::new();
        for b in batches {
            let (shard, seq) = (b.shard, b.batch.seq);
            self.send(shard, ToShard::Batch(b))?;
            let worker = WorkerId(self.worker);
            self.send(shard, ToShard::Ack { worker })?;
            tickets.push(PushTicket { shard, seq });
        }
        for t in &tickets {
            self.wait_push(t).await?;
        }
        Ok(())
    }

    /// Tells every shard this worker is done (it stops holding back their min clocks).
    /// Managed communication's held rows go first, and its background sender stops.
    pub fn leave(&self) -> Result<(), PsError> {
        let held = {
            let s = &mut *self.shared.borrow_mut();
            match s.managed.take() {
                Some(_) => s.core.take_all_early(),
                None => Vec::new(),
            }
        };
        send_batches(&self.shards, held).map_err(|e| self.failed(e))?;
        let shards = self.shared.borrow().core.placement().shards();
        for s in shards {
            self.send(
                s,
                ToShard::Leave {
                    worker: WorkerId(self.worker),
                },
            )?;
        }
        Ok(())
    }
}

impl Drop for PsClient {
    fn drop(&mut self) {
        // Stops the background sender.
        self.shared.borrow_mut().managed = None;
    }
}

/// One step of the background sender: a send if the pacer allows, then how long to wait;
/// `None` once managed communication stopped (the sender ends).
fn sender_tick(
    shared: &std::rc::Weak<RefCell<ClientShared>>,
    shards: &[ActorRef<ToShard>],
    epoch: std::time::Instant,
) -> Option<Duration> {
    let shared = shared.upgrade()?;
    let now_s = epoch.elapsed().as_secs_f64();
    let (batches, wait_s) = {
        let s = &mut *shared.borrow_mut();
        let m = s.managed.as_mut()?;
        let batches = m.tick(&mut s.core, now_s);
        let wait_s = match s.core.has_oplog() {
            true => m.pacer.wait_s(now_s),
            false => SENDER_IDLE_MS as f64 / 1000.0,
        };
        (batches, wait_s)
    };
    if let Err(e) = send_batches(shards, batches) {
        let mut s = shared.borrow_mut();
        let w = s.core.worker().0;
        s.error
            .get_or_insert(format!("worker {w}: managed send: {e}"));
        return None;
    }
    // At least a millisecond: the timer's resolution.
    Some(Duration::from_secs_f64(wait_s.clamp(0.001, 1.0)))
}
