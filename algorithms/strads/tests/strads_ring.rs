//! STRADS ring rotation on real nodes: three ring workers pass blocks to each other with
//! `Handoff` tells while a scheduler on a fourth node dispatches only block ids; a
//! misconfigured ring (one block given to two workers) poisons the receiving worker with a
//! clear error that reaches the scheduler. The same app runs through the serial driver.

use petrel_actors::{Cluster, NodeContext, Topology};
use petrel_strads::kit::serial::{Delivery, SerialRun, run_ring};
use petrel_strads::shells::{
    BlockFate, BlockId, Plan, RingApp, RingOutput, RingPush, Schedule, SchedulerOptions, Step,
    StradsApp, WorkerSet, ring_members, run_scheduler, start_ring_worker,
};
use petrel_strads::{StradsError, StradsModelError};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every push appends `(worker, round, commits seen)` to the block it holds.
struct Trail;

type Visits = Vec<(u32, u64, u64)>;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TrailTask {
    block: u64,
    pass_to: u32,
    collect: bool,
}

impl StradsApp for Trail {
    const DISPATCH_NAME: &'static str = "test.ring.dispatch";
    const COMMIT_NAME: &'static str = "test.ring.commit";
    type Task = TrailTask;
    type Partial = (u64, Option<Visits>);
    type Commit = u64;
}

impl RingApp for Trail {
    const HANDOFF_NAME: &'static str = "test.ring.handoff";
    type Block = Visits;
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
        round: u64,
        task: &TrailTask,
        block: Option<Visits>,
    ) -> Result<RingOutput<(u64, Option<Visits>), Visits>, StradsModelError> {
        let mut block = block.ok_or_else(|| StradsModelError::protocol("no block"))?;
        block.push((self.index, round, self.commits));
        // Make the sub-rounds overlap with the handoffs in flight.
        std::thread::sleep(Duration::from_millis(u64::from(self.index) * 3));
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

/// Sub-round t: worker w holds block (w + t) mod P and passes it to w - 1; the last round
/// collects.
struct Rotation {
    p: usize,
    subrounds: usize,
    collected: Arc<Mutex<Vec<Option<Visits>>>>,
    /// Pause before committing round 0 (lets round 0's handoffs land first).
    pause: Duration,
    /// A broken plan: pass blocks to the successor instead of the predecessor.
    wrong_way: bool,
}

impl Schedule<Trail> for Rotation {
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
        partials: Vec<(u64, Option<Visits>)>,
        _elapsed: Duration,
    ) -> Result<u64, StradsModelError> {
        if round == 0 {
            std::thread::sleep(self.pause);
        }
        let t = round as usize;
        for (w, (b, trail)) in partials.into_iter().enumerate() {
            if b as usize != (w + t) % self.p {
                return Err(StradsModelError::protocol(format!(
                    "worker {w} answered for block {b}"
                )));
            }
            if let Some(trail) = trail {
                self.collected.lock().unwrap()[b as usize] = Some(trail);
            }
        }
        Ok(round)
    }
}

const P: usize = 3;
const SUBROUNDS: usize = 8;

/// Block b visits worker (b - t) mod P in sub-round t, after exactly t commits.
fn expected_trail(p: usize, subrounds: usize, b: usize) -> Visits {
    (0..=subrounds)
        .map(|t| (((b + p * (t + 1) - t) % p) as u32, t as u64, t as u64))
        .collect()
}

fn serial_run(
    p: usize,
    subrounds: usize,
    wrong_way: bool,
    delivery: Delivery,
) -> Result<(Vec<Option<Visits>>, SerialRun), StradsError> {
    let collected = Arc::new(Mutex::new(vec![None; p]));
    let mut sched = Rotation {
        p,
        subrounds,
        collected: collected.clone(),
        pause: Duration::ZERO,
        wrong_way,
    };
    let mut workers: Vec<TrailWorker> = (0..p as u32)
        .map(|index| TrailWorker { index, commits: 0 })
        .collect();
    let initial = (0..p as u64).map(|b| vec![(b, Vec::new())]).collect();
    let run = run_ring(&mut sched, &mut workers, initial, delivery)?;
    let collected = collected.lock().unwrap().clone();
    Ok((collected, run))
}

#[test]
fn local_ring_rotates_blocks_in_any_delivery_order() {
    for delivery in [
        Delivery::Late,
        Delivery::Shuffled(1),
        Delivery::Shuffled(99),
    ] {
        let (collected, run) = serial_run(3, 7, false, delivery).unwrap();
        assert_eq!(run.rounds, 8);
        for (b, trail) in collected.iter().enumerate() {
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
    let err = serial_run(3, 4, true, Delivery::Late)
        .unwrap_err()
        .to_string();
    assert!(err.contains("round 1: worker 0 waits for block 1"), "{err}");
    // With one worker, every pass is to itself and both plans agree.
    serial_run(1, 4, true, Delivery::Late).unwrap();
}

fn ring_cluster(
    transport: petrel_actors::Transport,
    duplicate: bool,
    collected: Arc<Mutex<Vec<Option<Visits>>>>,
    outcome: Arc<Mutex<Option<Result<u64, String>>>>,
) -> Cluster {
    let mut topo = Topology::builder("ring")
        .transport(transport)
        .node("sched", &["ring-scheduler"]);
    for w in 0..P {
        topo = topo.node(&format!("w{w}"), &["ring-worker"]);
    }
    let settings = topo.build().unwrap();
    Cluster::new(settings)
        .role("ring-worker", move |ctx: NodeContext| {
            Box::pin(async move {
                let workers = ctx.nodes_with_role("ring-worker");
                let index = workers
                    .iter()
                    .position(|n| *n == ctx.spec.name)
                    .ok_or("not a worker")?;
                let ring = ring_members(&ctx.node, &workers, "ring").map_err(|e| e.to_string())?;
                let mut initial = vec![(index as BlockId, Vec::new())];
                if duplicate && index == 0 {
                    // Misconfiguration: worker 0 also starts with worker 1's block, which
                    // worker 1 passes to worker 0 after round 0.
                    initial.push((1, Vec::new()));
                }
                start_ring_worker::<Trail, _>(
                    &ctx.node,
                    "ring",
                    index as u32,
                    ring,
                    TrailWorker {
                        index: index as u32,
                        commits: 0,
                    },
                    initial,
                )
                .map_err(|e| e.to_string())?;
                ctx.barrier("ring-ready").await.map_err(|e| e.to_string())
            })
        })
        .role("ring-scheduler", move |ctx: NodeContext| {
            let (collected, outcome) = (collected.clone(), outcome.clone());
            Box::pin(async move {
                ctx.barrier("ring-ready").await.map_err(|e| e.to_string())?;
                let workers = ctx.nodes_with_role("ring-worker");
                let set = WorkerSet::<Trail>::resolve(&ctx.node, &workers, "ring")
                    .map_err(|e| e.to_string())?;
                let mut app = Rotation {
                    p: P,
                    subrounds: SUBROUNDS,
                    collected,
                    pause: Duration::from_millis(if duplicate { 300 } else { 0 }),
                    wrong_way: false,
                };
                let opts = SchedulerOptions {
                    timeout: Duration::from_secs(10),
                    ..SchedulerOptions::default()
                };
                let result = run_scheduler(&mut app, &set, &opts)
                    .await
                    .map(|s| s.rounds)
                    .map_err(|e| e.to_string());
                *outcome.lock().unwrap() = Some(result);
                Ok::<(), String>(())
            })
        })
}

#[test]
fn three_workers_pass_blocks_around_the_ring_over_quic() {
    let collected = Arc::new(Mutex::new(vec![None; P]));
    let outcome = Arc::new(Mutex::new(None));
    ring_cluster(
        petrel_actors::Transport::Quic,
        false,
        collected.clone(),
        outcome.clone(),
    )
    .run_in_process()
    .unwrap();
    assert_eq!(
        outcome.lock().unwrap().clone(),
        Some(Ok(SUBROUNDS as u64 + 1))
    );
    let collected = collected.lock().unwrap();
    for (b, trail) in collected.iter().enumerate() {
        let trail = trail.as_ref().unwrap();
        // The worker applied the scheduler's messages in order while waiting for handoffs.
        assert_eq!(trail, &expected_trail(P, SUBROUNDS, b), "block {b}");
    }
}

#[test]
fn a_block_held_twice_poisons_the_receiver_over_memory() {
    let collected = Arc::new(Mutex::new(vec![None; P]));
    let outcome = Arc::new(Mutex::new(None));
    ring_cluster(
        petrel_actors::Transport::Memory,
        true,
        collected,
        outcome.clone(),
    )
    .run_in_process()
    .unwrap();
    let result = outcome.lock().unwrap().clone().unwrap();
    let err = result.unwrap_err();
    // Worker 1 hands block 1 to worker 0 after round 0, while worker 0 still holds its
    // wrong copy: worker 0 is poisoned and fails the round 1 dispatch with the reason.
    assert!(
        err.contains("round 1: worker 0")
            && err.contains("worker 0 already holds block 1 and worker 1 handed it over")
            && err.contains("two workers would update one block"),
        "{err}"
    );
}
