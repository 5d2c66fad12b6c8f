//! The coordinator's role fails as soon as the cluster formed, on links that take a while
//! to deliver (300 ms on every packet received): every other node must still hear the
//! root cause, rather than lose the coordinator's last messages when its node exits and
//! wait out its join timeout (RELIABILITY.md, "a node that starts after the coordinator's
//! node has exited").

use petrel_actors::topology::Wiring;
use petrel_actors::{Cluster, NodeContext, NodeError, Topology, Transport};
use petrel_net::{ClusterCredentials, ShaperConfig};

#[test]
fn a_coordinator_failing_at_once_is_heard_by_every_node_over_slow_links() {
    let names = ["coord", "w1", "w2"];
    let ports: Vec<u16> = names
        .iter()
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    let mut builder = Topology::builder("late-refusal").transport(Transport::Quic);
    for (n, port) in names.iter().zip(&ports) {
        let role = if *n == "coord" { "fails" } else { "works" };
        builder = builder.node_at(n, &format!("127.0.0.1:{port}"), &[role]);
    }
    let mut settings = builder.build().unwrap();
    settings.cluster.heartbeat_interval_ms = 200;
    settings.cluster.failure_timeout_ms = 20_000;
    settings.cluster.join_timeout_ms = 20_000;
    settings.net.shaper = Some(ShaperConfig {
        latency_ms: 300,
        ..ShaperConfig::mbit(1000.0)
    });
    let cluster = Cluster::new(settings)
        .role("fails", |_ctx: NodeContext| {
            Box::pin(async move { Err::<(), String>("boom".to_string()) })
        })
        .role("works", |_ctx: NodeContext| {
            Box::pin(async move {
                futures::future::pending::<()>().await;
                Ok::<(), String>(())
            })
        });
    let creds = ClusterCredentials::generate_cluster(&names).unwrap();
    let handles: Vec<_> = names
        .iter()
        .zip(creds)
        .map(|(name, creds)| {
            let cluster = cluster.clone();
            let name = name.to_string();
            std::thread::spawn(move || (name.clone(), cluster.run_node(&name, Wiring::Quic(creds))))
        })
        .collect();
    for h in handles {
        let (name, result) = h.join().unwrap();
        let err = result.expect_err("every node stops with the failure");
        let text = petrel_actors::error_chain(&err);
        assert!(
            !matches!(err, NodeError::JoinTimeout { .. }) && text.contains("boom"),
            "{name} did not hear the root cause: {text}"
        );
    }
}
