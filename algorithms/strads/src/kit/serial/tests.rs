use super::*;
use crate::core::app::{BlockFate, BlockId, RingApp, RingOutput, RingPush, StradsApp};
use crate::kit::{JobShape, StradsJob};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Builds job `J`'s scheduler half and `workers` worker halves from `config`, checks that
/// they all digest the data alike ([`StradsJob::scheduler_digest`],
/// [`StradsJob::worker_digest`]) and returns that digest.
pub(crate) fn common_digest<J: StradsJob>(config: &J::Config, workers: usize) -> Option<u64> {
    let shape = &JobShape {
        workers,
        schedulers: 1,
    };
    let scheduler = J::scheduler(config, shape).expect("scheduler half");
    let digest = J::scheduler_digest(&scheduler);
    for w in 0..shape.workers {
        let worker = J::worker(config, w, shape).expect("worker half");
        assert_eq!(J::worker_digest(&worker), digest, "worker {w}");
    }
    digest
}

/// A toy ring app: every push appends `(worker, commits seen)` to the block's trail.
struct Trail;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TrailTask {
    block: u64,
    pass_to: u32,
    collect: bool,
}

impl StradsApp for Trail {
    const DISPATCH_NAME: &'static str = "test.ring.trail.dispatch";
    const COMMIT_NAME: &'static str = "test.ring.trail.commit";
    type Task = TrailTask;
    type Partial = (u64, Option<Vec<(u32, u64)>>);
    type Commit = u64;
}

impl RingApp for Trail {
    const HANDOFF_NAME: &'static str = "test.ring.trail.handoff";
    type Block = Vec<(u32, u64)>;
    fn block_needed(task: &TrailTask) -> Option<BlockId> {
        Some(task.block)
    }
}

struct TrailWorker {
    index: u32,
    commits: u64,
}

impl RingPush<Trail> for TrailWorker {
    fn push(
        &mut self,
        _round: u64,
        task: &TrailTask,
        block: Option<Vec<(u32, u64)>>,
    ) -> Result<RingOutput<(u64, Option<Vec<(u32, u64)>>), Vec<(u32, u64)>>, StradsModelError> {
        let mut block = block.ok_or_else(|| StradsModelError::protocol("no block"))?;
        block.push((self.index, self.commits));
        Ok(if task.collect {
            RingOutput {
                partial: (task.block, Some(block)),
                block: BlockFate::Consumed,
            }
        } else {
            RingOutput {
                partial: (task.block, None),
                block: BlockFate::PassTo {
                    worker: task.pass_to,
                    block,
                },
            }
        })
    }

    fn commit(&mut self, round: u64, commit: &u64) -> Result<(), StradsModelError> {
        if *commit != round {
            return Err(StradsModelError::protocol(format!(
                "commit {commit} in round {round}"
            )));
        }
        self.commits += 1;
        Ok(())
    }
}

#[derive(Debug)]
struct TrailSchedule {
    p: usize,
    subrounds: usize,
    /// A broken plan: pass blocks to the successor instead of the predecessor.
    wrong_way: bool,
    collected: Vec<Option<Vec<(u32, u64)>>>,
}

impl Schedule<Trail> for TrailSchedule {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<TrailTask> {
        if in_flight > 0 {
            return Step::Wait;
        }
        let t = round as usize;
        if t > self.subrounds {
            return Step::Done;
        }
        let p = self.p;
        let step = if self.wrong_way { 1 } else { p - 1 };
        Step::Run(Plan::PerWorker(
            (0..p)
                .map(|w| TrailTask {
                    block: ((w + t) % p) as u64,
                    pass_to: ((w + step) % p) as u32,
                    collect: t == self.subrounds,
                })
                .collect(),
        ))
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<(u64, Option<Vec<(u32, u64)>>)>,
        _elapsed: Duration,
    ) -> Result<u64, StradsModelError> {
        for (b, trail) in partials {
            if trail.is_some() {
                self.collected[b as usize] = trail;
            }
        }
        Ok(round)
    }
}

fn trail_run(
    p: usize,
    subrounds: usize,
    wrong_way: bool,
    delivery: Delivery,
) -> Result<(TrailSchedule, SerialRun), SerialRunError> {
    let mut sched = TrailSchedule {
        p,
        subrounds,
        wrong_way,
        collected: vec![None; p],
    };
    let mut workers: Vec<TrailWorker> = (0..p as u32)
        .map(|index| TrailWorker { index, commits: 0 })
        .collect();
    let initial = (0..p as u64).map(|b| vec![(b, Vec::new())]).collect();
    let run = run_ring(&mut sched, &mut workers, initial, delivery)?;
    Ok((sched, run))
}

/// Block b in sub-round t is with worker (b - t) mod P, after t commits.
fn expected_trail(p: usize, subrounds: usize, b: usize) -> Vec<(u32, u64)> {
    (0..=subrounds)
        .map(|t| (((b + p * (t + 1) - t) % p) as u32, t as u64))
        .collect()
}

#[test]
fn local_ring_rotates_blocks_in_any_delivery_order() {
    for delivery in [
        Delivery::Late,
        Delivery::Shuffled(1),
        Delivery::Shuffled(99),
    ] {
        let (sched, run) = trail_run(3, 7, false, delivery).unwrap();
        assert_eq!(run.rounds, 8);
        for (b, trail) in sched.collected.iter().enumerate() {
            assert_eq!(
                trail.as_ref().unwrap(),
                &expected_trail(3, 7, b),
                "{delivery:?}"
            );
        }
        // Collected blocks left the ring.
        assert!(run.held.iter().all(Vec::is_empty), "{:?}", run.held);
    }
}

#[test]
fn local_ring_reports_a_plan_that_sends_blocks_the_wrong_way() {
    let err = trail_run(3, 4, true, Delivery::Late)
        .unwrap_err()
        .to_string();
    assert!(err.contains("round 1: worker 0 waits for block 1"), "{err}");
    // With one worker, every pass is to itself and both plans agree.
    trail_run(1, 4, true, Delivery::Late).unwrap();
}
