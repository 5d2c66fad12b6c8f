use super::link_cut::{CutCase, restart_begun};
use super::*;

#[test]
fn restarts_are_read_from_any_apps_final_line() {
    assert_eq!(
        restarts_reported("lasso finished after 1 restart(s) of the cluster\n"),
        1
    );
    assert_eq!(
        restarts_reported("x\np3 finished after 2 restart(s) of the cluster"),
        2
    );
    assert_eq!(restarts_reported("lasso 300 features: objective 1.0\n"), 0);
}

fn args(apps: &[ChaosApp], runs: usize, seed: u64) -> ChaosBenchArgs {
    ChaosBenchArgs {
        runs,
        apps: apps.to_vec(),
        seed,
        faults: vec![Fault::Kill, Fault::Pause, Fault::Hostile],
        workers: 2,
        max_rounds: 3000,
        run_timeout_s: 300,
        pause_s: 12.0,
        dir: None,
    }
}

#[test]
fn the_schedule_is_seeded_and_cycles_through_the_apps() {
    let apps = [ChaosApp::Lasso, ChaosApp::P3];
    let plan = schedule(&args(&apps, 4, 5));
    assert_eq!(
        plan,
        schedule(&args(&apps, 4, 5)),
        "same seed, same schedule"
    );
    let order: Vec<ChaosApp> = plan.iter().map(|p| p.app).collect();
    assert_eq!(
        order,
        [ChaosApp::Lasso, ChaosApp::P3, ChaosApp::Lasso, ChaosApp::P3]
    );
    for p in &plan {
        assert!(p.app.nodes(2).contains(&p.victim), "{p:?}");
        assert!(p.delay < Duration::from_millis(400));
    }
}

/// `tests/cli.rs::bench_chaos_recovers_every_faulted_run` relies on this schedule: the
/// Lasso scheduler (the coordinator) killed, then a P3 shard killed, then the Lasso
/// scheduler attacked with worker w0's certificate (the case that failed the job before
/// certificates were bound to addresses).
#[test]
fn seed_10_kills_the_coordinator_then_a_p3_shard_then_sends_a_hostile_member() {
    let plan = schedule(&args(&[ChaosApp::Lasso, ChaosApp::P3], 3, 10));
    let got: Vec<(ChaosApp, Fault, &str, Option<&str>)> = plan
        .iter()
        .map(|p| (p.app, p.fault, p.victim.as_str(), p.impostor.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (ChaosApp::Lasso, Fault::Kill, "scheduler", None),
            (ChaosApp::P3, Fault::Kill, "s0", None),
            (ChaosApp::Lasso, Fault::Hostile, "scheduler", Some("w0")),
        ]
    );
}

/// A hostile member steals the key of a node the victim reads data from: admitted,
/// it would hold up traffic the job needs (the Lasso scheduler failed the job before
/// the address binding, RELIABILITY.md).
#[test]
fn hostile_members_hold_the_key_of_a_node_that_sends_the_victim_data() {
    let has = |app: ChaosApp, victim: &str, impostor: &str| {
        app.hostile_pairs(2)
            .contains(&(victim.to_string(), impostor.to_string()))
    };
    assert!(has(ChaosApp::Lasso, "scheduler", "w0"));
    assert!(has(ChaosApp::Logistic, "w1", "scheduler"));
    assert!(has(ChaosApp::Lda, "w1", "w0"));
    assert!(has(ChaosApp::StradsMf, "w0", "w1"));
    assert!(has(ChaosApp::P3, "s0", "w0"));
    assert!(has(ChaosApp::PsLr, "shard-0", "worker-0"));
    // Never two nodes that exchange nothing.
    assert!(!has(ChaosApp::Lasso, "w0", "w1"));
    assert!(!has(ChaosApp::P3, "s0", "s1"));
    assert!(!has(ChaosApp::PsMf, "worker-0", "worker-1"));
    for app in [
        ChaosApp::Lasso,
        ChaosApp::Logistic,
        ChaosApp::StradsMf,
        ChaosApp::Lda,
        ChaosApp::P3,
        ChaosApp::PsMf,
        ChaosApp::PsLr,
    ] {
        for (victim, impostor) in app.hostile_pairs(2) {
            let nodes = app.nodes(2);
            assert!(
                victim != impostor && nodes.contains(&victim) && nodes.contains(&impostor),
                "{app:?}: {victim} with {impostor}'s key"
            );
        }
    }
}

#[test]
fn link_cuts_alternate_short_and_long_around_the_failure_timeout() {
    let mut a = args(&[ChaosApp::Lasso], 5, 3);
    a.faults = vec![Fault::LinkCut];
    let plan = schedule(&a);
    let cases: Vec<CutCase> = plan.iter().filter_map(|p| p.cut.map(|c| c.case)).collect();
    assert_eq!(
        cases,
        [
            CutCase::Short,
            CutCase::Long,
            CutCase::Short,
            CutCase::Long,
            CutCase::Short
        ]
    );
    let timeout = Duration::from_secs(10);
    for p in &plan {
        let cut = p.cut.expect("every run is a link cut");
        let length = cut.length(timeout);
        match cut.case {
            CutCase::Short => assert!(
                length >= Duration::from_secs(1) && length <= Duration::from_secs(4),
                "{cut:?}"
            ),
            CutCase::Long => assert!(
                length >= Duration::from_secs(12) && length <= Duration::from_secs(15),
                "{cut:?}"
            ),
        }
        assert!(
            p.app.nodes(2).contains(&p.victim) && p.impostor.is_none(),
            "{p:?}"
        );
    }
    // Other faults draw no cut, so their schedules stay what they were.
    assert!(
        schedule(&args(&[ChaosApp::Lasso], 5, 3))
            .iter()
            .all(|p| p.cut.is_none())
    );
}

#[test]
fn a_long_cut_lasts_until_the_job_restarted_and_a_short_one_its_length() {
    let s = Duration::from_secs;
    let short = LinkCut {
        case: CutCase::Short,
        share: 0.2,
    };
    let long = LinkCut {
        case: CutCase::Long,
        share: 1.3,
    };
    assert!(!short.may_restore(s(1), s(2), false, false));
    assert!(short.may_restore(s(2), s(2), false, false));
    assert!(
        !long.may_restore(s(14), s(13), false, false),
        "not restarted yet"
    );
    assert!(
        !long.may_restore(s(5), s(13), true, false),
        "not long enough yet"
    );
    assert!(long.may_restore(s(14), s(13), true, false));
    assert!(long.may_restore(s(1), s(13), false, true), "the job ended");
    assert!(restart_begun(
        "x\nlasso: restart 1 resumes from the newest checkpoint (round 450)\n"
    ));
    assert!(restart_begun("ps-mf: restart 1 starts from the beginning"));
    assert!(!restart_begun("lasso dynamic: 3020 rounds"));
}

#[test]
fn link_cuts_run_on_emulated_hosts_or_are_skipped_saying_why() {
    let hosts = Hosts {
        prefix: "pc1".into(),
        count: 3,
    };
    assert!(matches!(placement(false, None, None), Ok(None)));
    assert!(matches!(
        placement(true, Some(&hosts), Some("netns pc1")),
        Ok(Some(_))
    ));
    assert_eq!(
        placement(true, None, Some("skipped: network namespaces need root")).unwrap_err(),
        "network namespaces need root"
    );
    assert!(matches!(placement(true, Some(&hosts), None), Ok(Some(_))));
    assert_eq!(name_of(&Fault::LinkCut), "link-cut");
    assert_eq!(
        serde_json::to_string(&Fault::LinkCut).unwrap(),
        "\"link-cut\""
    );
}

#[test]
fn p3_faults_reach_shards_and_strads_faults_reach_the_scheduler() {
    assert_eq!(ChaosApp::P3.nodes(2), ["w0", "w1", "s0", "s1"]);
    assert_eq!(ChaosApp::Lda.nodes(2), ["scheduler", "w0", "w1"]);
    assert_eq!(
        ChaosApp::PsMf.nodes(2),
        ["worker-0", "worker-1", "shard-0", "shard-1"]
    );
}

#[test]
fn strads_and_p3_models_must_be_identical_and_ps_figures_within_tolerance() {
    let bytes = |b: &[u8]| Outcome::Bytes(b.to_vec());
    assert_eq!(
        ChaosApp::Lasso.matches(false, &bytes(b"1 2"), &bytes(b"1 2")),
        Some(true)
    );
    assert_eq!(
        ChaosApp::Lasso.matches(false, &bytes(b"1 2"), &bytes(b"1 3")),
        None
    );
    let rmse = |x| Outcome::Figure(x);
    assert_eq!(
        ChaosApp::PsMf.matches(false, &rmse(0.50), &rmse(0.505)),
        Some(false)
    );
    assert_eq!(
        ChaosApp::PsMf.matches(false, &rmse(0.50), &rmse(0.52)),
        None
    );
    assert_eq!(
        ChaosApp::PsMf.matches(false, &rmse(0.50), &bytes(b"x")),
        None
    );
}

/// An elastic job is compared by a figure: the STRADS objective to 1e-6 relative, the PS
/// held-out figures to the elastic tests' absolute tolerances.
#[test]
fn elastic_jobs_are_compared_by_their_objective_or_held_out_figure() {
    let figure = |x| Outcome::Figure(x);
    assert_eq!(
        ChaosApp::Lasso.matches(true, &figure(2.0), &figure(2.0 + 1e-6)),
        Some(false)
    );
    assert_eq!(
        ChaosApp::Lasso.matches(true, &figure(2.0), &figure(2.0 + 3e-6)),
        None
    );
    // 0.04 to 0.08 is 100% relative but within 0.05 absolute.
    assert_eq!(
        ChaosApp::PsLr.matches(true, &figure(0.04), &figure(0.08)),
        Some(false)
    );
    assert_eq!(
        ChaosApp::PsLr.matches(false, &figure(0.04), &figure(0.08)),
        None
    );
    let label = |app: ChaosApp, elastic| app.figure(elastic).unwrap().to_string();
    assert_eq!(
        label(ChaosApp::Lasso, true),
        "final_objective within 1e-6 relative"
    );
    assert_eq!(label(ChaosApp::PsLr, true), "test_log_loss within 0.05");
    assert_eq!(label(ChaosApp::PsMf, false), "test_rmse within 2%");
    assert!(ChaosApp::Lasso.figure(false).is_none());
}

/// A join adds the worker after the others (a standby node the launcher starts at the
/// drawn moment); a leave hits a worker; both run the app's elastic job, with a standby
/// worker so that SIGTERM drains; an app with a fixed membership has no such job.
#[test]
fn joins_add_the_next_worker_and_leaves_hit_a_worker_of_an_elastic_job() {
    let mut a = args(&[ChaosApp::Lasso, ChaosApp::PsLr, ChaosApp::Lda], 12, 3);
    a.faults = vec![Fault::Join, Fault::Leave];
    let plan = schedule(&a);
    assert!(plan.iter().any(|p| p.fault == Fault::Join));
    assert!(plan.iter().any(|p| p.fault == Fault::Leave));
    for p in &plan {
        let (workers, _) = p.app.roles(2);
        match p.fault {
            Fault::Join => assert_eq!(p.victim, p.app.standby_worker(2), "{p:?}"),
            _ => assert!(workers.contains(&p.victim), "{p:?}"),
        }
        assert_eq!(p.reference_key(), format!("{}-elastic", p.app.name()));
        let flags = p.job_flags(&a, true);
        if p.app == ChaosApp::Lda {
            assert!(flags.is_none(), "{p:?}");
            continue;
        }
        let flags = flags.unwrap().join(" ");
        assert!(flags.contains("--standby-workers 1"), "{flags}");
        let reference = p.job_flags(&a, false).unwrap().join(" ");
        assert!(!reference.contains("--standby-workers"), "{reference}");
        let plan = format!("--scale at={}ms add {}", p.delay.as_millis(), p.victim);
        assert_eq!(flags.contains(&plan), p.fault == Fault::Join, "{flags}");
    }
    assert_eq!(ChaosApp::Lasso.standby_worker(2), "w2");
    assert_eq!(ChaosApp::PsMf.standby_worker(2), "worker-2");
}

#[test]
fn the_changes_a_run_records_are_read_from_strads_and_ps_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let write = |v: serde_json::Value| {
        std::fs::write(dir.path().join("metrics.json"), v.to_string()).unwrap();
    };
    write(serde_json::json!({"balance": {"changes": [
        {"round": 3, "joined": ["w2"], "left": []}]}}));
    assert!(membership::change_recorded(dir.path(), Fault::Join));
    assert!(!membership::change_recorded(dir.path(), Fault::Leave));
    write(serde_json::json!({"changes": [{"worker": 0, "change": "left", "clock": 5}]}));
    assert!(membership::change_recorded(dir.path(), Fault::Leave));
    assert!(!membership::change_recorded(dir.path(), Fault::Join));
    std::fs::remove_file(dir.path().join("metrics.json")).unwrap();
    assert!(!membership::change_recorded(dir.path(), Fault::Join));
}
