//! `petrel bench elastic`'s P3 app: the emulated VGG-19 at 1/1000 on 2 shards, run as
//! `petrel train p3 --net emulated` runs it ([`petrel::train::p3::processes::run_job_with`]), once
//! with a fixed membership and once with a standby worker joining and a worker leaving on
//! the bench's plan, and a standby shard (`s2`) joining and `s1` leaving at the same times
//! ([`with_shard_changes`]). The emulated model's workers push equal gradients, so their
//! mean is the same whatever the workers, and a slice's update the same on any shard:
//! `identical` compares the final parameters' digests, and
//! `within_tolerance` is the same (the tolerance is 0); `objective_rel_diff` is 0 when
//! they are identical.

use crate::elastic::{AppFigures, ElasticBenchArgs, orphans};
use petrel::CliError;
use petrel::train::Membership;
use petrel::train::p3::processes::run_job_with;
use petrel_actors::MembershipArgs;
use petrel_net::NetConfig;
use petrel_p3::roles::{P3Settings, WorkerReportFile};
use std::path::Path;
use std::time::{Duration, Instant};

/// What the comparison reads of one run.
struct Run {
    seconds: f64,
    /// The final parameters' digest of a worker that ran to the end.
    digest: String,
    /// Joins and leaves of its workers and shards.
    changes: u64,
}

/// The job with `membership` into `dir`, on its own thread; `None` if it did not end
/// within `max_seconds` (a hang).
fn run_app(
    args: &ElasticBenchArgs,
    dir: &Path,
    membership: Membership,
) -> Result<Option<Run>, CliError> {
    let cfg = P3Settings {
        batch: 8,
        workers: args.workers,
        shards: 2,
        iterations: if args.quick { 64 } else { 400 },
        report_dir: dir.join("reports"),
        ask_timeout_ms: args.max_seconds * 1000,
        ..P3Settings::default()
    };
    let (dir, transport, limit) = (
        dir.to_path_buf(),
        args.transport,
        Duration::from_secs(args.max_seconds),
    );
    let t0 = Instant::now();
    let runner = std::thread::spawn(move || {
        let net = NetConfig::default();
        run_job_with(None, &cfg, &net, &dir, limit, &membership, transport).map(|r| r.0)
    });
    while !runner.is_finished() {
        if t0.elapsed() >= limit {
            tracing::warn!("p3 run did not end in time: a hang");
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = t0.elapsed().as_secs_f64();
    let joined = runner.join();
    let reports = joined.map_err(|_| CliError::Usage("p3: the run panicked".into()))??;
    Ok(Some(summary(&reports, seconds)))
}

/// The run's digest (of the first worker at the end) and its changes.
fn summary(reports: &[WorkerReportFile], seconds: f64) -> Run {
    let last = reports
        .iter()
        .find(|r| r.final_workers.first() == Some(&r.worker));
    let count = |list: fn(&WorkerReportFile) -> &[petrel_p3::core::RosterChange]| {
        let mut changes: Vec<_> = reports.iter().flat_map(|r| list(r).to_vec()).collect();
        changes.sort_by_key(|c| c.iteration);
        changes.dedup();
        changes
            .iter()
            .map(|c| (c.joined.len() + c.left.len()) as u64)
            .sum::<u64>()
    };
    Run {
        seconds,
        digest: last.map(|r| r.params_digest.clone()).unwrap_or_default(),
        changes: count(|r| &r.changes) + count(|r| &r.shard_changes),
    }
}

/// `plan` with a shard change beside each worker change: `s2` (the standby shard) joins
/// when a worker is added, `s1` leaves when one is removed (`s0` runs the coordinator).
fn with_shard_changes(plan: &str) -> String {
    let mut steps: Vec<String> = Vec::new();
    for step in plan.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        steps.push(step.to_string());
        let Some((at, change)) = step.split_once(' ') else {
            continue;
        };
        match change.split_whitespace().next() {
            Some("add") => steps.push(format!("{at} add s2")),
            Some("remove") => steps.push(format!("{at} remove s1")),
            _ => {}
        }
    }
    steps.join("; ")
}

/// P3 with a fixed membership against a join and a leave.
pub(crate) fn compare(args: &ElasticBenchArgs) -> Result<AppFigures, CliError> {
    let dir = |run: &str| Path::new(&args.out).join("p3").join(run);
    let fixed = run_app(args, &dir("fixed"), Membership::default())?;
    let membership = Membership {
        plan: MembershipArgs {
            standby_workers: 1,
            standby_shards: 1,
            scale: Some(with_shard_changes(&args.plan)),
        },
        ..Membership::default()
    };
    let elastic = run_app(args, &dir("elastic"), membership)?;
    let orphans = orphans(args.transport);
    let hangs = usize::from(fixed.is_none()) + usize::from(elastic.is_none());
    let (fixed_s, elastic_s, changes, identical) = match (&fixed, &elastic) {
        (Some(f), Some(e)) => (
            f.seconds,
            e.seconds,
            e.changes,
            Some(!f.digest.is_empty() && f.digest == e.digest),
        ),
        _ => (f64::NAN, f64::NAN, 0, None),
    };
    let same = identical == Some(true);
    Ok(AppFigures {
        app: "p3".into(),
        kind: "workers".into(),
        changes,
        identical,
        within_tolerance: same,
        objective_rel_diff: if same { 0.0 } else { f64::NAN },
        fixed_s,
        elastic_s,
        seconds_lost_per_change: (elastic_s - fixed_s) / changes.max(1) as f64,
        orphans,
        hangs,
        rows: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn shard_changes_follow_the_worker_changes() {
        assert_eq!(
            super::with_shard_changes("at=200ms add w2; at=700ms remove w0"),
            "at=200ms add w2; at=200ms add s2; at=700ms remove w0; at=700ms remove s1"
        );
    }
}
