//! Link cuts of `petrel bench chaos` (root): the nodes of a run on emulated hosts, the
//! victim's host link down shorter or longer than the job's failure timeout.

use super::{BenchError, ChaosBenchArgs, Fault, Planned, stdout_file};
use petrel::netns::{Hosts, LinkShape};
use petrel::train::p3::processes::Teardown;
use rand::Rng;
use serde::Serialize;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Whether a link cut is shorter than the failure timeout (survived, no restart) or longer
/// (a death: the cluster restarts from its newest checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum CutCase {
    Short,
    Long,
}

/// One planned link cut: its case and its length over the job's failure timeout (read from
/// the run's `cluster.toml` when it strikes): [0.1, 0.4] short, [1.2, 1.5] long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LinkCut {
    pub(super) case: CutCase,
    pub(super) share: f64,
}

impl LinkCut {
    /// The `k`-th link cut of a schedule: short, long, short, …
    pub(super) fn nth(k: usize, rng: &mut impl Rng) -> LinkCut {
        let (case, shares) = if k.is_multiple_of(2) {
            (CutCase::Short, 0.1..0.4)
        } else {
            (CutCase::Long, 1.2..1.5)
        };
        let share = rng.gen_range(shares);
        LinkCut { case, share }
    }

    pub(super) fn length(&self, failure_timeout: Duration) -> Duration {
        failure_timeout.mul_f64(self.share)
    }

    /// Whether the link may come back: after its length, a long cut only once the job has
    /// restarted (so a failure detected late still meets a cut link); always once it ended.
    pub(super) fn may_restore(
        &self,
        down_for: Duration,
        length: Duration,
        restarted: bool,
        ended: bool,
    ) -> bool {
        ended || (down_for >= length && (self.case == CutCase::Short || restarted))
    }
}

/// What a link cut did.
#[derive(Serialize, Clone, Copy)]
pub(super) struct CutRecord {
    pub(super) case: CutCase,
    pub(super) failure_timeout_s: f64,
    pub(super) down_s: f64,
}

/// Where a run's nodes go: on 127.0.0.1 (`Ok(None)`), one per emulated host for a link
/// cut, or nowhere (`Err`: why the run is skipped).
pub(super) fn placement<'a>(
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
pub(super) fn link_cut_hosts(
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
pub(super) struct LinkGuard<'a> {
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
pub(super) fn run_settings(out: &Path) -> Result<petrel_actors::Settings, BenchError> {
    petrel_actors::Settings::load(&out.join("run").join("cluster.toml"))
        .map_err(|e| BenchError::Incomplete(format!("the run's cluster.toml: {e}")))
}

/// Whether a job's stdout says its first restart has begun (`<app>: restart 1 …`).
pub(super) fn restart_begun(stdout: &str) -> bool {
    stdout.lines().any(|l| l.contains(": restart 1 "))
}

/// Cuts the link of `victim`'s host (node `i` is on host `i`) until
/// [`LinkCut::may_restore`] or `deadline`.
pub(super) fn cut_link(
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
