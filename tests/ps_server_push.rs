//! Server push (Bösen's managed communication from shards to workers) through the actors:
//! an in-process cluster of one shard and two workers.

use petrel::actors::{Cluster, NodeContext, Topology};
use petrel::ps::PsShardCore;
use petrel::ps::core::managed::SendPolicy;
use petrel::ps::core::server_push::{ServerPushConfig, ServerPushStats};
use petrel::ps::core::types::{Consistency, Row, RowId, TableId};
use petrel::ps::shells::{self, PsLayout, ShardQuery, ShardState, TablesBuilder};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::{query_after_serving, start_ps_worker};
use std::time::Duration;

const T: TableId = TableId(0);
const ROWS: u64 = 40;
const WIDTH: u32 = 4;
/// Rows one tick may push: several ticks are needed for all of them.
const BUDGET_ROWS: usize = 3;

/// Waits (a hang guard, not a timing assertion) until `flag` is set.
async fn wait_for(flag: &AtomicBool, what: &str) -> Result<(), String> {
    for _ in 0..6000 {
        if flag.load(Ordering::SeqCst) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("gave up waiting for {what}"))
}

/// Worker 1 caches every row, then worker 0 updates all of them and ends its clock. With a
/// staleness bound of 100 worker 1's reads are all cache hits, so the only way the update
/// can reach its cache is a server push: worker 1 sees every new value without sending a
/// single further read (no miss). The shard's counters show that no tick pushed more row
/// bytes than the budget and that the pushes took several ticks.
#[test]
fn server_push_reaches_another_workers_cache_before_its_next_miss_within_the_budget() {
    static CACHED: AtomicBool = AtomicBool::new(false);
    static SEEN: AtomicBool = AtomicBool::new(false);
    petrel::init_tracing();
    let tables = TablesBuilder::new()
        .dense("t", WIDTH, Consistency::Ssp { staleness: 100 })
        .build()
        .unwrap();
    let row_bytes = Row::Dense(vec![0.0; WIDTH as usize]).wire_size();
    let budget = BUDGET_ROWS * row_bytes;
    let lay = PsLayout {
        shard_nodes: vec!["s0".into()],
        worker_nodes: vec!["w0".into(), "w1".into()],
    };
    let settings = Topology::builder("ps-push")
        .transport("memory".parse().unwrap())
        .node("s0", &["shard"])
        .node("w0", &["worker"])
        .node("w1", &["worker"])
        .with(|s| s.cluster.failure_timeout_ms = 10_000)
        .build()
        .unwrap();
    let state: Arc<Mutex<Option<ShardState>>> = Arc::new(Mutex::new(None));
    let (l1, l2, t1, t2, st) = (lay.clone(), lay, tables.clone(), tables, state.clone());
    let cluster = Cluster::new(settings)
        .role("shard", move |ctx: NodeContext| {
            let (lay, tables, st) = (l1.clone(), t1.clone(), st.clone());
            Box::pin(async move {
                let mut core = PsShardCore::new(2, tables).map_err(|e| e.to_string())?;
                core.enable_server_push(ServerPushConfig {
                    policy: SendPolicy::RelativeMagnitude,
                    // Unpaced: one batch per tick, the budget.
                    bytes_per_s: u64::MAX,
                    batch_bytes: budget,
                    tick_ms: 5,
                });
                let h = shells::start_shard_core(&ctx.node, &lay, 0, core, None)
                    .map_err(|e| e.to_string())?;
                let s = query_after_serving(h, ShardQuery::Ping).await?;
                *st.lock().unwrap() = Some(s);
                Ok::<(), String>(())
            })
        })
        .role("worker", move |ctx: NodeContext| {
            let (lay, tables) = (l2.clone(), t2.clone());
            Box::pin(async move {
                let (w, c) = start_ps_worker(&ctx, &lay, tables, 0).await?;
                let rows: Vec<RowId> = (0..ROWS).map(RowId).collect();
                if w == 0 {
                    wait_for(&CACHED, "worker 1's cache").await?;
                    for &r in &rows {
                        c.inc(T, r, 0, 1.0).map_err(|e| e.to_string())?;
                    }
                    c.clock().map_err(|e| e.to_string())?;
                    wait_for(&SEEN, "worker 1 to see the update").await?;
                } else {
                    let first = c.get_many(T, &rows).await.map_err(|e| e.to_string())?;
                    if first.iter().any(|r| r.get(0) != 0.0) {
                        return Err("rows not zero before the update".into());
                    }
                    let misses = c.reads_sent();
                    CACHED.store(true, Ordering::SeqCst);
                    let mut fresh = false;
                    for _ in 0..6000 {
                        let got = c.get_many(T, &rows).await.map_err(|e| e.to_string())?;
                        if got.iter().all(|r| r.get(0) == 1.0) {
                            fresh = true;
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    if !fresh {
                        return Err("the update never reached worker 1's cache".into());
                    }
                    if c.reads_sent() != misses {
                        return Err(format!(
                            "worker 1 sent {} reads after caching: a miss, not a push",
                            c.reads_sent() - misses
                        ));
                    }
                    SEEN.store(true, Ordering::SeqCst);
                }
                c.leave().map_err(|e| e.to_string())
            })
        });
    if let Err(e) = cluster.run_in_process() {
        panic!("{}", petrel::actors::error_chain(&e));
    }
    let s = state.lock().unwrap().take().expect("the shard's state");
    let ServerPushStats {
        ticks,
        bytes,
        rows,
        max_tick_bytes,
        ..
    } = s.server_push;
    assert!(
        max_tick_bytes <= budget as u64,
        "{max_tick_bytes} > {budget}"
    );
    assert!(rows >= ROWS, "{rows} rows pushed");
    assert!(bytes >= ROWS * row_bytes as u64, "{bytes} bytes pushed");
    assert!(ticks >= ROWS / BUDGET_ROWS as u64, "{ticks} ticks");
}
