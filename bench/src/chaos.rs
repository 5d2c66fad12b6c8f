// Over 600 lines: the fault schedule, the seven apps' job builders and the recovery checks share one run loop.
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
use petrel::netns::{Hosts, LinkShape};
use petrel::report::{fmt, print_json};
use petrel::train::p3::processes::Teardown;
use petrel_net::hostile::Refusal;
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

/// An app whose multi-process `petrel train` job checkpoints and restarts by itself.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChaosApp {
    /// STRADS Lasso (scheduler + workers).
    Lasso,
    /// STRADS sparse logistic regression (scheduler + workers).
    Logistic,
    /// STRADS CCD++ matrix factorization (scheduler + workers).
    StradsMf,
    /// STRADS LDA (scheduler + workers).
    Lda,
    /// P3 data-parallel training of an MLP (workers + two shards, shaped links).
    P3,
    /// Parameter-server matrix factorization under BSP (workers + two shards).
    PsMf,
    /// Parameter-server logistic regression under BSP (workers + two shards).
    PsLr,
}

/// What a run's model is compared by: the output files byte for byte, or (PS runs, not
/// deterministic: shards sum float deltas in arrival order) `metrics.json`'s final figure.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Bytes(Vec<u8>),
    Figure(f64),
}

impl ChaosApp {
    fn name(self) -> String {
        name_of(&self)
    }

    /// The job's flags besides workers, restarts and output: small jobs that still write
    /// several checkpoints.
    fn job_flags(self, args: &ChaosBenchArgs) -> Vec<String> {
        let flags = match self {
            // The default solver (Gauss-Seidel): no scheduled-mode knob, or `auto` would
            // pick the scheduled mode.
            ChaosApp::Lasso => format!(
                "--max-rounds {} --gap-tolerance 0 --checkpoint-every 150 \
                 --synthetic-samples 150 --synthetic-features 300",
                args.max_rounds
            ),
            ChaosApp::Logistic => "--block-size 8 --candidate-pool 32 --max-rounds 3000 \
                --checkpoint-every 200 --seed 3 --synthetic-samples 150 --synthetic-features 300"
                .into(),
            ChaosApp::StradsMf => "--iterations 80 --seed 1".into(),
            ChaosApp::Lda => "--iterations 200 --topics 5 --seed 1".into(),
            // Shaped links (P3) and emulated compute (PS) keep the job going long enough to
            // be hit mid-way.
            ChaosApp::P3 => "--net mlp --mode p3 --epochs 4 --width 2 --batch 8 --lr 0.05 \
                --seed 2 --train-data synthetic:256 --test-data synthetic:64 \
                --bandwidth-mbit 40 --checkpoint-every 4 --shards 2"
                .into(),
            ChaosApp::PsMf => {
                "--consistency bsp --max-clocks 80 --clock-ms 40 --checkpoint-every 10".into()
            }
            ChaosApp::PsLr => {
                "--consistency bsp --clocks 80 --clock-ms 40 --checkpoint-every 10".into()
            }
        };
        flags.split_whitespace().map(String::from).collect()
    }

    /// The final figure a run is compared by: PS runs, and the elastic jobs of every app.
    fn figure(self, elastic: bool) -> Option<Tolerance> {
        let within = |figure, tolerance, relative| {
            Some(Tolerance {
                figure,
                tolerance,
                relative,
            })
        };
        // PS runs are not deterministic (shards sum float deltas in arrival order): their
        // held-out figures, relative to the CLI restart tests' tolerances, and absolute to
        // the elastic tests' (a change moves the gradient steps per clock). An elastic
        // STRADS job regroups its sums: its objective, to 1e-6 relative.
        match (self, elastic) {
            (ChaosApp::PsMf, _) => within("/final/test_rmse", 0.02, !elastic),
            (ChaosApp::PsLr, _) => within("/final/test_log_loss", 0.05, !elastic),
            (_, true) => within("/final_objective", 1e-6, true),
            (_, false) => None,
        }
    }

    /// Whether a run's outcome matches the reference's: `Some(true)` identical bytes,
    /// `Some(false)` within tolerance only, `None` neither.
    fn matches(self, elastic: bool, reference: &Outcome, got: &Outcome) -> Option<bool> {
        match (reference, got, self.figure(elastic)) {
            (Outcome::Bytes(a), Outcome::Bytes(b), _) => (a == b).then_some(true),
            (Outcome::Figure(a), Outcome::Figure(b), Some(t)) => t.holds(*a, *b).then_some(false),
            _ => None,
        }
    }

    /// The worker and the server (shard or scheduler) node names.
    fn roles(self, workers: usize) -> (Vec<String>, Vec<String>) {
        let (worker, servers): (&str, &[&str]) = match self {
            ChaosApp::P3 => ("w", &["s0", "s1"]),
            ChaosApp::PsMf | ChaosApp::PsLr => ("worker-", &["shard-0", "shard-1"]),
            _ => ("w", &["scheduler"]),
        };
        let workers = (0..workers).map(|w| format!("{worker}{w}")).collect();
        (workers, servers.iter().map(|s| s.to_string()).collect())
    }

    /// Every node name (a STRADS scheduler first).
    fn nodes(self, workers: usize) -> Vec<String> {
        let (workers, servers) = self.roles(workers);
        match self {
            ChaosApp::P3 | ChaosApp::PsMf | ChaosApp::PsLr => [workers, servers].concat(),
            _ => [servers, workers].concat(),
        }
    }

    /// (victim, impostor) pairs: the impostor is a node that sends the victim data, so a
    /// stolen key, were it admitted, would hold up traffic the job needs.
    fn hostile_pairs(self, workers: usize) -> Vec<(String, String)> {
        let n = workers.max(2);
        let (workers, servers) = self.roles(n);
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (i, w) in workers.iter().enumerate() {
            let server = &servers[i % servers.len()];
            pairs.push((server.clone(), w.clone()));
            pairs.push((w.clone(), server.clone()));
            if matches!(self, ChaosApp::StradsMf | ChaosApp::Lda) {
                // Ring: worker i passes its blocks on to worker i + 1.
                pairs.push((workers[(i + 1) % n].clone(), w.clone()));
            }
        }
        pairs
    }

    /// The trained model a run in `out` wrote.
    fn model(self, out: &Path, elastic: bool) -> Result<Outcome, BenchError> {
        if let Some(Tolerance { figure, .. }) = self.figure(elastic) {
            let text = std::fs::read_to_string(out.join("metrics.json"))
                .map_err(BenchError::io("metrics.json"))?;
            let metrics: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| BenchError::Incomplete(format!("metrics.json: {e}")))?;
            return (metrics.pointer(figure).and_then(serde_json::Value::as_f64))
                .map(Outcome::Figure)
                .ok_or_else(|| BenchError::Incomplete(format!("no {figure} in metrics.json")));
        }
        let files: &[&str] = match self {
            ChaosApp::PsMf | ChaosApp::PsLr => &[],
            ChaosApp::Lasso | ChaosApp::Logistic => &["coefficients.tsv"],
            ChaosApp::StradsMf => &["user_factors.tsv", "item_factors.tsv"],
            ChaosApp::Lda => &["topic_word.tsv", "topics.txt"],
            ChaosApp::P3 => &["model.safetensors"],
        };
        let mut bytes = Vec::new();
        for file in files {
            bytes.extend(std::fs::read(out.join(file)).map_err(BenchError::io("the model"))?);
        }
        Ok(Outcome::Bytes(bytes))
    }
}

/// A final figure (a JSON pointer into `metrics.json`) and how close a run's must be to
/// the reference's.
struct Tolerance {
    figure: &'static str,
    tolerance: f64,
    relative: bool,
}

impl Tolerance {
    fn holds(&self, reference: f64, got: f64) -> bool {
        let scale = if self.relative { reference.abs() } else { 1.0 };
        (reference - got).abs() <= self.tolerance * scale
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.figure.rsplit('/').next().unwrap_or(self.figure);
        match (self.relative, self.tolerance >= 0.01) {
            (true, true) => write!(f, "{name} within {}%", self.tolerance * 100.0),
            (true, false) => write!(f, "{name} within {:e} relative", self.tolerance),
            (false, _) => write!(f, "{name} within {}", self.tolerance),
        }
    }
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

/// Whether a link cut is shorter than the failure timeout (survived, no restart) or longer
/// (a death: the cluster restarts from its newest checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum CutCase {
    Short,
    Long,
}

/// One planned link cut: its case and its length over the job's failure timeout (read from
/// the run's `cluster.toml` when it strikes): [0.1, 0.4] short, [1.2, 1.5] long.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LinkCut {
    case: CutCase,
    share: f64,
}

impl LinkCut {
    /// The `k`-th link cut of a schedule: short, long, short, …
    fn nth(k: usize, rng: &mut impl Rng) -> LinkCut {
        let (case, shares) = if k.is_multiple_of(2) {
            (CutCase::Short, 0.1..0.4)
        } else {
            (CutCase::Long, 1.2..1.5)
        };
        let share = rng.gen_range(shares);
        LinkCut { case, share }
    }

    fn length(&self, failure_timeout: Duration) -> Duration {
        failure_timeout.mul_f64(self.share)
    }

    /// Whether the link may come back: after its length, a long cut only once the job has
    /// restarted (so a failure detected late still meets a cut link); always once it ended.
    fn may_restore(
        &self,
        down_for: Duration,
        length: Duration,
        restarted: bool,
        ended: bool,
    ) -> bool {
        ended || (down_for >= length && (self.case == CutCase::Short || restarted))
    }
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

/// What a link cut did.
#[derive(Serialize, Clone, Copy)]
struct CutRecord {
    case: CutCase,
    failure_timeout_s: f64,
    down_s: f64,
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

/// What an armed hostile member logged of each attack (`stall: disconnected (TooSlow) …`).
fn member_attacks(out: &Path) -> Vec<String> {
    const SAID: &str = "hostile member attacked: ";
    [stdout_file(out), out.with_extension("stderr")]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            // The log line's fields (` node=… victim=…`) follow the message.
            let said = |l: &str| Some(l.split_once(SAID)?.1.split(" node=").next()?.to_string());
            text.lines().filter_map(said).collect::<Vec<_>>()
        })
        .collect()
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

/// A thread that attacks the victim with a stolen certificate until [`HostileMember::stop`].
struct HostileMember {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<HostileOutcome>,
}

/// What became of a hostile member.
#[derive(Debug, Default)]
struct HostileOutcome {
    attempts: usize,
    connected: usize,
    refused: usize,
    disconnected: usize,
    /// A connection still held open when the job ended.
    held: bool,
    /// The last failure that was not a refusal.
    error: Option<String>,
}

impl HostileOutcome {
    fn record(&mut self, why: Option<Refusal>) {
        match why {
            Some(Refusal::StolenKey) => self.refused += 1,
            Some(Refusal::Hoarding | Refusal::TooSlow) => self.disconnected += 1,
            Some(Refusal::Impostor) | None => {}
        }
    }

    fn label(&self) -> String {
        let mut parts = vec![format!("refused {}/{}", self.refused, self.attempts)];
        if self.disconnected > 0 {
            parts.push(format!("disconnected {}", self.disconnected));
        }
        if self.held {
            parts.push("held to the end".into());
        }
        if let Some(e) = &self.error {
            parts.push(e.clone());
        }
        format!(" ({})", parts.join(", "))
    }
}

impl HostileMember {
    /// Attacks `victim` with the certificate of `impostor`, from the run's `cluster.toml`.
    fn start(out: &Path, victim: &str, impostor: &str) -> Result<HostileMember, BenchError> {
        let settings = run_settings(out)?;
        let nodes = &settings.nodes;
        let node = |name: &str| {
            (nodes.iter().position(|n| n.name == name))
                .ok_or_else(|| BenchError::Incomplete(format!("no node {name} in the run")))
        };
        let to: std::net::SocketAddr = nodes[node(victim)?]
            .addr
            .parse()
            .map_err(|e| BenchError::Incomplete(format!("{victim}'s address: {e}")))?;
        let impostor = node(impostor)?;
        let certs = settings
            .cluster
            .certs_dir
            .clone()
            .ok_or_else(|| BenchError::Incomplete("the run has no certs_dir".into()))?;
        let creds = petrel_net::ClusterCredentials::load(&certs, &nodes[impostor].name)
            .map_err(|e| BenchError::Incomplete(format!("a member's certificate: {e}")))?;
        let net = settings.net.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    return HostileOutcome {
                        error: Some(e.to_string()),
                        ..HostileOutcome::default()
                    };
                }
            };
            runtime.block_on(attack(creds, net, to, impostor as u32, stopped))
        });
        Ok(HostileMember { stop, thread })
    }

    fn stop(self) -> HostileOutcome {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_else(|_| HostileOutcome {
            error: Some("the hostile member's thread panicked".into()),
            ..HostileOutcome::default()
        })
    }
}

/// Connects as `from`, opens five stalled 60 MiB frames, holds them until the victim
/// closes the connection, and comes back 200 ms later, until `stopped`.
async fn attack(
    creds: petrel_net::ClusterCredentials,
    net: petrel_net::NetConfig,
    to: std::net::SocketAddr,
    from: u32,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> HostileOutcome {
    use petrel_net::hostile::{
        StalledFrames, connect_as_member, open_stalled_frames, refusal, refusal_of,
    };
    let mut outcome = HostileOutcome::default();
    loop {
        let connected = tokio::select! {
            c = connect_as_member(&creds, &net, to) => c,
            _ = &mut stopped => return outcome,
        };
        outcome.attempts += 1;
        match connected {
            Err(e) => match refusal_of(&e) {
                Some(why) => outcome.record(Some(why)),
                None => outcome.error = Some(e.to_string()),
            },
            Ok((_endpoint, conn)) => {
                outcome.connected += 1;
                let frames = tokio::select! {
                    f = open_stalled_frames(&conn, from, StalledFrames::FIVE_OF_60_MIB) => f,
                    _ = &mut stopped => {
                        outcome.held = conn.close_reason().is_none();
                        return outcome;
                    }
                };
                tokio::select! {
                    closed = conn.closed() => outcome.record(refusal(&closed)),
                    _ = &mut stopped => {
                        outcome.held = frames.is_ok() && conn.close_reason().is_none();
                        return outcome;
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = &mut stopped => return outcome,
        }
    }
}

/// Where a run's nodes go: on 127.0.0.1 (`Ok(None)`), one per emulated host for a link
/// cut, or nowhere (`Err`: why the run is skipped).
fn placement<'a>(
    link_cut: bool,
    hosts: Option<&'a Hosts>,
    link_cuts: Option<&str>,
) -> Result<Option<&'a Hosts>, String> {
    if !link_cut {
        return Ok(None);
    }
    hosts.map(Some).ok_or_else(|| {
        link_cuts
            .and_then(|l| l.strip_prefix("skipped: "))
            .unwrap_or("no emulated hosts")
            .to_string()
    })
}

/// The link cuts' emulated hosts, one per node of the largest job, and what the JSON says
/// of them: `netns <prefix>`, or `skipped: <why>` without root.
fn link_cut_hosts(
    args: &ChaosBenchArgs,
    plan: &[Planned],
) -> Result<(Option<Teardown>, Option<String>), BenchError> {
    if !plan.iter().any(|p| p.fault == Fault::LinkCut) {
        return Ok((None, None));
    }
    if let Err(why) = petrel::netns::available() {
        return Ok((None, Some(format!("skipped: {why}"))));
    }
    let count = args
        .apps
        .iter()
        .map(|a| a.nodes(args.workers).len())
        .max()
        .unwrap_or(1);
    // Unique to this process; interface names (`<prefix><i>a`) stay within 15 bytes.
    let prefix = format!("pc{}", std::process::id() % 100_000);
    let hosts = Hosts::up(&prefix, count, &LinkShape::default())
        .map_err(|e| BenchError::Incomplete(format!("the link cuts' hosts: {e}")))?;
    Ok((Some(Teardown(hosts)), Some(format!("netns {prefix}"))))
}

/// Brings a cut link back up when dropped (also on error).
struct LinkGuard<'a> {
    hosts: &'a Hosts,
    host: usize,
}

impl Drop for LinkGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.hosts.set_link(self.host, true) {
            tracing::warn!(error = %e, host = self.host, "could not restore a cut link");
        }
    }
}

/// The settings of the run in `out` (its `run/cluster.toml`).
fn run_settings(out: &Path) -> Result<petrel_actors::Settings, BenchError> {
    petrel_actors::Settings::load(&out.join("run").join("cluster.toml"))
        .map_err(|e| BenchError::Incomplete(format!("the run's cluster.toml: {e}")))
}

/// Whether a job's stdout says its first restart has begun (`<app>: restart 1 …`).
fn restart_begun(stdout: &str) -> bool {
    stdout.lines().any(|l| l.contains(": restart 1 "))
}

/// Cuts the link of `victim`'s host (node `i` is on host `i`) until
/// [`LinkCut::may_restore`] or `deadline`.
fn cut_link(
    hosts: &Hosts,
    out: &Path,
    victim: &str,
    cut: LinkCut,
    child: &mut Child,
    deadline: Instant,
) -> Result<Option<CutRecord>, BenchError> {
    let settings = run_settings(out)?;
    let Some(host) = settings.nodes.iter().position(|n| n.name == victim) else {
        return Ok(None);
    };
    let timeout = Duration::from_millis(settings.cluster.failure_timeout_ms);
    let length = cut.length(timeout);
    hosts
        .set_link(host, false)
        .map_err(|e| BenchError::Incomplete(format!("cutting {victim}'s link: {e}")))?;
    let guard = LinkGuard { hosts, host };
    let down = Instant::now();
    loop {
        let ended = child.try_wait().map_err(BenchError::io("wait"))?.is_some()
            || Instant::now() > deadline;
        let restarted = std::fs::read_to_string(stdout_file(out)).is_ok_and(|s| restart_begun(&s));
        if cut.may_restore(down.elapsed(), length, restarted, ended) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(guard);
    Ok(Some(CutRecord {
        case: cut.case,
        failure_timeout_s: timeout.as_secs_f64(),
        down_s: down.elapsed().as_secs_f64(),
    }))
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

mod membership;
#[cfg(test)]
mod tests;
