use super::*;

fn within(actual: f64, expected: f64, rel: f64) -> bool {
    (actual - expected).abs() <= rel * expected
}

#[test]
fn vgg19_and_resnet50_match_known_figures() {
    // (model, layers, parameters, published parameters, forward FLOPs, tolerance):
    // ~19.6 and ~4.1 GMACs.
    let known = [
        (
            ModelProfile::vgg19(),
            19,
            143_667_240,
            143.7e6,
            39.0e9,
            0.02,
        ),
        (
            ModelProfile::resnet50(),
            54,
            25_557_032,
            25.6e6,
            8.2e9,
            0.03,
        ),
    ];
    for (m, layers, params, published, flops, tol) in known {
        assert_eq!(
            (m.layers.len(), m.total_params()),
            (layers, params),
            "{}",
            m.name
        );
        assert!(within(m.total_params() as f64, published, 0.01));
        let fwd = m.total_fwd_flops();
        assert!(within(fwd, flops, tol), "{}: {fwd}", m.name);
        assert!(within(m.total_bwd_flops(), 2.0 * fwd, 1e-9));
    }
    // 86% of VGG-19's parameters in the FC layers (REFERENCE.md section 3)
    let m = ModelProfile::vgg19();
    let fc: u64 = m.layers[16..].iter().map(|l| l.params).sum();
    assert!(within(fc as f64 / m.total_params() as f64, 0.86, 0.01));
}

#[test]
fn sockeye_matches_its_documented_config() {
    let m = ModelProfile::sockeye(&SockeyeConfig::default());
    // hand count: 2 embeddings 16,384,000 each; bi-LSTM 2 x 2,101,248; state init
    // 2,099,200; decoder LSTM 10,493,952; attention 2,098,176; attention hidden
    // 2,098,176; output 32,800,000.
    assert_eq!(m.total_params(), 86_560_000);
    assert!(within(m.total_params() as f64, 86.56e6, 0.01));
    assert_eq!(m.layers.last().map(|l| l.params), Some(32_800_000));
    assert!(m.total_fwd_flops() > 4e9 && m.total_fwd_flops() < 6e9);
}

#[test]
fn builtin_names() {
    assert_eq!(ModelProfile::builtin("VGG-19").unwrap().name, "vgg19");
    assert_eq!(ModelProfile::builtin("resnet_50").unwrap().name, "resnet50");
    assert!(ModelProfile::builtin("sockeye").is_ok());
    assert!(matches!(
        ModelProfile::builtin("bert"),
        Err(P3CoreError::UnknownModel(_))
    ));
}

#[test]
fn scaled_keeps_ratios() {
    let m = ModelProfile::vgg19();
    let s = m.scaled(0.01);
    assert!(within(s.total_params() as f64, 1_436_672.4, 0.001));
    assert!(within(
        s.total_fwd_flops(),
        m.total_fwd_flops() * 0.01,
        1e-9
    ));
    assert_eq!(s.layers.len(), m.layers.len());
    let tiny = m.scaled(1e-9);
    assert!(tiny.layers.iter().all(|l| l.params >= 1));
}

#[test]
fn toml_and_json_files_load_alike() {
    let dir = tempfile::tempdir().unwrap();
    let toml = "name = \"m\"\n[[layer]]\nname = \"a\"\nparams = 3\nfwd_ms = 2.0\nbwd_ms = 5.0\n\
                [[layer]]\nname = \"b\"\nparams = 4\nfwd_flops = 7.0\n";
    let json = r#"{"name": "m", "layer": [
        {"name": "a", "params": 3, "fwd_ms": 2.0, "bwd_ms": 5.0},
        {"name": "b", "params": 4, "fwd_flops": 7.0}]}"#;
    let mut loaded = Vec::new();
    for (ext, text) in [("toml", toml), ("JSON", json)] {
        let p = dir.path().join(format!("m.{ext}"));
        std::fs::write(&p, text).unwrap();
        loaded.push(ModelProfile::load(&p).unwrap());
    }
    assert_eq!(loaded[0], loaded[1]);
    let m = &loaded[0];
    assert_eq!((m.name.as_str(), m.param_counts()), ("m", vec![3, 4]));
    let t = m.layers[0].measured.unwrap();
    assert!((t.fwd_s - 0.002).abs() < 1e-12 && (t.bwd_s - 0.005).abs() < 1e-12);
    assert_eq!((m.layers[1].fwd_flops, m.layers[1].bwd_flops), (7.0, 14.0));
}

#[test]
fn documented_example_parses() {
    let text = r#"
            name = "my-model"
            [[layer]]
            name = "conv1"
            params = 1792
            fwd_flops = 1.73e8
            [[layer]]
            name = "fc"
            params = 4097000
            fwd_ms = 0.8
            bwd_ms = 1.6
        "#;
    let m = ModelProfile::from_toml_str(text, "<doc>").unwrap();
    assert_eq!(m.layers[0].bwd_flops, 3.46e8);
    assert_eq!(m.layers[1].fwd_seconds(1e12, 32), 0.0008);
    assert_eq!(m.layers[1].bwd_seconds(1e12, 32), 0.0016);
    assert_eq!(m.layers[0].fwd_seconds(1e12, 10), 1.73e-3);
}

#[test]
fn clear_errors() {
    let err = |t: &str| {
        ModelProfile::from_toml_str(t, "bad.toml")
            .unwrap_err()
            .to_string()
    };
    let e = err("name = \"x\"\n");
    assert!(e.contains("bad.toml") && e.contains("no [[layer]]"), "{e}");
    let e = err("name = \"x\"\n[[layer]]\nname = \"a\"\nparams = 3\n");
    assert!(
        e.contains("layer 0") && e.contains("missing compute cost"),
        "{e}"
    );
    let e =
        err("name = \"x\"\n[[layer]]\nname = \"a\"\nparams = 3\nfwd_flops = 1.0\nfwd_ms = 2.0\n");
    assert!(e.contains("not both"), "{e}");
    let e = err("name = \"x\"\n[[layer]]\nname = \"a\"\nparams = 3\nfwd_flops = -1.0\n");
    assert!(e.contains("fwd_flops") && e.contains(">= 0"), "{e}");
    let e = err("name = \"x\"\n[[layer]]\nname = \"a\"\nparams = 3\nfwd_flop = 1.0\n");
    assert!(e.contains("unknown field"), "{e}");
    let e = err("name = \"x\"\n[[layer]]\nname = \"a\"\nparams = -3\nfwd_flops = 1.0\n");
    assert!(e.contains("bad.toml"), "{e}");
    let e = ModelProfile::from_json_str("{\"name\": 1}", "p.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("p.json") && e.contains("JSON"), "{e}");
    assert!(matches!(
        ModelProfile::load("/nonexistent/x.yaml"),
        Err(P3CoreError::UnknownFormat { .. })
    ));
    assert!(matches!(
        ModelProfile::load("/nonexistent/x.toml"),
        Err(P3CoreError::Io { .. })
    ));
}
