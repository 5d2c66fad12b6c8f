use super::*;

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
        p.reason
            .to_string()
            .contains("worker 2 already holds block 4")
            && p.reason.to_string().contains("worker 1 handed it over")
            && p.reason
                .to_string()
                .contains("two workers would update one block"),
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
    assert!(
        later.reason.to_string().contains("failed earlier")
            && later.reason.to_string().contains("block 4")
    );
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
        p.reason
            .to_string()
            .contains("produced in round 7 for round 7"),
        "{}",
        p.reason
    );
    assert_eq!(p.orphans, vec!["r"]);
}

#[test]
fn initial_blocks_must_be_distinct() {
    let err = Core::new(3, vec![(1, "a".into()), (1, "b".into())]).unwrap_err();
    assert!(
        err.to_string().contains("initial block 1 given twice"),
        "{err}"
    );
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
    assert!(err.to_string().contains("the ring has 3 workers"), "{err}");
    let err = settle(&mut c, 3, 4, None, BlockFate::Keep("x".into())).unwrap_err();
    assert!(err.to_string().contains("needs none"), "{err}");
    // Keeping a block id that is already held is the duplicate error.
    let err = settle(&mut c, 3, 4, Some(2), BlockFate::Keep("again".into())).unwrap_err();
    assert!(err.to_string().contains("already holds block 2"), "{err}");
}

#[test]
fn a_new_ring_gives_the_worker_its_index_and_fresh_blocks() {
    let mut c = core(2, &[2]);
    c.rering(0, [(0, "new0".to_string())]).unwrap();
    assert_eq!((c.worker(), c.held_ids()), (0, vec![0]));
    // A fresh block serves the next round whatever its number.
    c.dispatch(7, Some(0), "t", "r").unwrap();
    assert_eq!(push_of(c.next_ready().unwrap()), (7, Some("new0".into())));
    // A leaver holds nothing; two blocks of one id are refused.
    c.rering(0, []).unwrap();
    assert!(c.held_ids().is_empty());
    let twice = [(1, "a".to_string()), (1, "b".to_string())];
    assert!(c.rering(1, twice).is_err());
}
