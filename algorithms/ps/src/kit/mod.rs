//! The parameter-server kit: a new app is one [`PsApp`] impl; the kit supplies the rest.
//!
//! * roles: `shard` (this node's shards), `worker` (one [`PsClient`](crate::shells::PsClient)
//!   per worker on the node, the clock loop, the final report) and `monitor` (report inbox,
//!   evaluation, stop requests), named by [`PsRoles`] and registered by [`register`] or
//!   [`register_builtin`] (the job built from `[app.<section>]`, for `petrel node`);
//! * [`PsJob`]: the app plus its [`PsLayout`](crate::shells::PsLayout);
//! * [`EvalMonitor`]: the curve, stop rule and checkpointed history of apps that evaluate
//!   the tables every few clocks (ps-mf, ps-lr); [`write_run`] writes their files;
//! * [`settings`]: the setting groups more than one app has;
//! * [`run_local`] / [`run_local_with`] run every node as a thread; [`train`] is
//!   `petrel train <app>`.
//!
//! A worker loops `step` -> `clock()` or `barrier()` -> yield until asked to stop, then
//! `leave()`s and sends [`PsApp::finish_worker`]'s report. The monitor drains reports,
//! calls `observe` (a stop reason is sent to every worker), and once every worker sent its
//! final report calls `finish` and `write_outputs`.

mod app;
pub mod checkpoints;
mod eval;
mod job;
mod local;
mod monitor;
mod reshard;
pub mod settings;
mod values;
mod worker;

pub(crate) use crate::checkpoint::encode;
pub use app::{MonitorState, PsApp, PsRoles, PsStep};
pub use checkpoints::{PsCheckpointing, PsSaved};
pub use eval::{EvalMonitor, EvalPoint, Tables, pad_to, write_run};
pub(crate) use eval::{decode, finish, to_json};
pub use job::{PsJob, check_membership, register, register_builtin};
pub use local::{
    PsTrainArgs, local_topology, local_topology_with, run_local, run_local_with, train,
};
pub use monitor::{MonitorCtx, MonitorReports, WorkerChange, WorkerDone, open_monitor};
pub use worker::WorkerCtx;
