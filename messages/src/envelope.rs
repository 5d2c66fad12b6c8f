//! Envelopes and frames. One frame carries one message on one QUIC stream:
//!
//! ```text
//! magic "PTR1" | header_len: u32 LE | body_len: u32 LE | header (msgpack) | body (msgpack)
//! ```
//!
//! The small header is decoded first, so a receiver knows target and type before it
//! touches the body, which is handed over as zero-copy `Bytes`.

use crate::body::Body;
use crate::ids::{NodeId, Priority};
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// The four bytes every frame starts with.
pub const FRAME_MAGIC: [u8; 4] = *b"PTR1";
/// Bytes before the header: magic, header length, body length.
pub const FRAME_PREFIX_LEN: usize = 12;
/// Headers are names and ids; anything larger is garbage or an attack.
pub const MAX_HEADER_LEN: usize = 16 * 1024;

/// A frame or body that could not be encoded or decoded; every variant says what was wrong.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The frame does not start with [`FRAME_MAGIC`].
    #[error("bad frame magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// Fewer bytes than the prefix announced.
    #[error("truncated frame: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The frame is larger than the configured limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversize {
        /// Announced frame length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The header is larger than [`MAX_HEADER_LEN`].
    #[error("header of {0} bytes exceeds the header limit")]
    HeaderTooLarge(usize),
    /// The header is not valid msgpack for an [`EnvelopeHeader`].
    #[error("undecodable frame header: {0}")]
    Header(String),
    /// The body does not decode as the message type it claims to be.
    #[error("undecodable body of message type {type_name}: {error}")]
    Body {
        /// The message's `TYPE_NAME`.
        type_name: String,
        /// The decoder's complaint.
        error: String,
    },
    /// A value could not be serialized.
    #[error("encoding failed: {0}")]
    Encode(String),
    /// A tensor's bytes or shape are inconsistent.
    #[error("tensor payload invalid: {0}")]
    Tensor(String),
}

/// What a frame is within a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvelopeKind {
    /// Fire and forget.
    Tell,
    /// A request; the receiver answers with `Reply` or `Failure` carrying the same id.
    Ask {
        /// Matches the `Reply` or `Failure` to this request.
        request_id: u64,
    },
    /// The answer to an `Ask`.
    Reply {
        /// The id of the `Ask` answered.
        request_id: u64,
    },
    /// The request could not be served (unknown actor or type, undecodable, handler error).
    Failure {
        /// The id of the `Ask` that failed.
        request_id: u64,
        /// Why it failed.
        error: String,
    },
}

/// Routing information of a frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeHeader {
    /// The sending node.
    pub from: NodeId,
    /// The receiving node.
    pub to: NodeId,
    /// Target actor name on `to`; replies carry the empty string.
    pub actor: String,
    /// `RemoteMessage::TYPE_NAME` of the body (of the request, for replies).
    pub msg_type: String,
    /// The priority the frame travels at (and a reply answers at).
    pub priority: Priority,
    /// Tell, ask, reply or failure.
    pub kind: EnvelopeKind,
}

/// A decoded frame: the header and the still-encoded body.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The routing header, decoded.
    pub header: EnvelopeHeader,
    /// The msgpack body, still encoded: zero-copy slices of the received bytes.
    pub body: Body,
}

/// Lengths announced by a frame prefix.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FramePrefix {
    /// Length of the msgpack header in bytes.
    pub header_len: usize,
    /// Length of the body in bytes.
    pub body_len: usize,
}

impl FramePrefix {
    /// Prefix, header and body together.
    pub fn total_len(&self) -> usize {
        FRAME_PREFIX_LEN + self.header_len + self.body_len
    }

    /// Parses and checks the prefix against a size limit before any allocation happens.
    pub fn parse(prefix: &[u8], max_frame: usize) -> Result<Self, CodecError> {
        if prefix.len() < FRAME_PREFIX_LEN {
            return Err(CodecError::Truncated {
                need: FRAME_PREFIX_LEN,
                have: prefix.len(),
            });
        }
        let magic = [prefix[0], prefix[1], prefix[2], prefix[3]];
        if magic != FRAME_MAGIC {
            return Err(CodecError::BadMagic(magic));
        }
        let header_len = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]) as usize;
        let body_len = u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]) as usize;
        if header_len > MAX_HEADER_LEN {
            return Err(CodecError::HeaderTooLarge(header_len));
        }
        let p = FramePrefix {
            header_len,
            body_len,
        };
        if p.total_len() > max_frame {
            return Err(CodecError::Oversize {
                len: p.total_len(),
                max: max_frame,
            });
        }
        Ok(p)
    }
}

impl Frame {
    /// Encodes a header and a typed body into one buffer (the body counted first).
    pub fn encode<M: Serialize + ?Sized>(
        header: &EnvelopeHeader,
        body: &M,
    ) -> Result<Bytes, CodecError> {
        let body_len = crate::encoded_len(body)?;
        let mut buf = Self::head(header, body_len)?;
        let header_len = buf.len() - FRAME_PREFIX_LEN;
        crate::encode_body(body, &mut buf)?;
        let encoded = buf.len() - FRAME_PREFIX_LEN - header_len;
        if encoded != body_len {
            let why = format!("body encoded to {encoded} bytes, counted {body_len}");
            return Err(CodecError::Encode(why));
        }
        Self::write_prefix(&mut buf, header_len, body_len)?;
        Ok(Bytes::from(buf))
    }

    /// The pieces of a frame whose body was encoded already (by [`crate::encode_body`]),
    /// the body shared, not copied; joined, byte for byte [`Frame::encode`]'s.
    pub fn with_encoded_body(
        header: &EnvelopeHeader,
        body: &Bytes,
    ) -> Result<Vec<Bytes>, CodecError> {
        let mut head = Self::head(header, 0)?;
        let header_len = head.len() - FRAME_PREFIX_LEN;
        Self::write_prefix(&mut head, header_len, body.len())?;
        Ok(vec![Bytes::from(head), body.clone()])
    }

    /// A zeroed prefix followed by the encoded `header`, with room for `extra` more bytes.
    fn head(header: &EnvelopeHeader, extra: usize) -> Result<Vec<u8>, CodecError> {
        let mut head = Vec::with_capacity(FRAME_PREFIX_LEN + 128 + extra);
        head.extend_from_slice(&[0u8; FRAME_PREFIX_LEN]);
        crate::encode_body(header, &mut head)?;
        Ok(head)
    }

    /// Encodes a header and a message as the pieces of one frame: a large `f32` vector the
    /// message names ([`crate::RemoteMessage::large_payload`], at least
    /// [`crate::body::LARGE_BIN`] bytes) becomes a piece owning the vector's allocation,
    /// never copied. Joined, the pieces are byte for byte [`Frame::encode`]'s; without such
    /// a vector (or on a big-endian machine) the result is [`Frame::encode`]'s one piece.
    pub fn encode_chunks<M: crate::RemoteMessage>(
        header: &EnvelopeHeader,
        mut msg: M,
    ) -> Result<Vec<Bytes>, CodecError> {
        let free = TAKEN.with(|t| t.try_borrow().map(|t| t.is_none()).unwrap_or(false));
        let slot = match msg.large_payload() {
            Some(slot)
                if cfg!(target_endian = "little")
                    && free
                    && slot.len() * 4 >= crate::body::LARGE_BIN =>
            {
                slot
            }
            _ => return Ok(vec![Frame::encode(header, &msg)?]),
        };
        let payload = std::mem::take(slot);
        let slot = slot as *const Vec<f32> as usize;
        let gap = (payload.as_ptr() as usize, payload.len() * 4);
        TAKEN.with(|t| {
            *t.borrow_mut() = Some(Taken {
                slot,
                payload,
                hits: 0,
            })
        });
        // Cleared however this returns (panics included): no stale payload for a later message.
        let _clear = ClearTaken;
        let mut w = CaptureWriter {
            pieces: vec![Piece::Owned(vec![0u8; FRAME_PREFIX_LEN])],
            gap,
            captured: false,
        };
        let encoded = (|| {
            if let Some(Piece::Owned(first)) = w.pieces.last_mut() {
                crate::encode_body(header, first)?;
            }
            let header_len = w.len() - FRAME_PREFIX_LEN;
            msg.serialize(&mut rmp_serde::Serializer::new(&mut w).with_struct_map())
                .map_err(|e| CodecError::Encode(e.to_string()))?;
            Ok::<_, CodecError>(header_len)
        })();
        let taken = TAKEN.with(|t| t.borrow_mut().take());
        let Some(Taken { payload, hits, .. }) = taken else {
            return Err(CodecError::Encode("taken payload vanished".into()));
        };
        let header_len = match encoded {
            Ok(h) if w.captured && hits > 0 => h,
            other => {
                // Not serialized where it was taken from: put it back, encode as usual.
                other?;
                if let Some(slot) = msg.large_payload() {
                    *slot = payload;
                }
                return Ok(vec![Frame::encode(header, &msg)?]);
            }
        };
        let body_len = w.len() - FRAME_PREFIX_LEN - header_len;
        let mut payload = Some(payload);
        let mut out = Vec::with_capacity(w.pieces.len());
        for (i, piece) in w.pieces.into_iter().enumerate() {
            match piece {
                Piece::Owned(mut bytes) => {
                    if i == 0 {
                        Self::write_prefix(&mut bytes, header_len, body_len)?;
                    }
                    if !bytes.is_empty() {
                        out.push(Bytes::from(bytes));
                    }
                }
                Piece::Payload => {
                    if let Some(p) = payload.take() {
                        out.push(Bytes::from_owner(F32Bytes(p)));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Encodes a header with an already-encoded body.
    pub fn encode_raw(header: &EnvelopeHeader, body: &[u8]) -> Result<Bytes, CodecError> {
        Self::encode_raw_pieces(header, &[body])
    }

    /// Encodes a header with an already-encoded body, a body of at least
    /// [`crate::body::LARGE_BIN`] bytes kept as a piece of its own (as [`Frame::encode_raw`]).
    pub fn encode_raw_chunks(
        header: &EnvelopeHeader,
        body: Vec<u8>,
    ) -> Result<Vec<Bytes>, CodecError> {
        if body.len() < crate::body::LARGE_BIN {
            return Ok(vec![Self::encode_raw(header, &body)?]);
        }
        Self::with_encoded_body(header, &Bytes::from(body))
    }

    /// Encodes a header with an already-encoded body in pieces, each copied once.
    pub fn encode_raw_pieces(header: &EnvelopeHeader, body: &[&[u8]]) -> Result<Bytes, CodecError> {
        let body_len: usize = body.iter().map(|p| p.len()).sum();
        let mut buf = Self::head(header, body_len)?;
        let header_len = buf.len() - FRAME_PREFIX_LEN;
        for piece in body {
            buf.extend_from_slice(piece);
        }
        Self::write_prefix(&mut buf, header_len, body_len)?;
        Ok(Bytes::from(buf))
    }

    fn write_prefix(buf: &mut [u8], header_len: usize, body_len: usize) -> Result<(), CodecError> {
        let h = u32::try_from(header_len).map_err(|_| CodecError::HeaderTooLarge(header_len))?;
        let b = u32::try_from(body_len).map_err(|_| CodecError::Oversize {
            len: body_len,
            max: u32::MAX as usize,
        })?;
        let mut prefix = BytesMut::with_capacity(FRAME_PREFIX_LEN);
        prefix.put_slice(&FRAME_MAGIC);
        prefix.put_u32_le(h);
        prefix.put_u32_le(b);
        buf[..FRAME_PREFIX_LEN].copy_from_slice(&prefix);
        Ok(())
    }

    /// Decodes a complete frame. The body stays a slice of `bytes` (no copy).
    pub fn decode(bytes: Bytes, max_frame: usize) -> Result<Frame, CodecError> {
        let prefix = FramePrefix::parse(&bytes, max_frame)?;
        exact_len(prefix.total_len(), bytes.len())?;
        let header_end = FRAME_PREFIX_LEN + prefix.header_len;
        let header: EnvelopeHeader = rmp_serde::from_slice(&bytes[FRAME_PREFIX_LEN..header_end])
            .map_err(|e| CodecError::Header(e.to_string()))?;
        Ok(Frame {
            header,
            body: Body::from(bytes.slice(header_end..)),
        })
    }

    /// Decodes a frame from the chunks after its parsed prefix, gathering only the header.
    pub fn from_chunks(prefix: FramePrefix, chunks: Vec<Bytes>) -> Result<Frame, CodecError> {
        let have: usize = chunks.iter().map(Bytes::len).sum();
        exact_len(prefix.total_len(), FRAME_PREFIX_LEN + have)?;
        let mut head = Vec::with_capacity(prefix.header_len);
        let mut body = Vec::with_capacity(chunks.len());
        for mut c in chunks {
            let take = (prefix.header_len - head.len()).min(c.len());
            if take > 0 {
                head.extend_from_slice(&c.split_to(take));
            }
            if !c.is_empty() {
                body.push(c);
            }
        }
        let header: EnvelopeHeader =
            rmp_serde::from_slice(&head).map_err(|e| CodecError::Header(e.to_string()))?;
        Ok(Frame {
            header,
            body: Body::from_chunks(body),
        })
    }
}

/// Checks that a frame of `need` bytes got exactly `have`.
fn exact_len(need: usize, have: usize) -> Result<(), CodecError> {
    if have < need {
        return Err(CodecError::Truncated { need, have });
    }
    if have > need {
        let extra = have - need;
        let why = format!("{extra} trailing bytes after frame");
        return Err(CodecError::Header(why));
    }
    Ok(())
}

/// A vector [`Frame::encode_chunks`] moved out of the message being serialized.
struct Taken {
    /// Address of the (now empty) field it was taken from.
    slot: usize,
    payload: Vec<f32>,
    /// Times the field was serialized.
    hits: usize,
}

thread_local! {
    static TAKEN: std::cell::RefCell<Option<Taken>> = const { std::cell::RefCell::new(None) };
}

struct ClearTaken;

impl Drop for ClearTaken {
    fn drop(&mut self) {
        TAKEN.with(|t| {
            if let Ok(mut t) = t.try_borrow_mut() {
                *t = None;
            }
        });
    }
}

/// Whether `field` is the field whose values [`Frame::encode_chunks`] took (then counted).
pub(crate) fn is_taken_slot(field: &Vec<f32>) -> bool {
    TAKEN.with(|t| {
        let Ok(mut t) = t.try_borrow_mut() else {
            return false;
        };
        match t.as_mut() {
            Some(taken) if taken.slot == field as *const Vec<f32> as usize => {
                taken.hits += 1;
                true
            }
            _ => false,
        }
    })
}

/// Runs `f` on the taken values (empty when there are none).
pub(crate) fn with_taken<R>(f: impl FnOnce(&[f32]) -> R) -> R {
    TAKEN.with(|t| match t.try_borrow() {
        Ok(t) => f(t.as_ref().map(|t| &t.payload[..]).unwrap_or(&[])),
        Err(_) => f(&[]),
    })
}

/// A vector of f32 as the little-endian bytes it holds (little-endian targets only use it).
struct F32Bytes(Vec<f32>);

impl AsRef<[u8]> for F32Bytes {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

enum Piece {
    Owned(Vec<u8>),
    Payload,
}

/// Collects what the serializer writes, leaving out the taken payload's one write
/// (recognised by address and length) as a [`Piece::Payload`].
struct CaptureWriter {
    pieces: Vec<Piece>,
    gap: (usize, usize),
    captured: bool,
}

impl CaptureWriter {
    fn len(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Owned(b) => b.len(),
                Piece::Payload => self.gap.1,
            })
            .sum()
    }
}

impl std::io::Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.captured && (buf.as_ptr() as usize, buf.len()) == self.gap {
            self.captured = true;
            self.pieces.push(Piece::Payload);
            self.pieces.push(Piece::Owned(Vec::with_capacity(64)));
        } else if let Some(Piece::Owned(last)) = self.pieces.last_mut() {
            last.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
