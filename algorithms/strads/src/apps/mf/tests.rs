use super::worker::initial_blocks;
use super::*;
use crate::core::app::{BlockFate, Plan, RingPush, Schedule, Step};
use crate::kit::serial::Delivery;
use proptest::prelude::*;

/// Runs the two halves without actors through the runtime's ring cores (blocks handed
/// from worker to worker, every dispatch arriving before its block).
pub(super) fn drive(job: &StradsMfJob, p: usize) -> (MfScheduling, Ratings, Ratings) {
    drive_with(job, p, Delivery::Late).unwrap()
}

fn drive_with(
    job: &StradsMfJob,
    p: usize,
    delivery: Delivery,
) -> Result<(MfScheduling, Ratings, Ratings), StradsError> {
    let (train, test) = job.load().unwrap();
    let (sched, run) = crate::kit::run_serial::<MfApp>(job, p, delivery)?;
    assert!(
        run.held.iter().all(Vec::is_empty),
        "collect empties the ring"
    );
    Ok((sched, train, test))
}

fn small_job() -> StradsMfJob {
    StradsMfJob {
        synthetic: LowRankParams {
            n_users: 120,
            n_items: 80,
            rank: 3,
            observed_fraction: 0.3,
            noise_std: 0.05,
            seed: 1,
        },
        rank: 3,
        lambda: 0.05,
        outer_iterations: 6,
        target_rmse: Some(0.5),
        ..StradsMfJob::default()
    }
}

#[test]
fn rotation_ccdpp_fits_low_rank_ratings() {
    let (sched, train, test) = drive(&small_job(), 3);
    let m = sched.metrics();
    let first = m.train_rmse.first().unwrap().train_rmse;
    // The trace's reported RMSE matches the RMSE recomputed from the gathered factors.
    let (w, h) = sched.factors().unwrap();
    let recomputed = rmse(&train, &w, &h);
    assert!(
        (recomputed - m.final_train_rmse).abs() < 1e-3,
        "{recomputed} vs {}",
        m.final_train_rmse
    );
    assert!(
        m.final_train_rmse < 0.3 * first,
        "{first} -> {}",
        m.final_train_rmse
    );
    assert!(
        rmse(&test, &w, &h) < 0.5,
        "test rmse {}",
        rmse(&test, &w, &h)
    );
    assert!(m.time_to_target_s.is_some());
    assert_eq!(
        m.worker_ratings.iter().sum::<u64>() as usize,
        train.entries.len()
    );
}

#[test]
fn distributed_rotation_matches_one_worker_quality() {
    let job = small_job();
    let (one, _, _) = drive(&job, 1);
    let (four, _, _) = drive(&job, 4);
    let a = one.metrics().final_train_rmse;
    let b = four.metrics().final_train_rmse;
    // Both fit down to about the noise level (0.05); initialisations differ per bucket.
    assert!(a < 0.1 && b < 0.1, "{a} vs {b}");
}

#[test]
fn scheduler_messages_carry_no_blocks() {
    let job = small_job();
    let (train, test) = job.load().unwrap();
    let partition = MfPartition::balanced(&train, 3);
    let mut sched = MfScheduling::new(&partition, &train, &test, &job);
    let Step::Run(Plan::PerWorker(tasks)) = sched.schedule(0, 0) else {
        panic!("first round");
    };
    let size = |t: &MfTask| {
        let mut out = Vec::new();
        petrel_messages::encode_body(t, &mut out).unwrap();
        out.len()
    };
    // Field names and a handful of small numbers.
    assert!(tasks.iter().all(|t| size(t) < 100), "{tasks:?}");
    let mut block = Vec::new();
    petrel_messages::encode_body(&initial_blocks(&partition, job.layout())[0], &mut block).unwrap();
    assert!(block.len() > 200, "a block is {} bytes", block.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Whatever order dispatches and handoffs arrive in, the ring never has one block in
    /// two places (the driver checks after every message; a wrong plan would deadlock)
    /// and the result is the same bit for bit.
    #[test]
    fn ring_never_holds_a_block_twice(p in 1usize..5, seed in any::<u64>()) {
        let job = StradsMfJob { outer_iterations: 2, ..small_job() };
        let (late, _, _) = drive_with(&job, p, Delivery::Late).unwrap();
        let shuffled = drive_with(&job, p, Delivery::Shuffled(seed));
        prop_assert!(shuffled.is_ok(), "{:?}", shuffled.err());
        let (shuffled, _, _) = shuffled.unwrap();
        prop_assert_eq!(&late.metrics().train_rmse, &shuffled.metrics().train_rmse);
        prop_assert_eq!(late.metrics().rounds, shuffled.metrics().rounds);
        prop_assert_eq!(late.factors(), shuffled.factors());
    }
}

#[test]
fn worker_rejects_a_block_it_was_not_asked_for() {
    let job = small_job();
    let (train, _) = job.load().unwrap();
    let partition = MfPartition::balanced(&train, 2);
    let mut w = MfWorkerApp::new(0, &partition, &train, &job).unwrap();
    let task = MfTask::Visit {
        phase: Phase::H,
        k: 0,
        block: 0,
        pass_to: 1,
        report: false,
        finalize_h: false,
    };
    let other = initial_ring_blocks(1, &partition, job.layout()).remove(0).1;
    let err = w.push(0, &task, Some(other)).unwrap_err().to_string();
    assert!(err.contains("got block 1"), "{err}");
    assert!(w.push(0, &task, None).is_err());
    let mine = initial_ring_blocks(0, &partition, job.layout()).remove(0).1;
    let out = w.push(0, &task, Some(mine)).unwrap();
    assert!(matches!(out.block, BlockFate::PassTo { worker: 1, .. }));
}

#[test]
fn worker_rejects_a_bad_coordinate() {
    let job = small_job();
    let (train, _) = job.load().unwrap();
    let partition = MfPartition::balanced(&train, 2);
    let mut w = MfWorkerApp::new(0, &partition, &train, &job).unwrap();
    assert!(
        w.commit(
            0,
            &MfCommit {
                finalize_w: Some(99)
            }
        )
        .is_err()
    );
}
