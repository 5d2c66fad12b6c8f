//! The priority outbox's decision logic, free of I/O.
//!
//! Messages wait in one priority queue per node (FIFO within a priority). A message is
//! admitted to the wire when its peer has fewer than `inflight_limit` bytes in flight, or
//! when its priority is higher than every message in flight to that peer, so a small urgent
//! message never waits behind a large backlog already handed to QUIC (QUIC's stream
//! priorities then let it overtake on the wire).

use bytes::Bytes;
use petrel_messages::{NodeId, Priority};
use std::collections::{BTreeMap, BinaryHeap, HashMap};

#[derive(Debug)]
pub struct Outgoing {
    pub to: NodeId,
    pub priority: Priority,
    pub frame: Bytes,
    seq: u64,
}

impl PartialEq for Outgoing {
    fn eq(&self, other: &Self) -> bool {
        self.priority == other.priority && self.seq == other.seq
    }
}
impl Eq for Outgoing {}
impl PartialOrd for Outgoing {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Outgoing {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Max-heap: higher priority first, then lower sequence number (older) first.
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.seq.cmp(&self.seq))
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
    pub to: NodeId,
    pub priority: Priority,
    pub len: usize,
}

#[derive(Debug)]
pub struct OutboxQueue {
    queue: BinaryHeap<Outgoing>,
    /// Messages that could not be admitted yet, per peer, kept in priority order.
    parked: HashMap<NodeId, BinaryHeap<Outgoing>>,
    flights: HashMap<NodeId, PeerFlight>,
    inflight_limit: usize,
    next_seq: u64,
    queued_bytes: usize,
}

impl OutboxQueue {
    pub fn new(inflight_limit: usize) -> Self {
        Self {
            queue: BinaryHeap::new(),
            parked: HashMap::new(),
            flights: HashMap::new(),
            inflight_limit: inflight_limit.max(1),
            next_seq: 0,
            queued_bytes: 0,
        }
    }

    pub fn push(&mut self, to: NodeId, priority: Priority, frame: Bytes) {
        self.queued_bytes += frame.len();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Outgoing {
            to,
            priority,
            frame,
            seq,
        });
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

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
        let mut best: Option<(Priority, u64, Option<NodeId>)> = None;
        for (peer, heap) in &self.parked {
            if let Some(top) = heap.peek()
                && self.admissible(top)
                && best.is_none_or(|(p, s, _)| {
                    (top.priority, std::cmp::Reverse(top.seq)) > (p, std::cmp::Reverse(s))
                })
            {
                best = Some((top.priority, top.seq, Some(*peer)));
            }
        }
        // Move inadmissible heads of the main queue to their peer's parking heap.
        while let Some(top) = self.queue.peek() {
            if self.admissible(top) {
                if best.is_none_or(|(p, s, _)| {
                    (top.priority, std::cmp::Reverse(top.seq)) > (p, std::cmp::Reverse(s))
                }) {
                    best = Some((top.priority, top.seq, None));
                }
                break;
            }
            if let Some(msg) = self.queue.pop() {
                self.parked.entry(msg.to).or_default().push(msg);
            }
        }
        let (_, _, source) = best?;
        let msg = match source {
            None => self.queue.pop()?,
            Some(peer) => self.parked.get_mut(&peer)?.pop()?,
        };
        self.queued_bytes -= msg.frame.len();
        let flight = self.flights.entry(msg.to).or_default();
        flight.bytes += msg.frame.len();
        *flight.by_priority.entry(msg.priority).or_default() += 1;
        let token = InFlight {
            to: msg.to,
            priority: msg.priority,
            len: msg.frame.len(),
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
        let mut dropped = self.parked.remove(&peer).map_or(0, |h| {
            self.queued_bytes -= h.iter().map(|m| m.frame.len()).sum::<usize>();
            h.len()
        });
        let before = self.queue.len();
        let mut kept = BinaryHeap::with_capacity(before);
        for m in self.queue.drain() {
            if m.to == peer {
                self.queued_bytes -= m.frame.len();
            } else {
                kept.push(m);
            }
        }
        dropped += before - kept.len();
        self.queue = kept;
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
            std::iter::from_fn(|| q.pop_ready().map(|(m, _)| m.frame.len())).collect();
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
