//! A new algorithm on the parameter server, written against the kit: distributed k-means
//! with its own table and a custom server-side update rule, as one `PsApp` impl.
//!
//! The table `centroids` holds one dense row per cluster: `[sum_x, sum_y, count]` of the
//! points assigned to it. Per clock a worker reads the rows (SSP(1)), assigns its points to
//! the nearest centroid `sum / count` and sends, per cluster, the sums and count of this
//! round's assignments. The custom rule `forgetting-sum` registered on the shards applies
//! `row = GAMMA * row + delta`, so old assignments fade and the centroids move to the current
//! means (the ratio `sum / count` is insensitive to the client applying its own deltas
//! additively). The kit provides the roles and the clock loop; [`petrel::launcher`] runs the
//! cluster the way the command line asks, with the app's own flags (`--rounds`) passed on:
//!
//! ```text
//! # every node a thread of this process (the default)
//! cargo run --release --example ps_custom -- --in-process --rounds 10
//! # one process per node on this host: the same output, printed by the monitor's process
//! cargo run --release --example ps_custom -- --processes --rounds 10
//! # one node per host (shard-0 shard-1 worker-0 worker-1), after `petrel certs --bundle`
//! cargo run --release --example ps_custom -- --node worker-0 --config cluster.toml
//! ```

use std::sync::Arc;

use clap::Parser;
use petrel::actors::{Cluster, Transport};
use petrel::launcher::{LaunchArgs, launch};
use petrel::ps::kit::{PsJob, local_topology, register};
use petrel::ps::prelude::*;

type Ctx<'a> = WorkerCtx<'a, WorkerDone>;

const DIM: usize = 2;
const K: u64 = 3;
const CENTROIDS: TableId = TableId(0);
const GAMMA: f32 = 0.3;
const CENTERS: [[f32; DIM]; 3] = [[0.0, 0.0], [5.0, 5.0], [-5.0, 5.0]];

/// `row = GAMMA * row + delta`.
struct ForgettingSum;

impl UpdateRule for ForgettingSum {
    fn apply(&mut self, _: RowId, row: &mut Row, delta: &Row) {
        let mut r = row.to_dense(DIM + 1);
        for (x, d) in r.iter_mut().zip(delta.to_dense(DIM + 1)) {
            *x = GAMMA * *x + d;
        }
        *row = Row::Dense(r);
    }
}

/// The settings (`[app.kmeans]` in TOML, or flags): one struct for both.
#[derive(Clone, Debug, serde::Deserialize, clap::Args)]
#[serde(default)]
struct KMeansConfig {
    /// Clocks (assignment rounds) per worker.
    #[arg(long, default_value_t = 10)]
    rounds: u64,
}

impl Default for KMeansConfig {
    fn default() -> Self {
        KMeansConfig { rounds: 10 }
    }
}

/// The app: its config; each worker generates its points.
struct KMeans(KMeansConfig);

/// Worker `w`'s points: blobs around `CENTERS`, deterministic.
fn points(w: u32) -> Vec<[f32; DIM]> {
    (0..300u32)
        .map(|i| {
            let c = CENTERS[(i % 3) as usize];
            let j = (i * 7919 + w * 104_729) % 1000;
            [
                c[0] + (j % 31) as f32 / 31.0 - 0.5,
                c[1] + (j % 17) as f32 / 17.0 - 0.5,
            ]
        })
        .collect()
}

/// A centroid from its row; unset centroids start at distinct seeds.
fn centroid(k: usize, r: &Row) -> [f32; DIM] {
    match r.get(DIM as u32) {
        n if n <= 0.0 => [k as f32 * 3.0 - 3.0, 2.0],
        n => [r.get(0) / n, r.get(1) / n],
    }
}

impl PsApp for KMeans {
    type Config = KMeansConfig;
    type Worker = Vec<[f32; DIM]>;
    type Report = WorkerDone;
    type Monitor = ();
    type Output = Vec<[f32; DIM]>;
    const NAME: &'static str = "ps-kmeans";
    const SECTION: &'static str = "kmeans";
    const MONITOR_ACTOR: &'static str = "ps-kmeans-monitor";

    fn new(cfg: KMeansConfig, _: &PsLayout) -> Result<Self, PsError> {
        Ok(KMeans(cfg))
    }

    fn tables(&self) -> Vec<TableSpec> {
        let (width, ssp) = (DIM as u32 + 1, Consistency::Ssp { staleness: 1 });
        let t = TableSpec::new(0, "centroids", TableKind::Dense { width }, ssp);
        vec![t.with_rule(UpdateRuleSpec::Custom {
            name: "forgetting-sum".into(),
        })]
    }

    fn rules(&self) -> RuleRegistry {
        let mut r = RuleRegistry::new();
        r.register("forgetting-sum", || Box::new(ForgettingSum));
        r
    }

    fn start_worker(&self, ctx: &Ctx) -> Result<Self::Worker, PsError> {
        Ok(points(ctx.worker()))
    }

    async fn step(&self, mine: &mut Self::Worker, ctx: &Ctx<'_>) -> Result<PsStep, PsError> {
        if ctx.client.current_clock() >= self.0.rounds {
            return Ok(PsStep::Done);
        }
        let rows: Vec<RowId> = (0..K).map(RowId).collect();
        let got = ctx.client.get_many(CENTROIDS, &rows).await?;
        let cents: Vec<_> = got
            .iter()
            .enumerate()
            .map(|(k, r)| centroid(k, r))
            .collect();
        let mut sums = vec![[0.0f32; DIM + 1]; K as usize];
        for p in mine.iter() {
            let d2 = |c: &[f32; DIM]| (p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2);
            let k = (0..K as usize).min_by(|&a, &b| d2(&cents[a]).total_cmp(&d2(&cents[b])));
            let s = &mut sums[k.unwrap_or(0)];
            (s[0], s[1], s[2]) = (s[0] + p[0], s[1] + p[1], s[2] + 1.0);
        }
        for (k, s) in sums.iter().enumerate().filter(|(_, s)| s[DIM] > 0.0) {
            let delta = Row::Dense(s.to_vec());
            ctx.client.batch_inc(CENTROIDS, RowId(k as u64), &delta)?;
        }
        Ok(PsStep::Clock)
    }

    fn finish_worker(&self, _: Self::Worker, ctx: &Ctx) -> Result<WorkerDone, PsError> {
        Ok(WorkerDone::of(ctx.client, CENTROIDS))
    }

    async fn finish(&self, _: (), ctx: &MonitorCtx<'_>) -> Result<Self::Output, PsError> {
        let (tables, _) = ctx.tables().await?;
        let rows = tables.get(&CENTROIDS).cloned().unwrap_or_default();
        let zero = Row::Dense(vec![0.0; DIM + 1]);
        let row = |k: u64| rows.get(&RowId(k)).unwrap_or(&zero).clone();
        Ok((0..K).map(|k| centroid(k as usize, &row(k))).collect())
    }
}

/// The launch flags and the app's own.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    launch: LaunchArgs,
    #[command(flatten)]
    kmeans: KMeansConfig,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    // Two shards (the first also runs the monitor) and two workers; in process they talk
    // through memory, as processes over QUIC.
    let settings = local_topology(KMeans::NAME, 2, 2, Transport::Memory)
        .with(KMeans::tune_local)
        .build()?;
    let job = Arc::new(PsJob::<KMeans>::new(
        &settings,
        cli.kmeans,
        PsRoles::GENERIC,
    )?);
    let launched = launch(&register(Cluster::new(settings), job.clone()), &cli.launch)?;
    // The monitor's process has the result; the others are done.
    if !launched.hosts(&job.monitor_node) {
        return Ok(());
    }
    let out = job.take_result()?;
    println!("k-means: {} rounds per worker", job.app.0.rounds);
    println!("centroids: {out:?}");
    for c in CENTERS {
        let near = out.iter().any(|x| (x[0] - c[0]).hypot(x[1] - c[1]) < 1.0);
        if !near {
            return Err(format!("no centroid found near {c:?}: {out:?}").into());
        }
    }
    Ok(())
}
