//! Node state read at scrape time from the counters the net and node layers already keep.

use crate::families::{LabelValue, encode_rows};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Traffic between this node and one peer at one priority.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkSample {
    /// The peer's name.
    pub peer: String,
    /// The frames' priority.
    pub priority: i32,
    /// Bytes sent to the peer.
    pub sent_bytes: u64,
    /// Frames sent to the peer.
    pub sent_messages: u64,
    /// Bytes received from the peer.
    pub received_bytes: u64,
    /// Frames received from the peer.
    pub received_messages: u64,
}

/// What this node's failure detector thinks of a peer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerSample {
    /// The peer's name.
    pub peer: String,
    /// False once the peer was declared down.
    pub up: bool,
    /// Seconds since a heartbeat was last heard from it (`None`: never, or not watched).
    pub heartbeat_age_s: Option<f64>,
}

/// One node's runtime state at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSample {
    /// The node's roles.
    pub roles: Vec<String>,
    /// Traffic per peer and priority.
    pub links: Vec<LinkSample>,
    /// Frames that did not decode.
    pub malformed_frames: u64,
    /// Frames refused for their size.
    pub oversize_frames: u64,
    /// Streams that ended before their frame was complete.
    pub truncated_streams: u64,
    /// Connections refused (authentication or handshake).
    pub refused_connections: u64,
    /// Frames that could not be delivered.
    pub send_failures: u64,
    /// Frames refused for claiming another sender than their certificate names.
    pub impostor_frames: u64,
    /// Bytes waiting in the outbox.
    pub outbox_bytes: u64,
    /// Items waiting per mailbox (the node's inbound queue, actors' priority inboxes).
    pub mailboxes: Vec<(String, u64)>,
    /// Times the egress shaper made the socket wait for tokens.
    pub shaper_egress_waits: u64,
    /// Total time of those waits.
    pub shaper_egress_wait_s: f64,
    /// Times the ingress shaper stopped reading for tokens.
    pub shaper_ingress_waits: u64,
    /// Egress token balance in bytes (negative: in debt), when a shaper is configured.
    pub shaper_egress_tokens: Option<f64>,
    /// Configured egress rate in bytes per second (0: unshaped).
    pub shaper_egress_rate: u64,
    /// The failure detector's view of each peer.
    pub peers: Vec<PeerSample>,
}

thread_local! {
    static THREAD_NODE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Names the node whose actors run on this thread (each node of a process runs its actix
/// system on a thread of its own), so hooks deep in a system record under the right `node`
/// label without carrying the name around.
pub fn set_thread_node(node: &str) {
    THREAD_NODE.with(|n| *n.borrow_mut() = Some(node.to_string()));
}

/// The node set with [`set_thread_node`] on this thread, or `"process"`.
pub fn thread_node() -> String {
    THREAD_NODE
        .with(|n| n.borrow().clone())
        .unwrap_or_else(|| "process".to_string())
}

static PROCESS_METRICS_ADDR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The `/metrics` address of this process's node, set from the command line
/// (`petrel node --metrics-addr`); it wins over the node's `metrics_addr` setting.
pub fn set_process_metrics_addr(addr: &str) {
    let _ = PROCESS_METRICS_ADDR.set(addr.to_string());
}

/// The address set with [`set_process_metrics_addr`].
pub fn process_metrics_addr() -> Option<&'static str> {
    PROCESS_METRICS_ADDR.get().map(String::as_str)
}

type Sampler = Arc<dyn Fn() -> NodeSample + Send + Sync>;

fn samplers() -> &'static Mutex<BTreeMap<String, Sampler>> {
    static SAMPLERS: std::sync::OnceLock<Mutex<BTreeMap<String, Sampler>>> =
        std::sync::OnceLock::new();
    SAMPLERS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Registers `node`'s sampler: every scrape of this process calls it (replaces an earlier
/// sampler of the same name).
pub fn register_node(node: &str, sampler: impl Fn() -> NodeSample + Send + Sync + 'static) {
    if let Ok(mut m) = samplers().lock() {
        m.insert(node.to_string(), Arc::new(sampler));
    }
}

/// Removes `node`'s sampler (the node stopped).
pub fn unregister_node(node: &str) {
    if let Ok(mut m) = samplers().lock() {
        m.remove(node);
    }
}

#[derive(Debug)]
pub(crate) struct NodesCollector;

type Labels = Vec<(&'static str, LabelValue)>;

impl Collector for NodesCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Sample outside the lock: a sampler takes the node's own locks.
        let list: Vec<(String, Sampler)> = match samplers().lock() {
            Ok(m) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Err(_) => return Ok(()),
        };
        let samples: Vec<(String, NodeSample)> = list.into_iter().map(|(n, f)| (n, f())).collect();
        encode_info(&mut enc, &samples)?;
        encode_counters(&mut enc, &samples)?;
        encode_shaper(&mut enc, &samples)?;
        encode_peers(&mut enc, &samples)
    }
}

/// The labels of node `n`'s rows, then `extra`.
fn node<const N: usize>(n: &str, extra: [(&'static str, LabelValue); N]) -> Labels {
    let mut labels = vec![("node", LabelValue::new(n))];
    labels.extend(extra);
    labels
}

/// `petrel_node_info`: one row per node, with its roles.
fn encode_info(
    enc: &mut DescriptorEncoder,
    samples: &[(String, NodeSample)],
) -> Result<(), std::fmt::Error> {
    let info: Vec<(Labels, ConstGauge)> = samples
        .iter()
        .map(|(n, s)| {
            let roles = LabelValue::new(s.roles.join(","));
            (node(n, [("roles", roles)]), ConstGauge::new(1))
        })
        .collect();
    let help = "A node of this process and its roles";
    encode_rows(enc, "petrel_node_info", help, &info)
}

/// `[(name, help, field of $sample)]`: the `u64` series read from each sample.
macro_rules! series {
    ($sample:ty; $($name:literal, $help:literal, $field:ident;)+) => {
        [$(($name, $help, (|s: &$sample| s.$field) as fn(&$sample) -> u64),)+]
    };
}

/// The transport's traffic per peer and priority, then the per-node event counters
/// (refused and failed frames, shaper waits).
fn encode_counters(
    enc: &mut DescriptorEncoder,
    samples: &[(String, NodeSample)],
) -> Result<(), std::fmt::Error> {
    let link_series = series![LinkSample;
        "petrel_net_sent_bytes", "Bytes sent, per peer and priority", sent_bytes;
        "petrel_net_sent_messages", "Frames sent, per peer and priority", sent_messages;
        "petrel_net_received_bytes", "Bytes received, per peer and priority", received_bytes;
        "petrel_net_received_messages", "Frames received, per peer and priority", received_messages;
    ];
    for (name, help, field) in link_series {
        let rows: Vec<(Labels, ConstCounter)> = samples
            .iter()
            .flat_map(|(n, s)| {
                s.links.iter().map(move |l| {
                    let peer = ("peer", LabelValue::new(&l.peer));
                    let labels = node(n, [peer, ("priority", LabelValue::new(l.priority))]);
                    (labels, ConstCounter::new(field(l)))
                })
            })
            .collect();
        encode_rows(enc, name, help, &rows)?;
    }
    let counters = series![NodeSample;
        "petrel_net_malformed_frames", "Frames that did not decode (dropped)", malformed_frames;
        "petrel_net_oversize_frames", "Frames refused for their size", oversize_frames;
        "petrel_net_truncated_streams", "Streams that ended before their frame", truncated_streams;
        "petrel_net_refused_connections", "Connections refused (authentication or handshake)",
            refused_connections;
        "petrel_net_send_failures", "Frames that could not be delivered", send_failures;
        "petrel_net_impostor_frames",
            "Frames refused for claiming another node than their certificate names",
            impostor_frames;
        "petrel_shaper_egress_waits", "Times the egress shaper made the socket wait for tokens",
            shaper_egress_waits;
        "petrel_shaper_ingress_waits", "Times the ingress shaper paused reading for tokens",
            shaper_ingress_waits;
    ];
    for (name, help, field) in counters {
        per_node(enc, samples, name, help, |s| {
            Some(ConstCounter::new(field(s)))
        })?;
    }
    Ok(())
}

/// One family with a row per node of `value(sample)`, none where it is `None`.
fn per_node<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    samples: &[(String, NodeSample)],
    name: &str,
    help: &str,
    value: impl Fn(&NodeSample) -> Option<M>,
) -> Result<(), std::fmt::Error> {
    let rows: Vec<(Labels, M)> = samples
        .iter()
        .filter_map(|(n, s)| value(s).map(|m| (node(n, []), m)))
        .collect();
    encode_rows(enc, name, help, &rows)
}

/// The egress shaper (time waited, token balance, configured rate), then what waits: the
/// outbox's bytes and each mailbox's depth.
fn encode_shaper(
    enc: &mut DescriptorEncoder,
    samples: &[(String, NodeSample)],
) -> Result<(), std::fmt::Error> {
    let help = "Time the egress shaper made the socket wait for tokens";
    let wait = |s: &NodeSample| Some(ConstCounter::new(s.shaper_egress_wait_s));
    let name = "petrel_shaper_egress_wait_seconds";
    per_node(enc, samples, name, help, wait)?;
    let help = "Egress token balance (negative: in debt for the last send)";
    let tokens = |s: &NodeSample| s.shaper_egress_tokens.map(ConstGauge::new);
    let name = "petrel_shaper_egress_tokens_bytes";
    per_node(enc, samples, name, help, tokens)?;
    let gauges = series![NodeSample;
        "petrel_shaper_egress_rate_bytes_per_second", "Configured egress rate (0: unshaped)",
            shaper_egress_rate;
        "petrel_outbox_queued_bytes", "Bytes waiting in the priority outbox", outbox_bytes;
    ];
    for (name, help, field) in gauges {
        per_node(enc, samples, name, help, |s| {
            Some(ConstGauge::new(field(s) as i64))
        })?;
    }
    let mailboxes: Vec<(Labels, ConstGauge)> = samples
        .iter()
        .flat_map(|(n, s)| {
            s.mailboxes.iter().map(move |(m, d)| {
                let labels = node(n, [("mailbox", LabelValue::new(m))]);
                (labels, ConstGauge::new(*d as i64))
            })
        })
        .collect();
    let help = "Items waiting in a mailbox (inbound frames, actors' priority inboxes)";
    encode_rows(enc, "petrel_mailbox_depth", help, &mailboxes)
}

/// The failure detector's view of each peer: up or down, and the heartbeat's age.
fn encode_peers(
    enc: &mut DescriptorEncoder,
    samples: &[(String, NodeSample)],
) -> Result<(), std::fmt::Error> {
    let peer_labels = |n: &str, p: &PeerSample| node(n, [("peer", LabelValue::new(&p.peer))]);
    let up: Vec<(Labels, ConstGauge)> = samples
        .iter()
        .flat_map(|(n, s)| {
            s.peers
                .iter()
                .map(move |p| (peer_labels(n, p), ConstGauge::new(i64::from(p.up))))
        })
        .collect();
    let help = "The failure detector's state of a peer (1 up, 0 declared down)";
    encode_rows(enc, "petrel_peer_up", help, &up)?;
    let age: Vec<(Labels, ConstGauge<f64>)> = samples
        .iter()
        .flat_map(|(n, s)| {
            s.peers.iter().filter_map(move |p| {
                p.heartbeat_age_s
                    .map(|a| (peer_labels(n, p), ConstGauge::new(a)))
            })
        })
        .collect();
    let help = "Seconds since a heartbeat was last heard from a peer";
    encode_rows(enc, "petrel_heartbeat_age_seconds", help, &age)
}
