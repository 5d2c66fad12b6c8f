//! The built-in parameter-server apps.

pub mod lda;
pub mod lr;
pub mod mf;
