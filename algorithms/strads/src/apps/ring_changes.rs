//! A ring app's changes of the workers driven as the actor shells drive them (one round
//! at a time, blocks handed on), for the strads-mf and LDA unit tests: a job from two
//! workers, a joiner `w2` built as a standby node builds it, the changes made at the
//! boundaries the scheduler takes them.

use crate::core::app::{BlockFate, BlockId, Plan, RingApp, RingPush, Schedule, Step};
use crate::core::roster::{NewRing, Reshape};
use crate::kit::{JobShape, RingHalf, StradsJob};
use std::collections::BTreeMap;
use std::time::Duration;

/// Worker `index` of `of` built as its node builds it.
pub(crate) fn worker<J, W>(job: &J::Config, index: usize, of: usize) -> W
where
    J: StradsJob<Worker = RingHalf<J, W>> + RingApp,
    W: RingPush<J>,
{
    let shape = JobShape {
        workers: of,
        schedulers: 1,
    };
    J::worker(job, index, &shape).unwrap().logic
}

/// Workers by node name; blocks wherever the last push passed them.
struct Ring<J: RingApp, W> {
    workers: BTreeMap<String, W>,
    blocks: BTreeMap<BlockId, J::Block>,
}

impl<J: RingApp, W: RingPush<J>> Ring<J, W> {
    /// One round over `names` (dispatch order): the partials, then the commit to all.
    fn round<S: Schedule<J>>(
        &mut self,
        sched: &mut S,
        round: u64,
        plan: Plan<J::Task>,
        names: &[String],
    ) {
        let tasks = plan
            .into_tasks(names.len())
            .unwrap_or_else(|_| panic!("a plan per worker"));
        let mut partials = Vec::new();
        for (name, task) in names.iter().zip(tasks) {
            let w = self.workers.get_mut(name).unwrap();
            if let Some(ring) = J::new_ring(&task) {
                let index = ring.iter().position(|n| n == name).map(|i| i as u32);
                let (partial, held) = w.rering(round, &task, index).unwrap();
                self.blocks.extend(held);
                partials.push(partial);
                continue;
            }
            let block = J::block_needed(&task).map(|b| self.blocks.remove(&b).unwrap());
            let out = w.push(round, &task, block).unwrap();
            if let BlockFate::PassTo { block, .. } = out.block {
                let id = J::block_needed(&task).unwrap();
                // The block a worker passes on keeps its id.
                self.blocks.insert(id, block);
            }
            partials.push(out.partial);
        }
        let commit = sched.pull(round, partials, Duration::ZERO).unwrap();
        for name in names {
            self.workers
                .get_mut(name)
                .unwrap()
                .commit(round, &commit)
                .unwrap();
        }
    }
}

/// Runs the job from two workers; `changes[i] = (round, change)` is announced then and
/// made at the first boundary the scheduler takes it (with `withdrawn`, the first one
/// goes away once the scheduler first answered it). The scheduler at the end.
pub(crate) fn run_with<J, W>(
    job: &J::Config,
    mut changes: Vec<(u64, Reshape)>,
    mut withdrawn: bool,
) -> J::Scheduler
where
    J: StradsJob<Worker = RingHalf<J, W>> + RingApp,
    W: RingPush<J>,
{
    let shape = JobShape {
        workers: 2,
        schedulers: 1,
    };
    let mut sched = J::scheduler(job, &shape).unwrap();
    let mut names: Vec<String> = vec!["w0".into(), "w1".into()];
    let mut ring = Ring::<J, W> {
        workers: BTreeMap::new(),
        blocks: BTreeMap::new(),
    };
    for (i, name) in names.iter().enumerate() {
        let half = J::worker(job, i, &shape).unwrap();
        ring.blocks.extend(half.initial);
        ring.workers.insert(name.clone(), half.logic);
    }
    // The joiner builds its half as a standby node does (over all three nodes).
    let all = JobShape {
        workers: 3,
        ..shape
    };
    ring.workers
        .insert("w2".into(), J::joiner(job, 2, &all).unwrap().logic);
    for round in 0.. {
        if let Some((at, change)) = changes.first().cloned()
            && round >= at
        {
            match sched.reshape(round, &change).unwrap() {
                Some(step) => {
                    let Step::Run(plan) = step else {
                        panic!("a change's round runs")
                    };
                    ring.round(&mut sched, round, plan, &change.dealt);
                    names = change.staying().to_vec();
                    changes.remove(0);
                    continue;
                }
                None if std::mem::take(&mut withdrawn) => {
                    changes.remove(0);
                }
                None => {}
            }
        }
        match sched.schedule(round, 0) {
            Step::Run(plan) => ring.round(&mut sched, round, plan, &names),
            Step::Done => break,
            Step::Wait => panic!("nothing in flight"),
        }
    }
    assert!(changes.is_empty(), "every change was made");
    sched
}

/// The ring `w1` alone (what a leave of `w0` from two workers re-forms).
pub(crate) fn ring_of_w1() -> NewRing {
    NewRing {
        ring: vec!["w1".into()],
        joined: vec![false],
        ranges: Vec::new(),
    }
}

/// A change dealt to `dealt`, the first `staying` of them staying.
pub(crate) fn change(dealt: &[&str], staying: usize, joined: &[bool]) -> Reshape {
    Reshape {
        dealt: dealt.iter().map(|s| s.to_string()).collect(),
        staying,
        joined: joined.to_vec(),
        lost: Vec::new(),
    }
}

/// A leave of `w0` announced at round 0 (a boundary) to `job`'s scheduler over two
/// workers: the first answer is no change yet, and the next round (returned) gathers the
/// model. The scheduler of `fixed` (static dealing) refuses the change, and `job`'s a
/// death.
pub(crate) fn first_change_round<J: StradsJob>(job: &J::Config, fixed: &J::Config) -> Vec<J::Task>
where
    J::Task: std::fmt::Debug,
{
    let shape = JobShape {
        workers: 2,
        schedulers: 1,
    };
    let leave = change(&["w1", "w0"], 1, &[false, false]);
    let mut sched = J::scheduler(fixed, &shape).unwrap();
    assert!(sched.reshape(0, &leave).is_err());
    let mut dead = leave.clone();
    dead.lost = vec!["w0".into()];
    let mut sched = J::scheduler(job, &shape).unwrap();
    assert!(sched.reshape(0, &dead).is_err());
    assert!(sched.reshape(0, &leave).unwrap().is_none());
    let Step::Run(Plan::PerWorker(tasks)) = sched.schedule(0, 0) else {
        panic!("a gathering round")
    };
    tasks
}
