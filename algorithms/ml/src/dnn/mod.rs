//! Small, dependency-light neural-network cores (f32, CPU, ndarray).
//!
//! The point of this module is not speed but *real* forward and backward passes whose
//! parameters are exposed as an ordered list of flat `f32` tensors, so a parameter server
//! can slice, push and pull them exactly like P3 does with framework tensors.
//!
//! Layout conventions:
//! - activations are batch-first: `(N, features)` for dense layers, `(N, C, H, W)` (NCHW)
//!   for convolution and pooling;
//! - every parameter tensor is contiguous row-major (`Dense.weight` is `[out, in]`,
//!   `Conv2d.weight` is `[c_out, c_in, k, k]`), so its flat view is stable;
//! - backward *overwrites* the stored gradients (no accumulation across calls).

pub mod data;
pub mod layers;
pub mod net;
pub mod optim;

pub use layers::{Conv2d, Dense, Flatten, Init, Layer, MaxPool2d, Relu, SoftmaxCrossEntropy};
pub use net::{ParamSpec, Sequential};
pub use optim::SgdMomentum;

/// Errors from the network cores. These are caller mistakes (wrong shapes, wrong
/// lengths, backward before forward), never internal invariants.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DnnError {
    /// An input or gradient did not have the shape the layer expects.
    #[error("{layer}: bad shape: expected {expected}, got {got:?}")]
    Shape {
        layer: String,
        expected: String,
        got: Vec<usize>,
    },
    /// `backward` was called without a preceding `forward`.
    #[error("{layer}: backward called before forward")]
    NoForward { layer: String },
    /// A flat parameter / gradient / velocity had the wrong number of elements.
    #[error("parameter tensor {index} ({name}): expected {expected} elements, got {got}")]
    ParamLength {
        index: usize,
        name: String,
        expected: usize,
        got: usize,
    },
    /// `set_params` got a different number of tensors than the network has.
    #[error("expected {expected} parameter tensors, got {got}")]
    ParamCount { expected: usize, got: usize },
    /// A label is not a valid class index for the logits.
    #[error("label {label} at row {row} out of range for {classes} classes")]
    Label {
        row: usize,
        label: usize,
        classes: usize,
    },
    /// A builder was given an impossible architecture.
    #[error("invalid architecture: {0}")]
    Architecture(String),
}
