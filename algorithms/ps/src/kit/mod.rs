//! The parameter-server kit: a new app is one [`PsApp`] impl; the kit supplies the rest.
//!
//! An app says what its tables are and which update rules they use, what a worker does in
//! one clock ([`PsApp::step`]), what the monitor evaluates and when it stops the workers
//! ([`PsApp::observe`]), and what it outputs ([`PsApp::finish`], [`PsApp::write_outputs`]).
//! The kit runs it:
//!
//! * roles: `shard` (serves this node's shards, [`serve_shards`]), `worker` (one
//!   [`PsClient`](crate::shells::PsClient) per worker on the node, the clock loop, the final
//!   report) and `monitor` (the report inbox, periodic evaluation, stop requests), named by a
//!   [`PsRoles`] and registered by [`register`] (a job built in code) or
//!   [`register_builtin`] (the job built from `[app.<section>]` on first use, for
//!   `petrel node`);
//! * jobs: a [`PsJob`] is the app plus its [`PsLayout`](crate::shells::PsLayout), found from
//!   the nodes' roles;
//! * evaluating monitors: [`EvalMonitor`] is the curve, the target/time stop rule and the
//!   checkpointed history of an app that evaluates the tables on a timer (ps-mf, ps-lr);
//!   [`write_run`] writes its model, history and metrics;
//! * settings: the groups more than one app has ([`settings`]: stragglers, managed
//!   communication, output and checkpoint files), flattened into each app's flags and table;
//! * local runs: [`run_local`] / [`run_local_with`] start every node as a thread of this
//!   process on [`local_topology`]; [`train`] is `petrel train <app>` ([`PsTrainArgs`]).
//!
//! The clock loop of a worker: `while` no stop was requested: `step` -> `clock()` or
//! `barrier()` as the step asks -> yield to the node's actors; then `leave()` and the final
//! report ([`PsApp::finish_worker`]), which the monitor counts ([`PsApp::is_final`]). The
//! monitor loop: drain new reports -> `observe` (which may return a stop reason, sent once
//! to every worker) -> stop when every worker sent its final report -> `finish` ->
//! `write_outputs`.

mod app;
pub mod checkpoints;
mod eval;
mod job;
mod local;
mod monitor;
pub mod settings;
mod values;
mod worker;

pub use app::{PsApp, PsRoles, PsStep};
pub use checkpoints::{PsCheckpointing, PsSaved};
pub use eval::{EvalMonitor, EvalPoint, Tables, pad_to, write_run};
pub(crate) use eval::{decode, encode, finish, to_json};
pub use job::{PsJob, register, register_builtin, serve_shards};
pub use local::{
    PsTrainArgs, local_topology, local_topology_with, run_local, run_local_with, train,
};
pub use monitor::{MonitorCtx, MonitorReports, WorkerDone, open_monitor};
pub use worker::WorkerCtx;
