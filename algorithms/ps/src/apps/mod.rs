//! The built-in parameter-server apps, each a [`PsApp`](crate::kit::PsApp):
//! [`mf::PsMf`] (matrix factorization), [`lr::PsLr`] (logistic regression) and
//! [`lda::PsLda`] (data-parallel LDA).

pub mod lda;
pub mod lr;
pub mod mf;
