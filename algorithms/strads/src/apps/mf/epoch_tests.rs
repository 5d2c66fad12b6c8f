//! A change of the workers re-forms the ring: the scheduler's and the workers' halves
//! driven as the actor shells drive them (one round at a time, blocks handed on), with a
//! join and a leave, against the fixed run.

use super::*;
use crate::apps::lasso::Balance;
use crate::core::app::{BlockFate, Plan, RingApp, RingPush, Schedule, Step};
use crate::core::roster::Reshape;
use crate::kit::{JobShape, StradsJob};
use std::collections::BTreeMap;
use std::time::Duration;

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
    let shape = JobShape {
        workers: of,
        schedulers: 1,
    };
    <MfApp as StradsJob>::worker(job, index, &shape)
        .unwrap()
        .logic
}

/// Workers by node name; blocks wherever the last push passed them.
struct Ring {
    workers: BTreeMap<String, MfWorkerApp>,
    blocks: BTreeMap<u64, FactorBlock>,
}

impl Ring {
    /// One round over `names` (dispatch order): the partials, then the commit to all.
    fn round(
        &mut self,
        sched: &mut MfScheduling,
        round: u64,
        plan: Plan<MfTask>,
        names: &[String],
    ) {
        let tasks = plan.into_tasks(names.len()).unwrap();
        let mut partials = Vec::new();
        for (name, task) in names.iter().zip(tasks) {
            let w = self.workers.get_mut(name).unwrap();
            if let Some(ring) = MfApp::new_ring(&task) {
                let index = ring.iter().position(|n| n == name).map(|i| i as u32);
                let (partial, held) = w.rering(round, &task, index).unwrap();
                self.blocks.extend(held);
                partials.push(partial);
                continue;
            }
            let block = MfApp::block_needed(&task).map(|b| self.blocks.remove(&b).unwrap());
            let out = w.push(round, &task, block).unwrap();
            if let BlockFate::PassTo { block, .. } = out.block {
                self.blocks.insert(block.block as u64, block);
            }
            partials.push(out.partial);
        }
        let commit = sched.pull(round, partials, Duration::ZERO).unwrap();
        for name in names {
            self.workers
                .get_mut(name)
                .unwrap()
                .commit(round, &commit)
                .unwrap();
        }
    }
}

/// Runs the job from two workers; `changes[i] = (round, change)` is announced then and
/// made at the first boundary the scheduler takes it (with `withdrawn`, the first one
/// goes away once the scheduler first answered it). The scheduler at the end.
fn run(job: &StradsMfSettings, changes: Vec<(u64, Reshape)>) -> MfScheduling {
    run_with(job, changes, false)
}

fn run_with(
    job: &StradsMfSettings,
    mut changes: Vec<(u64, Reshape)>,
    mut withdrawn: bool,
) -> MfScheduling {
    let shape = JobShape {
        workers: 2,
        schedulers: 1,
    };
    let mut sched = <MfApp as StradsJob>::scheduler(job, &shape).unwrap();
    let mut names: Vec<String> = vec!["w0".into(), "w1".into()];
    let mut ring = Ring {
        workers: BTreeMap::new(),
        blocks: BTreeMap::new(),
    };
    for (i, name) in names.iter().enumerate() {
        let half = <MfApp as StradsJob>::worker(job, i, &shape).unwrap();
        ring.blocks.extend(half.initial);
        ring.workers.insert(name.clone(), half.logic);
    }
    // The joiner builds its half as a standby node does (over all three nodes).
    ring.workers.insert("w2".into(), worker(job, 2, 3));
    for round in 0.. {
        if let Some((at, change)) = changes.first().cloned()
            && round >= at
        {
            match sched.reshape(round, &change).unwrap() {
                Some(step) => {
                    let Step::Run(plan) = step else {
                        panic!("a change's round runs")
                    };
                    ring.round(&mut sched, round, plan, &change.dealt);
                    names = change.staying().to_vec();
                    changes.remove(0);
                    continue;
                }
                None if std::mem::take(&mut withdrawn) => {
                    changes.remove(0);
                }
                None => {}
            }
        }
        match sched.schedule(round, 0) {
            Step::Run(plan) => ring.round(&mut sched, round, plan, &names),
            Step::Done => break,
            Step::Wait => panic!("nothing in flight"),
        }
    }
    assert!(changes.is_empty(), "every change was made");
    sched
}

fn change(dealt: &[&str], staying: usize, joined: &[bool]) -> Reshape {
    Reshape {
        dealt: dealt.iter().map(|s| s.to_string()).collect(),
        staying,
        joined: joined.to_vec(),
        lost: Vec::new(),
    }
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
    let shape = JobShape {
        workers: 2,
        schedulers: 1,
    };
    let mut sched = <MfApp as StradsJob>::scheduler(&job, &shape).unwrap();
    let leave = change(&["w1", "w0"], 1, &[false, false]);
    // Round 0 is the first sub-round of the first rotation: a boundary. The first
    // answer is no change yet, and the next round gathers the model.
    assert_eq!(sched.reshape(0, &leave).unwrap(), None);
    let Step::Run(Plan::PerWorker(tasks)) = sched.schedule(0, 0) else {
        panic!("a gathering round")
    };
    assert!(matches!(
        tasks[..],
        [MfTask::Collect { block: 0 }, MfTask::Collect { block: 1 }]
    ));
    // Without a dealer (static dealing) a change is refused.
    let mut fixed = job.clone();
    fixed.balance = Balance::Static;
    let mut sched = <MfApp as StradsJob>::scheduler(&fixed, &shape).unwrap();
    assert!(sched.reshape(0, &leave).is_err());
    // A leaver of an epoch holds no block and no work.
    let mut w = worker(&job, 0, 2);
    assert!(w.holds_work());
    let epoch = MfTask::Epoch(Box::new(MfEpoch {
        ring: vec!["w1".into()],
        user_bucket: vec![0; 90],
        item_bucket: vec![0; 60],
        w: vec![0.0; 90 * 3],
        h: vec![0.0; 60 * 3],
    }));
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
