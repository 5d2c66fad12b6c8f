//! Data-parallel LDA on the parameter server: an in-process cluster over QUIC (2 workers,
//! 2 shards) on a UCI bag-of-words file written from a corpus sampled from the LDA model,
//! and clear errors for malformed input.

use crate::common::succeeded;
use petrel::actors::{Transport, error_chain};
use petrel::ps::{PsLda, PsLdaOutcome, PsLdaSettings};
use petrel_ml::data::Corpus;
use petrel_ml::data::synthetic::{LdaCorpusParams, lda_corpus};
use std::fmt::Write as _;
use std::path::Path;

const PETREL: &str = env!("CARGO_BIN_EXE_petrel");

/// Runs PS-LDA in process; an error is rendered with its cause chain.
fn run_local(
    cfg: PsLdaSettings,
    shards: usize,
    workers: usize,
    transport: Transport,
) -> Result<PsLdaOutcome, String> {
    petrel::ps::run_local::<PsLda>(cfg, shards, workers, transport).map_err(|e| error_chain(&e))
}

fn corpus() -> Corpus {
    lda_corpus(&LdaCorpusParams {
        n_topics: 4,
        vocab_size: 200,
        n_docs: 240,
        doc_length: 40,
        alpha: 0.1,
        beta: 0.05,
        seed: 5,
    })
    .unwrap()
    .corpus
}

/// Writes `corpus` as UCI `docword.txt` + `vocab.txt`.
fn write_uci(dir: &Path, corpus: &Corpus) {
    let mut entries = Vec::new();
    for (d, doc) in corpus.docs.iter().enumerate() {
        let mut counts = std::collections::BTreeMap::new();
        for &w in doc {
            *counts.entry(w).or_insert(0u32) += 1;
        }
        for (w, n) in counts {
            entries.push(format!("{} {} {n}", d + 1, w + 1));
        }
    }
    let mut text = format!(
        "{}\n{}\n{}\n",
        corpus.docs.len(),
        corpus.vocab_size,
        entries.len()
    );
    for e in entries {
        writeln!(text, "{e}").unwrap();
    }
    std::fs::write(dir.join("docword.txt"), text).unwrap();
    let vocab: String = (0..corpus.vocab_size)
        .map(|w| format!("word{w}\n"))
        .collect();
    std::fs::write(dir.join("vocab.txt"), vocab).unwrap();
}

#[test]
fn ps_lda_over_quic_two_workers_two_shards() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus();
    write_uci(dir.path(), &corpus);
    let iterations = 8;
    let cfg = PsLdaSettings {
        docword: Some(dir.path().join("docword.txt")),
        vocab: Some(dir.path().join("vocab.txt")),
        n_topics: 4,
        iterations,
        staleness: 1,
        clocks_per_iteration: 2,
        chunk_tokens: 1000,
        top_words: 5,
        files: petrel::ps::kit::settings::RunFiles {
            out: Some(dir.path().join("out")),
            ..Default::default()
        },
        ..PsLdaSettings::default()
    };
    let r = run_local(cfg, 2, 2, Transport::Quic).unwrap();
    let m = &r.metrics;
    let n = corpus.n_tokens();

    // Count invariants of the final table (also checked by the monitor before it succeeds).
    let freq = corpus.word_frequencies();
    let mut column_sums = [0i64; 4];
    for (w, row) in r.table.word_topic.iter().enumerate() {
        assert_eq!(row.total(), freq[w] as u64, "word {w}");
        for &(t, c) in &row.entries {
            column_sums[t as usize] += i64::from(c);
        }
    }
    assert_eq!(
        r.table.topic_totals, column_sums,
        "totals row = column sums"
    );
    assert_eq!(
        r.table.topic_totals.iter().sum::<i64>(),
        n as i64,
        "table sums to the tokens"
    );
    assert_eq!(
        m.clamped_entries, 0,
        "no negative or fractional entry was ever read"
    );

    // Every token sampled once per iteration; 1 init clock + 2 clocks per iteration.
    assert_eq!(m.lda.tokens_sampled, (n * iterations) as u64);
    assert_eq!(m.worker_clocks, vec![1 + 2 * iterations as u64; 2]);
    assert!(m.read_staleness.max <= 1, "{:?}", m.read_staleness);
    assert!(m.lda.tokens_per_s_per_worker > 0.0);

    // The log-likelihood improves on data from the LDA model.
    let ll = &m.lda.loglik;
    assert_eq!(ll.len(), iterations + 1);
    assert!(ll.windows(2).all(|p| p[0].iteration + 1 == p[1].iteration));
    let (first, last) = (ll[0].loglik_per_token, m.lda.final_loglik_per_token);
    assert!(
        last > first + 0.3,
        "log-likelihood per token {first} -> {last}"
    );
    assert_eq!(ll[iterations].loglik_per_token, last);

    // Outputs like the STRADS app, with the vocabulary's words.
    let out = dir.path().join("out");
    let topics = std::fs::read_to_string(out.join("topics.txt")).unwrap();
    assert_eq!(topics.lines().count(), 4);
    assert!(topics.contains("word"), "{topics}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(json["n_tokens"], n);
    assert_eq!(json["consistency"], "ssp");
    assert_eq!(json["staleness"], 1);
}

#[test]
fn ps_lda_rejects_a_malformed_docword_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("docword.txt");
    std::fs::write(&bad, "2\n3\n2\n1 1 2\n2 x 1\n").unwrap();
    let cfg = PsLdaSettings {
        docword: Some(bad.clone()),
        ..PsLdaSettings::default()
    };
    let e = run_local(cfg, 1, 1, Transport::Memory).unwrap_err();
    assert!(e.contains("docword.txt") && e.contains('5'), "{e}");

    // The CLI fails with the same message and a non-zero exit.
    let out = std::process::Command::new(PETREL)
        .args(["train", "ps-lda", "--out"])
        .arg(dir.path().join("out"))
        .arg("--docword")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("docword.txt") && stderr.contains("wordID"),
        "{stderr}"
    );
}

#[test]
fn ps_lda_rejects_a_vocabulary_of_the_wrong_length() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus();
    write_uci(dir.path(), &corpus);
    // A vocabulary one word short of the header's W.
    let vocab: String = (1..corpus.vocab_size)
        .map(|w| format!("word{w}\n"))
        .collect();
    std::fs::write(dir.path().join("vocab.txt"), vocab).unwrap();
    let cfg = PsLdaSettings {
        docword: Some(dir.path().join("docword.txt")),
        vocab: Some(dir.path().join("vocab.txt")),
        ..PsLdaSettings::default()
    };
    let e = run_local(cfg, 1, 1, Transport::Memory).unwrap_err();
    assert!(e.contains("vocab.txt") && e.contains("W = 200"), "{e}");
}

#[test]
fn bench_lda_compares_rotation_and_ps_in_one_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(PETREL)
        .args([
            "bench",
            "lda",
            "--topics",
            "4",
            "--vocab",
            "150",
            "--docs",
            "150",
            "--doc-length",
            "30",
            "--iterations",
            "4",
            "--workers",
            "2",
            "--staleness",
            "2",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("rotation") && stdout.contains("ps ssp s=2"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap();
    let j: serde_json::Value = serde_json::from_str(last).unwrap();
    for key in [
        "tokens_per_s_per_core",
        "final_loglik_per_token",
        "ps_tokens_per_s_per_core",
        "ps_final_loglik_per_token",
        "rotation_vs_ps_loglik_gap",
        "rotation_vs_ps_throughput",
    ] {
        assert!(
            j[key].as_f64().is_some_and(f64::is_finite),
            "{key} in {last}"
        );
    }
    assert_eq!(j["ps_staleness"], 2);
    assert!(j["ps_final_loglik_per_token"].as_f64() > j["ps_initial_loglik_per_token"].as_f64());
    let gap = j["final_loglik_per_token"].as_f64().unwrap()
        - j["ps_final_loglik_per_token"].as_f64().unwrap();
    assert!((gap - j["rotation_vs_ps_loglik_gap"].as_f64().unwrap()).abs() < 1e-12);
    assert!(dir.path().join("lda_loglik_vs_time.svg").exists());
    assert!(dir.path().join("ps-p2").join("topics.txt").exists());
}

/// The example TOML as separate processes (`petrel run`: two shards, one of them also the
/// monitor, two workers), on a UCI file through environment overrides. The monitor checks
/// the final table's count invariants before it succeeds.
#[test]
fn ps_lda_as_separate_processes_with_the_example_toml() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus();
    write_uci(dir.path(), &corpus);
    let out = dir.path().join("out");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ps_lda_cluster.toml");
    let iterations = 6;
    let run = std::process::Command::new(PETREL)
        .args(["run", example.to_str().unwrap(), "--timeout-s", "120"])
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .env(
            "PETREL_APP__PS_LDA__DOCWORD",
            dir.path().join("docword.txt"),
        )
        .env("PETREL_APP__PS_LDA__VOCAB", dir.path().join("vocab.txt"))
        .env("PETREL_APP__PS_LDA__OUT", &out)
        .env("PETREL_APP__PS_LDA__N_TOPICS", "4")
        .env("PETREL_APP__PS_LDA__ITERATIONS", iterations.to_string())
        .env("PETREL_APP__PS_LDA__CHUNK_TOKENS", "1000")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "petrel run failed:\n{err}");
    for node in ["shard-0", "shard-1", "worker-0", "worker-1"] {
        assert!(
            err.contains(&format!("node finished node={node}")),
            "{node} did not finish:\n{err}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    let n = corpus.n_tokens();
    assert_eq!(json["n_tokens"], n);
    assert_eq!(json["tokens_sampled"], (n * iterations) as u64);
    assert_eq!(json["clamped_entries"], 0);
    let ll = json["loglik"].as_array().unwrap();
    assert_eq!(ll.len(), iterations + 1);
    let first = ll[0]["loglik_per_token"].as_f64().unwrap();
    let last = json["final_loglik_per_token"].as_f64().unwrap();
    assert!(
        last > first + 0.3,
        "log-likelihood per token {first} -> {last}"
    );
    let topics = std::fs::read_to_string(out.join("topics.txt")).unwrap();
    assert_eq!(topics.lines().count(), 4);
}
