use super::node::merge_topology;
use super::processes::{node_failure, reserve_metrics_ports};
use super::*;
use petrel_actors::Topology;
use petrel_actors::topology::pick_ports;

#[test]
fn launch_flags_are_stripped_for_children() {
    let args = [
        "--rounds",
        "5",
        "--processes",
        "--run-dir",
        "/x",
        "--timeout-s=9",
        "--verbose",
    ]
    .map(OsString::from);
    assert_eq!(
        strip_launch_flags(args.into_iter()),
        ["--rounds", "5", "--verbose"].map(OsString::from)
    );
}

#[test]
fn nodes_on_emulated_hosts_get_one_host_each_and_run_inside_it() {
    let mut s = topo();
    let hosts = crate::netns::Hosts {
        prefix: "pc7".into(),
        count: 2,
    };
    place_on_hosts(&mut s, &hosts).unwrap();
    let addrs: Vec<&str> = s.nodes.iter().map(|n| n.addr.as_str()).collect();
    assert_eq!(addrs, ["198.18.0.1:7000", "198.18.0.2:7000"]);
    let e = place_on_hosts(
        &mut s,
        &crate::netns::Hosts {
            prefix: "pc7".into(),
            count: 1,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 nodes but 1 hosts"), "{e}");
    let child = ChildCommand::PetrelNode {
        program: "/bin/petrel".into(),
    };
    let cmd = child.command("b", Path::new("/r/cluster.toml"), Some("pc7-h1"));
    let std = cmd.as_std();
    assert_eq!(std.get_program(), "ip");
    let args: Vec<&std::ffi::OsStr> = std.get_args().collect();
    assert_eq!(
        args,
        [
            "netns",
            "exec",
            "pc7-h1",
            "/bin/petrel",
            "node",
            "--config",
            "/r/cluster.toml",
            "--name",
            "b"
        ]
    );
    let plain = child.command("b", Path::new("/r/cluster.toml"), None);
    assert_eq!(plain.as_std().get_program(), "/bin/petrel");
}

/// A node whose request failed in another node's handler leaves that failure, and the
/// launcher reports it as it is, not as a failure of the caller.
#[test]
fn a_handler_failure_elsewhere_is_reported_as_that_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let remote = NodeError::Ask(petrel_actors::AskError::Remote {
        actor: "mapper".into(),
        node: "map-1".into(),
        from: "driver".into(),
        error: "boom".into(),
    });
    let role_failed = LaunchError::from(NodeError::Role {
        node: "driver".into(),
        role: "drive".into(),
        source: Box::new(remote),
    });
    assert_eq!(report_failure(dir.path(), Some("driver"), &role_failed), 1);
    let roles = [("driver".to_string(), "drive".to_string())];
    let e = node_failure(dir.path(), &roles, "driver", "exit status: 1");
    assert!(matches!(e, LaunchError::RequestFailed { .. }), "{e}");
    assert_eq!(
        format!("{e:?}"),
        "role drive on driver: actor mapper on node map-1 failed to handle a request from driver: boom"
    );
    // A failure of the node's own stays its own.
    let own = LaunchError::from(NodeError::Config("bad".into()));
    assert_eq!(report_failure(dir.path(), Some("w1"), &own), 1);
    let e = node_failure(dir.path(), &[], "w1", "exit status: 1");
    assert!(matches!(e, LaunchError::NodeFailed { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("node w1 failed (configuration: bad)"),
        "{e}"
    );
}

#[test]
fn modes_follow_the_flags() {
    let mut a = LaunchArgs::default();
    assert_eq!(a.mode(), LaunchMode::InProcess);
    a.processes = true;
    assert_eq!(a.mode(), LaunchMode::Processes);
    let a = LaunchArgs {
        config: Some("c.toml".into()),
        ..LaunchArgs::default()
    };
    assert!(matches!(a.mode(), LaunchMode::Node { name: None, .. }));
}

fn topo() -> Settings {
    Topology::builder("t")
        .node("a", &["x"])
        .node("b", &["y"])
        .build()
        .unwrap()
}

#[test]
fn every_node_gets_a_port_and_a_metrics_port_of_its_own() {
    // Ports are picked and released at once; with 400 nodes two random picks of the
    // same port were likely (and a restarted job once failed on one).
    let mut builder = Topology::builder("many");
    let names: Vec<String> = (0..400).map(|i| format!("n{i}")).collect();
    for name in &names {
        builder = builder.node(name, &["x"]);
    }
    let mut settings = builder.build().unwrap();
    pick_ports(&mut settings).unwrap();
    reserve_metrics_ports(&mut settings).unwrap();
    let addrs: std::collections::HashSet<_> =
        settings.nodes.iter().map(|n| n.addr.clone()).collect();
    let metrics: std::collections::HashSet<_> = settings
        .nodes
        .iter()
        .map(|n| n.metrics_addr.clone().unwrap())
        .collect();
    assert_eq!(addrs.len(), 400);
    assert_eq!(metrics.len(), 400);
}

#[test]
fn node_names_come_from_the_flag_and_must_exist() {
    let s = topo();
    assert_eq!(node_name(Some("b"), &s).unwrap(), "b");
    let e = node_name(Some("c"), &s).unwrap_err().to_string();
    assert!(
        e.contains("node c is not in the topology (nodes: a, b)"),
        "{e}"
    );
    assert!(node_name(Some("../a"), &s).is_err());
}

#[test]
fn a_file_must_describe_the_programs_topology() {
    let code = topo();
    let mut file = code.clone();
    for n in &mut file.nodes {
        n.roles.clear();
    }
    let merged = merge_topology(&code, file.clone()).unwrap();
    assert_eq!(merged.nodes, code.nodes);
    file.nodes[1].roles = vec!["x".into()];
    let e = merge_topology(&code, file.clone()).unwrap_err().to_string();
    assert!(e.contains("node b"), "{e}");
    file.nodes.pop();
    let e = merge_topology(&code, file).unwrap_err().to_string();
    assert!(e.contains("names nodes a but"), "{e}");
}
