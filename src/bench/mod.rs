//! Benchmarks behind `petrel bench …`. Each prints a table and ends with one JSON line.

pub mod consistency;
pub mod lasso;
pub mod lasso_schedulers;
pub mod lda;
pub mod mf;
pub mod p3;
pub mod p3_netns;
pub mod soak;
pub mod strads_plot;
pub mod transport;
