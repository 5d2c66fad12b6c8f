use petrel_messages::{NodeId, Priority};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Counters of a node's transport. Bad input is counted, logged and survived.
#[derive(Debug)]
pub struct NetStats {
    /// Frames handed to the wire.
    pub sent_messages: AtomicU64,
    /// Bytes of those frames.
    pub sent_bytes: AtomicU64,
    /// Frames received and decoded.
    pub received_messages: AtomicU64,
    /// Bytes of those frames.
    pub received_bytes: AtomicU64,
    /// Frames that did not decode (dropped).
    pub malformed_frames: AtomicU64,
    /// Frames refused for exceeding `max_message_bytes`.
    pub oversize_frames: AtomicU64,
    /// Streams that ended (or stalled) before their frame was complete.
    pub truncated_streams: AtomicU64,
    /// Connections refused (failed authentication or handshake).
    pub refused_connections: AtomicU64,
    /// Frames that could not be delivered.
    pub send_failures: AtomicU64,
    /// Times the egress shaper made the socket wait for tokens.
    pub shaper_egress_waits: AtomicU64,
    /// Total time of those waits, nanoseconds.
    pub shaper_egress_wait_ns: AtomicU64,
    /// Times the ingress shaper paused reading for tokens.
    pub shaper_ingress_waits: AtomicU64,
    /// Egress token balance in bytes as `f64` bits (NaN until a shaper reports one).
    pub shaper_egress_tokens: AtomicU64,
    /// Connections closed because their peer kept stalling frames that held inbound budget.
    pub disconnected_peers: AtomicU64,
    /// Frames refused because their claimed sender is not the node the connection's
    /// certificate names (the connection is closed at the first one).
    pub impostor_frames: AtomicU64,
    /// Messages above `max_message_bytes` sent split into parts.
    pub split_messages: AtomicU64,
    /// Messages striped over several connections (`stripe_connections`).
    pub striped_messages: AtomicU64,
    /// Messages sent through a shared-memory file (`shared_memory_dir`).
    pub shared_memory_messages: AtomicU64,
    /// QUIC connections this node opened to peers (`stripe_connections` per peer).
    pub opened_connections: AtomicU64,
    /// When a complete frame last arrived from each peer, stamped on the transport's own
    /// runtime: liveness that application compute on the node's thread cannot delay.
    heard: Mutex<HashMap<NodeId, Instant>>,
    /// Traffic per (peer, priority).
    links: Mutex<HashMap<(NodeId, Priority), LinkStats>>,
    /// The certificate names of the peers counted in `disconnected_peers`, in order.
    disconnected: Mutex<Vec<String>>,
}

impl Default for NetStats {
    fn default() -> Self {
        Self {
            sent_messages: AtomicU64::default(),
            sent_bytes: AtomicU64::default(),
            received_messages: AtomicU64::default(),
            received_bytes: AtomicU64::default(),
            malformed_frames: AtomicU64::default(),
            oversize_frames: AtomicU64::default(),
            truncated_streams: AtomicU64::default(),
            refused_connections: AtomicU64::default(),
            send_failures: AtomicU64::default(),
            shaper_egress_waits: AtomicU64::default(),
            shaper_egress_wait_ns: AtomicU64::default(),
            shaper_ingress_waits: AtomicU64::default(),
            shaper_egress_tokens: AtomicU64::new(f64::NAN.to_bits()),
            links: Mutex::default(),
            disconnected_peers: AtomicU64::default(),
            impostor_frames: AtomicU64::default(),
            split_messages: AtomicU64::default(),
            striped_messages: AtomicU64::default(),
            shared_memory_messages: AtomicU64::default(),
            opened_connections: AtomicU64::default(),
            heard: Mutex::default(),
            disconnected: Mutex::default(),
        }
    }
}

/// Traffic between this node and one peer at one priority (for `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Bytes sent to the peer.
    pub sent_bytes: u64,
    /// Frames sent to the peer.
    pub sent_messages: u64,
    /// Bytes received from the peer.
    pub received_bytes: u64,
    /// Frames received from the peer.
    pub received_messages: u64,
}

/// The counters of [`NetStats`] at one moment (serializable, for reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetStatsSnapshot {
    /// Frames handed to the wire.
    pub sent_messages: u64,
    /// Bytes of those frames.
    pub sent_bytes: u64,
    /// Frames received and decoded.
    pub received_messages: u64,
    /// Bytes of those frames.
    pub received_bytes: u64,
    /// Frames that did not decode (dropped).
    pub malformed_frames: u64,
    /// Frames refused for exceeding `max_message_bytes`.
    pub oversize_frames: u64,
    /// Streams that ended (or stalled) before their frame was complete.
    pub truncated_streams: u64,
    /// Connections refused (failed authentication or handshake).
    pub refused_connections: u64,
    /// Frames that could not be delivered.
    pub send_failures: u64,
    /// Connections closed because their peer kept stalling frames that held inbound budget.
    #[serde(default)]
    pub disconnected_peers: u64,
    /// Frames refused for claiming a sender other than the node their certificate names.
    #[serde(default)]
    pub impostor_frames: u64,
    /// Messages above `max_message_bytes` sent split into parts.
    #[serde(default)]
    pub split_messages: u64,
    /// Messages striped over several connections (`stripe_connections`).
    #[serde(default)]
    pub striped_messages: u64,
    /// Messages sent through a shared-memory file.
    #[serde(default)]
    pub shared_memory_messages: u64,
    /// QUIC connections this node opened to peers.
    #[serde(default)]
    pub opened_connections: u64,
    /// Who was disconnected for misbehaving (`disconnected_peers`): the node names their
    /// certificates bind, in order.
    #[serde(default)]
    pub disconnected_names: Vec<String>,
}

impl NetStats {
    /// Adds `by` to `counter`.
    pub fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    /// A frame of `bytes` went to `to` at `priority`.
    pub fn sent(&self, to: NodeId, priority: Priority, bytes: u64) {
        Self::bump(&self.sent_messages, 1);
        Self::bump(&self.sent_bytes, bytes);
        if let Ok(mut links) = self.links.lock() {
            let l = links.entry((to, priority)).or_default();
            l.sent_messages += 1;
            l.sent_bytes += bytes;
        }
    }

    /// A frame of `bytes` arrived from `from` at `priority` and decoded.
    pub fn received(&self, from: NodeId, priority: Priority, bytes: u64) {
        Self::bump(&self.received_messages, 1);
        Self::bump(&self.received_bytes, bytes);
        if let Ok(mut links) = self.links.lock() {
            let l = links.entry((from, priority)).or_default();
            l.received_messages += 1;
            l.received_bytes += bytes;
        }
    }

    /// Traffic per (peer, priority), sorted.
    pub fn links(&self) -> Vec<(NodeId, Priority, LinkStats)> {
        let mut out: Vec<_> = match self.links.lock() {
            Ok(l) => l.iter().map(|(&(n, p), s)| (n, p, *s)).collect(),
            Err(_) => Vec::new(),
        };
        out.sort_by_key(|(n, p, _)| (n.0, p.0));
        out
    }

    /// The egress shaper's token balance, if a shaper reported one.
    pub fn shaper_egress_tokens(&self) -> Option<f64> {
        let v = f64::from_bits(self.shaper_egress_tokens.load(Ordering::Relaxed));
        (!v.is_nan()).then_some(v)
    }

    /// A complete frame from `peer` arrived now.
    pub(crate) fn heard_from(&self, peer: NodeId) {
        if let Ok(mut heard) = self.heard.lock() {
            heard.insert(peer, Instant::now());
        }
    }

    /// A peer whose certificate binds `name` was disconnected for misbehaving.
    pub(crate) fn disconnected(&self, name: &str) {
        Self::bump(&self.disconnected_peers, 1);
        if let Ok(mut names) = self.disconnected.lock() {
            names.push(name.to_string());
        }
    }

    /// When a complete frame last arrived from `peer`.
    pub fn last_heard(&self, peer: NodeId) -> Option<Instant> {
        self.heard.lock().ok().and_then(|h| h.get(&peer).copied())
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> NetStatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NetStatsSnapshot {
            sent_messages: g(&self.sent_messages),
            sent_bytes: g(&self.sent_bytes),
            received_messages: g(&self.received_messages),
            received_bytes: g(&self.received_bytes),
            malformed_frames: g(&self.malformed_frames),
            oversize_frames: g(&self.oversize_frames),
            truncated_streams: g(&self.truncated_streams),
            refused_connections: g(&self.refused_connections),
            send_failures: g(&self.send_failures),
            disconnected_peers: g(&self.disconnected_peers),
            impostor_frames: g(&self.impostor_frames),
            split_messages: g(&self.split_messages),
            striped_messages: g(&self.striped_messages),
            shared_memory_messages: g(&self.shared_memory_messages),
            opened_connections: g(&self.opened_connections),
            disconnected_names: self
                .disconnected
                .lock()
                .map(|n| n.clone())
                .unwrap_or_default(),
        }
    }
}
