//! In-process runs: every node a thread of this process, and `petrel train <app>`.

use std::sync::Arc;

use petrel_actors::{Cluster, JobTransport, MembershipArgs, Settings, Topology, Transport};

use crate::error::PsError;
use crate::kit::{PsApp, PsJob, PsRoles, register};

/// The in-process layout: nodes `shard-0..` (the first also the monitor) and `worker-0..`.
pub fn local_topology(name: &str, shards: usize, workers: usize, transport: Transport) -> Topology {
    local_topology_with(PsRoles::GENERIC, name, shards, workers, transport)
}

/// [`local_topology`] with the nodes carrying `roles`.
pub fn local_topology_with(
    roles: PsRoles,
    name: &str,
    shards: usize,
    workers: usize,
    transport: Transport,
) -> Topology {
    let mut topo = Topology::builder(name).transport(transport);
    for s in 0..shards.max(1) {
        let on: &[&str] = if s == 0 {
            &[roles.shard, roles.monitor]
        } else {
            &[roles.shard]
        };
        topo = topo.node(&format!("shard-{s}"), on);
    }
    for w in 0..workers.max(1) {
        topo = topo.node(&format!("worker-{w}"), &[roles.worker]);
    }
    topo
}

/// Runs app `A` on an in-process cluster ([`local_topology`]) and returns its output.
pub fn run_local<A: PsApp>(
    cfg: A::Config,
    shards: usize,
    workers: usize,
    transport: Transport,
) -> Result<A::Output, PsError> {
    run_local_with::<A>(cfg, shards, workers, transport, |_| {})
}

/// [`run_local`] with a hook to adjust the cluster settings (timeouts, network shaping).
pub fn run_local_with<A: PsApp>(
    cfg: A::Config,
    shards: usize,
    workers: usize,
    transport: Transport,
    tweak: impl FnOnce(&mut Settings),
) -> Result<A::Output, PsError> {
    let settings = local_topology(A::NAME, shards, workers, transport)
        .with(|s| {
            A::tune_local(s);
            tweak(s);
        })
        .build()?;
    run_settings::<A>(settings, cfg)
}

/// Runs app `A` on an in-process cluster of `settings` (generic roles).
fn run_settings<A: PsApp>(settings: Settings, cfg: A::Config) -> Result<A::Output, PsError> {
    let job = Arc::new(PsJob::<A>::new(&settings, cfg, PsRoles::GENERIC)?);
    register(Cluster::new(settings), job.clone()).run_in_process()?;
    job.take_result()
}

/// `petrel train <app>`: the app's settings as flags, plus where the run happens.
#[derive(clap::Args, Debug, Clone)]
pub struct PsTrainArgs<C: clap::Args> {
    /// A job file whose `[app.<section>]` holds the settings (the file `petrel run`
    /// reads); `PETREL_APP__<SECTION>__<KEY>` variables override it, flags override both.
    #[arg(long = "config", value_name = "JOB.toml")]
    pub job_file: Option<std::path::PathBuf>,
    /// Print the resolved job (`[app.<section>]`, every value checked) and exit.
    #[arg(long)]
    pub print_job: bool,
    /// The app's settings (the same struct as its `[app.*]` section).
    #[command(flatten)]
    pub config: C,
    /// Worker nodes.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Shard nodes (the first also runs the monitor).
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// How the nodes run: threads of this process connected by QUIC on 127.0.0.1 (quic) or
    /// by channels (memory), or one process per node (processes; launched by the `petrel`
    /// CLI, which restarts a node that dies).
    #[arg(long, value_enum, default_value_t = JobTransport::Quic)]
    pub transport: JobTransport,
    /// Restart the cluster this many times when a node dies (killed, crashed, silent): from
    /// the newest complete checkpoint when there is one, else from the start (0 = stop at
    /// the first failure). A role's own error (bad input, bad setting) is never retried.
    #[arg(long, default_value_t = 2)]
    pub max_restarts: u32,
    /// Seconds a row read may wait for slower workers (default: 300 for ps-lda, whose
    /// clocks on a large corpus are long; the cluster default otherwise).
    #[arg(long)]
    pub request_timeout_s: Option<u64>,
    /// Standby workers and shards and the scale plan (workers with `--checkpoint-every 0`;
    /// shards with `--checkpoint-every 0` and no standby workers).
    #[command(flatten)]
    pub membership: MembershipArgs,
}

impl<C: clap::Args> PsTrainArgs<C> {
    /// The cluster of `petrel train <app>` ([`local_topology_with`] with `roles`), its
    /// standby workers `worker-<workers>..`, standby shards `shard-<shards>..` and scale
    /// plan.
    pub fn topology(&self, roles: PsRoles, name: &str, transport: Transport) -> Topology {
        let mut topo = local_topology_with(roles, name, self.shards, self.workers, transport);
        let first = self.workers.max(1);
        for w in first..first + self.membership.standby_workers {
            topo = topo.standby_node(&format!("worker-{w}"), &[roles.worker]);
        }
        let first = self.shards.max(1);
        for s in first..first + self.membership.standby_shards {
            topo = topo.standby_node(&format!("shard-{s}"), &[roles.shard]);
        }
        let scale = self.membership.scale.clone();
        topo.with(move |s| s.cluster.scale = scale)
    }
}

/// Runs `petrel train <app>` on an in-process cluster; returns the summary line to print.
pub fn train<A: PsApp>(args: PsTrainArgs<A::Config>) -> Result<String, PsError> {
    let timeout_s = args.request_timeout_s.or(A::TRAIN_REQUEST_TIMEOUT_S);
    let cfg = args.config.clone();
    if matches!(args.transport, JobTransport::Processes) {
        return Err(PsError::InvalidConfig {
            app: A::NAME,
            reason: "--transport processes is launched by the petrel CLI (petrel train)".into(),
        });
    }
    let transport = args.transport.cluster_transport();
    let settings = (args.topology(PsRoles::GENERIC, A::NAME, transport))
        .with(|s| {
            A::tune_local(s);
            if let Some(t) = timeout_s {
                s.cluster.request_timeout_ms = t.max(1).saturating_mul(1000);
            }
        })
        .build()?;
    let out = run_settings::<A>(settings, args.config)?;
    Ok(A::summary(&cfg, &out))
}
