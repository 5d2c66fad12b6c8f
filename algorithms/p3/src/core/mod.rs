//! P3's decision logic, sans I/O: plain structs with plain methods, no actors, sockets or
//! clocks (`.ci/check-cores` keeps it that way). Read in this order:
//!
//! - [`mode`]: [`Mode`], sequential / fifo / p3.
//! - [`slicing`]: [`SlicePlan`] cuts every plan layer (one parameter tensor) into
//!   [`Slice`]s, each with its shard and its wire [`Priority`](petrel_messages::Priority).
//! - [`readiness`]: [`LayerReadiness`], which layers' slices are all back, so a forward
//!   pass of layer `l` waits only for layer `l`.
//! - [`shard`] and [`worker`]: the engines, [`SliceShardCore`] (aggregate, average, apply
//!   [`FlatSgdMomentum`](petrel_ml::dnn::FlatSgdMomentum)) and [`SliceWorkerCore`] (cut gradients,
//!   reassemble parameters), and [`reference_step`], the same update in one process.
//! - [`roster`]: [`WorkerRoster`], the workers an iteration averages over, changed between
//!   iterations by what the workers' pushes [`Announce`].
//! - [`departure`]: [`Departure`], when a leaving shard's node may leave (every worker it
//!   answered last confirmed it has those replies).
//! - [`cost`] and [`simulator`]: [`CostModel`], the C/M [`Bounds`], and a deterministic
//!   discrete-event [`simulate`] of the three modes with [`auto_slice_size`].
//! - [`profile`]: [`ModelProfile`]s of real architectures (VGG-19, ResNet-50, a
//!   Sockeye-style seq2seq) and user profiles from TOML/JSON.
//! - [`error`]: [`P3CoreError`], the one error of the cores.

pub mod cost;
pub mod departure;
pub mod error;
pub mod mode;
pub mod profile;
pub mod readiness;
pub mod roster;
pub mod shard;
pub mod simulator;
pub mod slicing;
pub mod worker;

pub use cost::{Bounds, CostModel, ideal_iteration_s};
pub use departure::{Departure, shards_done_with};
pub use error::P3CoreError;
pub use mode::Mode;
pub use profile::{LayerProfile, MeasuredTime, ModelProfile, SockeyeConfig};
pub use readiness::LayerReadiness;
pub use roster::{Announce, RosterChange, WorkerRoster};
pub use shard::{Applied, Pulled, SliceHandOff, SliceShardCore, SliceState, reference_step};
pub use simulator::{SimConfig, SimReport, auto_slice_size, simulate};
pub use slicing::{Slice, SlicePlan};
pub use worker::SliceWorkerCore;
