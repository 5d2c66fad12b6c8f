use super::sync::{LeadBook, lead_start};
use super::*;
use crate::apps::lasso::run_without_actors;
use crate::apps::lasso::{LassoCommit, LassoPartial, LassoTask, LassoWorker};
use crate::core::app::Push;
use crate::core::lasso::LassoWorkerState;
use crate::core::lasso::tests::LassoCluster;
use crate::kit::serial::{SerialOptions, run_star};

#[test]
fn partition_is_contiguous_balanced_and_non_empty() {
    // Heavy columns at the front: the cut moves left to balance weight, not count.
    let mut w = vec![10u64; 10];
    w.extend(vec![1u64; 90]);
    let parts = partition_columns(&w, 2).unwrap();
    assert_eq!(parts, vec![0..10, 10..100]);
    let parts = partition_columns(&w, 4).unwrap();
    assert_eq!(parts.first().unwrap().start, 0);
    assert_eq!(parts.last().unwrap().end, 100);
    let total: u64 = w.iter().sum();
    for pair in parts.windows(2) {
        assert_eq!(pair[0].end, pair[1].start);
    }
    for p in &parts {
        assert!(!p.is_empty());
        let sum: u64 = w[p.clone()].iter().sum();
        assert!(
            (sum as f64 - total as f64 / 4.0).abs() <= 10.0,
            "{p:?} weighs {sum} of {total}"
        );
    }
    // Uniform weights: equal counts.
    assert_eq!(
        partition_columns(&[1; 9], 3).unwrap(),
        vec![0..3, 3..6, 6..9]
    );
    // One giant column still leaves every scheduler a column.
    let parts = partition_columns(&[1000, 1, 1], 3).unwrap();
    assert_eq!(parts, vec![0..1, 1..2, 2..3]);
}

/// The cut as first written: a prefix-sum array and a binary search per boundary.
fn partition_by_prefix_array(weights: &[u64], parts: usize) -> Vec<std::ops::Range<usize>> {
    let d = weights.len();
    let mut prefix = vec![0u128];
    for &w in weights {
        prefix.push(prefix[prefix.len() - 1] + u128::from(w));
    }
    let total = prefix[d];
    let mut bounds = vec![0usize];
    for k in 1..parts {
        let b = prefix.partition_point(|&p| p < total * k as u128 / parts as u128);
        bounds.push(b.clamp(bounds[k - 1] + 1, d - (parts - k)));
    }
    bounds.push(d);
    bounds.windows(2).map(|w| w[0]..w[1]).collect()
}

proptest::proptest! {
    #[test]
    fn the_one_walk_cut_is_the_prefix_array_cut(
        weights in proptest::collection::vec(
            proptest::prop_oneof![proptest::strategy::Just(0u64), 1u64..5, 1u64..100_000], 1..300),
        parts in 1usize..=MAX_SCHEDULERS,
    ) {
        proptest::prop_assume!(parts <= weights.len());
        let walked = partition_weighted(weights.iter().copied(), parts).unwrap();
        proptest::prop_assert_eq!(walked, partition_by_prefix_array(&weights, parts));
    }
}

#[test]
fn partition_rejects_bad_counts() {
    assert!(matches!(
        partition_columns(&[1, 1], 3),
        Err(StradsError::TooManySchedulers {
            schedulers: 3,
            features: 2
        })
    ));
    assert!(matches!(
        partition_columns(&[1, 1], 0),
        Err(StradsError::NoSchedulers)
    ));
    assert!(matches!(
        partition_columns(&[1; 100], MAX_SCHEDULERS + 1),
        Err(StradsError::SchedulersAboveMax { .. })
    ));
}

fn nodes(spec: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    spec.iter()
        .map(|(n, roles)| (n.to_string(), roles.iter().map(|r| r.to_string()).collect()))
        .collect()
}

#[test]
fn scheduler_roles_map_to_indices() {
    assert_eq!(scheduler_index_of("strads-lasso-scheduler"), Some(0));
    assert_eq!(scheduler_index_of("strads-lasso-scheduler-3"), Some(3));
    assert_eq!(scheduler_index_of("strads-lasso-scheduler-x"), None);
    assert_eq!(scheduler_index_of("strads-lasso-worker"), None);
    assert_eq!(scheduler_role_name(2), "strads-lasso-scheduler-2");
    assert_eq!(scheduler_role_name(0), SCHEDULER_ROLE);
}

#[test]
fn assignment_accepts_shared_and_separate_nodes() {
    let sep = nodes(&[
        ("s0", &["strads-lasso-scheduler"]),
        ("s1", &["strads-lasso-scheduler-1"]),
        ("w0", &["strads-lasso-worker"]),
    ]);
    assert_eq!(assign_schedulers(&sep, 2).unwrap(), vec!["s0", "s1"]);
    let shared = nodes(&[
        (
            "sched",
            &["strads-lasso-scheduler-1", "strads-lasso-scheduler"],
        ),
        ("w0", &["strads-lasso-worker"]),
    ]);
    assert_eq!(
        assign_schedulers(&shared, 2).unwrap(),
        vec!["sched", "sched"]
    );
}

#[test]
fn assignment_errors_name_the_problem() {
    let out = nodes(&[
        ("s0", &["strads-lasso-scheduler"]),
        ("s5", &["strads-lasso-scheduler-5"]),
    ]);
    let e = assign_schedulers(&out, 2).unwrap_err();
    assert!(
        matches!(e, StradsError::SchedulerIndexOutOfRange { index: 5, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("node s5"), "{e}");
    let dup = nodes(&[
        ("a", &["strads-lasso-scheduler", "strads-lasso-scheduler-1"]),
        ("b", &["strads-lasso-scheduler-1"]),
    ]);
    assert_eq!(
        assign_schedulers(&dup, 2).unwrap_err().to_string(),
        "scheduler 1 is claimed by two nodes: a and b"
    );
    let missing = nodes(&[("a", &["strads-lasso-scheduler"])]);
    assert!(
        assign_schedulers(&missing, 2)
            .unwrap_err()
            .to_string()
            .contains("no node runs strads-lasso-scheduler-1")
    );
}

fn report(epoch: u64, scheduler: u32, vars: &[u32], values: &[f32]) -> SyncReport {
    SyncReport {
        epoch,
        scheduler,
        rounds: 10,
        updates: 80,
        wants_stop: false,
        vars: vars.to_vec(),
        values: values.to_vec(),
    }
}

#[test]
fn sync_core_collects_merges_and_validates() {
    let mut core = SyncCore::new(vec![0..4, 4..7, 7..10]);
    assert!(!core.complete());
    assert!(core.add(report(1, 1, &[], &[])).is_err(), "wrong epoch");
    assert!(
        core.add(report(0, 0, &[], &[])).is_err(),
        "the lead does not report"
    );
    assert!(
        core.add(report(0, 3, &[], &[])).is_err(),
        "index out of range"
    );
    assert!(
        core.add(report(0, 1, &[8], &[1.0])).is_err(),
        "coordinate outside its columns"
    );
    core.add(report(0, 1, &[5], &[2.0])).unwrap();
    assert!(core.add(report(0, 1, &[5], &[2.0])).is_err(), "twice");
    assert!(!core.complete());
    core.add(report(0, 2, &[7, 9], &[-1.0, 3.0])).unwrap();
    assert!(core.complete());
    // Stale values in the followers' ranges are replaced; the lead's are kept.
    let mut b = vec![0.5f32; 10];
    core.merge(&mut b);
    assert_eq!(b, vec![0.5, 0.5, 0.5, 0.5, 0.0, 2.0, 0.0, -1.0, 0.0, 3.0]);
}

fn numbers(objective: f64, gap: f64) -> EvalNumbers {
    EvalNumbers {
        objective,
        kkt_violation: 0.0,
        duality_gap: gap,
        l1: 4.0,
        nonzeros: 3,
    }
}

fn lead(wants_stop: bool) -> LeadStatus {
    LeadStatus {
        rounds: 11,
        updates: 70,
        wants_stop,
    }
}

#[test]
fn stop_rule_combines_every_scheduler() {
    let mut core = SyncCore::new(vec![0..2, 2..4]);
    core.add(report(0, 1, &[], &[])).unwrap();
    let d = core.decide(lead(false), &numbers(10.0, 1e-3), Some(1e-5), None);
    assert!(!d.stop, "{}", d.reason);
    assert_eq!(d.updates_total, 150);
    assert_eq!(d.l1_total, 4.0);
    assert_eq!(d.epoch, 0);
    assert_eq!(core.epoch(), 1);
    // Gap within tolerance.
    core.add(report(1, 1, &[], &[])).unwrap();
    let d = core.decide(lead(false), &numbers(10.0, 1e-5), Some(1e-5), None);
    assert!(d.stop && d.reason.contains("duality gap"), "{}", d.reason);
    // A follower at max_rounds stops everyone.
    let mut r = report(2, 1, &[], &[]);
    r.wants_stop = true;
    core.add(r).unwrap();
    let d = core.decide(lead(false), &numbers(10.0, 1.0), Some(1e-5), None);
    assert!(d.stop && d.reason.contains("scheduler 1"), "{}", d.reason);
    // Target objective and divergence.
    core.add(report(3, 1, &[], &[])).unwrap();
    let d = core.decide(lead(false), &numbers(10.0, 1.0), None, Some(10.5));
    assert!(d.stop && d.reason.contains("target"));
    core.add(report(4, 1, &[], &[])).unwrap();
    let d = core.decide(lead(false), &numbers(f64::NAN, 1.0), None, None);
    assert!(d.stop && d.reason.contains("diverged"));
    core.add(report(5, 1, &[], &[])).unwrap();
    assert!(
        core.decide(lead(true), &numbers(10.0, 1.0), None, None)
            .stop
    );
    let summary = core.summary(lead(false));
    assert_eq!(summary[0].updates, 70);
    assert_eq!(summary[1].updates, 80);
    assert_eq!((summary[1].first_feature, summary[1].features), (2, 2));
}

fn small_job(schedulers: usize) -> LassoSettings {
    LassoSettings {
        schedulers,
        ..crate::apps::lasso::tests::small_scheduled_job(50)
    }
}

#[test]
fn combined_evaluation_matches_the_whole_model() {
    let job = small_job(1);
    let (x, y) = job.load().unwrap();
    let lambda = job.resolve_lambda(&x, &y);
    let mut cluster = LassoCluster::new(&x, &y, lambda, 3).unwrap();
    for start in (0..200).step_by(7) {
        let vars: Vec<usize> = (start..(start + 3).min(200)).collect();
        cluster.round(&vars);
    }
    let partials: Vec<LassoPartial> = cluster
        .workers
        .iter()
        .map(|w| {
            let mut lw = LassoWorker::with_schedulers(w.clone(), 2);
            lw.push_from(1, 0, &LassoTask::Evaluate).unwrap()
        })
        .collect();
    let (n, applied) = combine_evaluation(&partials, &cluster.coefficients, lambda).unwrap();
    assert_eq!(applied, 0);
    assert!((n.objective - cluster.objective()).abs() < 1e-9 * n.objective.max(1.0));
    assert!((n.kkt_violation - cluster.kkt_violation()).abs() < 1e-9);
    assert!((n.duality_gap - cluster.duality_gap()).abs() < 1e-6 * n.objective.max(1.0));
    assert!(n.nonzeros > 0);
    // Wrong answers and lengths are errors.
    assert!(combine_evaluation(&partials, &cluster.coefficients[..10], lambda).is_err());
    let z = LassoPartial::Z {
        z: vec![],
        sq_residual: 0.0,
        applied: 0,
        busy: Default::default(),
    };
    assert!(combine_evaluation(&[z], &cluster.coefficients, lambda).is_err());
}

#[test]
fn worker_keeps_applied_counts_per_scheduler() {
    let job = small_job(2);
    let (x, y) = job.load().unwrap();
    let state = LassoWorkerState::new(x, y).unwrap();
    let mut w = LassoWorker::with_schedulers(state, 2);
    let commit = LassoCommit {
        vars: vec![3],
        deltas: vec![0.1],
    };
    w.commit_from(1, 0, &commit).unwrap();
    w.commit_from(1, 1, &commit).unwrap();
    w.commit_from(0, 0, &commit).unwrap();
    let task = LassoTask::Update {
        vars: vec![4],
        values: vec![0.0],
    };
    let applied = |p: LassoPartial| match p {
        LassoPartial::Z { applied, .. } => applied,
        other => panic!("{other:?}"),
    };
    assert_eq!(applied(w.push_from(0, 7, &task).unwrap()), 1);
    assert_eq!(applied(w.push_from(1, 7, &task).unwrap()), 2);
    let e = w.push_from(2, 0, &task).unwrap_err().to_string();
    assert!(e.contains("scheduler index 2 out of range"), "{e}");
    assert!(w.commit_from(5, 0, &commit).is_err());
}

#[test]
fn two_schedulers_reach_the_single_scheduler_optimum() {
    let (single_b, single) = {
        let out = run_without_actors(&small_job(1), 3).unwrap();
        (out.coefficients, out.metrics)
    };
    for mode in ["dynamic", "cyclic", "random"] {
        let mut job = small_job(2);
        job.mode = mode.parse().unwrap();
        job.depth = 2;
        job.gap_tolerance = Some(1e-6);
        let (b, m) = run_multi_without_actors(&job, 3).unwrap();
        let lambda = f64::from(m.base.lambda);
        assert_eq!(m.schedulers, 2);
        assert_eq!(m.base.lambda, single.lambda, "the global lambda");
        assert!(
            m.base.final_kkt_violation < 1e-3 * lambda,
            "{mode}: kkt {}",
            m.base.final_kkt_violation
        );
        let rel = (m.base.final_objective - single.final_objective).abs() / single.final_objective;
        assert!(
            rel < 1e-3,
            "{mode}: {} vs {}",
            m.base.final_objective,
            single.final_objective
        );
        // The same solution (the design is in general position: it is unique).
        let scale = single_b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = b
            .iter()
            .zip(&single_b)
            .fold(0.0f32, |m, (a, c)| m.max((a - c).abs()));
        assert!(diff < 1e-2 * scale, "{mode}: coefficients differ by {diff}");
        let split = m.per_scheduler[0].features;
        assert!(
            b[split..].iter().any(|v| *v != 0.0),
            "{mode}: follower's slice"
        );
        // Both schedulers did work on their own columns.
        assert_eq!(m.per_scheduler.len(), 2);
        assert_eq!(
            m.per_scheduler[0].features + m.per_scheduler[1].features,
            200
        );
        assert!(
            m.per_scheduler
                .iter()
                .all(|s| s.updates > 0 && s.rounds > 0)
        );
        assert_eq!(
            m.base.updates,
            m.per_scheduler.iter().map(|s| s.updates).sum::<u64>()
        );
        // Evaluations are exact and their update counts global and increasing.
        assert!(m.base.evaluations.len() >= 2);
        assert!(
            m.base
                .evaluations
                .windows(2)
                .all(|e| e[0].updates < e[1].updates)
        );
        assert_eq!(m.base.evaluations.last().unwrap().updates, m.base.updates);
        // The lead's trace points exist and end near the final objective.
        let last = m.base.objective.last().unwrap().objective;
        assert!(last >= m.base.final_objective - 1e-6 && last < 1.05 * m.base.final_objective);
    }
}

#[test]
fn max_rounds_stops_every_scheduler_at_the_same_epoch() {
    let mut job = small_job(3);
    job.max_rounds = 60;
    job.eval_every = 25;
    job.gap_tolerance = None;
    let (_, m) = run_multi_without_actors(&job, 2).unwrap();
    // 60 update rounds each (epochs of 25, 25, 10), plus flushes / evaluations.
    assert_eq!(m.base.evaluations.len(), 3);
    assert_eq!(m.per_scheduler[0].rounds, 60 + 3);
    assert_eq!(m.per_scheduler[1].rounds, 60 + 3);
    assert!(m.base.final_kkt_violation.is_finite());
}

#[test]
fn too_many_schedulers_is_a_clear_error() {
    let mut job = small_job(1);
    job.synthetic.n_features = 3;
    job.synthetic.group_size = 1;
    job.synthetic.n_nonzero = 1;
    job.schedulers = 4;
    let e = run_multi_without_actors(&job, 1).unwrap_err().to_string();
    assert!(
        e.contains("schedulers = 4 but the design has only 3 features"),
        "{e}"
    );
}

// A multi-scheduler job in one thread (no actors), through the kit's serial driver: the
// deterministic reference for the distributed run's logic.

/// A multi-scheduler job with every scheduler and worker in this thread and no actors:
/// the schedulers' epochs run one after the other (scheduler 0's, then 1's, ...), then the
/// lead evaluates. A deterministic reference for the distributed run's logic.
pub(crate) fn run_multi_without_actors(
    job: &LassoSettings,
    workers: usize,
) -> Result<(Vec<f32>, MultiLassoMetrics), StradsError> {
    let job = &job.with_multi_defaults();
    let (x, y) = job.load()?;
    let all: Vec<usize> = (0..job.schedulers).collect();
    let (ranges, mut apps) = build_schedulers(&x, &y, job, workers, &all)?;
    let means = job.design_means(&x);
    let mut ws = crate::core::split_evenly(x.n_rows, workers)
        .into_iter()
        .map(|r| {
            let (block, y_block) = (x.row_block(r.clone()), y[r].to_vec());
            match &means {
                Some(m) => LassoWorkerState::centred(block, y_block, m.clone()),
                None => LassoWorkerState::new(block, y_block),
            }
            .map(|st| LassoWorker::with_schedulers(st, job.schedulers))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (heldout, zero) = lead_start(&x, &y, job, &all)?;
    let mut book = LeadBook::new(ranges, job, workers, x.n_rows, heldout, zero);
    let mut next = vec![0u64; apps.len()];
    loop {
        for (app, next) in apps.iter_mut().zip(next.iter_mut()) {
            app.begin_segment();
            let opts = segment(job, app.index(), *next);
            *next = run_star(app, &mut ws, &opts)?.rounds;
        }
        let epoch = book.core.epoch();
        for app in &apps[1..] {
            book.core.add(app.report(epoch))?;
        }
        let model = book.assemble(&apps[0]);
        apps[0].begin_evaluation(model);
        let opts = segment(job, 0, next[0]);
        next[0] = run_star(&mut apps[0], &mut ws, &opts)?.rounds;
        let d = book.decide(&mut apps[0])?;
        for app in &mut apps[1..] {
            app.apply_decision(&d);
        }
        if d.stop {
            let model = apps[0].evaluated_model().to_vec();
            return Ok(book.outcome(&apps[0], model, std::time::Duration::ZERO));
        }
    }
}

/// Scheduler `s`'s next segment, continuing its round count at `first_round`.
fn segment(job: &LassoSettings, s: usize, first_round: u64) -> SerialOptions {
    SerialOptions {
        depth: job.depth,
        scheduler: s as u32,
        first_round,
        ..SerialOptions::default()
    }
}
