//! Machine-learning building blocks shared by petrel's three systems: plain computation,
//! no actors, no I/O beyond reading files.
//!
//! - [`data`]: loaders for LIBSVM ([`data::SparseDataset`]), rating triplets and Matrix
//!   Market ([`data::Ratings`]), UCI bag-of-words ([`data::Corpus`]), and seeded
//!   synthetic generators ([`data::synthetic`]). Bad input is a [`data::DataError`] naming
//!   the file and line, never a panic.
//! - [`dnn`]: small DNN layers, optimizers and the IDX (MNIST) reader used by P3.
//! - [`job`]: what every training app's settings share: [`job::InvalidSetting`] (names
//!   the key) and the range checks of [`job::SettingChecks`].
//! - [`model`]: the saved model file every training app writes ([`model::SavedModel`])
//!   and the held-out evaluation and prediction `petrel eval` / `petrel predict` run.
//! - [`topic`]: topic-model math shared by STRADS LDA and parameter-server LDA: sparse
//!   topic counts ([`topic::TopicCounts`]), the SparseLDA sampler
//!   ([`topic::SparseSampler`]), log-likelihoods and topic output files.
//!
//! Start with `use petrel_ml::prelude::*;`.

// The one unsafe block maps a data file (`data::with_map`).
#![deny(unsafe_code)]

pub mod data;
pub mod dnn;
pub mod job;
pub mod model;
pub mod topic;

/// The names most code needs: `use petrel_ml::prelude::*;`.
pub mod prelude {
    pub use crate::data::{Corpus, DataError, Ratings, SparseDataset};
    pub use crate::topic::{LdaConfig, SparseSampler, TopicCounts};
}
