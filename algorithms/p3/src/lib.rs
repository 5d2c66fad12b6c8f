//! Priority-based parameter propagation (P3): data-parallel DNN training in which parameters
//! are sliced and sent in the order the next forward pass needs them. One home that reads
//! in order:
//!
//! 1. [`core`]: slicing, the slice queue, per-layer readiness, the cost model and simulator,
//!    model profiles and the shard/worker engines. No actix.
//! 2. [`shells`]: the worker and shard actors.
//! 3. [`roles`]: the built-in roles and their settings.

pub mod core;
pub mod roles;
pub mod shells;
