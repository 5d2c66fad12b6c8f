//! Priority-based parameter propagation (P3): data-parallel DNN training in which
//! parameters are sliced and sent in the order the next forward pass needs them.
//!
//! # A tour
//! 1. [`core`]: the decision logic, sans I/O: the [`SlicePlan`], per-layer
//!    [`LayerReadiness`], the [`SliceShardCore`] and [`SliceWorkerCore`] engines, the
//!    [`CostModel`], [`Bounds`] and [`simulate`], and [`ModelProfile`]s. The three [`Mode`]s
//!    compute bit-identical parameters; only the timing differs.
//! 2. [`shells`]: the shard actor and the worker loop on petrel actors.
//! 3. [`kit`]: implement [`StageModel`] and run it with [`run_cluster`] and a [`P3Job`]
//!    (`examples/p3_custom.rs`).
//! 4. [`models`]: [`EmulatedModel`] (a profile with emulated compute) and, with the `candle`
//!    feature, [`CandleStageModel`] over a [`StagedNet`] (nets in [`models::nets`]); without
//!    it a real network is refused with [`P3Error::NoCandle`].
//! 5. [`roles`]: the built-in `p3-worker`/`p3-shard` roles, configured by `[app.p3]`
//!    ([`P3Settings`]).
//!
//! # One iteration
//!
//! Backward runs the stages in reverse. In `p3` mode each stage's gradients are cut into
//! slices at once, spread over the shards and pushed at their layer's priority; `fifo`
//! pushes whole layers, `sequential` everything after the last stage. A shard sums a slice's
//! gradients in worker order (arrival order cannot change the result), applies SGD with
//! momentum and replies at the request's priority; forward stage `k` waits only for its
//! own tensors. The P3 benchmark sets `send_fairness = false` in `[net]` so slices of one
//! layer leave in order.
//!
//! Every failure is a [`P3Error`]. Start with `use petrel_p3::prelude::*;`.

#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod core;
pub mod error;
pub mod kit;
pub mod model_file;
pub mod models;
pub mod roles;
pub mod shells;

pub use crate::core::{
    Bounds, CostModel, LayerReadiness, Mode, ModelProfile, P3CoreError, SimConfig, SimReport,
    Slice, SlicePlan, SliceShardCore, SliceWorkerCore, auto_slice_size, ideal_iteration_s,
    reference_step, simulate,
};
pub use error::P3Error;
pub use kit::{
    P3Job, P3WorkerReport, Progress, StageGrads, StageLayout, StageModel, StepStats, run_cluster,
};
pub use models::EmulatedModel;
#[cfg(feature = "candle")]
pub use models::{CandleStageModel, StagedNet};
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
