//! A received frame's body: the stream's chunks as the transport handed them over, never
//! gathered unless a reader needs one contiguous slice.
//!
//! [`Body::decode`] copies each large `bin` straight from the chunks into the aligned
//! vector of the `f32`/`f64`/`u32` field that takes it ([`crate::tensor::f32_bytes`] etc.),
//! one copy instead of gather-then-copy:
//!
//! 1. a length-only scan builds a *skeleton*: the body with every `bin` of [`LARGE_BIN`]
//!    bytes or more replaced by a token `bin` (a per-decode random nonce and an index);
//! 2. rmp-serde decodes the skeleton; a `*_bytes` field meeting a token copies its payload;
//! 3. unless every token was taken by a `*_bytes` field, the result is discarded and the
//!    gathered body decoded instead — so the outcome, errors included, is always that of
//!    decoding the gathered bytes.

use crate::tensor::LeValue;
use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// A `bin` of at least this many bytes is copied straight into place by [`Body::decode`].
pub const LARGE_BIN: usize = 64 * 1024;

/// Bytes of a token that stands for an elided payload in a skeleton.
pub(crate) const TOKEN_LEN: usize = 24;
const TOKEN_MAGIC: [u8; 8] = *b"PTRLbin\0";

/// A frame's body, still encoded: one slice or the chunks it arrived in.
#[derive(Clone, Default)]
pub struct Body {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    One(Bytes),
    Many { chunks: Vec<Bytes>, len: usize },
}

impl Default for Repr {
    fn default() -> Self {
        Repr::One(Bytes::new())
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body { repr: Repr::One(b) }
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Body::from(Bytes::from(v))
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("len", &self.len())
            .field("chunks", &self.chunks().len())
            .finish()
    }
}

/// Equal when the bytes are equal, however they are chunked.
impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.to_bytes() == other.to_bytes()
    }
}

impl Eq for Body {}

impl Body {
    /// A body made of `chunks`, in order (empty chunks are dropped).
    pub fn from_chunks(chunks: Vec<Bytes>) -> Self {
        let mut chunks: Vec<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        match chunks.len() {
            0 => Body::default(),
            1 => Body::from(chunks.swap_remove(0)),
            _ => {
                let len = chunks.iter().map(Bytes::len).sum();
                Body {
                    repr: Repr::Many { chunks, len },
                }
            }
        }
    }

    /// Bytes in the body.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::One(b) => b.len(),
            Repr::Many { len, .. } => *len,
        }
    }

    /// True when the body holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunks, in order (one for a contiguous body).
    pub fn chunks(&self) -> &[Bytes] {
        match &self.repr {
            Repr::One(b) => std::slice::from_ref(b),
            Repr::Many { chunks, .. } => chunks,
        }
    }

    /// The body's bytes from offset `skip` on, as slices of its chunks, in order.
    pub fn slices(&self, skip: usize) -> impl Iterator<Item = &[u8]> {
        let mut skip = skip;
        self.chunks().iter().filter_map(move |c| {
            if skip >= c.len() {
                skip -= c.len();
                return None;
            }
            let piece = &c[skip..];
            skip = 0;
            Some(piece)
        })
    }

    /// The body as one slice: free when it is one already, a gathering copy otherwise.
    pub fn to_bytes(&self) -> Bytes {
        match &self.repr {
            Repr::One(b) => b.clone(),
            Repr::Many { chunks, len } => gather(chunks, *len),
        }
    }

    /// Decodes the body as `M`, copying a large payload once into its final vector (see the
    /// module docs). Errors name `type_name`.
    pub fn decode<M: DeserializeOwned>(&self, type_name: &str) -> Result<M, crate::CodecError> {
        match &self.repr {
            Repr::One(b) => crate::decode_body(type_name, b),
            Repr::Many { chunks, len } => {
                if cfg!(target_endian = "little")
                    && *len >= LARGE_BIN
                    && let Some(skeleton) = Skeleton::scan(chunks, *len)
                    && !skeleton.elided.is_empty()
                    && let Some(value) = skeleton.decode::<M>(chunks)
                {
                    return Ok(value);
                }
                crate::decode_body(type_name, &gather(chunks, *len))
            }
        }
    }
}

fn gather(chunks: &[Bytes], len: usize) -> Bytes {
    let mut buf = BytesMut::with_capacity(len);
    for c in chunks {
        buf.extend_from_slice(c);
    }
    buf.freeze()
}

/// A position in a chunk list.
struct Cursor<'a> {
    chunks: &'a [Bytes],
    /// Index of the current chunk and offset inside it.
    chunk: usize,
    at: usize,
    /// Bytes left from here to the end.
    left: usize,
}

impl<'a> Cursor<'a> {
    fn new(chunks: &'a [Bytes], len: usize) -> Self {
        Cursor {
            chunks,
            chunk: 0,
            at: 0,
            left: len,
        }
    }

    fn u8(&mut self) -> Option<u8> {
        let mut b = [0u8; 1];
        self.copy_to(&mut b)?;
        Some(b[0])
    }

    /// Copies the next `out.len()` bytes into `out`.
    fn copy_to(&mut self, out: &mut [u8]) -> Option<()> {
        if out.len() > self.left {
            return None;
        }
        let mut done = 0;
        while done < out.len() {
            let c = self.chunks.get(self.chunk)?;
            let n = (c.len() - self.at).min(out.len() - done);
            out[done..done + n].copy_from_slice(&c[self.at..self.at + n]);
            done += n;
            self.advance_in_chunk(n);
        }
        Some(())
    }

    /// Appends the next `n` bytes to `out`.
    fn append(&mut self, n: usize, out: &mut Vec<u8>) -> Option<()> {
        if n > self.left {
            return None;
        }
        let start = out.len();
        out.resize(start + n, 0);
        self.copy_to(&mut out[start..])
    }

    /// Skips `n` bytes.
    fn skip(&mut self, mut n: usize) -> Option<()> {
        if n > self.left {
            return None;
        }
        while n > 0 {
            let c = self.chunks.get(self.chunk)?;
            let k = (c.len() - self.at).min(n);
            self.advance_in_chunk(k);
            n -= k;
        }
        Some(())
    }

    fn advance_in_chunk(&mut self, n: usize) {
        self.at += n;
        self.left -= n;
        if let Some(c) = self.chunks.get(self.chunk)
            && self.at == c.len()
        {
            self.chunk += 1;
            self.at = 0;
        }
    }

    fn be(&mut self, width: usize) -> Option<u64> {
        let mut b = [0u8; 8];
        self.copy_to(&mut b[8 - width..])?;
        Some(u64::from_be_bytes(b))
    }
}

/// A body with its large `bin` payloads replaced by tokens.
struct Skeleton {
    bytes: Vec<u8>,
    nonce: u64,
    /// (chunk index, offset in that chunk, length) of each elided payload, by token index.
    elided: Vec<(usize, usize, usize)>,
}

fn next_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(base ^ COUNT.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

impl Skeleton {
    /// Walks one msgpack value, then copies what follows verbatim; `None` if malformed.
    fn scan(chunks: &[Bytes], len: usize) -> Option<Skeleton> {
        let mut cur = Cursor::new(chunks, len);
        let mut out = Vec::with_capacity(256);
        let nonce = next_nonce();
        let mut elided = Vec::new();
        // Values still to walk: msgpack is prefix-encoded, so a count is all the state.
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            let m = cur.u8()?;
            // (length-field width, extra bytes after it) of the variable-size kinds.
            let payload = match m {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
                0x80..=0x8f => {
                    pending += 2 * u64::from(m & 0x0f);
                    0
                }
                0x90..=0x9f => {
                    pending += u64::from(m & 0x0f);
                    0
                }
                0xa0..=0xbf => usize::from(m & 0x1f),
                0xc4..=0xc6 => {
                    let width = 1 << (m - 0xc4);
                    let n = usize::try_from(cur.be(width)?).ok()?;
                    if n > cur.left {
                        return None;
                    }
                    if n >= LARGE_BIN {
                        let index = elided.len() as u64;
                        elided.push((cur.chunk, cur.at, n));
                        cur.skip(n)?;
                        out.push(0xc4);
                        out.push(TOKEN_LEN as u8);
                        out.extend_from_slice(&TOKEN_MAGIC);
                        out.extend_from_slice(&nonce.to_le_bytes());
                        out.extend_from_slice(&index.to_le_bytes());
                        continue;
                    }
                    out.push(m);
                    out.extend_from_slice(&(n as u64).to_be_bytes()[8 - width..]);
                    cur.append(n, &mut out)?;
                    continue;
                }
                0xc7..=0xc9 => {
                    let width = 1 << (m - 0xc7);
                    out.push(m);
                    let n = usize::try_from(cur.be(width)?).ok()?;
                    out.extend_from_slice(&(n as u64).to_be_bytes()[8 - width..]);
                    n.checked_add(1)?
                }
                0xca => 4,
                0xcb => 8,
                0xcc..=0xcf => 1 << (m - 0xcc),
                0xd0..=0xd3 => 1 << (m - 0xd0),
                0xd4..=0xd8 => 1 + (1 << (m - 0xd4)),
                0xd9..=0xdb => {
                    let width = 1 << (m - 0xd9);
                    out.push(m);
                    let n = usize::try_from(cur.be(width)?).ok()?;
                    out.extend_from_slice(&(n as u64).to_be_bytes()[8 - width..]);
                    n
                }
                0xdc..=0xdf => {
                    let width = if m == 0xdc || m == 0xde { 2 } else { 4 };
                    out.push(m);
                    let n = cur.be(width)?;
                    out.extend_from_slice(&n.to_be_bytes()[8 - width..]);
                    pending += if m >= 0xde { 2 * n } else { n };
                    0
                }
                // 0xc1 is never used.
                _ => return None,
            };
            // Lengths were written with their marker above; plain markers here.
            if !matches!(m, 0xc7..=0xc9 | 0xd9..=0xdb | 0xdc..=0xdf) {
                out.push(m);
            }
            cur.append(payload, &mut out)?;
            // Each value takes at least one byte: more values than bytes is a lie.
            if pending > cur.left as u64 {
                return None;
            }
        }
        // Whatever follows the value stays as it was (the decoder decides about it).
        let rest = cur.left;
        cur.append(rest, &mut out)?;
        Some(Skeleton {
            bytes: out,
            nonce,
            elided,
        })
    }

    /// Decodes the skeleton, offering the elided payloads to `*_bytes` fields; `None`
    /// unless every payload was taken (or on error).
    fn decode<M: DeserializeOwned>(&self, chunks: &[Bytes]) -> Option<M> {
        let offer = Offer {
            nonce: self.nonce,
            chunks: chunks.to_vec(),
            elided: self.elided.iter().map(|&e| Some(e)).collect(),
        };
        let outer = OFFER.with(|o| o.replace(Some(offer)));
        let value = rmp_serde::from_slice::<M>(&self.bytes);
        let offer = OFFER.with(|o| o.replace(outer));
        let all_taken = offer.is_some_and(|o| o.elided.iter().all(Option::is_none));
        match value {
            Ok(v) if all_taken => Some(v),
            _ => None,
        }
    }
}

/// Elided payloads on offer during one [`Skeleton::decode`] on this thread.
struct Offer {
    nonce: u64,
    chunks: Vec<Bytes>,
    elided: Vec<Option<(usize, usize, usize)>>,
}

thread_local! {
    static OFFER: RefCell<Option<Offer>> = const { RefCell::new(None) };
}

/// If `token` names a payload on offer, takes it off the offer and copies it from its
/// chunks into an aligned vector (`None` for any other bytes).
pub(crate) fn take_payload<T: LeValue>(token: &[u8]) -> Option<Result<Vec<T>, crate::CodecError>> {
    if token.len() != TOKEN_LEN || token[..8] != TOKEN_MAGIC {
        return None;
    }
    let nonce = u64::from_le_bytes(token[8..16].try_into().ok()?);
    let index = usize::try_from(u64::from_le_bytes(token[16..24].try_into().ok()?)).ok()?;
    OFFER.with(|o| {
        let mut o = o.try_borrow_mut().ok()?;
        let offer = o.as_mut()?;
        if offer.nonce != nonce {
            return None;
        }
        let (chunk, at, len) = offer.elided.get_mut(index)?.take()?;
        Some(copy_values(&offer.chunks, chunk, at, len))
    })
}

/// Copies `len` bytes starting at `chunks[chunk][at..]` into a fresh `Vec<T>`.
#[cfg(target_endian = "little")]
fn copy_values<T: LeValue>(
    chunks: &[Bytes],
    chunk: usize,
    at: usize,
    len: usize,
) -> Result<Vec<T>, crate::CodecError> {
    let width = std::mem::size_of::<T>();
    let name = T::NAME;
    if !len.is_multiple_of(width) {
        let why = format!("{name} payload of {len} bytes is not a multiple of {width}");
        return Err(crate::CodecError::Tensor(why));
    }
    let mut out: Vec<T> = Vec::with_capacity(len / width);
    let dst = out.as_mut_ptr().cast::<u8>();
    let mut done = 0;
    let mut at = at;
    for c in chunks.get(chunk..).unwrap_or_default() {
        if done == len {
            break;
        }
        let piece = &c[at.min(c.len())..];
        let n = piece.len().min(len - done);
        // SAFETY: `done + n <= len`, the capacity is `len` bytes, and a fresh allocation
        // cannot overlap the chunks.
        unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), dst.add(done), n) };
        done += n;
        at = 0;
    }
    if done != len {
        let why = format!("{name} payload of {len} bytes ran past the body ({done} bytes)");
        return Err(crate::CodecError::Tensor(why));
    }
    // SAFETY: all `len / width` values were written above, and every bit pattern is a
    // valid `T` (`Pod`).
    unsafe { out.set_len(len / width) };
    Ok(out)
}

#[cfg(target_endian = "big")]
fn copy_values<T: LeValue>(
    chunks: &[Bytes],
    chunk: usize,
    at: usize,
    len: usize,
) -> Result<Vec<T>, crate::CodecError> {
    let mut bytes = Vec::with_capacity(len);
    let mut cur = Cursor {
        chunks,
        chunk,
        at,
        left: len,
    };
    cur.append(len, &mut bytes).ok_or_else(|| {
        crate::CodecError::Tensor(format!("{} payload ran past the body", T::NAME))
    })?;
    crate::tensor::values_from_le_bytes(&bytes)
}

#[cfg(test)]
mod tests;
