//! Machine-learning building blocks shared by petrel's three systems: plain computation,
//! no actors, no I/O beyond reading files.
//!
//! - [`data`]: loaders (LIBSVM, ratings, bag-of-words) and seeded synthetic generators.
//! - [`dnn`]: DNN data sets and the optimizer used by P3.
//! - [`job`]: settings checks and the run outputs every training app shares.
//! - [`model`]: the saved model file and what `petrel eval` / `petrel predict` run.
//! - [`topic`]: topic-model math shared by STRADS and parameter-server LDA.

// The one unsafe block maps a data file (`data::cache::parse_file`).
#![deny(unsafe_code)]

pub mod data;
pub mod dnn;
mod error;
pub mod job;
pub mod model;
pub mod topic;

pub use error::MlError;

/// The names most code needs: `use petrel_ml::prelude::*;`.
pub mod prelude {
    pub use crate::MlError;
    pub use crate::data::{Corpus, Ratings, SparseDataset};
    pub use crate::topic::{LdaConfig, SparseSampler, TopicCounts};
}
