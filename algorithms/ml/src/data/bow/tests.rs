use super::*;
use crate::data::testing::{line_of, mostly, refused, write_in};

#[test]
fn parses_docword_and_expands_counts() {
    let text = "3\n4\n3\n1 2 2\n1 4 1\n3 1 3\n";
    let c = parse_docword(text.as_bytes(), "docword.txt").unwrap();
    assert_eq!((c.n_docs, c.vocab_size), (3, 4));
    assert_eq!(c.docs, vec![vec![1, 1, 3], vec![], vec![0, 0, 0]]);
    assert_eq!(c.n_tokens(), 6);
    assert_eq!(c.word_frequencies(), vec![3, 2, 0, 1]);
}

#[test]
fn docword_errors() {
    let cases = [
        ("2\n2\n1\n3 1 1\n", 4),
        ("2\n2\n1\n1 3 1\n", 4),
        ("2\n2\n1\n0 1 1\n", 4),
        ("2\n2\n2\n1 1 1\n", 4),
        ("2\n2\n1\n1 1 1\n2 2 1\n", 5),
        ("2\n2\n", 2),
        ("2\nx\n1\n", 2),
        ("2\n2\n1\n1 1\n", 4),
        ("2\n2\n1\n1 1 -1\n", 4),
    ];
    for (text, line) in cases {
        assert_eq!(
            line_of(parse_docword(text.as_bytes(), "d").unwrap_err()),
            line,
            "{text:?}"
        );
    }
}

#[test]
fn huge_header_sizes_are_refused_naming_file_line_and_limit() {
    // A header with W = 10^9 must be refused: every word table downstream is sized by
    // it.
    let limits = DataLimits {
        max_dimension: 1_000,
        max_documents: 1_000,
        max_tokens: 50,
    };
    let parse = |text: &str| {
        parse_docword_with_limits(text.as_bytes(), "docword.big.txt", &limits).unwrap_err()
    };
    let err = parse("2\n1000000000\n1\n1 1 1\n");
    assert_eq!(refused(&err), ("limit", 2, 1_000_000_000, 1_000), "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with("docword.big.txt:2: vocabulary size W"),
        "{message}"
    );
    assert!(message.contains("PETREL_DATA__MAX_DIMENSION"), "{message}");
    assert!(matches!(
        refused(&parse("5000\n2\n1\n1 1 1\n")),
        ("limit", 1, ..)
    ));
    // Tokens: 30 + 30 passes the per-entry cap but not the corpus cap, on line 5.
    let err = parse("1\n2\n2\n1 1 30\n1 2 30\n");
    assert_eq!(refused(&err), ("limit", 5, 60, 50), "{err}");
    assert!(err.to_string().contains("PETREL_DATA__MAX_TOKENS"));
    // The default refuses W = 10^9 as well.
    let err = parse_docword("2\n1000000000\n1\n1 1 1\n".as_bytes(), "d").unwrap_err();
    assert!(matches!(refused(&err), ("limit", 2, ..)));
}

#[test]
fn a_header_alone_allocates_nothing_until_the_file_is_checked() {
    // D at the limit with a wrong NNZ is refused before the documents are allocated.
    let limits = DataLimits::default();
    let text = format!("{}\n2\n5\n1 1 1\n", limits.max_documents);
    let err = parse_docword_with_limits(text.as_bytes(), "d", &limits).unwrap_err();
    assert_eq!(line_of(err), 4);
    let c = parse_docword_with_limits("4\n2\n1\n2 1 1\n".as_bytes(), "d", &limits).unwrap();
    assert_eq!(c.docs, vec![vec![], vec![0], vec![], vec![]]);
}

#[test]
fn document_counts_beyond_the_files_size_are_refused_before_anything_is_sized() {
    // 26 bytes claiming 20,000,000 documents (each one a list and a row of topic
    // counts downstream).
    let text = "20000000\n1\n1\n1 1 1\n";
    let dir = tempfile::tempdir().unwrap();
    let path = write_in(dir.path(), "docword.huge.txt", text);
    let err = load_bow(&path, None).unwrap_err();
    let message = err.to_string();
    assert_eq!(refused(&err), ("input", 1, 20_000_000, 19), "{message}");
    assert!(
        message.contains("docword.huge.txt:1: document count D 20000000"),
        "{message}"
    );
    assert!(matches!(
        refused(&parse_docword(text.as_bytes(), "d").unwrap_err()),
        ("input", 1, ..)
    ));
    // Read as text of unknown size, an entry's id is checked before it sizes a table.
    let entry = "20000000\n1\n1\n20000000 1 1\n";
    assert!(matches!(
        refused(&parse_docword(entry.as_bytes(), "d").unwrap_err()),
        ("input", 4, ..)
    ));
    // A D or W within the allowance is read from any file.
    let c = parse_docword("300000\n102660\n1\n300000 102660 1\n".as_bytes(), "d").unwrap();
    assert_eq!(
        (c.n_docs, c.vocab_size, c.n_tokens()),
        (300_000, 102_660, 1)
    );
}

#[test]
fn loads_with_vocab_and_checks_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let docword = write_in(dir.path(), "docword.txt", "1\n2\n2\n1 1 1\n1 2 2\n");
    let vocab = write_in(dir.path(), "vocab.txt", "apple\nbanana\n");
    let c = load_bow(&docword, Some(&vocab)).unwrap();
    assert_eq!(c.vocab.unwrap(), vec!["apple", "banana"]);
    std::fs::write(&vocab, "apple\n").unwrap();
    assert!(matches!(
        load_bow(&docword, Some(&vocab)),
        Err(MlError::Malformed { .. })
    ));
    std::fs::write(&vocab, "apple\n\nbanana\n").unwrap();
    assert_eq!(line_of(load_bow(&docword, Some(&vocab)).unwrap_err()), 2);
}

/// Entry lines, most of them of the common form, with odd pieces in every place.
fn entry_line() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::strategy::Strategy;
    let number = || mostly("[0-9]{1,19}", "[0-9]{20,22}|\\+[0-9]|-[0-9]|x|0x1|1\\.0|");
    let space = || mostly("[ \t]{1,2}", "[\u{b}\u{c}\r]|\u{a0}|,|");
    let edge = || mostly("[ \t]{0,2}", "[ \t\r\u{b}\u{c}]{1,3}|\u{a0}|#|[ \t][0-9]");
    (
        edge(),
        number(),
        space(),
        number(),
        space(),
        number(),
        edge(),
    )
        .prop_map(|(a, b, c, d, e, f, g)| [a, b, c, d, e, f, g].concat())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// A line the fast path reads is read as the general path reads it, and the lines of
    /// the common form are read by it.
    #[test]
    fn the_fast_path_reads_entries_as_the_general_path(line in entry_line()) {
        let fast = numeric_entry(line.as_bytes());
        for ascii in [true, false] {
            let general = entry_numbers(&line, ascii && line.is_ascii(), |m| {
                MlError::malformed(Path::new("d"), 1, m)
            });
            if let Some(fast) = fast {
                proptest::prop_assert_eq!(Some(fast), general.ok().flatten(), "{:?}", line);
            }
        }
        let common = is_common_entry(&line);
        proptest::prop_assert!(!common || fast.is_some(), "{:?}", line);
    }
}

/// Whether `line` is `digits spaces digits spaces digits` (up to 19 digits each, spaces and
/// tabs between and around): the form the fast path must read.
fn is_common_entry(line: &str) -> bool {
    let words: Vec<&str> = line.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let only_blanks = line
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || b.is_ascii_digit());
    only_blanks
        && words.len() == 3
        && words
            .iter()
            .all(|w| (1..=19).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_digit()))
}

#[test]
fn entries_of_every_form_read_alike() {
    // Tabs, trailing blanks, CRLF, leading zeros, a sign and a blank line: what the general
    // path reads, by whichever path.
    let text = "2\n3\n5\n 1\t2 3 \r\n\n2 03  1\t\r\n1 +1 2\n02 3 4\r\n1 1 1";
    let c = parse_docword(text.as_bytes(), "d").unwrap();
    assert_eq!(c.docs, vec![vec![1, 1, 1, 0, 0, 0], vec![2, 2, 2, 2, 2]]);
    let err = parse_docword("1\n1\n1\n1 1 1x\n".as_bytes(), "d").unwrap_err();
    assert!(err.to_string().contains("count \"1x\""), "{err}");
}
