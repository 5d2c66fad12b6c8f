//! Errors a user can act on: a cluster that does not form names the nodes that never joined
//! (or the coordinator that could not be reached), a failing handler is reported naming its
//! actor and node and the caller, and `main` returning a launch error prints one line.

use crate::common;

use common::{PETREL, example_binary, free_port, read_all, wait_with_deadline, write_config};
use petrel::actors::{Cluster, HandlerError, Msg, NodeContext, NodeError, Topology, Transport};
use petrel::launcher::{LaunchError, LaunchMode, LaunchOptions, launch_with};
use petrel::messages::{Priority, remote_message};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Three demo nodes on fixed ports with a 2 s join timeout; returns the file and the ports.
fn three_nodes(dir: &Path) -> (std::path::PathBuf, [u16; 3]) {
    let ports = [free_port(), free_port(), free_port()];
    let mut text = "[cluster]\nname = \"partial\"\ncerts_dir = \"certs\"\njoin_timeout_ms = 2000\n"
        .to_string();
    for ((name, role), port) in [
        ("hub", "demo-aggregator"),
        ("w1", "demo-worker"),
        ("w2", "demo-worker"),
    ]
    .iter()
    .zip(ports)
    {
        text.push_str(&format!(
            "[[nodes]]\nname = \"{name}\"\naddr = \"127.0.0.1:{port}\"\nroles = [\"{role}\"]\n"
        ));
    }
    text.push_str("[app.demo]\nrounds = 1\ntensor_len = 4\n");
    let cfg = write_config(dir, &text);
    common::certs(&dir.join("certs"), &cfg, false);
    (cfg, ports)
}

/// `petrel node` for each of `names` at once; each one's failure output, in order.
fn run_nodes(cfg: &Path, names: &[&str]) -> Vec<String> {
    let children: Vec<_> = names
        .iter()
        .map(|name| {
            let mut child = Command::new(PETREL)
                .args(["node", "--config"])
                .arg(cfg)
                .args(["--name", name])
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let err = read_all(child.stderr.take().unwrap());
            (child, err)
        })
        .collect();
    children
        .into_iter()
        .zip(names)
        .map(|((mut child, err), name)| {
            let status = wait_with_deadline(&mut child, Duration::from_secs(30));
            let err = err.join().unwrap();
            assert!(!status.success(), "{name} succeeded without w2:\n{err}");
            err
        })
        .collect()
}

/// w2 never starts: the coordinator (hub) and the node that reached it (w1) both name w2
/// and its address; a node alone names the coordinator it could not reach and its address.
#[test]
fn a_cluster_that_does_not_form_names_the_missing_node() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, [hub, _, w2]) = three_nodes(dir.path());
    let missing = format!(
        "cluster did not form within 2s: node w2 (expected at 127.0.0.1:{w2}) never joined (coordinator: hub)"
    );
    for (name, err) in ["hub", "w1"].iter().zip(run_nodes(&cfg, &["hub", "w1"])) {
        assert!(err.contains(&missing), "{name} must name w2:\n{err}");
        assert_eq!(err.matches("error").count(), 1, "one error line:\n{err}");
    }
    let err = run_nodes(&cfg, &["w1"]).remove(0);
    let unreachable = format!(
        "the coordinator, node hub (expected at 127.0.0.1:{hub}), could not be reached within 2s"
    );
    assert!(err.contains(&unreachable), "w1 must name hub:\n{err}");
}

#[derive(Serialize, Deserialize)]
struct Split {
    rows: u32,
}
#[derive(Serialize, Deserialize)]
struct Parts {
    parts: u32,
}
remote_message!(Split => Parts, "test.launch_errors.split");

struct Mapper;
impl actix::Actor for Mapper {
    type Context = actix::Context<Self>;
}
impl actix::Handler<Msg<Split>> for Mapper {
    type Result = Result<Parts, HandlerError>;
    fn handle(&mut self, msg: Msg<Split>, _: &mut actix::Context<Self>) -> Self::Result {
        Err(HandlerError::new(format!(
            "cannot split {} rows",
            msg.body.rows
        )))
    }
}

async fn map(ctx: NodeContext) -> Result<(), NodeError> {
    use actix::Actor;
    ctx.node
        .register("mapper", Mapper.start())?
        .accept::<Split>();
    ctx.barrier("ready").await
}

async fn drive(ctx: NodeContext) -> Result<(), NodeError> {
    ctx.barrier("ready").await?;
    let mapper = ctx.node.actor_at::<Split>("map-1", "mapper")?;
    mapper
        .ask(Split { rows: 7 }, Priority::NORMAL, Duration::from_secs(10))
        .await?;
    Ok(())
}

/// A handler that fails on map-1 is reported, in process, naming its actor and node by name
/// and the caller; the launch error is the role's own (not a settings error), and its
/// `Debug` (what `main` prints) is that same one line.
#[test]
fn a_failing_handler_names_its_actor_node_and_caller() {
    for transport in [Transport::Memory, Transport::Quic] {
        let settings = Topology::builder("handler-fails")
            .node("driver", &["drive"])
            .node("map-0", &["map"])
            .node("map-1", &["map"])
            .transport(transport)
            .build()
            .unwrap();
        let cluster = Cluster::new(settings).role("drive", drive).role("map", map);
        let err = launch_with(
            &cluster,
            LaunchMode::InProcess,
            LaunchOptions::new().unwrap(),
        )
        .unwrap_err();
        let expected = "role drive on driver: actor mapper on node map-1 failed to handle a request from driver: cannot split 7 rows";
        assert_eq!(format!("{err:?}"), expected, "{transport:?}");
        assert_eq!(petrel::actors::error_chain(&err), expected, "{transport:?}");
        let LaunchError::Role { node, role, source } = &err else {
            panic!("{transport:?}: not a role's error: {err}");
        };
        assert_eq!((node.as_str(), role.as_str()), ("driver", "drive"));
        assert!(
            matches!(
                source.downcast_ref::<NodeError>(),
                Some(NodeError::Ask(petrel::actors::AskError::Remote { node, .. })) if &**node == "map-1"
            ),
            "{transport:?}: the role's own error: {source:?}"
        );
    }
}

/// A program whose `main` returns the launcher's error prints it as one line, not as a
/// `Debug` dump of the enum.
#[test]
fn main_returning_a_launch_error_prints_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[[nodes]]\nname = \"x\"\naddr = \"127.0.0.1:7\"\n",
    );
    let out = Command::new(example_binary("topology"))
        .args(["--node", "station", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Error: the settings file names nodes x but this program's topology has field, station\n"
    );
}
