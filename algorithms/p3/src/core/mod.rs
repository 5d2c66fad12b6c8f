//! P3 (priority-based parameter propagation) compute cores, sans I/O.
//!
//! - [`profile`]: per-layer parameter counts and FLOPs of real architectures (VGG-19,
//!   ResNet-50, a Sockeye-style LSTM seq2seq) and user profiles from TOML/JSON.
//! - [`engine`]: the shard's aggregation + SGD core and the worker's slice bookkeeping.
//! - [`plan`]: slicing layers into prioritised, shard-assigned slices, the priority queue
//!   and per-layer readiness tracking a runtime needs, the C/M bounds, and a deterministic
//!   discrete-event simulator of Sequential / FIFO / P3 synchronisation.

pub mod engine;
pub mod plan;
pub mod profile;

pub use engine::{EngineError, ShardCore, WorkerCore, reference_step};
pub use plan::{
    Bounds, CostModel, LayerReadiness, Mode, PlanError, SimConfig, SimReport, Slice, SlicePlan,
    SliceQueue, simulate,
};
pub use profile::{LayerProfile, MeasuredTime, ModelProfile, ProfileError, SockeyeConfig};
