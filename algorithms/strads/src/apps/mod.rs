//! The built-in STRADS apps: each puts a [`crate::core`] model on the [`crate::shells`]
//! runtime and registers its roles.

pub mod lasso;
pub mod lda;
pub mod logistic;
pub mod mf;
