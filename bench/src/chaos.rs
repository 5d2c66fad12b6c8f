// Over 600 lines: the fault schedule, the run loop, the strikes and the recovery checks of every fault share one place.
//! `petrel bench chaos`: multi-process jobs of every self-recovering app (`petrel train
//! lasso | logistic | strads-mf | lda | p3 | ps-mf | ps-lr`, with checkpoints and
//! `--max-restarts`) run again and again while a seeded schedule kills, pauses, attacks,
//! slows or (as root, nodes on emulated hosts) cuts the link of one random node per run,
//! or adds or drains a worker of the app's elastic job (`chaos/membership.rs`). Every run
//! must end with the model of an uninterrupted run (byte for byte; PS apps, which are not
//! deterministic, and elastic jobs, within a tolerance), leave no process behind and never
//! hang.

use super::BenchError;
use crate::common::name_of;
pub use apps::ChaosApp;
use apps::Outcome;
use hostile::{HostileMember, member_attacks};
use link_cut::{CutRecord, LinkCut, cut_link, link_cut_hosts, placement};
use petrel::netns::Hosts;
use petrel::report::{fmt, print_json};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `petrel bench chaos` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ChaosBenchArgs {
    /// Faulted runs (after one uninterrupted reference run of each app); run `i` runs
    /// the app `i mod len(apps)`.
    #[arg(long, default_value_t = 4)]
    pub runs: usize,
    /// The faults the schedule picks from: `kill` (SIGKILL), `pause` (SIGSTOP for
    /// `--pause-s`, then SIGCONT), `hostile` (the certificate of a member that sends the
    /// victim data opens five streams to the victim that each announce a 60 MiB frame and
    /// stall, held until the job ends, and connects again whenever it is refused),
    /// `link-cut` (the nodes on emulated hosts, the victim's link down for a while: needs
    /// root), `slow` (the victim runs at half speed until the job ends: stopped for 20 ms
    /// of every 40), `join` (a standby worker joins the app's elastic job) and `leave` (a
    /// worker of the elastic job gets SIGTERM: it drains and leaves).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "kill,pause,hostile"
    )]
    pub faults: Vec<Fault>,
    /// The apps the runs cycle through.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "lasso")]
    pub apps: Vec<ChaosApp>,
    /// Seed of the fault schedule (which fault, which node, when).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker processes (plus one STRADS scheduler, or two P3 shards).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Rounds of the Lasso job (the other apps' jobs have fixed sizes).
    #[arg(long, default_value_t = 3000)]
    pub max_rounds: u64,
    /// A run not finished after this long counts as a hang (and is killed).
    #[arg(long, default_value_t = 300)]
    pub run_timeout_s: u64,
    /// How long a paused node stays stopped (longer than the job's 10 s failure timeout,
    /// so the pause is detected as a death).
    #[arg(long, default_value_t = 12.0)]
    pub pause_s: f64,
    /// Keep the runs' directories here (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// What a run does to its victim.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// SIGKILL: the job must restart from its newest checkpoint.
    #[default]
    Kill,
    /// SIGSTOP past the failure timeout, then SIGCONT: detected as a death.
    Pause,
    /// Stalled 60 MiB frames from a member's certificate: the job must go on unharmed.
    Hostile,
    /// A member's own node goes bad (armed by `PETREL_CHAOS_HOSTILE_MEMBER`, struck by
    /// SIGUSR1): it stalls, trickles and floods frames; the job must finish.
    #[serde(rename = "hostile-member")]
    HostileMember,
    /// The victim's host link cut (nodes in network namespaces; needs root).
    #[serde(rename = "link-cut")]
    LinkCut,
    /// The victim slowed 2x for the rest of the job (SIGSTOP for half of every 40 ms, far
    /// under the failure timeout): the job must finish unharmed, without a restart.
    Slow,
    /// A standby worker joins the app's elastic job (`--scale "at=… add …"`).
    Join,
    /// SIGTERM to a worker of the app's elastic job: it drains and leaves.
    Leave,
}

/// What happened in one faulted run.
#[derive(Serialize, Default)]
struct RunRecord {
    app: String,
    fault: Fault,
    victim: String,
    impostor: Option<String>,
    injected: bool,
    finished: bool,
    identical: bool,
    within_tolerance: bool,
    restarts: u32,
    wall_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cut: Option<CutRecord>,
    /// Why this run did not run (a link cut without root).
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

impl RunRecord {
    fn of(planned: &Planned) -> RunRecord {
        RunRecord {
            app: planned.app.name(),
            fault: planned.fault,
            victim: planned.victim.clone(),
            impostor: planned.impostor.clone(),
            ..RunRecord::default()
        }
    }
}

#[derive(Serialize, Default)]
struct Figures {
    runs: usize,
    faults_injected: usize,
    jobs_completed: usize,
    outputs_identical: usize,
    /// PS runs within the app's tolerance of the reference (never counted as identical).
    outputs_within_tolerance: usize,
    max_recovery_s: f64,
    orphans: usize,
    hangs: usize,
    restarts: u32,
    /// Hostile connections tried, through the handshake, refused (stolen key), closed for
    /// stalling, and still held at the job's end (must be 0).
    hostile_attempts: usize,
    hostile_connections: usize,
    hostile_refused: usize,
    hostile_disconnected: usize,
    hostile_held: usize,
    /// Attacks armed hostile members logged, and those their victim disconnected.
    hostile_member_attacks: usize,
    hostile_member_disconnected: usize,
    per_run: Vec<RunRecord>,
    /// Wall time of each app's uninterrupted run.
    reference_s: BTreeMap<String, f64>,
    seed: u64,
    runs_skipped: usize,
    /// `netns <prefix>`, or why the link cuts were skipped.
    link_cuts: Option<String>,
    /// Link-cut namespaces left after the bench removed them (must be false).
    netns_left: bool,
}

/// The `petrel train` command of one run of `app`, writing into `out`.
fn train(
    app: ChaosApp,
    args: &ChaosBenchArgs,
    flags: &[String],
    out: &Path,
    max_restarts: u32,
    netns: Option<&str>,
    hostile_member: Option<(&str, &str)>,
) -> Result<Child, BenchError> {
    let mut cmd = Command::new(std::env::current_exe().map_err(BenchError::io("current exe"))?);
    if let Some((attacker, victim)) = hostile_member {
        cmd.env(
            petrel_actors::chaos::HOSTILE_MEMBER_ENV,
            format!("{attacker}>{victim}"),
        );
    }
    cmd.args(["train", &app.name()]);
    if app != ChaosApp::P3 {
        cmd.args(["--transport", "processes"]);
    }
    if let Some(prefix) = netns {
        cmd.args(["--netns", prefix]);
    }
    cmd.args(["--workers", &args.workers.to_string()])
        .args(flags)
        .args(["--max-restarts", &max_restarts.to_string()]);
    match app {
        // The run directory inside `out`, so the nodes' command lines name it.
        ChaosApp::P3 => cmd
            .arg("--out")
            .arg(out.join("model.safetensors"))
            .arg("--run-dir")
            .arg(out.join("run"))
            .arg("--checkpoint-dir")
            .arg(out.join("checkpoints")),
        _ => cmd.arg("--out").arg(out),
    };
    let log =
        std::fs::File::create(stdout_file(out)).map_err(BenchError::io("the run's stdout file"))?;
    let errors = std::fs::File::create(out.with_extension("stderr"))
        .map_err(BenchError::io("the run's stderr file"))?;
    // Warnings name refused and disconnected hostile members and their attacks.
    cmd.env(
        "RUST_LOG",
        "error,petrel_net::quic=warn,petrel_actors::chaos=warn",
    )
    .stdout(log)
    .stderr(errors)
    .spawn()
    .map_err(BenchError::io("spawn petrel train"))
}

/// Where a run's stdout goes (stderr beside it).
fn stdout_file(out: &Path) -> PathBuf {
    out.with_extension("stdout")
}

/// The restarts a finished job reports on its stdout (0 when it reports none).
fn restarts_reported(stdout: &str) -> u32 {
    stdout
        .lines()
        .filter_map(|l| {
            l.split_once(" finished after ")?
                .1
                .split_once(" restart")?
                .0
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Process ids of every process whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// The `petrel node --name <name>` process of the run in `out`.
fn node_pid(out: &Path, name: &str) -> Option<u32> {
    let needle = out.to_string_lossy().to_string();
    processes_mentioning(&needle).into_iter().find(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        args.iter().any(|a| *a == b"node")
            && args
                .windows(2)
                .any(|w| w[0] == b"--name" && w[1] == name.as_bytes())
    })
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we found in /proc; a process that already exited makes
    // it fail with ESRCH, which is fine.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Runs `pid` at half speed until `child` (the job) exits or `deadline`: stopped for 20 ms
/// of every 40, which halves its compute and delays its messages by at most 20 ms.
fn slow_down(pid: u32, child: &mut Child, deadline: Instant) -> Result<(), BenchError> {
    let half = Duration::from_millis(20);
    while Instant::now() < deadline && child.try_wait().map_err(BenchError::io("wait"))?.is_none() {
        signal(pid, libc::SIGSTOP);
        std::thread::sleep(half);
        signal(pid, libc::SIGCONT);
        std::thread::sleep(half);
    }
    Ok(())
}

/// Waits for `child` until `limit`; kills it and returns `None` when it did not exit.
fn wait_for(child: &mut Child, limit: Duration) -> Result<Option<bool>, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(BenchError::io("wait for petrel train"))?
        {
            return Ok(Some(status.success()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One faulted run of the seeded schedule.
#[derive(Debug, Clone, PartialEq)]
struct Planned {
    app: ChaosApp,
    fault: Fault,
    victim: String,
    impostor: Option<String>,
    /// How long after the first checkpoint the fault strikes.
    delay: Duration,
    cut: Option<LinkCut>,
}

/// The seeded schedule: run `i` hits a random node of app `i mod len(apps)` with a random
/// fault of `--faults`.
fn schedule(args: &ChaosBenchArgs) -> Vec<Planned> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut cuts = 0;
    (0..args.runs)
        .map(|run| {
            let fault = args.faults[rng.gen_range(0..args.faults.len())];
            let app = args.apps[run % args.apps.len()];
            let (victim, impostor) = if matches!(fault, Fault::Hostile | Fault::HostileMember) {
                let pairs = app.hostile_pairs(args.workers);
                let (victim, impostor) = pairs[rng.gen_range(0..pairs.len())].clone();
                (victim, Some(impostor))
            } else if fault == Fault::Join {
                (app.standby_worker(args.workers), None)
            } else if fault == Fault::Leave {
                let (workers, _) = app.roles(args.workers);
                (workers[rng.gen_range(0..workers.len())].clone(), None)
            } else {
                let nodes = app.nodes(args.workers);
                (nodes[rng.gen_range(0..nodes.len())].clone(), None)
            };
            let delay = Duration::from_millis(rng.gen_range(0..400));
            // Drawn only for link cuts, so the schedules of the other faults stay as they were.
            let cut = (fault == Fault::LinkCut).then(|| {
                cuts += 1;
                LinkCut::nth(cuts - 1, &mut rng)
            });
            Planned {
                app,
                fault,
                victim,
                impostor,
                delay,
                cut,
            }
        })
        .collect()
}

/// Runs the benchmark: prints one row per run and the JSON line.
pub fn run(args: ChaosBenchArgs) -> Result<(), BenchError> {
    let temp = tempfile::tempdir().map_err(BenchError::io("temporary directory"))?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&root).map_err(BenchError::io("bench directory"))?;
    let limit = Duration::from_secs(args.run_timeout_s);
    if args.apps.is_empty() || args.faults.is_empty() {
        return Err(BenchError::Incomplete(
            "--apps and --faults need at least one value each".into(),
        ));
    }
    let plan = schedule(&args);
    let references = reference_runs(&args, &plan, &root, limit)?;
    let reference_s = references.iter().map(|(a, (s, _))| (a.clone(), *s));
    let mut table = Vec::new();
    let mut figures = Figures {
        runs: args.runs,
        reference_s: reference_s.collect(),
        seed: args.seed,
        ..Figures::default()
    };
    let (hosts, link_cuts) = link_cut_hosts(&args, &plan)?;
    if let Some(why) = link_cuts
        .as_deref()
        .and_then(|l| l.strip_prefix("skipped: "))
    {
        eprintln!("link-cut faults skipped: {why}");
    }
    figures.link_cuts = link_cuts;
    for (run, planned) in plan.into_iter().enumerate() {
        let netns = placement(
            planned.cut.is_some(),
            hosts.as_ref().map(|t| &t.0),
            figures.link_cuts.as_deref(),
        );
        let netns = match planned.job_flags(&args, true) {
            Some(_) => netns,
            None => Err(format!("{} keeps a fixed membership", planned.app.name())),
        };
        match netns {
            Err(why) => skip_run(run, planned, why, &mut figures, &mut table),
            Ok(netns) => {
                let out = root.join(format!("run-{run}-{}", planned.app.name()));
                let ran = faulted_run(&args, &out, limit, &planned, netns, &mut figures)?;
                record_run(run, planned, ran, &references, &mut figures, &mut table);
            }
        }
    }
    let keys = "run app fault node finished identical restarts wall_s recovery_s orphans";
    crate::common::json_table(&table, keys).print();
    if let Some(hosts) = hosts {
        let set = hosts.0.clone();
        drop(hosts);
        figures.netns_left = set.any_left();
    }
    let references: Vec<String> = (references.iter())
        .map(|(app, (s, _))| format!("{app} {} s", fmt(*s)))
        .collect();
    println!(
        "uninterrupted reference runs: {}; recovery s = a faulted run's wall time minus its app's reference",
        references.join(", ")
    );
    Ok(print_json(&figures)?)
}

/// The table's rows, one per planned run.
type Rows = Vec<serde_json::Value>;

/// Each app's uninterrupted reference run, by app name: its wall seconds and its model.
type References = BTreeMap<String, (f64, Outcome)>;

/// One uninterrupted run per app: the model its faulted runs must end with, and the base of
/// their recovery time.
fn reference_runs(
    args: &ChaosBenchArgs,
    plan: &[Planned],
    root: &Path,
    limit: Duration,
) -> Result<References, BenchError> {
    let mut references = References::new();
    for planned in plan {
        let key = planned.reference_key();
        // A run that cannot run (its app keeps a fixed membership) needs no reference.
        let Some(flags) = planned.job_flags(args, false) else {
            continue;
        };
        if references.contains_key(&key) {
            continue;
        }
        let out = root.join(format!("reference-{key}"));
        let started = Instant::now();
        let mut child = train(planned.app, args, &flags, &out, 0, None, None)?;
        if wait_for(&mut child, limit)? != Some(true) {
            return Err(BenchError::Incomplete(format!(
                "the uninterrupted {key} reference run failed (its output: {})",
                out.display()
            )));
        }
        let model = planned
            .app
            .model(&out, planned.fault.changes_membership())?;
        references.insert(key, (started.elapsed().as_secs_f64(), model));
    }
    Ok(references)
}

/// A planned run that cannot run (a link cut without namespaces, a membership change of an
/// app that keeps its membership fixed).
fn skip_run(run: usize, planned: Planned, why: String, figures: &mut Figures, table: &mut Rows) {
    figures.runs_skipped += 1;
    table.push(serde_json::json!({"run": run, "app": planned.app.name(),
        "fault": format!("link-cut skipped: {why}"), "node": &planned.victim}));
    figures.per_run.push(RunRecord {
        skipped: Some(why),
        ..RunRecord::of(&planned)
    });
}

/// What one faulted run did, before its output is compared with the reference.
struct Ran {
    out: PathBuf,
    injected: bool,
    /// `Some(true)` finished, `Some(false)` failed, `None` hung.
    finished: Option<bool>,
    wall_s: f64,
    fault_label: String,
    cut: Option<CutRecord>,
    /// The run's processes still alive after it ended (killed since).
    left: Vec<u32>,
}

/// Runs `planned` into `out` with up to two restarts, strikes its fault, waits for the end
/// and kills stragglers.
fn faulted_run(
    args: &ChaosBenchArgs,
    out: &Path,
    limit: Duration,
    planned: &Planned,
    netns: Option<&Hosts>,
    figures: &mut Figures,
) -> Result<Ran, BenchError> {
    let started = Instant::now();
    let armed = (planned.fault == Fault::HostileMember)
        .then(|| Some((planned.impostor.as_deref()?, planned.victim.as_str())))
        .flatten();
    let netns_prefix = netns.map(|h| h.prefix.as_str());
    let flags = planned.job_flags(args, true).unwrap_or_default();
    let mut child = train(planned.app, args, &flags, out, 2, netns_prefix, armed)?;
    let (injected, hostile, cut_record) =
        inject(args, out, &mut child, started, limit, planned, netns)?;
    let finished = wait_for(&mut child, limit.saturating_sub(started.elapsed()))?;
    // A membership change struck if the job's metrics record it.
    let injected = match planned.fault.changes_membership() {
        true => membership::change_recorded(out, planned.fault),
        false => injected,
    };
    let wall_s = started.elapsed().as_secs_f64();
    let mut fault_label = name_of(&planned.fault);
    if let Some(c) = &cut_record {
        fault_label.push_str(&format!(
            " {} ({} s down, failure timeout {} s)",
            format!("{:?}", c.case).to_lowercase(),
            fmt(c.down_s),
            fmt(c.failure_timeout_s)
        ));
    }
    match &planned.impostor {
        Some(attacker) if planned.fault == Fault::HostileMember => {
            let attacks = member_attacks(out);
            figures.hostile_member_attacks += attacks.len();
            figures.hostile_member_disconnected += attacks
                .iter()
                .map(|a| a.matches("disconnected").count())
                .sum::<usize>();
            let told = match attacks.is_empty() {
                true => "no attack logged".to_string(),
                false => attacks.join("; "),
            };
            fault_label.push_str(&format!(" by {attacker} ({told})"));
        }
        Some(impostor) => fault_label.push_str(&format!(" with {impostor}'s certificate")),
        None => {}
    }
    if let Some(member) = hostile {
        let outcome = member.stop();
        figures.hostile_attempts += outcome.attempts;
        figures.hostile_connections += outcome.connected;
        figures.hostile_refused += outcome.refused;
        figures.hostile_disconnected += outcome.disconnected;
        figures.hostile_held += usize::from(outcome.held);
        fault_label.push_str(&outcome.label());
    }
    // Give the children of an exited launcher a moment, then look for stragglers.
    std::thread::sleep(Duration::from_secs(2));
    let left = processes_mentioning(&out.to_string_lossy());
    for pid in &left {
        signal(*pid, libc::SIGKILL);
    }
    Ok(Ran {
        out: out.to_path_buf(),
        injected,
        finished,
        wall_s,
        fault_label,
        cut: cut_record,
        left,
    })
}

/// Strikes `planned`'s fault after the run's first checkpoint: whether it struck, the
/// hostile member it started and what a link cut did.
fn inject(
    args: &ChaosBenchArgs,
    out: &Path,
    child: &mut Child,
    started: Instant,
    limit: Duration,
    planned: &Planned,
    netns: Option<&Hosts>,
) -> Result<(bool, Option<HostileMember>, Option<CutRecord>), BenchError> {
    let mut injected = false;
    let mut hostile = None;
    let mut cut_record = None;
    if planned.fault == Fault::Leave {
        let deadline = started + limit;
        let struck =
            membership::strike_leave(out, &planned.victim, planned.delay, child, deadline)?;
        return Ok((struck, hostile, cut_record));
    }
    while started.elapsed() < limit {
        if petrel::recovery::has_checkpoint(&out.join("checkpoints")) {
            std::thread::sleep(planned.delay);
            if let (Some(cut), Some(hosts)) = (planned.cut, netns) {
                cut_record = cut_link(hosts, out, &planned.victim, cut, child, started + limit)?;
                injected = cut_record.is_some();
            } else if planned.fault == Fault::HostileMember {
                let attacker = planned.impostor.as_deref().unwrap_or_default();
                if let Some(pid) = node_pid(out, attacker) {
                    signal(pid, libc::SIGUSR1);
                    injected = true;
                }
            } else if let Some(impostor) = &planned.impostor {
                hostile = Some(HostileMember::start(out, &planned.victim, impostor)?);
                injected = true;
            } else if let Some(pid) = node_pid(out, &planned.victim) {
                match planned.fault {
                    Fault::Hostile | Fault::HostileMember | Fault::LinkCut => {}
                    // The launcher adds the standby worker (`--scale`).
                    Fault::Join | Fault::Leave => {}
                    Fault::Kill => signal(pid, libc::SIGKILL),
                    Fault::Pause => {
                        signal(pid, libc::SIGSTOP);
                        std::thread::sleep(Duration::from_secs_f64(args.pause_s));
                        signal(pid, libc::SIGCONT);
                    }
                    Fault::Slow => slow_down(pid, child, started + limit)?,
                }
                injected = true;
            }
            break;
        }
        if child.try_wait().map_err(BenchError::io("wait"))?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((injected, hostile, cut_record))
}

/// Compares a faulted run's model with its app's reference and records it.
fn record_run(
    run: usize,
    planned: Planned,
    ran: Ran,
    references: &References,
    figures: &mut Figures,
    table: &mut Rows,
) {
    let app = planned.app;
    let elastic = planned.fault.changes_membership();
    let (reference_s, expected) = &references[&planned.reference_key()];
    let finished = ran.finished;
    let matched = (finished == Some(true))
        .then(|| app.model(&ran.out, elastic).ok())
        .flatten()
        .and_then(|m| app.matches(elastic, expected, &m));
    let identical = matched == Some(true);
    let within_tolerance = matched == Some(false);
    let restarts = std::fs::read_to_string(stdout_file(&ran.out))
        .map(|s| restarts_reported(&s))
        .unwrap_or(0);
    figures.restarts += restarts;
    let recovery_s = (ran.wall_s - reference_s).max(0.0);
    figures.faults_injected += usize::from(ran.injected);
    figures.jobs_completed += usize::from(finished == Some(true));
    figures.outputs_identical += usize::from(identical);
    figures.outputs_within_tolerance += usize::from(within_tolerance);
    figures.hangs += usize::from(finished.is_none());
    figures.orphans += ran.left.len();
    if ran.injected && finished == Some(true) {
        figures.max_recovery_s = figures.max_recovery_s.max(recovery_s);
    }
    figures.per_run.push(RunRecord {
        injected: ran.injected,
        finished: finished == Some(true),
        identical,
        within_tolerance,
        restarts,
        wall_s: ran.wall_s,
        cut: ran.cut,
        ..RunRecord::of(&planned)
    });
    let fault = if ran.injected {
        ran.fault_label
    } else {
        "none (job ended first)".into()
    };
    let identical = match (identical, within_tolerance, app.figure(elastic)) {
        (true, _, _) => "true".into(),
        (_, true, Some(t)) => t.to_string(),
        _ => "false".into(),
    };
    let finished = match finished {
        Some(true) => "yes",
        Some(false) => "failed",
        None => "HUNG",
    };
    table.push(
        serde_json::json!({"run": run, "app": app.name(), "fault": fault, "node": planned.victim,
        "finished": finished, "identical": identical, "restarts": restarts, "wall_s": ran.wall_s,
        "recovery_s": recovery_s, "orphans": ran.left.len()}),
    );
}

mod apps;
mod hostile;
mod link_cut;
mod membership;
#[cfg(test)]
mod tests;
