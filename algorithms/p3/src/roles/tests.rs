use super::*;

#[test]
fn report_file_measures_iterations_and_round_trips() {
    let f = WorkerReportFile {
        worker: 0,
        mode: Mode::P3,
        marks_s: vec![0.0, 1.0, 1.5, 2.0, 2.5],
        bytes_pushed: 10,
        stats: vec![],
        test: None,
        start: 0,
        changes: vec![RosterChange {
            iteration: 3,
            joined: vec![2],
            left: vec![],
        }],
        final_workers: vec![0, 2],
        shard_changes: vec![RosterChange {
            iteration: 5,
            joined: vec![],
            left: vec![1],
        }],
        final_shards: vec![0],
        params_digest: params_digest(&[vec![1.0, 2.0]]),
    };
    assert_eq!(f.secs_per_iter(1), Some(0.5));
    assert_eq!(f.secs_per_iter(4), None);
    let json = serde_json::to_string(&f).unwrap();
    assert!(json.contains("\"mode\":\"p3\""), "{json}");
    let dir = tempfile::tempdir().unwrap();
    let path = f.write(dir.path()).unwrap();
    assert_eq!(path, WorkerReportFile::path(dir.path(), 0));
    assert_eq!(WorkerReportFile::read(dir.path(), 0).unwrap(), f);
    assert!(matches!(
        WorkerReportFile::read(dir.path(), 1),
        Err(P3Error::Io { .. })
    ));
}

fn one_worker() -> Settings {
    petrel_actors::Topology::builder("t")
        .node("w0", &[WORKER_ROLE])
        .build()
        .unwrap()
}

#[test]
fn config_rejects_bad_values_when_read() {
    let settings = one_worker();
    let ok = P3Settings::default().job(&settings).unwrap();
    assert_eq!(ok.0.n_workers, 2);
    let bad = P3Settings {
        scale: 0.0,
        ..P3Settings::default()
    };
    let err = bad.job(&settings).unwrap_err().to_string();
    assert!(err.contains("scale"), "{err}");
    // A bad mode never gets this far: the section does not deserialize.
    let err = serde_json::from_str::<P3Settings>(r#"{"mode": "bogus"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("valid values: sequential, fifo, p3"), "{err}");
}

/// A build without candle refuses a real network with this error (the featureless branch
/// below runs under `cargo test -p petrel-p3 --no-default-features --lib roles::`; CI
/// builds that configuration with clippy).
#[test]
fn the_refusal_without_candle_names_the_network_and_the_feature() {
    let chain = petrel_actors::error_chain(&P3Error::real_model("mlp", P3Error::NoCandle));
    assert!(
        chain.contains("mlp") && chain.contains("`candle` feature"),
        "{chain}"
    );
}

#[test]
fn a_real_network_needs_the_candle_feature_and_an_emulated_profile_does_not() {
    let settings = one_worker();
    let real = P3Settings {
        net: "mlp".into(),
        train_data: "synthetic:64".into(),
        ..P3Settings::default()
    };
    let emulated = P3Settings::default();
    assert!(emulated.check_net().is_ok());
    assert!(emulated.job(&settings).is_ok());
    if cfg!(feature = "candle") {
        assert!(real.check_net().is_ok());
        assert!(real.job(&settings).is_ok());
    } else {
        for err in [
            real.check_net().unwrap_err(),
            real.job(&settings).unwrap_err(),
        ] {
            let chain = petrel_actors::error_chain(&err);
            assert!(
                chain.contains("mlp") && chain.contains("`candle` feature"),
                "{chain}"
            );
        }
    }
}

#[test]
fn the_defaults_pass() {
    P3Settings::default().validate().unwrap();
}

#[test]
fn values_out_of_range_are_refused_naming_the_key() {
    let cases: Vec<(P3Settings, &str)> = vec![
        (
            P3Settings {
                lr: 100.0,
                ..P3Settings::default()
            },
            "lr = 100: must be a finite number in (0, 10]",
        ),
        (
            P3Settings {
                lr: f32::NAN,
                ..P3Settings::default()
            },
            "lr = NaN",
        ),
        (
            P3Settings {
                lr: 1e30,
                ..P3Settings::default()
            },
            "lr = 1000000000000000000000000000000",
        ),
        (
            P3Settings {
                lr: 0.0,
                ..P3Settings::default()
            },
            "lr = 0",
        ),
        (
            P3Settings {
                momentum: 1.0,
                ..P3Settings::default()
            },
            "momentum = 1: must be a finite number in [0, 1)",
        ),
        (
            P3Settings {
                workers: 0,
                ..P3Settings::default()
            },
            "workers = 0: must be >= 1",
        ),
        (
            P3Settings {
                shards: 0,
                ..P3Settings::default()
            },
            "shards = 0: must be >= 1",
        ),
        (
            P3Settings {
                workers: 100_000,
                ..P3Settings::default()
            },
            "workers = 100000: must be <= 1024",
        ),
    ];
    for (cfg, want) in cases {
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.starts_with(want), "{e} does not start with {want}");
    }
}

#[test]
fn params_digest_tells_models_apart_bit_for_bit() {
    let a = params_digest(&[vec![1.0, 2.0], vec![3.0]]);
    assert_eq!(a, params_digest(&[vec![1.0, 2.0], vec![3.0]]));
    assert_ne!(a, params_digest(&[vec![1.0, 2.0], vec![3.0f32.next_up()]]));
    assert_eq!(a.len(), 16);
}

/// Workers and shards join and leave; a dead member counted as a leave, checkpoints with
/// changes and a plan removing the coordinator's shard are refused, each with its reason.
#[test]
fn membership_settings_p3_cannot_take_are_refused() {
    let settings = |standby: &str, scale: Option<&str>, leave: bool| {
        let mut topo = petrel_actors::Topology::builder("t")
            .node("w0", &[WORKER_ROLE])
            .node("w1", &[WORKER_ROLE])
            .node("s0", &[SHARD_ROLE]);
        if !standby.is_empty() {
            let role = if standby.starts_with('w') {
                WORKER_ROLE
            } else {
                SHARD_ROLE
            };
            topo = topo.standby_node(standby, &[role]);
        }
        topo.with(|s| {
            s.cluster.scale = scale.map(String::from);
            if leave {
                s.cluster.on_node_death = petrel_actors::OnNodeDeath::Leave;
            }
        })
        .build()
        .unwrap()
    };
    let cfg = P3Settings::default();
    let reason =
        |s: &Settings, cfg: &P3Settings| check_membership(s, cfg).err().map(|e| e.to_string());
    assert_eq!(reason(&settings("", None, false), &cfg), None);
    let join_leave = settings("w2", Some("at=1s add w2; at=2s remove w1"), false);
    assert_eq!(reason(&join_leave, &cfg), None);
    let dead = reason(&settings("w2", None, true), &cfg).unwrap();
    assert!(dead.contains("on_node_death"), "{dead}");
    let saving = P3Settings {
        checkpoint_dir: "ck".into(),
        checkpoint_every: 2,
        ..P3Settings::default()
    };
    let ck = reason(&join_leave, &saving).unwrap();
    assert!(ck.contains("checkpoint_every = 0"), "{ck}");
    let shards = settings("s1", Some("at=1s add s1; at=2s remove s1"), false);
    assert_eq!(reason(&shards, &cfg), None);
    let removed = reason(&settings("", Some("at=1s remove s0"), false), &cfg).unwrap();
    assert!(removed.contains("coordinator"), "{removed}");
}
