//! The chunked parsers give what one sequential pass gives, wherever the chunk boundaries
//! fall, and the binary cache gives back what the text gives.

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::cache::cache_path;
use super::testing::{stream_libsvm, use_disk_cache, write_in};
use super::text::{Split, TEST_SPLIT};
use super::*;

/// Runs `f` with chunks of `chunk` bytes on two threads (blocks of 4 chunks), or as one
/// sequential chunk with `chunk = 0`.
pub(crate) fn with_split<T>(chunk: usize, f: impl FnOnce() -> T) -> T {
    let split = if chunk == 0 {
        Split {
            chunk: usize::MAX / 4,
            block: usize::MAX / 4,
            threads: 1,
        }
    } else {
        Split {
            chunk,
            block: chunk * 4,
            threads: 2,
        }
    };
    TEST_SPLIT.with(|s| s.set(Some(split)));
    let out = f();
    TEST_SPLIT.with(|s| s.set(None));
    out
}

/// The outcome of a parse as compared: the value's debug text or the error's message.
fn outcome<T: std::fmt::Debug>(r: Result<T, MlError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {e}"),
    }
}

fn end(rng: &mut ChaCha8Rng) -> &'static str {
    if rng.gen_bool(0.2) { "\r\n" } else { "\n" }
}

fn libsvm_text(rng: &mut ChaCha8Rng, lines: usize, bad: bool) -> String {
    let mut text = String::new();
    for _ in 0..lines {
        match rng.gen_range(0..10) {
            0 => text.push_str("# comment 1:2"),
            1 => {}
            2 => text.push_str("  \t "),
            _ => {
                text.push_str(&format!("{}", rng.gen_range(-3.0f32..3.0)));
                let mut j = 0u32;
                for _ in 0..rng.gen_range(0..6) {
                    j += rng.gen_range(1..50);
                    text.push_str(&format!(" {j}:{:.4}", rng.gen_range(-1.0f32..1.0)));
                }
                if rng.gen_bool(0.1) {
                    text.push_str(" # tail");
                }
            }
        }
        if bad && rng.gen_bool(0.01) {
            text.push_str(" 0:1");
        }
        text.push_str(end(rng));
    }
    if rng.gen_bool(0.5) {
        // A last line without its newline.
        text.push_str("1 1:1");
    }
    text
}

/// The LIBSVM reading of a line-by-line reader, written plainly (valid input only).
fn reference_libsvm(text: &str) -> SparseDataset {
    let mut data = SparseDataset::default();
    for line in std::io::BufRead::lines(text.as_bytes()) {
        let line = line.unwrap();
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let mut tokens = content.split_whitespace();
        data.labels.push(tokens.next().unwrap().parse().unwrap());
        let mut row = SparseRow::default();
        for token in tokens {
            let (i, v) = token.split_once(':').unwrap();
            row.indices.push(i.parse::<u32>().unwrap() - 1);
            row.values.push(v.parse().unwrap());
        }
        if let Some(&last) = row.indices.last() {
            data.n_features = data.n_features.max(last as usize + 1);
        }
        data.rows.push(row);
    }
    data
}

#[test]
fn libsvm_chunks_equal_a_sequential_read_and_a_plain_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for case in 0..40 {
        let bad = case % 3 == 2;
        let lines = rng.gen_range(0..300);
        let text = libsvm_text(&mut rng, lines, bad);
        let parse = || outcome(parse_libsvm(text.as_bytes(), "t.svm"));
        let streamed = || {
            let mut rows = Vec::new();
            let r = stream_libsvm(&text, "t.svm", &DataLimits::default(), |l, r| {
                rows.push((l, r.clone()));
                Ok(())
            });
            format!("{rows:?} {}", outcome(r))
        };
        let whole = with_split(0, parse);
        let whole_streamed = with_split(0, streamed);
        if !bad {
            assert_eq!(whole, outcome(Ok::<_, MlError>(reference_libsvm(&text))));
        }
        for chunk in [1, 2, 5, 17, 64, 301] {
            assert_eq!(with_split(chunk, parse), whole, "case {case} chunk {chunk}");
            assert_eq!(
                with_split(chunk, streamed),
                whole_streamed,
                "case {case} chunk {chunk}"
            );
        }
    }
}

#[test]
fn an_error_in_a_late_chunk_names_its_line() {
    let mut text = "1 1:1 2:2\n".repeat(5000);
    text.push_str("1 3:1 2:1\n");
    text.push_str(&"1 1:1\n".repeat(100));
    let err = with_split(64, || parse_libsvm(text.as_bytes(), "late.svm")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("late.svm:5001: feature index 2 does not increase"),
        "{err}"
    );
    // Matrix Market: one entry too many, found in a late chunk.
    let mut mm = String::from("%%MatrixMarket matrix coordinate real general\n5 5 3000\n");
    mm.push_str(&"1 1 1\n".repeat(3001));
    let err = with_split(40, || parse_matrix_market(mm.as_bytes(), "m.mtx")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "m.mtx:3003: more entries than the declared 3000"
    );
    // Bag-of-words: the token limit crossed in a late chunk.
    let limits = DataLimits {
        max_tokens: 2500,
        ..DataLimits::default()
    };
    let mut bow = String::from("2\n2\n3000\n");
    bow.push_str(&"1 1 1\n".repeat(3000));
    let err = with_split(40, || {
        parse_docword_with_limits(bow.as_bytes(), "d", &limits)
    });
    assert!(
        matches!(err, Err(MlError::LimitExceeded { line: 2504, .. })),
        "{err:?}"
    );
    // A line that is not UTF-8 is the reader's I/O error, after the errors before it.
    let mut bytes = "1 1:1\n".repeat(3000).into_bytes();
    bytes.extend_from_slice(b"1 1:\xff\n");
    let err = with_split(50, || parse_libsvm(&bytes[..], "u.svm")).unwrap_err();
    assert!(matches!(err, MlError::Io { .. }), "{err}");
    bytes.splice(0..0, b"1 0:1\n".iter().copied());
    let err = with_split(50, || parse_libsvm(&bytes[..], "u.svm")).unwrap_err();
    assert!(err.to_string().starts_with("u.svm:1:"), "{err}");
}

#[test]
fn wide_ids_checked_against_the_bytes_before_them_hold_across_chunks() {
    // Unknown size: an index is paid for by the bytes read through its line, many of
    // which are in earlier chunks.
    let padding = "0 1:1\n".repeat(20_000);
    let ok = format!("{padding}1 2000000:1\n");
    let early = format!("0 1:1\n1 2000000:1\n{padding}");
    for chunk in [0, 7, 1000] {
        let n = with_split(chunk, || {
            let mut n = 0;
            stream_libsvm(&ok, "w", &DataLimits::default(), |_, _| {
                n += 1;
                Ok(())
            })
            .map(|()| n)
        });
        assert_eq!(n.unwrap(), 20_001, "chunk {chunk}");
        let err = with_split(chunk, || {
            stream_libsvm(&early, "w", &DataLimits::default(), |_, _| Ok(()))
        });
        assert!(
            matches!(
                err,
                Err(MlError::TooLargeForInput {
                    line: 2,
                    bytes: 18,
                    ..
                })
            ),
            "{err:?}"
        );
    }
    let bow = format!(
        "3\n2000000\n2\n1 1 1\n{}3 2000000 1\n",
        "\n".repeat(130_000)
    );
    for chunk in [0, 9, 4096] {
        let c = with_split(chunk, || parse_docword(bow.as_bytes(), "d"));
        assert_eq!(outcome(c.map(|c| c.n_tokens())), "ok 2", "chunk {chunk}");
    }
}

fn ratings_text(rng: &mut ChaCha8Rng, lines: usize, bad: bool) -> String {
    let mut text = String::from("user,item,rating\n");
    for _ in 0..lines {
        let (u, i, r) = (
            rng.gen_range(0..40),
            rng.gen_range(0..30),
            rng.gen_range(0.0f32..5.0),
        );
        match rng.gen_range(0..12) {
            0 => text.push_str("# c"),
            1 => text.push_str("% c"),
            2 => {}
            3 => text.push_str(&format!("{u}::{i}::{r}::99")),
            4 => text.push_str(&format!("u{u} i{i} {r}")),
            5 if bad && rng.gen_bool(0.05) => text.push_str(&format!("{u}\t{i}")),
            _ => text.push_str(&format!("{u}\t{i}\t{r}\t123")),
        }
        text.push_str(end(rng));
    }
    text
}

#[test]
fn ratings_and_docword_chunks_equal_a_sequential_read() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for case in 0..30 {
        let lines = rng.gen_range(0..200);
        let text = ratings_text(&mut rng, lines, true);
        let mut mm = String::from("%%MatrixMarket matrix coordinate real general\n% c\n");
        let n = rng.gen_range(0..150);
        mm.push_str(&format!("30 20 {}\n", n + case % 2));
        for _ in 0..n {
            mm.push_str(&format!(
                "{} {} {}{}",
                rng.gen_range(1..31),
                rng.gen_range(1..21),
                rng.gen_range(-2.0f32..2.0),
                end(&mut rng)
            ));
            if rng.gen_bool(0.1) {
                mm.push_str("\n% between\n");
            }
        }
        let mut bow = String::from("20\n\n50\n");
        let n = rng.gen_range(0..150);
        bow.push_str(&format!("{}\n", n + case % 2));
        for _ in 0..n {
            let (d, w, c) = (
                rng.gen_range(1..21),
                rng.gen_range(1..51),
                rng.gen_range(0..4),
            );
            // The common form, and odd ones only the general path reads.
            let entry = match rng.gen_range(0..8) {
                0 => format!(" {d}\t{w}  {c} "),
                1 => format!("0{d} +{w} {c}"),
                2 => format!("{d} {w} {c}\n"),
                _ => format!("{d} {w} {c}"),
            };
            bow.push_str(&entry);
            bow.push_str(end(&mut rng));
        }
        let all = |_: usize| true;
        let odd = |d: usize| d % 2 == 1;
        let limits = DataLimits::default();
        let size = super::limits::SizeRule::new(None).unwrap();
        let parse = || {
            [
                outcome(parse_triplets(text.as_bytes(), "r")),
                outcome(parse_matrix_market(mm.as_bytes(), "m")),
                outcome(parse_docword(bow.as_bytes(), "d")),
                outcome(
                    bow::parse_docword_part(bow.as_bytes(), Path::new("d"), &limits, size, &odd)
                        .map(|(c, s, r)| (c, s, r.finish())),
                ),
                outcome(
                    bow::parse_docword_part(bow.as_bytes(), Path::new("d"), &limits, size, &all)
                        .map(|(_, _, r)| r.finish()),
                ),
            ]
        };
        let whole = with_split(0, parse);
        for chunk in [1, 3, 16, 100] {
            assert_eq!(with_split(chunk, parse), whole, "case {case} chunk {chunk}");
        }
    }
}

/// Sets `path`'s modification time `secs` seconds after the epoch.
fn set_mtime(path: &Path, secs: u64) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .unwrap();
}

#[test]
fn the_binary_cache_gives_back_the_text_and_is_rewritten_when_stale_or_damaged() {
    use_disk_cache(Some(true));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let svm = write_in(dir.path(), "a.svm", libsvm_text(&mut rng, 200, false));
    set_mtime(&svm, 1_000_000);
    let ratings = write_in(dir.path(), "r.csv", ratings_text(&mut rng, 200, false));
    let mtx = "%%MatrixMarket matrix coordinate real general\n3 2 2\n1 2 4\n3 1 -5.5\n";
    let mm = write_in(dir.path(), "r.mtx", mtx);
    let docword = write_in(dir.path(), "docword.txt", "3\n4\n3\n1 2 2\n1 4 1\n3 1 3\n");
    let load = || {
        (
            load_libsvm(&svm).unwrap(),
            load_ratings(&ratings).unwrap(),
            load_ratings(&mm).unwrap(),
            load_bow_digested(&docword, None)
                .map(|(c, d)| (c, d.finish()))
                .unwrap(),
        )
    };
    let parsed = load();
    for path in [&svm, &ratings, &mm, &docword] {
        assert!(cache_path(path).exists(), "{}", path.display());
    }
    // Read back from the caches.
    assert_eq!(format!("{:?}", load()), format!("{parsed:?}"));
    // Damaged: ignored, reparsed and rewritten.
    for path in [&svm, &ratings, &mm, &docword] {
        let cache = cache_path(path);
        let mut bytes = std::fs::read(&cache).unwrap();
        let n = bytes.len();
        bytes[n / 2 + 3] ^= 0x10;
        std::fs::write(&cache, &bytes).unwrap();
    }
    assert_eq!(format!("{:?}", load()), format!("{parsed:?}"));
    let rewritten = std::fs::read(cache_path(&svm)).unwrap();
    assert_eq!(format!("{:?}", load()), format!("{parsed:?}"));
    assert_eq!(std::fs::read(cache_path(&svm)).unwrap(), rewritten);
    // Stale by modification time (same size, other values): the new text is read.
    let text = std::fs::read_to_string(&svm).unwrap();
    let changed = text.replacen("1:", "2:", 1).replacen('0', "1", 1);
    assert_eq!(changed.len(), text.len());
    std::fs::write(&svm, &changed).unwrap();
    set_mtime(&svm, 2_000_000);
    let expected = with_split(0, || parse_libsvm(changed.as_bytes(), "x"));
    assert_eq!(outcome(load_libsvm(&svm)), outcome(expected));
    // Stale by size.
    std::fs::write(&svm, "1 1:1\n").unwrap();
    set_mtime(&svm, 2_000_000);
    assert_eq!(load_libsvm(&svm).unwrap().n_rows(), 1);
    // A cached value is checked against the limits in force: the error is the text's.
    std::fs::write(&svm, "1 5:1\n").unwrap();
    load_libsvm(&svm).unwrap();
    let err = unsafe_free_env_limit(&svm);
    assert!(
        err.contains("a.svm:1: feature index 5 exceeds the limit 4"),
        "{err}"
    );
    use_disk_cache(None);
}

/// What loading `svm` under a dimension limit of 4 gives (through the shared parse and the
/// cache's check of the limits, not the environment).
fn unsafe_free_env_limit(svm: &Path) -> String {
    let limits = DataLimits {
        max_dimension: 4,
        ..DataLimits::default()
    };
    let file = load_libsvm_shared(svm).unwrap();
    assert!(file.n_features > limits.max_dimension as usize);
    outcome(parse_libsvm_with_limits(
        std::io::BufReader::new(std::fs::File::open(svm).unwrap()),
        svm,
        &limits,
    ))
}

#[test]
fn loaders_of_one_file_share_one_parse() {
    use_disk_cache(Some(false));
    let dir = tempfile::tempdir().unwrap();
    let svm = write_in(dir.path(), "s.svm", "1 1:1\n0 2:3\n");
    let a = load_libsvm_shared(&svm).unwrap();
    let b = load_libsvm_shared(&svm).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    assert!(!cache_path(&svm).exists());
    drop((a, b));
    use_disk_cache(None);
}

#[test]
fn numeric_and_text_ids_stay_the_files_texts() {
    let text = "7 1 1\n007 1 2\n7 x 3\n4294967296 1 1\n0 1 1\n00 1 1\n";
    for chunk in [0, 1, 8] {
        let r = with_split(chunk, || parse_triplets(text.as_bytes(), "r")).unwrap();
        let m = r.id_mapping.unwrap();
        assert_eq!(
            m.user_ids,
            ["7", "007", "4294967296", "0", "00"],
            "chunk {chunk}"
        );
        assert_eq!(m.item_ids, ["1", "x"]);
        let users: Vec<u32> = r.entries.iter().map(|e| e.0).collect();
        assert_eq!(users, [0, 1, 0, 2, 3, 4]);
    }
}
