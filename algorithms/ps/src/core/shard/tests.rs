use super::*;
use crate::core::types::{RowUpdate, UpdateRuleSpec};

use crate::core::testing::{T, read, spec};

fn batch(seq: u64, row: u64, vals: [f32; 2]) -> UpdateBatch {
    UpdateBatch {
        seq,
        updates: vec![RowUpdate {
            table: T,
            row: RowId(row),
            delta: Row::Dense(vals.to_vec()).into(),
        }],
    }
}

fn reply_data(a: &ShardAction) -> (Row, Clock) {
    match a {
        ShardAction::Reply {
            row_data,
            row_clock,
            ..
        } => ((**row_data).clone(), *row_clock),
        other => panic!("expected reply, got {other:?}"),
    }
}

/// Sum of `delta` per clock for row 3, worker `w`: clock c adds `[c + 1, w]`.
fn step(s: &mut PsShardCore, w: u32, clock: Clock, seq: u64) {
    let d = [clock as f32 + 1.0, w as f32 + 1.0];
    s.apply_updates(WorkerId(w), clock, &batch(seq, 3, d))
        .unwrap();
    s.clock(WorkerId(w), clock).unwrap();
}

#[test]
fn checkpoint_cut_excludes_updates_of_fast_workers() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Ssp { staleness: 5 })]).unwrap();
    s.enable_checkpoints(2).unwrap();
    // Worker 0 runs ahead through clocks 0..5; worker 1 is still at clock 0.
    for c in 0..5 {
        step(&mut s, 0, c, c + 1);
    }
    assert!(s.take_checkpoints().is_empty());
    step(&mut s, 1, 0, 1);
    assert!(
        s.take_checkpoints().is_empty(),
        "min clock 1: no checkpoint yet"
    );
    step(&mut s, 1, 1, 2);
    // Min clock 2: the cut has clocks 0 and 1 of both workers, nothing of clock >= 2.
    let ready = s.take_checkpoints();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].0, 2);
    let row = &ready[0].1[0].rows;
    assert_eq!(
        row,
        &vec![(
            RowId(3),
            Row::Dense(vec![1.0 + 2.0 + 1.0 + 2.0, 2.0 * 1.0 + 2.0 * 2.0])
        )]
    );
    // The live row has every update.
    assert_eq!(
        s.row(T, RowId(3)),
        Some(&Row::Dense(vec![15.0 + 3.0, 5.0 * 1.0 + 2.0 * 2.0]))
    );
    step(&mut s, 1, 2, 3);
    step(&mut s, 1, 3, 4);
    let ready = s.take_checkpoints();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].0, 4);
    // Clocks 0..3 of both: 2 * (1 + 2 + 3 + 4), 4 * 1 + 4 * 2.
    assert_eq!(
        ready[0].1[0].rows,
        vec![(RowId(3), Row::Dense(vec![20.0, 12.0]))]
    );
}

#[test]
fn eval_cuts_are_exact_at_their_own_stride_beside_checkpoints() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Ssp { staleness: 5 })]).unwrap();
    s.enable_checkpoints(4).unwrap();
    s.enable_eval_cuts(2);
    for c in 0..5 {
        step(&mut s, 0, c, c + 1);
    }
    for c in 0..4 {
        step(&mut s, 1, c, c + 1);
    }
    // Min clock 4: evaluation cuts at 2 and 4, a checkpoint at 4, each without any update
    // of worker 0's clock 4.
    let evals = s.take_eval_cuts();
    assert_eq!(evals.iter().map(|e| e.0).collect::<Vec<_>>(), [2, 4]);
    assert_eq!(
        evals[0].1[0].rows,
        vec![(RowId(3), Row::Dense(vec![6.0, 6.0]))]
    );
    assert_eq!(
        evals[1].1[0].rows,
        vec![(RowId(3), Row::Dense(vec![20.0, 12.0]))]
    );
    let checkpoints = s.take_checkpoints();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0], evals[1]);
    assert!(s.take_eval_cuts().is_empty(), "each cut is handed out once");
}

#[test]
fn checkpoint_without_fast_workers_is_the_live_table_and_restores_on_schedule() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Bsp)]).unwrap();
    s.enable_checkpoints(3).unwrap();
    for c in 0..3 {
        step(&mut s, 0, c, c + 1);
        step(&mut s, 1, c, c + 1);
    }
    let ready = s.take_checkpoints();
    assert_eq!(ready.len(), 1);
    assert_eq!((ready[0].0, &ready[0].1), (3, &s.snapshot()));
    let mut r = PsShardCore::restore(
        2,
        vec![spec(Consistency::Bsp)],
        &RuleRegistry::new(),
        ready[0].1.clone(),
        3,
    )
    .unwrap();
    r.enable_checkpoints(3).unwrap();
    for c in 3..6 {
        step(&mut r, 0, c, c - 2);
        step(&mut r, 1, c, c - 2);
        step(&mut s, 0, c, c + 1);
        step(&mut s, 1, c, c + 1);
    }
    assert_eq!(r.take_checkpoints(), s.take_checkpoints());
    assert_eq!(r.snapshot(), s.snapshot());
}

#[test]
fn checkpoints_refuse_rules_with_state_on_the_shard() {
    let t = spec(Consistency::Bsp).with_rule(UpdateRuleSpec::Adagrad {
        learning_rate: 0.1,
        eps: 1e-3,
    });
    let mut s = PsShardCore::new(1, vec![t]).unwrap();
    let e = s.enable_checkpoints(2).unwrap_err().to_string();
    assert!(e.contains("checkpoint"), "{e}");
    s.enable_checkpoints(0).unwrap();
}

#[test]
fn read_served_immediately_when_clock_suffices() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Ssp { staleness: 1 })]).unwrap();
    let out = s
        .handle_read(&read(WorkerId(0), 7, T, RowId(3), 0))
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(reply_data(&out[0]), (Row::Dense(vec![0.0, 0.0]), 0));
}

#[test]
fn held_read_released_when_min_clock_advances() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Bsp)]).unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(1, 3, [1.0, 0.0]))
        .unwrap();
    assert!(s.clock(WorkerId(0), 0).unwrap().is_empty());
    assert!(
        s.handle_read(&read(WorkerId(0), 9, T, RowId(3), 1))
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.pending_reads(), 1);
    s.apply_updates(WorkerId(1), 0, &batch(1, 3, [0.0, 2.0]))
        .unwrap();
    let out = s.clock(WorkerId(1), 0).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(reply_data(&out[0]), (Row::Dense(vec![1.0, 2.0]), 1));
    match &out[0] {
        ShardAction::Reply {
            request_id,
            ack_seq,
            worker,
            ..
        } => assert_eq!((*request_id, *ack_seq, *worker), (9, 1, WorkerId(0))),
        _ => unreachable!(),
    }
    assert_eq!(s.pending_reads(), 0);
    assert_eq!(s.min_clock(), 1);
}

#[test]
fn clock_and_seq_validation() {
    let mut s = PsShardCore::new(1, vec![spec(Consistency::Bsp)]).unwrap();
    assert!(matches!(
        s.clock(WorkerId(0), 1),
        Err(PsCoreError::ClockMismatch { expected: 0, .. })
    ));
    assert!(matches!(
        s.apply_updates(WorkerId(5), 0, &batch(1, 0, [1.0, 1.0])),
        Err(PsCoreError::UnknownWorker(_))
    ));
    s.apply_updates(WorkerId(0), 0, &batch(2, 0, [1.0, 1.0]))
        .unwrap();
    assert!(
        s.apply_updates(WorkerId(0), 0, &batch(2, 0, [1.0, 1.0]))
            .is_err()
    );
    // Invalid shape: whole batch rejected, nothing applied.
    let mut b = batch(3, 1, [1.0, 1.0]);
    b.updates.push(RowUpdate {
        table: T,
        row: RowId(2),
        delta: Row::Dense(vec![1.0]).into(),
    });
    assert!(matches!(
        s.apply_updates(WorkerId(0), 0, &b),
        Err(PsCoreError::RowMismatch { .. })
    ));
    assert!(s.row(T, RowId(1)).is_none());
    assert!(PsShardCore::new(0, vec![]).is_err());
    assert!(PsShardCore::new(1, vec![spec(Consistency::Bsp), spec(Consistency::Bsp)]).is_err());
}

#[test]
fn early_partial_updates_do_not_advance_clock() {
    let mut s = PsShardCore::new(1, vec![spec(Consistency::Bsp)]).unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(1, 0, [1.0, 0.0]))
        .unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(2, 0, [1.0, 0.0]))
        .unwrap();
    assert_eq!(s.worker_clock(WorkerId(0)).unwrap(), 0);
    assert_eq!(s.min_clock(), 0);
    let msg = ShardBatch {
        shard: 0,
        worker: WorkerId(0),
        clock: 0,
        end_of_clock: true,
        batch: batch(3, 0, [1.0, 0.0]),
    };
    s.handle_batch(&msg).unwrap();
    assert_eq!(s.row(T, RowId(0)), Some(&Row::Dense(vec![3.0, 0.0])));
    assert_eq!(s.min_clock(), 1);
}

#[test]
fn dead_worker_no_longer_holds_back_min_clock() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Bsp)]).unwrap();
    s.clock(WorkerId(0), 0).unwrap();
    s.handle_read(&read(WorkerId(0), 1, T, RowId(0), 1))
        .unwrap();
    s.handle_read(&read(WorkerId(1), 2, T, RowId(0), 1))
        .unwrap();
    let out = s.remove_worker(WorkerId(1)).unwrap();
    assert_eq!(out.len(), 1, "only the live worker's read is served");
    assert_eq!(out[0].worker(), WorkerId(0));
    assert_eq!(s.min_clock(), 1);
    assert!(matches!(
        s.clock(WorkerId(1), 0),
        Err(PsCoreError::DeadWorker(_))
    ));
    // Last worker gone: min clock stays.
    s.remove_worker(WorkerId(0)).unwrap();
    assert_eq!(s.min_clock(), 1);
}

#[test]
fn async_reads_never_wait() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Async)]).unwrap();
    let out = s
        .handle_read(&read(WorkerId(0), 1, T, RowId(0), 100))
        .unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn essp_pushes_only_changed_subscribed_rows() {
    let mut s = PsShardCore::new(2, vec![spec(Consistency::Essp { staleness: 0 })]).unwrap();
    // Worker 0 subscribes rows 1 and 2; worker 1 subscribes row 2.
    s.handle_read(&read(WorkerId(0), 1, T, RowId(1), 0))
        .unwrap();
    s.handle_read(&read(WorkerId(0), 2, T, RowId(2), 0))
        .unwrap();
    s.handle_read(&read(WorkerId(1), 3, T, RowId(2), 0))
        .unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(1, 1, [1.0, 0.0]))
        .unwrap();
    s.apply_updates(WorkerId(1), 0, &batch(1, 3, [1.0, 0.0]))
        .unwrap();
    s.clock(WorkerId(0), 0).unwrap();
    let out = s.clock(WorkerId(1), 0).unwrap();
    let mut pushes: Vec<_> = out
        .iter()
        .map(|a| match a {
            ShardAction::Push {
                worker,
                rows,
                clock,
                ..
            } => (
                worker.0,
                rows.iter().map(|r| r.0.0).collect::<Vec<_>>(),
                *clock,
            ),
            _ => panic!("unexpected {a:?}"),
        })
        .collect();
    pushes.sort();
    assert_eq!(pushes, vec![(0, vec![1], 1), (1, vec![], 1)]);
    // Next advance with no changes: empty pushes (clock bumps) only.
    s.clock(WorkerId(0), 1).unwrap();
    let out = s.clock(WorkerId(1), 1).unwrap();
    assert!(
        out.iter()
            .all(|a| matches!(a, ShardAction::Push { rows, clock: 2, .. } if rows.is_empty()))
    );
    assert_eq!(out.len(), 2);
}

#[test]
fn essp_reply_and_push_in_same_advance_not_duplicated() {
    let mut s = PsShardCore::new(1, vec![spec(Consistency::Essp { staleness: 0 })]).unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(1, 4, [1.0, 1.0]))
        .unwrap();
    assert!(
        s.handle_read(&read(WorkerId(0), 1, T, RowId(4), 1))
            .unwrap()
            .is_empty()
    );
    let out = s.clock(WorkerId(0), 0).unwrap();
    assert_eq!(out.len(), 2);
    assert!(matches!(out[0], ShardAction::Reply { row_clock: 1, .. }));
    assert!(matches!(&out[1], ShardAction::Push { rows, .. } if rows.is_empty()));
}

#[test]
fn snapshot_restore_round_trip() {
    let mut s = PsShardCore::new(1, vec![spec(Consistency::Bsp)]).unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(1, 4, [1.0, 1.0]))
        .unwrap();
    s.clock(WorkerId(0), 0).unwrap();
    let snap = s.snapshot();
    let r = PsShardCore::restore(
        1,
        vec![spec(Consistency::Bsp)],
        &RuleRegistry::new(),
        snap.clone(),
        1,
    )
    .unwrap();
    assert_eq!(r.snapshot(), snap);
    assert_eq!(r.min_clock(), 1);
    assert_eq!(r.worker_clock(WorkerId(0)).unwrap(), 1);
}

#[test]
fn shard_action_round_trips_through_msgpack() {
    let a = ShardAction::Push {
        worker: WorkerId(1),
        table: T,
        rows: vec![(RowId(3), Row::Dense(vec![1.0, 2.0]).into())],
        clock: 4,
        ack_seq: 2,
    };
    let b = rmp_serde::to_vec(&a).unwrap();
    assert_eq!(rmp_serde::from_slice::<ShardAction>(&b).unwrap(), a);
}

#[test]
fn an_update_delay_applies_each_update_after_that_many_later_ones() {
    let t = spec(Consistency::Async).with_update_delay(2);
    let mut s = PsShardCore::new(2, vec![t]).unwrap();
    s.apply_updates(WorkerId(0), 0, &batch(1, 3, [1.0, 0.0]))
        .unwrap();
    s.apply_updates(WorkerId(1), 0, &batch(1, 3, [10.0, 0.0]))
        .unwrap();
    let now = |s: &mut PsShardCore| {
        let out = s
            .handle_read(&read(WorkerId(0), 9, T, RowId(3), 0))
            .unwrap();
        (reply_data(&out[0]).0, out[0].clone())
    };
    let (row, reply) = now(&mut s);
    assert_eq!(row, Row::Dense(vec![0.0, 0.0]), "both held back");
    // The shard still acknowledges what it received: the delay is the injected fault.
    assert!(matches!(reply, ShardAction::Reply { ack_seq: 1, .. }));
    s.apply_updates(WorkerId(0), 0, &batch(2, 3, [100.0, 0.0]))
        .unwrap();
    assert_eq!(
        now(&mut s).0,
        Row::Dense(vec![1.0, 0.0]),
        "the first is due"
    );
    s.apply_updates(WorkerId(1), 0, &batch(2, 4, [1000.0, 0.0]))
        .unwrap();
    assert_eq!(now(&mut s).0, Row::Dense(vec![11.0, 0.0]));
}

#[test]
fn content_clocks_follow_replies_with_each_writers_applied_clocks() {
    let t = spec(Consistency::Ssp { staleness: 5 })
        .with_content_clocks(true)
        .with_update_delay(1);
    let mut s = PsShardCore::new(2, vec![t]).unwrap();
    // Worker 1 runs three clocks ahead; its clock-2 update is still held back (delay 1).
    for c in 0..3 {
        s.apply_updates(WorkerId(1), c, &batch(c + 1, 3, [1.0, 0.0]))
            .unwrap();
        s.clock(WorkerId(1), c).unwrap();
    }
    let out = s
        .handle_read(&read(WorkerId(0), 1, T, RowId(3), 0))
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[1],
        ShardAction::Content {
            worker: WorkerId(0),
            table: T,
            row: Some(RowId(3)),
            writer_clocks: vec![0, 2],
        }
    );
    // A table without content clocks replies alone.
    let mut plain = PsShardCore::new(1, vec![spec(Consistency::Async)]).unwrap();
    let out = plain.handle_read(&read(WorkerId(0), 1, T, RowId(3), 0));
    assert_eq!(out.unwrap().len(), 1);
}

#[test]
fn an_essp_push_is_followed_by_the_writers_clocks() {
    let t = spec(Consistency::Essp { staleness: 0 }).with_content_clocks(true);
    let mut s = PsShardCore::new(2, vec![t]).unwrap();
    s.handle_read(&read(WorkerId(0), 1, T, RowId(3), 0))
        .unwrap();
    s.apply_updates(WorkerId(1), 0, &batch(1, 3, [1.0, 0.0]))
        .unwrap();
    s.clock(WorkerId(1), 0).unwrap();
    s.clock(WorkerId(1), 1).unwrap();
    let out = s.clock(WorkerId(0), 0).unwrap();
    assert!(
        matches!(&out[0], ShardAction::Push { clock: 1, .. }),
        "{out:?}"
    );
    assert_eq!(
        out.last(),
        Some(&ShardAction::Content {
            worker: WorkerId(0),
            table: T,
            row: None,
            writer_clocks: vec![1, 2],
        })
    );
}

const MODELS: [Consistency; 4] = [
    Consistency::Bsp,
    Consistency::Ssp { staleness: 1 },
    Consistency::Essp { staleness: 1 },
    Consistency::Async,
];

#[test]
fn an_absent_worker_holds_back_no_min_clock_and_is_admitted_at_the_min_clock() {
    for c in MODELS {
        let mut s = PsShardCore::new(3, vec![spec(c)]).unwrap();
        assert!(s.set_absent(&[WorkerId(2)]).unwrap().is_empty());
        assert_eq!(s.members(), 2);
        // An absent worker's messages are refused, as a departed one's.
        assert!(
            s.handle_read(&read(WorkerId(2), 1, T, RowId(3), 0))
                .is_err()
        );
        for clock in 0..2 {
            step(&mut s, 0, clock, clock + 1);
            step(&mut s, 1, clock, clock + 1);
        }
        assert_eq!(
            s.min_clock(),
            2,
            "{c:?}: the absent worker is not waited for"
        );
        // Admitted at the min clock even when it asks for less: the min clock never drops.
        assert_eq!(s.admit(WorkerId(2), 0).unwrap(), 2, "{c:?}");
        assert_eq!((s.min_clock(), s.members()), (2, 3));
        // It now holds the min clock back like any member...
        step(&mut s, 0, 2, 3);
        step(&mut s, 1, 2, 3);
        assert_eq!(s.min_clock(), 2, "{c:?}: the joiner is counted");
        // ...and its updates count from its admission clock.
        step(&mut s, 2, 2, 1);
        assert_eq!(s.min_clock(), 3, "{c:?}");
        assert_eq!(s.worker_clock(WorkerId(2)).unwrap(), 3);
    }
}

#[test]
fn shards_agree_on_a_joiners_clock_by_raising_it_to_the_largest_answer() {
    for c in MODELS {
        let shard = |ahead: u64| {
            let mut s = PsShardCore::new(2, vec![spec(c)]).unwrap();
            s.set_absent(&[WorkerId(1)]).unwrap();
            for clock in 0..ahead {
                s.clock(WorkerId(0), clock).unwrap();
            }
            s
        };
        let (mut a, mut b) = (shard(3), shard(2));
        let answers = [
            a.admit(WorkerId(1), 0).unwrap(),
            b.admit(WorkerId(1), 0).unwrap(),
        ];
        assert_eq!(answers, [3, 2], "{c:?}");
        // The joiner asks again with the largest answer: each shard raises it, none lowers.
        assert_eq!(a.admit(WorkerId(1), 3).unwrap(), 3);
        assert_eq!(b.admit(WorkerId(1), 3).unwrap(), 3);
        assert_eq!(b.min_clock(), 2, "{c:?}: worker 0 is still at 2 on shard b");
        b.clock(WorkerId(0), 2).unwrap();
        assert_eq!(b.min_clock(), 3, "{c:?}");
        // A worker that has sent updates at its clock is not moved.
        let mut s = shard(0);
        s.admit(WorkerId(1), 0).unwrap();
        s.apply_updates(WorkerId(1), 0, &batch(1, 3, [1.0, 1.0]))
            .unwrap();
        assert!(s.admit(WorkerId(1), 4).is_err(), "{c:?}");
    }
}

#[test]
fn after_a_leave_the_bound_counts_only_current_members_and_pushes_skip_the_absent() {
    for c in MODELS {
        let mut s = PsShardCore::new(3, vec![spec(c)]).unwrap();
        s.set_absent(&[WorkerId(2)]).unwrap();
        // Worker 1 reads (subscribing on ESSP), finishes clock 0 and leaves.
        s.handle_read(&read(WorkerId(1), 1, T, RowId(3), 0))
            .unwrap();
        step(&mut s, 1, 0, 1);
        assert!(s.remove_worker(WorkerId(1)).is_ok());
        assert_eq!(s.members(), 1);
        // Worker 0 alone moves the min clock; nothing goes to the departed or the absent.
        for clock in 0..3 {
            let out = {
                s.apply_updates(WorkerId(0), clock, &batch(clock + 1, 3, [1.0, 0.0]))
                    .unwrap();
                s.clock(WorkerId(0), clock).unwrap()
            };
            assert!(
                out.iter().all(|a| a.worker() == WorkerId(0)),
                "{c:?}: {out:?}"
            );
        }
        assert_eq!(s.min_clock(), 3, "{c:?}");
        // The leaver's update of clock 0 stays applied.
        assert_eq!(s.row(T, RowId(3)), Some(&Row::Dense(vec![1.0 + 3.0, 2.0])));
        assert!(
            s.admit(WorkerId(1), 0).is_err(),
            "{c:?}: a departed worker stays out"
        );
    }
}
