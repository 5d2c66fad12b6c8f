use super::linear::sigmoid;
use super::*;

fn linear(task: LinearTask) -> SavedModel {
    SavedModel::new(
        "lasso",
        &serde_json::json!({"lambda": 0.5}),
        ModelParams::Linear(LinearModel {
            task,
            lambda: 0.5,
            intercept: 1.0,
            coefficients: vec![2.0, 0.0, -1.0],
        }),
    )
}

fn row(pairs: &[(u32, f32)]) -> SparseRow {
    SparseRow {
        indices: pairs.iter().map(|p| p.0).collect(),
        values: pairs.iter().map(|p| p.1).collect(),
    }
}

#[test]
fn a_model_round_trips_and_is_refused_for_another_app_version_or_truncation() {
    let m = linear(LinearTask::Regression);
    let bytes = m.to_json().unwrap();
    let p = Path::new("m.json");
    assert_eq!(SavedModel::decode(&bytes, p, "lasso").unwrap(), m);
    let e = SavedModel::decode(&bytes, p, "ps-mf")
        .unwrap_err()
        .to_string();
    assert!(e.contains("m.json") && e.contains("`lasso`"), "{e}");
    let e = SavedModel::decode(&bytes[..bytes.len() / 2], p, "lasso")
        .unwrap_err()
        .to_string();
    assert!(e.contains("m.json is truncated"), "{e}");
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["version"] = 99.into();
    let e = SavedModel::decode(&serde_json::to_vec(&v).unwrap(), p, "lasso")
        .unwrap_err()
        .to_string();
    assert!(e.contains("version 99 is not supported"), "{e}");
    v["version"] = 1.into();
    v["format"] = "other".into();
    let e = SavedModel::decode(&serde_json::to_vec(&v).unwrap(), p, "lasso")
        .unwrap_err()
        .to_string();
    assert!(e.contains("format \"other\""), "{e}");
}

#[test]
fn linear_figures_follow_their_definitions() {
    let ModelParams::Linear(m) = linear(LinearTask::Regression).params else {
        unreachable!()
    };
    // Scores: 1 + 2*1 = 3, 1 - 1*2 = -1.
    let data = SparseDataset {
        n_features: 3,
        labels: vec![3.0, 1.0],
        rows: vec![row(&[(0, 1.0)]), row(&[(2, 2.0)])],
    };
    let f: HashMap<_, _> = m.evaluate(&data).into_iter().collect();
    assert!((f["mse"] - 2.0).abs() < 1e-12); // (0 + 4) / 2
    assert!((f["r2"] - (1.0 - 4.0 / 2.0)).abs() < 1e-12); // sst = 1 + 1
    assert!((f["objective"] - (0.5 * 4.0 + 0.5 * 3.0)).abs() < 1e-12);
    let ModelParams::Linear(c) = linear(LinearTask::BinaryClassification).params else {
        unreachable!()
    };
    let data = SparseDataset {
        n_features: 3,
        labels: vec![1.0, -1.0],
        rows: vec![row(&[(0, 1.0)]), row(&[(2, 2.0)])],
    };
    let f: HashMap<_, _> = c.evaluate(&data).into_iter().collect();
    assert_eq!(f["accuracy"], 1.0);
    let expected = -(sigmoid(3.0).ln() + (1.0 - sigmoid(-1.0)).ln()) / 2.0;
    assert!((f["log_loss"] - expected).abs() < 1e-12);
}

#[test]
fn factors_predict_with_biases_and_recommend_unrated_items() {
    let m = FactorModel {
        global_mean: 3.0,
        user_ids: vec!["u1".into(), "u2".into()],
        item_ids: vec!["a".into(), "b".into(), "c".into()],
        user_factors: vec![vec![1.0], vec![-1.0]],
        item_factors: vec![vec![1.0], vec![0.5], vec![-1.0]],
        user_bias: vec![0.5, 0.0],
        item_bias: vec![0.0, 0.0, 0.25],
    };
    let idx = m.index();
    assert_eq!(m.predict(&idx, "u1", "a"), 4.5);
    // Unknown item: mean + user bias only.
    assert_eq!(m.predict(&idx, "u1", "zz"), 3.5);
    let rated = ["a".to_string()].into_iter().collect();
    let top = m.recommend("u1", 2, &rated).unwrap();
    assert_eq!(top[0].0, "b");
    assert_eq!(top.len(), 2);
    assert!(m.recommend("nobody", 1, &rated).is_err());
    let f: HashMap<_, _> = m
        .evaluate(
            &[
                ("u1".into(), "a".into(), Some(4.5)),
                ("u2".into(), "c".into(), Some(4.25)),
            ],
            Path::new("t"),
        )
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(f["rmse"], 0.0);
}

#[test]
fn fold_in_finds_the_topic_a_document_is_written_in() {
    // Topic 0 uses words 0-1, topic 1 words 2-3.
    let m = TopicModel {
        alpha: 0.1,
        beta: 0.01,
        topic_word: vec![vec![0.49, 0.49, 0.01, 0.01], vec![0.01, 0.01, 0.49, 0.49]],
        vocab: None,
    };
    let mut rng = StdRng::seed_from_u64(1);
    let theta = m.fold_in(&[2, 3, 3, 2, 2, 3, 2, 3], 50, &mut rng);
    assert!(theta[1] > 0.9, "{theta:?}");
    assert!((theta.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    let corpus = Corpus {
        n_docs: 2,
        vocab_size: 4,
        docs: vec![vec![0, 1, 0, 1, 0, 1], vec![2, 3, 2, 3]],
        vocab: None,
    };
    let f: HashMap<_, _> = m.evaluate(&corpus, 30, 7).into_iter().collect();
    assert!(f["perplexity"] < 2.5, "{f:?}");
    assert_eq!(f["uniform_perplexity"], 4.0);
}

#[test]
fn invariants_name_the_field_and_unseen_data_is_counted() {
    let topics = |alpha: f64, first: f64| TopicModel {
        alpha,
        beta: 0.1,
        topic_word: vec![vec![first, 1.0 - first], vec![0.5, 0.5]],
        vocab: None,
    };
    let check = |m: TopicModel| {
        SavedModel::new("lda", &(), ModelParams::Topics(m))
            .check()
            .err()
    };
    assert_eq!(check(topics(0.5, 0.25)), None);
    assert!(check(topics(-5.0, 0.25)).unwrap().starts_with("alpha = -5"));
    assert!(
        check(topics(0.5, -0.5))
            .unwrap()
            .starts_with("topic_word[0][0] = -0.5")
    );
    let mut wide = topics(0.5, 0.25);
    wide.topic_word[1][1] = 0.25;
    assert!(
        check(wide)
            .unwrap()
            .starts_with("topic_word[1] sums to 0.75")
    );

    let mut m = linear(LinearTask::Regression);
    if let ModelParams::Linear(l) = &mut m.params {
        l.coefficients[2] = f32::INFINITY;
    }
    assert!(m.check().unwrap_err().starts_with("coefficients[2] = inf"));

    let (corpus, unseen) = topics(0.5, 0.25).known_words(Corpus {
        n_docs: 2,
        vocab_size: 4,
        docs: vec![vec![0, 3, 1, 3], vec![1]],
        vocab: None,
    });
    assert_eq!(corpus.docs, vec![vec![0, 1], vec![1]]);
    assert_eq!((unseen.entries, unseen.records), (2, 1));
    let data = SparseDataset {
        rows: vec![row(&[(0, 1.0), (5, 1.0)]), row(&[(1, 1.0)])],
        labels: vec![1.0, 0.0],
        ..SparseDataset::default()
    };
    let unseen = unseen_features(&data, 3);
    assert_eq!((unseen.entries, unseen.records), (1, 1));
    assert!(
        unseen
            .note(Path::new("t.libsvm"))
            .unwrap()
            .starts_with("t.libsvm: 1 feature")
    );
    assert_eq!(unseen_features(&data, 6).note(Path::new("t")), None);
}
