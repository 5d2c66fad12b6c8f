//! The shard actor ([`ServerShard`]) around one [`PsShardCore`], and its start-up.

use std::collections::HashMap;

use actix::prelude::*;
use tokio::sync::mpsc;

use crate::checkpoint;
use crate::core::error::PsCoreError;
use crate::core::rules::RuleRegistry;
use crate::core::shard::{PsShardCore, ShardAction, TableSnapshot};
use crate::core::types::{Clock, TableSpec, WorkerId};
use crate::error::PsError;
use crate::shells::layout::PsLayout;
use crate::shells::messages::{
    PS_PRIORITY, ShardQuery, ShardState, ToClient, ToShard, client_actor_name, shard_actor_name,
};
use petrel_actors::address::{ActorRef, Msg};
use petrel_actors::error::HandlerError;
use petrel_actors::node::Node;

/// What ends a shard's service.
#[derive(Debug)]
enum ShardEvent {
    AllLeft,
    /// It handed its rows over and was told to stop.
    Retired,
    Failed(PsError),
}

/// How a shard's service ended ([`ShardHandle::wait_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardEnd {
    /// Every worker left (or none was to come).
    AllLeft,
    /// It handed its rows over to the shards of a new placement.
    Retired,
}

/// The server shard actor: feeds [`ToShard`] messages into its core, routes its decisions.
pub struct ServerShard {
    shard: u32,
    core: PsShardCore,
    node: Node,
    layout: PsLayout,
    clients: HashMap<WorkerId, ActorRef<ToClient>>,
    left: usize,
    events: mpsc::UnboundedSender<ShardEvent>,
    on_checkpoint: Option<OnCheckpoint>,
    /// The zero of the wall time given to server push's pacer.
    epoch: std::time::Instant,
}

/// What a shard does with each checkpoint `(shard, clock, tables)`; an error fails it.
pub type OnCheckpoint = Box<dyn FnMut(u32, Clock, &[TableSnapshot]) -> Result<(), PsError>>;

impl Actor for ServerShard {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Server push: one tick of the core per period; the core paces itself.
        if let Some(cfg) = self.core.server_push_config() {
            let period = std::time::Duration::from_millis(cfg.tick_ms.max(1));
            ctx.run_interval(period, |shard, _| {
                let actions = shard
                    .core
                    .server_push_tick(shard.epoch.elapsed().as_secs_f64());
                shard.route(actions);
            });
        }
    }
}

impl ServerShard {
    fn fail(&self, error: PsError) {
        let error = PsError::ShardFailed {
            shard: self.shard,
            node: self.node.name().to_string(),
            source: Box::new(error),
        };
        tracing::error!(error = %petrel_actors::error_chain(&error), "ps shard failed");
        let _ = self.events.send(ShardEvent::Failed(error));
    }

    fn client(&mut self, worker: WorkerId) -> Result<ActorRef<ToClient>, PsError> {
        if let Some(c) = self.clients.get(&worker) {
            return Ok(c.clone());
        }
        let node = self
            .layout
            .worker_nodes
            .get(worker.0 as usize)
            .ok_or(PsCoreError::UnknownWorker(worker))?;
        let r = self
            .node
            .actor_at::<ToClient>(node, &client_actor_name(worker.0))?;
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

    /// Hands every checkpoint the core completed to `on_checkpoint`.
    fn save_checkpoints(&mut self) {
        let ready = self.core.take_checkpoints();
        let Some(save) = self.on_checkpoint.as_mut() else {
            return;
        };
        for (clock, tables) in ready {
            if let Err(e) = save(self.shard, clock, &tables) {
                self.fail(e);
                return;
            }
        }
    }

    /// Applies `msg` to the core; returns the actions to route.
    fn on_message(&mut self, msg: ToShard) -> Result<Vec<ShardAction>, PsCoreError> {
        Ok(match msg {
            ToShard::Batch(b) if b.shard != self.shard => {
                return Err(PsCoreError::InvalidConfig(format!(
                    "batch for shard {} delivered to shard {}",
                    b.shard, self.shard
                )));
            }
            ToShard::Batch(b) => self.core.handle_batch(&b)?,
            ToShard::Reads(reads) => {
                let min_clock = self.core.min_clock();
                tracing::debug!(shard = self.shard, n = reads.len(), min_clock, "reads");
                let out: Result<Vec<_>, _> =
                    reads.iter().map(|r| self.core.handle_read(r)).collect();
                out?.into_iter().flatten().collect()
            }
            ToShard::Syncs(reads) => {
                let out: Result<Vec<_>, _> =
                    reads.iter().map(|r| self.core.handle_sync(r)).collect();
                out?.into_iter().flatten().collect()
            }
            ToShard::Ack { worker } => self.core.ack(worker)?,
            ToShard::Leave { worker } => {
                let actions = self.core.remove_worker(worker)?;
                self.route(actions);
                self.left += 1;
                tracing::debug!(shard = self.shard, worker = worker.0, "worker left");
                // Absent workers (of standby nodes never started) are not waited for.
                if self.core.members() == 0 {
                    let _ = self.events.send(ShardEvent::AllLeft);
                }
                Vec::new()
            }
        })
    }
}

impl Handler<Msg<ToShard>> for ServerShard {
    type Result = Result<(), HandlerError>;

    fn handle(&mut self, msg: Msg<ToShard>, _: &mut Context<Self>) -> Self::Result {
        match self.on_message(msg.body) {
            Ok(actions) => self.route(actions),
            Err(e) => {
                let text = e.to_string();
                self.fail(e.into());
                return Err(HandlerError::new(text));
            }
        }
        self.save_checkpoints();
        Ok(())
    }
}

impl Handler<Msg<ShardQuery>> for ServerShard {
    type Result = Result<ShardState, HandlerError>;

    fn handle(&mut self, msg: Msg<ShardQuery>, _: &mut Context<Self>) -> Self::Result {
        // Ping and EvalCuts carry no tables; Snapshot and Checkpoint carry all of them.
        let mut admitted_at = None;
        let failed = |shard: u32, e: PsCoreError| HandlerError::new(format!("shard {shard}: {e}"));
        let (tables, checkpoint_clock, eval_cuts) = match msg.body {
            ShardQuery::HandOver { next } => {
                let leaving = (self.core.placement()).is_some_and(|(me, _)| !next.has(*me));
                let rows = (self.core.hand_over(next)).map_err(|e| failed(self.shard, e))?;
                let cuts = match leaving {
                    true => self.core.take_eval_cuts(),
                    false => Vec::new(),
                };
                (rows, None, cuts)
            }
            ShardQuery::Retire => {
                if (self.core.placement()).is_some_and(|(me, p)| !p.has(*me)) {
                    tracing::info!(shard = self.shard, "ps shard handed its rows over; leaving");
                    let _ = self.events.send(ShardEvent::Retired);
                }
                (Vec::new(), None, Vec::new())
            }
            ShardQuery::TakeOver {
                next,
                joining,
                tables,
            } => {
                if let Some((cut, members)) = &joining {
                    (self
                        .core
                        .set_placement(self.shard, next, Some((*cut, members))))
                    .map_err(|e| failed(self.shard, e))?;
                }
                (self.core.take_over(tables)).map_err(|e| failed(self.shard, e))?;
                // A joiner of a job whose workers all ended serves no one.
                if self.core.members() == 0 {
                    let _ = self.events.send(ShardEvent::AllLeft);
                }
                (Vec::new(), None, Vec::new())
            }
            ShardQuery::Ping => (Vec::new(), None, Vec::new()),
            ShardQuery::Admit { worker, clock } => {
                let at = (self.core.admit(worker, clock))
                    .map_err(|e| HandlerError::new(format!("shard {}: {e}", self.shard)))?;
                admitted_at = Some(at);
                (Vec::new(), None, Vec::new())
            }
            ShardQuery::EvalCuts => (Vec::new(), None, self.core.take_eval_cuts()),
            ShardQuery::Snapshot => (self.core.snapshot(), None, Vec::new()),
            ShardQuery::Checkpoint { dir } => {
                let clock =
                    checkpoint::write_shard(std::path::Path::new(&dir), self.shard, &self.core)
                        .map_err(|e| {
                            HandlerError::new(format!(
                                "shard {} checkpoint to {dir}: {e}",
                                self.shard
                            ))
                        })?;
                (self.core.snapshot(), Some(clock), Vec::new())
            }
        };
        Ok(ShardState {
            shard: self.shard,
            min_clock: self.core.min_clock(),
            tables,
            checkpoint_clock,
            workers_left: self.left as u32,
            workers_joined: (self.left + self.core.members()) as u32,
            admitted_at,
            server_push: self.core.server_push_stats(),
            eval_cuts,
        })
    }
}

/// A started shard: `wait` returns when every worker left, or with the fatal error.
pub struct ShardHandle {
    /// The shard id.
    pub shard: u32,
    /// Its actor.
    pub addr: Addr<ServerShard>,
    events: mpsc::UnboundedReceiver<ShardEvent>,
}

impl ShardHandle {
    /// Serves until every worker left (`Ok`) or the shard failed.
    pub async fn wait(self) -> Result<(), PsError> {
        self.wait_end().await.map(|_| ())
    }

    /// [`ShardHandle::wait`], saying how the service ended.
    pub async fn wait_end(mut self) -> Result<ShardEnd, PsError> {
        match self.events.recv().await {
            Some(ShardEvent::AllLeft) => Ok(ShardEnd::AllLeft),
            Some(ShardEvent::Retired) => Ok(ShardEnd::Retired),
            Some(ShardEvent::Failed(e)) => Err(e),
            None => Err(PsError::ShardStopped { shard: self.shard }),
        }
    }
}

/// Starts shard `shard` on this node, fresh or from the checkpoint `resume = (dir, clock)`.
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
        None => PsShardCore::with_registry(n_workers, tables, registry)?,
        Some((dir, clock)) => {
            let saved = checkpoint::load_checkpoint(dir, shard, clock)?;
            PsShardCore::restore(n_workers, tables, registry, saved, clock)?
        }
    };
    start_shard_core(node, layout, shard, core, None)
}

/// Starts shard `shard` on this node around `core`; `on_checkpoint` gets its checkpoints.
pub fn start_shard_core(
    node: &Node,
    layout: &PsLayout,
    shard: u32,
    core: PsShardCore,
    on_checkpoint: Option<OnCheckpoint>,
) -> Result<ShardHandle, PsError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = ServerShard {
        shard,
        core,
        node: node.clone(),
        layout: layout.clone(),
        clients: HashMap::new(),
        left: 0,
        events: tx,
        on_checkpoint,
        epoch: std::time::Instant::now(),
    }
    .start();
    node.register(&shard_actor_name(shard), addr.clone())?
        .accept::<ToShard>()
        .accept::<ShardQuery>();
    Ok(ShardHandle {
        shard,
        addr,
        events: rx,
    })
}
