//! The membership faults of `petrel bench chaos`: `join` (a standby worker that the
//! launcher starts at the drawn moment, through `--scale`) and `leave` (SIGTERM to a
//! worker, which drains and leaves, as a scheduler's scale-down does). Both run the app's
//! elastic job, and so does their app's reference run; its model is not the fixed run's
//! bit for bit (the sums regroup), so it is compared by a figure within a tolerance.

use super::{ChaosApp, ChaosBenchArgs, Fault, Planned, node_pid, signal};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

impl Fault {
    /// Whether the fault changes the job's membership (and so runs its elastic job).
    pub(super) fn changes_membership(self) -> bool {
        matches!(self, Fault::Join | Fault::Leave)
    }
}

impl ChaosApp {
    /// The flags of the app's elastic job, besides workers and output (the same job for
    /// the reference and the faulted run): `None` for an app that keeps a fixed membership.
    pub(super) fn elastic_flags(self) -> Option<String> {
        let strads = "--solver scheduled --balance dynamic --block-size 8 --candidate-pool 32 \
                      --synthetic-samples 300 --synthetic-features 300";
        let flags = match self {
            // Dynamic dealing follows measured speeds, so two runs agree on the optimum,
            // not on round N: the Lasso stops on its duality gap, which bounds its
            // distance to the optimum; logistic regression runs until its objective settles.
            ChaosApp::Lasso => {
                format!("{strads} --eval-every 50 --gap-tolerance 1e-6 --max-rounds 20000")
            }
            ChaosApp::Logistic => format!("{strads} --max-rounds 3000"),
            ChaosApp::PsMf => {
                "--consistency bsp --max-clocks 80 --clock-ms 40 --checkpoint-every 0".into()
            }
            ChaosApp::PsLr => {
                "--consistency bsp --clocks 80 --clock-ms 40 --checkpoint-every 0".into()
            }
            ChaosApp::StradsMf | ChaosApp::Lda | ChaosApp::P3 => return None,
        };
        Some(flags)
    }

    /// The node name of the standby worker a join adds: the worker after the `workers`.
    pub(super) fn standby_worker(self, workers: usize) -> String {
        let (names, _) = self.roles(workers + 1);
        names.last().cloned().unwrap_or_default()
    }
}

/// SIGTERM to `victim` once its process handles SIGTERM, `delay` later: the node drains
/// and leaves. Whether the signal was sent before the job ended.
pub(super) fn strike_leave(
    out: &Path,
    victim: &str,
    delay: Duration,
    child: &mut Child,
    deadline: Instant,
) -> Result<bool, super::BenchError> {
    while Instant::now() < deadline {
        if child
            .try_wait()
            .map_err(super::BenchError::io("wait"))?
            .is_some()
        {
            return Ok(false);
        }
        if let Some(pid) = node_pid(out, victim).filter(|&pid| catches(pid, libc::SIGTERM)) {
            std::thread::sleep(delay);
            signal(pid, libc::SIGTERM);
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(false)
}

/// Whether `pid` has a handler for `signo` (Linux `/proc/<pid>/status` `SigCgt`).
fn catches(pid: u32, signo: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| signo > 0 && mask & (1 << (signo - 1)) != 0)
}

/// Whether the `metrics.json` of the run in `out` records the change `fault` makes: a
/// join, or a leave (STRADS `balance.changes`, PS `changes`).
pub(super) fn change_recorded(out: &Path, fault: Fault) -> bool {
    let metrics: serde_json::Value = std::fs::read_to_string(out.join("metrics.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let (joins, leaves) = changes_recorded(&metrics);
    match fault {
        Fault::Join => joins > 0,
        Fault::Leave => leaves > 0,
        _ => false,
    }
}

/// The joins and the leaves a `metrics.json` records.
fn changes_recorded(metrics: &serde_json::Value) -> (usize, usize) {
    let mut joins = 0;
    let mut leaves = 0;
    for c in metrics["balance"]["changes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        joins += c["joined"].as_array().map_or(0, Vec::len);
        leaves += c["left"].as_array().map_or(0, Vec::len);
    }
    for c in metrics["changes"].as_array().into_iter().flatten() {
        match c["change"].as_str() {
            Some("joined") => joins += 1,
            Some("left") => leaves += 1,
            _ => {}
        }
    }
    (joins, leaves)
}

impl Planned {
    /// The reference run this run is compared with: its app's job, or its elastic job.
    pub(super) fn reference_key(&self) -> String {
        match self.fault.changes_membership() {
            true => format!("{}-elastic", self.app.name()),
            false => self.app.name(),
        }
    }

    /// The job's flags besides workers, restarts and output (with a standby worker, and
    /// the join's plan, when `faulted`); `None` for a membership change of an app that
    /// keeps a fixed membership.
    pub(super) fn job_flags(&self, args: &ChaosBenchArgs, faulted: bool) -> Option<Vec<String>> {
        if !self.fault.changes_membership() {
            return Some(self.app.job_flags(args));
        }
        let mut flags: Vec<String> = (self.app.elastic_flags()?)
            .split_whitespace()
            .map(String::from)
            .collect();
        // A standby worker makes the job one whose members may change, where SIGTERM
        // drains a node instead of interrupting it; a join starts it.
        if faulted {
            flags.extend(["--standby-workers", "1"].map(String::from));
        }
        if faulted && self.fault == Fault::Join {
            let plan = format!("at={}ms add {}", self.delay.as_millis(), self.victim);
            flags.extend(["--scale", &plan].map(String::from));
        }
        Some(flags)
    }
}
