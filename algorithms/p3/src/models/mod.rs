//! The built-in [`StageModel`](crate::kit::StageModel)s:
//!
//! - [`CandleStageModel`] (the `candle` feature, default on): a model written with the
//!   candle deep-learning crate as an ordered list of stages ([`StagedNet`]); [`nets`] has
//!   an MLP, LeNet, and ResNet-18 and VGG-11 layouts for 32x32 images.
//! - [`EmulatedModel`]: a [`crate::core::ModelProfile`] (VGG-19, ResNet-50, Sockeye, or
//!   a user profile) with emulated compute; stage = profile layer, one tensor each.

pub mod architecture;
mod emulated;
#[cfg(feature = "candle")]
pub mod nets;
#[cfg(feature = "candle")]
pub mod staged;

pub use emulated::EmulatedModel;
#[cfg(feature = "candle")]
pub use staged::{BuiltNet, CandleStageModel, StagedNet, TensorSpec};

use petrel_ml::dnn::DnnError;

/// Errors of the built-in models.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // fields: named in the variant's doc and message
pub enum ModelError {
    /// The optimiser rejected a tensor (lengths differ).
    #[error(transparent)]
    Optimizer(#[from] DnnError),
    /// candle rejected a shape, a tensor or an operation.
    #[cfg(feature = "candle")]
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// A real network was asked of a build without the `candle` feature.
    #[error("real networks need the `candle` feature, which this build of petrel left out")]
    NoCandle,
    /// A saved network's declared architecture does not fit its tensors or its bounds.
    #[error(transparent)]
    Architecture(#[from] architecture::ArchitectureError),
    /// A model name [`nets::by_name`] does not know.
    #[error("unknown model {0:?} (known: mlp, lenet, resnet18, vgg11)")]
    UnknownNet(String),
    /// A stage index the model does not have.
    #[error("no stage {0}")]
    NoStage(usize),
    /// A parameter tensor index the model does not have.
    #[error("no parameter tensor {0}")]
    NoTensor(usize),
    /// A tensor of the wrong length.
    #[error("tensor {tensor}: {got} values for {expected} parameters")]
    TensorLength {
        tensor: usize,
        expected: usize,
        got: usize,
    },
    /// A stage was run out of order (forward without input, backward without gradient).
    #[error("stage {stage}: {what}")]
    OutOfOrder { stage: usize, what: &'static str },
    /// A model that cannot train: no data, batch 0 or no workers.
    #[error("a stage model needs data, batch > 0 and workers > 0")]
    NothingToTrain,
}
