//! `petrel train APP`: one job schema per app ([`jobfile`]), every value and the data
//! checked first ([`apps::prepare_job`]), then the app on a localhost cluster (threads or
//! processes) or, with `--transport none`, in this thread.

pub mod apps;
mod args;
pub mod jobfile;
pub mod p3;
#[cfg(feature = "plot")]
pub mod plot;
pub mod progress;
mod ps;
pub mod saved;

use crate::CliError;
use crate::launcher::{LaunchMode, NodePeak};
use petrel_actors::{JobTransport, Settings, Topology};
use petrel_ml::job::InvalidSetting;
use petrel_strads::StradsJob;
use petrel_strads::apps::lasso::{LassoApp, LassoMetrics, LassoSettings, multi};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use apps::{TrainApp, prepare_job};
pub use args::{ClusterArgs, LassoTrainArgs, Membership, StradsTrainArgs, TrainTransport};
pub use ps::{run_ps, train_ps};

/// `path`, created, as an absolute path (child processes run elsewhere).
fn absolute_dir(p: &Path) -> Result<PathBuf, CliError> {
    std::fs::create_dir_all(p).map_err(CliError::io(p))?;
    std::fs::canonicalize(p).map_err(CliError::io(p))
}

/// `job` as an `[app.*]` section: its JSON form without `null`s (TOML has none).
pub fn section_value<J: serde::Serialize>(job: &J) -> Result<serde_json::Value, CliError> {
    fn strip_nulls(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.into_iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k, strip_nulls(v)))
                    .collect(),
            ),
            other => other,
        }
    }
    let json = serde_json::to_value(job).map_err(CliError::json(Path::new("")))?;
    Ok(strip_nulls(json))
}

/// A star cluster of job `J`: the scheduler nodes, then workers `w0..`; a latency-bound job
/// runs each node's transport on the node's own thread (`[net] threads = 0`).
pub fn star_settings_with<J>(
    job: &J::Config,
    scheduler_nodes: &[(String, Vec<String>)],
    workers: usize,
    transport: JobTransport,
    timeout_s: u64,
) -> Result<Settings, CliError>
where
    J: StradsJob,
    J::Config: serde::Serialize,
{
    let fixed = Membership::default();
    star_settings_membership::<J>(job, scheduler_nodes, workers, transport, timeout_s, &fixed)
}

/// [`star_settings_with`] plus `membership`'s standby workers (named after the others)
/// and scale plan.
pub fn star_settings_membership<J>(
    job: &J::Config,
    scheduler_nodes: &[(String, Vec<String>)],
    workers: usize,
    transport: JobTransport,
    timeout_s: u64,
    membership: &Membership,
) -> Result<Settings, CliError>
where
    J: StradsJob,
    J::Config: serde::Serialize,
{
    if workers == 0 {
        return Err(CliError::NoWorkers);
    }
    let mut topo = Topology::builder(&format!("strads-{}", J::SECTION))
        .transport(transport.cluster_transport());
    for (name, roles) in scheduler_nodes {
        let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
        topo = topo.node(name, &roles);
    }
    for w in 0..workers {
        topo = topo.node(&format!("w{w}"), &[J::WORKER_ROLE]);
    }
    for w in workers..workers + membership.plan.standby_workers {
        topo = topo.standby_node(&format!("w{w}"), &[J::WORKER_ROLE]);
    }
    let value = section_value(job)?;
    Ok(topo
        .with(|s| {
            s.cluster.scale.clone_from(&membership.plan.scale);
            s.cluster.on_node_death = membership.on_node_death;
            s.app.insert(J::SECTION.into(), value);
            s.cluster.request_timeout_ms = timeout_s.max(1) * 1000;
            // A 2 s silence on a loaded machine is not a failure.
            s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
            if J::latency_bound(job) {
                s.net.threads = 0;
            }
        })
        .build()?)
}

/// The file in a `--transport processes` run directory with every node's [`NodePeak`].
pub const NODE_MEMORY_FILE: &str = "node_memory.json";

/// A STRADS job's node memory against what a worker holds, MB (peaks need processes).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct NodeMemory {
    /// The largest peak resident memory of a worker node.
    pub worker_rss_mb: Option<f64>,
    /// The largest [`NodePeak::private_mb`] of a worker node.
    pub worker_private_mb: Option<f64>,
    /// The scheduler node's peak resident memory.
    pub scheduler_rss_mb: Option<f64>,
    /// What one worker holds (each bench's own estimate).
    pub worker_holds_mb: f64,
    /// `worker_rss_mb / worker_holds_mb`.
    pub worker_rss_over_holds: Option<f64>,
    /// `worker_private_mb / worker_holds_mb`.
    pub worker_private_over_holds: Option<f64>,
    /// The largest [`NodePeak::heap_mb`] of a worker node.
    pub worker_heap_mb: Option<f64>,
    /// `worker_heap_mb / worker_holds_mb` (the target's figure).
    pub worker_heap_over_holds: Option<f64>,
}

impl NodeMemory {
    /// What a job with output directory `out_dir` left, against `worker_holds_mb`.
    pub fn of_run(out_dir: Option<&Path>, transport: JobTransport, worker_holds_mb: f64) -> Self {
        let file = out_dir.map(|dir| dir.join("run").join(NODE_MEMORY_FILE));
        let nodes: BTreeMap<String, NodePeak> = file
            .filter(|_| transport == JobTransport::Processes)
            .and_then(|f| serde_json::from_slice(&std::fs::read(f).ok()?).ok())
            .unwrap_or_default();
        let workers = || {
            nodes
                .iter()
                .filter(|(name, _)| name.as_str() != "scheduler")
                .map(|(_, peak)| peak)
        };
        let worker_rss_mb = workers().map(|p| p.rss_mb).reduce(f64::max);
        let worker_private_mb = workers().filter_map(|p| p.private_mb).reduce(f64::max);
        let worker_heap_mb = workers().filter_map(|p| p.heap_mb).reduce(f64::max);
        NodeMemory {
            worker_rss_mb,
            worker_private_mb,
            scheduler_rss_mb: nodes.get("scheduler").map(|p| p.rss_mb),
            worker_holds_mb,
            worker_rss_over_holds: worker_rss_mb.map(|r| r / worker_holds_mb),
            worker_private_over_holds: worker_private_mb.map(|r| r / worker_holds_mb),
            worker_heap_mb,
            worker_heap_over_holds: worker_heap_mb.map(|h| h / worker_holds_mb),
        }
    }
}

/// Runs a cluster as threads or as processes (run files and [`NODE_MEMORY_FILE`] in `run_dir`).
pub fn run_cluster(
    settings: Settings,
    transport: JobTransport,
    run_dir: &Path,
) -> Result<(), CliError> {
    let cluster = crate::roles::builtin(settings);
    if transport != JobTransport::Processes {
        return Ok(cluster.run_in_process()?);
    }
    let mut opts = crate::launcher::LaunchOptions::new()?;
    opts.run_dir = Some(run_dir.to_path_buf());
    let launched = crate::launcher::launch_with(&cluster, LaunchMode::Processes, opts)?;
    let peaks = launched.report.map(|r| r.peaks).unwrap_or_default();
    let path = run_dir.join(NODE_MEMORY_FILE);
    let json = serde_json::to_vec_pretty(&peaks).map_err(CliError::json(&path))?;
    std::fs::write(&path, json).map_err(CliError::io(&path))
}

/// A Lasso job's scheduler nodes: `scheduler` (all when `colocate`), `scheduler-<s>`.
pub fn lasso_scheduler_nodes(schedulers: usize, colocate: bool) -> Vec<(String, Vec<String>)> {
    let roles = |r: std::ops::Range<usize>| r.map(multi::scheduler_role_name).collect();
    if colocate {
        vec![("scheduler".into(), roles(0..schedulers.max(1)))]
    } else {
        std::iter::once(("scheduler".to_string(), roles(0..1)))
            .chain((1..schedulers).map(|s| (format!("scheduler-{s}"), roles(s..s + 1))))
            .collect()
    }
}

/// A cluster for a Lasso job, its schedulers colocated on one node or not.
pub fn lasso_settings(
    job: &LassoSettings,
    workers: usize,
    transport: JobTransport,
    colocate: bool,
) -> Result<Settings, CliError> {
    star_settings_with::<LassoApp>(
        job,
        &lasso_scheduler_nodes(job.schedulers, colocate),
        workers,
        transport,
        job.timeout_s,
    )
}

/// Runs job `A` on `scheduler_nodes` and `workers` workers; reads its `metrics.json`.
fn run_star_job<A: apps::StradsTrainApp>(
    mut job: A::Job,
    scheduler_nodes: &[(String, Vec<String>)],
    workers: usize,
    transport: JobTransport,
    membership: &Membership,
) -> Result<A::Metrics, CliError>
where
    A::Job: serde::Serialize,
{
    let out = A::out(&mut job).clone().ok_or(CliError::NoOutputDir)?;
    let timeout_s = A::timeout_s(&job);
    let settings = star_settings_membership::<A>(
        &job,
        scheduler_nodes,
        workers,
        transport,
        timeout_s,
        membership,
    )?;
    run_cluster(settings, transport, &out.join("run"))?;
    read_json(&out.join("metrics.json"))
}

/// Runs a Lasso job on a cluster and returns the metrics the scheduler wrote.
pub fn run_lasso_job(
    job: &LassoSettings,
    workers: usize,
    transport: JobTransport,
    colocate: bool,
) -> Result<LassoMetrics, CliError> {
    let nodes = lasso_scheduler_nodes(job.schedulers, colocate);
    let fixed = Membership::default();
    run_star_job::<LassoApp>(job.clone(), &nodes, workers, transport, &fixed)
}

/// Runs job `A` on its scheduler nodes and `workers` workers; returns its metrics.
pub fn run_job<A: apps::StradsTrainApp>(
    job: &A::Config,
    workers: usize,
    transport: JobTransport,
) -> Result<A::Metrics, CliError>
where
    A::Config: serde::Serialize,
{
    run_job_with::<A>(job, workers, transport, &Membership::default())
}

/// [`run_job`] with workers that join and leave as `membership` says.
pub fn run_job_with<A: apps::StradsTrainApp>(
    job: &A::Config,
    workers: usize,
    transport: JobTransport,
    membership: &Membership,
) -> Result<A::Metrics, CliError>
where
    A::Config: serde::Serialize,
{
    let nodes = A::scheduler_nodes(job, false);
    run_star_job::<A>(job.clone(), &nodes, workers, transport, membership)
}

/// Why a finished run stopped, from its `metrics.json`, and its held-out figures.
pub fn stop_line(out: Option<&Path>) -> Result<String, CliError> {
    let Some(dir) = out else {
        return Ok(String::new());
    };
    let m: petrel_ml::job::RunMetrics = read_json(&dir.join("metrics.json"))?;
    let mut line = if !m.converged && m.stop_reason.contains("before") {
        format!("{}: did not converge: {}", m.app, m.stop_reason)
    } else {
        format!("{}: {}", m.app, m.stop_reason)
    };
    let heldout: Vec<String> = m
        .final_figures
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("heldout_")?;
            Some(format!("{name} {}", saved::short_figure(*v)))
        })
        .collect();
    if !heldout.is_empty() {
        let file = m
            .settings
            .get("test_data")
            .and_then(|v| v.as_str())
            .unwrap_or("-");
        line.push_str(&format!("\nheld-out ({file}): {}", heldout.join(", ")));
    }
    Ok(line)
}

/// Reads a JSON file (the metrics a job wrote).
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CliError> {
    let bytes = std::fs::read(path).map_err(CliError::io(path))?;
    serde_json::from_slice(&bytes).map_err(CliError::json(path))
}

/// The settings of `petrel train lasso|logistic` ([`prepare_job`]), with `--no-filter`.
fn lasso_job_of<A: TrainApp<Job = LassoSettings>>(
    args: &LassoTrainArgs,
    given: &BTreeSet<String>,
) -> Result<LassoSettings, CliError> {
    let mut job = args.cluster.prepare::<A>(&args.job, given)?;
    if let Some(dir) = &job.checkpoint_dir {
        job.checkpoint_dir = Some(absolute_dir(dir)?);
    }
    if args.no_filter {
        job.rho = None;
        // rho is scheduled-only: `auto` now resolves differently, so check again.
        A::validate(&job).map_err(apps::invalid::<A>)?;
    }
    Ok(job)
}

/// `job` as a job file: `[app.<section>]` with every value.
pub fn job_toml<J: serde::Serialize>(section: &str, job: &J) -> Result<String, CliError> {
    let value = toml::Value::try_from(section_value(job)?).map_err(CliError::Encode)?;
    let app = toml::Table::from_iter([(section.to_string(), value)]);
    let top = toml::Table::from_iter([("app".to_string(), toml::Value::Table(app))]);
    toml::to_string(&top).map_err(CliError::Encode)
}

/// With `--print-job`, prints the job and says so (the caller then stops).
fn printed<J: serde::Serialize>(print: bool, section: &str, job: &J) -> Result<bool, CliError> {
    if print {
        print!("{}", job_toml(section, job)?);
    }
    Ok(print)
}

/// `petrel train lasso` and `petrel train logistic` (the Lasso options).
pub fn train_lasso<A: apps::StradsTrainApp<Job = LassoSettings>>(
    args: LassoTrainArgs,
    given: &BTreeSet<String>,
) -> Result<(), CliError> {
    if args.colocate_schedulers && A::NAME != <LassoApp as TrainApp>::NAME {
        let why = "applies to lasso only";
        return Err(apps::invalid::<A>(InvalidSetting::new(
            "colocate_schedulers",
            true,
            why,
        )));
    }
    let job = lasso_job_of::<A>(&args, given)?;
    let mut cluster = args.cluster.clone();
    if !args.colocate_schedulers
        && !args.no_filter
        && let Some(nonzeros) = small_problem(&job, given)?
    {
        cluster.transport = TrainTransport::None;
        println!(
            "small problem ({nonzeros} non-zeros, at most {SMALL_PROBLEM_NONZEROS}): solving in \
             this process, no cluster (--transport quic runs one)"
        );
    }
    train_prepared::<A>(job, &cluster, args.colocate_schedulers)
}

/// Up to this many non-zeros one core solves a linear model sooner than a cluster starts.
pub const SMALL_PROBLEM_NONZEROS: u64 = 10_000_000;

/// The design's non-zeros when a one-scheduler Gauss-Seidel job without checkpoints of at most
/// [`SMALL_PROBLEM_NONZEROS`] asked for no transport, workers or dashboard; `None` runs a cluster.
fn small_problem(job: &LassoSettings, given: &BTreeSet<String>) -> Result<Option<u64>, CliError> {
    use petrel_strads::apps::lasso::LassoSolver;
    let insisted = [
        "transport",
        "workers",
        "dashboard",
        "standby_workers",
        "scale",
        "on_node_death",
    ]
    .iter()
    .any(|flag| given.contains(*flag));
    let serial_solves_it = job.schedulers <= 1
        && job.checkpoint_dir.is_none()
        && !job.resume
        && job.resolved_solver() == LassoSolver::GaussSeidel;
    if insisted || !serial_solves_it {
        return Ok(None);
    }
    let nonzeros = match &job.data {
        Some(path) => libsvm_nonzeros(path, SMALL_PROBLEM_NONZEROS)?,
        None => {
            let s = &job.synthetic;
            let per_column = match s.nnz_per_column {
                0 => s.n_samples as u64,
                k => k as u64,
            };
            s.n_features as u64 * per_column
        }
    };
    Ok((nonzeros <= SMALL_PROBLEM_NONZEROS).then_some(nonzeros))
}

/// The `index:value` pairs of a LIBSVM file, counted up to just past `limit`.
fn libsvm_nonzeros(path: &Path, limit: u64) -> Result<u64, CliError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(CliError::io(path))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut pairs = 0u64;
    while pairs <= limit {
        let n = file.read(&mut buf).map_err(CliError::io(path))?;
        if n == 0 {
            break;
        }
        pairs += buf[..n].iter().filter(|&&b| b == b':').count() as u64;
    }
    Ok(pairs)
}

/// A job's checkpoint directory: its own, else `<out>/checkpoints` (cleared by a fresh run).
fn default_checkpoint_dir(
    dir: &mut Option<PathBuf>,
    resume: bool,
    out: &Path,
) -> Result<Option<PathBuf>, CliError> {
    if dir.is_none() {
        let default = absolute_dir(out)?.join("checkpoints");
        if !resume && default.exists() {
            std::fs::remove_dir_all(&default).map_err(CliError::io(&default))?;
        }
        *dir = Some(default);
    }
    Ok(dir.clone())
}

/// `petrel train strads-mf | lda`: [`prepare_job`], then [`train_prepared`].
pub fn train_strads<A: apps::StradsTrainApp>(
    args: StradsTrainArgs<A::Job>,
    given: &BTreeSet<String>,
) -> Result<(), CliError> {
    let job = args.cluster.prepare::<A>(&args.job, given)?;
    train_prepared::<A>(job, &args.cluster, false)
}

/// Runs a STRADS app's prepared settings on a cluster with restarts (or in this thread, or
/// prints them with `--print-job`); then prints the summary and why it stopped.
pub fn train_prepared<A: apps::StradsTrainApp>(
    mut job: A::Job,
    c: &ClusterArgs,
    colocate: bool,
) -> Result<(), CliError> {
    if printed(c.print_job, <A as TrainApp>::SECTION, &job)? {
        return Ok(());
    }
    let transport = c.transport.cluster();
    A::check_run(&job, transport)?;
    let membership = Membership::of::<A>(c, &job, transport)?;
    // Always set by [`prepare_job`].
    let out = A::out(&mut job).clone().unwrap_or_default();
    let progress = progress::TrainProgress::start(A::NAME, A::progress_points(&job));
    let m: A::Metrics = match transport {
        Some(transport) => {
            let checkpoints = match A::checkpoints(&mut job) {
                Some((dir, resume)) => {
                    if let Some(dir) = dir.as_ref().filter(|_| *resume) {
                        // Fail now, not after the cluster's failure timeout.
                        petrel_strads::shells::checkpoint::require_checkpoint(dir)?;
                    }
                    default_checkpoint_dir(dir, *resume, &out)?
                }
                None => None,
            };
            let nodes = A::scheduler_nodes(&job, colocate);
            // Deterministic apps end with the model of an uninterrupted run either way.
            crate::recovery::restart_job(
                A::NAME,
                c.max_restarts,
                CliError::is_node_death,
                || {
                    let scheme = petrel_strads::core::checkpoint::SCHEME;
                    crate::recovery::round_resume_point(checkpoints.as_deref()?, scheme)
                },
                |restarts, source| CliError::Restarts {
                    restarts,
                    source: Box::new(source),
                },
                |resume, attempt| {
                    let mut job = job.clone();
                    if let Some((_, resumes)) = A::checkpoints(&mut job) {
                        *resumes |= resume;
                    }
                    A::next_attempt(&mut job, attempt);
                    run_star_job::<A>(job, &nodes, c.workers, transport, &membership)
                },
            )?
        }
        None => A::run_in_thread(&job, c.workers)?,
    };
    drop(progress);
    println!("{}", A::summary(&job, &m, &out.display().to_string()));
    println!("{}", stop_line(Some(&out))?);
    Ok(())
}

#[cfg(test)]
mod tests;
