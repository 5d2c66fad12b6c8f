//! The parameter server (Bösen / Petuum): sharded tables of rows, client caches and
//! BSP, SSP, ESSP and async consistency, in one home that reads in order:
//!
//! 1. [`core`]: sans-I/O decision logic. A shard's clock table and consistency rules
//!    ([`PsShardCore`]), a worker's cache and oplog ([`ClientCore`]), server-side update
//!    rules ([`RuleRegistry`], [`UpdateRule`]), managed communication
//!    ([`BandwidthManager`]), the data-parallel LDA sampler ([`core::lda`]), and the types
//!    they share ([`TableSpec`], [`Row`], [`Consistency`], [`ConsistencyModel`]). No actix,
//!    no tokio (`.ci/check-cores` checks it). The conventions (what a clock is, what SSP
//!    guarantees) are written once, in [`core`].
//! 2. [`shells`]: the actors around the cores. [`ServerShard`] hosts one shard;
//!    [`PsClient`] is what a worker's code calls (`get`, `inc`, `clock`, `barrier`);
//!    [`TablesBuilder`] and [`PsLayout`] say what a job is made of and where it runs.
//! 3. [`kit`]: a new app is one [`PsApp`] impl (tables and rules, the worker's step per
//!    clock, the monitor's evaluation and stop rule, outputs); the kit gives it shard,
//!    worker and monitor roles ([`register`], [`register_builtin`]), a job ([`PsJob`]) and
//!    an in-process runner ([`run_local`], [`train`]). `examples/ps_custom.rs` is a whole
//!    app in one file.
//! 4. [`apps`]: the built-in apps, each a [`PsApp`]: [`PsMf`] (matrix factorization),
//!    [`PsLr`] (logistic regression) and [`PsLda`] (data-parallel LDA).
//!
//! # A read and a write
//!
//! - Read: `get(row)` is served from the client's cache when the cached row is fresh
//!   enough for the table's consistency model (under SSP(s), a row clock of at least
//!   `c - s` at the worker's clock `c`); otherwise the client sends one read request per
//!   shard and waits for the reply, which the shard holds until its min clock allows it.
//!   `prefetch_next_clock` sends the next clock's reads during the current one.
//! - Write: `inc` / `batch_inc` go into the client's coalescing oplog and its cache;
//!   `clock()` flushes the oplog as one batch per shard. The shard applies the batch with
//!   the table's update rule and advances that worker's clock; when its min clock moves it
//!   releases held reads and (ESSP) pushes the changed rows the workers subscribed to.
//! - Order: all data between a client and a shard travels at one priority, so it stays on
//!   one FIFO lane of the transport; read-my-writes relies on that order. A worker that
//!   finishes sends a leave message, which takes it out of every shard's min clock.
//! - Copies: rows are reference-counted and copied on write, so a shard's stored row, the
//!   replies that carry it and a client's cached row share one buffer until written.
//!
//! [`checkpoint`] persists shard state with the runtime's durable files. Every fallible
//! call of the shells, the kit and the apps returns [`PsError`], which wraps the cores'
//! [`PsCoreError`] with its source chain.
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
