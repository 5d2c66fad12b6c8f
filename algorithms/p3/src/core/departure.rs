//! When a leaving shard's node may leave, sans I/O: once it serves no slice and every
//! worker its last replies went to confirmed that it has them.
//!
//! A shard's last replies travel on each worker's connection while the view without the
//! shard travels on the coordinator's: a worker that heard the view first would fail the
//! request still awaiting them. So once every reply of an iteration is in, a worker tells
//! each shard that served that iteration and serves none of the next
//! ([`shards_done_with`]) that it has them, and the shard's node leaves once each worker
//! it answered last said so or is no longer in the cluster ([`Departure`]).

use std::collections::BTreeSet;

/// What a shard whose node was asked to leave waits for before the node leaves.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Departure {
    /// The workers answered by an update after which a slice was served here no more
    /// (handed over, or past the job's last iteration).
    owed: BTreeSet<usize>,
    /// The workers that said they have every reply this shard owes them.
    confirmed: BTreeSet<usize>,
}

impl Departure {
    /// A slice is served here no more: the update that ended it answered `workers`.
    pub fn last_served(&mut self, workers: impl IntoIterator<Item = usize>) {
        self.owed.extend(workers);
    }

    /// Worker `worker` has every reply this shard owes it.
    pub fn confirmed(&mut self, worker: usize) {
        self.confirmed.insert(worker);
    }

    /// Whether the node may leave now, given whether the shard still `serving` (it holds a
    /// slice before the job's last iteration, or one is on its way to its new owner),
    /// whether the job is over, and the workers in the cluster now (`live`). A worker that
    /// left, or that the failure detection declared dead, is not waited for. A shard that
    /// never served a slice waits for the job's end: having joined, it is dealt slices at
    /// the next iteration boundary (then hands them back), so leaving at once could strand
    /// a hand-over on its way to it.
    pub fn may_leave(&self, serving: bool, job_over: bool, live: &[usize]) -> bool {
        if serving {
            return false;
        }
        if self.owed.is_empty() {
            return job_over;
        }
        (self.owed.iter()).all(|w| self.confirmed.contains(w) || !live.contains(w))
    }
}

/// The shards a worker tells it has their last replies, once every reply of an iteration
/// is in: those that served the iteration (`owners`) and serve none of the next (`next`,
/// empty after the job's last iteration).
pub fn shards_done_with(owners: &[usize], next: &[usize]) -> Vec<usize> {
    (owners.iter())
        .copied()
        .filter(|s| !next.contains(s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_leaves_once_every_worker_it_answered_last_confirmed() {
        let mut d = Departure::default();
        d.last_served([0, 1]);
        d.last_served([1, 2]);
        let live = [0, 1, 2, 3];
        // Still serving: a hand-over in flight or a slice held.
        d.confirmed(0);
        d.confirmed(1);
        d.confirmed(2);
        assert!(!d.may_leave(true, false, &live));
        let mut d = Departure::default();
        d.last_served([0, 1, 2]);
        assert!(!d.may_leave(false, false, &live));
        d.confirmed(0);
        d.confirmed(3); // Not owed anything: changes nothing.
        assert!(!d.may_leave(false, false, &live));
        d.confirmed(2);
        assert!(!d.may_leave(false, true, &live), "1 has not confirmed");
        d.confirmed(1);
        assert!(d.may_leave(false, false, &live));
    }

    #[test]
    fn a_worker_that_left_or_died_is_not_waited_for() {
        let mut d = Departure::default();
        d.last_served([0, 1, 2]);
        d.confirmed(1);
        assert!(!d.may_leave(false, false, &[0, 1, 2]));
        // 0 left (or was declared dead): the view no longer lists it.
        assert!(!d.may_leave(false, false, &[1, 2]));
        assert!(d.may_leave(false, false, &[1]));
    }

    #[test]
    fn a_shard_that_never_served_waits_for_the_jobs_end() {
        let d = Departure::default();
        assert!(!d.may_leave(false, false, &[0, 1]));
        assert!(d.may_leave(false, true, &[0, 1]));
        assert!(!d.may_leave(true, true, &[0, 1]));
    }

    #[test]
    fn workers_confirm_to_the_shards_that_serve_no_more() {
        // Shard 1 leaves after the iteration: its slices go to 0 and 2.
        assert_eq!(shards_done_with(&[0, 1, 2], &[0, 2]), [1]);
        // Steady state and a joiner: nobody is done.
        assert_eq!(shards_done_with(&[0, 1], &[0, 1]), Vec::<usize>::new());
        assert_eq!(shards_done_with(&[0, 1], &[0, 1, 2]), Vec::<usize>::new());
        // After the job's last iteration every shard that served it is.
        assert_eq!(shards_done_with(&[0, 2], &[]), [0, 2]);
        // Before a worker's first push (it pulled its values) there is nothing to confirm.
        assert_eq!(shards_done_with(&[], &[0, 1]), Vec::<usize>::new());
    }
}
