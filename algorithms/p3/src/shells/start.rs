//! Where a worker starts: worker 0 sends the initial values to the shards and every worker
//! starts from them (a fixed membership, or a checkpoint's round), or, when the workers may
//! change, each worker pulls the values it starts from.

use std::time::Duration;

use petrel_actors::{ActorRef, AskError, NodeContext};
use petrel_messages::{Priority, RemoteMessage};

use crate::checkpoint::assemble_params;
use crate::core::SlicePlan;
use crate::core::slicing::owner;
use crate::error::P3Error;
use crate::kit::{P3Job, StepStats};
use crate::shells::messages::{InitSlice, PullSlice};
use crate::shells::shard::SHARD_ACTOR;

/// Worker 0 sends every slice's initial values to its shard.
pub(super) async fn init_shards(
    ctx: &NodeContext,
    job: &P3Job,
    shard_nodes: &[String],
) -> Result<(), P3Error> {
    let plan = job.plan()?;
    let inits = plan.slices().iter().map(|s| {
        let a = s.offset as usize;
        let values = job.initial[s.layer][a..a + s.len as usize].to_vec();
        let msg = InitSlice {
            slice: s.id as u32,
            values,
        };
        let target = ctx
            .node
            .actor_at::<InitSlice>(&shard_nodes[s.shard], SHARD_ACTOR);
        let timeout = job.ask_timeout;
        async move {
            target?
                .ask(msg, Priority::NORMAL, timeout)
                .await
                .map_err(|source| P3Error::InitSlice {
                    slice: s.id,
                    source,
                })
        }
    });
    for r in futures::future::join_all(inits).await {
        r?;
    }
    Ok(())
}

/// The ids of the nodes of `role` in the cluster now (standby ones once they joined).
pub(super) fn live_in(ctx: &NodeContext, role: &str) -> Vec<usize> {
    let all = ctx.nodes_with_role(role);
    ctx.members_with_role(role)
        .iter()
        .filter_map(|n| all.iter().position(|a| a == n))
        .collect()
}

/// Worker `me` pulls every slice: the values it starts from, which the shards give once
/// they count it in ([`PullSlice`]; a shard not started yet is asked again,
/// [`ask_started`]). Returns the iteration it starts (the job's end when it joined too
/// late), the parameters and the iteration's workers and shards.
pub(super) async fn pull_params(
    ctx: &NodeContext,
    job: &P3Job,
    plan: &SlicePlan,
    shard_nodes: &[String],
    me: usize,
) -> Result<(u64, Vec<Vec<f32>>, Vec<usize>, Vec<usize>), P3Error> {
    // Slice 0 stays on shard 0 (which never leaves): its answer, once this worker is a
    // member, names the shards that own the other slices at the iteration it starts.
    let pull = |id: usize, shards: &[usize]| {
        let s = plan.slices()[id];
        let target = ctx
            .node
            .actor_at::<PullSlice>(&shard_nodes[owner(id, shards)], SHARD_ACTOR);
        let (priority, timeout) = (s.priority, job.ask_timeout);
        async move {
            let msg = || PullSlice {
                worker: me as u32,
                slice: s.id as u32,
            };
            ask_started(&target?, msg, priority, timeout)
                .await
                .map_err(|source| P3Error::Push {
                    slice: s.id,
                    iter: 0,
                    source,
                })
        }
    };
    let first = pull(0, &[0]).await?;
    let shards: Vec<usize> = first.shards.iter().map(|&s| s as usize).collect();
    let rest = (1..plan.slices().len()).map(|id| pull(id, &shards));
    let pulls = std::iter::once(Ok(first)).chain(futures::future::join_all(rest).await);
    let mut params: Vec<Vec<f32>> = job.initial.iter().map(|t| vec![0.0; t.len()]).collect();
    let mut start = None;
    let mut members = Vec::new();
    for (s, v) in plan.slices().iter().zip(pulls) {
        let v = v?;
        if *start.get_or_insert(v.iter) != v.iter || v.values.len() as u64 != s.len {
            return Err(P3Error::Core(crate::core::P3CoreError::WrongIteration {
                slice: s.id,
                expected: start.unwrap_or(v.iter),
                got: v.iter,
            }));
        }
        let a = s.offset as usize;
        params[s.layer][a..a + v.values.len()].copy_from_slice(&v.values);
        members = v.workers.iter().map(|&w| w as usize).collect();
    }
    Ok((start.unwrap_or(job.iterations), params, members, shards))
}

/// Asks `target` `msg()`, again every 20 ms for at most 5 s while its node is up but the
/// actor is not registered yet (a node that just started or joined).
pub(crate) async fn ask_started<M: RemoteMessage>(
    target: &ActorRef<M>,
    msg: impl Fn() -> M,
    priority: Priority,
    timeout: Duration,
) -> Result<M::Reply, AskError> {
    let mut attempts = 0;
    loop {
        match target.ask(msg(), priority, timeout).await {
            Err(AskError::Remote { error, .. }) if attempts < 250 && error.contains("no actor") => {
                attempts += 1;
                tracing::debug!(%error, "actor not started yet; asking again");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => return r,
        }
    }
}

/// Where worker `me` starts: round 0 from the job's initial parameters, or a resumed
/// worker at the checkpoint's round from the shards' parameters and its own statistics.
#[allow(clippy::type_complexity)]
pub(super) fn resume_state(
    job: &P3Job,
    plan: &SlicePlan,
    me: usize,
) -> Result<(u64, Vec<Vec<f32>>, Vec<Option<StepStats>>), P3Error> {
    Ok(match job.resume_point()? {
        Some(ck) => {
            let round = ck.round;
            let params = assemble_params(plan, &ck.shards)?;
            let mine = ck
                .workers
                .into_iter()
                .nth(me)
                .ok_or(P3Error::CheckpointRound {
                    round,
                    detail: format!("no file of worker {me}"),
                })?;
            tracing::info!(worker = me, round, "p3 worker resumes from its checkpoint");
            (round, params, mine.stats)
        }
        None => (
            0,
            job.initial.to_vec(),
            Vec::with_capacity(job.iterations as usize),
        ),
    })
}
