//! A job ([`PsJob`]): the app, where its pieces run, and its result; the roles that run it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use petrel_actors::settings::OnNodeDeath;
use petrel_actors::{Cluster, NodeContext, Settings};
use petrel_messages::Priority;

use crate::core::checkpoint::Piece;
use crate::core::placement::Placement;
use crate::core::shard::{PsShardCore, not_checkpointable};
use crate::core::types::WorkerId;
use crate::error::PsError;
use crate::kit::monitor::is_refused_as_closed;
use crate::kit::reshard::{ShardSet, coordinator_actor, stop_joiner};
use crate::kit::{PsApp, PsCheckpointing, PsRoles, checkpoints, monitor, worker};
use crate::shells::{self, PlacementNote, PsLayout, ShardEnd};

/// How long a shard waits for the coordinator to take one of its notes.
const NOTE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long workers and the monitor wait for every shard to answer at start-up.
pub(crate) const SHARDS_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The shared pieces of a job, built once per process.
pub struct PsJob<A: PsApp> {
    /// The app (config and data).
    pub app: A,
    /// Where shards and workers run.
    pub layout: PsLayout,
    /// The node of the monitor.
    pub monitor_node: String,
    /// The role names the job's nodes carry.
    pub roles: PsRoles,
    /// Where and how often it checkpoints ([`PsApp::checkpointing`]).
    pub checkpointing: Option<PsCheckpointing>,
    /// Workers of standby nodes: absent until they join.
    pub standby: Vec<u32>,
    /// Shards of standby nodes: they take rows when they join.
    pub standby_shards: Vec<u32>,
    /// The shard set as this process knows it (a placement when shards join and leave).
    shards: Mutex<ShardSet>,
    /// The checkpoint it resumes from, once loaded.
    pub(crate) resumed: Mutex<Option<Arc<crate::checkpoint::JobCheckpoint>>>,
    /// Filled by the monitor when the run ends (in-process callers read it).
    result: Mutex<Option<A::Output>>,
}

impl<A: PsApp> PsJob<A> {
    /// Finds the job's nodes by `roles` in `settings` and builds the app.
    pub fn new(settings: &Settings, cfg: A::Config, roles: PsRoles) -> Result<Self, PsError> {
        A::validate_config(&cfg).map_err(|source| PsError::InvalidSetting {
            app: A::NAME,
            source,
        })?;
        let with = |role: &str| -> Vec<String> {
            settings
                .nodes
                .iter()
                .filter(|n| n.roles.iter().any(|r| r == role))
                .map(|n| n.name.clone())
                .collect()
        };
        let layout = PsLayout {
            shard_nodes: with(roles.shard),
            worker_nodes: with(roles.worker),
        };
        if layout.shard_nodes.is_empty() || layout.worker_nodes.is_empty() {
            return Err(PsError::MissingRoles {
                app: A::NAME,
                shard: roles.shard,
                worker: roles.worker,
            });
        }
        let monitors = with(roles.monitor);
        let [monitor_node] = monitors.as_slice() else {
            return Err(PsError::MonitorCount {
                app: A::NAME,
                role: roles.monitor,
                found: monitors.len(),
            });
        };
        check_membership::<A>(settings, &cfg)?;
        let checkpointing = A::checkpointing(&cfg)?;
        let is_standby =
            |name: &String| settings.nodes.iter().any(|n| n.standby && &n.name == name);
        let standby = (0..layout.n_workers())
            .filter(|&w| is_standby(&layout.worker_nodes[w as usize]))
            .collect();
        let standby_shards: Vec<u32> = (0..layout.n_shards())
            .filter(|&s| is_standby(&layout.shard_nodes[s as usize]))
            .collect();
        let starting: Vec<u32> = (0..layout.n_shards())
            .filter(|s| !standby_shards.contains(s))
            .collect();
        let shards = ShardSet {
            placement: match A::ELASTIC && settings.allows_membership_changes() {
                true => Some(Placement::new(&starting)?),
                false => None,
            },
            starting: starting.len(),
            ..ShardSet::default()
        };
        let app = A::new(cfg, &layout)?;
        if checkpointing.as_ref().is_some_and(|c| c.every > 0)
            && let Some(reason) = not_checkpointable(&app.tables())
        {
            return Err(PsError::InvalidConfig {
                app: A::NAME,
                reason,
            });
        }
        Ok(PsJob {
            app,
            layout,
            monitor_node: monitor_node.clone(),
            roles,
            checkpointing,
            standby,
            standby_shards,
            shards: Mutex::new(shards),
            resumed: Mutex::new(None),
            result: Mutex::new(None),
        })
    }

    /// What the monitor left once the run ended (in-process runs).
    pub fn take_result(&self) -> Result<A::Output, PsError> {
        // A poisoned lock means the monitor panicked: no result either.
        self.result
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .ok_or(PsError::NoResult { app: A::NAME })
    }

    /// The shard set as this process knows it.
    pub(crate) fn shard_set(&self) -> MutexGuard<'_, ShardSet> {
        // A poisoned lock means a role panicked; the set itself is still whole.
        self.shards
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn shard_set_lock(&self) -> &Mutex<ShardSet> {
        &self.shards
    }

    /// The shards serving now (every one of the layout's unless shards join and leave).
    pub fn live_shards(&self) -> Vec<u32> {
        self.shard_set().live(self.layout.n_shards())
    }

    pub(crate) fn set_result(&self, output: A::Output) {
        if let Ok(mut slot) = self.result.lock() {
            *slot = Some(output);
        }
    }
}

/// Refuses workers that join or leave (`settings` allow membership changes) for
/// an app that keeps a fixed membership, or with checkpoints, whose pieces are one per
/// worker of a fixed set; and a dead worker taken as having left (`on_node_death =
/// "leave"`): it never drains, so its clock would hold back every shard.
pub fn check_membership<A: PsApp>(settings: &Settings, cfg: &A::Config) -> Result<(), PsError> {
    if !settings.allows_membership_changes() {
        return Ok(());
    }
    let reason = if settings.cluster.on_node_death == OnNodeDeath::Leave {
        "on_node_death = \"leave\": a dead worker never drains its clock, so the job would wait for it; workers join and leave by standby nodes and a scale plan"
    } else if !A::ELASTIC {
        "its workers and shards are fixed at the start: standby nodes and a scale plan are for ps-mf, ps-lr and ps-lda"
    } else if A::checkpointing(cfg)?.is_some_and(|c| c.every > 0) {
        "checkpoints and workers that join or leave do not mix: set checkpoint_every = 0"
    } else if shards_change::<A>(settings)?
        && settings
            .nodes
            .iter()
            .any(|n| n.standby && has_role::<A>(n, false))
    {
        "shards that join or leave and workers that join do not mix: a joiner is admitted by the shards of the moment"
    } else {
        return Ok(());
    };
    Err(PsError::InvalidConfig {
        app: A::NAME,
        reason: reason.into(),
    })
}

/// Whether `node` carries `A`'s shard role (`shard`) or worker role.
fn has_role<A: PsApp>(node: &petrel_actors::settings::NodeSpec, shard: bool) -> bool {
    let roles = [A::BUILTIN_ROLES, crate::kit::PsRoles::GENERIC];
    let name = |r: &PsRoles| if shard { r.shard } else { r.worker };
    node.roles
        .iter()
        .any(|x| roles.iter().any(|r| name(r) == x))
}

/// Whether shards may join (standby shard nodes) or leave (the scale plan removes one).
fn shards_change<A: PsApp>(settings: &Settings) -> Result<bool, PsError> {
    let plan = settings.scale_plan()?;
    let removed = |name: &str| {
        (plan.steps.iter())
            .any(|s| s.change == petrel_actors::scale::ScaleChange::Remove(name.into()))
    };
    Ok((settings.nodes.iter()).any(|n| has_role::<A>(n, true) && (n.standby || removed(&n.name))))
}

/// The shard role: serves this node's shards until every worker left.
async fn shard_role<A: PsApp>(ctx: NodeContext, job: Arc<PsJob<A>>) -> Result<(), PsError> {
    let server_push = job.app.server_push();
    let resumed = job.resumed()?;
    let (tables, rules, n_workers) = (job.app.tables(), job.app.rules(), job.layout.n_workers());
    let placement = job.shard_set().placement.clone();
    let mine = job.layout.shards_on(&ctx.spec.name);
    let mut handles = Vec::new();
    for &s in &mine {
        let mut core = match &resumed {
            Some(ck) => PsShardCore::restore(
                n_workers,
                tables.clone(),
                &rules,
                ck.shard_tables(s)?,
                ck.clock,
            )?,
            None => PsShardCore::with_registry(n_workers, tables.clone(), &rules)?,
        };
        if let Some(cfg) = server_push {
            core.enable_server_push(cfg);
        }
        let absent: Vec<WorkerId> = job.standby.iter().map(|&w| WorkerId(w)).collect();
        core.set_absent(&absent)?;
        core.enable_eval_cuts(job.app.eval_every());
        // A joining shard takes its placement with its rows.
        if let Some(p) = &placement
            && !job.standby_shards.contains(&s)
        {
            core.set_placement(s, p.clone(), None)?;
        }
        let mut on_checkpoint: Option<shells::OnCheckpoint> = None;
        if let Some((dir, every)) = job.writing() {
            core.enable_checkpoints(every)?;
            let dir = dir.to_path_buf();
            // Resolved when used: the monitor may be on this node, registered later.
            let (node, monitor_node) = (ctx.node.clone(), job.monitor_node.clone());
            on_checkpoint = Some(Box::new(move |shard, clock, tables| {
                let bytes = crate::kit::encode(&tables)?;
                let piece = Piece::Shard(shard);
                checkpoints::save_piece::<A>(&node, &monitor_node, (&dir, clock), piece, &bytes)
            }));
        }
        handles.push(shells::start_shard_core(
            &ctx.node,
            &job.layout,
            s,
            core,
            on_checkpoint,
        )?);
    }
    let served = futures::future::join_all(handles.into_iter().map(|h| h.wait_end()));
    let results = match placement {
        Some(_) => serve_elastic::<A>(&ctx, &job, &mine, served).await?,
        None => served.await,
    };
    for r in results {
        r?;
    }
    if ctx.node.is_leave_requested() {
        tracing::info!(node = %ctx.spec.name, "ps shards handed over; leaving");
        ctx.node.leave_when_done();
    }
    Ok(())
}

/// Serves shards that may join and leave: a joining one announces itself to the
/// coordinator, and once the node is asked to leave each waits to hand its rows over.
async fn serve_elastic<A: PsApp>(
    ctx: &NodeContext,
    job: &PsJob<A>,
    mine: &[u32],
    served: impl std::future::Future<Output = Vec<Result<ShardEnd, PsError>>>,
) -> Result<Vec<Result<ShardEnd, PsError>>, PsError> {
    let to = coordinator_actor::<A>();
    // Asked until answered, resolved each time: the coordinator opens with the monitor,
    // which may start later (its node builds the job first), or on this node. `false`:
    // refused, as every worker ended.
    let tell = async |note: PlacementNote, shard: u32| -> Result<bool, PsError> {
        let deadline = tokio::time::Instant::now() + SHARDS_READY_TIMEOUT;
        loop {
            let coordinator = ctx.node.actor_at::<PlacementNote>(&job.monitor_node, &to)?;
            match coordinator
                .ask(note.clone(), Priority::HIGH, NOTE_TIMEOUT)
                .await
            {
                Ok(()) => return Ok(true),
                Err(e) if is_refused_as_closed(&e) => return Ok(false),
                Err(source) if tokio::time::Instant::now() >= deadline => {
                    return Err(PsError::Placement { shard, source });
                }
                Err(e) => tracing::debug!(shard, error = %e, "coordinator not there yet"),
            }
            tokio::time::sleep(NOTE_TIMEOUT / 5).await;
        }
    };
    for &shard in mine.iter().filter(|s| job.standby_shards.contains(s)) {
        if !tell(PlacementNote::ShardJoined { shard }, shard).await? {
            tracing::info!(shard, "the job's workers ended before this shard joined");
            let current = job.shard_set().placement.clone();
            if let Some(current) = current {
                stop_joiner(&ctx.node, &job.layout, &current, shard)?;
            }
        }
    }
    let served = std::pin::pin!(served);
    let leave = std::pin::pin!(ctx.node.leave_requested());
    match futures::future::select(served, leave).await {
        futures::future::Either::Left((done, _)) => Ok(done),
        futures::future::Either::Right(((), served)) => {
            // Refused: the workers ended, and their end ends the shard.
            for &shard in mine {
                tell(PlacementNote::ShardLeaving { shard }, shard).await?;
            }
            let ends = served.await;
            // A shard whose workers ended before its hand-over keeps its rows for the
            // monitor's final read.
            for (&shard, end) in mine.iter().zip(&ends) {
                if let Ok(ShardEnd::AllLeft) = end {
                    while tell(PlacementNote::Holding { shard }, shard).await? {
                        tokio::time::sleep(NOTE_TIMEOUT / 5).await;
                    }
                }
            }
            Ok(ends)
        }
    }
}

/// Registers the shard, worker and monitor roles of `job` (named by `job.roles`).
pub fn register<A: PsApp>(cluster: Cluster, job: Arc<PsJob<A>>) -> Cluster {
    let roles = job.roles;
    let (j1, j2, j3) = (job.clone(), job.clone(), job);
    cluster
        .role(roles.shard, move |ctx| shard_role(ctx, j1.clone()))
        .role(roles.worker, move |ctx| {
            worker::worker_role(ctx, j2.clone())
        })
        .role(roles.monitor, move |ctx| {
            monitor::monitor_role(ctx, j3.clone())
        })
}

/// Registers `A`'s built-in roles ([`PsApp::BUILTIN_ROLES`]) for `petrel node`; the job is
/// built from `[app.<SECTION>]` when a role first runs in this process.
pub fn register_builtin<A: PsApp>(cluster: Cluster) -> Cluster {
    let get = petrel_actors::lazy_job(cluster.settings().clone(), A::SECTION, |s, cfg| {
        PsJob::<A>::new(s, cfg, A::BUILTIN_ROLES)
    });
    let roles = A::BUILTIN_ROLES;
    let (g1, g2, g3) = (get.clone(), get.clone(), get);
    cluster
        .app_section_checked::<A::Config, _>(A::SECTION, A::validate_config)
        .role(roles.shard, move |ctx| {
            let job = g1();
            async move { shard_role(ctx, job?).await }
        })
        .role(roles.worker, move |ctx| {
            let job = g2();
            async move { worker::worker_role(ctx, job?).await }
        })
        .role(roles.monitor, move |ctx| {
            let job = g3();
            async move { monitor::monitor_role(ctx, job?).await }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::local_topology;
    use crate::{PsLda, PsLdaSettings, PsLr, PsLrSettings};
    use petrel_actors::Transport;

    #[test]
    fn joins_and_leaves_are_refused_where_the_job_cannot_take_them() {
        let settings = |standby: bool, leave: bool, every: u64| {
            let mut topo = local_topology("t", 1, 2, Transport::Memory);
            if standby {
                topo = topo.standby_node("worker-2", &["ps-worker"]);
            }
            let on_death = if leave {
                OnNodeDeath::Leave
            } else {
                OnNodeDeath::Fail
            };
            let s = topo
                .with(|s| s.cluster.on_node_death = on_death)
                .build()
                .unwrap();
            let mut cfg = PsLrSettings {
                checkpoint_every: every,
                ..PsLrSettings::default()
            };
            cfg.files.checkpoint_dir = Some("ck".into());
            (s, cfg)
        };
        let reason = |(s, cfg): (Settings, PsLrSettings)| {
            check_membership::<PsLr>(&s, &cfg)
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            reason(settings(false, false, 50)),
            None,
            "a fixed membership"
        );
        assert_eq!(reason(settings(true, false, 0)), None, "a standby worker");
        let refused = |args, why: &str| {
            let r = reason(args).unwrap_or_default();
            assert!(r.contains(why), "{r}");
        };
        refused(settings(true, false, 50), "do not mix");
        refused(settings(false, true, 0), "on_node_death");
        let (s, _) = settings(true, false, 0);
        // ps-lda takes them (its documents follow the members), without checkpoints.
        let lda = check_membership::<PsLda>(&s, &PsLdaSettings::default());
        assert!(lda.is_ok(), "{lda:?}");
        // Shards that join, alone and with a worker that joins.
        let shards = |standby_worker: bool| {
            let mut topo =
                local_topology("t", 1, 2, Transport::Memory).standby_node("shard-1", &["ps-shard"]);
            if standby_worker {
                topo = topo.standby_node("worker-2", &["ps-worker"]);
            }
            let cfg = PsLrSettings {
                checkpoint_every: 0,
                ..PsLrSettings::default()
            };
            (topo.build().unwrap(), cfg)
        };
        assert_eq!(reason(shards(false)), None, "a standby shard");
        refused(
            shards(true),
            "shards that join or leave and workers that join",
        );
        let (s, _) = shards(false);
        let lda = PsLdaSettings {
            checkpoint_every: 0,
            ..PsLdaSettings::default()
        };
        let lda = check_membership::<PsLda>(&s, &lda);
        assert!(lda.is_ok(), "{lda:?}");
    }
}
