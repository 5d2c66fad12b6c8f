//! Managed communication from server to clients (Bösen, Wei et al., SoCC 2015): when its
//! min clock advances a shard pushes every changed row to the workers that hold a stale
//! copy; between advances it sends paced partial pushes of the top rows, so cached reads
//! get fresher before their next miss.
//!
//! The decisions are [`PsShardCore::server_push_tick`](crate::core::shard::PsShardCore::server_push_tick)
//! (the shard actor calls it on a timer with the wall time) and the min-clock advance. Both
//! spend one [`Pacer`](crate::core::managed::Pacer): after `N` bytes the ticks wait
//! `N / bytes_per_s`. A row's priority is Bösen's accumulated relative change
//! ([`relative_change`](crate::core::managed::relative_change)) since it was last pushed.
//! A push is a [`ShardAction::Push`](crate::core::shard::ShardAction::Push) at the current
//! min clock, as ESSP's, so installing it never weakens a cached row's guarantee.

use serde::{Deserialize, Serialize};

use crate::core::managed::{BandwidthManager, DEFAULT_BATCH_BYTES, SendPolicy};

/// Server-push settings of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerPushConfig {
    /// Which changed rows go first.
    pub policy: SendPolicy,
    /// The pacing rate of the pushes (the min-clock pushes count too), bytes per second.
    pub bytes_per_s: u64,
    /// Row bytes (`Row::wire_size` per row and holder) one partial push may carry.
    pub batch_bytes: usize,
    /// Time between two ticks, ms (the shard actor's timer).
    pub tick_ms: u64,
}

impl ServerPushConfig {
    /// Pushes paced at `bytes_per_s` in Bösen's 100 kB batches, a tick every `tick_ms`.
    pub fn at_rate(policy: SendPolicy, bytes_per_s: u64, tick_ms: u64) -> Self {
        ServerPushConfig {
            policy,
            bytes_per_s,
            batch_bytes: DEFAULT_BATCH_BYTES,
            tick_ms: tick_ms.max(1),
        }
    }
}

/// What server push has sent (counters, for benches and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPushStats {
    /// Ticks run.
    pub ticks: u64,
    /// Row bytes pushed (encoded row sizes, one per row and holder), ticks and clocks.
    pub bytes: u64,
    /// Rows pushed (one per row and holder).
    pub rows: u64,
    /// The most row bytes one tick pushed (never above `batch_bytes`, bar one big row).
    pub max_tick_bytes: u64,
    /// Row bytes of the pushes at min-clock advances.
    #[serde(default)]
    pub clock_bytes: u64,
}

/// A row changed since it was last pushed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PushPending {
    /// Stamp of its first change since then (FIFO order).
    pub(crate) order: u64,
    /// Accumulated relative change since then (the priority).
    pub(crate) magnitude: f32,
}

/// A shard's server-push state.
#[derive(Debug, Clone)]
pub(crate) struct ServerPush {
    pub(crate) cfg: ServerPushConfig,
    pub(crate) manager: BandwidthManager,
    pub(crate) stats: ServerPushStats,
}

impl ServerPush {
    pub(crate) fn new(cfg: ServerPushConfig) -> Self {
        let mut manager = BandwidthManager::new(cfg.bytes_per_s, cfg.policy);
        manager.batch_bytes = cfg.batch_bytes;
        ServerPush {
            manager,
            cfg,
            stats: ServerPushStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::client::{ClientCore, GetOutcome};
    use crate::core::shard::{PsShardCore, ShardAction};
    use crate::core::testing::read;
    use crate::core::types::{
        Consistency, Row, RowId, RowUpdate, ShardBatch, TableId, TableKind, TableSpec, UpdateBatch,
        WorkerId,
    };

    const T: TableId = TableId(0);

    fn spec() -> TableSpec {
        TableSpec::new(
            0,
            "t",
            TableKind::Dense { width: 1 },
            Consistency::Ssp { staleness: 2 },
        )
    }

    fn row_bytes() -> usize {
        Row::Dense(vec![0.0]).wire_size()
    }

    fn batch(worker: u32, seq: u64, updates: &[(u64, f32)]) -> ShardBatch {
        ShardBatch {
            shard: 0,
            worker: WorkerId(worker),
            clock: 0,
            end_of_clock: false,
            batch: UpdateBatch {
                seq,
                updates: updates
                    .iter()
                    .map(|&(r, v)| RowUpdate {
                        table: T,
                        row: RowId(r),
                        delta: Row::Dense(vec![v]).into(),
                    })
                    .collect(),
            },
        }
    }

    /// A shard where rows 0..3 hold 100, 1, 10 and worker 1 has read rows 0, 1, 2; a push
    /// carries `batch_rows` rows, paced at `batch_rows` rows per second.
    fn shard(policy: SendPolicy, batch_rows: usize) -> PsShardCore {
        let mut s = PsShardCore::new(2, vec![spec()]).unwrap();
        s.enable_server_push(ServerPushConfig {
            policy,
            bytes_per_s: (batch_rows * row_bytes()) as u64,
            batch_bytes: batch_rows * row_bytes(),
            tick_ms: 10,
        });
        s.handle_batch(&batch(0, 1, &[(0, 100.0), (1, 1.0), (2, 10.0)]))
            .unwrap();
        for r in 0..3 {
            assert_eq!(
                s.handle_read(&read(WorkerId(1), r, T, RowId(r), 0))
                    .unwrap()
                    .len(),
                1
            );
        }
        // Nothing changed since the replies: nothing to push.
        assert!(s.server_push_tick(0.0).is_empty());
        s
    }

    fn pushed_rows(actions: &[ShardAction]) -> Vec<(u32, u64)> {
        actions
            .iter()
            .flat_map(|a| match a {
                ShardAction::Push { worker, rows, .. } => rows
                    .iter()
                    .map(|(r, _)| (worker.0, r.0))
                    .collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn paced_partial_pushes_go_by_accumulated_relative_change() {
        let mut s = shard(SendPolicy::RelativeMagnitude, 2);
        // Changes: row0 += 5 then -5 (5/100 + 5/105, gross), row1 += .5 (.5/1), row2 += 4
        // (4/10).
        s.handle_batch(&batch(0, 2, &[(0, 5.0), (1, 0.5), (2, 4.0)]))
            .unwrap();
        s.handle_batch(&batch(0, 3, &[(0, -5.0)])).unwrap();
        // Row 3 changed too but nobody holds it: never pushed.
        s.handle_batch(&batch(0, 4, &[(3, 50.0)])).unwrap();
        let first = s.server_push_tick(1.0);
        assert_eq!(pushed_rows(&first), vec![(1, 1), (1, 2)]);
        match &first[0] {
            ShardAction::Push { rows, clock, .. } => {
                assert_eq!(*clock, 0);
                assert_eq!(&*rows[0].1, &Row::Dense(vec![1.5]));
            }
            a => panic!("not a push: {a:?}"),
        }
        let stats = s.server_push_stats();
        assert_eq!(stats.bytes, 2 * row_bytes() as u64);
        assert_eq!(stats.max_tick_bytes, 2 * row_bytes() as u64);
        // Two rows' bytes at two rows per second: the next push waits a second.
        assert!(s.server_push_tick(1.5).is_empty());
        assert_eq!(pushed_rows(&s.server_push_tick(2.0)), vec![(1, 0)]);
        assert!(s.server_push_tick(3.0).is_empty());
        assert_eq!(s.server_push_stats().ticks, 5);
        assert_eq!(s.server_push_stats().rows, 3);
    }

    #[test]
    fn a_min_clock_advance_pushes_every_changed_row_and_counts_against_the_pace() {
        let mut s = shard(SendPolicy::Fifo, 1);
        // Worker 0 holds row 2 too: pushing row 2 costs two rows.
        s.handle_read(&read(WorkerId(0), 9, T, RowId(2), 0))
            .unwrap();
        s.handle_batch(&batch(0, 2, &[(2, 1.0), (0, 1.0), (1, 1.0)]))
            .unwrap();
        // Fifo: row 2 first, alone (a row larger than the batch still goes).
        assert_eq!(pushed_rows(&s.server_push_tick(1.0)), vec![(0, 2), (1, 2)]);
        // Both workers end clock 0: every changed row goes to its stale holders at once.
        let mut end = batch(0, 3, &[(1, 1.0)]);
        end.end_of_clock = true;
        assert!(s.handle_batch(&end).unwrap().is_empty());
        let mut end = batch(1, 1, &[]);
        end.end_of_clock = true;
        let at_clock = s.handle_batch(&end).unwrap();
        assert_eq!(pushed_rows(&at_clock), vec![(1, 0), (1, 1)]);
        assert!(
            at_clock
                .iter()
                .all(|a| matches!(a, ShardAction::Push { clock: 1, .. }))
        );
        let stats = s.server_push_stats();
        assert_eq!(stats.clock_bytes, 2 * row_bytes() as u64);
        // Two pushed rows (tick) plus two (clock) at one row per second: ready at 5 s.
        let mut next = batch(0, 4, &[(0, 1.0)]);
        next.clock = 1;
        s.handle_batch(&next).unwrap();
        assert!(s.server_push_tick(4.5).is_empty());
        assert_eq!(pushed_rows(&s.server_push_tick(5.0)), vec![(1, 0)]);
        // A zero rate pushes only at clocks; off: no ticks, no holders tracked.
        let mut z = shard(SendPolicy::Fifo, 0);
        z.handle_batch(&batch(0, 2, &[(0, 1.0)])).unwrap();
        assert!(z.server_push_tick(1.0).is_empty());
        assert_eq!(z.server_push_stats().bytes, 0);
        let mut off = PsShardCore::new(1, vec![spec()]).unwrap();
        assert!(off.server_push_tick(1.0).is_empty());
        assert_eq!(off.server_push_stats(), ServerPushStats::default());
    }

    #[test]
    fn a_pushed_row_refreshes_the_cache_and_keeps_own_writes() {
        let mut s = PsShardCore::new(2, vec![spec()]).unwrap();
        s.enable_server_push(ServerPushConfig::at_rate(
            SendPolicy::RelativeMagnitude,
            1_000_000,
            10,
        ));
        let mut c1 = ClientCore::new(WorkerId(1), 1, vec![spec()]).unwrap();
        // Worker 1 reads row 0 (a miss, served at once) and caches 0.
        let req = match c1.get_shared(T, RowId(0)).unwrap() {
            GetOutcome::Fetch(r) => r,
            o => panic!("{o:?}"),
        };
        for a in s.handle_read(&req).unwrap() {
            c1.handle(0, a).unwrap();
        }
        // Worker 1 writes 1 (flushed early, in flight: the shard has not applied it).
        c1.inc(T, RowId(0), 0, 1.0).unwrap();
        let own = c1.take_early(&[(T, RowId(0))]);
        // Worker 0 adds 5; the shard pushes the row to worker 1 before its next miss.
        s.handle_batch(&batch(0, 1, &[(0, 5.0)])).unwrap();
        let pushes = s.server_push_tick(1.0);
        assert_eq!(pushed_rows(&pushes), vec![(1, 0)]);
        for a in pushes {
            c1.handle(0, a).unwrap();
        }
        // Fresh value (5) plus its own write still in flight (1); still a hit, same clock.
        assert_eq!(c1.cached(T, RowId(0)).unwrap(), (&Row::Dense(vec![6.0]), 0));
        assert_eq!(
            c1.get_shared(T, RowId(0)).unwrap(),
            GetOutcome::Hit(Row::Dense(vec![6.0]).into())
        );
        // Once the shard applies the own write, the next push does not count it twice.
        for b in own {
            s.handle_batch(&b).unwrap();
        }
        for a in s.server_push_tick(2.0) {
            c1.handle(0, a).unwrap();
        }
        assert_eq!(c1.cached(T, RowId(0)).unwrap().0, &Row::Dense(vec![6.0]));
    }
}
