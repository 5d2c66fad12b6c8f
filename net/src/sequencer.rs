//! Per-lane ordering of arrivals.
//!
//! Every message has its own QUIC stream, so messages can complete out of order. Senders
//! number them per lane (sender, priority) and the receiver releases each lane in order:
//! FIFO between two nodes at equal priority, higher priorities still overtaking.
//!
//! Failures must not stall a lane: after a failed send the sender moves to a newer epoch,
//! which releases whatever waited in the old one; a hole open past a timeout is skipped
//! (counted, logged). Late frames (after a skip, or from an older epoch) are delivered at
//! once: QUIC never duplicates a stream, so nothing is dropped here.

use petrel_messages::Priority;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Transport-level header sent in front of every frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaneHeader {
    /// The sending node's id.
    pub from: u32,
    /// The lane's priority (the frame's priority).
    pub priority: Priority,
    /// Grows when the sender process restarts or abandons a hole after a failed send.
    pub epoch: u64,
    /// Position of the frame within its lane and epoch, from 0.
    pub seq: u64,
}

/// Encoded size of a [`LaneHeader`].
pub const LANE_HEADER_LEN: usize = 24;

impl LaneHeader {
    /// `from | priority | epoch | seq`, little-endian.
    pub fn encode(&self) -> [u8; LANE_HEADER_LEN] {
        let mut b = [0u8; LANE_HEADER_LEN];
        b[0..4].copy_from_slice(&self.from.to_le_bytes());
        b[4..8].copy_from_slice(&self.priority.0.to_le_bytes());
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    /// The inverse of [`encode`](Self::encode); every byte pattern is a header.
    pub fn decode(b: &[u8; LANE_HEADER_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Self {
            from: u32_at(0),
            priority: Priority(u32_at(4) as i32),
            epoch: u64_at(8),
            seq: u64_at(16),
        }
    }
}

/// A sender forgets a lane idle this long (its next frame starts a new epoch), so lanes of
/// many priorities do not accumulate.
pub const SENDER_LANE_IDLE: Duration = Duration::from_secs(10);
/// A receiver forgets an idle lane after this long, well after its sender has.
pub const RECEIVER_LANE_IDLE: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct SendLane {
    epoch: u64,
    next: u64,
    last_used: Instant,
}

/// The sender's side: numbers frames per (peer, priority) as they go to the wire. Every
/// new lane (first use, after idling or a failed send) gets a newer epoch.
#[derive(Debug)]
pub struct LaneNumbering {
    from: u32,
    base_epoch: u64,
    issued: u64,
    lanes: HashMap<(u32, Priority), SendLane>,
    idle: Duration,
    last_prune: Option<Instant>,
}

impl LaneNumbering {
    /// Numbering for node `from`, whose epochs start above `base_epoch`.
    pub fn new(from: u32, base_epoch: u64) -> Self {
        Self::with_idle(from, base_epoch, SENDER_LANE_IDLE)
    }

    /// As [`new`](Self::new), forgetting lanes idle for longer than `idle`.
    pub fn with_idle(from: u32, base_epoch: u64, idle: Duration) -> Self {
        Self {
            from,
            base_epoch,
            issued: 0,
            lanes: HashMap::new(),
            idle,
            last_prune: None,
        }
    }

    /// The header of the next frame to `to` at `priority`.
    pub fn next(&mut self, to: u32, priority: Priority, now: Instant) -> LaneHeader {
        let prune_due = self
            .last_prune
            .is_none_or(|t| now.saturating_duration_since(t) >= self.idle / 10);
        let idle = self.idle;
        if self.lanes.len() > 1024 && prune_due {
            self.lanes
                .retain(|_, l| now.saturating_duration_since(l.last_used) <= idle);
            self.last_prune = Some(now);
        }
        let lane = match self.lanes.entry((to, priority)) {
            Entry::Occupied(e) if now.saturating_duration_since(e.get().last_used) <= idle => {
                e.into_mut()
            }
            // A new lane, or one idle too long: a newer epoch.
            entry => {
                self.issued += 1;
                let epoch = self.base_epoch.wrapping_add(self.issued);
                let fresh = SendLane {
                    epoch,
                    next: 0,
                    last_used: now,
                };
                entry.insert_entry(fresh).into_mut()
            }
        };
        let h = LaneHeader {
            from: self.from,
            priority,
            epoch: lane.epoch,
            seq: lane.next,
        };
        lane.next += 1;
        lane.last_used = now;
        h
    }

    /// A frame to `to` was lost: its lanes start over with newer epochs.
    pub fn failed(&mut self, to: u32) {
        self.lanes.retain(|(peer, _), _| *peer != to);
    }

    /// Lanes currently remembered.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// True when no lane is remembered.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }
}

#[derive(Debug)]
struct Lane<T> {
    epoch: u64,
    next: u64,
    pending: BTreeMap<u64, T>,
    /// When the oldest hole of this lane opened.
    waiting_since: Option<Instant>,
    last_seen: Instant,
}

impl<T> Lane<T> {
    fn new(epoch: u64, now: Instant) -> Self {
        Self {
            epoch,
            next: 0,
            pending: BTreeMap::new(),
            waiting_since: None,
            last_seen: now,
        }
    }

    /// Releases the contiguous run starting at `next`.
    fn release(&mut self, out: &mut Vec<T>, now: Instant) {
        while let Some(item) = self.pending.remove(&self.next) {
            out.push(item);
            self.next += 1;
        }
        if self.pending.is_empty() {
            // An emptied BTreeMap keeps its node; idle lanes must not hold memory.
            self.pending = BTreeMap::new();
            self.waiting_since = None;
        } else {
            self.waiting_since = Some(self.waiting_since.unwrap_or(now));
        }
    }

    /// Gives up on the current hole: jumps to the oldest waiting frame.
    fn skip(&mut self, out: &mut Vec<T>, now: Instant) -> u64 {
        let Some((&first, _)) = self.pending.first_key_value() else {
            return 0;
        };
        let skipped = first.saturating_sub(self.next);
        self.next = first;
        self.waiting_since = None;
        self.release(out, now);
        skipped
    }

    fn drain_all(&mut self, out: &mut Vec<T>) {
        out.extend(std::mem::take(&mut self.pending).into_values());
        self.waiting_since = None;
    }
}

/// The receiver's side: releases each lane's arrivals in their senders' order.
#[derive(Debug)]
pub struct Sequencer<T> {
    lanes: HashMap<(u32, Priority), Lane<T>>,
    max_pending: usize,
    hole_timeout: Duration,
    skipped: u64,
}

impl<T> Sequencer<T> {
    /// A sequencer holding at most `max_pending` arrivals per lane, skipping a hole after
    /// `hole_timeout`.
    pub fn new(max_pending: usize, hole_timeout: Duration) -> Self {
        Self {
            lanes: HashMap::new(),
            max_pending: max_pending.max(1),
            hole_timeout,
            skipped: 0,
        }
    }

    /// Accepts one arrival; returns what can be released, in order.
    pub fn accept(&mut self, h: LaneHeader, item: T, now: Instant) -> Vec<T> {
        let mut out = Vec::new();
        let lane = self
            .lanes
            .entry((h.from, h.priority))
            .or_insert_with(|| Lane::new(h.epoch, now));
        lane.last_seen = now;
        if h.epoch < lane.epoch {
            // A straggler from before the sender's last failure: deliver, unordered.
            out.push(item);
            return out;
        }
        if h.epoch > lane.epoch {
            lane.drain_all(&mut out);
            *lane = Lane::new(h.epoch, now);
        }
        if h.seq < lane.next {
            tracing::debug!(
                from = h.from,
                seq = h.seq,
                "late frame delivered after its hole was skipped"
            );
            out.push(item);
            return out;
        }
        if h.seq == lane.next && lane.pending.is_empty() {
            // The common case: in order, nothing waiting. No allocation.
            lane.next += 1;
            out.push(item);
            return out;
        }
        lane.pending.insert(h.seq, item);
        lane.release(&mut out, now);
        if lane.pending.len() > self.max_pending {
            tracing::warn!(
                from = h.from,
                waiting = lane.pending.len(),
                "lane hole skipped: too many frames waiting"
            );
            self.skipped += lane.skip(&mut out, now);
        }
        out
    }

    /// Skips holes older than the timeout and forgets idle lanes; call periodically.
    pub fn expire(&mut self, now: Instant) -> Vec<T> {
        self.lanes.retain(|_, l| {
            !l.pending.is_empty() || now.saturating_duration_since(l.last_seen) < RECEIVER_LANE_IDLE
        });
        let mut out = Vec::new();
        for ((from, _), lane) in self.lanes.iter_mut() {
            if lane
                .waiting_since
                .is_some_and(|t| now.saturating_duration_since(t) >= self.hole_timeout)
            {
                tracing::warn!(from, missing = lane.next, "lane hole skipped after timeout");
                self.skipped += lane.skip(&mut out, now);
            }
        }
        out
    }

    /// Forgets a sender's lanes (it left the cluster).
    pub fn forget(&mut self, from: u32) {
        self.lanes.retain(|(f, _), _| *f != from);
    }

    /// Holes skipped after their timeout so far.
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
            priority: Priority(priority),
            epoch,
            seq,
        }
    }

    fn seq() -> Sequencer<&'static str> {
        Sequencer::new(100, Duration::from_secs(1))
    }

    #[test]
    fn releases_in_order_per_lane() {
        let mut s = seq();
        let t = Instant::now();
        assert!(s.accept(h(1, 0, 7, 1), "b", t).is_empty());
        assert_eq!(
            s.accept(h(1, 5, 7, 0), "x", t),
            vec!["x"],
            "other lanes are independent"
        );
        assert_eq!(s.accept(h(1, 0, 7, 0), "a", t), vec!["a", "b"]);
    }

    #[test]
    fn newer_epoch_releases_what_waited_and_older_epochs_pass() {
        let mut s = seq();
        let t = Instant::now();
        assert_eq!(s.accept(h(1, 0, 7, 0), "a", t), vec!["a"]);
        // seq 1 was lost in a failed send; 2 arrived and waits.
        assert!(s.accept(h(1, 0, 7, 2), "c", t).is_empty());
        // The sender moved on to a new epoch: the waiting frame is released first.
        assert_eq!(s.accept(h(1, 0, 8, 0), "d", t), vec!["c", "d"]);
        assert_eq!(s.accept(h(1, 0, 7, 3), "straggler", t), vec!["straggler"]);
    }

    #[test]
    fn holes_time_out_and_late_frames_are_still_delivered() {
        let mut s = seq();
        let t = Instant::now();
        assert!(s.accept(h(1, 0, 1, 1), "b", t).is_empty());
        assert!(s.expire(t + Duration::from_millis(500)).is_empty());
        assert_eq!(s.expire(t + Duration::from_secs(2)), vec!["b"]);
        assert_eq!(s.skipped(), 1);
        assert_eq!(
            s.accept(h(1, 0, 1, 0), "a-late", t),
            vec!["a-late"],
            "never dropped"
        );
    }

    #[test]
    fn too_many_waiting_skips_the_hole() {
        let mut s: Sequencer<u64> = Sequencer::new(2, Duration::from_secs(60));
        let t = Instant::now();
        assert!(s.accept(h(1, 0, 1, 5), 5, t).is_empty());
        assert!(s.accept(h(1, 0, 1, 6), 6, t).is_empty());
        assert_eq!(s.accept(h(1, 0, 1, 7), 7, t), vec![5, 6, 7]);
        assert_eq!(s.skipped(), 5);
    }

    #[test]
    fn numbering_starts_new_epochs_after_failures_and_idling() {
        let t = Instant::now();
        let mut n = LaneNumbering::with_idle(1, 100, Duration::from_secs(10));
        assert_eq!(n.next(2, Priority(0), t), h(1, 0, 101, 0));
        assert_eq!(n.next(2, Priority(0), t), h(1, 0, 101, 1));
        assert_eq!(n.next(3, Priority(0), t), h(1, 0, 102, 0));
        n.failed(2);
        assert_eq!(n.next(2, Priority(0), t), h(1, 0, 103, 0));
        assert_eq!(
            n.next(3, Priority(0), t),
            h(1, 0, 102, 1),
            "other peers unaffected"
        );
        let later = t + Duration::from_secs(11);
        assert_eq!(
            n.next(3, Priority(0), later),
            h(1, 0, 104, 0),
            "an idle lane starts over"
        );
    }

    #[test]
    fn many_priorities_do_not_accumulate_state() {
        let t = Instant::now();
        let mut n = LaneNumbering::with_idle(1, 0, Duration::from_secs(1));
        let mut s: Sequencer<u32> = Sequencer::new(100, Duration::from_secs(5));
        for i in 0..100_000u32 {
            let now = t + Duration::from_millis(u64::from(i));
            let hdr = n.next(2, Priority(-(i as i32)), now);
            assert_eq!(s.accept(hdr, i, now), vec![i]);
            if i % 1000 == 0 {
                s.expire(now);
            }
        }
        assert!(n.len() <= 1025 + 1100, "sender keeps {} lanes", n.len());
        assert!(
            s.lanes.len() <= 61_000,
            "receiver keeps {} lanes",
            s.lanes.len()
        );
    }

    #[test]
    fn header_round_trips() {
        let x = h(3, -9, u64::MAX, 12345);
        assert_eq!(LaneHeader::decode(&x.encode()), x);
    }
}
