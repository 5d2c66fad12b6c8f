//! A change of the workers re-forms the ring: the scheduler's and the workers' halves
//! driven as the actor shells drive them ([`crate::apps::ring_changes`]), with a join and
//! a leave, against the fixed run.

use super::*;
use crate::apps::lasso::Balance;
use crate::apps::ring_changes::{self, change};
use crate::core::app::RingPush;
use crate::core::roster::Reshape;

fn job() -> StradsMfSettings {
    StradsMfSettings {
        synthetic: LowRankParams {
            n_users: 90,
            n_items: 60,
            rank: 3,
            observed_fraction: 0.3,
            noise_std: 0.05,
            seed: 4,
        },
        rank: 3,
        outer_iterations: 4,
        balance: Balance::Dynamic,
        ..StradsMfSettings::default()
    }
}

fn worker(job: &StradsMfSettings, index: usize, of: usize) -> MfWorkerApp {
    ring_changes::worker::<MfApp, MfWorkerApp>(job, index, of)
}

fn run(job: &StradsMfSettings, changes: Vec<(u64, Reshape)>) -> MfScheduling {
    run_with(job, changes, false)
}

fn run_with(job: &StradsMfSettings, changes: Vec<(u64, Reshape)>, withdrawn: bool) -> MfScheduling {
    ring_changes::run_with::<MfApp, MfWorkerApp>(job, changes, withdrawn)
}

#[test]
fn a_join_and_a_leave_re_form_the_ring_and_land_on_the_fixed_model() {
    let job = job();
    let fixed = run(&job, Vec::new());
    let join = change(&["w0", "w1", "w2"], 3, &[false, false, true]);
    let leave = change(&["w1", "w2", "w0"], 2, &[false, false, false]);
    // Announced mid-rotation: each waits for the next rotation boundary.
    let elastic = run(&job, vec![(5, join), (23, leave)]);
    let (f, e) = (fixed.metrics(), elastic.metrics());
    let changes = &e.balance.as_ref().unwrap().changes;
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[0].joined, vec!["w2".to_string()]);
    assert_eq!(changes[1].left, vec!["w0".to_string()]);
    assert_eq!(changes[1].workers, vec!["w1".to_string(), "w2".to_string()]);
    assert_eq!(e.workers, 2);
    // The same CCD++ updates; the rebuilt residuals differ only in rounding.
    let updates = |m: &MfMetrics| {
        m.train_rmse
            .iter()
            .map(|p| p.coordinate_updates)
            .collect::<Vec<_>>()
    };
    assert_eq!(updates(f), updates(e));
    assert!(
        (f.final_train_rmse - e.final_train_rmse).abs() < 1e-4,
        "{} vs {}",
        f.final_train_rmse,
        e.final_train_rmse
    );
    let ((fw, fh), (ew, eh)) = (fixed.factors().unwrap(), elastic.factors().unwrap());
    let most = |a: &ndarray::Array2<f32>, b: &ndarray::Array2<f32>| {
        (a - b).iter().fold(0f32, |m, d| m.max(d.abs()))
    };
    assert!(most(&fw, &ew) < 1e-3 && most(&fh, &eh) < 1e-3);
}

#[test]
fn a_change_waits_for_a_rotation_boundary_and_a_leaver_holds_nothing() {
    let job = job();
    let mut fixed = job.clone();
    fixed.balance = Balance::Static;
    // Round 0 is the first sub-round of the first rotation: a boundary.
    let tasks = ring_changes::first_change_round::<MfApp>(&job, &fixed);
    assert!(matches!(
        tasks[..],
        [MfTask::Collect { block: 0 }, MfTask::Collect { block: 1 }]
    ));
    // A leaver of an epoch holds no block and no work.
    let mut w = worker(&job, 0, 2);
    assert!(w.holds_work());
    let model = MfEpoch {
        user_bucket: vec![0; 90],
        item_bucket: vec![0; 60],
        w: vec![0.0; 90 * 3],
        h: vec![0.0; 60 * 3],
    };
    let epoch = MfTask::Ring(ring_changes::ring_of_w1().epoch(model));
    let (_, held) = w.rering(3, &epoch, None).unwrap();
    assert!(held.is_empty() && !w.holds_work());
    // The one staying worker holds the one block, with every user.
    let mut w = worker(&job, 1, 2);
    let (_, held) = w.rering(3, &epoch, Some(0)).unwrap();
    assert_eq!(held.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![0]);
    assert_eq!(w.core().user_ids().len(), 90);
}

#[test]
fn a_change_that_goes_away_after_the_gathering_re_forms_the_same_ring() {
    let job = job();
    let fixed = run(&job, Vec::new());
    // Round 0 starts a rotation: the model is gathered, then the joiner is gone.
    let join = change(&["w0", "w1", "w2"], 3, &[false, false, true]);
    let same = run_with(&job, vec![(0, join)], true);
    let (f, s) = (fixed.metrics(), same.metrics());
    assert_eq!(s.balance.as_ref().unwrap().changes, Vec::new());
    // The same two workers, the same model to rounding.
    assert_eq!(s.workers, 2);
    assert!((f.final_train_rmse - s.final_train_rmse).abs() < 1e-4);
}
