//! P3's wire types. Tensors travel as raw little-endian `f32` bytes next to a small
//! msgpack header ([`f32_bytes`]).

use petrel_messages::remote_message;
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

/// One worker's gradient for one slice of one iteration. Reply: the slice's new values.
#[derive(Serialize, Deserialize)]
pub struct PushGrad {
    /// The iteration the gradient belongs to.
    pub iter: u64,
    /// The pushing worker.
    pub worker: u32,
    /// The slice id in the job's plan.
    pub slice: u32,
    /// The gradient values of the slice.
    #[serde(with = "f32_bytes")]
    pub grad: Vec<f32>,
}

/// A slice's parameters after the update of iteration `iter`.
#[derive(Serialize, Deserialize)]
pub struct SliceValues {
    /// The iteration whose gradients were applied.
    pub iter: u64,
    /// The slice id.
    pub slice: u32,
    /// The new values.
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

remote_message!(PushGrad => SliceValues, "petrel.p3.push");

/// Initial values of a slice (sent once by worker 0 before training). Reply: the slice id.
#[derive(Serialize, Deserialize)]
pub struct InitSlice {
    /// The slice id.
    pub slice: u32,
    /// Its initial values.
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

remote_message!(InitSlice => u32, "petrel.p3.init");
