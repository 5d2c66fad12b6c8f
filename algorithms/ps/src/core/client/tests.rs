// Over 600 lines: the client core's consistency cases share one fixture set.
use super::*;
use crate::core::shard::PsShardCore;
use crate::core::shard::ShardAction;
use crate::core::types::shard_of;
use crate::core::types::{Consistency, UpdateRuleSpec};

use crate::core::testing::{T, spec};

/// Worker 0's client of the one table `t` over `shards` shards.
fn client(shards: u32, t: TableSpec) -> ClientCore {
    ClientCore::new(WorkerId(0), shards, vec![t]).unwrap()
}

/// Reads row 0 of `T` through `c`, which must fetch it (else panics with `why`), and hands
/// it `shard`'s reply.
fn fetch_row0(c: &mut ClientCore, shard: &mut PsShardCore, why: &str) {
    let GetOutcome::Fetch(req) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!("{why}")
    };
    for a in shard.handle_read(&req).unwrap() {
        c.handle(0, a).unwrap();
    }
}

#[test]
fn barrier_probe_waits_for_min_clock_and_is_not_cached() {
    let t = spec(Consistency::Async);
    let mut shard = PsShardCore::new(2, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    for b in c.clock() {
        shard.handle_batch(&b).unwrap();
    }
    let probe = c.sync_request(0).unwrap();
    assert_eq!(probe.min_clock, 1);
    // Even on an Async table the probe waits for worker 1.
    let out = shard.handle_sync(&probe).unwrap();
    assert!(out.is_empty());
    assert!(!c.sync_done(probe.request_id));
    let released = shard.clock(WorkerId(1), 0).unwrap();
    assert_eq!(released.len(), 1);
    for a in released {
        c.handle(0, a).unwrap();
    }
    assert!(c.sync_done(probe.request_id));
    assert!(!c.sync_done(probe.request_id), "forgotten once seen");
    assert!(c.cached(probe.table, probe.row).is_none());
}

#[test]
fn prefetch_refreshes_async_rows_once_in_flight() {
    let t = spec(Consistency::Async);
    let mut c = client(1, t);
    let first = c.prefetch(T, RowId(4)).unwrap().unwrap();
    assert_eq!(first.min_clock, 0);
    assert!(c.prefetch(T, RowId(4)).unwrap().is_none(), "one in flight");
    c.handle(0, reply(4, vec![1.0, 2.0], 0, 0, first.request_id))
        .unwrap();
    assert!(c.prefetch(T, RowId(4)).unwrap().is_some());
    assert!(matches!(
        c.get_shared(T, RowId(4)).unwrap(),
        GetOutcome::Hit(_)
    ));
    assert_eq!(c.table_stats(T).count(), 1);
    assert_eq!(c.table_stats(TableId(9)).count(), 0);
    let observed = c.take_observed();
    assert_eq!(observed.len(), 1);
    assert_eq!(observed[0].1.iter().sum::<u64>(), 1);
    assert!(c.take_observed().is_empty());
}

#[test]
fn resume_at_only_on_a_fresh_client() {
    let mut c = client(1, spec(Consistency::Bsp));
    c.resume_at(7).unwrap();
    assert_eq!(c.current_clock(), 7);
    let b = c.clock();
    assert_eq!(b[0].clock, 7);
    assert!(c.resume_at(3).is_err());
}

fn reply(row: u64, data: Vec<f32>, row_clock: Clock, ack_seq: u64, id: u64) -> ShardAction {
    ShardAction::Reply {
        worker: WorkerId(0),
        request_id: id,
        table: T,
        row: RowId(row),
        row_data: Row::Dense(data).into(),
        row_clock,
        ack_seq,
    }
}

#[test]
fn miss_fetch_wait_then_hit() {
    let mut c = client(2, spec(Consistency::Ssp { staleness: 1 }));
    let GetOutcome::Fetch(req) = c.get_shared(T, RowId(5)).unwrap() else {
        panic!()
    };
    assert_eq!(req.min_clock, 0);
    assert_eq!(req.shard, shard_of(T, RowId(5), 2));
    assert_eq!(c.get_shared(T, RowId(5)).unwrap(), GetOutcome::Wait);
    c.handle(req.shard, reply(5, vec![1.0, 2.0], 0, 0, req.request_id))
        .unwrap();
    assert_eq!(
        c.get_shared(T, RowId(5)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![1.0, 2.0]).into())
    );
    // Clock 1: needs row clock >= 0, still a hit with staleness 1.
    c.clock();
    assert!(matches!(
        c.get_shared(T, RowId(5)).unwrap(),
        GetOutcome::Hit(_)
    ));
    // Clock 2: needs row clock >= 1: fetch.
    c.clock();
    assert!(matches!(
        c.get_shared(T, RowId(5)).unwrap(),
        GetOutcome::Fetch(ReadRequest { min_clock: 1, .. })
    ));
    let r = c.table_stats(T).report();
    assert_eq!((r.count, r.max), (2, 1));
    assert!((r.mean - 0.5).abs() < 1e-12);
}

#[test]
fn oplog_coalesces_and_splits_per_shard() {
    let mut c = ClientCore::new(WorkerId(3), 3, vec![spec(Consistency::Bsp)]).unwrap();
    c.inc(T, RowId(1), 0, 1.0).unwrap();
    c.inc(T, RowId(1), 0, 2.0).unwrap();
    c.batch_inc(T, RowId(1), &Row::Dense(vec![0.0, 4.0]))
        .unwrap();
    for r in 2..20 {
        c.inc(T, RowId(r), 1, 1.0).unwrap();
    }
    assert_eq!(
        c.oplog.get(&(T, RowId(1))).map(|e| &e.delta),
        Some(&Row::Dense(vec![3.0, 4.0]))
    );
    assert!(c.inc(T, RowId(1), 2, 1.0).is_err(), "column out of range");
    assert!(c.inc(TableId(9), RowId(1), 0, 1.0).is_err());
    let batches = c.clock();
    assert_eq!(batches.len(), 3);
    assert_eq!(c.current_clock(), 1);
    assert_eq!(c.oplog.len(), 0);
    let mut seen = 0;
    let mut seqs = Vec::new();
    for b in &batches {
        assert!(b.end_of_clock);
        assert_eq!((b.worker, b.clock), (WorkerId(3), 0));
        seqs.push(b.batch.seq);
        for u in &b.batch.updates {
            assert_eq!(shard_of(u.table, u.row, 3), b.shard);
            seen += 1;
        }
    }
    assert_eq!(seen, 19);
    seqs.dedup();
    assert_eq!(seqs.len(), 3);
}

#[test]
fn read_my_writes_survives_fresh_rows() {
    let mut c = client(1, spec(Consistency::Ssp { staleness: 5 }));
    let GetOutcome::Fetch(req) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!()
    };
    c.handle(0, reply(0, vec![10.0, 0.0], 0, 0, req.request_id))
        .unwrap();
    c.inc(T, RowId(0), 0, 1.0).unwrap();
    let b1 = c.clock(); // seq 1 in flight
    assert_eq!(b1[0].batch.seq, 1);
    c.inc(T, RowId(0), 1, 2.0).unwrap(); // unflushed
    // A reply produced before the shard applied seq 1 (ack 0): both own deltas re-applied.
    c.handle(0, reply(0, vec![20.0, 0.0], 1, 0, 99)).unwrap();
    assert_eq!(
        c.cached(T, RowId(0)).unwrap().0,
        &Row::Dense(vec![21.0, 2.0])
    );
    // A reply that includes seq 1 (ack 1): only the unflushed delta is re-applied.
    c.handle(0, reply(0, vec![21.0, 0.0], 1, 1, 100)).unwrap();
    assert_eq!(
        c.cached(T, RowId(0)).unwrap().0,
        &Row::Dense(vec![21.0, 2.0])
    );
    assert!(
        c.handle(
            0,
            ShardAction::Reply {
                worker: WorkerId(7),
                request_id: 1,
                table: T,
                row: RowId(0),
                row_data: Row::Dense(vec![0.0, 0.0]).into(),
                row_clock: 0,
                ack_seq: 0
            }
        )
        .is_err()
    );
}

#[test]
fn sgd_table_local_view_applies_minus_lr() {
    let t = spec(Consistency::Async).with_rule(UpdateRuleSpec::Sgd { learning_rate: 0.5 });
    let mut c = client(1, t.clone());
    let mut s = PsShardCore::new(1, vec![t]).unwrap();
    fetch_row0(&mut c, &mut s, "a first read fetches");
    c.inc(T, RowId(0), 0, 2.0).unwrap();
    assert_eq!(
        c.cached(T, RowId(0)).unwrap().0,
        &Row::Dense(vec![-1.0, 0.0])
    );
    for b in c.clock() {
        s.handle_batch(&b).unwrap();
    }
    assert_eq!(s.row(T, RowId(0)), Some(&Row::Dense(vec![-1.0, 0.0])));
}

#[test]
fn essp_push_clock_bumps_cached_rows() {
    let t = spec(Consistency::Essp { staleness: 0 });
    let mut c = client(1, t);
    c.handle(0, reply(0, vec![1.0, 1.0], 0, 0, 1)).unwrap();
    c.clock();
    assert!(matches!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Fetch(_)
    ));
    c.handle(
        0,
        ShardAction::Push {
            worker: WorkerId(0),
            table: T,
            rows: vec![],
            clock: 1,
            ack_seq: 1,
        },
    )
    .unwrap();
    assert_eq!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![1.0, 1.0]).into())
    );
    // Pushed rows we do not cache are ignored.
    c.handle(
        0,
        ShardAction::Push {
            worker: WorkerId(0),
            table: T,
            rows: vec![(RowId(9), Row::Dense(vec![1.0, 1.0]).into())],
            clock: 1,
            ack_seq: 1,
        },
    )
    .unwrap();
    assert!(c.cached(T, RowId(9)).is_none());
}

#[test]
fn async_hits_any_cached_copy() {
    let mut c = client(1, spec(Consistency::Async));
    c.handle(0, reply(0, vec![1.0, 1.0], 0, 0, 1)).unwrap();
    for _ in 0..5 {
        c.clock();
    }
    assert!(matches!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(_)
    ));
    assert_eq!(c.table_stats(T).max(), 5);
}

fn dense_ptr(r: &Row) -> *const f32 {
    match r {
        Row::Dense(v) => v.as_ptr(),
        Row::Sparse(_) => std::ptr::null(),
    }
}

/// One BSP round trip between a client and a one-shard core: push, clock, apply, read,
/// reply; returns the reply's row as the shard sent it.
fn round(c: &mut ClientCore, shard: &mut PsShardCore, delta: Row) -> SharedRow {
    c.push(T, RowId(0), delta).unwrap();
    for b in c.clock() {
        shard.handle_batch(&b).unwrap();
    }
    let GetOutcome::Fetch(req) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!("a BSP read after a clock fetches")
    };
    let mut out = shard.handle_read(&req).unwrap();
    let ShardAction::Reply { row_data, .. } = &out[0] else {
        panic!("a reply")
    };
    let sent = row_data.clone();
    c.handle(0, out.remove(0)).unwrap();
    sent
}

#[test]
fn push_moves_the_buffer_into_the_batch() {
    let mut c = client(1, spec(Consistency::Bsp));
    let delta = vec![1.0, 2.0];
    let ptr = delta.as_ptr();
    c.push(T, RowId(0), Row::Dense(delta)).unwrap();
    let b = c.clock();
    assert_eq!(
        dense_ptr(&b[0].batch.updates[0].delta),
        ptr,
        "moved, not copied"
    );
    // A second push to a row with an unflushed delta coalesces, as batch_inc does.
    c.push(T, RowId(1), Row::Dense(vec![1.0, 1.0])).unwrap();
    c.push(T, RowId(1), Row::Dense(vec![0.5, 0.0])).unwrap();
    c.push(T, RowId(1), Row::Sparse(vec![(1, 2.0)])).unwrap();
    assert_eq!(
        c.oplog.get(&(T, RowId(1))).map(|e| &e.delta),
        Some(&Row::Dense(vec![1.5, 3.0]))
    );
    assert!(
        c.push(T, RowId(2), Row::Dense(vec![1.0])).is_err(),
        "width checked"
    );
}

#[test]
fn replies_share_the_stored_row_and_the_cache_keeps_it_without_a_copy() {
    let t = spec(Consistency::Bsp);
    let mut shard = PsShardCore::new(1, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    let sent = round(&mut c, &mut shard, Row::Dense(vec![1.0, 2.0]));
    let stored = shard.row(T, RowId(0)).unwrap();
    assert!(std::ptr::eq(&*sent, stored), "the reply is the stored row");
    let GetOutcome::Hit(cached) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!()
    };
    assert!(std::ptr::eq::<Row>(&*cached, &*sent), "cached as received");
    // The shard writes while the reply is still held: copy on write, the held reply
    // keeps the value it had.
    c.push(T, RowId(0), Row::Dense(vec![1.0, 1.0])).unwrap();
    for b in c.clock() {
        shard.handle_batch(&b).unwrap();
    }
    assert_eq!(*sent, Row::Dense(vec![1.0, 2.0]));
    assert_eq!(shard.row(T, RowId(0)), Some(&Row::Dense(vec![2.0, 3.0])));
    drop((sent, cached));
    // Nobody else holds it now: the next write is in place.
    let before = dense_ptr(shard.row(T, RowId(0)).unwrap());
    c.push(T, RowId(0), Row::Dense(vec![1.0, 1.0])).unwrap();
    for b in c.clock() {
        shard.handle_batch(&b).unwrap();
    }
    assert_eq!(dense_ptr(shard.row(T, RowId(0)).unwrap()), before);
}

#[test]
fn a_held_read_is_not_changed_by_later_own_writes() {
    let t = spec(Consistency::Ssp { staleness: 5 });
    let mut shard = PsShardCore::new(1, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    fetch_row0(&mut c, &mut shard, "a first read fetches");
    let GetOutcome::Hit(held) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!()
    };
    c.batch_inc(T, RowId(0), &Row::Dense(vec![1.0, 1.0]))
        .unwrap();
    assert_eq!(
        *held,
        Row::Dense(vec![0.0, 0.0]),
        "the caller's row is its own"
    );
    assert_eq!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![1.0, 1.0]).into()),
        "read-my-writes"
    );
}

#[test]
fn read_my_writes_off_shows_the_shard_value_and_keeps_no_delta_copies() {
    let t = spec(Consistency::Ssp { staleness: 5 }).with_read_my_writes(false);
    let mut shard = PsShardCore::new(1, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    fetch_row0(&mut c, &mut shard, "a first read fetches");
    c.batch_inc(T, RowId(0), &Row::Dense(vec![1.0, 2.0]))
        .unwrap();
    assert_eq!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![0.0, 0.0]).into()),
        "own unflushed write not visible"
    );
    let batches = c.clock();
    assert!(
        c.cache.values().all(|e| e.pending.is_empty()),
        "no copy kept"
    );
    for b in &batches {
        shard.handle_batch(b).unwrap();
    }
    // The bound still holds: after 6 clocks an SSP(5) read must fetch, and the fresh
    // row has the update.
    for _ in 0..5 {
        for b in c.clock() {
            shard.handle_batch(&b).unwrap();
        }
    }
    fetch_row0(&mut c, &mut shard, "stale beyond the bound");
    assert_eq!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![1.0, 2.0]).into())
    );
}

#[test]
fn push_ticket_is_done_once_the_shard_acknowledges() {
    let t = spec(Consistency::Bsp);
    let mut shard = PsShardCore::new(1, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    let (batch, ticket) = c.push_now(T, RowId(3), Row::Dense(vec![1.0, 0.0])).unwrap();
    assert!(
        !batch.end_of_clock,
        "an early batch: the clock does not advance"
    );
    assert_eq!(c.current_clock(), 0);
    assert!(!c.push_done(&ticket));
    shard.handle_batch(&batch).unwrap();
    assert_eq!(shard.row(T, RowId(3)), Some(&Row::Dense(vec![1.0, 0.0])));
    assert_eq!(shard.min_clock(), 0, "no clock tick from a push");
    for a in shard.ack(WorkerId(0)).unwrap() {
        c.handle(0, a).unwrap();
    }
    assert!(c.push_done(&ticket));
    assert!(
        c.handle(
            0,
            ShardAction::Ack {
                worker: WorkerId(1),
                ack_seq: 9
            }
        )
        .is_err()
    );
}

#[test]
fn prefetch_next_clock_overlaps_the_bsp_round_trip_with_the_clock() {
    let t = spec(Consistency::Bsp);
    let mut shard = PsShardCore::new(2, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    // At clock 0 the next clock needs row clock 1: asked now, once.
    let ahead = c.prefetch_next_clock(T, RowId(3)).unwrap().expect("needed");
    assert_eq!(ahead.min_clock, 1);
    assert!(
        c.prefetch_next_clock(T, RowId(3)).unwrap().is_none(),
        "in flight"
    );
    assert!(
        shard.handle_read(&ahead).unwrap().is_empty(),
        "held for clock 1"
    );
    // A read at clock 0 does not wait for it (that would need this worker's own clock):
    // it fetches for clock 0.
    let GetOutcome::Fetch(now) = c.get_shared(T, RowId(3)).unwrap() else {
        panic!("a read at clock 0 must not wait for the clock-1 fetch")
    };
    assert_eq!(now.min_clock, 0);
    for a in shard.handle_read(&now).unwrap() {
        c.handle(0, a).unwrap();
    }
    assert!(matches!(
        c.get_shared(T, RowId(3)).unwrap(),
        GetOutcome::Hit(_)
    ));
    c.inc(T, RowId(3), 0, 1.0).unwrap();
    for b in c.clock() {
        assert!(
            shard.handle_batch(&b).unwrap().is_empty(),
            "worker 1 is behind"
        );
    }
    // Worker 1 completes clock 0: the held read is answered, before this worker asks.
    let released = shard.clock(WorkerId(1), 0).unwrap();
    assert_eq!(released.len(), 1);
    for a in released {
        c.handle(0, a).unwrap();
    }
    let sent_before = c.next_request;
    assert_eq!(
        c.get_shared(T, RowId(3)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![1.0, 0.0]).into()),
        "clock 1 reads the prefetched row, own update included"
    );
    assert_eq!(c.next_request, sent_before, "no request at clock 1");
}

#[test]
fn prefetch_next_clock_asks_only_for_rows_the_next_clock_cannot_read() {
    let t = spec(Consistency::Ssp { staleness: 2 });
    let mut c = client(1, t);
    c.handle(0, reply(0, vec![1.0, 1.0], 0, 0, 1)).unwrap();
    // Clocks 1 and 2 accept row clock 0: nothing to ask at clocks 0 and 1.
    assert!(c.prefetch_next_clock(T, RowId(0)).unwrap().is_none());
    c.clock();
    assert!(c.prefetch_next_clock(T, RowId(0)).unwrap().is_none());
    c.clock();
    // At clock 2, clock 3 needs row clock 1; an uncached row is asked for too.
    let q = c
        .prefetch_next_clock(T, RowId(0))
        .unwrap()
        .expect("stale at clock 3");
    assert_eq!((q.min_clock, q.row), (1, RowId(0)));
    let u = c
        .prefetch_next_clock(T, RowId(7))
        .unwrap()
        .expect("uncached");
    assert_eq!(u.min_clock, 1);
    // Clock 2 still reads the cached copy; clock 3 waits for the request in flight.
    assert!(matches!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(_)
    ));
    c.clock();
    assert_eq!(c.get_shared(T, RowId(0)).unwrap(), GetOutcome::Wait);
    c.handle(0, reply(0, vec![2.0, 2.0], 1, 0, q.request_id))
        .unwrap();
    assert_eq!(
        c.get_shared(T, RowId(0)).unwrap(),
        GetOutcome::Hit(Row::Dense(vec![2.0, 2.0]).into())
    );
}

#[test]
fn prefetch_next_clock_leaves_async_and_cached_essp_rows_alone() {
    let mut a = client(1, spec(Consistency::Async));
    assert!(a.prefetch_next_clock(T, RowId(0)).unwrap().is_none());
    assert!(a.prefetch_next_clock(TableId(9), RowId(0)).is_err());
    let t = spec(Consistency::Essp { staleness: 0 });
    let mut e = client(1, t);
    let q = e
        .prefetch_next_clock(T, RowId(0))
        .unwrap()
        .expect("uncached");
    assert_eq!(q.min_clock, 1);
    e.handle(0, reply(0, vec![0.0, 0.0], 1, 0, q.request_id))
        .unwrap();
    e.clock();
    assert!(
        e.prefetch_next_clock(T, RowId(0)).unwrap().is_none(),
        "a cached ESSP row is pushed at the next advance"
    );
}

#[test]
fn seen_min_clock_follows_replies_and_pushes_and_tells_reads_that_may_wait() {
    let t = spec(Consistency::Ssp { staleness: 1 });
    let mut c = client(1, t);
    assert_eq!(c.seen_min_clock(0), 0);
    assert!(
        !c.needs_beyond_seen(T, RowId(0)).unwrap(),
        "clock 0 needs row clock 0"
    );
    c.clock();
    c.clock();
    // Clock 2 needs row clock 1; the shard was last seen at 0.
    assert!(c.needs_beyond_seen(T, RowId(0)).unwrap());
    c.handle(0, reply(0, vec![0.0, 0.0], 1, 0, 9)).unwrap();
    assert_eq!(c.seen_min_clock(0), 1);
    assert!(!c.needs_beyond_seen(T, RowId(0)).unwrap());
    // An older reply does not lower it.
    c.handle(0, reply(0, vec![0.0, 0.0], 0, 0, 10)).unwrap();
    assert_eq!(c.seen_min_clock(0), 1);
    let push = ShardAction::Push {
        worker: WorkerId(0),
        table: T,
        rows: vec![],
        clock: 3,
        ack_seq: 0,
    };
    c.handle(0, push).unwrap();
    assert_eq!(c.seen_min_clock(0), 3);
    assert!(c.needs_beyond_seen(TableId(9), RowId(0)).is_err());
}

#[test]
fn pull_request_fetches_only_what_the_cache_cannot_serve() {
    let t = spec(Consistency::Bsp);
    let mut shard = PsShardCore::new(1, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    let req = c
        .pull_request(T, RowId(0))
        .unwrap()
        .expect("a miss is fetched");
    assert!(
        c.pull_request(T, RowId(0)).unwrap().is_none(),
        "already in flight"
    );
    for a in shard.handle_read(&req).unwrap() {
        c.handle(0, a).unwrap();
    }
    assert!(
        c.pull_request(T, RowId(0)).unwrap().is_none(),
        "fresh in the cache"
    );
    assert_eq!(c.table_stats(T).count(), 0, "a pull records no staleness");
    for b in c.clock() {
        shard.handle_batch(&b).unwrap();
    }
    let req = c
        .pull_request(T, RowId(0))
        .unwrap()
        .expect("stale after the clock");
    assert_eq!(req.min_clock, 1);
}

/// Worker 0 reads row 0 of an async table under `rule`, writes gradient 1 to column 0,
/// clocks, prefetches and reads again; returns the second read's outcome and, after the
/// prefetch's reply, the row it sees.
fn read_after_own_write(rule: UpdateRuleSpec) -> (GetOutcome, Row) {
    let t = spec(Consistency::Async).with_rule(rule);
    let mut shard = PsShardCore::new(1, vec![t.clone()]).unwrap();
    let mut c = client(1, t);
    fetch_row0(&mut c, &mut shard, "first read misses");
    c.inc(T, RowId(0), 0, 1.0).unwrap();
    for b in c.clock() {
        shard.handle_batch(&b).unwrap();
    }
    let prefetch = c.prefetch(T, RowId(0)).unwrap().unwrap();
    let second = c.get_shared(T, RowId(0)).unwrap();
    for a in shard.handle_read(&prefetch).unwrap() {
        c.handle(0, a).unwrap();
    }
    let GetOutcome::Hit(row) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!("the prefetch's reply acknowledges the write")
    };
    (second, (*row).clone())
}

#[test]
fn every_rule_reads_its_own_writes() {
    // SGD's cache follows its step: served at once, with the step.
    let (second, row) = read_after_own_write(UpdateRuleSpec::Sgd { learning_rate: 0.5 });
    assert_eq!(second, GetOutcome::Hit(Row::Dense(vec![-0.5, 0.0]).into()));
    assert_eq!(row.get(0), -0.5);
    // Adagrad's cannot: the read waits for the in-flight prefetch, which carries the step.
    let adagrad = UpdateRuleSpec::Adagrad {
        learning_rate: 0.5,
        eps: 1.0,
    };
    let (second, row) = read_after_own_write(adagrad);
    assert_eq!(second, GetOutcome::Wait);
    assert_eq!(row.get(0), -0.25, "0.5 * 1 / (sqrt(1) + 1)");
}

#[test]
fn reads_record_the_clocks_each_other_writer_is_missing() {
    for essp in [false, true] {
        let c3 = if essp {
            Consistency::Essp { staleness: 4 }
        } else {
            Consistency::Ssp { staleness: 4 }
        };
        let mut c = client(1, spec(c3).with_content_clocks(true));
        for _ in 0..3 {
            c.clock();
        }
        let GetOutcome::Fetch(req) = c.get_shared(T, RowId(0)).unwrap() else {
            panic!("a miss")
        };
        c.handle(0, reply(0, vec![1.0, 2.0], 0, 0, req.request_id))
            .unwrap();
        // Three workers: the copy holds worker 1's clocks < 1 and worker 2's < 2.
        let content = |row, writer_clocks| ShardAction::Content {
            worker: WorkerId(0),
            table: T,
            row,
            writer_clocks,
        };
        c.handle(0, content(Some(RowId(0)), vec![0, 1, 2])).unwrap();
        assert!(matches!(
            c.get_shared(T, RowId(0)).unwrap(),
            GetOutcome::Hit(_)
        ));
        let st = c.content_stats(T);
        // At clock 3: worker 1 lacks 2 clocks, worker 2 one; its own writes never count.
        assert_eq!((st.count(), st.mean(), st.max()), (2, 1.5, 2));
        // A push's clocks cover every row of an ESSP table; elsewhere they say nothing.
        c.handle(0, content(None, vec![0, 3, 3])).unwrap();
        c.get_shared(T, RowId(0)).unwrap();
        let st = c.content_stats(T);
        let expect = if essp { (4, 0.75) } else { (4, 1.5) };
        assert_eq!((st.count(), st.mean()), expect, "essp {essp}");
    }
    // Without content clocks nothing is recorded.
    let mut c = client(1, spec(Consistency::Async));
    let GetOutcome::Fetch(req) = c.get_shared(T, RowId(0)).unwrap() else {
        panic!("a miss")
    };
    c.handle(0, reply(0, vec![1.0, 2.0], 0, 0, req.request_id))
        .unwrap();
    c.get_shared(T, RowId(0)).unwrap();
    assert_eq!(c.content_stats(T).count(), 0);
}
