use std::sync::Arc;
use std::time::{Duration, Instant};

use petrel_actors::{Cluster, Transport};

use crate::core::types::{Consistency, Row, RowId, TableId, TableKind, TableSpec};
use crate::error::PsError;
use crate::kit::{
    MonitorCtx, PsApp, PsJob, PsRoles, PsStep, WorkerCtx, WorkerDone, local_topology, register,
};
use crate::shells::PsLayout;

const COUNTS: TableId = TableId(0);

/// Clocks each worker runs.
const CLOCKS: u64 = 2;

#[derive(Clone, Default, serde::Deserialize, clap::Args)]
struct NoSettings {}

/// A job whose monitor, once every worker ended, waits for the standby shard `shard-1` to
/// join and announce itself: the announcement comes after the coordinator's last change.
struct SlowFinish;

impl PsApp for SlowFinish {
    type Config = NoSettings;
    type Worker = ();
    type Report = WorkerDone;
    type Monitor = ();
    type Output = f32;
    const NAME: &'static str = "ps-slow-finish";
    const SECTION: &'static str = "slow_finish";
    const MONITOR_ACTOR: &'static str = "ps-slow-finish-monitor";
    const ELASTIC: bool = true;

    fn new(_: NoSettings, _: &PsLayout) -> Result<Self, PsError> {
        Ok(SlowFinish)
    }

    fn tables(&self) -> Vec<TableSpec> {
        let ssp = Consistency::Ssp { staleness: 1 };
        vec![TableSpec::new(
            0,
            "counts",
            TableKind::Dense { width: 1 },
            ssp,
        )]
    }

    fn start_worker(&self, _: &WorkerCtx<'_, WorkerDone>) -> Result<(), PsError> {
        Ok(())
    }

    async fn step(&self, _: &mut (), ctx: &WorkerCtx<'_, WorkerDone>) -> Result<PsStep, PsError> {
        if ctx.client.current_clock() >= CLOCKS {
            return Ok(PsStep::Done);
        }
        ctx.client
            .batch_inc(COUNTS, RowId(0), &Row::Dense(vec![1.0]))?;
        Ok(PsStep::Clock)
    }

    fn finish_worker(&self, _: (), ctx: &WorkerCtx<'_, WorkerDone>) -> Result<WorkerDone, PsError> {
        Ok(WorkerDone::of(ctx.client, COUNTS))
    }

    async fn finish(&self, _: (), ctx: &MonitorCtx<'_>) -> Result<f32, PsError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let joined = || (ctx.node.view().members.iter()).any(|m| m.name == "shard-1");
        while !joined() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(joined(), "shard-1 did not join");
        // Time for the joiner to start its shard and announce it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (tables, _) = ctx.tables().await?;
        let row = tables.get(&COUNTS).and_then(|t| t.get(&RowId(0)));
        Ok(row.map_or(0.0, |r| r.get(0)))
    }
}

/// A shard that joins once every worker ended is refused by the closed coordinator and
/// stops itself: the run ends, with the counts of the fixed shard set.
#[test]
fn a_shard_that_joins_after_the_workers_ended_stops_and_the_run_ends() {
    let settings = local_topology(SlowFinish::NAME, 1, 2, Transport::Memory)
        .standby_node("shard-1", &[PsRoles::GENERIC.shard])
        .with(|s| s.cluster.scale = Some("at=300ms add shard-1".into()))
        .build()
        .unwrap();
    let job =
        Arc::new(PsJob::<SlowFinish>::new(&settings, NoSettings {}, PsRoles::GENERIC).unwrap());
    let run = {
        let job = job.clone();
        std::thread::spawn(move || register(Cluster::new(settings), job).run_in_process())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !run.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the run did not end: the joiner was waited for"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    run.join().unwrap().unwrap();
    assert_eq!(job.take_result().unwrap(), (2 * CLOCKS) as f32);
    assert_eq!(job.live_shards(), vec![0]);
}
