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
