//! petrel's algorithms: data loaders and synthetic generators, the STRADS model-parallel
//! cores (Lasso, logistic regression, matrix factorization, LDA), DNN layers and the P3
//! planning logic. Everything here is plain computation; the actors in `petrel-actors`
//! drive it across a cluster.

pub mod apps;
pub mod data;
pub mod dnn;
pub mod p3;
pub mod ps_lda;
pub mod strads;
