//! Questions to every shard of a job: snapshots, readiness, min-clock waits.

use std::collections::HashMap;
use std::time::Duration;

use petrel_messages::Priority;

use crate::core::shard::TableSnapshot;
use crate::core::types::{Clock, Row, RowId, TableId, WorkerId};
use crate::error::PsError;
use crate::shells::layout::PsLayout;
use crate::shells::messages::{ShardQuery, ShardState, shard_actor_name};
use petrel_actors::node::Node;

/// Asks every shard for its state (tables and min clock), in shard order.
pub async fn snapshot_all(
    node: &Node,
    layout: &PsLayout,
    query: ShardQuery,
    timeout: Duration,
) -> Result<Vec<ShardState>, PsError> {
    snapshot_of(node, (layout, &all_shards(layout)), query, timeout).await
}

/// The ids of every shard of `layout`.
fn all_shards(layout: &PsLayout) -> Vec<u32> {
    (0..layout.n_shards()).collect()
}

/// Shards `ids` of a layout: those a question goes to (the current ones, when shards join
/// and leave).
pub type Shards<'a> = (&'a PsLayout, &'a [u32]);

/// [`snapshot_all`] of the shards `shards`, in their order.
pub async fn snapshot_of(
    node: &Node,
    (layout, ids): Shards<'_>,
    query: ShardQuery,
    timeout: Duration,
) -> Result<Vec<ShardState>, PsError> {
    let mut futs = Vec::new();
    for &shard in ids {
        let n = (layout.shard_nodes.get(shard as usize)).ok_or(
            crate::core::error::PsCoreError::InvalidConfig(format!("no shard {shard}")),
        )?;
        let r = node.actor_at::<ShardQuery>(n, &shard_actor_name(shard))?;
        let q = query.clone();
        futs.push(async move {
            r.ask(q, Priority::HIGH, timeout)
                .await
                .map_err(|source| PsError::ShardQuery {
                    shard,
                    node: n.clone(),
                    source,
                })
        });
    }
    futures::future::join_all(futs).await.into_iter().collect()
}

/// Waits until every shard of `layout` is registered and answers.
pub async fn wait_for_shards(
    node: &Node,
    layout: &PsLayout,
    timeout: Duration,
) -> Result<(), PsError> {
    wait_for_shards_of(node, (layout, &all_shards(layout)), timeout).await
}

/// [`wait_for_shards`] of the shards `shards`.
pub async fn wait_for_shards_of(
    node: &Node,
    shards: Shards<'_>,
    timeout: Duration,
) -> Result<(), PsError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match snapshot_of(node, shards, ShardQuery::Ping, Duration::from_millis(500)).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(PsError::ShardsNotReady {
                    timeout,
                    source: Box::new(e),
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "waiting for ps shards");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Polls every shard (up to the request timeout) until `done` holds for each.
async fn poll_shards(
    node: &Node,
    shards: Shards<'_>,
    done: impl Fn(&ShardState) -> bool,
    timed_out: impl FnOnce(Duration) -> PsError,
) -> Result<(), PsError> {
    let timeout = node.default_timeout();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let states = snapshot_of(node, shards, ShardQuery::Ping, timeout).await?;
        if states.iter().all(&done) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(timed_out(timeout));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits (up to the request timeout) until the min clock of every shard of `shards` is at
/// least `clock`.
pub async fn wait_for_min_clock(
    node: &Node,
    shards: Shards<'_>,
    clock: u64,
) -> Result<(), PsError> {
    let timed_out = |timeout| PsError::ClockTimeout { clock, timeout };
    poll_shards(node, shards, |s| s.min_clock >= clock, timed_out).await
}

/// Admits `worker` (of a standby node) on every shard at one clock, which it returns: each
/// shard admits at `max(asked, its min clock)`, and while the answers differ the worker asks
/// again with the largest (a shard only raises it, and the largest never lowers a shard's
/// min clock). A shard's min clock can move between two asks, so this may take a few rounds.
pub async fn admit_everywhere(
    node: &Node,
    shards: Shards<'_>,
    worker: u32,
) -> Result<Clock, PsError> {
    let mut clock = 0;
    loop {
        let query = ShardQuery::Admit {
            worker: WorkerId(worker),
            clock,
        };
        let states = snapshot_of(node, shards, query, node.default_timeout()).await?;
        let answers: Vec<Clock> = states.iter().map(|s| s.admitted_at.unwrap_or(0)).collect();
        match crate::core::membership::admission(&answers) {
            Ok(at) => {
                tracing::info!(worker, clock = at, "ps worker joined");
                return Ok(at);
            }
            Err(largest) => clock = largest,
        }
    }
}

/// The number of workers that ever joined the job: the most any shard saw.
pub async fn workers_joined(node: &Node, shards: Shards<'_>) -> Result<u32, PsError> {
    let states = snapshot_of(node, shards, ShardQuery::Ping, node.default_timeout()).await?;
    Ok(states.iter().map(|s| s.workers_joined).max().unwrap_or(0))
}

/// Waits (up to the request timeout) until every worker that joined left every shard.
pub async fn wait_for_all_left(node: &Node, shards: Shards<'_>) -> Result<(), PsError> {
    let all = |s: &ShardState| s.workers_left >= s.workers_joined;
    poll_shards(node, shards, all, |timeout| PsError::WorkersNotLeft {
        timeout,
    })
    .await
}

/// Merges shard states into one map per table.
pub fn merge_tables(states: &[ShardState]) -> HashMap<TableId, HashMap<RowId, Row>> {
    merge_snapshots(states.iter().flat_map(|s| s.tables.iter().cloned()))
}

/// Merges table snapshots (of different shards) into one map per table.
pub(crate) fn merge_snapshots(
    snapshots: impl IntoIterator<Item = TableSnapshot>,
) -> HashMap<TableId, HashMap<RowId, Row>> {
    let mut out: HashMap<TableId, HashMap<RowId, Row>> = HashMap::new();
    for snapshot in snapshots {
        out.entry(snapshot.table).or_default().extend(snapshot.rows);
    }
    out
}
