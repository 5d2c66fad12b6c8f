//! The priority outbox's decision logic, free of I/O. A message is admitted to the wire
//! when its peer has fewer than `inflight_limit` bytes in flight, or when it outranks every
//! message in flight to that peer, so an urgent message never waits behind a backlog
//! already handed to QUIC (whose stream priorities then let it overtake).

use bytes::Bytes;
use petrel_messages::{NodeId, Priority, PriorityQueue, Rank};
use std::collections::{BTreeMap, HashMap};

/// A frame waiting for (or handed to) the wire.
#[derive(Debug)]
pub struct Outgoing {
    /// The receiving node.
    pub to: NodeId,
    /// The priority it was queued at (and its QUIC stream gets).
    pub priority: Priority,
    /// The encoded frame (its first piece when `tail` is not empty).
    pub frame: Bytes,
    /// The rest of the frame, written after `frame` without copying (a tensor's bytes).
    pub tail: Vec<Bytes>,
}

impl Outgoing {
    /// The frame's length in bytes.
    pub fn len(&self) -> usize {
        self.frame.len() + self.tail.iter().map(Bytes::len).sum::<usize>()
    }

    /// True for an empty frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Default)]
struct PeerFlight {
    bytes: usize,
    /// Count of in-flight messages per priority, to know the highest one in flight.
    by_priority: BTreeMap<Priority, usize>,
}

/// A token for a message handed to the wire; give it back with [`OutboxQueue::complete`].
#[derive(Debug)]
pub struct InFlight {
    /// The peer the message went to.
    pub to: NodeId,
    /// Its priority.
    pub priority: Priority,
    /// Its length in bytes.
    pub len: usize,
}

/// Every message of a node waiting for the wire, with each peer's in-flight window. A
/// message moved to its peer's parking queue keeps its [`Rank`], so once the window opens
/// it competes with the main queue where it would have stood.
#[derive(Debug)]
pub struct OutboxQueue {
    queue: PriorityQueue<Outgoing>,
    /// Messages that could not be admitted yet, per peer.
    parked: HashMap<NodeId, PriorityQueue<Outgoing>>,
    flights: HashMap<NodeId, PeerFlight>,
    inflight_limit: usize,
    queued_bytes: usize,
}

impl OutboxQueue {
    /// An empty outbox allowing `inflight_limit` bytes in flight per peer (at least 1).
    pub fn new(inflight_limit: usize) -> Self {
        Self {
            queue: PriorityQueue::new(),
            parked: HashMap::new(),
            flights: HashMap::new(),
            inflight_limit: inflight_limit.max(1),
            queued_bytes: 0,
        }
    }

    /// Queues `frame` for `to` at `priority`.
    pub fn push(&mut self, to: NodeId, priority: Priority, frame: Bytes) {
        self.push_chunks(to, priority, frame, Vec::new());
    }

    /// Queues a frame given as `frame` followed by the pieces of `tail`.
    pub fn push_chunks(&mut self, to: NodeId, priority: Priority, frame: Bytes, tail: Vec<Bytes>) {
        let msg = Outgoing {
            to,
            priority,
            frame,
            tail,
        };
        self.queued_bytes += msg.len();
        self.queue.push(priority, msg);
    }

    /// Bytes queued and not yet handed to the wire.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// True when nothing waits (messages in flight do not count).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.parked.values().all(|p| p.is_empty())
    }

    fn admissible(&self, msg: &Outgoing) -> bool {
        match self.flights.get(&msg.to) {
            None => true,
            Some(f) => {
                f.bytes < self.inflight_limit
                    || f.by_priority
                        .keys()
                        .next_back()
                        .is_none_or(|top| msg.priority > *top)
            }
        }
    }

    /// The next message to hand to the wire, if any may go now.
    pub fn pop_ready(&mut self) -> Option<(Outgoing, InFlight)> {
        // Parked messages of peers whose window opened compete with the main queue.
        let mut best: Option<(Rank, Option<NodeId>)> = None;
        for (peer, parked) in &self.parked {
            if let Some((rank, top)) = parked.peek_ranked()
                && self.admissible(top)
                && best.is_none_or(|(b, _)| rank > b)
            {
                best = Some((rank, Some(*peer)));
            }
        }
        // Move inadmissible heads of the main queue to their peer's parking queue.
        while let Some((rank, top)) = self.queue.peek_ranked() {
            if self.admissible(top) {
                if best.is_none_or(|(b, _)| rank > b) {
                    best = Some((rank, None));
                }
                break;
            }
            if let Some((rank, msg)) = self.queue.pop_ranked() {
                self.parked
                    .entry(msg.to)
                    .or_default()
                    .push_ranked(rank, msg);
            }
        }
        let (_, source) = best?;
        let (_, msg) = match source {
            None => self.queue.pop()?,
            Some(peer) => self.parked.get_mut(&peer)?.pop()?,
        };
        self.queued_bytes -= msg.len();
        let flight = self.flights.entry(msg.to).or_default();
        flight.bytes += msg.len();
        *flight.by_priority.entry(msg.priority).or_default() += 1;
        let token = InFlight {
            to: msg.to,
            priority: msg.priority,
            len: msg.len(),
        };
        Some((msg, token))
    }

    /// A message left the node (or failed); its bytes no longer count against the window.
    pub fn complete(&mut self, token: InFlight) {
        if let Some(f) = self.flights.get_mut(&token.to) {
            f.bytes = f.bytes.saturating_sub(token.len);
            if let Some(n) = f.by_priority.get_mut(&token.priority) {
                *n -= 1;
                if *n == 0 {
                    f.by_priority.remove(&token.priority);
                }
            }
            if f.by_priority.is_empty() {
                self.flights.remove(&token.to);
            }
        }
    }

    /// Drops everything queued for a peer (it left the cluster); returns how many.
    pub fn drop_peer(&mut self, peer: NodeId) -> usize {
        let mut dropped = 0;
        let mut dropped_bytes = 0;
        if let Some(parked) = self.parked.remove(&peer) {
            dropped += parked.len();
            dropped_bytes += parked.iter().map(|(_, m)| m.len()).sum::<usize>();
        }
        self.queue.retain(|_, m| {
            if m.to == peer {
                dropped += 1;
                dropped_bytes += m.len();
                false
            } else {
                true
            }
        });
        self.queued_bytes -= dropped_bytes;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![0u8; n])
    }

    #[test]
    fn pops_highest_priority_first_fifo_within() {
        let mut q = OutboxQueue::new(usize::MAX);
        q.push(NodeId(1), Priority(1), frame(1));
        q.push(NodeId(1), Priority(5), frame(2));
        q.push(NodeId(1), Priority(1), frame(3));
        q.push(NodeId(1), Priority(5), frame(4));
        let order: Vec<usize> =
            std::iter::from_fn(|| q.pop_ready().map(|(m, _)| m.len())).collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
    }

    #[test]
    fn window_parks_backlog_but_admits_higher_priority() {
        let mut q = OutboxQueue::new(10);
        for _ in 0..5 {
            q.push(NodeId(1), Priority(0), frame(8));
        }
        let (_, t1) = q.pop_ready().unwrap();
        let (_, _t2) = q.pop_ready().unwrap(); // 8 < 10 so a second one is admitted
        assert!(q.pop_ready().is_none(), "window full");
        q.push(NodeId(2), Priority(0), frame(8));
        assert_eq!(
            q.pop_ready().unwrap().0.to,
            NodeId(2),
            "other peers unaffected"
        );
        q.push(NodeId(1), Priority(9), frame(1));
        let (m, _) = q.pop_ready().unwrap();
        assert_eq!(
            m.priority,
            Priority(9),
            "urgent message overtakes a full window"
        );
        q.complete(t1);
        q.complete(_t2);
        assert_eq!(q.pop_ready().unwrap().0.priority, Priority(0));
    }

    #[test]
    fn a_parked_message_keeps_its_turn_against_later_ones() {
        let mut q = OutboxQueue::new(10);
        q.push(NodeId(1), Priority(0), frame(8));
        q.push(NodeId(1), Priority(0), frame(7));
        q.push(NodeId(1), Priority(0), frame(3));
        let (_, t1) = q.pop_ready().unwrap();
        let (_, t2) = q.pop_ready().unwrap();
        assert!(q.pop_ready().is_none(), "the third is parked");
        q.push(NodeId(1), Priority(0), frame(4));
        q.complete(t1);
        q.complete(t2);
        let order: Vec<usize> =
            std::iter::from_fn(|| q.pop_ready().map(|(m, _)| m.len())).collect();
        assert_eq!(order, vec![3, 4], "the parked, older message goes first");
    }

    #[test]
    fn drop_peer_discards_its_queue() {
        let mut q = OutboxQueue::new(1);
        q.push(NodeId(1), Priority(0), frame(5));
        q.push(NodeId(1), Priority(0), frame(5));
        q.push(NodeId(2), Priority(0), frame(5));
        let _ = q.pop_ready();
        let _ = q.pop_ready();
        assert_eq!(q.drop_peer(NodeId(1)), 1);
        assert_eq!(q.queued_bytes(), 0);
    }
}
