use super::*;
use crate::shells::Plan;

type Core = RingCore<&'static str, u64, String, &'static str>;

fn core(worker: u32, blocks: &[u64]) -> Core {
    RingCore::new(worker, blocks.iter().map(|&b| (b, format!("block{b}")))).unwrap()
}

fn push_of(r: Option<Ready<&'static str, u64, String, &'static str>>) -> (u64, Option<String>) {
    match r {
        Some(Ready::Push { round, block, .. }) => (round, block),
        other => panic!("expected a push, got {other:?}"),
    }
}

#[test]
fn a_dispatch_waits_for_its_block_and_keeps_the_scheduler_order() {
    let mut c = core(1, &[]);
    c.commit(0, 100);
    c.dispatch(1, Some(5), "t1", "r1").unwrap();
    c.commit(1, 101);
    c.dispatch(2, None, "t2", "r2").unwrap();
    // The commit at the head runs at once; the dispatch waits for block 5, and the commit
    // and dispatch behind it wait too.
    assert!(matches!(
        c.next_ready().unwrap(),
        Some(Ready::Commit {
            round: 0,
            commit: 100
        })
    ));
    assert!(c.next_ready().unwrap().is_none());
    assert_eq!(c.waiting_for(), Some(5));
    assert_eq!(c.queued(), 3);
    // Another block does not unblock it.
    c.handoff(6, "block6".into(), 0, 2).unwrap();
    assert!(c.next_ready().unwrap().is_none());
    c.handoff(5, "block5".into(), 0, 2).unwrap();
    assert_eq!(push_of(c.next_ready().unwrap()), (1, Some("block5".into())));
    assert!(!c.holds(5), "the push owns the block now");
    assert!(matches!(
        c.next_ready().unwrap(),
        Some(Ready::Commit {
            round: 1,
            commit: 101
        })
    ));
    assert_eq!(push_of(c.next_ready().unwrap()), (2, None));
    assert!(c.next_ready().unwrap().is_none());
    assert_eq!(c.held_ids(), vec![6]);
    assert_eq!(c.waiting_for(), None);
}

#[test]
fn a_block_that_arrived_early_serves_the_dispatch_at_once() {
    let mut c = core(0, &[]);
    c.handoff(3, "block3".into(), 4, 1).unwrap();
    c.dispatch(5, Some(3), "t", "r").unwrap();
    assert_eq!(push_of(c.next_ready().unwrap()), (5, Some("block3".into())));
}

#[test]
fn a_duplicate_handoff_poisons_the_worker() {
    let mut c = core(2, &[4]);
    c.dispatch(1, Some(9), "t1", "r1").unwrap();
    c.dispatch(2, Some(4), "t2", "r2").unwrap();
    let p = c.handoff(4, "other".into(), 0, 1).unwrap_err();
    assert!(
        p.reason.contains("worker 2 already holds block 4")
            && p.reason.contains("worker 1 handed it over")
            && p.reason.contains("two workers would update one block"),
        "{}",
        p.reason
    );
    assert_eq!(
        p.orphans,
        vec!["r1", "r2"],
        "queued dispatches are answered"
    );
    assert!(c.failed().is_some());
    // Later dispatches fail at once with the first error; commits and blocks are dropped.
    let later = c.dispatch(3, None, "t3", "r3").unwrap_err();
    assert!(later.reason.contains("failed earlier") && later.reason.contains("block 4"));
    assert_eq!(later.orphans, vec!["r3"]);
    assert!(!c.commit(3, 1));
    assert!(c.handoff(8, "x".into(), 0, 1).is_ok());
    assert!(c.next_ready().unwrap().is_none());
}

#[test]
fn a_block_version_from_the_same_round_is_a_protocol_error() {
    let mut c = core(0, &[]);
    c.handoff(1, "b".into(), 7, 1).unwrap();
    c.dispatch(7, Some(1), "t", "r").unwrap();
    let p = c.next_ready().unwrap_err();
    assert!(
        p.reason.contains("produced in round 7 for round 7"),
        "{}",
        p.reason
    );
    assert_eq!(p.orphans, vec!["r"]);
}

#[test]
fn initial_blocks_must_be_distinct() {
    let err = Core::new(3, vec![(1, "a".into()), (1, "b".into())]).unwrap_err();
    assert!(err.contains("initial block 1 given twice"), "{err}");
}

#[test]
fn settle_keeps_passes_or_rejects() {
    let mut c = core(1, &[]);
    // Keep and pass-to-self go back into the store, stamped with the round.
    assert_eq!(
        settle(&mut c, 3, 4, Some(2), BlockFate::Keep("k".into())),
        Ok(None)
    );
    assert!(c.holds(2));
    assert_eq!(
        settle(
            &mut c,
            3,
            4,
            Some(5),
            BlockFate::PassTo {
                worker: 1,
                block: "s".into()
            }
        ),
        Ok(None)
    );
    assert_eq!(c.held_ids(), vec![2, 5]);
    // A block for another worker is sent by the shell.
    assert_eq!(
        settle(
            &mut c,
            3,
            4,
            Some(6),
            BlockFate::PassTo {
                worker: 0,
                block: "o".into()
            }
        ),
        Ok(Some((0, 6, "o".to_string())))
    );
    assert_eq!(settle(&mut c, 3, 4, Some(7), BlockFate::Consumed), Ok(None));
    assert_eq!(settle(&mut c, 3, 4, None, BlockFate::Consumed), Ok(None));
    let err = settle(
        &mut c,
        3,
        4,
        Some(8),
        BlockFate::PassTo {
            worker: 3,
            block: "x".into(),
        },
    )
    .unwrap_err();
    assert!(err.contains("the ring has 3 workers"), "{err}");
    let err = settle(&mut c, 3, 4, None, BlockFate::Keep("x".into())).unwrap_err();
    assert!(err.contains("needs none"), "{err}");
    // Keeping a block id that is already held is the duplicate error.
    let err = settle(&mut c, 3, 4, Some(2), BlockFate::Keep("again".into())).unwrap_err();
    assert!(err.contains("already holds block 2"), "{err}");
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
    ) -> Result<RingOutput<(u64, Option<Vec<(u32, u64)>>), Vec<(u32, u64)>>, String> {
        let mut block = block.ok_or("no block")?;
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

    fn commit(&mut self, round: u64, commit: &u64) -> Result<(), String> {
        if *commit != round {
            return Err(format!("commit {commit} in round {round}"));
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
    ) -> Result<u64, String> {
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
) -> Result<(TrailSchedule, LocalRun), String> {
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
    let run = run_local(&mut sched, &mut workers, initial, delivery)?;
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
    let err = trail_run(3, 4, true, Delivery::Late).unwrap_err();
    assert!(err.contains("round 1: worker 0 waits for block 1"), "{err}");
    // With one worker, every pass is to itself and both plans agree.
    trail_run(1, 4, true, Delivery::Late).unwrap();
}
