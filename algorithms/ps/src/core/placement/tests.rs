use super::*;
use crate::core::types::shard_of;

#[test]
fn the_first_placement_puts_rows_where_shard_of_does() {
    for n in 1..=4u32 {
        let shards: Vec<u32> = (0..n).collect();
        let p = Placement::new(&shards).unwrap();
        assert_eq!(p.partitions(), n * PARTITIONS_PER_SHARD);
        assert_eq!(p.shards(), shards);
        for t in 0..3 {
            for r in 0..2000 {
                let (t, r) = (TableId(t), RowId(r));
                assert_eq!(p.shard_of(t, r), shard_of(t, r, n));
            }
        }
    }
    assert!(Placement::new(&[]).is_err());
    assert!(Placement::new(&[1, 1]).is_err());
}

#[test]
fn a_shard_that_joins_takes_its_share_and_only_that_moves() {
    let p = Placement::new(&[0, 1]).unwrap();
    let q = p.with_shards(&[0, 1, 2]).unwrap();
    assert_eq!(q.epoch(), 1);
    assert_eq!(q.shards(), [0, 1, 2]);
    let moves = p.moves(&q);
    // 512 partitions over 3 shards: 171, 171, 170; the joiner's 170 are all that move.
    assert_eq!(moves.len(), 170);
    assert!(moves.iter().all(|&(_, _, to)| to == 2));
    let count = |pl: &Placement, s| pl.owners.iter().filter(|&&o| o == s).count();
    assert_eq!([count(&q, 0), count(&q, 1), count(&q, 2)], [171, 171, 170]);
    // Rows that did not move keep their shard.
    for r in 0..5000 {
        let (t, r) = (TableId(1), RowId(r));
        let part = p.partition_of(t, r);
        assert_eq!(part, q.partition_of(t, r), "partitions are fixed");
        if !moves.iter().any(|m| m.0 == part) {
            assert_eq!(p.shard_of(t, r), q.shard_of(t, r));
        }
    }
}

#[test]
fn a_shard_that_leaves_hands_every_partition_to_the_others() {
    let p = Placement::new(&[0, 1, 2]).unwrap();
    let q = p.with_shards(&[1, 2]).unwrap();
    assert!(!q.has(0));
    let moves = p.moves(&q);
    assert_eq!(moves.len(), 256, "exactly shard 0's partitions move");
    assert!(moves.iter().all(|&(_, from, to)| from == 0 && to != 0));
    // A join and a leave in turn: shard 3 replaces shard 0.
    let r = q.with_shards(&[1, 2, 3]).unwrap();
    assert_eq!(r.epoch(), 2);
    assert!(q.moves(&r).iter().all(|&(_, _, to)| to == 3));
    assert!(p.with_shards(&[]).is_err());
}

#[test]
fn the_cut_is_the_largest_clock_reported_and_the_hand_over_waits_for_every_worker() {
    let p = Placement::new(&[0, 1]).unwrap();
    let mut r = Reshard::new(&p, &[0, 1, 2], [0, 1, 2]).unwrap();
    assert_eq!(r.paused(0, 5).unwrap(), ReshardStep::Wait);
    assert_eq!(r.paused(2, 7).unwrap(), ReshardStep::Wait);
    assert_eq!(r.unreported(), [1]);
    assert_eq!(r.paused(1, 6).unwrap(), ReshardStep::Cut(7));
    assert_eq!(r.cut(), Some(7));
    assert_eq!(r.paused(0, 7).unwrap(), ReshardStep::Wait);
    assert!(r.paused(1, 8).is_err(), "a worker ran past the cut");
    assert_eq!(r.paused(1, 7).unwrap(), ReshardStep::Wait);
    // The worker whose first report was the cut still says when it is there.
    assert_eq!(r.paused(2, 7).unwrap(), ReshardStep::HandOver(7));
    // Once only.
    assert_eq!(r.paused(1, 7).unwrap(), ReshardStep::Wait);
    assert_eq!(r.next().shards(), [0, 1, 2]);
}

#[test]
fn a_worker_that_ends_is_not_waited_for() {
    let p = Placement::new(&[0, 1]).unwrap();
    let mut r = Reshard::new(&p, &[1], [0, 1]).unwrap();
    assert_eq!(r.paused(0, 4).unwrap(), ReshardStep::Wait);
    assert_eq!(r.gone(1), ReshardStep::Cut(4));
    assert_eq!(r.paused(0, 4).unwrap(), ReshardStep::HandOver(4));
    assert_eq!(r.workers(), [0]);
    // Reports of workers not taking part change nothing.
    let mut r = Reshard::new(&p, &[1], [0]).unwrap();
    assert_eq!(r.paused(5, 9).unwrap(), ReshardStep::Wait);
    assert_eq!(r.paused(0, 2).unwrap(), ReshardStep::Cut(2));
    assert_eq!(
        r.gone(0),
        ReshardStep::Wait,
        "no worker left: nothing to hand over for"
    );
}

#[test]
fn a_worker_says_its_next_boundary_runs_to_the_cut_and_installs_the_placement() {
    let p = Placement::new(&[0]).unwrap().with_shards(&[0, 1]).unwrap();
    let mut w = WorkerPause::default();
    assert_eq!(w.at_boundary(3), AtBoundary::Step);
    assert_eq!(w.ask(1, 4), Some(4));
    assert_eq!(w.ask(1, 4), None, "asked once per change");
    assert_eq!(w.at_boundary(4), AtBoundary::Wait, "paused where it said");
    w.cut(0, 9);
    assert_eq!(
        w.at_boundary(4),
        AtBoundary::Wait,
        "a cut of another change"
    );
    w.cut(1, 6);
    assert_eq!(w.at_boundary(4), AtBoundary::Step);
    assert_eq!(w.at_boundary(5), AtBoundary::Step);
    assert_eq!(w.at_boundary(6), AtBoundary::Report(6));
    assert_eq!(w.at_boundary(6), AtBoundary::Wait);
    w.resume(p.clone());
    assert_eq!(w.at_boundary(6), AtBoundary::Install(p.clone()));
    assert_eq!(w.at_boundary(7), AtBoundary::Step);
    // Stale words of the installed epoch change nothing.
    assert_eq!(w.ask(1, 8), None);
    w.resume(p.clone());
    assert_eq!(w.at_boundary(8), AtBoundary::Step);
    // A worker at the cut when it learns it reports at once.
    let mut w = WorkerPause::default();
    assert_eq!(w.ask(1, 5), Some(5));
    assert_eq!(w.at_boundary(5), AtBoundary::Wait);
    w.cut(1, 5);
    assert_eq!(w.at_boundary(5), AtBoundary::Report(5));
    // The next change asked before the last placement was installed is kept.
    let mut w = WorkerPause::default();
    assert_eq!(w.ask(1, 2), Some(2));
    w.cut(1, 2);
    assert_eq!(w.at_boundary(2), AtBoundary::Report(2));
    w.resume(p.clone());
    assert_eq!(w.ask(2, 3), Some(3));
    assert_eq!(w.at_boundary(2), AtBoundary::Install(p));
    assert_eq!(w.at_boundary(2), AtBoundary::Step);
    assert_eq!(w.at_boundary(3), AtBoundary::Wait);
}

mod sim {
    //! Workers and shards through their cores, messages delivered at once in FIFO order,
    //! the shard set changed at clock boundaries: no update is lost or applied twice, and
    //! every read stays within its consistency model's bound throughout.

    use std::collections::{BTreeMap, VecDeque};

    use proptest::prelude::*;

    use super::super::*;
    use crate::core::client::{ClientCore, GetOutcome};
    use crate::core::shard::{PsShardCore, ShardAction};
    use crate::core::testing::{T, spec};
    use crate::core::types::{Consistency, ReadRequest, Row, ShardBatch, WorkerId};

    enum Msg {
        Batch(ShardBatch),
        Read(ReadRequest),
    }

    struct Sim {
        shards: BTreeMap<u32, PsShardCore>,
        clients: Vec<ClientCore>,
        to_shards: VecDeque<Msg>,
        to_clients: VecDeque<(u32, ShardAction)>,
        consistency: Consistency,
        /// Every update made, as (clock, row, delta).
        made: Vec<(Clock, u64, f32)>,
    }

    impl Sim {
        fn new(consistency: Consistency, workers: u32, start: &[u32]) -> Sim {
            let placement = Placement::new(start).unwrap();
            let mut shards = BTreeMap::new();
            for &s in start {
                let mut core = PsShardCore::new(workers, vec![spec(consistency)]).unwrap();
                core.set_placement(s, placement.clone(), None).unwrap();
                shards.insert(s, core);
            }
            let clients = (0..workers)
                .map(|w| {
                    let mut c = ClientCore::new(WorkerId(w), 4, vec![spec(consistency)]).unwrap();
                    c.install_placement(placement.clone()).unwrap();
                    c
                })
                .collect();
            Sim {
                shards,
                clients,
                to_shards: VecDeque::new(),
                to_clients: VecDeque::new(),
                consistency,
                made: Vec::new(),
            }
        }

        fn deliver(&mut self) {
            loop {
                if let Some(m) = self.to_shards.pop_front() {
                    let (shard, out) = match m {
                        Msg::Batch(b) => (
                            b.shard,
                            self.shards.get_mut(&b.shard).unwrap().handle_batch(&b),
                        ),
                        Msg::Read(r) => (
                            r.shard,
                            self.shards.get_mut(&r.shard).unwrap().handle_read(&r),
                        ),
                    };
                    let out = out.unwrap();
                    self.to_clients.extend(out.into_iter().map(|a| (shard, a)));
                } else if let Some((shard, a)) = self.to_clients.pop_front() {
                    let w = a.worker().0 as usize;
                    self.clients[w].handle(shard, a).unwrap();
                } else {
                    return;
                }
            }
        }

        /// Worker `w` reads `row` at its clock and checks the value against the updates
        /// made: all of clocks below the bound, none not yet made.
        fn read(&mut self, w: usize, row: u64) {
            let c = self.clients[w].current_clock();
            for _ in 0..4 {
                match self.clients[w].get_shared(T, RowId(row)).unwrap() {
                    GetOutcome::Hit(r) => {
                        let got = r.get(0);
                        let upper: f32 =
                            (self.made.iter()).filter(|u| u.1 == row).map(|u| u.2).sum();
                        let lower: f32 = match self.consistency.required_row_clock(c) {
                            Some(need) => (self.made.iter())
                                .filter(|u| u.1 == row && u.0 < need)
                                .map(|u| u.2)
                                .sum(),
                            None => 0.0,
                        };
                        assert!(
                            got >= lower - 1e-3 && got <= upper + 1e-3,
                            "row {row} at clock {c}: {got} not in [{lower}, {upper}]"
                        );
                        return;
                    }
                    GetOutcome::Fetch(req) => self.to_shards.push_back(Msg::Read(req)),
                    GetOutcome::Wait => {}
                }
                self.deliver();
            }
            panic!("read of row {row} at clock {c} never served");
        }

        fn inc(&mut self, w: usize, row: u64, d: f32) {
            let c = self.clients[w].current_clock();
            self.clients[w].inc(T, RowId(row), 0, d).unwrap();
            self.made.push((c, row, d));
        }

        fn clock(&mut self, w: usize, prefetch: Option<u64>) {
            if let Some(row) = prefetch
                && let Some(req) = self.clients[w].prefetch_next_clock(T, RowId(row)).unwrap()
            {
                self.to_shards.push_back(Msg::Read(req));
            }
            let batches = self.clients[w].clock();
            self.to_shards.extend(batches.into_iter().map(Msg::Batch));
            self.deliver();
        }

        /// The change to `after` with every worker at a boundary, as the shells run it.
        fn reshard(&mut self, after: &[u32]) {
            let current = self.clients[0].placement().clone();
            let workers = 0..self.clients.len() as u32;
            let mut r = Reshard::new(&current, after, workers.clone()).unwrap();
            let mut pauses = vec![WorkerPause::default(); self.clients.len()];
            let mut step = ReshardStep::Wait;
            for w in workers.clone() {
                let at = self.clients[w as usize].current_clock();
                // In lockstep every worker is at a boundary: it pauses at the one it is at.
                let said = pauses[w as usize].ask(current.epoch() + 1, at).unwrap();
                step = r.paused(w, said).unwrap();
            }
            let ReshardStep::Cut(cut) = step else {
                panic!("every worker reported: {step:?}");
            };
            for w in workers.clone() {
                let p = &mut pauses[w as usize];
                p.cut(current.epoch() + 1, cut);
                let clock = self.clients[w as usize].current_clock();
                assert_eq!(p.at_boundary(clock), AtBoundary::Report(cut));
                step = r.paused(w, cut).unwrap();
            }
            let ReshardStep::HandOver(cut) = step else {
                panic!("workers in lockstep hand over at once: {step:?}");
            };
            let next = r.next().clone();
            let members: Vec<WorkerId> = r.workers().into_iter().map(WorkerId).collect();
            let mut moved = Vec::new();
            for core in self.shards.values_mut() {
                assert_eq!(core.min_clock(), cut);
                moved.extend(core.hand_over(next.clone()).unwrap());
            }
            self.shards.retain(|&s, _| next.has(s));
            for s in next.shards() {
                self.shards.entry(s).or_insert_with(|| {
                    let mut core =
                        PsShardCore::new(members.len() as u32, vec![spec(self.consistency)])
                            .unwrap();
                    core.set_placement(s, next.clone(), Some((cut, &members)))
                        .unwrap();
                    core
                });
            }
            for snap in moved {
                for (row, data) in snap.rows {
                    let owner = self
                        .shards
                        .get_mut(&next.shard_of(snap.table, row))
                        .unwrap();
                    let one = crate::core::shard::TableSnapshot {
                        table: snap.table,
                        rows: vec![(row, data)],
                    };
                    owner.take_over(vec![one]).unwrap();
                }
            }
            for c in &mut self.clients {
                c.install_placement(next.clone()).unwrap();
            }
        }
    }

    fn run(consistency: Consistency, ops: &[(u8, u64, u8)], changes: &[(u64, Vec<u32>)]) {
        let workers = 3;
        let mut sim = Sim::new(consistency, workers, &[0, 1]);
        let clocks = 8;
        for c in 0..clocks {
            if let Some((_, after)) = changes.iter().find(|(at, _)| *at == c) {
                sim.reshard(after);
            }
            for w in 0..workers as usize {
                for &(who, row, d) in ops.iter().filter(|o| o.0 as usize % 3 == w) {
                    let _ = who;
                    sim.read(w, row);
                    sim.inc(w, row, f32::from(d) + 1.0);
                }
                sim.clock(w, ops.first().map(|o| o.1));
            }
        }
        for w in 0..workers as usize {
            for row in 0..16 {
                sim.read(w, row);
            }
        }
        // Every update applied once: the shards' rows are the sums of the updates made.
        for row in 0..16u64 {
            let want: f32 = (sim.made.iter()).filter(|u| u.1 == row).map(|u| u.2).sum();
            let owner = sim.clients[0].placement().shard_of(T, RowId(row));
            let got = sim.shards[&owner]
                .row(T, RowId(row))
                .map_or(0.0, |r: &Row| r.get(0));
            assert!((got - want).abs() < 1e-3, "row {row}: {got} != {want}");
            for s in sim.shards.keys().filter(|&&s| s != owner) {
                assert!(
                    sim.shards[s].row(T, RowId(row)).is_none(),
                    "row {row} on two shards"
                );
            }
        }
    }

    fn model(kind: u8) -> Consistency {
        match kind % 4 {
            0 => Consistency::Bsp,
            1 => Consistency::Ssp { staleness: 1 },
            2 => Consistency::Essp { staleness: 1 },
            _ => Consistency::Async,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn no_update_is_lost_or_applied_twice_across_a_join_and_a_leave(
            kind in 0u8..4,
            ops in proptest::collection::vec((0u8..3, 0u64..16, 0u8..4), 1..24),
            join in 1u64..4,
            leave in 4u64..8,
        ) {
            let changes = [(join, vec![0, 1, 2]), (leave, vec![1, 2])];
            run(model(kind), &ops, &changes);
        }
    }

    #[test]
    fn every_model_takes_a_join_then_a_leave() {
        let ops: Vec<(u8, u64, u8)> = (0..30).map(|i| (i % 3, u64::from(i % 16), i % 4)).collect();
        for kind in 0..4 {
            run(model(kind), &ops, &[(2, vec![0, 1, 2]), (5, vec![1, 2])]);
        }
    }
}
