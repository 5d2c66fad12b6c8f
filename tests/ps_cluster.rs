// Over 600 lines: the parameter server's in-process cluster cases share one harness.
//! The parameter server through the actors: in-process clusters (memory transport unless
//! noted), shards and workers on separate nodes.

use petrel::actors::{Cluster, NodeContext, Topology};
use petrel::actors::{Transport, error_chain};
use petrel::ps::core::rules::RuleRegistry;
use petrel::ps::core::types::{Consistency, Row, RowId, TableId, TableSpec, shard_of};
use petrel::ps::shells::{self, PsClient, PsLayout, ShardQuery, TablesBuilder};
use petrel::ps::{PsMf, PsMfResult, PsMfSettings};
use std::sync::{Arc, Mutex};

use crate::common::{query_after_serving, start_ps_worker};
use std::time::Duration;

const T: TableId = TableId(0);
const ROWS: u64 = 8;

fn layout(shards: usize, workers: usize) -> PsLayout {
    PsLayout {
        shard_nodes: (0..shards).map(|s| format!("s{s}")).collect(),
        worker_nodes: (0..workers).map(|w| format!("w{w}")).collect(),
    }
}

fn topo(shards: usize, workers: usize, transport: &str) -> petrel::actors::Settings {
    let mut t = Topology::builder("ps-test").transport(transport.parse::<Transport>().unwrap());
    for s in 0..shards {
        t = t.node(&format!("s{s}"), &["shard"]);
    }
    for w in 0..workers {
        t = t.node(&format!("w{w}"), &["worker"]);
    }
    // Generous failure detection: the test machine is small and shared.
    t.with(|s| s.cluster.failure_timeout_ms = 10_000)
        .build()
        .unwrap()
}

fn patient(s: &mut petrel::actors::Settings) {
    s.cluster.failure_timeout_ms = 10_000;
}

type Program = Arc<
    dyn Fn(PsClient) -> futures::future::LocalBoxFuture<'static, Result<(), String>> + Send + Sync,
>;

/// A cluster whose workers run `program` and whose shards serve `tables`; returns the merged
/// final table 0 (read after every worker left).
fn run(
    tables: Vec<TableSpec>,
    shards: usize,
    workers: usize,
    transport: &str,
    program: Program,
) -> Result<std::collections::HashMap<RowId, Row>, String> {
    run_from(tables, shards, workers, transport, program, None)
}

/// `run`, with shards restored from a checkpoint `(dir, clock)` and workers resuming there.
fn run_from(
    tables: Vec<TableSpec>,
    shards: usize,
    workers: usize,
    transport: &str,
    program: Program,
    resume: Option<(std::path::PathBuf, u64)>,
) -> Result<std::collections::HashMap<RowId, Row>, String> {
    let resume2 = resume.clone();
    petrel::init_tracing();
    let lay = layout(shards, workers);
    let out = Arc::new(Mutex::new(None));
    let (l1, l2, t1, t2) = (lay.clone(), lay.clone(), tables.clone(), tables);
    let out2 = out.clone();
    let cluster = Cluster::new(topo(shards, workers, transport))
        .role("shard", move |ctx: NodeContext| {
            let (lay, tables, out) = (l1.clone(), t1.clone(), out2.clone());
            let resume = resume.clone();
            Box::pin(async move {
                let s = lay.shards_on(&ctx.spec.name)[0];
                let from = resume.as_ref().map(|(d, c)| (d.as_path(), *c));
                let h = shells::start_shard(&ctx.node, &lay, s, tables, &RuleRegistry::new(), from)
                    .map_err(|e| e.to_string())?;
                // Every worker left: read this shard's final rows.
                let st = query_after_serving(h, ShardQuery::Snapshot).await?;
                let mut o = out.lock().unwrap();
                let m = o.get_or_insert_with(Vec::new);
                m.push(st);
                Ok::<(), String>(())
            })
        })
        .role("worker", move |ctx: NodeContext| {
            let (lay, tables, program) = (l2.clone(), t2.clone(), program.clone());
            let clock = resume2.as_ref().map_or(0, |r| r.1);
            Box::pin(async move {
                let (_, c) = start_ps_worker(&ctx, &lay, tables, clock).await?;
                NODE.with(|n| *n.borrow_mut() = Some(ctx.node.clone()));
                program(c).await
            })
        });
    cluster.run_in_process().map_err(|e| e.to_string())?;
    let states = out.lock().unwrap().take().unwrap_or_default();
    Ok(shells::merge_tables(&states).remove(&T).unwrap_or_default())
}

/// Worker `w` at clock `c` adds `f(w, c, r)` to row `r`, after reading every row and checking
/// the read reflects every update of clocks `< c` (BSP) exactly.
fn f(w: u32, c: u64, r: u64) -> f32 {
    ((w + 1) as f32) * 0.5 + (c as f32) + (r as f32) * 0.25
}

fn serial_sum(workers: u32, clocks: u64, r: u64) -> f32 {
    let mut s = 0.0;
    for c in 0..clocks {
        for w in 0..workers {
            s += f(w, c, r);
        }
    }
    s
}

#[test]
fn bsp_cluster_matches_serial_result_over_two_shards() {
    let tables = TablesBuilder::new()
        .dense("t", 2, Consistency::Bsp)
        .build()
        .unwrap();
    let workers = 3u32;
    let clocks = 6u64;
    let program: Program = Arc::new(move |c: PsClient| {
        Box::pin(async move {
            let rows: Vec<RowId> = (0..ROWS).map(RowId).collect();
            for clock in 0..clocks {
                let got = c.get_many(T, &rows).await.map_err(|e| e.to_string())?;
                for (r, row) in got.iter().enumerate() {
                    // BSP: every update of clocks < clock; possibly some of the clock in
                    // progress (other workers' current clock), never anything later.
                    let want = serial_sum(workers, clock, r as u64);
                    let most = serial_sum(workers, clock + 1, r as u64);
                    if row.get(0) < want - 1e-3 || row.get(0) > most + 1e-3 {
                        return Err(format!(
                            "worker {} clock {clock} row {r}: read {} want {want}",
                            c.worker(),
                            row.get(0)
                        ));
                    }
                }
                for r in 0..ROWS {
                    c.inc(T, RowId(r), 0, f(c.worker(), clock, r))
                        .map_err(|e| e.to_string())?;
                    c.batch_inc(T, RowId(r), &Row::Dense(vec![0.0, 1.0]))
                        .map_err(|e| e.to_string())?;
                }
                // Read-my-writes: the own update is visible before the clock.
                let mine = c.get(T, RowId(0)).await.map_err(|e| e.to_string())?;
                let want = serial_sum(workers, clock, 0) + f(c.worker(), clock, 0);
                if mine.get(0) < want - 1e-3 {
                    return Err(format!("read-my-writes: {} want {want}", mine.get(0)));
                }
                c.clock().map_err(|e| e.to_string())?;
            }
            c.barrier().await.map_err(|e| e.to_string())?;
            let st = c.table_stats(T);
            if st.max() != 0 {
                return Err(format!("bsp staleness {}", st.max()));
            }
            c.leave().map_err(|e| e.to_string())
        })
    });
    let table = run(tables, 2, workers as usize, "quic", program).unwrap();
    assert_eq!(table.len(), ROWS as usize);
    for r in 0..ROWS {
        let row = &table[&RowId(r)];
        assert!(
            (row.get(0) - serial_sum(workers, clocks, r)).abs() < 1e-2,
            "row {r}: {row:?}"
        );
        assert_eq!(row.get(1), (workers as u64 * clocks) as f32);
    }
}

/// The ticket API beside the clock API, over QUIC with read-my-writes off: `push_now` is
/// applied when `wait_push` returns (another worker's pull at the next clock sees it), an
/// owned `push` is flushed by `clock()`, and `pull`/`wait_pull` return BSP-fresh rows that
/// hold every worker's pushes; the final table holds each push exactly once.
#[test]
fn push_and_pull_tickets_keep_bsp_with_read_my_writes_off() {
    let tables = vec![
        TablesBuilder::new()
            .dense("t", 4, Consistency::Bsp)
            .build()
            .unwrap()
            .remove(0)
            .with_read_my_writes(false),
    ];
    let workers = 2u32;
    let clocks = 5u64;
    let program: Program = Arc::new(move |c: PsClient| {
        Box::pin(async move {
            let rows: Vec<RowId> = (0..ROWS).map(RowId).collect();
            let e = |e: petrel::ps::PsError| e.to_string();
            for clock in 0..clocks {
                let ticket = c
                    .push_now(T, RowId(0), Row::Dense(vec![1.0, 0.0, 0.0, 0.0]))
                    .map_err(e)?;
                c.wait_push(&ticket).await.map_err(e)?;
                for &r in &rows {
                    c.push(T, r, Row::Dense(vec![0.0, 1.0, 0.0, 0.0]))
                        .map_err(e)?;
                }
                // Read-my-writes off: the unflushed own push is not in a cached read.
                c.clock().map_err(e)?;
                let pull = c.pull(T, &rows).map_err(e)?;
                let got = c.wait_pull(pull).await.map_err(e)?;
                // Every worker's pushes of this clock and before; the other worker may
                // also have pushed its next clock before this pull was served (BSP bounds
                // a read from below), but cannot go further until this worker clocks.
                let want = (u64::from(workers) * (clock + 1)) as f32;
                let most = want + (workers - 1) as f32;
                let fits = |v: f32| (want..=most).contains(&v) && v == v.round();
                for (r, row) in got.iter().enumerate() {
                    if !fits(row.get(1)) || (r == 0 && !fits(row.get(0))) {
                        return Err(format!(
                            "worker {} clock {clock} row {r}: {:?}, want {want} to {most}",
                            c.worker(),
                            **row
                        ));
                    }
                }
            }
            c.barrier().await.map_err(e)?;
            c.leave().map_err(e)
        })
    });
    let table = run(tables, 2, workers as usize, "quic", program).unwrap();
    let total = (u64::from(workers) * clocks) as f32;
    for r in 0..ROWS {
        let row = &table[&RowId(r)];
        assert_eq!(row.get(1), total, "row {r}: {row:?}");
        assert_eq!(row.get(0), if r == 0 { total } else { 0.0 }, "row {r}");
    }
}

#[test]
fn ssp_reads_stay_within_the_bound_with_a_slow_worker() {
    let s = 2u32;
    let tables = TablesBuilder::new()
        .dense("t", 1, Consistency::Ssp { staleness: s })
        .build()
        .unwrap();
    let clocks = 12u64;
    let program: Program = Arc::new(move |c: PsClient| {
        Box::pin(async move {
            for clock in 0..clocks {
                if c.worker() == 0 {
                    tokio::time::sleep(Duration::from_millis(15)).await;
                }
                let v = c.get(T, RowId(1)).await.map_err(|e| e.to_string())?.get(0);
                // Every worker adds 1 per clock: the read must include all clocks <= c-s-1
                // of the 2 workers plus this worker's own clocks.
                let must = 2.0 * clock.saturating_sub(u64::from(s)) as f32;
                if v + 1e-3 < must {
                    return Err(format!(
                        "clock {clock}: read {v} misses updates (need {must})"
                    ));
                }
                c.inc(T, RowId(1), 0, 1.0).map_err(|e| e.to_string())?;
                c.clock().map_err(|e| e.to_string())?;
            }
            let st = c.table_stats(T);
            if st.max() > u64::from(s) || st.count() != clocks {
                return Err(format!("staleness {:?} above bound {s}", st.report()));
            }
            // The fast worker really ran ahead (observed staleness > 0 at some point).
            if c.worker() == 1 && st.max() == 0 {
                return Err("fast worker never read stale data".into());
            }
            c.leave().map_err(|e| e.to_string())
        })
    });
    let table = run(tables, 2, 2, "quic", program).unwrap();
    assert_eq!(table[&RowId(1)].get(0), 2.0 * clocks as f32);
}

/// Two workers read and increment one row each clock; returns (reads sent, mean staleness)
/// of worker 0 and checks the final value.
/// (row reads sent, fetches not made at the bound) of worker 0; the observed staleness
/// must stay within the bound.
fn push_or_pull(consistency: Consistency) -> (u64, u64) {
    let tables = TablesBuilder::new()
        .dense("t", 1, consistency)
        .build()
        .unwrap();
    let clocks = 12u64;
    let seen = Arc::new(Mutex::new((0u64, 0u64)));
    let seen2 = seen.clone();
    let program: Program = Arc::new(move |c: PsClient| {
        let seen = seen2.clone();
        Box::pin(async move {
            // Start both workers together (a late starter would block the other at the bound,
            // and a blocked read is a fetch even under ESSP).
            c.barrier().await.map_err(|e| e.to_string())?;
            for _ in 0..clocks {
                c.get(T, RowId(3)).await.map_err(|e| e.to_string())?;
                c.inc(T, RowId(3), 0, 1.0).map_err(|e| e.to_string())?;
                c.clock().map_err(|e| e.to_string())?;
                // Give pushes for the advanced min clock time to arrive.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            c.barrier().await.map_err(|e| e.to_string())?;
            let st = c.table_stats(T);
            if st.max() > 3 {
                return Err(format!("staleness {:?} above the bound", st.report()));
            }
            if c.worker() == 0 {
                let reads = c.read_stats();
                // Fetches the worker made although the min clock it knew allowed the read:
                // the row was missing or its cached copy too old. Fetches that waited at the
                // bound for the other worker (a loaded machine) are left out: ESSP cannot
                // avoid those either.
                let refreshes = reads.blocking_rounds - reads.bound_rounds;
                *seen.lock().unwrap() = (c.reads_sent(), refreshes);
            }
            c.leave().map_err(|e| e.to_string())
        })
    });
    let table = run(tables, 1, 2, "quic", program).unwrap();
    assert_eq!(table[&RowId(3)].get(0), 2.0 * clocks as f32);
    seen.lock().map(|g| *g).unwrap()
}

/// The shards `rows` of `table` live on (of 2).
fn shards_of(table: TableId, rows: &[RowId]) -> u64 {
    let set: std::collections::BTreeSet<u32> =
        rows.iter().map(|&r| shard_of(table, r, 2)).collect();
    set.len() as u64
}

#[test]
fn stale_rows_cost_one_request_per_shard_and_a_next_clock_prefetch_none() {
    const B: TableId = TableId(1);
    let tables = TablesBuilder::new()
        .dense("ssp", 1, Consistency::Ssp { staleness: 1 })
        .dense("bsp", 1, Consistency::Bsp)
        .build()
        .unwrap();
    let rows: Vec<RowId> = (0..16).map(RowId).collect();
    let (per_t, per_b) = (shards_of(T, &rows), shards_of(B, &rows));
    assert_eq!((per_t, per_b), (2, 2), "the rows span both shards");
    let program: Program = Arc::new(move |c: PsClient| {
        let rows = rows.clone();
        Box::pin(async move {
            let e = |e: petrel::ps::PsError| e.to_string();
            let check = |what: &str, got: u64, want: u64| {
                if got == want {
                    Ok(())
                } else {
                    Err(format!("worker {}: {what}: {got}, want {want}", c.worker()))
                }
            };
            c.barrier().await.map_err(e)?; // clock 1
            let s0 = c.read_stats();
            c.get_many(T, &rows).await.map_err(e)?;
            let s1 = c.read_stats();
            check(
                "rows of the first read",
                s1.rows_requested - s0.rows_requested,
                16,
            )?;
            check(
                "its messages",
                s1.request_messages - s0.request_messages,
                per_t,
            )?;
            check(
                "its round trips",
                s1.blocking_rounds - s0.blocking_rounds,
                1,
            )?;
            for &r in &rows {
                c.inc(T, r, 0, 1.0).map_err(e)?;
            }
            c.barrier().await.map_err(e)?;
            c.barrier().await.map_err(e)?; // clock 3: every cached row (clock 1) is stale
            let got = c.get_many(T, &rows).await.map_err(e)?;
            let s2 = c.read_stats();
            if got.iter().any(|v| v.get(0) != 2.0) {
                return Err(format!("stale read {got:?}, want both clock-1 updates"));
            }
            check(
                "stale rows refetched",
                s2.rows_requested - s1.rows_requested,
                16,
            )?;
            check(
                "in one message per shard",
                s2.request_messages - s1.request_messages,
                per_t,
            )?;
            check(
                "and one round trip",
                s2.blocking_rounds - s1.blocking_rounds,
                1,
            )?;
            // BSP: the next clock's rows asked during this clock, one message per shard...
            for &r in &rows {
                c.inc(B, r, 0, 1.0).map_err(e)?;
            }
            c.prefetch_next_clock(B, &rows).map_err(e)?;
            let s3 = c.read_stats();
            check("rows asked ahead", s3.rows_ahead - s2.rows_ahead, 16)?;
            check(
                "their messages",
                s3.request_messages - s2.request_messages,
                per_b,
            )?;
            c.clock().map_err(e)?; // clock 4
            // ...so the read at clock 4 sends nothing, and sees both workers' clock 3.
            let got = c.get_many(B, &rows).await.map_err(e)?;
            if got.iter().any(|v| v.get(0) != 2.0) {
                return Err(format!("bsp read {got:?}, want both clock-3 updates"));
            }
            check(
                "requests at clock 4",
                c.read_stats().request_messages,
                s3.request_messages,
            )?;
            c.barrier().await.map_err(e)?;
            c.leave().map_err(|e| e.to_string())
        })
    });
    let table = run(tables, 2, 2, "memory", program).unwrap();
    assert_eq!(table[&RowId(5)].get(0), 2.0);
}

#[test]
fn essp_pushes_refresh_the_cache_where_ssp_pulls() {
    let (essp_reads, essp_refreshes) = push_or_pull(Consistency::Essp { staleness: 3 });
    let (ssp_reads, _) = push_or_pull(Consistency::Ssp { staleness: 3 });
    // ESSP: one fetch subscribes the row; later reads are served from pushed data. Under
    // load a worker may still wait at the bound for the other (and fetch), which SSP does
    // too, so only fetches made while the bound allowed the read are counted.
    assert!(
        essp_refreshes <= 1,
        "essp refreshed {essp_refreshes} times ({essp_reads} reads sent)"
    );
    // SSP pulls again whenever the cached copy falls out of the bound (every s+1 clocks).
    assert!(ssp_reads >= 3, "ssp fetched {ssp_reads} times");
    // Mean staleness is not compared: when pushes arrive late (8 copies of this test at
    // once on 2 cores: 4 of 24 runs), ESSP reads older pushed copies and its mean went above
    // SSP's (2.17 vs 1.5), within the bound, which `push_or_pull` checks for both.
}

#[test]
fn a_dead_shard_stops_the_run_with_an_error_naming_it() {
    let tables = TablesBuilder::new()
        .dense("t", 1, Consistency::Bsp)
        .build()
        .unwrap();
    let lay = layout(2, 2);
    let (l1, l2, t1, t2) = (lay.clone(), lay, tables.clone(), tables);
    let settings = Topology::builder("ps-dead-shard")
        .node("s0", &["shard"])
        .node("s1", &["shard"])
        .node("w0", &["worker"])
        .node("w1", &["worker"])
        .with(|s| s.cluster.failure_timeout_ms = 3000)
        .build()
        .unwrap();
    let cluster = Cluster::new(settings)
        .role("shard", move |ctx: NodeContext| {
            let (lay, tables) = (l1.clone(), t1.clone());
            Box::pin(async move {
                let s = lay.shards_on(&ctx.spec.name)[0];
                let h = shells::start_shard(&ctx.node, &lay, s, tables, &RuleRegistry::new(), None)
                    .map_err(|e| e.to_string())?;
                if s == 1 {
                    // Shard 1 crashes while the workers are running.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return Err("crashed".to_string());
                }
                h.wait().await.map_err(|e| e.to_string())
            })
        })
        .role("worker", move |ctx: NodeContext| {
            let (lay, tables) = (l2.clone(), t2.clone());
            Box::pin(async move {
                let (_, c) = start_ps_worker(&ctx, &lay, tables, 0).await?;
                loop {
                    for r in 0..ROWS {
                        c.get(T, RowId(r)).await.map_err(|e| e.to_string())?;
                        c.inc(T, RowId(r), 0, 1.0).map_err(|e| e.to_string())?;
                    }
                    c.clock().map_err(|e| e.to_string())?;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                #[allow(unreachable_code)]
                Ok::<(), String>(())
            })
        });
    let t0 = std::time::Instant::now();
    let err = cluster.run_in_process().unwrap_err().to_string();
    assert!(err.contains("s1"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
}

/// The `[app.mf]` defaults these tests were tuned with (the settings now share the
/// defaults of `petrel train ps-mf`).
fn tuned_mf() -> PsMfSettings {
    PsMfSettings {
        rank: 8,
        learning_rate: 0.05,
        regularization: 0.02,
        init_scale: 0.3,
        max_seconds: 60.0,
        eval_every: Some(1),
        max_clocks: Some(200),
        ..PsMfSettings::default()
    }
}

/// Runs ps-mf in process over QUIC with a patient failure detector.
fn run_mf(cfg: PsMfSettings, shards: usize, workers: usize) -> Result<PsMfResult, String> {
    petrel::ps::run_local_with::<PsMf>(cfg, shards, workers, Transport::Quic, patient)
        .map(|o| o.metrics)
        .map_err(|e| error_chain(&e))
}

fn small_mf(consistency: &str) -> PsMfSettings {
    PsMfSettings {
        synthetic_users: 200,
        synthetic_items: 100,
        synthetic_observed: 0.2,
        max_clocks: Some(40),
        consistency: consistency.parse().unwrap(),
        eval_every: Some(1),
        ..tuned_mf()
    }
}

#[test]
fn mf_rmse_decreases_on_synthetic_data() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PsMfSettings {
        files: petrel::ps::kit::settings::RunFiles {
            out: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
        ..small_mf("ssp")
    };
    let r = run_mf(cfg, 2, 2).unwrap();
    assert!(
        r.final_rmse < 0.7 * r.initial_rmse,
        "{} -> {}",
        r.initial_rmse,
        r.final_rmse
    );
    assert_eq!(r.worker_clocks, vec![40, 40]);
    assert!(r.staleness.max <= 3, "{:?}", r.staleness);
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(metrics["consistency"], "ssp");
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("model.json")).unwrap())
            .unwrap();
    assert_eq!(model["items"].as_array().unwrap().len(), 100);
}

#[test]
fn mf_stops_at_target_rmse() {
    let cfg = PsMfSettings {
        target_rmse: Some(0.6),
        max_clocks: Some(10_000),
        ..small_mf("essp")
    };
    let r = run_mf(cfg, 1, 2).unwrap();
    assert!(r.reached_target);
    assert!(r.time_to_target_s.is_some());
    assert!(r.worker_clocks.iter().all(|&c| c < 10_000));
}

#[test]
fn a_dead_worker_stops_the_run_with_an_error_naming_it() {
    let cfg = PsMfSettings {
        fail_worker_at: Some((1, 5)),
        ..small_mf("bsp")
    };
    let t0 = std::time::Instant::now();
    let err = petrel::ps::run_local_with::<PsMf>(cfg, 2, 2, Transport::Quic, |s| {
        s.cluster.failure_timeout_ms = 4000;
    })
    .unwrap_err();
    let err = error_chain(&err);
    assert!(err.contains("worker-1"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20));
}

#[test]
fn checkpoint_through_the_actors_and_resume_with_identical_tables() {
    let dir = tempfile::tempdir().unwrap();
    let tables = TablesBuilder::new()
        .dense("t", 2, Consistency::Ssp { staleness: 1 })
        .build()
        .unwrap();
    let ck = Arc::new(Mutex::new(None));
    let (ck2, path) = (ck.clone(), dir.path().to_path_buf());
    // Phase 1: 3 clocks of increments, a barrier (clock 4), a checkpoint, then more updates
    // that the checkpoint must not contain.
    let program: Program = Arc::new(move |c: PsClient| {
        let (ck, path) = (ck2.clone(), path.clone());
        Box::pin(async move {
            let lay = c.layout().clone();
            for clock in 0..3u64 {
                for r in 0..ROWS {
                    c.inc(T, RowId(r), 0, f(c.worker(), clock, r))
                        .map_err(|e| e.to_string())?;
                }
                c.clock().map_err(|e| e.to_string())?;
            }
            c.barrier().await.map_err(|e| e.to_string())?;
            if c.worker() == 0 {
                let node = NODE.with(|n| n.borrow().clone()).ok_or("no node")?;
                let states = shells::snapshot_all(
                    &node,
                    &lay,
                    ShardQuery::Checkpoint {
                        dir: path.display().to_string(),
                    },
                    Duration::from_secs(10),
                )
                .await
                .map_err(|e| e.to_string())?;
                let clocks: Vec<_> = states.iter().map(|s| s.checkpoint_clock).collect();
                *ck.lock().unwrap() = Some((clocks, shells::merge_tables(&states)));
            }
            c.barrier().await.map_err(|e| e.to_string())?;
            c.inc(T, RowId(0), 1, 100.0).map_err(|e| e.to_string())?;
            c.clock().map_err(|e| e.to_string())?;
            c.leave().map_err(|e| e.to_string())
        })
    });
    let after = run(tables.clone(), 2, 2, "quic", program).unwrap();
    assert_eq!(after[&RowId(0)].get(1), 200.0);
    let (clocks, saved) = ck.lock().unwrap().take().unwrap();
    assert_eq!(clocks, vec![Some(4), Some(4)]);
    let saved = saved[&T].clone();
    for r in 0..ROWS {
        assert!((saved[&RowId(r)].get(0) - serial_sum(2, 3, r)).abs() < 1e-3);
    }
    // Phase 2: a new cluster restored from the checkpoint reads exactly the saved rows.
    let saved2 = saved.clone();
    let program: Program = Arc::new(move |c: PsClient| {
        let saved = saved2.clone();
        Box::pin(async move {
            if c.current_clock() != 4 {
                return Err(format!("resumed at clock {}", c.current_clock()));
            }
            let rows: Vec<RowId> = (0..ROWS).map(RowId).collect();
            let got = c.get_many(T, &rows).await.map_err(|e| e.to_string())?;
            for (r, row) in rows.iter().zip(got) {
                if row != saved[r] {
                    return Err(format!("row {r:?}: {row:?} != saved {:?}", saved[r]));
                }
            }
            c.clock().map_err(|e| e.to_string())?;
            c.leave().map_err(|e| e.to_string())
        })
    });
    let resumed = run_from(
        tables,
        2,
        2,
        "quic",
        program,
        Some((dir.path().to_path_buf(), 4)),
    )
    .unwrap();
    assert_eq!(resumed, saved);
}

thread_local! {
    /// The node of the worker running on this thread (set by the worker role).
    static NODE: std::cell::RefCell<Option<petrel::actors::Node>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn mf_trains_on_a_user_ratings_file_and_rejects_malformed_lines() {
    let dir = tempfile::tempdir().unwrap();
    // Low-rank ratings in MovieLens u.data form (user item rating timestamp, tab separated).
    let mut text = String::new();
    for u in 1..=80u32 {
        for i in 1..=40u32 {
            if (u * 7 + i * 13) % 3 == 0 {
                let r = 3.0 + ((u % 4) as f32 - 1.5) * ((i % 3) as f32 - 1.0) * 0.8;
                text.push_str(&format!("{u}\t{i}\t{r:.2}\t881250949\n"));
            }
        }
    }
    let data = dir.path().join("u.data");
    std::fs::write(&data, text).unwrap();
    let out = dir.path().join("out");
    let cfg = PsMfSettings {
        data: Some(data),
        files: petrel::ps::kit::settings::RunFiles {
            out: Some(out.clone()),
            ..Default::default()
        },
        max_clocks: Some(60),
        eval_every: Some(1),
        ..tuned_mf()
    };
    let r = run_mf(cfg, 2, 2).unwrap();
    assert!(
        r.final_rmse < 0.8 * r.initial_rmse,
        "{} -> {}",
        r.initial_rmse,
        r.final_rmse
    );
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("model.json")).unwrap()).unwrap();
    assert_eq!(model["user_ids"][0], "1");
    assert!(out.join("metrics.json").exists());

    let bad = dir.path().join("bad.data");
    std::fs::write(&bad, "1 1 5\n2 x\n").unwrap();
    let err = run_mf(
        PsMfSettings {
            data: Some(bad),
            ..PsMfSettings::default()
        },
        1,
        1,
    )
    .unwrap_err();
    assert!(err.contains("bad.data") && err.contains('2'), "{err}");
}

#[test]
fn managed_communication_sends_the_largest_relative_updates_before_the_clock() {
    use petrel::ps::core::managed::{BandwidthManager, SendPolicy};
    let tables = TablesBuilder::new()
        .dense("t", 4, Consistency::Ssp { staleness: 1 })
        .build()
        .unwrap();
    let program: Program = Arc::new(move |c: PsClient| {
        Box::pin(async move {
            let lay = c.layout().clone();
            let node = NODE.with(|n| n.borrow().clone()).ok_or("no node")?;
            // Rows 0..4 get small updates, row 5 a large one: a batch of one row sends row 5
            // first, and the pacer (one row per 4 s) holds the rest back.
            let mut m = BandwidthManager::new(10, SendPolicy::RelativeMagnitude);
            m.batch_bytes = 50;
            c.start_managed(m);
            for r in 0..4 {
                c.inc(T, RowId(r), 0, 0.01).map_err(|e| e.to_string())?;
            }
            c.inc(T, RowId(5), 0, 50.0).map_err(|e| e.to_string())?;
            let sent = c.pace().map_err(|e| e.to_string())?;
            if sent != 1 {
                return Err(format!("sent {sent} rows"));
            }
            // The shards have row 5 (and only row 5) although the worker has not clocked.
            let mut seen = std::collections::HashMap::new();
            for _ in 0..100 {
                let st =
                    shells::snapshot_all(&node, &lay, ShardQuery::Snapshot, Duration::from_secs(5))
                        .await
                        .map_err(|e| e.to_string())?;
                seen = shells::merge_tables(&st).remove(&T).unwrap_or_default();
                if !seen.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if seen.len() != 1 || seen.get(&RowId(5)).map(|r| r.get(0)) != Some(50.0) {
                return Err(format!("shards hold {seen:?} before the clock"));
            }
            if c.current_clock() != 0 {
                return Err("clock advanced".into());
            }
            // Read-my-writes still holds for the early-sent row and the rest.
            let v = c.get(T, RowId(5)).await.map_err(|e| e.to_string())?.get(0);
            if v != 50.0 {
                return Err(format!("own early write reads {v}"));
            }
            c.clock().map_err(|e| e.to_string())?;
            c.leave().map_err(|e| e.to_string())
        })
    });
    let table = run(tables, 2, 1, "quic", program).unwrap();
    assert_eq!(table.len(), 5);
    assert_eq!(table[&RowId(5)].get(0), 50.0);
    assert!((table[&RowId(0)].get(0) - 0.01).abs() < 1e-6);
}

/// Three classes labelled 1, 2, 3 by the sign pattern of two features, in LIBSVM form.
fn three_class_libsvm(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..600u32 {
        let a = ((i * 37) % 101) as f32 / 50.0 - 1.0;
        let b = ((i * 53) % 97) as f32 / 48.0 - 1.0;
        let label = if a > 0.3 {
            1
        } else if b > 0.0 {
            2
        } else {
            3
        };
        text.push_str(&format!("{label} 1:{a:.3} 3:{b:.3} 7:1\n"));
    }
    let data = dir.join("train.libsvm");
    std::fs::write(&data, text).unwrap();
    data
}

#[test]
fn logistic_regression_on_the_ps_learns_libsvm_classes() {
    use petrel::ps::{PsLr, PsLrSettings};
    let dir = tempfile::tempdir().unwrap();
    let data = three_class_libsvm(dir.path());
    let out = dir.path().join("out");
    let cfg = PsLrSettings {
        data: Some(data),
        files: petrel::ps::kit::settings::RunFiles {
            out: Some(out.clone()),
            ..Default::default()
        },
        max_clocks: 150,
        eval_every: Some(1),
        ..PsLrSettings::default()
    };
    let r = petrel::ps::run_local::<PsLr>(cfg, 2, 2, Transport::Quic)
        .unwrap()
        .metrics;
    assert_eq!(r.n_classes, 3);
    // The untrained model (zero weights) predicts uniformly: log-loss ln(3). The first
    // monitored value is taken after training started, so it is no fixed reference.
    let untrained = 3f64.ln();
    assert!(
        r.final_log_loss < 0.6 * untrained,
        "log-loss {} (untrained {untrained}, first sample {})",
        r.final_log_loss,
        r.initial_log_loss
    );
    assert!(r.final_accuracy > 0.85, "accuracy {}", r.final_accuracy);
    assert!(r.staleness.max <= 2);
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("model.json")).unwrap()).unwrap();
    assert_eq!(model["class_labels"].as_array().unwrap().len(), 3);
    assert!(out.join("metrics.json").exists());
}

/// Under async a cached row never expires, so a worker must refresh the rows it reads
/// (prefetch) or it computes every gradient at the values of its first read. AdaRevision
/// makes that visible: its client never applies its own gradients to the cache, and the
/// backlog of a never-refreshed row grows without bound, shrinking every step.
#[test]
fn async_logistic_regression_refreshes_its_rows_and_learns_with_adarevision() {
    use petrel::ps::{ConsistencyModel, PsLr, PsLrSettings, ServerRule};
    let dir = tempfile::tempdir().unwrap();
    let cfg = PsLrSettings {
        data: Some(three_class_libsvm(dir.path())),
        consistency: ConsistencyModel::Async,
        rule: ServerRule::AdaRevision,
        learning_rate: 0.3,
        max_clocks: 150,
        eval_every: Some(1),
        ..PsLrSettings::default()
    };
    let r = petrel::ps::run_local::<PsLr>(cfg, 2, 2, Transport::Memory)
        .unwrap()
        .metrics;
    // Without the refresh the log-loss stays at chance (1.05 against ln 3 = 1.10). Async
    // progress depends on load (how many refreshes land between clocks): 0.73 was seen on
    // a loaded machine, so the bound sits between that and chance.
    let untrained = 3f64.ln();
    assert!(
        r.final_log_loss < 0.8 * untrained,
        "log-loss {} (untrained {untrained})",
        r.final_log_loss
    );
    assert!(r.final_accuracy > 0.7, "accuracy {}", r.final_accuracy);
}

/// ps-mf with a shard-side rule: the `users` table is async whatever the items' model, so
/// a worker must refresh its user rows too: neither rule's client applies its own steps to
/// the cache, so without the refresh every user gradient was taken at the first read's
/// values and the RMSE stayed near its start (AdaRevision 0.978 -> 0.970 here at 60 clocks; bench
/// adarevision: MF at RMSE ~1.0 for both rules). Adagrad at alpha 0.3 also diverged (NaN)
/// while its client cached the guess `-alpha * g` of its step.
#[test]
fn mf_with_a_shard_rule_refreshes_its_user_rows_and_learns() {
    use petrel::ps::{ConsistencyModel, ServerRule};
    // Observed at 100 clocks: AdaRevision 0.29-0.38x of the initial RMSE, Adagrad 0.58-0.76x
    // (async progress depends on load); the bug left AdaRevision at 0.99x. Adagrad at 0.3
    // was erratic here (0.37-1.75x): its steps repeat the gradient a one-clock-old read
    // missed, which AdaRevision's backlog corrects.
    for (rule, alpha, bound) in [
        (ServerRule::AdaRevision, 0.3, 0.6),
        (ServerRule::Adagrad, 0.1, 0.9),
    ] {
        let cfg = PsMfSettings {
            rule: Some(rule),
            learning_rate: alpha,
            consistency: ConsistencyModel::Async,
            max_clocks: Some(100),
            ..small_mf("async")
        };
        let r = run_mf(cfg, 2, 2)
            .map_err(|e| format!("{rule:?}: {e}"))
            .unwrap();
        assert!(
            r.final_rmse < bound * r.initial_rmse,
            "{rule:?}: {} -> {}",
            r.initial_rmse,
            r.final_rmse
        );
    }
}
