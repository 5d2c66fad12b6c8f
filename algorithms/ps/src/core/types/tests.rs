use super::*;

#[test]
fn consistency_names_parse_in_any_case_and_unknown_ones_are_refused() {
    let parse = |s: &str| s.parse::<ConsistencyModel>();
    assert_eq!(parse("BSP").ok(), Some(ConsistencyModel::Bsp));
    assert_eq!(
        Consistency::new(parse("ssp").unwrap(), 3),
        Consistency::Ssp { staleness: 3 }
    );
    assert_eq!(
        Consistency::new(parse("Essp").unwrap(), 1),
        Consistency::Essp { staleness: 1 }
    );
    assert_eq!(parse("async").ok(), Some(ConsistencyModel::Async));
    let err = parse("eventual").unwrap_err().to_string();
    assert!(err.contains("\"eventual\"") && err.contains("bsp, ssp, essp or async"));
    let from_json: Result<ConsistencyModel, _> = serde_json::from_str("\"Ssp\"");
    assert_eq!(from_json.unwrap(), ConsistencyModel::Ssp);
    let bad = serde_json::from_str::<ConsistencyModel>("\"x\"").unwrap_err();
    assert!(
        bad.to_string().contains("expected bsp, ssp, essp or async"),
        "{bad}"
    );
    assert_eq!(
        serde_json::to_string(&ConsistencyModel::Essp).unwrap(),
        "\"essp\""
    );
}

#[test]
fn dense_add_and_inc() {
    let mut r = Row::Dense(vec![1.0, 2.0, 3.0]);
    r.add(&Row::Dense(vec![1.0, 1.0, 1.0]));
    r.inc(2, 5.0);
    r.inc(9, 5.0); // out of range: ignored
    r.add(&Row::Sparse(vec![(0, -2.0)]));
    assert_eq!(r, Row::Dense(vec![0.0, 3.0, 9.0]));
    assert_eq!(r.get(2), 9.0);
    assert_eq!(r.get(7), 0.0);
}

#[test]
fn sparse_merge_and_zero_dropping() {
    let mut r = Row::Sparse(vec![(1, 2.0), (5, 2.0)]);
    r.add(&Row::Sparse(vec![(0, 1.0), (1, -2.0), (9, 3.0)]));
    assert_eq!(r, Row::Sparse(vec![(0, 1.0), (5, 2.0), (9, 3.0)]));
    r.inc(3, 1.0);
    r.inc(0, -1.0);
    assert_eq!(r, Row::Sparse(vec![(3, 1.0), (5, 2.0), (9, 3.0)]));
    r.add_scaled(&Row::Dense(vec![0.0, 1.0, 0.0, 1.0]), 2.0);
    assert_eq!(r, Row::Sparse(vec![(1, 2.0), (3, 3.0), (5, 2.0), (9, 3.0)]));
}

#[test]
fn apply_with_inserts_into_sparse() {
    let mut r = Row::Sparse(vec![(2, 1.0)]);
    r.apply_with(&Row::Sparse(vec![(1, 1.0), (2, 1.0)]), |x, g| *x -= 0.5 * g);
    assert_eq!(r, Row::Sparse(vec![(1, -0.5), (2, 0.5)]));
}

#[test]
fn dense_serializes_as_bin() {
    let r = Row::Dense((0..1000).map(|i| i as f32 * 0.5).collect());
    let b = rmp_serde::to_vec(&r).unwrap();
    // 4000 payload bytes + a few bytes of framing; a float array would be ~5000.
    assert!(b.len() < 4016, "encoded {} bytes", b.len());
    assert_eq!(Row::decode(&b).unwrap(), r);
    let s = Row::Sparse(vec![(1, 1.5), (70000, -2.0)]);
    assert_eq!(Row::decode(&rmp_serde::to_vec(&s).unwrap()).unwrap(), s);
}

/// The encoding from borrowed bytes is byte for byte the one written before (an owned
/// wire enum built by copying the row), so checkpoints and peers stay compatible.
#[test]
fn wire_bytes_unchanged_by_the_borrowed_encoding() {
    #[derive(Serialize)]
    enum OldWire {
        D(#[serde(with = "serde_bytes")] Vec<u8>),
        S {
            #[serde(with = "serde_bytes")]
            cols: Vec<u8>,
            #[serde(with = "serde_bytes")]
            vals: Vec<u8>,
        },
    }
    let dense = Row::Dense(vec![1.0, -2.5, 3.25, 0.0]);
    let le = |xs: &[f32]| -> Vec<u8> { xs.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let old = OldWire::D(le(&[1.0, -2.5, 3.25, 0.0]));
    assert_eq!(
        rmp_serde::to_vec(&dense).unwrap(),
        rmp_serde::to_vec(&old).unwrap()
    );
    let mut a = Vec::new();
    petrel_messages::encode_body(&dense, &mut a).unwrap();
    let mut b = Vec::new();
    petrel_messages::encode_body(&old, &mut b).unwrap();
    assert_eq!(a, b);
    let sparse = Row::Sparse(vec![(1, 1.5), (7, -1.0)]);
    let old = OldWire::S {
        cols: [1u32, 7].iter().flat_map(|c| c.to_le_bytes()).collect(),
        vals: le(&[1.5, -1.0]),
    };
    assert_eq!(
        rmp_serde::to_vec(&sparse).unwrap(),
        rmp_serde::to_vec(&old).unwrap()
    );
    // Decoding from a reader (owned bytes, not borrowed) gives the same rows.
    let bytes = rmp_serde::to_vec(&dense).unwrap();
    let back: Row = rmp_serde::from_read(std::io::Cursor::new(bytes)).unwrap();
    assert_eq!(back, dense);
}

#[test]
fn malformed_rows_rejected() {
    let bad = rmp_serde::to_vec(&RowWire::D(Cow::Owned(vec![1, 2, 3]))).unwrap();
    assert!(matches!(Row::decode(&bad), Err(PsCoreError::Decode(_))));
    let bad = rmp_serde::to_vec(&Row::Sparse(vec![(3, 1.0), (1, 1.0)])).unwrap();
    assert!(Row::decode(&bad).is_err());
    assert!(Row::decode(&[0xc1]).is_err());
}

#[test]
fn check_delta_validates_shape() {
    let t = TableSpec::new(1, "t", TableKind::Dense { width: 3 }, Consistency::Bsp);
    assert!(t.check_delta(RowId(0), &Row::Dense(vec![0.0; 3])).is_ok());
    assert!(t.check_delta(RowId(0), &Row::Dense(vec![0.0; 2])).is_err());
    assert!(
        t.check_delta(RowId(0), &Row::Sparse(vec![(2, 1.0)]))
            .is_ok()
    );
    assert!(
        t.check_delta(RowId(0), &Row::Sparse(vec![(3, 1.0)]))
            .is_err()
    );
    let s = TableSpec::new(2, "s", TableKind::Sparse, Consistency::Async);
    assert!(s.check_delta(RowId(0), &Row::Dense(vec![1.0])).is_err());
    assert!(
        s.check_delta(RowId(0), &Row::Sparse(vec![(2, 1.0), (2, 1.0)]))
            .is_err()
    );
}

#[test]
fn required_row_clock() {
    assert_eq!(Consistency::Bsp.required_row_clock(5), Some(5));
    assert_eq!(
        Consistency::Ssp { staleness: 2 }.required_row_clock(5),
        Some(3)
    );
    assert_eq!(
        Consistency::Essp { staleness: 9 }.required_row_clock(5),
        Some(0)
    );
    assert_eq!(Consistency::Async.required_row_clock(5), None);
}

#[test]
fn shard_of_in_range_deterministic_and_spread() {
    let n = 4;
    let mut counts = [0usize; 4];
    for r in 0..4000 {
        let s = shard_of(TableId(3), RowId(r), n);
        assert_eq!(s, shard_of(TableId(3), RowId(r), n));
        counts[s as usize] += 1;
    }
    for c in counts {
        assert!((800..1200).contains(&c), "{counts:?}");
    }
    assert_eq!(shard_of(TableId(1), RowId(7), 0), 0);
}
