use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a node's transport. Bad input is counted, logged and survived.
#[derive(Debug, Default)]
pub struct NetStats {
    pub sent_messages: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub received_messages: AtomicU64,
    pub received_bytes: AtomicU64,
    pub malformed_frames: AtomicU64,
    pub oversize_frames: AtomicU64,
    pub truncated_streams: AtomicU64,
    pub refused_connections: AtomicU64,
    pub send_failures: AtomicU64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetStatsSnapshot {
    pub sent_messages: u64,
    pub sent_bytes: u64,
    pub received_messages: u64,
    pub received_bytes: u64,
    pub malformed_frames: u64,
    pub oversize_frames: u64,
    pub truncated_streams: u64,
    pub refused_connections: u64,
    pub send_failures: u64,
}

impl NetStats {
    pub fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

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
        }
    }
}
