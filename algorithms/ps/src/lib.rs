//! The parameter server (Bösen / Petuum): sharded tables of rows, client caches and
//! BSP, SSP, ESSP and async consistency, in one home that reads in order:
//!
//! 1. [`core`]: sans-I/O decision logic (clock tables, consistency rules, the client cache
//!    and oplog, managed communication, the data-parallel LDA sampler). No actix, no tokio.
//! 2. [`shells`]: the actors that host shards and the client handle workers call.
//! 3. [`kit`]: generic shard and monitor roles and the local job runner apps share.
//! 4. [`apps`]: the built-in apps (matrix factorization, logistic regression, LDA).
//!
//! [`checkpoint`] persists shard state with the runtime's durable files.

pub mod apps;
pub mod checkpoint;
pub mod core;
pub mod error;
pub mod kit;
pub mod shells;

pub use error::PsError;
