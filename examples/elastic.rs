//! An elastic job: a dealer hands out tasks, and workers join and leave while it runs.
//!
//! `w2` is a standby node: the cluster forms without it. The scale plan in `[cluster]
//! scale` starts it after 300 ms and asks `w0` to drain and leave after 600 ms. A worker
//! asked to leave returns its last result to the dealer, then leaves; the others carry on,
//! and every task is counted exactly once.
//!
//! ```text
//! cargo run --release --example elastic -- --in-process
//! cargo run --release --example elastic -- --processes
//! ```
//!
//! On hosts of your own, start `w2` by hand (`--node w2 --config cluster.toml`) whenever
//! it should join; ask a node to leave with the scale plan.
//!
//! The cluster runs with `on_node_death = "leave"`: a worker that dies counts as having
//! left, and the dealer hands its unfinished task to the others. `--crash-after N` makes
//! `w1` abort after N tasks, to see it (`--processes`: the other processes carry on).

use actix::prelude::*;
use petrel::actors::{
    Cluster, HandlerError, Msg, NodeContext, NodeError, OnNodeDeath, PeerEvent, Topology,
};
use petrel::launcher::{LaunchArgs, LaunchError, launch};
use petrel::messages::{Priority, remote_message};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

const TASKS: u64 = 400;
const TASK_TIME: Duration = Duration::from_millis(10);

/// A worker asks for work, returning its last result; `leaving` asks for none.
#[derive(Serialize, Deserialize, Debug)]
struct NextTask {
    worker: String,
    done: Option<(u64, u64)>,
    leaving: bool,
}
#[derive(Serialize, Deserialize, Debug)]
struct Task {
    /// `None`: no more work.
    id: Option<u64>,
}
remote_message!(NextTask => Task, "example.next_task");

#[derive(Default)]
struct Dealer {
    next: u64,
    /// Tasks handed to a member that left before returning them.
    requeued: Vec<u64>,
    /// Who holds each task handed out and not yet returned.
    leases: BTreeMap<u64, String>,
    results: BTreeMap<u64, u64>,
    by_worker: BTreeMap<String, u64>,
    finished: Option<futures::channel::oneshot::Sender<Dealer>>,
}

impl Actor for Dealer {
    type Context = Context<Self>;
}

impl Handler<Msg<NextTask>> for Dealer {
    type Result = Result<Task, HandlerError>;
    fn handle(&mut self, msg: Msg<NextTask>, _: &mut Context<Self>) -> Self::Result {
        let ask = msg.body;
        // A result is kept once, whoever sends it.
        if let Some((id, value)) = ask.done {
            self.leases.remove(&id);
            if self.results.insert(id, value).is_none() {
                *self.by_worker.entry(ask.worker.clone()).or_default() += 1;
            }
        }
        if self.results.len() as u64 == TASKS
            && let Some(done) = self.finished.take()
        {
            let _ = done.send(Dealer {
                results: std::mem::take(&mut self.results),
                by_worker: std::mem::take(&mut self.by_worker),
                ..Default::default()
            });
        }
        if ask.leaving {
            return Ok(Task { id: None });
        }
        let id = self.requeued.pop().or_else(|| {
            (self.next < TASKS).then(|| {
                self.next += 1;
                self.next - 1
            })
        });
        if let Some(id) = id {
            self.leases.insert(id, ask.worker);
        }
        Ok(Task { id })
    }
}

/// Members that left: their leased tasks go back to the queue.
#[derive(Message)]
#[rtype(result = "()")]
struct Departed(Vec<String>);

impl Handler<Departed> for Dealer {
    type Result = ();
    fn handle(&mut self, msg: Departed, _: &mut Context<Self>) {
        let lost: Vec<u64> = self
            .leases
            .iter()
            .filter(|(_, worker)| msg.0.contains(worker))
            .map(|(&id, _)| id)
            .collect();
        for id in lost {
            self.leases.remove(&id);
            println!("dealer: task {id} handed back from a member that left");
            self.requeued.push(id);
        }
    }
}

async fn dealer_role(ctx: NodeContext) -> Result<(), NodeError> {
    let (tx, rx) = futures::channel::oneshot::channel();
    let dealer = Dealer {
        finished: Some(tx),
        ..Default::default()
    };
    let addr = dealer.start();
    ctx.node
        .register("dealer", addr.clone())?
        .accept::<NextTask>();
    let mut events = ctx.node.subscribe();
    let watch = async {
        while let Ok(event) = events.recv().await {
            if let PeerEvent::Membership(view) = event {
                let names: Vec<_> = view.members.iter().map(|m| m.name.as_str()).collect();
                println!("dealer: epoch {}: members {}", view.epoch, names.join(", "));
                let departed = view.departed.iter().map(|&(n, _)| ctx.node.peer_name(n));
                addr.do_send(Departed(departed.collect()));
            }
        }
    };
    let done = tokio::select! {
        done = rx => done.map_err(|_| NodeError::Config("the dealer stopped".into()))?,
        () = watch => return Err(NodeError::Config("membership events ended".into())),
    };
    let sum: u64 = done.results.values().sum();
    let expected: u64 = (0..TASKS).map(|t| t * t).sum();
    let shares: Vec<String> = done
        .by_worker
        .iter()
        .map(|(w, n)| format!("{w}={n}"))
        .collect();
    println!(
        "dealer: {} tasks, sum {sum} (expected {expected})",
        done.results.len()
    );
    println!("dealer: tasks by worker: {}", shares.join(", "));
    let view = ctx.node.view();
    let members: Vec<_> = view.members.iter().map(|m| m.name.as_str()).collect();
    println!(
        "dealer: final members {} (epoch {})",
        members.join(", "),
        view.epoch
    );
    Ok(())
}

async fn worker_role(ctx: NodeContext, crash_after: Option<u64>) -> Result<(), NodeError> {
    let dealer = ctx.node.actor_at::<NextTask>("boss", "dealer")?;
    let worker = ctx.node.name().to_string();
    let crash_after = crash_after.filter(|_| worker == "w1");
    let mut tasks = 0;
    let mut done = None;
    let mut attempts = 0;
    loop {
        let leaving = ctx.node.is_leave_requested();
        let ask = NextTask {
            worker: worker.clone(),
            done,
            leaving,
        };
        let task = match dealer
            .ask(ask, Priority::NORMAL, Duration::from_secs(10))
            .await
        {
            Ok(task) => task,
            // The dealer registers as its node starts: a first ask may come too early.
            Err(e) if attempts < 100 && done.is_none() => {
                attempts += 1;
                tracing::debug!(error = %e, "dealer not ready; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if leaving {
            println!("{worker}: drained; leaving");
            ctx.node.leave_when_done();
            return Ok(());
        }
        let Some(id) = task.id else { return Ok(()) };
        tokio::time::sleep(TASK_TIME).await;
        tasks += 1;
        if crash_after == Some(tasks) {
            println!("{worker}: crashing with task {id} unreturned");
            std::process::abort();
        }
        done = Some((id, id * id));
    }
}

/// The launch flags and the example's own.
#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    launch: LaunchArgs,
    /// `w1` aborts its process after this many tasks (every node reads the flag).
    #[arg(long)]
    crash_after: Option<u64>,
}

fn main() -> Result<(), LaunchError> {
    let cli = <Cli as clap::Parser>::parse();
    let settings = Topology::builder("elastic")
        .node("boss", &["dealer"])
        .node("w0", &["worker"])
        .node("w1", &["worker"])
        .standby_node("w2", &["worker"])
        .with(|s| {
            s.cluster.scale = Some("at=300ms add w2; at=600ms remove w0".into());
            s.cluster.on_node_death = OnNodeDeath::Leave;
        })
        .build()?;
    let cluster = Cluster::new(settings)
        .role("dealer", dealer_role)
        .role("worker", move |ctx| worker_role(ctx, cli.crash_after));
    let launched = launch(&cluster, &cli.launch)?;
    if !launched.runs_one_node() {
        println!("done");
    }
    Ok(())
}
