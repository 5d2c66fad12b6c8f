//! What a node shows on `/metrics`: transport counters, queue depths and the failure
//! detector's view, sampled at scrape time, and the exporter serving them.

use super::Node;
use crate::error::NodeError;
use petrel_messages::NodeId;
use petrel_observe::{LinkSample, MetricsServer, NodeSample, PeerSample};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The node's observability state (a field of the node, behind its `Arc`).
#[derive(Default)]
pub(super) struct NodeObserve {
    /// When a heartbeat was last heard from each peer.
    heartbeats: Mutex<HashMap<NodeId, Instant>>,
    /// Inbound frames waiting for the node's dispatch loop.
    pub(super) inbound_depth: AtomicU64,
    exporter: Mutex<Option<MetricsServer>>,
}

impl Node {
    /// Records a heartbeat from `peer` (the failure detector's input).
    pub fn heard_from(&self, peer: NodeId) {
        let now = Instant::now();
        let previous = match self.inner.observe.heartbeats.lock() {
            Ok(mut h) => h.insert(peer, now),
            Err(_) => return,
        };
        if let Some(prev) = previous {
            petrel_observe::metrics().heartbeat(
                self.name(),
                &self.peer_name(peer),
                now.duration_since(prev),
            );
        }
    }

    /// Registers this node's sampler with the process's registry and, when `metrics_addr`
    /// is set, serves `/metrics` there until [`Node::shutdown`]. Returns the bound address.
    pub fn start_metrics(
        &self,
        roles: &[String],
        metrics_addr: Option<&str>,
    ) -> Result<Option<std::net::SocketAddr>, NodeError> {
        petrel_observe::set_thread_node(self.name());
        let weak = std::sync::Arc::downgrade(&self.inner);
        let roles = roles.to_vec();
        petrel_observe::register_node(self.name(), move || match weak.upgrade() {
            Some(inner) => Node { inner }.metrics_sample(&roles),
            None => NodeSample::default(),
        });
        let Some(addr) = metrics_addr else {
            return Ok(None);
        };
        let server = MetricsServer::start(addr).map_err(|source| NodeError::Metrics {
            node: self.name().to_string(),
            source,
        })?;
        let bound = server.local_addr();
        if let Ok(mut e) = self.inner.observe.exporter.lock() {
            *e = Some(server);
        }
        Ok(Some(bound))
    }

    /// Stops the exporter and removes the sampler.
    pub(super) fn stop_metrics(&self) {
        petrel_observe::unregister_node(self.name());
        let server = self
            .inner
            .observe
            .exporter
            .lock()
            .ok()
            .and_then(|mut e| e.take());
        drop(server);
    }

    /// This node's state now, read from the counters the net and node layers keep.
    pub fn metrics_sample(&self, roles: &[String]) -> NodeSample {
        let net = self.net();
        let stats = net.counters();
        let snapshot = stats.snapshot();
        let links = stats
            .links()
            .into_iter()
            .map(|(peer, priority, l)| LinkSample {
                peer: self.peer_name(peer),
                priority: priority.0,
                sent_bytes: l.sent_bytes,
                sent_messages: l.sent_messages,
                received_bytes: l.received_bytes,
                received_messages: l.received_messages,
            })
            .collect();
        let heard = self
            .inner
            .observe
            .heartbeats
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default();
        let peers = self
            .peers()
            .into_iter()
            .filter(|(id, _)| *id != self.id())
            .map(|(id, peer)| PeerSample {
                peer,
                up: !self.is_down(id),
                heartbeat_age_s: heard.get(&id).map(|t| t.elapsed().as_secs_f64()),
            })
            .collect();
        let shaper = net.config().shaper.as_ref();
        NodeSample {
            roles: roles.to_vec(),
            links,
            malformed_frames: snapshot.malformed_frames,
            oversize_frames: snapshot.oversize_frames,
            truncated_streams: snapshot.truncated_streams,
            refused_connections: snapshot.refused_connections,
            send_failures: snapshot.send_failures,
            impostor_frames: snapshot.impostor_frames,
            outbox_bytes: net.queued_bytes() as u64,
            mailboxes: vec![(
                "inbound".to_string(),
                self.inner.observe.inbound_depth.load(Ordering::Relaxed),
            )],
            shaper_egress_waits: stats.shaper_egress_waits.load(Ordering::Relaxed),
            shaper_egress_wait_s: stats.shaper_egress_wait_ns.load(Ordering::Relaxed) as f64 / 1e9,
            shaper_ingress_waits: stats.shaper_ingress_waits.load(Ordering::Relaxed),
            shaper_egress_tokens: stats.shaper_egress_tokens(),
            shaper_egress_rate: shaper.map_or(0, |s| s.egress_bytes_per_s),
            peers,
        }
    }
}
