// The serial ring driver's own tests are in tests/strads_ring.rs, beside the actor runs.
use crate::core::app::Schedule;
use crate::kit::{JobShape, StradsJob, WorkerHalf};

/// Builds job `J`'s scheduler half and `workers` worker halves from `config`, checks that
/// they all digest the data alike ([`Schedule::data_digest`],
/// [`WorkerHalf::data_digest`]) and returns that digest.
pub(crate) fn common_digest<J: StradsJob>(config: &J::Config, workers: usize) -> Option<u64> {
    let shape = &JobShape {
        workers,
        schedulers: 1,
    };
    let scheduler = J::scheduler(config, shape).expect("scheduler half");
    let digest = scheduler.data_digest();
    for w in 0..shape.workers {
        let worker = J::worker(config, w, shape).expect("worker half");
        assert_eq!(worker.data_digest(), digest, "worker {w}");
    }
    digest
}
