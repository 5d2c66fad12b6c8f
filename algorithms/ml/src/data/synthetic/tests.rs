use super::*;

#[test]
fn correlated_lasso_has_requested_structure() {
    let params = CorrelatedLassoParams {
        n_samples: 400,
        n_features: 20,
        group_size: 5,
        correlation: 0.8,
        n_nonzero: 4,
        noise_std: 0.01,
        seed: 1,
    };
    let p = correlated_lasso(&params).unwrap();
    assert_eq!(p.x.dim(), (400, 20));
    assert_eq!(p.b_true.iter().filter(|&&b| b != 0.0).count(), 4);
    let cols = p.columns();
    for j in 0..20 {
        assert!((cols.column_dot(j, j) - 1.0).abs() < 1e-4);
    }
    // Within-group correlation near 0.8 (centered-ish data), across groups near 0.
    assert!((cols.column_dot(0, 1) - 0.8).abs() < 0.15);
    assert!(cols.column_dot(0, 5).abs() < 0.2);
    assert_eq!(correlated_lasso(&params).unwrap(), p);
    assert!(
        correlated_lasso(&CorrelatedLassoParams {
            correlation: 1.0,
            ..params
        })
        .is_err()
    );
}

#[test]
fn sparse_design_is_correlated_in_groups_and_row_blocks_are_its_rows() {
    let params = SparseLassoParams {
        n_samples: 500,
        n_features: 60,
        group_size: 6,
        nnz_per_column: 40,
        correlation: 0.8,
        n_nonzero: 5,
        noise_std: 0.01,
        seed: 3,
    };
    let whole = sparse_correlated_lasso(&params, None).unwrap();
    assert_eq!(whole.x.values.len(), 60 * 40);
    assert_eq!(whole.b_true.iter().filter(|b| **b != 0.0).count(), 5);
    for j in 0..60 {
        assert!((whole.x.column_dot(j, j) - 1.0).abs() < 1e-5);
    }
    let within = (whole.x.column_dot(0, 1) + whole.x.column_dot(6, 7)) / 2.0;
    assert!((within - 0.8).abs() < 0.2, "{within}");
    assert!(whole.x.column_dot(0, 6).abs() < 0.3);
    // A row block is exactly those rows of the whole design.
    let block = sparse_correlated_lasso(&params, Some(100..350)).unwrap();
    assert_eq!(block.x, whole.x.row_block(100..350));
    assert_eq!(block.y, whole.y[100..350].to_vec());
    assert_eq!(sparse_correlated_lasso(&params, None).unwrap(), whole);
    // Column by column (in any order), the generator gives the whole design's columns
    // and labels.
    let mut columns = SparseLassoColumns::new(&params).unwrap();
    assert_eq!(columns.labels(), whole.y);
    assert_eq!(columns.b_true, whole.b_true);
    for j in [59, 0, 1, 13, 12, 58, 30] {
        let (rows, values) = columns.column(j);
        assert_eq!((rows, values), whole.x.column(j), "column {j}");
    }
    let bad = SparseLassoParams {
        nnz_per_column: 501,
        ..params.clone()
    };
    assert!(sparse_correlated_lasso(&bad, None).is_err());
    assert!(sparse_correlated_lasso(&params, Some(400..501)).is_err());
}

#[test]
fn low_rank_ratings_match_factors() {
    let params = LowRankParams {
        n_users: 30,
        n_items: 20,
        rank: 3,
        observed_fraction: 0.5,
        noise_std: 0.0,
        seed: 2,
    };
    let p = low_rank_ratings(&params).unwrap();
    let n = p.ratings.entries.len();
    assert!(n > 200 && n < 400, "{n}");
    for &(u, i, r) in &p.ratings.entries {
        let expected = p
            .user_factors
            .row(u as usize)
            .dot(&p.item_factors.row(i as usize));
        assert!((expected - r).abs() < 1e-5);
    }
    assert_eq!(low_rank_ratings(&params).unwrap(), p);
    let mut streamed = Vec::new();
    let shape = stream_low_rank_ratings(&params, |u, i, r| streamed.push((u, i, r))).unwrap();
    assert_eq!(streamed, p.ratings.entries);
    assert!(shape.ratings.entries.is_empty());
    assert_eq!(shape.user_factors, p.user_factors);
}

#[test]
fn lda_corpus_has_shape_and_distributions() {
    let params = LdaCorpusParams {
        n_topics: 4,
        vocab_size: 50,
        n_docs: 10,
        doc_length: 30,
        alpha: 0.1,
        beta: 0.1,
        seed: 3,
    };
    let p = lda_corpus(&params).unwrap();
    assert_eq!(p.corpus.docs.len(), 10);
    assert!(
        p.corpus
            .docs
            .iter()
            .all(|d| d.len() == 30 && d.iter().all(|&w| w < 50))
    );
    for row in p.topic_word.rows() {
        assert!((row.sum() - 1.0).abs() < 1e-9);
    }
    assert_eq!(lda_corpus(&params).unwrap(), p);
}

#[test]
fn classification_is_separable_by_true_weights() {
    let params = ClassificationParams {
        n_samples: 50,
        n_features: 8,
        n_classes: 3,
        margin: 0.1,
        seed: 4,
    };
    let p = separable_classification(&params).unwrap();
    for (row, &label) in p.dataset.rows.iter().zip(&p.dataset.labels) {
        let scores: Vec<f64> = p
            .true_weights
            .rows()
            .into_iter()
            .map(|w| row.dot(w.as_slice().unwrap()))
            .collect();
        let best = (0..3)
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap();
        assert_eq!(best as f32, label);
    }
}

#[test]
fn power_law_classification_is_sparse_skewed_and_separable() {
    let params = ClassificationParams {
        n_samples: 400,
        n_features: 200,
        n_classes: 2,
        margin: 0.1,
        seed: 5,
    };
    let p = power_law_classification(&params, 5, 1.1).unwrap();
    let mut count = vec![0usize; 200];
    for (row, &label) in p.dataset.rows.iter().zip(&p.dataset.labels) {
        assert_eq!(row.indices.len(), 5);
        assert!(row.indices.windows(2).all(|w| w[0] < w[1]));
        row.indices.iter().for_each(|&j| count[j as usize] += 1);
        let s: Vec<f64> = (p.true_weights.rows().into_iter())
            .map(|w| row.dot(w.as_slice().unwrap()))
            .collect();
        assert_eq!(if s[1] > s[0] { 1.0 } else { 0.0 }, label);
    }
    // The head feature is far more frequent than the tail's.
    let tail: usize = count[100..].iter().sum();
    assert!(count[0] > 5 * tail / 100, "{} vs {tail}", count[0]);
    assert!(power_law_classification(&params, 150, 1.0).is_err());
    assert_eq!(power_law_classification(&params, 5, 1.1).unwrap(), p);
}
