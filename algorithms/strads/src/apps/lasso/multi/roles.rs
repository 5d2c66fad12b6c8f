//! The actor side of a multi-scheduler job: the scheduler roles, the lead's report inbox
//! and the lead's and followers' epoch loops around [`run_scheduler_from`].

use std::time::{Duration, Instant};

use super::slice::SliceScheduling;
use super::sync::{LeadBook, SyncDecision, SyncReport, lead_start};
use super::{assign_schedulers, build_schedulers};
use crate::apps::lasso::WORKER_ROLE;
use crate::apps::lasso::config::LassoSettings;
use crate::apps::lasso::metrics::LassoOutcome;
use crate::apps::lasso::wire::LassoApp;
use crate::error::StradsError;
use crate::kit::{StradsJob, ready_barrier};
use crate::shells::{SchedulerOptions, WorkerSet, run_scheduler_from};
use actix::prelude::*;
use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use petrel_actors::error::HandlerError;
use petrel_actors::{Msg, NodeContext};
use petrel_messages::Priority;

/// The lead's actor receiving [`SyncReport`]s.
pub const SYNC_ACTOR: &str = "strads-lasso-sync";

/// Receives the followers' reports on the lead's node and hands them to the lead's loop;
/// the reply is sent when the lead has decided.
struct SyncInbox {
    tx: mpsc::UnboundedSender<(SyncReport, oneshot::Sender<SyncDecision>)>,
}

impl Actor for SyncInbox {
    type Context = Context<Self>;
}

impl Handler<Msg<SyncReport>> for SyncInbox {
    type Result = ResponseFuture<Result<SyncDecision, HandlerError>>;

    fn handle(&mut self, msg: Msg<SyncReport>, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let sent = self.tx.unbounded_send((msg.body, tx));
        Box::pin(async move {
            sent.map_err(|_| HandlerError::new("lead scheduler has stopped"))?;
            rx.await
                .map_err(|_| HandlerError::new("lead scheduler stopped before deciding"))
        })
    }
}

/// How long a scheduler may wait for the others at a synchronisation point: one epoch of
/// rounds at the per-round timeout, plus slack. A dead peer is noticed sooner (fail-fast).
fn sync_timeout(job: &LassoSettings) -> Duration {
    let rounds = if job.eval_every > 0 {
        job.eval_every
    } else {
        job.max_rounds
    };
    Duration::from_secs(job.timeout_s.max(1))
        .saturating_mul(u32::try_from(rounds.saturating_add(4)).unwrap_or(u32::MAX))
        .min(Duration::from_secs(24 * 3600))
}

/// Entry point of role [`scheduler_role_name`]`(index)`. With one scheduler, scheduler 0 is
/// the single-scheduler role; otherwise the node's first scheduler role runs every
/// scheduler the node claims, and the others return at once.
pub(in crate::apps::lasso) async fn scheduler_entry(
    ctx: NodeContext,
    index: usize,
) -> Result<(), StradsError> {
    let job: LassoSettings = ctx.settings.app(LassoApp::SECTION)?;
    crate::apps::lasso::check_membership(&ctx, &job, &super::scheduler_role_name(index))?;
    let nodes: Vec<(String, Vec<String>)> = ctx
        .settings
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.roles.clone()))
        .collect();
    let owners = assign_schedulers(&nodes, job.schedulers)?;
    if job.schedulers == 1 {
        return crate::apps::lasso::solver_role::<crate::apps::lasso::gs::LassoGsApp, LassoApp>(
            ctx, &job, true,
        )
        .await;
    }
    if job.checkpoint_dir.is_some() || job.resume {
        return Err(StradsError::CheckpointUnsupported);
    }
    let mine: Vec<usize> = (0..owners.len())
        .filter(|&s| owners[s] == ctx.spec.name)
        .collect();
    if mine.first() != Some(&index) {
        return Ok(());
    }
    run_node_schedulers(ctx, job.with_multi_defaults(), owners, mine).await
}

async fn run_node_schedulers(
    ctx: NodeContext,
    job: LassoSettings,
    owners: Vec<String>,
    mine: Vec<usize>,
) -> Result<(), StradsError> {
    let workers = ctx.nodes_with_role(WORKER_ROLE);
    if workers.is_empty() {
        return Err(StradsError::NoWorkers { role: WORKER_ROLE });
    }
    let n_workers = workers.len();
    let loader = job.clone();
    let indices = mine.clone();
    let (n_samples, ranges, apps, start) = crate::kit::off_loop(move || {
        let (x, y) = loader.load()?;
        let (ranges, apps) = build_schedulers(&x, &y, &loader, n_workers, &indices)?;
        let start = lead_start(&x, &y, &loader, &indices)?;
        Ok((x.n_rows, ranges, apps, start))
    })
    .await?;
    for app in &apps {
        tracing::info!(
            scheduler = app.index(),
            columns = ?app.range(),
            workers = n_workers,
            "lasso scheduler ready"
        );
    }
    let mut lead = if mine.contains(&0) {
        let (tx, rx) = mpsc::unbounded();
        let addr = SyncInbox { tx }.start();
        ctx.node.register(SYNC_ACTOR, addr)?.accept::<SyncReport>();
        let (heldout, zero) = start;
        let book = LeadBook::new(ranges, &job, n_workers, n_samples, heldout, zero);
        Some((rx, book))
    } else {
        None
    };
    ctx.barrier(&ready_barrier::<LassoApp>()).await?;
    let set = &WorkerSet::<LassoApp>::resolve(&ctx.node, &workers, WORKER_ROLE)?;
    let runs = apps.into_iter().map(|app| {
        let (job, ctx, lead_node) = (job.clone(), ctx.clone(), owners[0].clone());
        let lead = if app.index() == 0 { lead.take() } else { None };
        async move {
            let s = app.index();
            let r = match lead {
                Some((rx, book)) => lead_loop(app, set, job, rx, book).await,
                None => follower_loop(app, set, job, &ctx, &lead_node).await,
            };
            if let Err(e) = &r {
                tracing::error!(scheduler = s, error = %e, "lasso scheduler failed");
            }
            r
        }
    });
    futures::future::join_all(runs)
        .await
        .into_iter()
        .collect::<Result<Vec<()>, StradsError>>()?;
    Ok(())
}

fn options(job: &LassoSettings, scheduler: usize) -> SchedulerOptions {
    SchedulerOptions {
        scheduler: scheduler as u32,
        ..SchedulerOptions::with_depth_and_timeout(job.depth, job.timeout_s)
    }
}

async fn lead_loop(
    mut app: SliceScheduling,
    set: &WorkerSet<LassoApp>,
    job: LassoSettings,
    mut rx: mpsc::UnboundedReceiver<(SyncReport, oneshot::Sender<SyncDecision>)>,
    mut book: LeadBook,
) -> Result<(), StradsError> {
    let opts = options(&job, 0);
    let started = Instant::now();
    let wait = sync_timeout(&job);
    let mut next = 0u64;
    loop {
        app.begin_segment();
        app.set_time_offset(started.elapsed());
        next = run_scheduler_from(&mut app, set, &opts, next).await?.rounds;
        let mut replies = Vec::new();
        while !book.core.complete() {
            let epoch = book.core.epoch();
            let got = tokio::time::timeout(wait, rx.next())
                .await
                .map_err(|_| {
                    StradsError::SchedulerSync(format!(
                        "no report from the other schedulers within {wait:?} (epoch {epoch})"
                    ))
                })?
                .ok_or_else(|| StradsError::SchedulerSync("report channel closed".into()))?;
            let (report, reply) = got;
            book.core.add(report)?;
            replies.push(reply);
        }
        let model = book.assemble(&app);
        app.begin_evaluation(model);
        app.set_time_offset(started.elapsed());
        next = run_scheduler_from(&mut app, set, &opts, next).await?.rounds;
        let d = book.decide(&mut app)?;
        for reply in replies {
            // A follower that stopped waiting fails on its own; nothing to do here.
            let _ = reply.send(d.clone());
        }
        if d.stop {
            tracing::info!(reason = %d.reason, updates = d.updates_total, "lasso finished");
            let model = app.evaluated_model().to_vec();
            let (coefficients, metrics) = book.outcome(&app, model, started.elapsed());
            if let Some(dir) = &job.out_dir {
                let outcome = LassoOutcome {
                    coefficients,
                    metrics: metrics.base.clone(),
                };
                outcome.write_with(dir, &job, &metrics)?;
                tracing::info!(dir = %dir.display(), "wrote coefficients.tsv and metrics.json");
            }
            return Ok(());
        }
    }
}

async fn follower_loop(
    mut app: SliceScheduling,
    set: &WorkerSet<LassoApp>,
    job: LassoSettings,
    ctx: &NodeContext,
    lead_node: &str,
) -> Result<(), StradsError> {
    let opts = options(&job, app.index());
    let lead = ctx.node.actor_at::<SyncReport>(lead_node, SYNC_ACTOR)?;
    let started = Instant::now();
    let wait = sync_timeout(&job);
    let mut next = 0u64;
    let mut epoch = 0u64;
    loop {
        app.begin_segment();
        app.set_time_offset(started.elapsed());
        next = run_scheduler_from(&mut app, set, &opts, next).await?.rounds;
        let d = lead
            .ask(app.report(epoch), Priority::NORMAL, wait)
            .await
            .map_err(|e| {
                StradsError::SchedulerSync(format!(
                    "synchronising with the lead on {lead_node}: {e}"
                ))
            })?;
        if d.epoch != epoch {
            let answered = d.epoch;
            let e = format!("lead answered epoch {answered} for {epoch}");
            return Err(StradsError::SchedulerSync(e));
        }
        app.apply_decision(&d);
        if d.stop {
            tracing::info!(
                scheduler = app.index(),
                rounds = app.rounds(),
                updates = app.updates(),
                "lasso scheduler finished"
            );
            return Ok(());
        }
        epoch += 1;
    }
}
