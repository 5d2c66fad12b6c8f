//! Shards that join and leave a running job: the shard set a process knows
//! ([`ShardSet`]) and the coordinator on the monitor's node that changes it at a clock
//! boundary ([`Coordinator`], the shell of [`Reshard`]).

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use petrel_actors::Node;
use petrel_messages::Priority;

use crate::core::placement::{Placement, Reshard, ReshardStep};
use crate::core::shard::TableSnapshot;
use crate::core::types::{Clock, WorkerId};
use crate::error::PsError;
use crate::kit::monitor::{MonitorReports, open_monitor};
use crate::kit::{PsApp, PsJob, WorkerChange};
use crate::shells::{
    self, PlacementNote, ShardQuery, ToClient, client_actor_name, shard_actor_name,
};

/// The registry name of `A`'s coordinator of shard changes (on the monitor's node).
pub(crate) fn coordinator_actor<A: PsApp>() -> String {
    format!("{}-placement", A::MONITOR_ACTOR)
}

/// The shard set of a job whose shards join and leave, as this process knows it.
#[derive(Debug, Default)]
pub(crate) struct ShardSet {
    /// The placement in force (`None`: the layout's shards, fixed).
    pub placement: Option<Placement>,
    /// The shards at the start (all of the layout's but the standby ones).
    pub starting: usize,
    /// Per change, the cut and the number of shards after it: evaluation cuts of clocks
    /// above the cut come from that many shards.
    pub counts: Vec<(Clock, usize)>,
    /// The evaluation cuts shards handed in as they left, for the monitor.
    pub cuts: Vec<(Clock, Vec<TableSnapshot>)>,
    /// The changes so far (`metrics.json`'s `changes`).
    pub changes: Vec<WorkerChange>,
}

impl ShardSet {
    /// The shards serving now: the placement's, or every one of `n_shards`.
    pub fn live(&self, n_shards: u32) -> Vec<u32> {
        match &self.placement {
            Some(p) => p.shards(),
            None => (0..n_shards).collect(),
        }
    }

    /// How many shards keep the evaluation cut of `clock`.
    pub fn shards_at(&self, clock: Clock, n_shards: u32) -> usize {
        (self.counts.iter().rev())
            .find(|(cut, _)| *cut < clock)
            .map_or(
                match self.placement {
                    Some(_) => self.starting,
                    None => n_shards as usize,
                },
                |(_, n)| *n,
            )
    }
}

/// A shard that joins or leaves, as the coordinator queues it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Join(u32),
    Leave(u32),
}

/// The coordinator of shard changes: runs each queued change as a [`Reshard`] (see
/// [`crate::core::placement`]), between two of the monitor's evaluations.
pub(crate) struct Coordinator {
    notes: MonitorReports<PlacementNote>,
    queue: VecDeque<Change>,
    /// Workers that ended their run.
    gone: BTreeSet<u32>,
}

/// How long the coordinator waits for one note before it checks its state again.
const NOTE_WAIT: Duration = Duration::from_millis(200);

impl Coordinator {
    /// Opens the coordinator's inbox on the monitor's node.
    pub fn open<A: PsApp>(node: &Node) -> Result<Coordinator, PsError> {
        Ok(Coordinator {
            notes: open_monitor::<PlacementNote>(node, &coordinator_actor::<A>())?,
            queue: VecDeque::new(),
            gone: BTreeSet::new(),
        })
    }

    /// Takes the notes that arrived: queues shard changes, drops stale pauses.
    fn take_notes(
        &mut self,
        mut reshard: Option<&mut Reshard>,
    ) -> Result<Vec<ReshardStep>, PsError> {
        let notes: Vec<PlacementNote> = self.notes.reports.borrow_mut().drain(..).collect();
        let mut steps = Vec::new();
        for n in notes {
            match n {
                PlacementNote::ShardJoined { shard } => self.queue.push_back(Change::Join(shard)),
                PlacementNote::ShardLeaving { shard } => self.queue.push_back(Change::Leave(shard)),
                PlacementNote::Holding { .. } => {}
                PlacementNote::Gone { worker } => {
                    self.gone.insert(worker);
                    steps.extend(reshard.as_deref_mut().map(|r| r.gone(worker)));
                }
                PlacementNote::Paused { worker, clock } => {
                    if let Some(r) = reshard.as_deref_mut() {
                        steps.push(r.paused(worker, clock)?);
                    }
                }
            }
        }
        Ok(steps)
    }

    /// Runs every queued change (none with a fixed shard set).
    pub async fn run<A: PsApp>(&mut self, node: &Node, job: &PsJob<A>) -> Result<(), PsError> {
        self.take_notes(None)?;
        while let Some(change) = self.queue.pop_front() {
            let started = Instant::now();
            let Some(current) = job.shard_set().placement.clone() else {
                return Ok(());
            };
            let mut after = current.shards();
            match change {
                Change::Join(s) if !after.contains(&s) => after.push(s),
                Change::Leave(s) if after.len() > 1 => after.retain(|&x| x != s),
                _ => {
                    tracing::warn!(
                        ?change,
                        "shard change ignored (nothing to do, or the last shard)"
                    );
                    continue;
                }
            }
            let workers = (0..job.layout.n_workers())
                .filter(|w| !job.standby.contains(w) && !self.gone.contains(w));
            let mut r = Reshard::new(&current, &after, workers)?;
            let Some(cut) = self.pause_workers(node, job, &mut r).await? else {
                // The workers ended first: nothing to move the rows for; a joiner stops.
                if let Change::Join(s) = change {
                    stop_joiner(node, &job.layout, &current, s)?;
                }
                continue;
            };
            self.hand_over(node, job, &current, &r, cut).await?;
            let (shard, what) = match change {
                Change::Join(s) => (s, "shard joined"),
                Change::Leave(s) => (s, "shard left"),
            };
            let seconds = started.elapsed().as_secs_f64();
            tracing::info!(shard, what, cut, seconds, "ps shards changed");
            job.shard_set().changes.push(WorkerChange {
                worker: shard,
                change: what.into(),
                clock: cut,
            });
        }
        Ok(())
    }

    /// Takes no more changes once every worker ended and the final tables were read: later
    /// notes are refused (a shard that joins then stops itself, one that leaves goes with
    /// its rows), and the joiners that announced themselves meanwhile are stopped.
    pub fn close<A: PsApp>(&mut self, node: &Node, job: &PsJob<A>) -> Result<(), PsError> {
        self.notes.closed.set(true);
        let notes: Vec<PlacementNote> = self.notes.reports.borrow_mut().drain(..).collect();
        let joined = notes.into_iter().filter_map(|n| match n {
            PlacementNote::ShardJoined { shard } => Some(shard),
            _ => None,
        });
        let queued = self.queue.drain(..).filter_map(|c| match c {
            Change::Join(s) => Some(s),
            Change::Leave(_) => None,
        });
        let Some(current) = job.shard_set().placement.clone() else {
            return Ok(());
        };
        for s in queued.collect::<Vec<_>>().into_iter().chain(joined) {
            stop_joiner(node, &job.layout, &current, s)?;
        }
        Ok(())
    }

    /// Pauses every worker of `r` at one clock boundary; returns the cut (`None`: every
    /// worker ended its run first).
    async fn pause_workers<A: PsApp>(
        &mut self,
        node: &Node,
        job: &PsJob<A>,
        r: &mut Reshard,
    ) -> Result<Option<Clock>, PsError> {
        let epoch = r.next().epoch();
        loop {
            if r.workers().is_empty() {
                return Ok(None);
            }
            // Again until answered: a worker's inbox may not be open yet.
            tell_workers(node, job, &r.unreported(), || ToClient::Pause { epoch })?;
            let notify = self.notes.notify.clone();
            let notified = notify.notified();
            for step in self.take_notes(Some(r))? {
                match step {
                    ReshardStep::Wait => {}
                    ReshardStep::Cut(cut) => {
                        tell_workers(node, job, &r.workers(), || ToClient::Cut { epoch, cut })?;
                    }
                    ReshardStep::HandOver(cut) => return Ok(Some(cut)),
                }
            }
            let _ = tokio::time::timeout(NOTE_WAIT, notified).await;
        }
    }

    /// Moves the rows at `cut` (every worker paused there) and resumes the workers.
    async fn hand_over<A: PsApp>(
        &mut self,
        node: &Node,
        job: &PsJob<A>,
        current: &Placement,
        r: &Reshard,
        cut: Clock,
    ) -> Result<(), PsError> {
        let (layout, next) = (&job.layout, r.next());
        let old = current.shards();
        // The workers' last batches of clock `cut - 1` may still be on their way.
        shells::wait_for_min_clock(node, (layout, &old), cut).await?;
        let query = ShardQuery::HandOver { next: next.clone() };
        let timeout = node.default_timeout();
        let given = shells::snapshot_of(node, (layout, &old), query, timeout).await?;
        let mut rows: Vec<(u32, TableSnapshot)> = Vec::new();
        for state in given {
            job.shard_set().cuts.extend(state.eval_cuts);
            for snap in state.tables {
                split(next, snap, &mut rows);
            }
        }
        let members: Vec<WorkerId> = r.workers().into_iter().map(WorkerId).collect();
        for s in next.shards() {
            let tables = (rows.iter())
                .filter(|(to, _)| *to == s)
                .map(|(_, t)| t.clone())
                .collect();
            let query = ShardQuery::TakeOver {
                next: next.clone(),
                joining: (!old.contains(&s)).then(|| (cut, members.clone())),
                tables,
            };
            shells::snapshot_of(node, (layout, &[s]), query, timeout).await?;
        }
        {
            let mut set = job.shard_set();
            set.placement = Some(next.clone());
            set.counts.push((cut, next.shards().len()));
        }
        for &s in old.iter().filter(|s| !next.has(**s)) {
            let shard =
                node.actor_at::<ShardQuery>(&layout.shard_nodes[s as usize], &shard_actor_name(s))?;
            if let Err(e) = shard.tell(ShardQuery::Retire, Priority::HIGH) {
                tracing::warn!(shard = s, error = %e, "retire not sent");
            }
        }
        let placement = next.clone();
        tell_workers(node, job, &r.workers(), || ToClient::Resume {
            placement: placement.clone(),
        })
    }
}

/// Stops joining shard `shard` of a job whose workers all ended: it takes `current` with no
/// members and no rows. Told, not asked: the joiner stops at once, and an answer could be
/// lost.
pub(crate) fn stop_joiner(
    node: &Node,
    layout: &shells::PsLayout,
    current: &Placement,
    shard: u32,
) -> Result<(), PsError> {
    let query = ShardQuery::TakeOver {
        next: current.clone(),
        joining: Some((0, Vec::new())),
        tables: Vec::new(),
    };
    let Some(at) = layout.shard_nodes.get(shard as usize) else {
        tracing::warn!(shard, "stop not sent: no such shard");
        return Ok(());
    };
    let to = node.actor_at::<ShardQuery>(at, &shard_actor_name(shard))?;
    if let Err(e) = to.tell(query, Priority::HIGH) {
        tracing::warn!(shard, error = %e, "stop not sent");
    }
    Ok(())
}

/// Adds `snap`'s rows to `out`, split by their owner under `next`.
fn split(next: &Placement, snap: TableSnapshot, out: &mut Vec<(u32, TableSnapshot)>) {
    for (row, data) in snap.rows {
        let to = next.shard_of(snap.table, row);
        match out
            .iter_mut()
            .find(|(s, t)| *s == to && t.table == snap.table)
        {
            Some((_, t)) => t.rows.push((row, data)),
            None => out.push((
                to,
                TableSnapshot {
                    table: snap.table,
                    rows: vec![(row, data)],
                },
            )),
        }
    }
}

/// Sends `msg()` to each of `workers` (a worker that already ended is skipped).
fn tell_workers<A: PsApp>(
    node: &Node,
    job: &PsJob<A>,
    workers: &[u32],
    msg: impl Fn() -> ToClient,
) -> Result<(), PsError> {
    for &w in workers {
        let at = &job.layout.worker_nodes[w as usize];
        let c = node.actor_at::<ToClient>(at, &client_actor_name(w))?;
        if let Err(e) = c.tell(msg(), Priority::HIGH) {
            tracing::debug!(worker = w, error = %e, "shard change not sent (the worker ended)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
