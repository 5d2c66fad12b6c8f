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
