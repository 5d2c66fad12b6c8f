//! Benchmarks behind `petrel bench …`. Each prints a table and ends with one JSON line.

pub mod consistency;
pub mod p3;
pub mod soak;
pub mod transport;
