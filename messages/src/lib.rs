//! Wire types of petrel: pure data and codecs, no I/O, no actors.
//!
//! - [`NodeId`], [`ActorId`] and [`Priority`] (an `i32`, higher first, used from the outbox
//!   to the mailbox to P3's slices); [`PriorityQueue`] orders work by it, FIFO within one.
//! - Frames: an [`EnvelopeHeader`] and a msgpack body make a [`Frame`]; a bad frame is a
//!   [`CodecError`]. A received [`Body`] is decoded from its chunks without gathering.
//! - Your own messages: implement [`RemoteMessage`] (or use [`remote_message!`]), encoded
//!   with [`encode_body`] and decoded with [`decode_body`].
//! - [`Tensor`], and [`tensor::f32_bytes`] / [`tensor::f64_bytes`] for raw numeric vectors.
//! - [`runtime`]: the runtime's own messages (join, heartbeats, barriers, shutdown).
//!
//! Start with `use petrel_messages::prelude::*;`.

pub mod body;
pub mod envelope;
mod ids;
pub mod priority_queue;
pub mod runtime;
pub mod tensor;

pub use body::Body;
pub use envelope::{CodecError, EnvelopeHeader, EnvelopeKind, FRAME_PREFIX_LEN, Frame};
pub use ids::{ActorId, NodeId, Priority};
pub use priority_queue::{PriorityQueue, Rank};
pub use tensor::Tensor;

/// The names most code needs: `use petrel_messages::prelude::*;`.
pub mod prelude {
    pub use crate::{
        ActorId, NodeId, Priority, PriorityQueue, RemoteMessage, Tensor, remote_message,
    };
}

use serde::{Serialize, de::DeserializeOwned};

/// At most `max_bytes` of `text`, cut at a character boundary, for quoting input in errors.
pub fn clip(text: &str, max_bytes: usize) -> &str {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` with every quoted run (between `"`s or backticks) longer than `max_bytes` cut to
/// its first `max_bytes` and `…`, keeping the rest of the message whole.
pub fn clip_quoted(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes {
        return text.into();
    }
    let mut out = String::with_capacity(text.len().min(4 * max_bytes));
    let mut quote: Option<(char, usize)> = None; // the open quote and the bytes inside
    let mut cut = false;
    for c in text.chars() {
        match quote {
            Some((q, _)) if c == q => {
                quote = None;
                cut = false;
                out.push(c);
            }
            Some((q, inside)) => {
                let inside = inside + c.len_utf8();
                quote = Some((q, inside));
                if inside <= max_bytes {
                    out.push(c);
                } else if !cut {
                    cut = true;
                    out.push('…');
                }
            }
            None => {
                if c == '"' || c == '`' {
                    quote = Some((c, 0));
                }
                out.push(c);
            }
        }
    }
    out.into()
}

/// A message that can cross the network, typed end to end. `TYPE_NAME` is the handler
/// lookup key on the wire, unique within a cluster (prefix it with your crate's name).
pub trait RemoteMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The stable, cluster-unique name of the message on the wire.
    const TYPE_NAME: &'static str;
    /// What an `ask` of this message returns (`()` for fire-and-forget messages).
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// The message's large `f32` vector serialized with [`tensor::f32_bytes`], if any: a
    /// remote `tell` moves it out and hands its bytes to the transport uncopied
    /// ([`Frame::encode_chunks`]); the wire bytes are the same. It is empty while the
    /// message is serialized, so nothing else may depend on it.
    fn large_payload(&mut self) -> Option<&mut Vec<f32>> {
        None
    }
}

/// Declares a type as a [`RemoteMessage`].
///
/// ```
/// use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Ping { n: u32 }
/// #[derive(Serialize, Deserialize)]
/// struct Pong { n: u32 }
/// petrel_messages::remote_message!(Ping => Pong, "example.ping");
/// ```
///
/// A message carrying a large `f32` vector names it after `payload =`, so it is sent
/// uncopied ([`RemoteMessage::large_payload`]):
///
/// ```
/// use petrel_messages::Tensor;
/// use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Gradient { step: u64, tensor: Tensor }
/// petrel_messages::remote_message!(Gradient => (), "example.gradient", payload = tensor.data);
/// ```
#[macro_export]
macro_rules! remote_message {
    ($msg:ty => $reply:ty, $name:expr, payload = $($field:ident).+) => {
        impl $crate::RemoteMessage for $msg {
            const TYPE_NAME: &'static str = $name;
            type Reply = $reply;
            fn large_payload(&mut self) -> Option<&mut Vec<f32>> {
                Some(&mut self.$($field).+)
            }
        }
    };
    ($msg:ty => $reply:ty, $name:expr) => {
        impl $crate::RemoteMessage for $msg {
            const TYPE_NAME: &'static str = $name;
            type Reply = $reply;
        }
    };
    ($msg:ty, $name:expr) => {
        $crate::remote_message!($msg => (), $name);
    };
}

/// Encodes a message body as msgpack (fields by name, so new optional fields stay compatible).
pub fn encode_body<M: Serialize + ?Sized>(msg: &M, out: &mut Vec<u8>) -> Result<(), CodecError> {
    msg.serialize(&mut rmp_serde::Serializer::new(out).with_struct_map())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// The number of bytes [`encode_body`] writes for `msg`, counted without writing them.
pub fn encoded_len<M: Serialize + ?Sized>(msg: &M) -> Result<usize, CodecError> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    msg.serialize(&mut rmp_serde::Serializer::new(&mut counter).with_struct_map())
        .map_err(|e| CodecError::Encode(e.to_string()))?;
    Ok(counter.0)
}

/// Decodes a message body; errors name the type so that a log line says what failed.
pub fn decode_body<M: DeserializeOwned>(type_name: &str, body: &[u8]) -> Result<M, CodecError> {
    rmp_serde::from_slice(body).map_err(|e| CodecError::Body {
        type_name: type_name.to_string(),
        error: e.to_string(),
    })
}

#[cfg(test)]
mod clip_tests {
    use super::clip_quoted;

    #[test]
    fn long_quoted_runs_are_cut_and_the_rest_is_kept() {
        let long = "#".repeat(1000);
        let text = format!("key `rounds`: invalid type: string \"{long}\", expected u32");
        let clipped = clip_quoted(&text, 200);
        assert_eq!(clipped.matches('#').count(), 200);
        assert!(clipped.starts_with("key `rounds`: invalid type: string \""));
        assert!(clipped.ends_with("…\", expected u32"), "{clipped}");
        let short = "expected one of `a`, `b`";
        assert_eq!(clip_quoted(short, 5), short);
    }
}
