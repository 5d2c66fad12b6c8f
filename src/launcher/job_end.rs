//! When a launched job has ended, for its standby nodes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long a standby node may keep running once the job ended. A member released by the
/// final barrier exits well within it; one still running is a joiner that missed the job.
pub(super) const STANDBY_EXIT_GRACE: Duration = Duration::from_secs(1);

/// Whether the job still needs its standby nodes, decided from the nodes' exits.
///
/// The coordinator's node exits successfully only once every member passed the final
/// barrier: from then on no standby node is started. The job has ended once every other
/// starting node exited too; the standby nodes still running after
/// [`STANDBY_EXIT_GRACE`] are stopped and not counted as failed: they were still trying to
/// join a job that no longer has a coordinator. While the job runs, nothing changes: a
/// standby node that cannot join fails the run.
#[derive(Debug)]
pub(super) struct JobEnd {
    coordinator: String,
    /// The starting nodes (not standby) that have not exited.
    running: BTreeSet<String>,
    coordinator_finished: bool,
    ended_at: Option<Instant>,
}

impl JobEnd {
    /// A job whose coordinator runs on `coordinator`, started with nodes `starting`.
    pub(super) fn new(coordinator: &str, starting: impl IntoIterator<Item = String>) -> Self {
        JobEnd {
            coordinator: coordinator.to_string(),
            running: starting.into_iter().collect(),
            coordinator_finished: false,
            ended_at: None,
        }
    }

    /// Node `name` exited at `now`, successfully or not (a lost node counts as not).
    pub(super) fn exited(&mut self, name: &str, success: bool, now: Instant) {
        self.running.remove(name);
        if name == self.coordinator && success {
            self.coordinator_finished = true;
        }
        if self.ended_at.is_none() && self.coordinator_finished && self.running.is_empty() {
            self.ended_at = Some(now);
        }
    }

    /// Whether a standby node may still start: not once the coordinator finished.
    pub(super) fn may_start_standby(&self) -> bool {
        !self.coordinator_finished
    }

    /// Whether the standby nodes still running at `now` missed the job, to be stopped.
    pub(super) fn standby_missed_the_job(&self, now: Instant) -> bool {
        self.ended_at
            .is_some_and(|t| now.saturating_duration_since(t) >= STANDBY_EXIT_GRACE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobEnd {
        JobEnd::new("s0", ["s0", "w0", "w1"].map(String::from))
    }

    #[test]
    fn standby_nodes_stop_once_the_coordinator_and_every_starting_node_exited() {
        let t0 = Instant::now();
        let mut job = job();
        job.exited("w0", true, t0);
        assert!(job.may_start_standby());
        job.exited("s0", true, t0);
        assert!(!job.may_start_standby(), "the coordinator finished");
        let far = t0 + Duration::from_secs(60);
        assert!(!job.standby_missed_the_job(far), "w1 still runs");
        job.exited("w2", true, t0);
        assert!(
            !job.standby_missed_the_job(far),
            "a standby node is not a starting one"
        );
        let t1 = t0 + Duration::from_millis(30);
        job.exited("w1", true, t1);
        assert!(!job.standby_missed_the_job(t1));
        assert!(!job.standby_missed_the_job(t1 + STANDBY_EXIT_GRACE / 2));
        assert!(job.standby_missed_the_job(t1 + STANDBY_EXIT_GRACE));
    }

    #[test]
    fn a_lost_worker_still_lets_the_job_end() {
        let t0 = Instant::now();
        let mut job = job();
        job.exited("w0", false, t0);
        job.exited("w1", true, t0);
        job.exited("s0", true, t0);
        assert!(job.standby_missed_the_job(t0 + STANDBY_EXIT_GRACE));
    }

    #[test]
    fn standby_nodes_run_while_the_coordinator_runs_or_if_it_did_not_finish() {
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(60);
        let mut job = job();
        job.exited("w0", true, t0);
        job.exited("w1", true, t0);
        assert!(job.may_start_standby(), "the coordinator still runs");
        assert!(!job.standby_missed_the_job(far));
        job.exited("s0", false, t0);
        assert!(
            job.may_start_standby(),
            "the coordinator's node did not finish"
        );
        assert!(!job.standby_missed_the_job(far));
    }
}
