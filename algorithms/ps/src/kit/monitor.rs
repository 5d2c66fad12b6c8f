//! The monitor role: the report inbox, periodic evaluation, stop requests, the outputs.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use petrel_actors::checkpoint::PartEntry;
use petrel_actors::{HandlerError, Msg, Node, NodeContext};
use petrel_messages::{Priority, RemoteMessage, remote_message};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::core::checkpoint::{CheckpointTracker, Piece};
use crate::core::stats::{ReadStats, StalenessStats};
use crate::core::types::{Row, RowId, TableId};
use crate::error::PsError;
use crate::kit::checkpoints::{self, MonitorPiece};
use crate::kit::job::SHARDS_READY_TIMEOUT;
use crate::kit::reshard::{Coordinator, ShardSet};
use crate::kit::{MonitorState, PsApp, PsJob, PsSaved, decode, encode};
use crate::shells::{
    self, PsClient, PsLayout, ShardQuery, ShardState, ToClient, client_actor_name,
};
use petrel_actors::durable::FileDigest;

/// The usual final report of a worker (ps-mf, ps-lr).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerDone {
    /// The worker.
    pub worker: u32,
    /// Clocks it completed.
    pub clocks: u64,
    /// Staleness of its reads of the shared table.
    pub staleness: StalenessStats,
    /// Seconds it computed.
    pub compute_s: f64,
    /// Seconds it waited for rows.
    pub wait_s: f64,
    /// Bytes its node sent (0 when the app does not measure them).
    #[serde(default)]
    pub sent_bytes: u64,
    /// Bytes its node received (0 when the app does not measure them).
    #[serde(default)]
    pub received_bytes: u64,
    /// What its reads cost (requests, blocking round trips, time blocked).
    #[serde(default)]
    pub reads: ReadStats,
    /// Seconds from its first step to this report (0 when the app does not measure it).
    #[serde(default)]
    pub run_s: f64,
    /// Content staleness of its reads of the shared table (per read and other writer, the
    /// clocks of that writer's updates the copy lacks; empty without content clocks).
    #[serde(default)]
    pub content_staleness: StalenessStats,
    /// The clock it joined the running job at (a worker of a standby node).
    #[serde(default)]
    pub joined_at: Option<u64>,
    /// The clock it drained and left at, when its node was asked to leave.
    #[serde(default)]
    pub left_at: Option<u64>,
}
remote_message!(WorkerDone => (), "petrel.ps.mf.worker_done");

impl WorkerDone {
    /// The report of `client`'s worker: its clocks and reads of `table` (no timings).
    pub fn of(client: &PsClient, table: TableId) -> WorkerDone {
        WorkerDone {
            worker: client.worker(),
            clocks: client.current_clock(),
            staleness: client.table_stats(table),
            content_staleness: client.content_stats(table),
            reads: client.read_stats(),
            ..WorkerDone::default()
        }
    }
}

/// A worker that joined or left a running job (`metrics.json`'s `changes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerChange {
    /// The worker.
    pub worker: u32,
    /// `joined` or `left`.
    pub change: String,
    /// The clock it joined at or left at.
    pub clock: u64,
}

impl WorkerChange {
    /// The joins and leaves in `reports`, by clock (empty with a fixed membership).
    pub fn of_reports(reports: &[WorkerDone]) -> Vec<WorkerChange> {
        let change = |worker, change: &str, clock| WorkerChange {
            worker,
            change: change.into(),
            clock,
        };
        let mut out: Vec<WorkerChange> = (reports.iter())
            .flat_map(|r| {
                let joined = r.joined_at.map(|c| change(r.worker, "joined", c));
                joined
                    .into_iter()
                    .chain(r.left_at.map(|c| change(r.worker, "left", c)))
            })
            .collect();
        out.sort_by_key(|c| (c.clock, c.worker));
        out
    }
}

/// A monitor's inbox: collects the workers' reports of type `M` (replies `()`).
struct MonitorInbox<M>(MonitorReports<M>);

impl<M: 'static> Actor for MonitorInbox<M> {
    type Context = Context<Self>;
}

impl<M: RemoteMessage<Reply = ()>> Handler<Msg<M>> for MonitorInbox<M> {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<M>, _: &mut Context<Self>) -> Self::Result {
        if self.0.closed.get() {
            return Err(HandlerError::new(INBOX_CLOSED));
        }
        self.0.reports.borrow_mut().push(msg.body);
        self.0.notify.notify_waiters();
        Ok(())
    }
}

/// The reports a monitor has received, and a signal for each new one.
pub struct MonitorReports<M> {
    /// Reports not yet taken.
    pub reports: Rc<RefCell<Vec<M>>>,
    /// Notified on every new report.
    pub notify: Rc<Notify>,
    /// Set once no more reports are taken: later ones are refused.
    pub(crate) closed: Rc<Cell<bool>>,
}

/// The refusal of a report to a closed inbox, as its sender reads it back.
const INBOX_CLOSED: &str = "the job ended: this inbox takes no more reports";

/// Whether `error` answered a report to an inbox already closed.
pub(crate) fn is_refused_as_closed(error: &petrel_actors::AskError) -> bool {
    error.to_string().contains(INBOX_CLOSED)
}

/// Starts a monitor inbox registered as `actor` on this node for reports of type `M`.
pub fn open_monitor<M: RemoteMessage<Reply = ()>>(
    node: &Node,
    actor: &str,
) -> Result<MonitorReports<M>, PsError> {
    let reports = MonitorReports {
        reports: Rc::new(RefCell::new(Vec::new())),
        notify: Rc::new(Notify::new()),
        closed: Rc::new(Cell::new(false)),
    };
    let inbox = MonitorInbox(MonitorReports {
        reports: reports.reports.clone(),
        notify: reports.notify.clone(),
        closed: reports.closed.clone(),
    });
    node.register(actor, inbox.start())?.accept::<M>();
    Ok(reports)
}

/// What the monitor's code sees: the node, the layout and the time since it started.
pub struct MonitorCtx<'a> {
    /// The monitor's node.
    pub node: &'a Node,
    /// Where shards and workers run.
    pub layout: &'a PsLayout,
    start: Instant,
    /// Seconds the job had run before the checkpoint it resumed from.
    offset_s: f64,
    /// Whether workers may join and leave the job.
    elastic: bool,
    /// The shard set (current shards, their counts by clock, the cuts of departed ones).
    shards: &'a std::sync::Mutex<ShardSet>,
}

impl MonitorCtx<'_> {
    /// Records a point of the job's history curve for `/metrics` and the dashboard.
    pub fn progress(&self, metric: &str, value: f64) {
        petrel_observe::metrics()
            .job
            .point(self.node.name(), metric, self.start.elapsed(), value);
    }

    /// The ids of the job's current workers, sorted: all of them with a fixed membership,
    /// else those whose node is a member now (a joiner once its node joined, a leaver until
    /// its node left).
    pub fn current_workers(&self) -> Vec<u32> {
        if !self.elastic {
            return (0..self.layout.n_workers()).collect();
        }
        crate::kit::worker::members_now(self.node, self.layout, None)
    }

    /// Seconds since the monitor started, plus the time before a resumed checkpoint.
    pub fn elapsed_s(&self) -> f64 {
        self.offset_s + self.start.elapsed().as_secs_f64()
    }

    /// Every shard's tables and min clock, in shard order.
    pub async fn snapshot(&self) -> Result<Vec<ShardState>, PsError> {
        self.query(ShardQuery::Snapshot).await
    }

    /// Every current shard's answer to `query`, in shard order.
    async fn query(&self, query: ShardQuery) -> Result<Vec<ShardState>, PsError> {
        let timeout = self.node.default_timeout();
        let live = self.live_shards();
        shells::snapshot_of(self.node, (self.layout, &live), query, timeout).await
    }

    fn shard_set(&self) -> std::sync::MutexGuard<'_, ShardSet> {
        // A poisoned lock means a role panicked; the set itself is still whole.
        (self.shards.lock()).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shards serving now (all of the layout's unless shards join and leave).
    pub fn live_shards(&self) -> Vec<u32> {
        self.shard_set().live(self.layout.n_shards())
    }

    /// How many shards keep the evaluation cut of `clock` (shards join and leave).
    pub fn shards_at(&self, clock: u64) -> usize {
        self.shard_set().shards_at(clock, self.layout.n_shards())
    }

    /// The workers (in `reports`) and shards that joined and left, by clock; a shard's
    /// change is `shard joined` or `shard left` at the clock of its hand-over, its id in
    /// `worker`.
    pub fn changes(&self, reports: &[WorkerDone]) -> Vec<WorkerChange> {
        let mut all = WorkerChange::of_reports(reports);
        all.extend(self.shard_set().changes.iter().cloned());
        all.sort_by_key(|c| c.clock);
        all
    }

    /// The merged rows of every table, and the min clock over the shards.
    pub async fn tables(&self) -> Result<(HashMap<TableId, HashMap<RowId, Row>>, u64), PsError> {
        let states = self.snapshot().await?;
        let clock = states.iter().map(|s| s.min_clock).min().unwrap_or(0);
        Ok((shells::merge_tables(&states), clock))
    }

    /// Every shard's evaluation cuts completed since the last call, in shard order.
    pub async fn eval_cuts(&self) -> Result<Vec<ShardState>, PsError> {
        let mut states = self.query(ShardQuery::EvalCuts).await?;
        // The last cuts of shards that left, as they handed them in.
        let departed = std::mem::take(&mut self.shard_set().cuts);
        if let Some(s) = states.first_mut() {
            s.eval_cuts.extend(departed);
        }
        Ok(states)
    }

    /// Waits until every shard's min clock is at least `clock`.
    pub async fn wait_for_min_clock(&self, clock: u64) -> Result<(), PsError> {
        let live = self.live_shards();
        shells::wait_for_min_clock(self.node, (self.layout, &live), clock).await
    }

    fn stop_workers(&self, reason: &str) -> Result<(), PsError> {
        for (w, n) in self.layout.worker_nodes.iter().enumerate() {
            let c = self
                .node
                .actor_at::<ToClient>(n, &client_actor_name(w as u32))?;
            let stop = ToClient::Stop {
                reason: reason.to_string(),
            };
            if let Err(e) = c.tell(stop, Priority::HIGH) {
                tracing::warn!(worker = w, error = %e, "stop not sent");
            }
        }
        Ok(())
    }
}

/// How long the monitor waits for the workers to end before it sends its stop again.
const STOP_RESEND: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) async fn monitor_role<A: PsApp>(
    ctx: NodeContext,
    job: Arc<PsJob<A>>,
) -> Result<(), PsError> {
    let inbox = open_monitor::<A::Report>(&ctx.node, A::MONITOR_ACTOR)?;
    let resumed = job.resumed()?;
    let mut checkpoints = match job.writing() {
        Some((dir, _)) => {
            if resumed.is_none() {
                // Older runs' checkpoints are obsolete.
                crate::checkpoint::clear_job_checkpoints(dir)?;
            }
            Some(MonitorCheckpoints {
                saved: open_monitor::<PsSaved>(&ctx.node, &checkpoints::saved_actor::<A>())?,
                tracker: CheckpointTracker::new(
                    job.layout.n_shards(),
                    job.layout.n_workers(),
                    resumed.as_ref().map(|ck| ck.clock),
                ),
            })
        }
        None => None,
    };
    // Open before anything waits: a shard may announce itself early.
    let mut coordinator = match job.shard_set().placement {
        Some(_) => Some(Coordinator::open::<A>(&ctx.node)?),
        None => None,
    };
    let live = job.live_shards();
    shells::wait_for_shards_of(&ctx.node, (&job.layout, &live), SHARDS_READY_TIMEOUT).await?;
    let (mut state, offset_s) = match &resumed {
        Some(ck) => {
            let bytes = ck.piece(Piece::Monitor)?;
            let piece: MonitorPiece =
                decode(&format!("the monitor's piece of clock {}", ck.clock), bytes)?;
            let what = format!("{} monitor checkpoint", A::NAME);
            (A::Monitor::resume(&what, &piece.app)?, piece.elapsed_s)
        }
        None => (A::Monitor::default(), 0.0),
    };
    let m = MonitorCtx {
        node: &ctx.node,
        layout: &job.layout,
        start: Instant::now(),
        offset_s,
        elastic: ctx.settings.allows_membership_changes(),
        shards: job.shard_set_lock(),
    };
    // Standby workers count once they joined (the shards saw them).
    let n_starting = job.layout.n_workers() as usize - job.standby.len();
    let mut finished = 0usize;
    // When the stop (a one-way message) was last sent: it is repeated every STOP_RESEND.
    let mut stop_sent: Option<Instant> = None;
    loop {
        // Registered before the reports are taken, so none slips by unnoticed.
        let notified = inbox.notify.notified();
        let new: Vec<A::Report> = inbox.reports.borrow_mut().drain(..).collect();
        finished += new.iter().filter(|r| A::is_final(r)).count();
        if let Some(c) = coordinator.as_mut() {
            c.run(m.node, &job).await?;
        }
        let live = m.live_shards();
        let shards = (m.layout, live.as_slice());
        let all_done = finished >= n_starting
            && (job.standby.is_empty()
                || finished >= shells::workers_joined(m.node, shards).await? as usize);
        if all_done {
            // A final report can overtake the worker's last updates: wait for them.
            shells::wait_for_all_left(m.node, shards).await?;
        }
        let stop = job.app.observe(&mut state, &m, new, all_done).await?;
        if let Some(ck) = checkpoints.as_mut() {
            ck.complete(&job, &state, &m)?;
        }
        if all_done {
            break;
        }
        if let Some(reason) = stop
            && stop_sent.is_none_or(|at| at.elapsed() >= STOP_RESEND)
        {
            if stop_sent.is_none() {
                tracing::info!(app = A::NAME, %reason, "monitor stops the workers");
            } else {
                tracing::debug!(app = A::NAME, finished, "stop sent again");
            }
            m.stop_workers(&reason)?;
            stop_sent = Some(Instant::now());
        }
        let _ = tokio::time::timeout(job.app.eval_interval(), notified).await;
    }
    let output = job.app.finish(state, &m).await?;
    if let Some(c) = coordinator.as_mut() {
        c.close(m.node, &job)?;
    }
    job.app.write_outputs(&output)?;
    job.set_result(output);
    Ok(())
}

/// The monitor's side of checkpoints: the pieces reported and which clock is complete.
struct MonitorCheckpoints {
    saved: MonitorReports<PsSaved>,
    tracker: CheckpointTracker<FileDigest>,
}

impl MonitorCheckpoints {
    /// Writes the monitor's piece and the manifest of every clock now complete.
    fn complete<A: PsApp>(
        &mut self,
        job: &PsJob<A>,
        state: &A::Monitor,
        m: &MonitorCtx<'_>,
    ) -> Result<(), PsError> {
        let Some((dir, _)) = job.writing() else {
            return Ok(());
        };
        let notes: Vec<PsSaved> = self.saved.reports.borrow_mut().drain(..).collect();
        for n in notes {
            let Some((clock, files)) = self.tracker.record(n.clock, n.piece, n.name, n.digest)
            else {
                continue;
            };
            let piece = MonitorPiece {
                elapsed_s: m.elapsed_s(),
                app: state.save(clock)?,
            };
            let bytes = encode(&piece)?;
            let mut parts: Vec<PartEntry> = files
                .into_iter()
                .map(|(_, part, digest)| PartEntry { part, digest })
                .collect();
            parts.push(crate::checkpoint::write_piece(
                dir,
                clock,
                Piece::Monitor,
                &bytes,
            )?);
            crate::checkpoint::write_job_manifest(dir, clock, &job.shape(), parts)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changes_are_the_reports_joins_and_leaves_by_clock() {
        let report = |worker, joined_at, left_at| WorkerDone {
            worker,
            joined_at,
            left_at,
            ..WorkerDone::default()
        };
        let reports = [
            report(0, None, Some(9)),
            report(1, None, None),
            report(2, Some(3), None),
        ];
        let changes: Vec<(u32, &str, u64)> = (WorkerChange::of_reports(&reports).iter())
            .map(|c| {
                (
                    c.worker,
                    if c.change == "joined" {
                        "joined"
                    } else {
                        "left"
                    },
                    c.clock,
                )
            })
            .collect();
        assert_eq!(changes, [(2, "joined", 3), (0, "left", 9)]);
        assert!(WorkerChange::of_reports(&[report(0, None, None)]).is_empty());
    }
}
