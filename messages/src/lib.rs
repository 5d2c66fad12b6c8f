//! Wire types of petrel: node and actor ids, priorities, envelopes and frames, tensor
//! payloads, the runtime's own messages, and the [`RemoteMessage`] trait through which users
//! define their own typed messages.
//!
//! This crate is pure data and codecs: no I/O, no actors.

pub mod envelope;
pub mod ids;
pub mod priority_queue;
pub mod runtime;
pub mod tensor;

pub use envelope::{CodecError, EnvelopeHeader, EnvelopeKind, FRAME_PREFIX_LEN, Frame};
pub use ids::{ActorId, NodeId, Priority};
pub use priority_queue::PriorityQueue;
pub use tensor::Tensor;

use serde::{Serialize, de::DeserializeOwned};

/// A message that can cross the network, typed end to end.
///
/// `TYPE_NAME` is the stable name on the wire; receivers look handlers up by it, so it must
/// be unique within a cluster (prefix it with your crate or app name). `Reply` is what an
/// `ask` returns; use `()` for fire-and-forget messages.
///
/// Implement it with [`remote_message!`] or by hand.
pub trait RemoteMessage: Serialize + DeserializeOwned + Send + 'static {
    const TYPE_NAME: &'static str;
    type Reply: Serialize + DeserializeOwned + Send + 'static;
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
#[macro_export]
macro_rules! remote_message {
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

/// Encodes a message body as msgpack (struct fields by name, so that adding optional fields
/// stays compatible).
pub fn encode_body<M: Serialize + ?Sized>(msg: &M, out: &mut Vec<u8>) -> Result<(), CodecError> {
    msg.serialize(&mut rmp_serde::Serializer::new(out).with_struct_map())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a message body; errors name the type so that a log line says what failed.
pub fn decode_body<M: DeserializeOwned>(type_name: &str, body: &[u8]) -> Result<M, CodecError> {
    rmp_serde::from_slice(body).map_err(|e| CodecError::Body {
        type_name: type_name.to_string(),
        error: e.to_string(),
    })
}
