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
//!
//! [`Sequential`] is a stack of [`Layer`]s; [`SoftmaxCrossEntropy`] is the loss;
//! [`FlatSgdMomentum`] updates flat tensors (or slices of them, as a P3 server shard does);
//! [`data`] has synthetic data sets and the IDX (MNIST) reader, failing with a
//! [`data::DnnDataError`]; the network cores fail with a [`DnnError`].

#![warn(missing_docs)]

pub mod cifar;
pub mod data;
pub mod layers;
pub mod net;
pub mod optim;

pub use layers::{Conv2d, Dense, Flatten, Init, Layer, MaxPool2d, Relu, SoftmaxCrossEntropy};
pub use net::{ParamSpec, Sequential};
pub use optim::FlatSgdMomentum;

/// The array crate the layers use, so code that builds inputs or writes its own layers
/// (such as a P3 stage model) names the same version.
pub use ndarray;

/// Errors from the network cores. These are caller mistakes (wrong shapes, wrong
/// lengths, backward before forward), never internal invariants.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DnnError {
    /// An input or gradient did not have the shape the layer expects.
    #[error("{layer}: bad shape: expected {expected}, got {got:?}")]
    Shape {
        /// The layer.
        layer: String,
        /// The shape it expects, in words.
        expected: String,
        /// The shape it got.
        got: Vec<usize>,
    },
    /// `backward` was called without a preceding `forward`.
    #[error("{layer}: backward called before forward")]
    NoForward {
        /// The layer.
        layer: String,
    },
    /// A flat parameter / gradient / velocity had the wrong number of elements.
    #[error("parameter tensor {index} ({name}): expected {expected} elements, got {got}")]
    ParamLength {
        /// The tensor's index in the network.
        index: usize,
        /// The tensor's name.
        name: String,
        /// Its element count.
        expected: usize,
        /// The elements given.
        got: usize,
    },
    /// `set_params` got a different number of tensors than the network has.
    #[error("expected {expected} parameter tensors, got {got}")]
    ParamCount {
        /// Tensors of the network.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// A label is not a valid class index for the logits.
    #[error("label {label} at row {row} out of range for {classes} classes")]
    Label {
        /// The batch row.
        row: usize,
        /// The label.
        label: usize,
        /// Classes of the logits.
        classes: usize,
    },
    /// A builder was given an impossible architecture.
    #[error("invalid architecture: {0}")]
    Architecture(String),
}
