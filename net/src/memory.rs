//! In-memory transport: nodes in one process exchange encoded frames through channels.
//! Same interface and same framing as QUIC, so tests exercise the codec paths; an optional
//! egress shaper applies the same token bucket per message.

use crate::config::NetConfig;
use crate::error::NetError;
use crate::net::{Arrival, Inbound};
use crate::sequencer::LaneHeader;
use crate::shaper::TokenBucket;
use crate::stats::NetStats;
use bytes::Bytes;
use petrel_messages::{Frame, NodeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

/// What the hub knows of a member: where to deliver, its counters, its frame size limit.
#[derive(Clone)]
struct Member {
    tx: mpsc::Sender<Arrival>,
    stats: Arc<NetStats>,
    max_frame: usize,
}

/// The "network" connecting in-memory nodes.
#[derive(Clone, Default)]
pub struct MemoryHub {
    peers: Arc<Mutex<HashMap<NodeId, Member>>>,
}

impl MemoryHub {
    /// A hub with no nodes yet.
    pub fn new() -> Self {
        Self::default()
    }
}

pub(crate) struct MemoryLink {
    hub: MemoryHub,
    node: NodeId,
    egress: Option<tokio::sync::Mutex<TokenBucket>>,
}

impl MemoryLink {
    pub(crate) fn join(
        hub: &MemoryHub,
        node: NodeId,
        cfg: &NetConfig,
        stats: Arc<NetStats>,
        tx: mpsc::Sender<Arrival>,
    ) -> Self {
        if let Ok(mut peers) = hub.peers.lock() {
            peers.insert(
                node,
                Member {
                    tx,
                    stats,
                    max_frame: cfg.max_message_bytes,
                },
            );
        }
        let egress = cfg
            .shaper
            .as_ref()
            .filter(|s| s.egress_bytes_per_s > 0)
            .map(|s| {
                tokio::sync::Mutex::new(TokenBucket::new(
                    s.egress_bytes_per_s,
                    s.burst_bytes,
                    Instant::now(),
                ))
            });
        Self {
            hub: hub.clone(),
            node,
            egress,
        }
    }

    pub(crate) fn leave(&self) {
        if let Ok(mut peers) = self.hub.peers.lock() {
            peers.remove(&self.node);
        }
    }

    pub(crate) async fn deliver(
        &self,
        to: NodeId,
        lane: LaneHeader,
        frame: Bytes,
    ) -> Result<(), NetError> {
        if let Some(bucket) = &self.egress {
            let mut b = bucket.lock().await;
            loop {
                let wait = b.wait_time(Instant::now());
                if wait.is_zero() {
                    break;
                }
                tokio::time::sleep(wait).await;
            }
            b.charge(Instant::now(), frame.len());
        }
        let peer = self.hub.peers.lock().ok().and_then(|p| p.get(&to).cloned());
        let Some(Member {
            tx,
            stats,
            max_frame: max,
        }) = peer
        else {
            return Err(NetError::UnknownPeer(to));
        };
        let len = frame.len();
        // The receiver decodes exactly as it would from a stream, counting bad frames.
        let frame = match Frame::decode(frame, max) {
            Ok(f) => f,
            Err(e) => {
                let counter = match e {
                    petrel_messages::CodecError::Oversize { .. } => &stats.oversize_frames,
                    _ => &stats.malformed_frames,
                };
                NetStats::bump(counter, 1);
                tracing::warn!(from = %self.node, error = %e, "dropped bad frame");
                return Ok(());
            }
        };
        stats.received(frame.header.from, frame.header.priority, len as u64);
        tx.send(Arrival {
            lane,
            inbound: Inbound {
                frame,
                len,
                _budget: [None, None],
            },
        })
        .await
        .map_err(|_| NetError::Send {
            peer: to,
            source: "peer stopped receiving".into(),
        })
    }
}
