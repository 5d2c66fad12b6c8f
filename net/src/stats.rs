use petrel_messages::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Counters of a node's transport. Bad input is counted, logged and survived.
#[derive(Debug, Default)]
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
    /// Connections closed because their peer kept stalling frames that held inbound budget.
    pub disconnected_peers: AtomicU64,
    /// When a complete frame last arrived from each peer, stamped on the transport's own
    /// runtime: liveness that application compute on the node's thread cannot delay.
    heard: Mutex<HashMap<NodeId, Instant>>,
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
}

impl NetStats {
    /// Adds `by` to `counter`.
    pub fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    /// A complete frame from `peer` arrived now.
    pub(crate) fn heard_from(&self, peer: NodeId) {
        if let Ok(mut heard) = self.heard.lock() {
            heard.insert(peer, Instant::now());
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
        }
    }
}
