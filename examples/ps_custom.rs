//! A new algorithm on the parameter server: distributed k-means with its own table and a
//! custom server-side update rule, embedded as actor roles.
//!
//! The table `centroids` holds one dense row per cluster: `[sum_x, sum_y, count]` of the points
//! assigned to it. Workers read the rows (SSP(1)), assign their points to the nearest centroid
//! `sum / count` and send, per cluster, the sums and count of this round's assignments. The
//! custom rule `forgetting-sum` registered on the shards applies `row = GAMMA * row + delta`,
//! so old assignments fade and the centroids move to the current means (the client applies its
//! own deltas additively, as Bösen's client does; the ratio `sum / count` is insensitive to
//! the difference). Run: `cargo run --release --example ps_custom`

use petrel::actors::{Cluster, NodeContext, Topology};
use petrel::ps::core::rules::{RuleRegistry, UpdateRule};
use petrel::ps::core::types::{Consistency, Row, RowId, TableId, UpdateRuleSpec};
use petrel::ps::shells::{self, PsClient, PsLayout, TablesBuilder};
use std::time::Duration;

const DIM: usize = 2;
const K: u64 = 3;
const CENTROIDS: TableId = TableId(0);

const GAMMA: f32 = 0.3;

/// `row = GAMMA * row + delta`.
struct ForgettingSum;

impl UpdateRule for ForgettingSum {
    fn apply(&mut self, row: &mut Row, delta: &Row) {
        let mut r = row.to_dense(DIM + 1);
        for (x, d) in r.iter_mut().zip(delta.to_dense(DIM + 1)) {
            *x = GAMMA * *x + d;
        }
        *row = Row::Dense(r);
    }
}

/// Worker `w`'s points: blobs around (0,0), (5,5), (-5,5), deterministic.
fn points(w: u32) -> Vec<[f32; DIM]> {
    let centers = [[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]];
    (0..300u32)
        .map(|i| {
            let c = centers[(i % 3) as usize];
            let j = (i * 7919 + w * 104_729) % 1000;
            let dx = (j % 31) as f32 / 31.0 - 0.5;
            let dy = (j % 17) as f32 / 17.0 - 0.5;
            [c[0] + dx, c[1] + dy]
        })
        .collect()
}

fn registry() -> RuleRegistry {
    let mut r = RuleRegistry::new();
    r.register("forgetting-sum", || Box::new(ForgettingSum));
    r
}

async fn worker(c: PsClient) -> Result<(), String> {
    let mine = points(c.worker());
    let rows: Vec<RowId> = (0..K).map(RowId).collect();
    for _round in 0..10 {
        let cents = c
            .get_many(CENTROIDS, &rows)
            .await
            .map_err(|e| e.to_string())?;
        // Unset centroids start at distinct seeds.
        let cents: Vec<[f32; DIM]> = cents
            .iter()
            .enumerate()
            .map(|(k, r)| {
                let n = r.get(DIM as u32);
                if n <= 0.0 {
                    [k as f32 * 3.0 - 3.0, 2.0]
                } else {
                    [r.get(0) / n, r.get(1) / n]
                }
            })
            .collect();
        let mut sums = vec![[0.0f32; DIM]; K as usize];
        let mut counts = vec![0.0f32; K as usize];
        for p in &mine {
            let d2 = |c: &[f32; DIM]| (p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2);
            let k = (0..K as usize)
                .min_by(|&a, &b| d2(&cents[a]).total_cmp(&d2(&cents[b])))
                .unwrap_or(0);
            sums[k][0] += p[0];
            sums[k][1] += p[1];
            counts[k] += 1.0;
        }
        for k in 0..K as usize {
            if counts[k] > 0.0 {
                let delta = vec![sums[k][0], sums[k][1], counts[k]];
                c.batch_inc(CENTROIDS, RowId(k as u64), &Row::Dense(delta))
                    .map_err(|e| e.to_string())?;
            }
        }
        c.clock().map_err(|e| e.to_string())?;
    }
    c.barrier().await.map_err(|e| e.to_string())?;
    if c.worker() == 0 {
        for k in 0..K {
            let r = c
                .get(CENTROIDS, RowId(k))
                .await
                .map_err(|e| e.to_string())?;
            let n = r.get(DIM as u32).max(f32::MIN_POSITIVE);
            println!(
                "centroid {k}: ({:.2}, {:.2}), weight {:.1}",
                r.get(0) / n,
                r.get(1) / n,
                n
            );
        }
    }
    c.leave().map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    petrel::init_tracing();
    let tables = TablesBuilder::new()
        .dense(
            "centroids",
            DIM as u32 + 1,
            Consistency::Ssp { staleness: 1 },
        )
        .rule(UpdateRuleSpec::Custom {
            name: "forgetting-sum".into(),
        })
        .build()
        .map_err(|e| e.to_string())?;
    let layout = PsLayout {
        shard_nodes: vec!["shard-0".into(), "shard-1".into()],
        worker_nodes: vec!["worker-0".into(), "worker-1".into()],
    };
    let settings = Topology::builder("ps-custom")
        .node("shard-0", &["shard"])
        .node("shard-1", &["shard"])
        .node("worker-0", &["worker"])
        .node("worker-1", &["worker"])
        .build()
        .map_err(|e| e.to_string())?;
    let (l1, l2, t1, t2) = (layout.clone(), layout, tables.clone(), tables);
    Cluster::new(settings)
        .role("shard", move |ctx: NodeContext| {
            let (lay, tables) = (l1.clone(), t1.clone());
            Box::pin(async move {
                let s = lay.shards_on(&ctx.spec.name)[0];
                shells::start_shard(&ctx.node, &lay, s, tables, &registry(), None)
                    .map_err(|e| e.to_string())?
                    .wait()
                    .await
            })
        })
        .role("worker", move |ctx: NodeContext| {
            let (lay, tables) = (l2.clone(), t2.clone());
            Box::pin(async move {
                shells::wait_for_shards(&ctx.node, &lay, Duration::from_secs(10)).await?;
                let w = lay.workers_on(&ctx.spec.name)[0];
                worker(PsClient::start(&ctx.node, &lay, w, tables).map_err(|e| e.to_string())?)
                    .await
            })
        })
        .run_in_process()
        .map_err(|e| e.to_string())
}
