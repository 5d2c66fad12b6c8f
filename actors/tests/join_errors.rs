//! A cluster that does not form says who is missing: the coordinator and every node that
//! reached it name the nodes that never joined.

use petrel_actors::topology::Wiring;
use petrel_actors::{Cluster, ExpectedNode, NodeError, Topology, Transport, error_chain};
use petrel_net::MemoryHub;

#[test]
fn a_join_timeout_names_the_nodes_that_never_joined() {
    let mut settings = Topology::builder("partial")
        .node("coord", &[])
        .node("w1", &[])
        .node("w2", &[])
        .node("w3", &[])
        .transport(Transport::Memory)
        .build()
        .unwrap();
    settings.cluster.join_timeout_ms = 1500;
    let cluster = Cluster::new(settings);
    let hub = MemoryHub::new();
    let handles: Vec<_> = ["coord", "w1"]
        .into_iter()
        .map(|name| {
            let (cluster, hub) = (cluster.clone(), hub.clone());
            std::thread::spawn(move || (name, cluster.run_node(name, Wiring::Memory(hub))))
        })
        .collect();
    for h in handles {
        let (name, result) = h.join().unwrap();
        let err = result.expect_err("the cluster cannot form");
        let text = error_chain(&err);
        let NodeError::JoinTimeout {
            coordinator,
            missing,
            ..
        } = err
        else {
            panic!("{name}: {text}");
        };
        assert_eq!(coordinator, "coord");
        let never = |name: &str| ExpectedNode {
            name: name.into(),
            addr: None,
        };
        assert_eq!(missing, [never("w2"), never("w3")], "{name}");
        assert_eq!(
            text,
            "joining the cluster failed: cluster did not form within 1.5s: nodes w2, w3 never joined (coordinator: coord)",
            "{name}"
        );
    }
}
