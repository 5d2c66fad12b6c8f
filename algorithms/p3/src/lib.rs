//! Priority-based parameter propagation (P3): data-parallel DNN training in which
//! parameters are sliced and sent in the order the next forward pass needs them.
//!
//! # A tour
//! The crate reads in order, core to roles:
//!
//! 1. [`core`]: the decision logic, sans I/O. A [`SlicePlan`] cuts every parameter tensor
//!    into [`Slice`]s with a shard and a wire [`Priority`](petrel_messages::Priority)
//!    (layer 0 highest); a [`SliceQueue`] (the workspace's one priority queue) orders them;
//!    [`LayerReadiness`] says which layers are back; [`SliceShardCore`] and
//!    [`SliceWorkerCore`] are the shard's and the worker's engines; [`CostModel`],
//!    [`Bounds`] and [`simulate`] predict an iteration's time; [`ModelProfile`] describes
//!    real architectures. The three [`Mode`]s (sequential, fifo, p3) compute bit-identical
//!    parameters; only the timing differs.
//! 2. [`shells`]: the shard actor and the worker loop on petrel actors.
//! 3. [`kit`]: the public kit. Implement [`StageModel`] (a model as an ordered list of
//!    stages: parameter counts per stage, forward stage by stage, backward stage by stage
//!    handing over gradients) and run it with [`run_cluster`] and a [`P3Job`]; see
//!    `examples/p3_custom.rs`.
//! 4. [`models`]: the built-in stage models, [`EmulatedModel`] (a profile with
//!    emulated compute: VGG-19, ResNet-50, Sockeye) and [`CandleStageModel`], the adapter
//!    that trains a model written with the candle deep-learning crate, given as an ordered
//!    list of stages ([`StagedNet`]; MLP, LeNet, ResNet-18 and VGG-11 in [`models::nets`]).
//!    The adapter is the `candle` feature (default on): without it the crate builds without
//!    candle, trains emulated profiles only, and refuses a real network with
//!    [`ModelError::NoCandle`].
//! 5. [`roles`]: the built-in `p3-worker`/`p3-shard` roles of `petrel node`, configured by
//!    `[app.p3]` ([`P3Settings`]).
//!
//! # One iteration
//!
//! Backward runs the stages in reverse. In `p3` mode each stage's gradients are cut into
//! slices at once, spread round-robin over the shards, and each slice is pushed as an ask
//! at its layer's priority, through the node's priority outbox onto a QUIC stream of that
//! priority; `fifo` pushes whole layers as they appear, `sequential` everything after the
//! last stage. A shard handles its backlog highest priority first; once every worker's
//! gradient of a slice is in, it sums them in worker order (arrival order cannot change the
//! result), applies SGD with momentum and replies to every worker at the request's
//! priority. A worker installs a tensor when its last slice is back, and forward stage `k`
//! waits only for its own tensors.
//!
//! The P3 benchmark turns off QUIC's round-robin among streams of one priority
//! (`send_fairness = false` in `[net]`), so slices of one layer leave in the order they
//! were written and a shard can answer the first while the rest arrive.
//!
//! Every failure is a [`P3Error`], with the cores' [`PlanError`], [`EngineError`] and
//! [`ProfileError`] as its sources.
//!
//! Start with `use petrel_p3::prelude::*;`.

#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod core;
pub mod error;
pub mod kit;
pub mod model_file;
pub mod models;
pub mod roles;
pub mod settings_checks;
pub mod shells;

pub use crate::core::{
    Bounds, CostModel, EngineError, LayerReadiness, Mode, ModelProfile, PlanError, ProfileError,
    SimConfig, SimReport, Slice, SlicePlan, SliceQueue, SliceShardCore, SliceWorkerCore,
    auto_slice_size, ideal_iteration_s, reference_step, simulate,
};
pub use error::P3Error;
pub use kit::{
    P3Job, P3WorkerReport, Progress, StageGrads, StageLayout, StageModel, StepStats, run_cluster,
};
#[cfg(feature = "candle")]
pub use models::{CandleStageModel, StagedNet};
pub use models::{EmulatedModel, ModelError};
pub use roles::{P3Settings, WorkerReportFile};

/// The names most P3 code needs: `use petrel_p3::prelude::*;`.
pub mod prelude {
    #[cfg(feature = "candle")]
    pub use crate::CandleStageModel;
    pub use crate::{
        EmulatedModel, Mode, ModelProfile, P3Error, P3Job, P3WorkerReport, StageGrads, StageModel,
        StepStats, run_cluster,
    };
    pub use petrel_ml::dnn::FlatSgdMomentum;
}
