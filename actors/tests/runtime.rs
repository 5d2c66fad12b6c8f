// Over 600 lines: one cluster harness serves every runtime test; splitting it would copy the harness.
//! Node runtime tests: typed messages over QUIC and memory, priority mailbox, failure
//! detection with pending requests, barriers.

use actix::prelude::*;
use petrel_actors::Transport;
use petrel_actors::coordinator::Coordinator;
use petrel_actors::topology::Wiring;
use petrel_actors::{
    AskError, Cluster, HandlerError, Msg, Node, NodeContext, PeerEvent, PriorityActor,
    PriorityInbox, Settings, Topology,
};
use petrel_messages::{Priority, Tensor, remote_message};
use petrel_net::ClusterCredentials;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Serialize, Deserialize, Debug, Clone)]
struct Scale {
    factor: f32,
    tensor: Tensor,
}
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Scaled {
    tensor: Tensor,
    seen_from_remote: bool,
}
// The request's tensor leaves as its own bytes (and so does the large reply body).
remote_message!(Scale => Scaled, "test.scale", payload = tensor.data);

/// Claims the wire name of `Scale` with a different shape: the receiver cannot decode it.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Impostor {
    nonsense: Vec<String>,
}
remote_message!(Impostor => Scaled, "test.scale");

#[derive(Serialize, Deserialize, Debug, Clone)]
struct Note(String);
remote_message!(Note, "test.note");

struct Scaler {
    notes: Arc<Mutex<Vec<String>>>,
}
impl Actor for Scaler {
    type Context = Context<Self>;
}
impl Handler<Msg<Scale>> for Scaler {
    type Result = Result<Scaled, HandlerError>;
    fn handle(&mut self, msg: Msg<Scale>, _: &mut Context<Self>) -> Self::Result {
        if msg.body.factor.is_nan() {
            return Err(HandlerError::new("factor is NaN"));
        }
        let mut t = msg.body.tensor;
        t.data.iter_mut().for_each(|x| *x *= msg.body.factor);
        Ok(Scaled {
            tensor: t,
            seen_from_remote: msg.from.is_some(),
        })
    }
}
impl Handler<Msg<Note>> for Scaler {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Note>, _: &mut Context<Self>) -> Self::Result {
        if let Ok(mut n) = self.notes.lock() {
            n.push(msg.body.0);
        }
        Ok(())
    }
}

/// Starts a `Scaler` recording notes in `notes` and registers it on `ctx`'s node as `name`.
fn register_scaler(
    ctx: &NodeContext,
    name: &str,
    notes: Arc<Mutex<Vec<String>>>,
) -> Result<(), String> {
    let addr = Scaler { notes }.start();
    ctx.node
        .register(name, addr)
        .map_err(|e| e.to_string())?
        .accept::<Scale>()
        .accept::<Note>();
    Ok(())
}

fn typed_cluster(transport: Transport) -> (Cluster, Arc<Mutex<Vec<String>>>) {
    let settings = Topology::builder("typed")
        .node("server", &["scaler"])
        .node("client", &["caller"])
        .transport(transport)
        .build()
        .unwrap();
    let notes = Arc::new(Mutex::new(Vec::new()));
    let server_notes = notes.clone();
    let cluster = Cluster::new(settings)
        .role("scaler", move |ctx: NodeContext| {
            let notes = server_notes.clone();
            Box::pin(async move {
                register_scaler(&ctx, "scaler", notes)?;
                // The caller may only start once the actor exists.
                ctx.barrier("scaler-ready").await.map_err(|e| e.to_string())
            })
        })
        .role("caller", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("scaler-ready")
                    .await
                    .map_err(|e| e.to_string())?;
                let scaler = ctx
                    .node
                    .actor_at::<Scale>("server", "scaler")
                    .map_err(|e| e.to_string())?;
                assert!(!scaler.is_local());
                let big = Tensor::new(vec![512, 1024], (0..512 * 1024).map(|i| i as f32).collect())
                    .unwrap();
                let reply = scaler
                    .ask(
                        Scale {
                            factor: 2.0,
                            tensor: big.clone(),
                        },
                        Priority::HIGH,
                        Duration::from_secs(10),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                assert!(reply.seen_from_remote);
                assert_eq!(reply.tensor.shape, vec![512, 1024]);
                assert!(
                    reply
                        .tensor
                        .data
                        .iter()
                        .zip(&big.data)
                        .all(|(a, b)| *a == 2.0 * b)
                );
                // Handler errors travel back as errors, not hangs.
                let err = scaler
                    .ask(
                        Scale {
                            factor: f32::NAN,
                            tensor: Tensor::default(),
                        },
                        Priority::NORMAL,
                        Duration::from_secs(10),
                    )
                    .await
                    .unwrap_err();
                assert!(
                    matches!(err, AskError::Remote { ref error, .. } if error.contains("NaN")),
                    "{err}"
                );
                // Named by node and actor names, with the caller.
                assert_eq!(
                    err.to_string(),
                    "actor scaler on node server failed to handle a request from client: factor is NaN"
                );
                // A name nobody registered is an error from the remote node.
                let ghost = ctx
                    .node
                    .actor_at::<Scale>("server", "ghost")
                    .map_err(|e| e.to_string())?;
                let err = ghost
                    .ask(
                        Scale {
                            factor: 1.0,
                            tensor: Tensor::default(),
                        },
                        Priority::NORMAL,
                        Duration::from_secs(10),
                    )
                    .await
                    .unwrap_err();
                assert!(err.to_string().contains("no actor ghost"), "{err}");
                // A body that does not decode as the registered type is an error, not a panic.
                let impostor = ctx
                    .node
                    .actor_at::<Impostor>("server", "scaler")
                    .map_err(|e| e.to_string())?;
                let err = impostor
                    .ask(
                        Impostor {
                            nonsense: vec!["x".into()],
                        },
                        Priority::NORMAL,
                        Duration::from_secs(10),
                    )
                    .await
                    .unwrap_err();
                assert!(
                    err.to_string()
                        .contains("undecodable body of message type test.scale"),
                    "{err}"
                );
                let note = ctx
                    .node
                    .actor_at::<Note>("server", "scaler")
                    .map_err(|e| e.to_string())?;
                for i in 0..5 {
                    note.tell(Note(format!("n{i}")), Priority::NORMAL)
                        .map_err(|e| e.to_string())?;
                }
                Ok::<(), String>(())
            })
        });
    (cluster, notes)
}

#[test]
fn typed_messages_between_two_nodes_over_quic() {
    let (cluster, notes) = typed_cluster(Transport::Quic);
    cluster.run_in_process().unwrap();
    assert_eq!(
        notes.lock().unwrap().clone(),
        vec!["n0", "n1", "n2", "n3", "n4"]
    );
}

#[test]
fn typed_messages_between_two_nodes_in_memory() {
    let (cluster, notes) = typed_cluster(Transport::Memory);
    cluster.run_in_process().unwrap();
    assert_eq!(notes.lock().unwrap().len(), 5);
}

#[test]
fn unknown_role_is_a_clear_error() {
    let settings = Topology::builder("x").node("a", &["nope"]).build().unwrap();
    let err = Cluster::new(settings).run_in_process().unwrap_err();
    assert!(err.to_string().contains("unknown role nope"), "{err}");
}

// ---- priority mailbox ----

#[derive(Serialize, Deserialize)]
struct Work(u32);
remote_message!(Work => u32, "test.work");

struct Ordered {
    inbox: PriorityInbox<Self>,
    seen: Arc<Mutex<Vec<u32>>>,
}
impl Actor for Ordered {
    type Context = Context<Self>;
}
impl PriorityActor for Ordered {
    fn inbox(&mut self) -> &mut PriorityInbox<Self> {
        &mut self.inbox
    }
}
impl Handler<Msg<Work>> for Ordered {
    type Result = ResponseFuture<Result<u32, HandlerError>>;
    fn handle(&mut self, msg: Msg<Work>, ctx: &mut Context<Self>) -> Self::Result {
        let id = msg.body.0;
        PriorityInbox::defer(self, ctx, msg.priority, move |act, _| {
            if id == 0 {
                // Block the actor so that the rest of the messages pile up.
                std::thread::sleep(Duration::from_millis(100));
            }
            act.seen.lock().map_err(|_| "poisoned")?.push(id);
            Ok(id)
        })
    }
}

#[actix::test]
async fn priority_mailbox_processes_backlog_highest_first() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let addr = Ordered {
        inbox: PriorityInbox::default(),
        seen: seen.clone(),
    }
    .start();
    let first = addr.send(Msg {
        body: Work(0),
        priority: Priority(0),
        from: None,
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut replies = Vec::new();
    for (id, p) in [(1, 1), (2, 5), (3, 1), (4, 9), (5, -3)] {
        replies.push(addr.send(Msg {
            body: Work(id),
            priority: Priority(p),
            from: None,
        }));
    }
    assert_eq!(first.await.unwrap().unwrap(), 0);
    for r in replies {
        r.await.unwrap().unwrap();
    }
    assert_eq!(seen.lock().unwrap().clone(), vec![0, 4, 2, 1, 3, 5]);
}

// ---- failure detection ----

#[derive(Serialize, Deserialize)]
struct Stall;
remote_message!(Stall => (), "test.stall");

struct Staller;
impl Actor for Staller {
    type Context = Context<Self>;
}
impl Handler<Msg<Stall>> for Staller {
    type Result = ResponseFuture<Result<(), HandlerError>>;
    fn handle(&mut self, _: Msg<Stall>, _: &mut Context<Self>) -> Self::Result {
        Box::pin(futures::future::pending())
    }
}

/// Settings of cluster `cluster` with role-less `nodes` on ports reserved in this process.
fn reserved(cluster: &str, nodes: [&str; 3]) -> Settings {
    let topology = nodes
        .into_iter()
        .fold(Topology::builder(cluster), |t, n| t.node(n, &[]));
    let mut settings = topology.build().unwrap();
    petrel_actors::topology::reserve_ports(&mut settings).unwrap();
    settings
}

async fn boot_three(settings: Settings) -> Vec<(Node, Option<Addr<Coordinator>>)> {
    let names: Vec<String> = settings.nodes.iter().map(|n| n.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let creds = ClusterCredentials::generate_cluster(&refs).unwrap();
    let cluster = Cluster::new(settings);
    let boots = names
        .iter()
        .zip(creds)
        .map(|(n, c)| {
            let cluster = cluster.clone();
            let n = n.clone();
            async move { cluster.boot(&n, Wiring::Quic(c)).await.unwrap() }
        })
        .collect::<Vec<_>>();
    futures::future::join_all(boots)
        .await
        .into_iter()
        .map(|(ctx, c)| (ctx.node, c))
        .collect()
}

#[actix::test]
async fn dead_peer_is_reported_and_its_pending_requests_fail() {
    let mut settings = reserved("fd", ["coord", "alice", "victim"]);
    settings.cluster.heartbeat_interval_ms = 100;
    settings.cluster.failure_timeout_ms = 800;
    let nodes = boot_three(settings).await;
    let (alice, victim) = (nodes[1].0.clone(), nodes[2].0.clone());
    victim
        .register("staller", Staller.start())
        .unwrap()
        .accept::<Stall>();
    let mut events = alice.subscribe();
    let staller = alice.actor_at::<Stall>("victim", "staller").unwrap();
    let asked = Instant::now();
    let pending = tokio::spawn(async move {
        staller
            .ask(Stall, Priority::NORMAL, Duration::from_secs(60))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(alice.pending_requests(), 1);
    // The victim's process "dies": its transport goes away and it falls silent.
    let killed = Instant::now();
    victim.shutdown();
    let result = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .unwrap()
        .unwrap();
    let detected = killed.elapsed();
    assert!(
        matches!(result, Err(AskError::PeerDown { .. })),
        "{result:?}"
    );
    assert_eq!(
        result.unwrap_err().to_string(),
        "node victim is down; a request to its actor staller failed"
    );
    assert!(
        detected < Duration::from_millis(800 + 1500),
        "detected after {detected:?}"
    );
    assert!(asked.elapsed() < Duration::from_secs(10));
    let ev = tokio::time::timeout(Duration::from_secs(2), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(ev, PeerEvent::Down { ref name, .. } if name == "victim"),
        "{ev:?}"
    );
    assert_eq!(alice.pending_requests(), 0);
    // Later requests to the dead node fail at once.
    let again = alice.actor_at::<Stall>("victim", "staller").unwrap();
    assert!(matches!(
        again
            .ask(Stall, Priority::NORMAL, Duration::from_secs(5))
            .await,
        Err(AskError::PeerDown { .. })
    ));
    for (n, _) in nodes {
        n.shutdown();
    }
}

#[actix::test]
async fn barrier_waits_for_every_node() {
    let nodes = boot_three(reserved("bar", ["a", "b", "c"])).await;
    let coordinator = nodes[0].0.id();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, (n, _)) in nodes.iter().enumerate() {
        let n = n.clone();
        let order = order.clone();
        tasks.push(async move {
            tokio::time::sleep(Duration::from_millis(100 * i as u64)).await;
            order.lock().unwrap().push(format!("enter{i}"));
            let r = n.barrier("b1", coordinator).await.unwrap();
            order.lock().unwrap().push(format!("leave{i}"));
            r.participants
        });
    }
    let parts = futures::future::join_all(tasks).await;
    assert_eq!(parts, vec![3, 3, 3]);
    let order = order.lock().unwrap().clone();
    assert_eq!(&order[..3], &["enter0", "enter1", "enter2"]);
    for (n, _) in nodes {
        n.shutdown();
    }
}

/// A process holding the valid member certificate of `alice` claims to
/// be `bob` (bob's id in every header, `Join { name: "bob" }`). The coordinator's transport
/// refuses it: its certificate names `alice`, and it connects from another address than
/// alice's, so the connection is refused at the handshake (a frame claiming another name
/// than its certificate's, from an unbound address, is refused too:
/// `net/tests/transport.rs::a_member_claiming_another_members_name_is_refused`). The
/// cluster carries on unaffected: no member is reported down and a barrier of the three
/// real members completes.
#[actix::test]
async fn a_member_certificate_cannot_join_under_another_name() {
    use petrel_actors::coordinator::COORDINATOR_ACTOR;
    use petrel_messages::runtime::Join;
    use petrel_messages::{ActorId, NodeId};
    use petrel_net::{Net, NetConfig, PeerAddr};
    let settings = reserved("impostor", ["coord", "alice", "bob"]);
    let coord_addr: std::net::SocketAddr = settings.nodes[0].addr.parse().unwrap();
    let creds = ClusterCredentials::generate_cluster(&["coord", "alice", "bob"]).unwrap();
    let alice_creds = creds[1].clone();
    let cluster = Cluster::new(settings);
    let boots = ["coord", "alice", "bob"]
        .into_iter()
        .zip(creds)
        .map(|(n, c)| {
            let cluster = cluster.clone();
            async move { cluster.boot(n, Wiring::Quic(c)).await.unwrap() }
        });
    let nodes: Vec<Node> = futures::future::join_all(boots)
        .await
        .into_iter()
        .map(|(ctx, _)| ctx.node)
        .collect();
    let mut events = nodes[1].subscribe();

    let (net, inbound) = Net::quic(
        NodeId(2),
        "127.0.0.1:0".parse().unwrap(),
        &alice_creds,
        NetConfig::default(),
    )
    .unwrap();
    let impostor = Node::new(NodeId(2), "bob", net, inbound, Duration::from_secs(5));
    impostor.add_peer(NodeId(0), "coord", PeerAddr::Quic(coord_addr));
    let coordinator = impostor
        .actor::<Join>(&ActorId::new(NodeId(0), COORDINATOR_ACTOR))
        .unwrap();
    let join = Join {
        node: NodeId(2),
        name: "bob".into(),
        roles: vec![],
    };
    let refused = coordinator
        .ask(join, Priority::CONTROL, Duration::from_secs(3))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let st = nodes[0].net_stats();
    assert!(st.refused_connections >= 1, "{st:?}");
    assert_eq!(st.impostor_frames, 0, "refused before any frame: {st:?}");
    impostor.shutdown();

    let coordinator_id = nodes[0].id();
    let barriers = nodes
        .iter()
        .map(|n| n.barrier("after-impostor", coordinator_id));
    for r in futures::future::join_all(barriers).await {
        assert_eq!(r.unwrap().participants, 3);
    }
    assert!(events.try_recv().is_err(), "no member was reported down");
    for n in nodes {
        n.shutdown();
    }
}

// ---- back-pressure ----

#[derive(Serialize, Deserialize)]
struct Chunk {
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
}
remote_message!(Chunk, "test.chunk");

struct SlowSink;
impl Actor for SlowSink {
    type Context = Context<Self>;
}
impl Handler<Msg<Chunk>> for SlowSink {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, _: Msg<Chunk>, _: &mut Context<Self>) -> Self::Result {
        std::thread::sleep(Duration::from_millis(20));
        Ok(())
    }
}

/// A sender flooding a slow actor is slowed down: the data waits in the sender's outbox
/// instead of piling up in the receiver's memory.
#[test]
fn flood_to_a_slow_actor_pushes_back_to_the_sender() {
    use petrel_messages::NodeId;
    use petrel_net::{Net, NetConfig, PeerAddr};
    let creds = ClusterCredentials::generate_cluster(&["a", "b"]).unwrap();
    let tight = NetConfig {
        max_message_bytes: 1 << 20,
        receive_window: 4 << 20,
        stream_receive_window: 1 << 20,
        inbound_buffer_bytes: 4 << 20,
        inbound_queue: 16,
        ..NetConfig::default()
    };
    // The receiver lives in its own actix system on its own thread, like another process.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (a_addr_tx, a_addr_rx) = std::sync::mpsc::channel::<std::net::SocketAddr>();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let receiver_creds = creds[1].clone();
    let receiver_cfg = tight.clone();
    let receiver = std::thread::spawn(move || {
        System::new().block_on(async move {
            let (net, inbound) = Net::quic(
                NodeId(1),
                "127.0.0.1:0".parse().unwrap(),
                &receiver_creds,
                receiver_cfg,
            )
            .unwrap();
            let addr = net.local_addr().unwrap();
            let node = Node::new(NodeId(1), "b", net, inbound, Duration::from_secs(30));
            node.register("sink", SlowSink.start())
                .unwrap()
                .accept::<Chunk>();
            addr_tx.send(addr).unwrap();
            // Frames from `a` are admitted only once its name and address are known (a
            // connection that comes first waits for them).
            node.add_peer(NodeId(0), "a", PeerAddr::Quic(a_addr_rx.recv().unwrap()));
            while stop_rx.try_recv().is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            node.shutdown();
        })
    });
    let b_addr = addr_rx.recv().unwrap();
    System::new().block_on(async move {
        let (net, inbound) =
            Net::quic(NodeId(0), "127.0.0.1:0".parse().unwrap(), &creds[0], tight).unwrap();
        a_addr_tx.send(net.local_addr().unwrap()).unwrap();
        let a = Node::new(NodeId(0), "a", net, inbound, Duration::from_secs(30));
        a.add_peer(NodeId(1), "b", PeerAddr::Quic(b_addr));
        let sink = a.actor_at::<Chunk>("b", "sink").unwrap();
        let total = 400usize * (256 << 10); // 100 MiB
        for _ in 0..400 {
            sink.tell(
                Chunk {
                    data: vec![7u8; 256 << 10],
                },
                Priority::NORMAL,
            )
            .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // The receiver handles ~13 MB/s and may buffer ~10 MB in flow-control windows,
        // its inbound budget and the actor's mailbox; the rest must still be here.
        let queued = a.net().queued_bytes();
        assert!(
            queued > total / 2,
            "only {queued} of {total} bytes held back by the sender: {:?}",
            a.net_stats()
        );
        a.shutdown();
    });
    stop_tx.send(()).unwrap();
    receiver.join().unwrap();
}

// ---- a role's failure stops the whole cluster at once ----

/// Three nodes; the role on `failing` fails after a barrier, the others wait for ever.
/// Every node must stop long before the 30 s failure timeout, and the run's error must be
/// the root cause on `failing`, not the "stopped by a peer" errors it caused.
fn failing_role_cluster(failing: &str) -> Result<(), petrel_actors::NodeError> {
    let names = ["coord", "w1", "w2"];
    let mut builder = Topology::builder("fail-fast");
    for n in names {
        let role = if n == failing { "fails" } else { "waits" };
        builder = builder.node(n, &[role]);
    }
    let mut settings = builder.transport(Transport::Memory).build().unwrap();
    settings.cluster.heartbeat_interval_ms = 200;
    settings.cluster.failure_timeout_ms = 30_000;
    Cluster::new(settings)
        .role("fails", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("ready").await.map_err(|e| e.to_string())?;
                Err("boom".to_string())
            })
        })
        .role("waits", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("ready").await.map_err(|e| e.to_string())?;
                futures::future::pending::<()>().await;
                Ok::<(), String>(())
            })
        })
        .run_in_process()
}

#[test]
fn a_failing_role_stops_every_node_at_once_naming_it() {
    for failing in ["w1", "coord"] {
        let started = Instant::now();
        let err = failing_role_cluster(failing).unwrap_err().to_string();
        let took = started.elapsed();
        assert!(
            err.contains(failing) && err.contains("boom"),
            "{failing}: {err}"
        );
        assert!(took < Duration::from_secs(10), "{failing}: took {took:?}");
    }
}

// ---- oversize messages fail at once, at both ends ----

#[derive(Serialize, Deserialize, Debug, Clone)]
struct Expand {
    floats: usize,
}
remote_message!(Expand => Tensor, "test.expand");

struct Expander;
impl Actor for Expander {
    type Context = Context<Self>;
}
impl Handler<Msg<Expand>> for Expander {
    type Result = Result<Tensor, HandlerError>;
    fn handle(&mut self, msg: Msg<Expand>, _: &mut Context<Self>) -> Self::Result {
        Tensor::new(vec![msg.body.floats], vec![1.0; msg.body.floats])
            .map_err(|e| HandlerError::new(e.to_string()))
    }
}

/// Messages above `max_message_bytes` are split by the transport and joined again: a
/// request and a reply of a tensor three times the limit cross. Beyond what a peer takes
/// even split (its share of `inbound_buffer_bytes`) a reply fails the ask at once (rather
/// than being dropped at the replier while the asker waits out its timeout), naming the
/// type, the size and the knob; a request fails before it is sent.
#[test]
fn big_messages_are_split_and_joined_and_too_big_ones_fail_at_once_naming_the_knob() {
    use petrel_messages::NodeId;
    use petrel_net::{MemoryHub, Net, NetConfig};
    System::new().block_on(async {
        let hub = MemoryHub::new();
        let cfg = NetConfig {
            max_message_bytes: 1 << 20,
            inbound_buffer_bytes: 16 << 20, // a peer's share: 8 MiB
            ..NetConfig::default()
        };
        let (net_a, in_a) = Net::memory(&hub, NodeId(0), cfg.clone()).unwrap();
        let (net_b, in_b) = Net::memory(&hub, NodeId(1), cfg).unwrap();
        let a = Node::new(NodeId(0), "a", net_a, in_a, Duration::from_secs(60));
        let b = Node::new(NodeId(1), "b", net_b, in_b, Duration::from_secs(60));
        a.add_peer(NodeId(1), "b", petrel_net::PeerAddr::Memory);
        b.add_peer(NodeId(0), "a", petrel_net::PeerAddr::Memory);
        b.register("expander", Expander.start())
            .unwrap()
            .accept::<Expand>();
        let notes = Arc::new(Mutex::new(Vec::new()));
        b.register("scaler", Scaler { notes }.start())
            .unwrap()
            .accept::<Scale>();
        // 3 MiB each way under a 1 MiB limit: split, joined, exact.
        let scaler = a.actor_at::<Scale>("b", "scaler").unwrap();
        let n = 3 << 18;
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let scaled = scaler
            .ask(
                Scale {
                    factor: 2.0,
                    tensor: Tensor::new(vec![n], data.clone()).unwrap(),
                },
                Priority::NORMAL,
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert_eq!(scaled.tensor.shape, vec![n]);
        assert!(scaled.tensor.data.iter().zip(&data).all(|(s, d)| *s == 2.0 * d));
        assert!(a.net_stats().split_messages >= 1 && b.net_stats().split_messages >= 1);

        // A 16 MiB reply over the 8 MiB share: a failure now, not a timeout in 60 s.
        let expander = a.actor_at::<Expand>("b", "expander").unwrap();
        let start = Instant::now();
        let err = expander
            .ask(
                Expand { floats: 4 << 20 },
                Priority::NORMAL,
                Duration::from_secs(60),
            )
            .await
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(30), "waited {:?}", start.elapsed());
        let text = err.to_string();
        assert!(matches!(err, AskError::Remote { .. }), "{text}");
        for expected in ["reply to test.expand", "16777", "8388608", "net.inbound_buffer_bytes"] {
            assert!(text.contains(expected), "missing {expected:?} in {text}");
        }
        // A 16 MiB request: refused before it leaves, naming type, size and knob.
        let big = Tensor::new(vec![4 << 20], vec![0.5; 4 << 20]).unwrap();
        let err = scaler
            .ask(
                Scale {
                    factor: 1.0,
                    tensor: big,
                },
                Priority::NORMAL,
                Duration::from_secs(60),
            )
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, AskError::Oversize { ref msg_type, max: 8_388_608, .. } if msg_type == "test.scale"),
            "{text}"
        );
        assert!(text.contains("net.inbound_buffer_bytes"), "{text}");
        a.shutdown();
        b.shutdown();
    });
}

/// With every node in one process, a node whose port is taken fails the run at once with
/// the bind error naming the address and the node, not as "cluster did not form within
/// 30s" from the coordinator.
#[test]
fn port_in_use_in_process_is_reported_as_such() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let settings = Topology::builder("port-taken")
        .node("coord", &[])
        .node_at("w1", &addr, &[])
        .transport(Transport::Quic)
        .build()
        .unwrap();
    let start = Instant::now();
    let err = Cluster::new(settings).run_in_process().unwrap_err();
    let text = err.to_string();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}: {text}",
        start.elapsed()
    );
    for expected in ["w1", &addr, "in use"] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
}

/// A role that computes without yielding must not delay its node's heartbeats, or a long
/// synchronous step looks like a dead node. Heartbeats leave from the transport's runtime
/// and any arriving frame counts as life: a role on a worker and one on the coordinator
/// each block their thread for 10 s under a 2 s failure timeout, and the run completes
/// with nobody declared dead.
fn blocking_compute_cluster(transport: Transport) {
    let mut settings = Topology::builder("busy")
        .node("coord", &["computes"])
        .node("w1", &["computes"])
        .node("w2", &["idles"])
        .transport(transport)
        .build()
        .unwrap();
    settings.cluster.heartbeat_interval_ms = 250;
    settings.cluster.failure_timeout_ms = 2_000;
    Cluster::new(settings)
        .role("computes", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("start").await.map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_secs(10)); // a synchronous step
                ctx.barrier("done").await.map_err(|e| e.to_string())
            })
        })
        .role("idles", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("start").await.map_err(|e| e.to_string())?;
                ctx.barrier("done").await.map_err(|e| e.to_string())
            })
        })
        .run_in_process()
        .unwrap();
}

#[test]
fn a_role_computing_10s_without_yielding_is_not_declared_dead_over_quic() {
    blocking_compute_cluster(Transport::Quic);
}

// ---- one message to several actors ----

/// `ActorRef::tell_each` reaches two remote actors (one encoding shared by both frames)
/// and a local one (a clone), each exactly once.
#[test]
fn tell_each_reaches_remote_and_local_actors_once() {
    let settings = Topology::builder("fanout")
        .node("s1", &["scaler"])
        .node("s2", &["scaler"])
        .node("client", &["caller"])
        .transport(Transport::Quic)
        .build()
        .unwrap();
    let notes = Arc::new(Mutex::new(Vec::new()));
    let (server_notes, client_notes) = (notes.clone(), notes.clone());
    let cluster = Cluster::new(settings)
        .role("scaler", move |ctx: NodeContext| {
            let notes = server_notes.clone();
            Box::pin(async move {
                register_scaler(&ctx, "scaler", notes)?;
                ctx.barrier("scalers-ready")
                    .await
                    .map_err(|e| e.to_string())?;
                // Stay up until the caller has seen every note arrive.
                ctx.barrier("notes-seen").await.map_err(|e| e.to_string())
            })
        })
        .role("caller", move |ctx: NodeContext| {
            let notes = client_notes.clone();
            Box::pin(async move {
                register_scaler(&ctx, "local", notes.clone())?;
                ctx.barrier("scalers-ready")
                    .await
                    .map_err(|e| e.to_string())?;
                let mut refs = Vec::new();
                for (node, actor) in [("s1", "scaler"), ("s2", "scaler"), ("client", "local")] {
                    refs.push(
                        ctx.node
                            .actor_at::<Note>(node, actor)
                            .map_err(|e| e.to_string())?,
                    );
                }
                assert_eq!(
                    refs.iter().map(|r| r.is_local()).collect::<Vec<_>>(),
                    [false, false, true]
                );
                let note = Note("x".repeat(100_000));
                for sent in petrel_actors::ActorRef::tell_each(&refs, &note, Priority::NORMAL) {
                    sent.map_err(|e| e.to_string())?;
                }
                let deadline = Instant::now() + Duration::from_secs(10);
                while notes.lock().map_err(|e| e.to_string())?.len() < 3 {
                    if Instant::now() > deadline {
                        return Err("not every note arrived within 10 s".to_string());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                ctx.barrier("notes-seen").await.map_err(|e| e.to_string())
            })
        });
    cluster.run_in_process().unwrap();
    let notes = notes.lock().unwrap();
    assert_eq!(notes.len(), 3);
    assert!(
        notes
            .iter()
            .all(|n| n.len() == 100_000 && n.bytes().all(|b| b == b'x'))
    );
}

// ---- a member disconnected for hoarding is named in the job's error ----

/// `a` stalls frames at `b` from its own socket; `b` disconnects it and then fails. The
/// run's error is `b`'s failure and names `a` as the peer `b` disconnected.
#[test]
fn a_failure_after_a_hoarding_peer_was_disconnected_names_that_peer() {
    use petrel_net::hostile::{Attack, misbehave};
    let mut settings = Topology::builder("names-the-hoarder")
        .node("a", &["rogue"])
        .node("b", &["victim"])
        .transport(Transport::Quic)
        .build()
        .unwrap();
    settings.cluster.failure_timeout_ms = 30_000;
    let err = Cluster::new(settings)
        .role("rogue", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("ready").await.map_err(|e| e.to_string())?;
                let b = ctx.node.peer_id("b").ok_or("no node b")?;
                misbehave(ctx.node.net(), b, &[Attack::Stall], Duration::from_secs(8)).await;
                futures::future::pending::<()>().await;
                Ok::<(), String>(())
            })
        })
        .role("victim", |ctx: NodeContext| {
            Box::pin(async move {
                ctx.barrier("ready").await.map_err(|e| e.to_string())?;
                let deadline = Instant::now() + Duration::from_secs(10);
                while ctx.node.disconnected_peers().is_none() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err::<(), String>("gave up".into())
            })
        })
        .run_in_process()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("gave up")
            && err.contains("b had disconnected a for frames that held inbound budget"),
        "{err}"
    );
}
