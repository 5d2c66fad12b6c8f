//! `petrel eval` and `petrel predict` refuse models whose parameters break their own
//! invariants (naming the file and the field) and empty test sets, and treat what the
//! model never saw the same way in every app: ignored, counted in one line on stderr.

use crate::common;

use common::{data, failure, petrel, trained_in_memory};
use std::path::Path;

/// `model`'s `petrel-model.json` with `edit` applied to its `params`, written to `to`.
fn edited(model: &Path, to: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut json = common::model(model);
    edit(&mut json["params"]);
    std::fs::write(to, serde_json::to_vec(&json).unwrap()).unwrap();
    to.to_str().unwrap().to_string()
}

/// `petrel <cmd> <app> --model <model> --data <file>`: its standard error, which must fail.
fn refused(cmd: &str, app: &str, model: &str, file: &Path) -> String {
    failure(&[cmd, app, "--model", model, "--data", file.to_str().unwrap()])
}

/// `petrel <cmd> <app> --model <model> --data <file>`, which must succeed: its stderr.
fn accepted(cmd: &str, app: &str, model: &Path, file: &Path) -> String {
    let m = model.to_str().unwrap();
    let out = petrel(&[cmd, app, "--model", m, "--data", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "petrel {cmd} {app} failed: {stderr}");
    stderr
}

/// The one `note:` line of `stderr`, which must mention `what`.
fn one_note(stderr: &str, what: &str) {
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(notes.len(), 1, "one note line: {stderr}");
    assert!(notes[0].contains(what), "{what:?} not in {notes:?}");
}

#[test]
fn models_that_break_their_invariants_are_refused_naming_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let lasso = trained_in_memory(dir.path(), "lasso");
    let test = data("regression.test");
    let huge = dir.path().join("huge.json");
    let huge = edited(&lasso, &huge, |p| {
        p["coefficients"][3] = serde_json::json!(1e308)
    });
    for cmd in ["eval", "predict"] {
        let e = refused(cmd, "lasso", &huge, &test);
        assert!(
            e.contains("huge.json") && e.contains("coefficients[3]"),
            "{e}"
        );
    }
    let negative = dir.path().join("negative-lambda.json");
    let negative = edited(&lasso, &negative, |p| p["lambda"] = serde_json::json!(-1.0));
    let e = refused("eval", "lasso", &negative, &test);
    assert!(
        e.contains("negative-lambda.json") && e.contains("lambda = -1"),
        "{e}"
    );

    let lda = trained_in_memory(dir.path(), "lda");
    let docs_test = data("docs.test");
    let alpha = dir.path().join("alpha.json");
    let alpha = edited(&lda, &alpha, |p| p["alpha"] = serde_json::json!(-5.0));
    for cmd in ["eval", "predict"] {
        let e = refused(cmd, "lda", &alpha, &docs_test);
        assert!(e.contains("alpha.json") && e.contains("alpha = -5"), "{e}");
    }
    let probability = dir.path().join("probability.json");
    let probability = edited(&lda, &probability, |p| {
        let row = &mut p["topic_word"][1];
        let first = row[0].as_f64().unwrap();
        row[0] = serde_json::json!(-0.25);
        row[1] = serde_json::json!(row[1].as_f64().unwrap() + first + 0.25);
    });
    let e = refused("eval", "lda", &probability, &docs_test);
    assert!(
        e.contains("probability.json") && e.contains("topic_word[1][0]"),
        "{e}"
    );
    let sum = dir.path().join("sum.json");
    let sum = edited(&lda, &sum, |p| {
        p["topic_word"][2][0] = serde_json::json!(0.0)
    });
    let e = refused("eval", "lda", &sum, &docs_test);
    assert!(
        e.contains("sum.json") && e.contains("topic_word[2] sums to"),
        "{e}"
    );

    let mf = trained_in_memory(dir.path(), "strads-mf");
    let nan = dir.path().join("factors.json");
    let nan = edited(&mf, &nan, |p| {
        p["item_factors"][2][1] = serde_json::json!(1e39)
    });
    let e = refused("eval", "strads-mf", &nan, &data("ratings.test"));
    assert!(
        e.contains("factors.json") && e.contains("item_factors[2][1]"),
        "{e}"
    );
}

#[test]
fn empty_test_sets_are_refused_and_unseen_features_are_ignored_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let lasso = trained_in_memory(dir.path(), "lasso");
    let m = lasso.to_str().unwrap();
    let empty = dir.path().join("empty.libsvm");
    std::fs::write(&empty, "").unwrap();
    for cmd in ["eval", "predict"] {
        let e = refused(cmd, "lasso", m, &empty);
        assert!(
            e.contains("empty.libsvm") && e.contains("holds no rows"),
            "{e}"
        );
    }
    // Feature 500 is beyond the model's 40: ignored and counted, in eval and predict alike.
    let wide = dir.path().join("wide.libsvm");
    std::fs::write(
        &wide,
        "1.5 1:0.5 500:2.0\n-0.5 2:1.0\n0.25 3:1 501:1 502:1\n",
    )
    .unwrap();
    for cmd in ["eval", "predict"] {
        let stderr = accepted(cmd, "lasso", &lasso, &wide);
        one_note(
            &stderr,
            "3 feature value(s) in 2 row(s) have an index beyond the model's",
        );
    }

    // LDA: an unseen word is ignored and counted the same way (it used to be refused).
    let lda = trained_in_memory(dir.path(), "lda");
    let docs_test = std::fs::read_to_string(data("docs.test")).unwrap();
    let mut lines: Vec<String> = docs_test.lines().map(String::from).collect();
    lines[1] = "41".into();
    lines[2] = (lines[2].parse::<u64>().unwrap() + 1).to_string();
    lines.push("1 41 3".into());
    let unseen_word = dir.path().join("unseen.docword");
    std::fs::write(&unseen_word, lines.join("\n") + "\n").unwrap();
    for cmd in ["eval", "predict"] {
        let stderr = accepted(cmd, "lda", &lda, &unseen_word);
        one_note(
            &stderr,
            "3 token(s) in 1 document(s) are words beyond the model's vocabulary",
        );
    }
    let empty_docs = dir.path().join("empty.docword");
    std::fs::write(&empty_docs, "0\n40\n0\n").unwrap();
    let e = refused("eval", "lda", lda.to_str().unwrap(), &empty_docs);
    assert!(
        e.contains("empty.docword") && e.contains("holds no documents"),
        "{e}"
    );

    // MF: a pair with an unknown user is predicted without its factors, and counted.
    let mf = trained_in_memory(dir.path(), "strads-mf");
    let first = std::fs::read_to_string(data("ratings.test")).unwrap();
    let first = first.lines().next().unwrap().to_string();
    let pairs = dir.path().join("pairs.tsv");
    std::fs::write(&pairs, format!("{first}\nnobody-999 1 3\n")).unwrap();
    for cmd in ["eval", "predict"] {
        let stderr = accepted(cmd, "strads-mf", &mf, &pairs);
        one_note(
            &stderr,
            "1 of 2 pair(s) have a user or item the model never saw",
        );
    }
    let empty_pairs = dir.path().join("empty.ratings");
    std::fs::write(&empty_pairs, "").unwrap();
    let e = refused("eval", "strads-mf", mf.to_str().unwrap(), &empty_pairs);
    assert!(
        e.contains("empty.ratings") && e.contains("holds no ratings"),
        "{e}"
    );
}
