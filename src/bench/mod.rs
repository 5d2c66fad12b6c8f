//! Benchmarks behind `petrel bench …`. Each prints a table and ends with one JSON line.

pub mod transport;
pub mod lasso;
pub mod strads_plot;
pub mod mf;
pub mod lda;
