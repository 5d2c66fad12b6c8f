use super::*;

#[test]
fn l2_term_is_weighted_by_rating_counts() {
    // Ratings the factors predict exactly: the gradient is the L2 term alone. User 0
    // has three ratings, user 1 one; item 0 has both users.
    let (p, q) = (vec![0.5f32, -1.0], vec![2.0f32, 1.0]);
    let exact = 3.0 + 0.5 * 2.0 - 1.0;
    let batch = [(0, 0, exact), (0, 1, exact), (0, 2, exact), (1, 0, exact)];
    let users: HashMap<u32, Vec<f32>> = [(0, p.clone()), (1, p.clone())].into();
    let items: HashMap<u32, Vec<f32>> = (0..3).map(|i| (i, q.clone())).collect();
    let (gu, gi) = batch_gradient(&batch, &users, &items, 3.0, 0.1, None);
    for (grad, count, v) in [
        (&gu[&0], 3.0, &p),
        (&gu[&1], 1.0, &p),
        (&gi[&0], 2.0, &q),
        (&gi[&1], 1.0, &q),
    ] {
        for (g, x) in grad.iter().zip(v) {
            assert!(
                (g - 0.1 * count * x).abs() < 1e-6,
                "{g} vs {}",
                0.1 * count * x
            );
        }
    }
}

#[test]
fn init_is_deterministic_and_bounded() {
    for r in 0..100 {
        for c in 0..8 {
            let a = init_value(ITEMS, r, c, 0.3);
            assert_eq!(a, init_value(ITEMS, r, c, 0.3));
            assert!(a.abs() <= 0.3);
        }
    }
    assert_ne!(init_value(ITEMS, 1, 0, 1.0), init_value(USERS, 1, 0, 1.0));
}

#[test]
fn serial_sgd_fits_low_rank_data() {
    let cfg = PsMfSettings {
        rank: 8,
        init_scale: 0.3,
        ..PsMfSettings::default()
    };
    let data = PsMfData::load(&cfg).unwrap();
    let mut users: HashMap<u32, Vec<f32>> = (0..data.train.n_users as u32)
        .map(|u| {
            (
                u,
                factor_row(USERS, u64::from(u), None, cfg.rank, false, cfg.init_scale),
            )
        })
        .collect();
    let mut items: HashMap<u32, Vec<f32>> = (0..data.train.n_items as u32)
        .map(|i| {
            (
                i,
                factor_row(ITEMS, u64::from(i), None, cfg.rank, false, cfg.init_scale),
            )
        })
        .collect();
    let eval = |u: &HashMap<u32, Vec<f32>>, i: &HashMap<u32, Vec<f32>>| {
        rmse(
            &data.test.entries,
            |x| u[&x].clone(),
            |x| i[&x].clone(),
            data.mean,
        )
    };
    let before = eval(&users, &items);
    for _ in 0..30 {
        sgd_pass(
            &data.train.entries,
            &mut users,
            &mut items,
            data.mean,
            0.05,
            0.02,
            None,
        );
    }
    let after = eval(&users, &items);
    assert!(after < 0.6 * before, "rmse {before} -> {after}");
}

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    cfg: PsMfSettings,
}

#[test]
fn an_empty_section_is_the_defaults() {
    let from_toml: PsMfSettings = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(from_toml, PsMfSettings::default());
    assert_eq!(PsMfSettings::default().clocks(), 80);
}

#[test]
fn a_bad_consistency_or_field_is_refused_when_read() {
    let bad: Result<PsMfSettings, _> =
        serde_json::from_value(serde_json::json!({"consistency": "eventual"}));
    let e = bad.unwrap_err().to_string();
    assert!(e.contains("bsp, ssp, essp or async"), "{e}");
    let typo: Result<PsMfSettings, _> = serde_json::from_value(serde_json::json!({"rnak": 3}));
    let e = typo.unwrap_err().to_string();
    assert!(
        e.contains("rnak") && e.contains("`rank`") && e.contains("`clock_ms`"),
        "{e}"
    );
    // The groups' keys are flat, and a value of the wrong type is named by its key.
    let flat: PsMfSettings =
        serde_json::from_value(serde_json::json!({"clock_ms": 5.0, "managed": "fifo"})).unwrap();
    assert_eq!(flat.stragglers.clock_ms, 5.0);
    assert_eq!(flat.comm.managed, Some(SendPolicy::Fifo));
    let wrong: Result<PsMfSettings, _> =
        serde_json::from_value(serde_json::json!({"clock_ms": "x"}));
    assert!(wrong.unwrap_err().to_string().contains("clock_ms"));
    let upper: PsMfSettings =
        serde_json::from_value(serde_json::json!({"consistency": "ESSP"})).unwrap();
    assert_eq!(upper.consistency, ConsistencyModel::Essp);
    use clap::Parser;
    assert!(Flags::try_parse_from(["train", "--consistency", "x"]).is_err());
    let f = Flags::try_parse_from(["train", "--consistency", "BSP"]).unwrap();
    assert_eq!(f.cfg.consistency, ConsistencyModel::Bsp);
}

#[test]
fn factor_scale_recovers_the_generators_factor_size() {
    // The synthetic generator draws rank-5 factors with coordinates of size 5^(-1/4): the
    // scale read back from the ratings alone (no noise) is that size, within sampling error.
    let cfg = PsMfSettings {
        synthetic_users: 300,
        synthetic_items: 200,
        synthetic_rank: 5,
        synthetic_observed: 0.2,
        synthetic_noise: 0.0,
        ..PsMfSettings::default()
    };
    let data = PsMfData::load(&cfg).unwrap();
    let want = 5f64.powf(-0.25);
    let got = data.factor_scale(5);
    assert!((got / want - 1.0).abs() < 0.15, "{got} vs {want}");
    // A larger model rank spreads the same ratings over more coordinates.
    assert!(data.factor_scale(16) < got);
}

#[test]
fn an_adaptive_rules_alpha_may_exceed_one() {
    let sgd = PsMfSettings {
        learning_rate: 3.0,
        ..PsMfSettings::default()
    };
    assert!(sgd.validate().is_err(), "local SGD keeps its (0, 1] range");
    for rule in [ServerRule::Adagrad, ServerRule::AdaRevision] {
        let cfg = PsMfSettings {
            rule: Some(rule),
            ..sgd.clone()
        };
        assert!(cfg.validate().is_ok(), "{rule:?}");
    }
    let sgd_rule = PsMfSettings {
        rule: Some(ServerRule::Sgd),
        ..sgd
    };
    assert!(sgd_rule.validate().is_err());
}
