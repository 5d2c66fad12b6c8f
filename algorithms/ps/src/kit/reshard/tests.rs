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
const CLOCKS: u64 = 10;

#[derive(Clone, Default, serde::Deserialize, clap::Args)]
struct Knobs {
    /// How long each worker clock takes.
    #[arg(long, default_value_t = 0)]
    clock_ms: u64,
    /// The monitor's final read waits for the standby shard `shard-1` to join.
    #[arg(long)]
    wait_for_joiner: bool,
}

/// A job of `CLOCKS` clocks per worker, each adding 1 to one row, whose monitor evaluates
/// only when a worker reports its end.
struct Counting(Knobs);

impl PsApp for Counting {
    type Config = Knobs;
    type Worker = ();
    type Report = WorkerDone;
    type Monitor = ();
    type Output = f32;
    const NAME: &'static str = "ps-counting";
    const SECTION: &'static str = "counting";
    const MONITOR_ACTOR: &'static str = "ps-counting-monitor";
    const ELASTIC: bool = true;

    fn new(knobs: Knobs, _: &PsLayout) -> Result<Self, PsError> {
        Ok(Counting(knobs))
    }

    fn eval_interval(&self) -> Duration {
        Duration::from_secs(60)
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
        tokio::time::sleep(Duration::from_millis(self.0.clock_ms)).await;
        ctx.client
            .batch_inc(COUNTS, RowId(0), &Row::Dense(vec![1.0]))?;
        Ok(PsStep::Clock)
    }

    fn finish_worker(&self, _: (), ctx: &WorkerCtx<'_, WorkerDone>) -> Result<WorkerDone, PsError> {
        Ok(WorkerDone::of(ctx.client, COUNTS))
    }

    async fn finish(&self, _: (), ctx: &MonitorCtx<'_>) -> Result<f32, PsError> {
        if self.0.wait_for_joiner {
            let deadline = Instant::now() + Duration::from_secs(10);
            let joined = || (ctx.node.view().members.iter()).any(|m| m.name == "shard-1");
            while !joined() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(joined(), "shard-1 did not join");
            // Time for the joiner to start its shard and announce it.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (tables, _) = ctx.tables().await?;
        let row = tables.get(&COUNTS).and_then(|t| t.get(&RowId(0)));
        Ok(row.map_or(0.0, |r| r.get(0)))
    }
}

/// Runs [`Counting`] with `knobs` on one shard node per name in `shards` (`shard-0` first)
/// and `workers` workers, under the scale plan `plan`; the standby shard `shard-1` when
/// `standby`. Fails if the run does not end within 30 s. Returns the job after its run.
fn run(knobs: Knobs, workers: usize, standby: bool, plan: &str) -> Arc<PsJob<Counting>> {
    let mut topo = local_topology(
        Counting::NAME,
        usize::from(!standby) + 1,
        workers,
        Transport::Memory,
    );
    if standby {
        topo = topo.standby_node("shard-1", &[PsRoles::GENERIC.shard]);
    }
    let plan = plan.to_string();
    let settings = topo.with(|s| s.cluster.scale = Some(plan)).build().unwrap();
    let job = Arc::new(PsJob::<Counting>::new(&settings, knobs, PsRoles::GENERIC).unwrap());
    let run = {
        let job = job.clone();
        std::thread::spawn(move || register(Cluster::new(settings), job).run_in_process())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !run.is_finished() {
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    run.join().unwrap().unwrap();
    job
}

/// A shard that joins once every worker ended is stopped when the coordinator closes (or,
/// announcing itself later, refused and stops itself): the final barrier does not wait for
/// it, and the counts are those of the shard set that served.
#[test]
fn a_shard_that_joins_after_the_workers_ended_stops_and_the_run_ends() {
    let knobs = Knobs {
        wait_for_joiner: true,
        ..Knobs::default()
    };
    let job = run(knobs, 2, true, "at=300ms add shard-1");
    assert_eq!(job.take_result().unwrap(), (2 * CLOCKS) as f32);
    assert_eq!(job.live_shards(), vec![0]);
}

/// A shard asked to leave whose workers end before the coordinator moves its rows (the
/// monitor, evaluating only at a worker's end, runs the change after it) keeps them until
/// the final read: no update is lost and the run ends.
#[test]
fn a_leaving_shard_whose_workers_end_first_keeps_its_rows_for_the_final_read() {
    let knobs = Knobs {
        clock_ms: 100,
        ..Knobs::default()
    };
    let job = run(knobs, 1, false, "at=300ms remove shard-1");
    assert_eq!(job.take_result().unwrap(), CLOCKS as f32);
    assert!(job.shard_set().changes.is_empty());
}
