//! Messages larger than `max_message_bytes`: split by the sender's transport and joined
//! by the receiver's. [`split`] cuts an encoded frame into part frames ([`PART_MSG_TYPE`],
//! body `index u32 | count u32 | total u64 | bytes`, little endian) sent consecutively on
//! one lane, so they arrive in order; [`Reassembler`] (sans-I/O) returns the original when
//! the last part came.
//!
//! Bounds: a message is at most [`max_split_message`] bytes, a peer's share of the inbound
//! budget. Each part holds budget while read; the reassembler then copies it and charges
//! its sender's allowance (the same size), so parts never wait on each other for budget
//! (no deadlock). A message missing parts is dropped, logged, counted and its bytes
//! released, at once or after `timeout`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use petrel_messages::{CodecError, EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Wire name (and actor name) of a part frame.
pub const PART_MSG_TYPE: &str = "petrel.part";
/// Bytes of a part body before its payload.
const PART_HEAD: usize = 16;

/// The largest message sent or reassembled: a peer's share of `inbound_buffer_bytes`.
pub fn max_split_message(cfg: &crate::NetConfig) -> usize {
    crate::inbound_budget::peer_share(cfg.inbound_buffer_bytes, cfg.max_message_bytes)
}

/// Cuts `frame` (`from` to `to` at `priority`) into part frames of at most `max_frame` bytes.
pub fn split(
    frame: &[u8],
    from: NodeId,
    to: NodeId,
    priority: Priority,
    max_frame: usize,
) -> Result<Vec<Bytes>, CodecError> {
    let header = EnvelopeHeader {
        from,
        to,
        actor: PART_MSG_TYPE.into(),
        msg_type: PART_MSG_TYPE.into(),
        priority,
        kind: EnvelopeKind::Tell,
    };
    let overhead = Frame::encode_raw(&header, &[0u8; PART_HEAD])?.len();
    let chunk = max_frame.saturating_sub(overhead);
    if chunk == 0 {
        return Err(CodecError::Oversize {
            len: overhead,
            max: max_frame,
        });
    }
    let count = frame.len().div_ceil(chunk);
    let count32 = u32::try_from(count).map_err(|_| CodecError::Oversize {
        len: frame.len(),
        max: max_frame,
    })?;
    frame
        .chunks(chunk)
        .enumerate()
        .map(|(index, bytes)| {
            let mut head = [0u8; PART_HEAD];
            let mut w = &mut head[..];
            w.put_u32_le(index as u32);
            w.put_u32_le(count32);
            w.put_u64_le(frame.len() as u64);
            // One copy of the payload, straight into the part frame.
            Frame::encode_raw_pieces(&header, &[&head, bytes])
        })
        .collect()
}

/// What became of a frame given to the [`Reassembler`].
#[derive(Debug)]
pub enum Assembled {
    /// A whole frame: an ordinary one passed through, or the last part's message.
    Whole(Frame),
    /// A part was kept; the message is not complete yet.
    Pending,
    /// A part (and the message it belonged to) was dropped.
    Dropped {
        /// The sender.
        from: NodeId,
        /// Why.
        reason: String,
    },
}

struct Partial {
    count: u32,
    next: u32,
    total: usize,
    buf: BytesMut,
    started: Instant,
}

/// Puts split messages back together, per (sender, priority) lane.
pub struct Reassembler {
    allowance: usize,
    partial: HashMap<(NodeId, Priority), Partial>,
}

impl Reassembler {
    /// A reassembler allowing each sender `allowance` bytes of partial messages.
    pub fn new(allowance: usize) -> Self {
        Self {
            allowance,
            partial: HashMap::new(),
        }
    }

    fn held_by(&self, from: NodeId) -> usize {
        self.partial
            .iter()
            .filter(|((f, _), _)| *f == from)
            .map(|(_, p)| p.buf.len())
            .sum()
    }

    /// Takes the next in-order frame of a lane.
    pub fn accept(&mut self, frame: Frame, now: Instant) -> Assembled {
        if frame.header.msg_type != PART_MSG_TYPE {
            return Assembled::Whole(frame);
        }
        let from = frame.header.from;
        let key = (from, frame.header.priority);
        let dropped = |reason: String| Assembled::Dropped { from, reason };
        let whole_body = frame.body;
        if whole_body.len() < PART_HEAD {
            self.partial.remove(&key);
            return dropped("part shorter than its header".into());
        }
        // The part's bytes stay in the chunks they arrived in until copied into the whole.
        let mut head = [0u8; PART_HEAD];
        for (piece, out) in whole_body.slices(0).flatten().zip(head.iter_mut()) {
            *out = *piece;
        }
        let mut head = &head[..];
        let index = head.get_u32_le();
        let count = head.get_u32_le();
        let total = usize::try_from(head.get_u64_le()).unwrap_or(usize::MAX);
        let body_len = whole_body.len() - PART_HEAD;
        if index == 0 {
            let replaced = self.partial.remove(&key).is_some();
            if count < 2 || total > self.allowance {
                return dropped(format!(
                    "split message of {total} bytes in {count} parts refused (limit {} bytes)",
                    self.allowance
                ));
            }
            if replaced {
                tracing::debug!(%from, "a split message was abandoned by a newer one");
            }
            self.partial.insert(
                key,
                Partial {
                    count,
                    next: 0,
                    total,
                    // The whole message's size up front: no regrowth copies.
                    buf: BytesMut::with_capacity(total),
                    started: now,
                },
            );
        }
        let held = self.held_by(from);
        let Some(p) = self.partial.get_mut(&key) else {
            return dropped(format!("part {index} of {count} without its first part"));
        };
        let expected = p.next;
        if index != expected || count != p.count {
            self.partial.remove(&key);
            return dropped(format!(
                "part {index} of {count} arrived where part {expected} was expected; message dropped"
            ));
        }
        if p.buf.len() + body_len > p.total || held + body_len > self.allowance {
            self.partial.remove(&key);
            return dropped(
                "split message larger than announced or than its sender's allowance".into(),
            );
        }
        for piece in whole_body.slices(PART_HEAD) {
            p.buf.extend_from_slice(piece);
        }
        p.next += 1;
        if p.next < p.count {
            return Assembled::Pending;
        }
        let Some(p) = self.partial.remove(&key) else {
            return Assembled::Pending;
        };
        let got = p.buf.len();
        if got != p.total {
            return dropped(format!("split message ended at {got} of {} bytes", p.total));
        }
        match Frame::decode(p.buf.freeze(), self.allowance) {
            Ok(whole) if whole.header.from == from => Assembled::Whole(whole),
            Ok(whole) => {
                let claimed = whole.header.from;
                dropped(format!("reassembled message claims sender {claimed}"))
            }
            Err(e) => dropped(format!("reassembled message does not decode: {e}")),
        }
    }

    /// Drops partial messages older than `timeout`; returns their senders.
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<NodeId> {
        let mut gone = Vec::new();
        self.partial.retain(|(from, _), p| {
            let keep = now.duration_since(p.started) < timeout;
            if !keep {
                gone.push(*from);
            }
            keep
        });
        gone
    }

    /// Bytes held in partial messages.
    pub fn held(&self) -> usize {
        self.partial.values().map(|p| p.buf.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize) -> Bytes {
        let header = EnvelopeHeader {
            from: NodeId(1),
            to: NodeId(2),
            actor: "sink".into(),
            msg_type: "big".into(),
            priority: Priority::NORMAL,
            kind: EnvelopeKind::Tell,
        };
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        Frame::encode_raw(&header, &body).unwrap()
    }

    fn parts(m: &Bytes, max: usize) -> Vec<Frame> {
        split(m, NodeId(1), NodeId(2), Priority::NORMAL, max)
            .unwrap()
            .into_iter()
            .map(|p| {
                assert!(p.len() <= max);
                Frame::decode(p, max).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_message_three_times_the_limit_comes_back_whole() {
        let m = message(3 << 16);
        let mut r = Reassembler::new(1 << 20);
        let now = Instant::now();
        let parts = parts(&m, 1 << 16);
        assert!(parts.len() >= 4);
        let last = parts.len() - 1;
        for (i, p) in parts.into_iter().enumerate() {
            match r.accept(p, now) {
                Assembled::Pending => assert!(i < last),
                Assembled::Whole(f) => {
                    assert_eq!(i, last);
                    assert_eq!(f.header.msg_type, "big");
                    assert_eq!(Frame::decode(m.clone(), 1 << 20).unwrap().body, f.body);
                }
                Assembled::Dropped { reason, .. } => panic!("{reason}"),
            }
        }
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn a_missing_part_drops_the_message_and_frees_its_bytes() {
        let m = message(3 << 16);
        let mut r = Reassembler::new(1 << 20);
        let now = Instant::now();
        let mut parts = parts(&m, 1 << 16).into_iter();
        assert!(matches!(
            r.accept(parts.next().unwrap(), now),
            Assembled::Pending
        ));
        parts.next(); // lost
        assert!(matches!(
            r.accept(parts.next().unwrap(), now),
            Assembled::Dropped { .. }
        ));
        assert_eq!(r.held(), 0);
        // A sender that dies mid-message: its bytes are released after the timeout.
        let mut parts = self::parts(&m, 1 << 16).into_iter();
        assert!(matches!(
            r.accept(parts.next().unwrap(), now),
            Assembled::Pending
        ));
        assert!(r.held() > 0);
        let later = now + Duration::from_secs(31);
        assert_eq!(r.expire(later, Duration::from_secs(30)), vec![NodeId(1)]);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn a_message_over_the_allowance_is_refused_at_its_first_part() {
        let m = message(3 << 16);
        let mut r = Reassembler::new(1 << 17);
        let first = parts(&m, 1 << 16).remove(0);
        assert!(matches!(
            r.accept(first, Instant::now()),
            Assembled::Dropped { .. }
        ));
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn ordinary_frames_pass_through() {
        let m = message(100);
        let mut r = Reassembler::new(1 << 20);
        let f = Frame::decode(m, 1 << 16).unwrap();
        assert!(matches!(r.accept(f, Instant::now()), Assembled::Whole(_)));
    }
}
