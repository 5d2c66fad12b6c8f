use super::worker::initial_blocks;
use super::*;
use crate::apps::lasso::Balance;
use crate::core::app::{BlockFate, Plan, RingPush, Schedule, Step};
use crate::core::mf::MfPartition;
use crate::kit::serial::Delivery;
use proptest::prelude::*;

/// Runs the two halves without actors through the runtime's ring cores (blocks handed
/// from worker to worker, every dispatch arriving before its block).
pub(super) fn drive(job: &StradsMfSettings, p: usize) -> (MfScheduling, Ratings, Ratings) {
    drive_with(job, p, Delivery::Late).unwrap()
}

fn drive_with(
    job: &StradsMfSettings,
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

fn small_job() -> StradsMfSettings {
    StradsMfSettings {
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
        ..StradsMfSettings::default()
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
        let job = StradsMfSettings { outer_iterations: 2, ..small_job() };
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
                finalize_w: Some(99),
                moved: Vec::new(),
            }
        )
        .is_err()
    );
}

/// `small_job`'s ratings as a triplet file with text ids (users and items named in an order
/// of first appearance that differs from the generator's indices), and every fourth one as
/// a held-out file for `test_data`.
fn ratings_files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (all, _, _) = StradsMfSettings {
        test_fraction: 0.0,
        ..small_job()
    }
    .load_centred()
    .unwrap();
    let line = |&(u, i, r): &(u32, u32, f32)| format!("user{}\titem{}\t{r}\n", 7 * u + 3, i);
    let mut text = String::from("# user item rating\n");
    let mut held = String::new();
    for (k, e) in all.entries.iter().rev().enumerate() {
        if k % 4 == 3 {
            held.push_str(&line(e));
        } else {
            text.push_str(&line(e));
        }
    }
    held.push_str("nobody\titem0\t1\n");
    let (data, test) = (dir.join("ratings.tsv"), dir.join("held.tsv"));
    std::fs::write(&data, text).unwrap();
    std::fs::write(&test, held).unwrap();
    (data, test)
}

/// A worker that reads only its share (three streaming passes) is the worker built from the
/// whole load: same partition, mean, ratings, residuals, test ratings and their order; and
/// the scheduler's test ratings are the whole load's. Synthetic ratings and a file, with the
/// `test_fraction` split and with a `test_data` file, with and without the global mean, 1
/// and 3 workers.
#[test]
fn a_workers_share_is_its_users_ratings_of_the_whole_load() {
    let dir = tempfile::tempdir().unwrap();
    let (data, held) = ratings_files(dir.path());
    let jobs = [
        small_job(),
        StradsMfSettings {
            global_mean: true,
            biases: true,
            seed: 5,
            ..small_job()
        },
        StradsMfSettings {
            data: Some(data.clone()),
            global_mean: true,
            ..small_job()
        },
        StradsMfSettings {
            data: Some(data.clone()),
            test_data: Some(held.clone()),
            global_mean: true,
            ..small_job()
        },
    ];
    for job in &jobs {
        let (train, test, mean) = job.load_centred().unwrap();
        assert!(!train.entries.is_empty() && !test.entries.is_empty());
        let (summary, scheduler_test) = job.summary_and_test().unwrap();
        assert_eq!(scheduler_test, test, "{:?}", job.data);
        assert_eq!(job.summary().unwrap(), summary);
        assert_eq!(summary.mean.to_bits(), mean.to_bits());
        assert_eq!(summary.train_ratings, train.entries.len());
        assert_eq!(
            (summary.shape.n_users, summary.shape.n_items),
            (train.n_users, train.n_items)
        );
        assert_eq!(summary.shape.id_mapping, train.id_mapping);
        for workers in [1, 3] {
            let partition = MfPartition::balanced(&train, workers);
            assert_eq!(summary.partition(workers), partition);
            for w in 0..workers {
                let whole = MfWorkerApp::new(w, &partition, &train, job)
                    .unwrap()
                    .with_test(&partition, &test);
                let share = MfWorkerApp::from_split(w, &partition, &summary, job).unwrap();
                assert_eq!(share.core(), whole.core(), "{:?}, worker {w}", job.data);
            }
        }
    }
}

/// Reading a share checks every line as reading the whole file does, and names it.
#[test]
fn a_share_of_a_bad_file_is_refused_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.tsv");
    std::fs::write(&path, "a\tx\t3\nb\tx\t4\nb\ty\tfive\n").unwrap();
    let job = StradsMfSettings {
        data: Some(path.clone()),
        ..small_job()
    };
    let line_3 = |e: StradsError| {
        assert!(
            matches!(
                &e,
                StradsError::Ml(petrel_ml::MlError::Malformed { line: 3, .. })
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("r.tsv:3"), "{e}");
    };
    line_3(job.summary().unwrap_err());
    line_3(job.summary_and_test().unwrap_err());
    line_3(job.load_centred().unwrap_err());
    // A bad held-out file, as the worker reads it after the summary.
    std::fs::write(&path, "a\tx\t3\nb\tx\t4\nb\ty\t5\n").unwrap();
    let held = dir.path().join("h.tsv");
    std::fs::write(&held, "a\ty\t1\nb\n").unwrap();
    let job = StradsMfSettings {
        test_data: Some(held),
        ..job
    };
    let err = job.summary_and_test().unwrap_err().to_string();
    assert!(err.contains("h.tsv:2"), "{err}");
    let summary = job.summary().unwrap();
    let partition = summary.partition(2);
    let err = MfWorkerApp::from_split(0, &partition, &summary, &job)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("h.tsv:2"), "{err}");
    std::fs::write(&path, "").unwrap();
    let err = job.summary().unwrap_err().to_string();
    assert!(err.contains("no ratings"), "{err}");
}

/// A file that changes after the summary (same count of ratings, same users and items) is
/// refused when a worker reads its share: a changed value would leave the mean of another
/// rating set, a rating moved to another user a partition counted for another one.
#[test]
fn a_file_changed_after_its_summary_is_refused_when_a_share_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.tsv");
    let original = "a\tx\t3\na\ty\t4\nb\tx\t4\nb\ty\t5\nc\tx\t2\n";
    let edits = [
        // One value.
        "a\tx\t3\na\ty\t4\nb\tx\t4\nb\ty\t5.5\nc\tx\t2\n",
        // One rating moved from user b to user c (same ids seen, same count).
        "a\tx\t3\na\ty\t4\nb\tx\t4\nc\ty\t5\nc\tx\t2\n",
    ];
    for edited in edits {
        std::fs::write(&path, original).unwrap();
        let job = StradsMfSettings {
            data: Some(path.clone()),
            test_fraction: 0.0,
            ..small_job()
        };
        let summary = job.summary().unwrap();
        let partition = summary.partition(2);
        assert!(MfWorkerApp::from_split(0, &partition, &summary, &job).is_ok());
        std::fs::write(&path, edited).unwrap();
        let err = MfWorkerApp::from_split(0, &partition, &summary, &job)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("changed while it was read"),
            "{edited:?}: {err}"
        );
    }
}

/// The scheduler and every worker digest one rating set alike; an edited file digests
/// differently (the nodes compare these before the first round).
#[test]
fn scheduler_and_workers_digest_one_rating_set_alike() {
    use crate::kit::serial::tests::common_digest;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.tsv");
    let job = StradsMfSettings {
        data: Some(path.clone()),
        test_fraction: 0.0,
        ..small_job()
    };
    let digests = [
        "a\tx\t3\na\ty\t4\nb\tx\t4\nb\ty\t5\n",
        "a\tx\t3\na\ty\t4\nb\tx\t4\nb\ty\t5.5\n",
    ]
    .map(|text| {
        std::fs::write(&path, text).unwrap();
        common_digest::<MfApp>(&job, 2)
    });
    assert!(digests.iter().all(Option::is_some));
    assert_ne!(digests[0], digests[1]);
}

#[test]
fn dynamic_dealing_moves_users_off_a_slow_worker_and_keeps_the_model() {
    let fixed = StradsMfSettings {
        synthetic: LowRankParams {
            n_users: 400,
            ..small_job().synthetic
        },
        outer_iterations: 8,
        target_rmse: None,
        straggler: Some(0),
        straggler_factor: 4.0,
        ..small_job()
    };
    let dynamic = StradsMfSettings {
        balance: Balance::Dynamic,
        ..fixed.clone()
    };
    let (s_fixed, train, test) = drive(&fixed, 2);
    let (s_dynamic, _, _) = drive(&dynamic, 2);
    let (m_fixed, m_dynamic) = (s_fixed.metrics(), s_dynamic.metrics());
    assert_eq!(m_fixed.balance, None);
    let dealing = m_dynamic.balance.clone().unwrap();
    assert!(dealing.deals >= 1, "{dealing:?}");
    assert_eq!(dealing.rows.iter().sum::<u64>(), 400);
    assert!(dealing.rows[0] < dealing.rows[1], "{dealing:?}");
    assert_eq!(m_dynamic.rounds, m_fixed.rounds + dealing.deals);
    // Every rating is still held once, and the moved users' residuals (computed afresh
    // by their new owner) agree with the factors gathered at the end.
    assert_eq!(
        m_dynamic.worker_ratings.iter().sum::<u64>() as usize,
        train.entries.len()
    );
    let (w, h) = s_dynamic.factors().unwrap();
    let recomputed = rmse(&train, &w, &h);
    assert!((recomputed - m_dynamic.final_train_rmse).abs() < 1e-5 * recomputed);
    // The same CCD++ updates; only the residuals' rounding differs.
    let (a, b) = (m_fixed.final_train_rmse, m_dynamic.final_train_rmse);
    assert!(((a - b) / a).abs() < 1e-4, "static {a}, dynamic {b}");
    let (w_fixed, h_fixed) = s_fixed.factors().unwrap();
    let (t_fixed, t_dynamic) = (rmse(&test, &w_fixed, &h_fixed), rmse(&test, &w, &h));
    assert!(((t_fixed - t_dynamic) / t_fixed).abs() < 1e-4);
    // The workers scored the moved users' test ratings too.
    let scored = m_dynamic
        .train_rmse
        .last()
        .and_then(|p| p.test_rmse)
        .unwrap();
    assert!(
        (scored - t_dynamic).abs() < 1e-5 * t_dynamic,
        "{scored} vs {t_dynamic}"
    );
}

#[test]
fn dynamic_dealing_refuses_round_checkpoints() {
    let dynamic = StradsMfSettings {
        balance: Balance::Dynamic,
        checkpoint_dir: Some("ck".into()),
        ..small_job()
    };
    let err = dynamic.validate().unwrap_err().to_string();
    assert!(err.contains("checkpoint_dir"), "{err}");
    StradsMfSettings {
        balance: Balance::Static,
        ..dynamic
    }
    .validate()
    .unwrap();
}
