//! Who may hold how much of a node's receive memory, and the control lane.
//!
//! Invariant: no single peer, and no data stream, can stop this node from reading control
//! traffic (heartbeats, joins, barriers, failure notices) from anyone.
//!
//! - Each peer (the node names its certificate binds, over all its connections) has its
//!   own share ([`peer_share`]: half the node's
//!   `inbound_buffer_bytes` but at least one largest message). A data frame takes bytes
//!   from its peer's share first, then from the node's budget, so one peer announcing big
//!   frames and never sending them can pin at most its share; the rest stays free for the
//!   others. All connections of one name come from that node's own address (a certificate
//!   used from elsewhere is refused at the handshake, `identity::check_origin`), so no one
//!   else can draw on a node's share.
//! - Control frames (lane priority at least [`Priority::CONTROL`] and at most
//!   [`CONTROL_FRAME_MAX`] bytes) take bytes from a separate reserve that data never
//!   touches, so they are read even while data budgets are exhausted.
//! - A frame that stalls (no bytes for `frame_timeout_ms`) has its stream reset and its
//!   budget released, and counts as a strike against its peer; at [`STALL_STRIKES`] the
//!   connection is closed and the peer named in the log and in `disconnected_peers`.
//!
//! The decisions (which budget, when to disconnect) are the plain functions here; the
//! QUIC read path applies them.

use petrel_messages::Priority;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest frame that may use the control reserve.
pub const CONTROL_FRAME_MAX: usize = 64 << 10;
/// Bytes of control frames being read at once, across all peers.
pub const CONTROL_RESERVE: usize = 8 << 20;
/// Stalled frames after which a peer's connection is closed.
pub const STALL_STRIKES: u32 = 3;

/// Which budget a frame is read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Small, control-priority: the control reserve.
    Control,
    /// Everything else: the peer's share, then the node's budget.
    Data,
}

/// Classifies a frame by its lane priority and total length.
pub fn lane_of(priority: Priority, total_len: usize) -> Lane {
    if priority >= Priority::CONTROL && total_len <= CONTROL_FRAME_MAX {
        Lane::Control
    } else {
        Lane::Data
    }
}

/// The share of one peer, given the node's budget and largest message.
pub fn peer_share(node_budget: usize, max_message: usize) -> usize {
    (node_budget / 2)
        .max(max_message)
        .min(Semaphore::MAX_PERMITS)
}

/// The node-wide budgets of the receive path.
#[derive(Clone)]
pub struct InboundBudgets {
    node: Arc<Semaphore>,
    control: Arc<Semaphore>,
    peer_share: usize,
}

impl InboundBudgets {
    /// Budgets for a node holding at most `node_budget` bytes of data frames, whose largest
    /// frame is `max_message`.
    pub fn new(node_budget: usize, max_message: usize) -> Self {
        let node_budget = node_budget.max(max_message).min(Semaphore::MAX_PERMITS);
        Self {
            node: Arc::new(Semaphore::new(node_budget)),
            control: Arc::new(Semaphore::new(CONTROL_RESERVE)),
            peer_share: peer_share(node_budget, max_message),
        }
    }

    /// The budget of one new connection.
    pub fn peer(&self) -> PeerBudget {
        PeerBudget {
            share: Arc::new(Semaphore::new(self.peer_share)),
            stalls: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Waits until `len` bytes of `lane` fit; the permits release them when dropped.
    /// `None` once the budgets are closed.
    pub async fn acquire(
        &self,
        peer: &PeerBudget,
        lane: Lane,
        len: u32,
    ) -> Option<[Option<OwnedSemaphorePermit>; 2]> {
        match lane {
            Lane::Control => {
                let p = self.control.clone().acquire_many_owned(len).await.ok()?;
                Some([Some(p), None])
            }
            Lane::Data => {
                // The peer's share first: a hoarding peer queues behind itself only.
                let mine = peer.share.clone().acquire_many_owned(len).await.ok()?;
                let node = self.node.clone().acquire_many_owned(len).await.ok()?;
                Some([Some(mine), Some(node)])
            }
        }
    }
}

/// One connection's share and its stall strikes.
#[derive(Clone)]
pub struct PeerBudget {
    share: Arc<Semaphore>,
    stalls: Arc<AtomicU32>,
}

impl PeerBudget {
    /// The same peer's share for another of its connections, with its own stall strikes
    /// (a peer that stripes over several connections still pins at most one share).
    pub fn another_connection(&self) -> PeerBudget {
        PeerBudget {
            share: self.share.clone(),
            stalls: Arc::new(AtomicU32::new(0)),
        }
    }

    /// Records a stalled frame; true when the peer has now stalled [`STALL_STRIKES`]
    /// frames and must be disconnected.
    pub fn strike(&self) -> bool {
        self.stalls.fetch_add(1, Ordering::Relaxed) + 1 == STALL_STRIKES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_control_frames_use_the_reserve_and_data_never_does() {
        assert_eq!(lane_of(Priority::CONTROL, 200), Lane::Control);
        assert_eq!(
            lane_of(Priority(Priority::CONTROL.0 + 1), 200),
            Lane::Control
        );
        assert_eq!(
            lane_of(Priority::CONTROL, CONTROL_FRAME_MAX + 1),
            Lane::Data
        );
        assert_eq!(lane_of(Priority::HIGH, 200), Lane::Data);
        assert_eq!(lane_of(Priority::NORMAL, 60 << 20), Lane::Data);
    }

    #[test]
    fn a_peer_gets_half_the_node_budget_but_at_least_one_message() {
        assert_eq!(peer_share(256 << 20, 64 << 20), 128 << 20);
        assert_eq!(peer_share(64 << 20, 64 << 20), 64 << 20);
        assert_eq!(peer_share(1 << 20, 4 << 20), 4 << 20);
    }

    #[tokio::test]
    async fn a_hoarding_peer_cannot_take_the_whole_node_budget() {
        let budgets = InboundBudgets::new(256 << 20, 64 << 20);
        let hoarder = budgets.peer();
        let mut held = Vec::new();
        // Two 60 MiB frames fit the hoarder's 128 MiB share; a third waits on its share.
        for _ in 0..2 {
            held.push(
                budgets
                    .acquire(&hoarder, Lane::Data, 60 << 20)
                    .await
                    .unwrap(),
            );
        }
        let third = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budgets.acquire(&hoarder, Lane::Data, 60 << 20),
        )
        .await;
        assert!(third.is_err(), "the hoarder got more than its share");
        // Another peer still gets 100 MiB of data, and control frames always pass.
        let other = budgets.peer();
        assert!(
            budgets
                .acquire(&other, Lane::Data, 100 << 20)
                .await
                .is_some()
        );
        assert!(
            budgets
                .acquire(&hoarder, Lane::Control, 300)
                .await
                .is_some()
        );
    }

    #[test]
    fn the_third_stall_disconnects_once() {
        let peer = InboundBudgets::new(1 << 20, 1 << 10).peer();
        assert!(!peer.strike());
        assert!(!peer.strike());
        assert!(peer.strike());
        assert!(!peer.strike());
    }
}
