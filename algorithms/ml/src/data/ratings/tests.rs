use super::triplets::{TABLE_IDS, numeric_id, numeric_triplet};
use super::*;
use crate::data::testing::{line_of, mostly, refused, write_in};

/// MovieLens `u.data` (tabs, timestamps), 1M `ratings.dat` (`::`) and `ratings.csv` (a
/// header, commas, and a space-separated line after a comment); ids remapped in order of
/// first appearance; errors carry the line.
#[test]
fn parses_triplets_in_every_separator() {
    let udata = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t302\t1\t1\n";
    let dat = "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n";
    let csv = "userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n% c\n2 31 4\n";
    type Case<'a> = (&'a str, Vec<(u32, u32, f32)>, Vec<&'a str>, Vec<&'a str>);
    let cases: [Case; 3] = [
        (
            udata,
            vec![(0, 0, 3.0), (1, 1, 3.0), (0, 1, 1.0)],
            vec!["196", "186"],
            vec!["242", "302"],
        ),
        (
            dat,
            vec![(0, 0, 5.0), (0, 1, 3.0), (1, 0, 4.0)],
            vec!["1", "2"],
            vec!["1193", "661"],
        ),
        (
            csv,
            vec![(0, 0, 2.5), (1, 0, 4.0)],
            vec!["1", "2"],
            vec!["31"],
        ),
    ];
    for (text, entries, users, items) in cases {
        let r = parse_triplets(text.as_bytes(), "r").unwrap();
        assert_eq!(r.entries, entries, "{text}");
        assert_eq!((r.n_users, r.n_items), (users.len(), items.len()));
        let m = r.id_mapping.unwrap();
        assert_eq!(m.user_ids, users);
        assert_eq!(m.item_ids, items);
    }
    for (text, line) in [("1 2 3\n1 2\n", 2), ("1 2 3\n1 2 z\n", 2), ("1 2 NaN\n", 1)] {
        let e = parse_triplets(text.as_bytes(), "x").unwrap_err();
        assert_eq!(line_of(e), line, "{text}");
    }
}

/// A 3 x 2 MatrixMarket file of two entries.
const MM_3X2: &str = "%%MatrixMarket matrix coordinate real general\n3 2 2\n1 2 4\n3 1 5\n";

#[test]
fn labelled_ratings_keep_the_files_ids() {
    let dir = tempfile::tempdir().unwrap();
    let mm = write_in(dir.path(), "r.mtx", MM_3X2);
    let r = load_labelled_ratings(&mm).unwrap();
    assert_eq!(r[1], ("3".into(), "1".into(), Some(5.0)));
    // The training loader names MatrixMarket rows and columns the same way.
    let m = load_ratings(&mm).unwrap().id_mapping.unwrap();
    assert_eq!((m.user_ids[2].as_str(), m.item_ids[0].as_str()), ("3", "1"));
    let pairs = write_in(dir.path(), "p.dat", "7::42\n8::43::2.5\n9\n");
    let e = load_labelled_ratings(&pairs).unwrap_err().to_string();
    assert!(e.contains("p.dat:3"), "{e}");
    std::fs::write(&pairs, "7::42\n8::43::2.5\n").unwrap();
    let r = load_labelled_ratings(&pairs).unwrap();
    assert_eq!(r[0], ("7".into(), "42".into(), None));
    assert_eq!(r[1].2, Some(2.5));
}

#[test]
fn held_out_ratings_take_the_training_files_indices() {
    let dir = tempfile::tempdir().unwrap();
    let base = write_in(dir.path(), "u1.base", "7\t1\t5\n9\t2\t3\n");
    let test = write_in(dir.path(), "u1.test", "9\t1\t4\n8\t1\t2\n");
    let train = load_ratings(&base).unwrap();
    let (held, left_out) = train.held_out_from(&test).unwrap();
    assert_eq!(held.entries, vec![(1, 0, 4.0)]);
    assert_eq!(left_out, 1);
}

#[test]
fn parses_matrix_market() {
    let text = "%%MatrixMarket matrix coordinate real general\n% comment\n3 4 2\n1 1 5\n3 4 -1.5\n";
    let r = parse_matrix_market(text.as_bytes(), "m.mtx").unwrap();
    assert_eq!((r.n_users, r.n_items), (3, 4));
    assert_eq!(r.entries, vec![(0, 0, 5.0), (2, 3, -1.5)]);
    assert_eq!(r.id_mapping.unwrap().item_ids, vec!["1", "2", "3", "4"]);
}

#[test]
fn matrix_market_errors() {
    let h = "%%MatrixMarket matrix coordinate real general\n";
    let cases = [
        (
            "%%MatrixMarket matrix array real general\n2 2\n".to_string(),
            1,
        ),
        (format!("{h}2 2 1\n3 1 1\n"), 3),
        (format!("{h}2 2 1\n0 1 1\n"), 3),
        (format!("{h}2 2 2\n1 1 1\n"), 3),
        (format!("{h}2 2 1\n1 1 1\n2 2 2\n"), 4),
        (format!("{h}2 2\n"), 2),
        (h.to_string(), 1),
        (format!("{h}2 2 1\n1 1 inf\n"), 3),
    ];
    for (text, line) in cases {
        assert_eq!(
            line_of(parse_matrix_market(text.as_bytes(), "m").unwrap_err()),
            line,
            "{text}"
        );
    }
}

#[test]
fn matrix_market_sizes_above_the_limit_are_refused() {
    let limits = DataLimits {
        max_dimension: 100,
        ..DataLimits::default()
    };
    let text = "%%MatrixMarket matrix coordinate real general\n% c\n3 4000000000 1\n1 1 1\n";
    let err = parse_matrix_market_with_limits(text.as_bytes(), "big.mtx", &limits).unwrap_err();
    assert_eq!(refused(&err), ("limit", 3, 4_000_000_000, 100), "{err}");
    assert!(
        err.to_string()
            .starts_with("big.mtx:3: column count 4000000000")
    );
    let err = parse_matrix_market(text.as_bytes(), "big.mtx").unwrap_err();
    assert!(matches!(refused(&err), ("limit", 3, ..)));
}

#[test]
fn load_ratings_detects_format() {
    let dir = tempfile::tempdir().unwrap();
    let mtx = "%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 2\n";
    let mm = write_in(dir.path(), "a.mtx", mtx);
    assert_eq!(
        load_ratings(&mm).unwrap().id_mapping.unwrap().user_ids,
        vec!["1"]
    );
    let tr = write_in(dir.path(), "a.tsv", "a\tb\t1\n");
    assert!(load_ratings(&tr).unwrap().id_mapping.is_some());
    assert!(matches!(
        load_ratings(dir.path().join("none")),
        Err(MlError::Io { .. })
    ));
}

#[test]
fn split_is_deterministic_and_partitions() {
    let r = Ratings {
        n_users: 10,
        n_items: 10,
        entries: (0..100).map(|i| (i % 10, i / 10, i as f32)).collect(),
        id_mapping: None,
    };
    let (train, test) = r.train_test_split(0.2, 7).unwrap();
    assert_eq!(test.entries.len(), 20);
    assert_eq!(train.entries.len(), 80);
    let (train2, test2) = r.train_test_split(0.2, 7).unwrap();
    assert_eq!((train.clone(), test.clone()), (train2, test2));
    let mut all: Vec<_> = train
        .entries
        .iter()
        .chain(&test.entries)
        .map(|e| e.2 as i32)
        .collect();
    all.sort();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    assert!(r.train_test_split(1.5, 0).is_err());
    assert_ne!(r.train_test_split(0.2, 8).unwrap().1, test);
}

/// The split the mask gives is the one of the `usize` shuffle `train_test_split` used
/// before (the permutation does not depend on the element type), and the by-value
/// split is the same as the borrowing one.
#[test]
fn held_out_mask_is_the_split_of_a_usize_shuffle() {
    for (len, fraction, seed) in [
        (0, 0.1, 0),
        (1, 1.0, 3),
        (100, 0.2, 7),
        (1000, 0.1, 0),
        (4097, 0.37, 11),
        (50_000, 0.1, 42),
    ] {
        let n_test = (fraction * len as f64).round() as usize;
        let mut order: Vec<usize> = (0..len).collect();
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        let mut expected = vec![false; len];
        for &i in &order[..n_test] {
            expected[i] = true;
        }
        let mask = HeldOutMask::new(len, fraction, seed).unwrap();
        let got: Vec<bool> = (0..len).map(|k| mask.is_test(k)).collect();
        assert_eq!(got, expected, "len {len} seed {seed}");
        assert_eq!((mask.len, mask.n_test()), (len, n_test));
        assert!(!mask.is_test(len));
        let r = Ratings {
            n_users: 7,
            n_items: 5,
            entries: (0..len as u32).map(|k| (k % 7, k % 5, k as f32)).collect(),
            id_mapping: None,
        };
        assert_eq!(
            r.clone().into_train_test_split(fraction, seed).unwrap(),
            r.train_test_split(fraction, seed).unwrap()
        );
    }
    assert!(HeldOutMask::new(10, -0.1, 0).is_err());
}

/// Scanning a file visits, in order, the entries loading it gives, and returns its
/// dimensions and ids; a bad line is refused with its number either way.
#[test]
fn scanning_visits_what_loading_loads() {
    let dir = tempfile::tempdir().unwrap();
    let tr = write_in(dir.path(), "r.tsv", "u1\ti1\t3\nu2\ti1\t4.5\nu1\ti2\t1\n");
    let mm = write_in(dir.path(), "r.mtx", MM_3X2);
    for path in [&tr, &mm] {
        let loaded = load_ratings(path).unwrap();
        let mut seen = Vec::new();
        let shape = scan_ratings(path, |u, i, r| seen.push((u, i, r))).unwrap();
        assert_eq!(seen, loaded.entries);
        assert_eq!(
            shape,
            Ratings {
                entries: Vec::new(),
                ..loaded
            }
        );
    }
    std::fs::write(&tr, "u1\ti1\t3\nu2\ti1\n").unwrap();
    assert_eq!(line_of(scan_ratings(&tr, |_, _, _| {}).unwrap_err()), 2);
}

/// 74 bytes declaring 2^26 x 2^26: refused naming the file and the size line before a
/// single entry is visited (by path) or anything is sized by them (a reader); a test file
/// read only for its ids is not.
#[test]
fn matrix_market_sizes_beyond_the_files_size_are_refused() {
    let text = "%%MatrixMarket matrix coordinate real general\n67108864 67108864 2\n1 1 5\n2 2 4\n";
    let dir = tempfile::tempdir().unwrap();
    let path = write_in(dir.path(), "huge.mtx", text);
    let mut visited = 0;
    let err = scan_ratings(&path, |_, _, _| visited += 1).unwrap_err();
    assert_eq!(visited, 0);
    let message = err.to_string();
    assert_eq!(refused(&err), ("input", 2, 67_108_864, 78), "{message}");
    assert!(
        message.contains("huge.mtx:2: row count 67108864"),
        "{message}"
    );
    assert!(
        message.contains("PETREL_DATA__DIMENSION_ALLOWANCE"),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    assert!(matches!(
        refused(&load_ratings(&path).unwrap_err()),
        ("input", 2, ..)
    ));
    let err = parse_matrix_market(text.as_bytes(), "huge.mtx").unwrap_err();
    assert!(matches!(refused(&err), ("input", 2, ..)));
    assert_eq!(load_labelled_ratings(&path).unwrap().len(), 2);
    // Within the fixed allowance any small file may declare its dimensions.
    let ok = "%%MatrixMarket matrix coordinate real general\n1000000 17770 1\n1 1 5\n";
    let r = parse_matrix_market(ok.as_bytes(), "ok.mtx").unwrap();
    assert_eq!((r.n_users, r.n_items), (1_000_000, 17_770));
}

/// What the general path makes of a line the fast path may read: the ids as numbers and
/// the rating, or `None` when it would not give a numeric triplet.
fn generally(line: &str) -> Option<(u32, u32, f32)> {
    let content = line.trim();
    if is_comment(content) {
        return None;
    }
    let (fields, n) = rating_fields(content, false);
    let rating = parse_f32(fields[2]).filter(|r| n >= 3 && r.is_finite())?;
    Some((numeric_id(fields[0])?, numeric_id(fields[1])?, rating))
}

/// Ratings lines, most of them of the common form, with odd pieces in every place.
fn ratings_line() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::strategy::Strategy;
    let id = || mostly("0|[1-9][0-9]{0,9}", "0[0-9]|[0-9]{11}|x|42949672[0-9]{2}|");
    let sep = || mostly("[\t ,]{1,2}", "::|:| :|\u{b}|\u{a0}|");
    let rating = mostly(
        "[-+]?[0-9]{1,2}(\\.[0-9]?)?([eE][-+]?[0-9]{1,2})?",
        "inf|NaN|1e39|[0-9]:|:[0-9]|\\.|",
    );
    let tail = mostly(
        "([\t ,]{1,2}[0-9]{0,3})?",
        "(::|:|\r|\u{b}|\u{a0}|[\t ,])[0-9:#\u{b}]{0,3}([\t ,:]{1,2}[0-9:]{0,3})?",
    );
    let lead = mostly("", "[ #%]");
    (lead, id(), sep(), id(), sep(), rating, tail)
        .prop_map(|(a, b, c, d, e, f, g)| [a, b, c, d, e, f, g].concat())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// A line the fast path reads is read as the general path reads it, and the lines of
    /// the common form are read by it.
    #[test]
    fn the_fast_path_reads_lines_as_the_general_path(line in ratings_line()) {
        let fast = numeric_triplet(&line).map(|(u, i, r)| (u, i, r.to_bits()));
        let general = generally(&line).map(|(u, i, r)| (u, i, r.to_bits()));
        if fast.is_some() {
            proptest::prop_assert_eq!(fast, general, "{:?}", line);
        }
    }
}

/// Ids below and above the table, at u32's end, and texts that look like numbers but are
/// not canonical ("007"), all keep their own index in order of first appearance.
#[test]
fn ids_large_small_and_textual_are_indexed_in_order() {
    let big = TABLE_IDS as u64;
    let text = format!(
        "7 1 1\n{big} 1 2\n4294967295 2 3\n007 1 4\n7 3 5\n4294967296 1 6\n{big} 2 7\nu 2 8\n"
    );
    let r = parse_triplets(text.as_bytes(), "r").unwrap();
    let m = r.id_mapping.unwrap();
    let users = [
        "7",
        &big.to_string(),
        "4294967295",
        "007",
        "4294967296",
        "u",
    ];
    assert_eq!(m.user_ids, users);
    assert_eq!(m.item_ids, ["1", "2", "3"]);
    let user_of: Vec<u32> = r.entries.iter().map(|e| e.0).collect();
    assert_eq!(user_of, [0, 1, 2, 3, 0, 4, 1, 5]);
    // Lines of the common form only: the chunks keep the ids as read, made dense as they
    // are merged, in the same order.
    let text = format!("7 1 1\n{big} 1 2\n4294967295 2 3\n7 3 5\n{big} 2 7\n9 2 1\n");
    for chunk in [0, 7] {
        let r = crate::data::chunk_tests::with_split(chunk, || {
            parse_triplets(text.as_bytes(), "r").unwrap()
        });
        let m = r.id_mapping.unwrap();
        assert_eq!(m.user_ids, ["7", &big.to_string(), "4294967295", "9"]);
        assert_eq!(m.item_ids, ["1", "2", "3"]);
        let dense: Vec<(u32, u32)> = r.entries.iter().map(|e| (e.0, e.1)).collect();
        assert_eq!(dense, [(0, 0), (1, 0), (2, 1), (0, 2), (1, 1), (3, 1)]);
    }
}
