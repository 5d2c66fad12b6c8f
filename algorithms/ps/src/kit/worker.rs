//! The worker role: one client per worker on the node, the clock loop, the final report.

use std::sync::Arc;

use petrel_actors::{ActorRef, Node, NodeContext};
use petrel_messages::Priority;

use crate::core::checkpoint::{Piece, is_checkpoint_clock};
use crate::core::types::TableId;
use crate::error::PsError;
use crate::kit::job::SHARDS_READY_TIMEOUT;
use crate::kit::reshard::coordinator_actor;
use crate::kit::{PsApp, PsJob, PsStep, WorkerDone, checkpoints};
use crate::shells::{self, PlacementNote, PsClient, PsLayout};

/// What a worker's code sees: its client, the job layout and the monitor's inbox.
pub struct WorkerCtx<'a, R: petrel_messages::RemoteMessage<Reply = ()>> {
    /// The node the worker runs on.
    pub node: &'a Node,
    /// The worker's parameter-server client.
    pub client: &'a PsClient,
    /// Where shards and workers run.
    pub layout: &'a PsLayout,
    monitor: ActorRef<R>,
    /// Whether workers may join and leave the job (its cluster allows membership changes).
    elastic: bool,
    /// The clock it joined the running job at (a worker of a standby node).
    joined_at: Option<u64>,
}

impl<R: petrel_messages::RemoteMessage<Reply = ()>> WorkerCtx<'_, R> {
    /// This worker's id.
    pub fn worker(&self) -> u32 {
        self.client.worker()
    }

    /// Number of workers of the job.
    pub fn n_workers(&self) -> u32 {
        self.layout.n_workers()
    }

    /// The ids of the job's current workers, sorted: all of them with a fixed membership;
    /// else those whose node is a member now (a joiner once its node joined, a leaver until
    /// its node left), this worker always among them. A worker's data is its share by rank
    /// in this list, taken again at a clock boundary when the list changes.
    pub fn current_workers(&self) -> Vec<u32> {
        if !self.elastic {
            return (0..self.n_workers()).collect();
        }
        members_now(self.node, self.layout, Some(self.worker()))
    }

    /// The clock this worker joined the running job at (a worker of a standby node).
    pub fn joined_at(&self) -> Option<u64> {
        self.joined_at
    }

    /// [`WorkerDone::of`] with measured timings and the bytes its node sent and received.
    pub fn measured(&self, table: TableId, compute_s: f64, wait_s: f64, run_s: f64) -> WorkerDone {
        let net = self.node.net_stats();
        WorkerDone {
            compute_s,
            wait_s,
            sent_bytes: net.sent_bytes,
            received_bytes: net.received_bytes,
            run_s,
            ..self.done(table)
        }
    }

    /// [`WorkerDone::of`] with when this worker joined and left a running job, if it did.
    pub fn done(&self, table: TableId) -> WorkerDone {
        let drained = self.node.is_leave_requested();
        WorkerDone {
            joined_at: self.joined_at,
            left_at: drained.then(|| self.client.current_clock()),
            ..WorkerDone::of(self.client, table)
        }
    }

    /// Sends a progress report to the monitor (without waiting for it).
    pub fn report(&self, report: R) -> Result<(), PsError> {
        self.monitor
            .tell(report, Priority::HIGH)
            .map_err(|source| PsError::Report {
                worker: self.worker(),
                source,
            })
    }
}

/// The workers whose node is a member in `node`'s view now, and `me` (see
/// [`crate::core::membership::current_workers`]).
pub(crate) fn members_now(node: &Node, layout: &PsLayout, me: Option<u32>) -> Vec<u32> {
    let view = node.view();
    let is_member = |name: &str| view.members.iter().any(|m| m.name == name);
    crate::core::membership::current_workers(&layout.worker_nodes, is_member, me)
}

pub(crate) async fn worker_role<A: PsApp>(
    ctx: NodeContext,
    job: Arc<PsJob<A>>,
) -> Result<(), PsError> {
    let live = job.live_shards();
    let shards = (&job.layout, live.as_slice());
    shells::wait_for_shards_of(&ctx.node, shards, SHARDS_READY_TIMEOUT).await?;
    let resumed = job.resumed()?;
    let elastic = ctx.settings.allows_membership_changes();
    let mut workers = Vec::new();
    for w in job.layout.workers_on(&ctx.spec.name) {
        // A joiner starts at a clock no shard's min clock is above.
        let joined_at = match job.standby.contains(&w) {
            true => Some(shells::admit_everywhere(&ctx.node, shards, w).await?),
            false => None,
        };
        let clock = joined_at.unwrap_or_else(|| resumed.as_ref().map_or(0, |ck| ck.clock));
        let client = PsClient::start_at(&ctx.node, &job.layout, w, job.app.tables(), clock)?;
        let placement = job.shard_set().placement.clone();
        if let Some(p) = placement {
            client.install_placement(p)?;
        }
        let saved = (resumed.as_ref())
            .map(|ck| ck.piece(Piece::Worker(w)).map(<[u8]>::to_vec))
            .transpose()?;
        let membership = (elastic, joined_at);
        workers.push(run_worker(&ctx.node, &job, client, saved, membership));
    }
    for r in futures::future::join_all(workers).await {
        r?;
    }
    if ctx.node.is_leave_requested() {
        tracing::info!(node = %ctx.spec.name, "ps workers drained; leaving");
        ctx.node.leave_when_done();
    }
    Ok(())
}

async fn run_worker<A: PsApp>(
    node: &Node,
    job: &PsJob<A>,
    client: PsClient,
    saved: Option<Vec<u8>>,
    (elastic, joined_at): (bool, Option<u64>),
) -> Result<(), PsError> {
    let ctx = WorkerCtx {
        node,
        client: &client,
        layout: &job.layout,
        monitor: node.actor_at::<A::Report>(&job.monitor_node, A::MONITOR_ACTOR)?,
        elastic,
        joined_at,
    };
    let mut state = match saved {
        Some(bytes) => job.app.resume_worker(&bytes, &ctx)?,
        None => job.app.start_worker(&ctx)?,
    };
    let checkpoints = job.writing();
    // With shards that join and leave: the coordinator a worker reports its pauses to.
    let coordinator = (job.shard_set().placement.is_some())
        .then(|| node.actor_at::<PlacementNote>(&job.monitor_node, &coordinator_actor::<A>()))
        .transpose()?;
    if let Some(c) = &coordinator {
        client.follow_shard_changes(c.clone());
    }
    // A node asked to leave drains at a clock boundary: its updates so far stay applied.
    while client.stop_requested().is_none() && !node.is_leave_requested() {
        match job.app.step(&mut state, &ctx).await? {
            PsStep::Clock => client.clock()?,
            PsStep::Barrier => client.barrier().await?,
            PsStep::Done => break,
        }
        let clock = client.current_clock();
        if let Some((dir, every)) = checkpoints
            && is_checkpoint_clock(every, clock)
        {
            // What this worker needs to start `clock` (the shards save the same boundary).
            let bytes = job.app.save_worker(&state, &ctx)?;
            let piece = Piece::Worker(client.worker());
            checkpoints::save_piece::<A>(node, &job.monitor_node, (dir, clock), piece, &bytes)?;
        }
        if let Some(c) = &coordinator {
            client.shard_change_boundary(c).await?;
        }
        // Cache hits never yield: let the node's actors run between clocks.
        tokio::task::yield_now().await;
    }
    // A drained worker may owe the shards one more clock (ps-lda gives its documents up).
    if node.is_leave_requested() && job.app.leave_worker(&mut state, &ctx)? {
        client.clock()?;
    }
    client.leave()?;
    if let Some(c) = &coordinator {
        let gone = PlacementNote::Gone {
            worker: client.worker(),
        };
        if let Err(e) = c.tell(gone, Priority::HIGH) {
            tracing::debug!(worker = client.worker(), error = %e, "end not told");
        }
    }
    let done = job.app.finish_worker(state, &ctx)?;
    ctx.monitor
        .ask(done, Priority::HIGH, node.default_timeout())
        .await
        .map_err(|source| PsError::Report {
            worker: client.worker(),
            source,
        })
}
