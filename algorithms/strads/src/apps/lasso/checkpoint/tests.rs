use super::*;
use crate::apps::lasso::metrics::LassoMetrics;
use crate::apps::lasso::{SyntheticLasso, run_without_actors};
use crate::core::lasso::LassoWorkerState;
use crate::kit::serial::{SerialOptions, run_star};
use petrel_actors::checkpoint::{manifest_name as manifest_of, part_name};
use std::fs;
use std::path::Path;

fn manifest_name(round: u64) -> String {
    manifest_of(SCHEME, round)
}

fn scheduler_file(round: u64) -> String {
    part_name(SCHEME, round, SCHEDULER_PART)
}

fn worker_file(round: u64, worker: u32) -> String {
    part_name(SCHEME, round, &worker_part(worker))
}

fn job(mode: &str, dir: Option<&Path>) -> LassoJob {
    LassoJob {
        synthetic: SyntheticLasso {
            n_samples: 90,
            n_features: 120,
            group_size: 10,
            correlation: 0.8,
            n_nonzero: 5,
            noise_std: 0.1,
            nnz_per_column: 0,
            seed: 4,
        },
        mode: mode.parse().unwrap(),
        block_size: 6,
        candidate_pool: 24,
        max_rounds: 400,
        eval_every: 50,
        gap_tolerance: None,
        seed: 11,
        checkpoint_dir: dir.map(Path::to_path_buf),
        checkpoint_every: 60,
        depth: 1,
        ..LassoJob::default()
    }
}

fn workers(job: &LassoJob, n: usize) -> Vec<CheckpointingWorker> {
    let (x, y) = job.load().unwrap();
    crate::core::split_evenly(x.n_rows, n)
        .into_iter()
        .enumerate()
        .map(|(i, rows)| {
            let block = x.row_block(rows.clone());
            let yb = y[rows.clone()].to_vec();
            let slot = job.checkpoint_dir.clone().map(|dir| WorkerSlot {
                dir,
                index: i as u32,
                n_workers: n as u32,
                rows: rows.clone(),
                n_features: block.n_columns(),
                block_fnv64: data_fingerprint(&block, &yb),
            });
            let w = LassoWorker::new(LassoWorkerState::new(block, yb).unwrap());
            CheckpointingWorker::new(w, slot)
        })
        .collect()
}

fn scheduler(job: &LassoJob, n: usize) -> Result<Resumable, CheckpointError> {
    let (x, y) = job.load().unwrap();
    let inner = LassoScheduling::new(&x, &y, job, n).unwrap();
    let shape = ClusterShape::of(&x, &y, inner.lambda(), job.seed, n);
    Resumable::new(inner, CheckpointSettings::of(job, 1)?, shape)
}

/// The message order of `run_scheduler`, through the kit's serial driver.
fn drive(s: &mut Resumable, ws: &mut [CheckpointingWorker], depth: usize) -> Result<(), String> {
    let opts = SerialOptions {
        depth,
        ..SerialOptions::default()
    };
    run_star(s, ws, &opts)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn run(job: &LassoJob, n: usize) -> Result<(Vec<f32>, LassoMetrics), String> {
    let mut s = scheduler(job, n).map_err(|e| e.to_string())?;
    let mut ws = workers(job, n);
    drive(&mut s, &mut ws, job.depth)?;
    let inner = s.into_inner();
    Ok((inner.coefficients().to_vec(), inner.metrics().clone()))
}

fn crash_after(job: &LassoJob, n: usize, k: u64) {
    let mut j = job.clone();
    j.fail_after_checkpoints = Some(k);
    let err = run(&j, n).unwrap_err();
    assert!(err.contains("fault injection"), "{err}");
}

fn resumed(job: &LassoJob) -> LassoJob {
    LassoJob {
        resume: true,
        ..job.clone()
    }
}

#[test]
fn policy_counts_update_rounds() {
    let mut p = CheckpointPolicy::new(3);
    assert!(!p.due());
    for _ in 0..3 {
        p.update_round_dispatched();
    }
    assert!(p.due());
    p.reset();
    assert!(!p.due());
    let mut never = CheckpointPolicy::new(0);
    for _ in 0..100 {
        never.update_round_dispatched();
    }
    assert!(!never.due());
}

#[test]
fn settings_are_validated() {
    let mut j = job("dynamic", None);
    assert_eq!(CheckpointSettings::of(&j, 1).unwrap(), None);
    j.resume = true;
    assert!(
        CheckpointSettings::of(&j, 1)
            .unwrap_err()
            .to_string()
            .contains("checkpoint_dir")
    );
    j.checkpoint_dir = Some("/tmp/x".into());
    let s = CheckpointSettings::of(&j, 1).unwrap().unwrap();
    assert!(s.resume && s.every == 60);
    assert!(
        CheckpointSettings::of(&j, 2)
            .unwrap_err()
            .to_string()
            .contains("one scheduler")
    );
}

#[test]
fn resumed_run_is_bit_identical_for_every_mode() {
    for mode in ["dynamic", "random", "cyclic"] {
        let dir = tempfile::tempdir().unwrap();
        let plain = run_without_actors(&job(mode, None), 3).unwrap();
        let j = job(mode, Some(dir.path()));
        // Checkpointing alone (depth 1) does not change the model.
        let (full, full_m) = run(&j, 3).unwrap();
        assert_eq!(
            full, plain.coefficients,
            "{mode}: checkpointing changed the model"
        );
        assert_eq!(full_m.updates, plain.metrics.updates);
        assert!(full_m.checkpoints.len() >= 3, "{:?}", full_m.checkpoints);
        let dir = tempfile::tempdir().unwrap();
        let j = job(mode, Some(dir.path()));
        crash_after(&j, 3, 2);
        assert_eq!(manifest_rounds(dir.path()).unwrap().len(), 2);
        let (b, m) = run(&resumed(&j), 3).unwrap();
        assert_eq!(b, plain.coefficients, "{mode}: resumed model differs");
        assert_eq!(m.resumed_from_round, Some(full_m.checkpoints[1]));
        assert_eq!(m.checkpoints, full_m.checkpoints);
        assert_eq!(m.rounds, full_m.rounds);
        assert_eq!(m.updates, full_m.updates);
        assert_eq!(m.objective.len(), full_m.objective.len());
        for (p, q) in m.objective.iter().zip(&full_m.objective) {
            assert_eq!((p.round, p.updates), (q.round, q.updates));
            assert_eq!(p.objective.to_bits(), q.objective.to_bits());
        }
        assert_eq!(
            m.final_objective.to_bits(),
            full_m.final_objective.to_bits()
        );
    }
}

#[test]
fn pipelined_resume_matches_the_uninterrupted_checkpointed_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = job("dynamic", Some(dir.path()));
    j.depth = 3;
    j.checkpoint_every = 45;
    let (full, _) = run(&j, 2).unwrap();
    let dir = tempfile::tempdir().unwrap();
    j.checkpoint_dir = Some(dir.path().to_path_buf());
    crash_after(&j, 2, 3);
    let (b, m) = run(&resumed(&j), 2).unwrap();
    assert!(m.resumed_from_round.unwrap() > 0);
    assert_eq!(b, full);
}

/// Writes two checkpoints and stops; returns the job and the two rounds.
fn two_checkpoints(dir: &Path) -> (LassoJob, u64, u64) {
    let j = job("dynamic", Some(dir));
    crash_after(&j, 2, 2);
    let rounds = manifest_rounds(dir).unwrap();
    assert_eq!(rounds.len(), 2);
    (j, rounds[0], rounds[1])
}

fn shape_of(j: &LassoJob, n: usize) -> ClusterShape {
    let (x, y) = j.load().unwrap();
    let inner = LassoScheduling::new(&x, &y, j, n).unwrap();
    ClusterShape::of(&x, &y, inner.lambda(), j.seed, n)
}

#[test]
fn corrupted_truncated_or_missing_files_never_load() {
    let dir = tempfile::tempdir().unwrap();
    let (j, old, new) = two_checkpoints(dir.path());
    let shape = shape_of(&j, 2);
    assert!(load_valid(dir.path(), new, &shape).is_ok());
    let d = dir.path();
    // Flip one bit of a worker file: refused, naming that file.
    let w = d.join(worker_file(new, 1));
    let orig = fs::read(&w).unwrap();
    let mut bad = orig.clone();
    bad[orig.len() / 2] ^= 0x04;
    fs::write(&w, &bad).unwrap();
    let e = load_valid(d, new, &shape).unwrap_err().to_string();
    assert!(
        e.contains(&worker_file(new, 1)) && e.contains("checksum"),
        "{e}"
    );
    // Truncated.
    fs::write(&w, &orig[..orig.len() - 3]).unwrap();
    let e = load_valid(d, new, &shape).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
    fs::write(&w, &orig).unwrap();
    // The scheduler file missing.
    let s = d.join(scheduler_file(new));
    let sched = fs::read(&s).unwrap();
    fs::remove_file(&s).unwrap();
    let e = load_valid(d, new, &shape).unwrap_err().to_string();
    assert!(
        e.contains(&scheduler_file(new)) && e.contains("missing"),
        "{e}"
    );
    fs::write(&s, &sched).unwrap();
    // A truncated or bit-flipped manifest.
    let m = d.join(manifest_name(new));
    let mbytes = fs::read(&m).unwrap();
    for cut in [0, 5, 8, mbytes.len() / 2, mbytes.len() - 1] {
        fs::write(&m, &mbytes[..cut]).unwrap();
        let e = load_valid(d, new, &shape).unwrap_err().to_string();
        assert!(e.contains(&manifest_name(new)), "cut {cut}: {e}");
    }
    let mut flipped = mbytes.clone();
    flipped[12] ^= 1;
    fs::write(&m, &flipped).unwrap();
    assert!(
        load_valid(d, new, &shape)
            .unwrap_err()
            .to_string()
            .contains("checksum")
    );
    // A manifest copied under another round's name.
    fs::write(d.join(manifest_name(new + 1)), &mbytes).unwrap();
    assert!(
        load_valid(d, new + 1, &shape)
            .unwrap_err()
            .to_string()
            .contains("manifest is for lasso round")
    );
    fs::remove_file(d.join(manifest_name(new + 1))).unwrap();
    // No manifest: the checkpoint does not exist, even with all data files present.
    fs::remove_file(&m).unwrap();
    let e = load_valid(d, new, &shape).unwrap_err().to_string();
    assert!(e.contains("missing manifest"), "{e}");
    assert_eq!(manifest_rounds(d).unwrap(), vec![old]);
}

#[test]
fn resume_falls_back_to_the_older_checkpoint_and_still_matches() {
    let dir = tempfile::tempdir().unwrap();
    let (j, old, new) = two_checkpoints(dir.path());
    // The newest checkpoint's worker file is damaged (e.g. a disk error after the crash).
    let w = dir.path().join(worker_file(new, 0));
    let mut bytes = fs::read(&w).unwrap();
    bytes[3] ^= 0xff;
    fs::write(&w, &bytes).unwrap();
    let (b, m) = run(&resumed(&j), 2).unwrap();
    assert_eq!(m.resumed_from_round, Some(old));
    let plain = run_without_actors(&job("dynamic", None), 2).unwrap();
    assert_eq!(b, plain.coefficients);
    // The resumed run rewrote the damaged checkpoint and kept only the newest two.
    let rounds = manifest_rounds(dir.path()).unwrap();
    assert_eq!(rounds.len(), 2);
    let shape = shape_of(&j, 2);
    for r in rounds {
        load_valid(dir.path(), r, &shape).unwrap();
    }
}

#[test]
fn wrong_shape_or_no_checkpoint_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _, new) = two_checkpoints(dir.path());
    // Three workers instead of two.
    let e = scheduler(&resumed(&j), 3).err().unwrap().to_string();
    assert!(e.contains("no valid checkpoint"), "{e}");
    assert!(e.contains("workers is 2 in the checkpoint but 3"), "{e}");
    assert!(e.contains(&manifest_name(new)), "{e}");
    // Another lambda.
    let mut other = resumed(&j);
    other.lambda = Some(0.123);
    let e = scheduler(&other, 2).err().unwrap().to_string();
    assert!(e.contains("lambda"), "{e}");
    // Another seed.
    let mut other = resumed(&j);
    other.seed += 1;
    assert!(
        scheduler(&other, 2)
            .err()
            .unwrap()
            .to_string()
            .contains("seed")
    );
    // Other data of the same size.
    let mut other = resumed(&j);
    other.synthetic.seed += 1;
    other.lambda = Some(f32::from_bits(shape_of(&j, 2).lambda_bits));
    let e = scheduler(&other, 2).err().unwrap().to_string();
    assert!(e.contains("data fingerprint"), "{e}");
    // An empty directory, or one that does not exist.
    let empty = tempfile::tempdir().unwrap();
    let e = scheduler(&resumed(&job("dynamic", Some(empty.path()))), 2)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no manifest found"), "{e}");
    let gone = empty.path().join("nope");
    assert!(scheduler(&resumed(&job("dynamic", Some(&gone))), 2).is_err());
}

#[test]
fn worker_refuses_a_file_that_does_not_match_the_manifest_or_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _, new) = two_checkpoints(dir.path());
    let m = load_valid(dir.path(), new, &shape_of(&j, 2)).unwrap();
    let mut ws = workers(&j, 2);
    // Right digest: restores.
    let ok = ws[0]
        .push(
            0,
            &LassoTask::Control(ControlTask::Restore {
                round: new,
                digest: m.workers[0].digest,
            }),
        )
        .unwrap();
    assert!(matches!(
        ok,
        LassoPartial::Control(ControlReply::Restored { .. })
    ));
    // Worker 1 asked to load with worker 0's digest: checksum/length mismatch, names its file.
    let e = ws[1]
        .push(
            0,
            &LassoTask::Control(ControlTask::Restore {
                round: new,
                digest: m.workers[0].digest,
            }),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains(&worker_file(new, 1)), "{e}");
    // A worker with another row split refuses the file even with the right digest.
    let mut three = workers(&j, 3);
    let e = three[1]
        .push(
            0,
            &LassoTask::Control(ControlTask::Restore {
                round: new,
                digest: m.workers[1].digest,
            }),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("this worker is"), "{e}");
    // A worker without checkpoint_dir refuses control tasks.
    let mut bare = workers(&job("dynamic", None), 2);
    assert!(
        bare[0]
            .push(0, &LassoTask::Control(ControlTask::Save { round: 1 }))
            .is_err()
    );
}
