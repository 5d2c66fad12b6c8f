//! Scheduled model parallelism (STRADS): a scheduler picks which variables to update in
//! each round, workers compute partial results on their share of the data, and the
//! scheduler aggregates and commits them.
//!
//! The crate reads in four layers, each using only the ones above it:
//!
//! 1. **[`core`]**, sans-I/O decision logic (no actix, tokio, transport or CLI parser;
//!    `.ci/check-cores` checks the runtime imports; the flags' clap glue is in `apps`).
//!    The app contract: [`StradsApp`] (wire types), [`Schedule`] (scheduler half),
//!    [`Push`] / [`RingPush`] (worker halves), answered with [`Step`] and [`Plan`]. The round protocol's cores: [`PipelineCore`] (rounds in flight, commits
//!    in order) and [`RingCore`] (a ring worker's queue and blocks). The models: Lasso,
//!    sparse logistic regression, CCD++ matrix factorisation, SparseLDA, and the priority
//!    scheduler with its dependency filter ([`core::scheduler`]).
//! 2. **[`shells`]**, the actor runtime around the cores: [`run_scheduler`] (the
//!    scheduler's event loop) and the worker actors for star routing
//!    ([`shells::StradsWorker`]) and ring routing ([`shells::RingWorker`], blocks travel
//!    worker to worker).
//! 3. **[`kit`]**, what an app implements and gets: the [`StradsJob`] trait (settings
//!    section, scheduler half, worker halves as [`StarHalf`] or [`RingHalf`], outputs),
//!    the roles it produces ([`kit::register`]), and the one serial driver
//!    ([`kit::serial`], star and ring) that tests run.
//! 4. **[`apps`]**, the built-in jobs, each one [`StradsJob`] impl:
//!    [`apps::lasso`] (with checkpoints and several schedulers), [`apps::logistic`],
//!    [`apps::mf`] (STRADS MF) and [`apps::lda`]. `petrel train` runs them.
//!
//! ## The linear models (Lasso, sparse logistic regression)
//!
//! One coordinate-descent step serves every loss ([`core::loss`]), under two solvers:
//!
//! - **Gauss-Seidel** (`solver = "gauss-seidel"`, the default through `auto`): workers
//!   hold column blocks and sweep them sequentially; the scheduler combines the sweeps
//!   with step weights that never raise the objective ([`core::gauss_seidel`],
//!   [`core::logistic::gauss_seidel`]). With one worker, in one thread, it is the
//!   baseline (`--transport none`, [`apps::lasso::baseline`],
//!   [`apps::logistic::run_baseline`]).
//! - **Scheduled** (`solver = "scheduled"`): the STRADS paper's algorithm, row-holding
//!   workers and a scheduler that samples coordinates by priority and filters dependent
//!   ones ([`core::scheduler`]), possibly split over several schedulers
//!   ([`apps::lasso::multi`]).
//!
//! Their tuning constants are in one place, [`core::tuning`].
//!
//! Errors: the sans-I/O cores return [`StradsModelError`]; everything else returns
//! [`StradsError`], which wraps it; both keep their source chains (see [`error`]).
//!
//! A new app is a marker type with [`StradsApp`] and [`StradsJob`] impls plus its two
//! halves; `examples/strads_custom.rs` is one in about 150 lines.

// deny, not forbid: ndarray's `s!` macro allows unsafe code inside its own expansion.
#![deny(unsafe_code)]

pub mod apps;
pub mod core;
pub mod error;
pub mod kit;
pub mod shells;

pub use crate::core::StradsModelError;
pub use crate::core::app::{
    BlockFate, BlockId, Plan, Push, RingApp, RingOutput, RingPush, Schedule, Step, StradsApp,
};
pub use crate::core::pipeline::{PipelineAction, PipelineCore};
pub use crate::core::ring::RingCore;
pub use error::StradsError;
pub use kit::{FinishedRun, JobShape, RingHalf, StarHalf, StradsJob, WorkerHalf};
pub use shells::{RunStats, SchedulerOptions, run_scheduler};

/// What an app needs in scope: the contract, the kit and the errors.
pub mod prelude {
    pub use crate::core::StradsModelError;
    pub use crate::core::app::{
        BlockFate, BlockId, Plan, Push, RingApp, RingOutput, RingPush, Schedule, Step, StradsApp,
    };
    pub use crate::error::StradsError;
    pub use crate::kit::serial::Delivery;
    pub use crate::kit::{
        FinishedRun, JobShape, RingHalf, StarHalf, StradsJob, StradsSettings, register, run_serial,
    };
    pub use crate::shells::SchedulerOptions;
}
