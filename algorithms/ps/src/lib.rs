//! The parameter server (Bösen / Petuum): sharded tables of rows, client caches and
//! BSP, SSP, ESSP and async consistency.
//!
//! 1. [`core`]: sans-I/O decision logic: a shard's clock table and consistency rules
//!    ([`PsShardCore`]), a worker's cache and oplog ([`ClientCore`]), server-side update
//!    rules ([`RuleRegistry`], [`UpdateRule`]), managed communication
//!    ([`BandwidthManager`]), the data-parallel LDA sampler ([`core::lda`]) and the shared
//!    types ([`TableSpec`], [`Row`], [`Consistency`], [`ConsistencyModel`]). No actix, no
//!    tokio (`.ci/check-cores` checks it); the clock conventions are written in [`core`].
//! 2. [`shells`]: the actors around the cores: [`ServerShard`] hosts one shard, [`PsClient`]
//!    is a worker's handle (`get`, `inc`, `clock`, `barrier`), [`TablesBuilder`] and
//!    [`PsLayout`] say what a job is made of and where it runs.
//! 3. [`kit`]: a new app is one [`PsApp`] impl; the kit gives it roles ([`register`],
//!    [`register_builtin`]), a job ([`PsJob`]) and in-process runs ([`run_local`],
//!    [`train`]). `examples/ps_custom.rs` is a whole app in one file.
//! 4. [`apps`]: the built-in apps [`PsMf`], [`PsLr`] and [`PsLda`].
//!
//! A read is served from the client's cache when the cached row is fresh enough for the
//! table's consistency model, else fetched from its shard, which holds the reply until its
//! min clock allows it. Writes go into the client's coalescing oplog and cache; `clock()`
//! flushes one batch per shard. Data between a client and a shard travels at one priority
//! (one FIFO lane), which read-my-writes relies on. Rows are reference-counted and copied
//! on write. [`checkpoint`] persists shard state; fallible calls return [`PsError`].
//!
//! ```no_run
//! use petrel_ps::prelude::*;
//!
//! let cfg = PsMfSettings { consistency: ConsistencyModel::Essp, ..PsMfSettings::default() };
//! let out = run_local::<PsMf>(cfg, 2, 3, petrel_actors::Transport::Memory)?;
//! println!("rmse {:.3}", out.metrics.final_rmse);
//! # Ok::<(), PsError>(())
//! ```

#![forbid(unsafe_code)]

pub mod apps;
pub mod checkpoint;
pub mod core;
pub mod error;
pub mod kit;
pub mod shells;

pub use apps::lda::{PsLda, PsLdaMetrics, PsLdaOutcome, PsLdaSettings};
pub use apps::lr::{PsLr, PsLrOutcome, PsLrResult, PsLrSettings};
pub use apps::mf::{PsMf, PsMfOutcome, PsMfResult, PsMfSettings};
pub use core::client::{ClientCore, PushTicket};
pub use core::error::PsCoreError;
pub use core::managed::BandwidthManager;
pub use core::rules::{RuleRegistry, ServerRule, UpdateRule};
pub use core::server_push::{ServerPushConfig, ServerPushStats};
pub use core::shard::PsShardCore;
pub use core::types::{
    Consistency, ConsistencyModel, Row, RowId, SharedRow, TableId, TableKind, TableSpec,
    UpdateRuleSpec, WorkerId,
};
pub use error::PsError;
pub use kit::{
    MonitorCtx, PsApp, PsJob, PsRoles, PsStep, PsTrainArgs, WorkerCtx, WorkerDone, register,
    register_builtin, run_local, run_local_with, train,
};
pub use shells::{PsClient, PsLayout, PullTicket, ServerShard, TablesBuilder};

/// The names an app needs: `use petrel_ps::prelude::*;`.
pub mod prelude {
    pub use crate::apps::lda::{PsLda, PsLdaSettings};
    pub use crate::apps::lr::{PsLr, PsLrSettings};
    pub use crate::apps::mf::{PsMf, PsMfSettings};
    pub use crate::core::rules::{RuleRegistry, UpdateRule};
    pub use crate::core::types::{
        Consistency, ConsistencyModel, Row, RowId, TableId, TableKind, TableSpec, UpdateRuleSpec,
    };
    pub use crate::error::PsError;
    pub use crate::kit::{
        MonitorCtx, PsApp, PsRoles, PsStep, WorkerCtx, WorkerDone, register_builtin, run_local,
        run_local_with,
    };
    pub use crate::shells::{PsClient, PsLayout, TablesBuilder};
}
