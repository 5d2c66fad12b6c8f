//! Machine-learning building blocks shared by petrel's systems: data loaders (LIBSVM,
//! ratings, bag-of-words, IDX), synthetic generators and small DNN layers. Plain
//! computation: no actors, no I/O beyond reading files.

pub mod data;
pub mod dnn;
pub mod topic;
