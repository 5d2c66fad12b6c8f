//! Per-lane ordering of arrivals.
//!
//! Every message travels on its own QUIC stream, so messages can complete out of order.
//! Senders number messages per lane (sender, priority) and the receiver releases each
//! lane's messages in that order: FIFO between two nodes at equal priority, while higher
//! priorities still overtake lower ones. A new sender epoch (a restarted process) resets its
//! lanes. A lane whose gap stays open while `max_pending` later messages wait skips the gap
//! (logged), so a misbehaving member cannot pin unbounded memory.

use std::collections::{BTreeMap, HashMap};

/// Transport-level header sent in front of every frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaneHeader {
    pub from: u32,
    pub priority: i32,
    pub epoch: u64,
    pub seq: u64,
}

pub const LANE_HEADER_LEN: usize = 24;

impl LaneHeader {
    pub fn encode(&self) -> [u8; LANE_HEADER_LEN] {
        let mut b = [0u8; LANE_HEADER_LEN];
        b[0..4].copy_from_slice(&self.from.to_le_bytes());
        b[4..8].copy_from_slice(&self.priority.to_le_bytes());
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; LANE_HEADER_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Self {
            from: u32_at(0),
            priority: u32_at(4) as i32,
            epoch: u64_at(8),
            seq: u64_at(16),
        }
    }
}

#[derive(Debug)]
struct Lane<T> {
    epoch: u64,
    next: u64,
    pending: BTreeMap<u64, T>,
}

#[derive(Debug)]
pub struct Sequencer<T> {
    lanes: HashMap<(u32, i32), Lane<T>>,
    max_pending: usize,
    skipped: u64,
}

impl<T> Sequencer<T> {
    pub fn new(max_pending: usize) -> Self {
        Self {
            lanes: HashMap::new(),
            max_pending: max_pending.max(1),
            skipped: 0,
        }
    }

    /// Accepts one arrival; returns what can be released, in order.
    pub fn accept(&mut self, h: LaneHeader, item: T) -> Vec<T> {
        let lane = self
            .lanes
            .entry((h.from, h.priority))
            .or_insert_with(|| Lane {
                epoch: h.epoch,
                next: 0,
                pending: BTreeMap::new(),
            });
        if lane.epoch != h.epoch {
            *lane = Lane {
                epoch: h.epoch,
                next: 0,
                pending: BTreeMap::new(),
            };
        }
        if h.seq < lane.next {
            tracing::warn!(from = h.from, seq = h.seq, "duplicate message dropped");
            return Vec::new();
        }
        lane.pending.insert(h.seq, item);
        if lane.pending.len() > self.max_pending
            && let Some((&first, _)) = lane.pending.first_key_value()
        {
            tracing::warn!(
                from = h.from,
                missing_from = lane.next,
                resume_at = first,
                "lane gap skipped"
            );
            self.skipped += first - lane.next;
            lane.next = first;
        }
        let mut out = Vec::new();
        while let Some(item) = lane.pending.remove(&lane.next) {
            out.push(item);
            lane.next += 1;
        }
        out
    }

    /// Forgets a sender's lanes (it left the cluster).
    pub fn forget(&mut self, from: u32) {
        self.lanes.retain(|(f, _), _| *f != from);
    }

    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(from: u32, priority: i32, epoch: u64, seq: u64) -> LaneHeader {
        LaneHeader {
            from,
            priority,
            epoch,
            seq,
        }
    }

    #[test]
    fn releases_in_order_per_lane() {
        let mut s = Sequencer::new(100);
        assert!(s.accept(h(1, 0, 7, 1), "b").is_empty());
        assert_eq!(
            s.accept(h(1, 5, 7, 0), "x"),
            vec!["x"],
            "other lanes are independent"
        );
        assert_eq!(s.accept(h(1, 0, 7, 0), "a"), vec!["a", "b"]);
        assert!(s.accept(h(1, 0, 7, 0), "dup").is_empty());
        assert_eq!(s.accept(h(1, 0, 8, 0), "restarted"), vec!["restarted"]);
    }

    #[test]
    fn gap_is_skipped_when_too_much_waits() {
        let mut s = Sequencer::new(2);
        assert!(s.accept(h(1, 0, 1, 5), 5).is_empty());
        assert!(s.accept(h(1, 0, 1, 6), 6).is_empty());
        assert_eq!(s.accept(h(1, 0, 1, 7), 7), vec![5, 6, 7]);
        assert_eq!(s.skipped(), 5);
    }

    #[test]
    fn header_round_trips() {
        let x = h(3, -9, u64::MAX, 12345);
        assert_eq!(LaneHeader::decode(&x.encode()), x);
    }
}
