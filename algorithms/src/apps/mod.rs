//! Applications that combine an algorithm core with the petrel runtime (actors).

pub mod p3;
