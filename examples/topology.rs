//! Compose a cluster in code with your own message types and priorities.
//!
//! A "sensor" node streams readings to a "monitor" node at low priority, and raises alarms
//! at high priority. The monitor keeps a priority mailbox, so when it falls behind, alarms
//! are handled before the backlog of readings. The nodes talk over authenticated QUIC.
//!
//! The same `main` runs the cluster three ways ([`petrel::launcher`]):
//!
//! ```text
//! # every node a thread of this process (the default)
//! cargo run --release --example topology -- --in-process
//! # one process per node on this host (the program re-executes itself per node)
//! cargo run --release --example topology -- --processes
//! # one node per host: certificates and per-host bundles once, then on each host
//! petrel certs --dir certs --nodes station,field --bundle
//! cargo run --release --example topology -- --node station --config cluster.toml
//! ```
//!
//! where `cluster.toml` gives each node's address and `certs_dir` (see README.md, "Compose
//! your own cluster").

use actix::prelude::*;
use petrel::actors::{
    Cluster, HandlerError, Msg, NodeContext, NodeError, PriorityActor, PriorityInbox, Topology,
};
use petrel::launcher::{LaunchArgs, LaunchError, launch};
use petrel::messages::{Priority, remote_message};
use serde::{Deserialize, Serialize};
use std::time::Duration;

// 1. Message types: plain serde structs plus a wire name (and a reply type for asks).
#[derive(Serialize, Deserialize, Debug)]
struct Reading {
    seq: u32,
    celsius: f32,
}
remote_message!(Reading, "example.reading");

#[derive(Serialize, Deserialize, Debug)]
struct Alarm {
    seq: u32,
    message: String,
}
#[derive(Serialize, Deserialize, Debug)]
struct Ack {
    readings_before: u32,
}
remote_message!(Alarm => Ack, "example.alarm");

#[derive(Serialize, Deserialize, Debug)]
struct Summary;
#[derive(Serialize, Deserialize, Debug)]
struct Totals {
    readings: u32,
    alarms: u32,
    handled_order: Vec<String>,
}
remote_message!(Summary => Totals, "example.summary");

// 2. An actor with a priority mailbox.
#[derive(Default)]
struct Monitor {
    inbox: PriorityInbox<Self>,
    readings: u32,
    alarms: u32,
    order: Vec<String>,
}

impl Actor for Monitor {
    type Context = Context<Self>;
}

impl PriorityActor for Monitor {
    fn inbox(&mut self) -> &mut PriorityInbox<Self> {
        &mut self.inbox
    }
}

impl Handler<Msg<Reading>> for Monitor {
    type Result = ResponseFuture<Result<(), HandlerError>>;
    fn handle(&mut self, msg: Msg<Reading>, ctx: &mut Context<Self>) -> Self::Result {
        PriorityInbox::defer(self, ctx, msg.priority, move |act, _| {
            // Pretend each reading takes a while to process, so a backlog forms.
            std::thread::sleep(Duration::from_millis(2));
            act.readings += 1;
            if act.order.len() < 40 {
                act.order.push(format!("r{}", msg.body.seq));
            }
            Ok(())
        })
    }
}

impl Handler<Msg<Alarm>> for Monitor {
    type Result = ResponseFuture<Result<Ack, HandlerError>>;
    fn handle(&mut self, msg: Msg<Alarm>, ctx: &mut Context<Self>) -> Self::Result {
        PriorityInbox::defer(self, ctx, msg.priority, move |act, _| {
            act.alarms += 1;
            act.order.push(format!("ALARM{}", msg.body.seq));
            println!(
                "monitor: alarm {} ({}) after {} readings",
                msg.body.seq, msg.body.message, act.readings
            );
            Ok(Ack {
                readings_before: act.readings,
            })
        })
    }
}

impl Handler<Msg<Summary>> for Monitor {
    type Result = Result<Totals, HandlerError>;
    fn handle(&mut self, _: Msg<Summary>, _: &mut Context<Self>) -> Self::Result {
        Ok(Totals {
            readings: self.readings,
            alarms: self.alarms,
            handled_order: self.order.clone(),
        })
    }
}

// 3. Roles: what runs on a node that lists the role. Any error type works; the runtime's
// own `NodeError` covers registering, barriers and asks.
async fn monitor_role(ctx: NodeContext) -> Result<(), NodeError> {
    let addr = Monitor::default().start();
    ctx.node
        .register("monitor", addr)?
        .accept::<Reading>()
        .accept::<Alarm>()
        .accept::<Summary>();
    ctx.barrier("monitor-ready").await
}

async fn sensor_role(ctx: NodeContext) -> Result<(), NodeError> {
    ctx.barrier("monitor-ready").await?;
    let readings = ctx.node.actor_at::<Reading>("station", "monitor")?;
    let alarms = ctx.node.actor_at::<Alarm>("station", "monitor")?;
    for seq in 0..200 {
        let r = Reading {
            seq,
            celsius: 20.0 + seq as f32 * 0.1,
        };
        readings.tell(r, Priority::LOW)?;
    }
    // The alarm is sent after 200 readings but overtakes the ones still queued.
    let ack = alarms
        .ask(
            Alarm {
                seq: 1,
                message: "overheating".into(),
            },
            Priority::HIGH,
            Duration::from_secs(10),
        )
        .await?;
    println!(
        "sensor: alarm acknowledged after {} of 200 readings",
        ack.readings_before
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let summary = ctx.node.actor_at::<Summary>("station", "monitor")?;
    let totals = summary
        .ask(Summary, Priority::NORMAL, Duration::from_secs(10))
        .await?;
    println!(
        "sensor: monitor handled {} readings and {} alarm(s); first items handled: {}",
        totals.readings,
        totals.alarms,
        totals
            .handled_order
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

// A failure ends the program with one line, `Error: ` and the error with its causes
// (`LaunchError`'s `Debug` prints them, as `main` returning an error shows it).
fn main() -> Result<(), LaunchError> {
    let args = LaunchArgs::from_env();
    // 4. The topology: which nodes exist and which roles run where.
    let settings = Topology::builder("example")
        .node("station", &["monitor"])
        .node("field", &["sensor"])
        .build()?;
    let cluster = Cluster::new(settings)
        .role("monitor", monitor_role)
        .role("sensor", sensor_role);
    // 5. Run it as the command line says: threads, processes, or this host's node.
    let launched = launch(&cluster, &args)?;
    if !launched.runs_one_node() {
        println!("done");
    }
    Ok(())
}
