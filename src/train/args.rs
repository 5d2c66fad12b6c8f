//! The command-line arguments `petrel train` shares across apps: transport, cluster size,
//! membership (standby workers and scale plan) and the STRADS job arguments.

use super::{TrainApp, apps, prepare_job};
use crate::CliError;
use petrel_actors::{JobTransport, MembershipArgs, OnNodeDeath};
use petrel_strads::apps::lasso::LassoSettings;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// How `petrel train` runs a STRADS job: no cluster, or nodes as threads or processes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrainTransport {
    /// No cluster: the one-thread baseline, or the serial driver (MF, LDA).
    None,
    /// Nodes are threads of this process, connected by in-memory channels.
    Memory,
    /// Nodes are threads of this process, connected by QUIC on 127.0.0.1.
    #[default]
    Quic,
    /// One process per node, connected by QUIC on 127.0.0.1.
    Processes,
}

impl TrainTransport {
    /// The cluster's transport, or `None` for a run without a cluster.
    pub fn cluster(self) -> Option<JobTransport> {
        match self {
            TrainTransport::None => None,
            TrainTransport::Memory => Some(JobTransport::Memory),
            TrainTransport::Quic => Some(JobTransport::Quic),
            TrainTransport::Processes => Some(JobTransport::Processes),
        }
    }
}

/// The flags every `petrel train` STRADS command shares besides its job's own.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// A job file whose `[app.<section>]` holds the settings (the file `petrel run`
    /// reads); `PETREL_APP__<SECTION>__<KEY>` variables override it, flags override both.
    #[arg(long = "config", value_name = "JOB.toml")]
    pub job_file: Option<PathBuf>,
    /// Print the resolved job (`[app.<section>]`, every value checked) and exit.
    #[arg(long)]
    pub print_job: bool,
    /// Output directory (created; or `out` in the job file).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Worker nodes (the serial driver's worker halves with `--transport none`).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// How the job runs: no cluster (none), nodes as threads of this process (memory,
    /// quic) or as processes. A Lasso or logistic job of at most 10^7 non-zeros runs with
    /// none unless this, --workers or --dashboard is given.
    #[arg(long, value_enum, default_value_t = TrainTransport::Quic)]
    pub transport: TrainTransport,
    /// Restart the cluster this many times when a node dies, from the newest complete
    /// checkpoint if any (0 = stop at the first failure; a role's own error is final).
    #[arg(long, default_value_t = 2)]
    pub max_restarts: u32,
    /// Standby workers and the scale plan: only `train lasso|logistic --solver scheduled
    /// --balance dynamic` and `train strads-mf|lda --balance dynamic` (no shards).
    #[command(flatten)]
    pub membership: MembershipArgs,
    /// What a node's death does (`[cluster] on_node_death`): `fail` stops the job; `leave`
    /// takes a dead worker as having left, and the others take its rows. Like
    /// --standby-workers, only for a job that takes joins and leaves.
    #[arg(long, value_enum, default_value_t = OnNodeDeath::Fail)]
    pub on_node_death: OnNodeDeath,
}

/// The changes of a job's members while it runs: standby nodes, the scale plan and what a
/// node's death does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Membership {
    /// Standby workers and shards and `[cluster] scale`.
    pub plan: MembershipArgs,
    /// `[cluster] on_node_death`.
    pub on_node_death: OnNodeDeath,
}

impl Membership {
    /// The membership `c` asks for for app `A`'s `job`: refused unless the job takes joins
    /// and leaves and runs on a cluster.
    pub(super) fn of<A: apps::StradsTrainApp>(
        c: &ClusterArgs,
        job: &A::Job,
        transport: Option<JobTransport>,
    ) -> Result<Self, CliError> {
        let m = Membership {
            plan: c.membership.clone(),
            on_node_death: c.on_node_death,
        };
        if m == Membership::default() {
            return Ok(m);
        }
        if m.plan.standby_shards > 0 {
            return Err(CliError::Usage(format!(
                "--standby-shards: {} has no shard nodes (standby shards are for ps-mf, ps-lr, ps-lda and p3)",
                A::NAME
            )));
        }
        if transport.is_none() || !A::elastic(job) {
            return Err(CliError::Usage(format!(
                "--standby-workers, --scale and --on-node-death leave: {} keeps a fixed membership here (joins and leaves need `train lasso|logistic --solver scheduled --balance dynamic` or `train strads-mf|lda --balance dynamic` on a cluster)",
                A::NAME
            )));
        }
        if m.on_node_death == OnNodeDeath::Leave && !A::takes_deaths(job) {
            return Err(CliError::Usage(format!(
                "--on-node-death leave: {} takes joins and leaves, not deaths (a dead worker's part of the model is lost with it)",
                A::NAME
            )));
        }
        Ok(m)
    }
}

impl ClusterArgs {
    /// The settings of app `A` ([`prepare_job`]) with these flags.
    pub(super) fn prepare<A: TrainApp>(
        &self,
        flags: &A::Job,
        given: &BTreeSet<String>,
    ) -> Result<A::Job, CliError> {
        let (file, out) = (self.job_file.as_deref(), self.out.as_deref());
        prepare_job::<A>(flags, file, out, given, self.workers)
    }
}

/// `petrel train lasso` and `petrel train logistic`: the [`LassoSettings`] flags plus these.
#[derive(clap::Args, Debug, Clone)]
pub struct LassoTrainArgs {
    /// Output, workers and transport.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Disable the dependency check.
    #[arg(long)]
    pub no_filter: bool,
    /// Run every scheduler on one node (default: one node per scheduler).
    #[arg(long)]
    pub colocate_schedulers: bool,
    /// The job.
    #[command(flatten)]
    pub job: LassoSettings,
}

/// `petrel train strads-mf | lda`: the settings' flags plus output, workers and transport.
#[derive(clap::Args, Debug, Clone)]
pub struct StradsTrainArgs<J: clap::Args> {
    /// Output, workers and transport.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The job.
    #[command(flatten)]
    pub job: J,
}
