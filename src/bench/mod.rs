//! Benchmarks behind `petrel bench …`. Each prints a table and ends with one JSON line.

pub mod lasso;
pub mod lda;
pub mod mf;
pub mod strads_plot;
pub mod transport;
