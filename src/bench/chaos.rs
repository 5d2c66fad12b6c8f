//! `petrel bench chaos`: a multi-process STRADS Lasso job (`petrel train lasso --transport
//! processes`, with its default checkpoints and `--max-restarts`) run again and again while
//! a seeded schedule kills (SIGKILL) or pauses (SIGSTOP past the failure timeout, then
//! SIGCONT) one random node per run: a worker or the scheduler, which is also the
//! coordinator. Every run must finish with the model of an uninterrupted run, leave no
//! process behind and never hang.
//!
//! Not injected here (yet): link cuts in network namespaces (needs root) and hostile
//! streams (covered by `net/tests/transport.rs`).

use super::BenchError;
use crate::report::{Table, fmt, print_json};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `petrel bench chaos` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ChaosBenchArgs {
    /// Faulted runs (after one uninterrupted reference run).
    #[arg(long, default_value_t = 4)]
    pub runs: usize,
    /// Seed of the fault schedule (which fault, which node, when).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker processes (plus one scheduler).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Rounds of the Lasso job.
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

#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Fault {
    Kill,
    Pause,
}

#[derive(Serialize)]
struct Figures {
    runs: usize,
    faults_injected: usize,
    jobs_completed: usize,
    outputs_identical: usize,
    max_recovery_s: f64,
    orphans: usize,
    hangs: usize,
    reference_s: f64,
    seed: u64,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        what: what.to_string(),
        source,
    }
}

/// The `petrel train lasso` command of every run.
fn train(args: &ChaosBenchArgs, out: &Path, max_restarts: u32) -> Result<Child, BenchError> {
    Command::new(std::env::current_exe().map_err(io("current exe"))?)
        .args(["train", "lasso", "--transport", "processes"])
        .args(["--workers", &args.workers.to_string()])
        .args(["--max-rounds", &args.max_rounds.to_string()])
        .args([
            "--block-size",
            "8",
            "--candidate-pool",
            "32",
            "--eval-every",
            "500",
        ])
        .args([
            "--gap-tolerance",
            "0",
            "--seed",
            "3",
            "--checkpoint-every",
            "150",
        ])
        .args(["--synthetic-samples", "150", "--synthetic-features", "300"])
        .args(["--max-restarts", &max_restarts.to_string(), "--out"])
        .arg(out)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io("spawn petrel train"))
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

/// The node process `name` among the processes of the run in `out` (its `petrel node`
/// is started with `--config <out>/…` and `--name <name>`).
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

fn has_checkpoint(out: &Path) -> bool {
    crate::recovery::has_checkpoint(&out.join("checkpoints"))
}

/// Waits for `child` until `limit`; kills it and returns `None` when it did not exit.
fn wait_for(child: &mut Child, limit: Duration) -> Result<Option<bool>, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().map_err(io("wait for petrel train"))? {
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

/// Runs the benchmark: prints one row per run and the JSON line.
pub fn run(args: ChaosBenchArgs) -> Result<(), BenchError> {
    let temp = tempfile::tempdir().map_err(io("temporary directory"))?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&root).map_err(io("bench directory"))?;
    let limit = Duration::from_secs(args.run_timeout_s);

    let reference_out = root.join("reference");
    let started = Instant::now();
    let mut child = train(&args, &reference_out, 0)?;
    if wait_for(&mut child, limit)? != Some(true) {
        return Err(BenchError::Incomplete(
            "the uninterrupted reference run failed".into(),
        ));
    }
    let reference_s = started.elapsed().as_secs_f64();
    let expected = std::fs::read(reference_out.join("coefficients.tsv"))
        .map_err(io("reference coefficients"))?;

    let nodes: Vec<String> = std::iter::once("scheduler".to_string())
        .chain((0..args.workers).map(|w| format!("w{w}")))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut table = Table::new(&[
        "run",
        "fault",
        "node",
        "finished",
        "identical",
        "wall s",
        "recovery s",
        "orphans",
    ]);
    let mut figures = Figures {
        runs: args.runs,
        faults_injected: 0,
        jobs_completed: 0,
        outputs_identical: 0,
        max_recovery_s: 0.0,
        orphans: 0,
        hangs: 0,
        reference_s,
        seed: args.seed,
    };
    for run in 0..args.runs {
        let fault = if rng.gen_bool(0.5) {
            Fault::Kill
        } else {
            Fault::Pause
        };
        let victim = nodes[rng.gen_range(0..nodes.len())].clone();
        let delay = Duration::from_millis(rng.gen_range(0..400));
        let out = root.join(format!("run-{run}"));
        let started = Instant::now();
        let mut child = train(&args, &out, 2)?;
        // The fault strikes at a random moment after the first checkpoint.
        let mut injected = false;
        while started.elapsed() < limit {
            if has_checkpoint(&out) {
                std::thread::sleep(delay);
                if let Some(pid) = node_pid(&out, &victim) {
                    match fault {
                        Fault::Kill => signal(pid, libc::SIGKILL),
                        Fault::Pause => {
                            signal(pid, libc::SIGSTOP);
                            std::thread::sleep(Duration::from_secs_f64(args.pause_s));
                            signal(pid, libc::SIGCONT);
                        }
                    }
                    injected = true;
                }
                break;
            }
            if child.try_wait().map_err(io("wait"))?.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let finished = wait_for(&mut child, limit.saturating_sub(started.elapsed()))?;
        let wall_s = started.elapsed().as_secs_f64();
        // Give the children of an exited launcher a moment, then look for stragglers.
        std::thread::sleep(Duration::from_secs(2));
        let left = processes_mentioning(&out.to_string_lossy());
        for pid in &left {
            signal(*pid, libc::SIGKILL);
        }
        let identical = finished == Some(true)
            && std::fs::read(out.join("coefficients.tsv")).is_ok_and(|c| c == expected);
        let recovery_s = (wall_s - reference_s).max(0.0);
        figures.faults_injected += usize::from(injected);
        figures.jobs_completed += usize::from(finished == Some(true));
        figures.outputs_identical += usize::from(identical);
        figures.hangs += usize::from(finished.is_none());
        figures.orphans += left.len();
        if injected && finished == Some(true) {
            figures.max_recovery_s = figures.max_recovery_s.max(recovery_s);
        }
        table.row(vec![
            run.to_string(),
            if injected {
                format!("{fault:?}").to_lowercase()
            } else {
                "none (job ended first)".into()
            },
            victim,
            match finished {
                Some(true) => "yes".into(),
                Some(false) => "failed".into(),
                None => "HUNG".into(),
            },
            identical.to_string(),
            fmt(wall_s),
            fmt(recovery_s),
            left.len().to_string(),
        ]);
    }
    table.print();
    println!(
        "reference (uninterrupted) run: {} s; recovery s = a faulted run's wall time minus the reference's",
        fmt(reference_s)
    );
    print_json(&figures)?;
    Ok(())
}
