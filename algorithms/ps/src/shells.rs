//! The parameter server on the actor runtime: thin shells around `ShardCore` and `ClientCore`.
//!
//! * [`ServerShard`]: an actix actor owning one `ShardCore`, registered as `ps-shard-<s>`. It
//!   takes [`ToShard`] messages (update batches, reads, barrier probes, a worker leaving) and
//!   sends what the core decides (replies, ESSP pushes) to the workers' client inboxes as
//!   [`ToClient`] messages. Queries ([`ShardQuery`]: snapshot, checkpoint) are asks.
//! * [`PsClient`]: one worker's client library (`get`, `inc`, `batch_inc`, `clock`, `barrier`),
//!   driven from the worker's role code. Its `ClientCore` is shared with a [`ClientInbox`]
//!   actor (`ps-client-<w>`) on the same thread that feeds replies and pushes into it.
//!
//! Ordering: the cores assume FIFO delivery per (client, shard) pair in each direction. Every
//! data message between a client and a shard is a `tell` at the single priority
//! [`PS_PRIORITY`], so it travels on one lane of the transport (FIFO), or through the local
//! actix mailbox (FIFO) when both sit on the same node.
//!
//! Failure: a core error at a shard (a protocol violation) is fatal and surfaces through
//! [`ShardHandle::wait`]; a dead peer node makes the runtime stop every node with an error
//! naming it (fail-fast), and a read still waiting fails after the request timeout.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use petrel_messages::{Priority, remote_message};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};

use crate::checkpoint;
use crate::core::client::{ClientCore, GetOutcome};
use crate::core::managed::BandwidthManager;
use crate::core::rules::RuleRegistry;
use crate::core::shard::{ShardAction, ShardCore, TableSnapshot};
use crate::core::stats::StalenessStats;
use crate::core::types::{
    Clock, Consistency, ReadRequest, Row, RowId, ShardBatch, TableId, TableKind, TableSpec,
    UpdateRuleSpec, WorkerId,
};
use crate::error::PsError;
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::HandlerError;
use petrel_actors::node::Node;

/// The one priority of all PS data traffic (see the module docs on ordering).
pub const PS_PRIORITY: Priority = Priority::NORMAL;

/// Registry name of shard `s`.
pub fn shard_actor_name(shard: u32) -> String {
    format!("ps-shard-{shard}")
}

/// Registry name of worker `w`'s client inbox.
pub fn client_actor_name(worker: u32) -> String {
    format!("ps-client-{worker}")
}

/// Client -> shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToShard {
    /// An update batch (ends a clock when `end_of_clock`).
    Batch(ShardBatch),
    /// Reads, each answered when the shard's min clock allows.
    Reads(Vec<ReadRequest>),
    /// Barrier probes (`ShardCore::sync`).
    Syncs(Vec<ReadRequest>),
    /// The worker is done: it no longer holds back the min clock.
    Leave { worker: WorkerId },
}
remote_message!(ToShard => (), "petrel.ps.to_shard");

/// Shard (or controller) -> client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToClient {
    /// Replies and pushes from shard `shard`, in the order the core produced them.
    Actions {
        shard: u32,
        actions: Vec<ShardAction>,
    },
    /// Asks the worker to stop at its next clock boundary (see `PsClient::stop_requested`).
    Stop { reason: String },
}
remote_message!(ToClient => (), "petrel.ps.to_client");

/// Questions to a shard (asks, any priority).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ShardQuery {
    /// Liveness probe: the min clock only (no rows).
    Ping,
    /// All rows of every table and the min clock.
    Snapshot,
    /// Writes an atomic checkpoint of this shard into `dir` at its current min clock.
    Checkpoint { dir: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardState {
    pub shard: u32,
    pub min_clock: Clock,
    pub tables: Vec<TableSnapshot>,
    /// Set by `Checkpoint`: the clock the checkpoint was written at.
    pub checkpoint_clock: Option<Clock>,
}
remote_message!(ShardQuery => ShardState, "petrel.ps.shard_query");

/// Builds the table list of a PS job: ids are assigned in order from 0.
#[derive(Debug, Clone, Default)]
pub struct TablesBuilder {
    tables: Vec<TableSpec>,
}

impl TablesBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A table of dense f32 rows of `width`.
    pub fn dense(self, name: &str, width: u32, consistency: Consistency) -> Self {
        self.table(name, TableKind::Dense { width }, consistency)
    }

    /// A table of sparse rows.
    pub fn sparse(self, name: &str, consistency: Consistency) -> Self {
        self.table(name, TableKind::Sparse, consistency)
    }

    fn table(mut self, name: &str, kind: TableKind, consistency: Consistency) -> Self {
        let id = self.tables.len() as u32;
        self.tables
            .push(TableSpec::new(id, name, kind, consistency));
        self
    }

    /// Sets the server-side update rule of the table added last.
    pub fn rule(mut self, rule: UpdateRuleSpec) -> Self {
        if let Some(t) = self.tables.last_mut() {
            t.update_rule = rule;
        }
        self
    }

    pub fn build(self) -> Result<Vec<TableSpec>, PsError> {
        let mut names: Vec<&str> = self.tables.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(PsError::InvalidConfig(format!(
                "duplicate table name {}",
                w[0]
            )));
        }
        if self.tables.is_empty() {
            return Err(PsError::InvalidConfig("no tables".into()));
        }
        Ok(self.tables)
    }
}

/// Where the pieces of a PS job run: shard `s` on `shard_nodes[s]`, worker `w` on
/// `worker_nodes[w]` (a node may appear several times in either list, and in both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PsLayout {
    pub shard_nodes: Vec<String>,
    pub worker_nodes: Vec<String>,
}

impl PsLayout {
    pub fn n_shards(&self) -> u32 {
        self.shard_nodes.len() as u32
    }

    pub fn n_workers(&self) -> u32 {
        self.worker_nodes.len() as u32
    }

    /// Shard ids hosted by `node`.
    pub fn shards_on(&self, node: &str) -> Vec<u32> {
        (0..self.n_shards())
            .filter(|&s| self.shard_nodes[s as usize] == node)
            .collect()
    }

    /// Worker ids hosted by `node`.
    pub fn workers_on(&self, node: &str) -> Vec<u32> {
        (0..self.n_workers())
            .filter(|&w| self.worker_nodes[w as usize] == node)
            .collect()
    }
}

/// What ends a shard's service.
#[derive(Debug)]
enum ShardEvent {
    AllLeft,
    Failed(String),
}

/// The server shard actor.
pub struct ServerShard {
    shard: u32,
    core: ShardCore,
    node: Node,
    layout: PsLayout,
    clients: HashMap<WorkerId, ActorRef<ToClient>>,
    left: usize,
    events: mpsc::UnboundedSender<ShardEvent>,
}

impl Actor for ServerShard {
    type Context = Context<Self>;
}

impl ServerShard {
    fn fail(&self, what: String) {
        let msg = format!(
            "ps shard {} on node {}: {what}",
            self.shard,
            self.node.name()
        );
        tracing::error!("{msg}");
        let _ = self.events.send(ShardEvent::Failed(msg));
    }

    fn client(&mut self, worker: WorkerId) -> Result<ActorRef<ToClient>, String> {
        if let Some(c) = self.clients.get(&worker) {
            return Ok(c.clone());
        }
        let node = self
            .layout
            .worker_nodes
            .get(worker.0 as usize)
            .ok_or_else(|| format!("unknown worker {}", worker.0))?;
        let r = self
            .node
            .actor_at::<ToClient>(node, &client_actor_name(worker.0))
            .map_err(|e| e.to_string())?;
        self.clients.insert(worker, r.clone());
        Ok(r)
    }

    /// Sends the core's actions, grouped per worker in production order.
    fn route(&mut self, actions: Vec<ShardAction>) {
        let mut per: Vec<(WorkerId, Vec<ShardAction>)> = Vec::new();
        for a in actions {
            let w = a.worker();
            match per.iter_mut().find(|(x, _)| *x == w) {
                Some((_, v)) => v.push(a),
                None => per.push((w, vec![a])),
            }
        }
        for (w, actions) in per {
            match self.client(w) {
                Ok(c) => {
                    let msg = ToClient::Actions {
                        shard: self.shard,
                        actions,
                    };
                    if let Err(e) = c.tell(msg, PS_PRIORITY) {
                        // A dead worker node stops the run (fail-fast); nothing to do here.
                        tracing::warn!(shard = self.shard, worker = w.0, error = %e, "send failed");
                    }
                }
                Err(e) => self.fail(e),
            }
        }
    }

    fn on_message(&mut self, msg: ToShard) -> Result<(), PsError> {
        match msg {
            ToShard::Batch(b) => {
                if b.shard != self.shard {
                    return Err(PsError::InvalidConfig(format!(
                        "batch for shard {} delivered to shard {}",
                        b.shard, self.shard
                    )));
                }
                let actions = self.core.handle_batch(&b)?;
                self.route(actions);
            }
            ToShard::Reads(reads) => {
                tracing::debug!(
                    shard = self.shard,
                    n = reads.len(),
                    min_clock = self.core.min_clock(),
                    "reads"
                );
                let mut out = Vec::new();
                for r in &reads {
                    out.extend(self.core.handle_read(r)?);
                }
                self.route(out);
            }
            ToShard::Syncs(reads) => {
                let mut out = Vec::new();
                for r in &reads {
                    out.extend(self.core.sync(
                        r.worker,
                        r.request_id,
                        r.table,
                        r.row,
                        r.min_clock,
                    )?);
                }
                self.route(out);
            }
            ToShard::Leave { worker } => {
                let actions = self.core.remove_worker(worker)?;
                self.route(actions);
                self.left += 1;
                tracing::debug!(shard = self.shard, worker = worker.0, "worker left");
                if self.left == self.layout.worker_nodes.len() {
                    let _ = self.events.send(ShardEvent::AllLeft);
                }
            }
        }
        Ok(())
    }
}

impl Handler<Msg<ToShard>> for ServerShard {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<ToShard>, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.on_message(msg.body) {
            self.fail(e.to_string());
            return Err(HandlerError::new(e.to_string()));
        }
        Ok(())
    }
}

impl Handler<Msg<ShardQuery>> for ServerShard {
    type Result = Result<ShardState, HandlerError>;

    fn handle(&mut self, msg: Msg<ShardQuery>, _: &mut Context<Self>) -> Self::Result {
        let checkpoint_clock = match msg.body {
            ShardQuery::Ping => {
                return Ok(ShardState {
                    shard: self.shard,
                    min_clock: self.core.min_clock(),
                    tables: Vec::new(),
                    checkpoint_clock: None,
                });
            }
            ShardQuery::Snapshot => None,
            ShardQuery::Checkpoint { dir } => Some(
                checkpoint::write_shard(std::path::Path::new(&dir), self.shard, &self.core)
                    .map_err(|e| {
                        HandlerError::new(format!("shard {} checkpoint to {dir}: {e}", self.shard))
                    })?,
            ),
        };
        Ok(ShardState {
            shard: self.shard,
            min_clock: self.core.min_clock(),
            tables: self.core.snapshot(),
            checkpoint_clock,
        })
    }
}

/// A started shard: `wait` returns when every worker left, or with the fatal error.
pub struct ShardHandle {
    pub shard: u32,
    pub addr: Addr<ServerShard>,
    events: mpsc::UnboundedReceiver<ShardEvent>,
}

impl ShardHandle {
    pub async fn wait(mut self) -> Result<(), String> {
        match self.events.recv().await {
            Some(ShardEvent::AllLeft) => Ok(()),
            Some(ShardEvent::Failed(e)) => Err(e),
            None => Err(format!("ps shard {} stopped", self.shard)),
        }
    }
}

/// Starts shard `shard` on this node (call inside the node's actix System) from a fresh core
/// or, with `resume`, from a checkpoint: `(dir, clock)`.
pub fn start_shard(
    node: &Node,
    layout: &PsLayout,
    shard: u32,
    tables: Vec<TableSpec>,
    registry: &RuleRegistry,
    resume: Option<(&std::path::Path, Clock)>,
) -> Result<ShardHandle, PsError> {
    let n_workers = layout.n_workers();
    let core = match resume {
        None => ShardCore::with_registry(n_workers, tables, registry)?,
        Some((dir, clock)) => {
            let ck = checkpoint::load_checkpoint(dir, shard, clock)?;
            ShardCore::restore(n_workers, tables, registry, ck.tables, ck.clock)?
        }
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = ServerShard {
        shard,
        core,
        node: node.clone(),
        layout: layout.clone(),
        clients: HashMap::new(),
        left: 0,
        events: tx,
    }
    .start();
    node.register(&shard_actor_name(shard), addr.clone())
        .map_err(|e| PsError::InvalidConfig(e.to_string()))?
        .accept::<ToShard>()
        .accept::<ShardQuery>();
    Ok(ShardHandle {
        shard,
        addr,
        events: rx,
    })
}

struct ClientShared {
    core: ClientCore,
    error: Option<String>,
    stop: Option<String>,
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
        }
        drop(s);
        self.notify.notify_waiters();
        Ok(())
    }
}

/// Errors of the client library.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Ps(#[from] PsError),
    #[error("worker {worker}: {what}")]
    Failed { worker: u32, what: String },
    #[error("worker {worker}: no answer from ps shard {shard} (node {node}) within {timeout:?}")]
    Timeout {
        worker: u32,
        shard: u32,
        node: String,
        timeout: Duration,
    },
}

/// One worker's parameter-server client (see the module docs). Not `Send`: it lives on its
/// node's thread, with its inbox actor.
pub struct PsClient {
    worker: u32,
    shared: Rc<RefCell<ClientShared>>,
    notify: Rc<Notify>,
    shards: Vec<ActorRef<ToShard>>,
    layout: PsLayout,
    timeout: Duration,
    reads_sent: std::cell::Cell<u64>,
}

impl PsClient {
    /// Creates worker `worker`'s client on this node and registers its inbox. Shards must be
    /// registered before the first message is sent (a barrier after starting them does it).
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
        }));
        let notify = Rc::new(Notify::new());
        let inbox = ClientInbox {
            shared: shared.clone(),
            notify: notify.clone(),
        }
        .start();
        node.register(&client_actor_name(worker), inbox)
            .map_err(|e| PsError::InvalidConfig(e.to_string()))?
            .accept::<ToClient>();
        let shards = layout
            .shard_nodes
            .iter()
            .enumerate()
            .map(|(s, n)| {
                // Local shards must already be registered; remote ones resolve lazily.
                node.actor_at::<ToShard>(n, &shard_actor_name(s as u32))
                    .map_err(|e| PsError::InvalidConfig(format!("shard {s} on {n}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PsClient {
            worker,
            shared,
            notify,
            shards,
            layout: layout.clone(),
            timeout: node.default_timeout(),
            reads_sent: std::cell::Cell::new(0),
        })
    }

    pub fn worker(&self) -> u32 {
        self.worker
    }

    pub fn layout(&self) -> &PsLayout {
        &self.layout
    }

    /// The worker's clock (number of `clock()` calls).
    pub fn current_clock(&self) -> Clock {
        self.shared.borrow().core.current_clock()
    }

    /// Staleness of every read so far.
    pub fn stats(&self) -> StalenessStats {
        self.shared.borrow().core.stats().clone()
    }

    /// Staleness of the reads of one table.
    pub fn table_stats(&self, table: TableId) -> StalenessStats {
        self.shared.borrow().core.table_stats(table)
    }

    /// Why a stop was requested (by a controller's `ToClient::Stop`), if it was.
    pub fn stop_requested(&self) -> Option<String> {
        self.shared.borrow().stop.clone()
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn check(&self) -> Result<(), ClientError> {
        match &self.shared.borrow().error {
            Some(e) => Err(ClientError::Failed {
                worker: self.worker,
                what: e.clone(),
            }),
            None => Ok(()),
        }
    }

    fn send(&self, shard: u32, msg: ToShard) -> Result<(), ClientError> {
        let r = self
            .shards
            .get(shard as usize)
            .ok_or_else(|| ClientError::Failed {
                worker: self.worker,
                what: format!("no shard {shard}"),
            })?;
        r.tell(msg, PS_PRIORITY).map_err(|e| ClientError::Failed {
            worker: self.worker,
            what: format!(
                "send to ps shard {shard} (node {}): {e}",
                self.layout.shard_nodes[shard as usize]
            ),
        })
    }

    /// Number of row reads sent to shards so far (cache misses and prefetches; not barrier
    /// probes): with ESSP, pushes keep cached rows fresh and this stays low.
    pub fn reads_sent(&self) -> u64 {
        self.reads_sent.get()
    }

    fn send_reads(&self, reqs: Vec<ReadRequest>, sync: bool) -> Result<(), ClientError> {
        if !sync {
            self.reads_sent
                .set(self.reads_sent.get() + reqs.len() as u64);
        }
        let mut per: HashMap<u32, Vec<ReadRequest>> = HashMap::new();
        for r in reqs {
            per.entry(r.shard).or_default().push(r);
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

    async fn wait_notified(&self, shard_hint: u32) -> Result<(), ClientError> {
        let n = self.notify.notified();
        match tokio::time::timeout(self.timeout, n).await {
            Ok(()) => self.check(),
            Err(_) => Err(ClientError::Timeout {
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

    /// `Get(table, row)`: the row as this worker's consistency model allows it to be seen,
    /// including its own writes; waits while the shard's min clock is too low.
    pub async fn get(&self, table: TableId, row: RowId) -> Result<Row, ClientError> {
        let mut rows = self.get_many(table, &[row]).await?;
        rows.pop().ok_or_else(|| ClientError::Failed {
            worker: self.worker,
            what: "empty get".into(),
        })
    }

    /// `Get` of many rows at once: every missing row is requested before waiting, so the
    /// round trips overlap. Rows come back in the order asked.
    pub async fn get_many(&self, table: TableId, rows: &[RowId]) -> Result<Vec<Row>, ClientError> {
        self.check()?;
        let mut out: Vec<Option<Row>> = vec![None; rows.len()];
        let mut missing: Vec<usize> = (0..rows.len()).collect();
        loop {
            let mut fetch = Vec::new();
            let mut still = Vec::new();
            {
                let mut s = self.shared.borrow_mut();
                for i in missing {
                    match s.core.get(table, rows[i])? {
                        GetOutcome::Hit(r) => out[i] = Some(r),
                        GetOutcome::Fetch(req) => {
                            fetch.push(req);
                            still.push(i);
                        }
                        GetOutcome::Wait => still.push(i),
                    }
                }
            }
            if still.is_empty() {
                break;
            }
            let hint = crate::core::types::shard_of(table, rows[still[0]], self.layout.n_shards());
            self.send_reads(fetch, false)?;
            // Replies are handled on this thread, so none can slip in before we wait.
            self.wait_notified(hint).await?;
            missing = still;
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or(Row::Sparse(Vec::new())))
            .collect())
    }

    /// Starts non-blocking refreshes of `rows` (for `Async` tables, whose cached copies are
    /// otherwise served forever); `get` returns the new values once the replies arrived.
    pub fn prefetch(&self, table: TableId, rows: &[RowId]) -> Result<(), ClientError> {
        let mut reqs = Vec::new();
        {
            let mut s = self.shared.borrow_mut();
            for &r in rows {
                if let Some(q) = s.core.prefetch(table, r)? {
                    reqs.push(q);
                }
            }
        }
        self.send_reads(reqs, false)
    }

    /// `Inc(table, row, col, delta)`.
    pub fn inc(&self, table: TableId, row: RowId, col: u32, delta: f32) -> Result<(), ClientError> {
        Ok(self.shared.borrow_mut().core.inc(table, row, col, delta)?)
    }

    /// `BatchInc(table, row, deltas)`.
    pub fn batch_inc(&self, table: TableId, row: RowId, delta: &Row) -> Result<(), ClientError> {
        Ok(self.shared.borrow_mut().core.batch_inc(table, row, delta)?)
    }

    /// `Clock()`: flushes the oplog to every shard and advances this worker's clock.
    pub fn clock(&self) -> Result<(), ClientError> {
        self.check()?;
        let batches = self.shared.borrow_mut().core.clock();
        for b in batches {
            let s = b.shard;
            self.send(s, ToShard::Batch(b))?;
        }
        Ok(())
    }

    /// `GlobalBarrier()`: `clock()`, then waits until every worker has completed this clock on
    /// every shard (so a following read sees every update made before the barrier).
    pub async fn barrier(&self) -> Result<(), ClientError> {
        self.clock()?;
        let reqs = {
            let mut s = self.shared.borrow_mut();
            (0..self.layout.n_shards())
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

    /// Managed communication (Wei et al., SoCC 2015): one tick of `manager` between clocks.
    /// Sends the oplog rows it picks (largest relative change first under
    /// `SendPolicy::RelativeMagnitude`, within the per-tick byte budget) as early, non-clock-ending
    /// batches; the staleness bound is unaffected since clocks still advance only in `clock()`.
    /// Returns the number of rows sent.
    pub fn managed_tick(&self, manager: &mut BandwidthManager) -> Result<usize, ClientError> {
        self.check()?;
        let batches = manager.tick(&mut self.shared.borrow_mut().core);
        let mut rows = 0;
        for b in batches {
            rows += b.batch.updates.len();
            let s = b.shard;
            self.send(s, ToShard::Batch(b))?;
        }
        Ok(rows)
    }

    /// Tells every shard this worker is done (it stops holding back their min clocks).
    pub fn leave(&self) -> Result<(), ClientError> {
        for s in 0..self.layout.n_shards() {
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

/// Asks every shard for its state (tables and min clock), in shard order.
pub async fn snapshot_all(
    node: &Node,
    layout: &PsLayout,
    query: ShardQuery,
    timeout: Duration,
) -> Result<Vec<ShardState>, String> {
    let mut futs = Vec::new();
    for (s, n) in layout.shard_nodes.iter().enumerate() {
        let r = node
            .actor_at::<ShardQuery>(n, &shard_actor_name(s as u32))
            .map_err(|e| format!("ps shard {s} on {n}: {e}"))?;
        let q = query.clone();
        futs.push(async move {
            r.ask(q, Priority::HIGH, timeout)
                .await
                .map_err(|e| format!("ps shard {s} on {n}: {e}"))
        });
    }
    futures::future::join_all(futs).await.into_iter().collect()
}

/// Waits until every shard of `layout` is registered and answers (shards start in their own
/// roles, possibly on other nodes; this avoids a cluster-wide barrier per role).
pub async fn wait_for_shards(
    node: &Node,
    layout: &PsLayout,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match snapshot_all(node, layout, ShardQuery::Ping, Duration::from_millis(500)).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("ps shards not ready after {timeout:?}: {e}"));
            }
            Err(e) => {
                tracing::debug!(error = %e, "waiting for ps shards");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Merges shard states into one map per table.
pub fn merge_tables(states: &[ShardState]) -> HashMap<TableId, HashMap<RowId, Row>> {
    let mut out: HashMap<TableId, HashMap<RowId, Row>> = HashMap::new();
    for st in states {
        for t in &st.tables {
            let m = out.entry(t.table).or_default();
            for (r, row) in &t.rows {
                m.insert(*r, row.clone());
            }
        }
    }
    out
}
