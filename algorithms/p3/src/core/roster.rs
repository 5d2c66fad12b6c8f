//! Which workers an iteration averages over, sans I/O.
//!
//! Every slice of every shard holds a [`WorkerRoster`]: the workers whose gradients of the
//! iteration it collects, and those that left. The roster changes only between
//! iterations, and every slice changes it the same way, because the change comes from the
//! pushes themselves: each worker sends the same [`Announce`] with every slice of an
//! iteration (it leaves after it; the workers it saw join), and a slice completes an
//! iteration only once every member pushed. So the roster of iteration `k + 1` is the one
//! of `k`, plus every worker some member announced as joining (unless it already left),
//! minus those that announced leaving: the same on every slice. The replies of iteration
//! `k` carry it, so a worker knows it before it pushes `k + 1`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The workers of one iteration and those that left the job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerRoster {
    members: BTreeSet<usize>,
    departed: BTreeSet<usize>,
}

/// What a worker's pushes of one iteration say about the next one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announce {
    /// The worker leaves after this iteration.
    pub leaving: bool,
    /// Workers it saw join the cluster that are not members yet.
    pub joiners: Vec<usize>,
    /// Shards it saw join the cluster that serve no slice yet.
    pub shards_joining: Vec<usize>,
    /// Shards that said they leave (their nodes were asked to).
    pub shards_leaving: Vec<usize>,
}

/// A change of the workers, as `metrics.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterChange {
    /// The first iteration averaged over the new set.
    pub iteration: u64,
    /// Workers that joined at `iteration`.
    pub joined: Vec<usize>,
    /// Workers whose last iteration was `iteration - 1`.
    pub left: Vec<usize>,
}

impl WorkerRoster {
    /// A roster of `members`, none departed.
    pub fn new(members: impl IntoIterator<Item = usize>) -> Self {
        WorkerRoster {
            members: members.into_iter().collect(),
            departed: BTreeSet::new(),
        }
    }

    /// The members, in worker order.
    pub fn members(&self) -> &BTreeSet<usize> {
        &self.members
    }

    /// Whether `worker` is a member.
    pub fn contains(&self, worker: usize) -> bool {
        self.members.contains(&worker)
    }

    /// A roster of `members` after `departed` left.
    pub fn from_parts(
        members: impl IntoIterator<Item = usize>,
        departed: impl IntoIterator<Item = usize>,
    ) -> Self {
        WorkerRoster {
            members: members.into_iter().collect(),
            departed: departed.into_iter().collect(),
        }
    }

    /// Those that left, in id order.
    pub fn departed(&self) -> &BTreeSet<usize> {
        &self.departed
    }

    /// Whether `worker` left the job (it never comes back).
    pub fn has_left(&self, worker: usize) -> bool {
        self.departed.contains(&worker)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there is no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `worker`'s rank among the members (its share of the data), if it is one.
    pub fn rank(&self, worker: usize) -> Option<usize> {
        self.members.iter().position(|&w| w == worker)
    }

    /// The roster of the next iteration: the members, plus the `joiners` that are neither
    /// members nor departed, minus the `leaving` ones (who are departed from then on).
    pub fn next(&self, joiners: &BTreeSet<usize>, leaving: &BTreeSet<usize>) -> Self {
        let mut departed = self.departed.clone();
        departed.extend(leaving.iter().copied().filter(|w| self.contains(*w)));
        let members = self
            .members
            .iter()
            .chain(joiners)
            .copied()
            .filter(|w| !departed.contains(w))
            .collect();
        WorkerRoster { members, departed }
    }

    /// A worker takes the shards' word: `members` are those of `iteration`. Members no
    /// longer listed are departed. Returns the change, if any.
    pub fn adopt(&mut self, iteration: u64, members: &[usize]) -> Option<RosterChange> {
        let new: BTreeSet<usize> = members.iter().copied().collect();
        if new == self.members {
            return None;
        }
        let joined = new.difference(&self.members).copied().collect();
        let left: Vec<usize> = self.members.difference(&new).copied().collect();
        self.departed.extend(&left);
        self.members = new;
        Some(RosterChange {
            iteration,
            joined,
            left,
        })
    }

    /// What worker `me` announces with its pushes of the next iteration, given whether its
    /// node was asked to leave and the workers now in the cluster (`live`). It leaves only
    /// as a member and when another member stays: the last worker finishes the job.
    pub fn announce(&self, me: usize, leave_requested: bool, live: &[usize]) -> Announce {
        Announce {
            leaving: leave_requested && self.contains(me) && self.len() > 1,
            joiners: live
                .iter()
                .copied()
                .filter(|w| !self.contains(*w) && !self.has_left(*w))
                .collect(),
            ..Announce::default()
        }
    }

    /// Read as the roster of shards: the announcement's shard part, given the shards in
    /// the cluster now (`live`) and those that said they leave. Shard 0 runs the
    /// coordinator and never leaves, so it keeps slice 0 and every plan has an owner.
    pub fn shard_changes(
        &self,
        live: &[usize],
        leaving: &BTreeSet<usize>,
    ) -> (Vec<usize>, Vec<usize>) {
        let joining = self.announce(usize::MAX, false, live).joiners;
        let left = leaving
            .iter()
            .copied()
            .filter(|&s| s != 0 && self.contains(s))
            .collect();
        (joining, left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ws: &[usize]) -> BTreeSet<usize> {
        ws.iter().copied().collect()
    }

    #[test]
    fn next_adds_joiners_and_drops_leavers_for_good() {
        let r = WorkerRoster::new([0, 1]);
        let r1 = r.next(&set(&[2]), &set(&[]));
        assert_eq!(r1.members(), &set(&[0, 1, 2]));
        assert_eq!(r1.rank(2), Some(2));
        let r2 = r1.next(&set(&[]), &set(&[0]));
        assert_eq!(r2.members(), &set(&[1, 2]));
        assert_eq!(r2.rank(1), Some(0));
        assert!(r2.has_left(0));
        // A stale view proposing the leaver again does not bring it back.
        let r3 = r2.next(&set(&[0, 2]), &set(&[]));
        assert_eq!(r3.members(), &set(&[1, 2]));
        // A worker that is not a member cannot leave (nor is it marked departed).
        let r4 = r3.next(&set(&[]), &set(&[5]));
        assert!(!r4.has_left(5));
        // A joiner that leaves in the same step is proposed and gone.
        let r5 = r4.next(&set(&[3]), &set(&[1]));
        assert_eq!(r5.members(), &set(&[2, 3]));
    }

    #[test]
    fn adopt_reports_the_change_once() {
        let mut r = WorkerRoster::new([0, 1]);
        assert_eq!(r.adopt(3, &[0, 1]), None);
        let c = r.adopt(4, &[0, 1, 2]).unwrap();
        assert_eq!((c.iteration, c.joined, c.left), (4, vec![2], vec![]));
        let c = r.adopt(7, &[1, 2]).unwrap();
        assert_eq!((c.iteration, c.joined, c.left), (7, vec![], vec![0]));
        assert!(r.has_left(0));
        assert_eq!(r.adopt(8, &[1, 2]), None);
    }

    #[test]
    fn announce_leaves_only_when_another_member_stays() {
        let r = WorkerRoster::new([0, 1]).next(&set(&[]), &set(&[1]));
        assert_eq!(r.members(), &set(&[0]));
        // The last member finishes the job; the departed 1 is no joiner.
        let a = r.announce(0, true, &[0, 1, 2]);
        assert_eq!(
            a,
            Announce {
                leaving: false,
                joiners: vec![2],
                ..Announce::default()
            }
        );
        let two = WorkerRoster::new([0, 2]);
        assert!(two.announce(2, true, &[0, 2]).leaving);
        assert!(!two.announce(2, false, &[0, 2]).leaving);
        // A worker that is not a member (a joiner not admitted yet) does not leave.
        assert!(!two.announce(3, true, &[0, 2, 3]).leaving);
    }

    /// Worker 2 joins after iteration 0 and worker 0 leaves after iteration 1, told by
    /// announcements that reach the slices in any order: every slice of both shards moves
    /// its roster at the same boundary, the joiner's pulls (held or not) all start it at
    /// iteration 1, and the parameters are the reference's over each iteration's workers.
    #[test]
    fn shards_change_workers_at_one_boundary_and_match_the_reference() {
        use crate::core::P3CoreError;
        use crate::core::shard::{SliceShardCore, reference_step};
        use crate::core::slicing::SlicePlan;
        use petrel_ml::dnn::FlatSgdMomentum;

        let opt = FlatSgdMomentum::new(0.1, 0.9);
        let counts = [5u64, 3];
        let plan = SlicePlan::new(&counts, 2, 2).unwrap();
        let init: Vec<Vec<f32>> = counts.iter().map(|&c| vec![0.5; c as usize]).collect();
        let mut shards: Vec<SliceShardCore> = (0..2)
            .map(|s| {
                SliceShardCore::elastic(&plan, s, 3, &[0, 1], opt)
                    .unwrap()
                    .ending_at(4)
            })
            .collect();
        for s in plan.slices() {
            let a = s.offset as usize;
            let v = init[s.layer][a..a + s.len as usize].to_vec();
            shards[s.shard].init_slice(s.id, v).unwrap();
        }
        let grad = |w: usize, it: u64, i: usize| {
            (w as f32 + 1.0) * 0.01 + it as f32 * 0.003 + i as f32 * 1e-4
        };
        // A starting worker starts from the initial values at iteration 0.
        let first = shards[0].pull(1, 0).unwrap().unwrap();
        assert_eq!((first.start, first.members), (0, vec![0, 1]));
        let (mut ref_p, mut ref_v) = (init.clone(), vec![vec![0.0; 5], vec![0.0; 3]]);
        let mut start = Vec::new();
        // (iteration, its workers, announcements of worker 1 and worker 0)
        let script: [(u64, &[usize]); 4] =
            [(0, &[0, 1]), (1, &[0, 1, 2]), (2, &[1, 2]), (3, &[1, 2])];
        for (it, workers) in script {
            // The joiner pulls the first slice before iteration 0 completes (held).
            if it == 0 {
                assert_eq!(shards[0].pull(2, 0).unwrap(), None);
            }
            for &w in workers.iter().rev() {
                let announce = Announce {
                    joiners: if it == 0 && w == 1 { vec![2] } else { vec![] },
                    leaving: it == 1 && w == 0,
                    ..Announce::default()
                };
                for s in plan.slices() {
                    let a = s.offset as usize;
                    let g = (a..a + s.len as usize).map(|i| grad(w, it, i)).collect();
                    let out = shards[s.shard].push(it, w, s.id, g, &announce).unwrap();
                    if let Some(out) = out {
                        assert_eq!(
                            out.members,
                            script
                                .get(it as usize + 1)
                                .map_or(vec![1, 2], |n| n.1.to_vec())
                        );
                        let from = crate::core::Pulled::from(&out);
                        start.extend(out.pulls.iter().map(|&j| (j, s.id, from.start)));
                    }
                }
            }
            if it == 0 {
                // The other slices: pulled after the update, answered at once.
                for s in &plan.slices()[1..] {
                    let a = shards[s.shard].pull(2, s.id).unwrap().unwrap();
                    start.push((2, s.id, a.start));
                }
            }
            let wg =
                crate::core::shard::tests::worker_grads(&counts, workers, |w, i| grad(w, it, i));
            reference_step(&opt, &mut ref_p, &mut ref_v, &wg).unwrap();
        }
        assert_eq!(start.len(), plan.slices().len());
        assert!(
            start.iter().all(|&(j, _, it)| j == 2 && it == 1),
            "{start:?}"
        );
        for s in plan.slices() {
            let a = s.offset as usize;
            let want = &ref_p[s.layer][a..a + s.len as usize];
            assert_eq!(
                shards[s.shard].params(s.id).unwrap(),
                want,
                "slice {}",
                s.id
            );
        }
        // The leaver is refused; a pull past the job's end is answered at once.
        assert!(matches!(
            shards[0].push(4, 0, 0, vec![0.0; 2], &Announce::default()),
            Err(P3CoreError::NotAMember { .. })
        ));
        assert!(matches!(
            shards[0].pull(0, 0),
            Err(P3CoreError::NotAMember { .. })
        ));
        let late = shards[1].pull(1, 1).unwrap().unwrap();
        assert_eq!(late.start, 4);
    }
}
