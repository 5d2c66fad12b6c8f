//! The built-in STRADS jobs: each puts a [`crate::core`] model on the runtime through one
//! [`StradsJob`](crate::kit::StradsJob) impl and registers its roles.

pub mod lasso;
pub mod lda;
pub mod logistic;
pub mod mf;
#[cfg(test)]
mod ring_changes;
