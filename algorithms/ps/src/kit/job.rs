//! A job ([`PsJob`]): the app, where its pieces run, and its result; the roles that run it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use petrel_actors::settings::OnNodeDeath;
use petrel_actors::{Cluster, NodeContext, Settings};

use crate::core::checkpoint::Piece;
use crate::core::shard::{PsShardCore, not_checkpointable};
use crate::core::types::WorkerId;
use crate::error::PsError;
use crate::kit::{PsApp, PsCheckpointing, PsRoles, checkpoints, monitor, worker};
use crate::shells::{self, PsLayout};

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
        let standby = (0..layout.n_workers())
            .filter(|&w| {
                let name = &layout.worker_nodes[w as usize];
                settings.nodes.iter().any(|n| n.standby && &n.name == name)
            })
            .collect();
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
        "its workers are fixed at the start: standby workers and a scale plan are for ps-mf, ps-lr and ps-lda"
    } else if A::checkpointing(cfg)?.is_some_and(|c| c.every > 0) {
        "checkpoints and workers that join or leave do not mix: set checkpoint_every = 0"
    } else {
        return Ok(());
    };
    Err(PsError::InvalidConfig {
        app: A::NAME,
        reason: reason.into(),
    })
}

/// The shard role: serves this node's shards until every worker left.
async fn shard_role<A: PsApp>(ctx: NodeContext, job: Arc<PsJob<A>>) -> Result<(), PsError> {
    let server_push = job.app.server_push();
    let resumed = job.resumed()?;
    let (tables, rules, n_workers) = (job.app.tables(), job.app.rules(), job.layout.n_workers());
    let mut handles = Vec::new();
    for s in job.layout.shards_on(&ctx.spec.name) {
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
    for r in futures::future::join_all(handles.into_iter().map(|h| h.wait())).await {
        r?;
    }
    Ok(())
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
    }
}
