use super::*;
use crate::apps::lasso::Balance;
use crate::core::app::{Plan, Schedule, Step};
use crate::core::lda::LdaCluster;
use crate::kit::serial::Delivery;

fn small_job() -> LdaSettings {
    LdaSettings {
        synthetic: LdaCorpusParams {
            n_topics: 4,
            vocab_size: 60,
            n_docs: 40,
            doc_length: 30,
            alpha: 0.1,
            beta: 0.1,
            seed: 3,
        },
        n_topics: 4,
        iterations: 8,
        seed: 9,
        ..LdaSettings::default()
    }
}

fn drive(job: &LdaSettings, p: usize) -> (LdaScheduling, Corpus) {
    drive_with(job, p, Delivery::Late)
}

/// Both halves without actors, through the runtime's ring cores: the word-topic blocks
/// are handed from worker to worker in the order `delivery` picks.
fn drive_with(job: &LdaSettings, p: usize, delivery: Delivery) -> (LdaScheduling, Corpus) {
    let corpus = job.load().unwrap();
    let (sched, run) = crate::kit::run_serial::<LdaApp>(job, p, delivery).unwrap();
    assert!(
        run.held.iter().all(Vec::is_empty),
        "collect empties the ring"
    );
    // Count invariants on the collected tables: word-topic rows sum to the word
    // frequencies and the totals to their column sums.
    let freq = corpus.word_frequencies();
    let mut from_words = vec![0i64; job.n_topics];
    assert_eq!(sched.blocks().len(), p);
    for b in sched.blocks() {
        for (row, &w) in b.rows.iter().zip(&b.word_ids) {
            assert_eq!(row.total(), freq[w as usize] as u64);
            for &(t, n) in &row.entries {
                from_words[t as usize] += i64::from(n);
            }
        }
    }
    assert_eq!(from_words, sched.topic_totals());
    (sched, corpus)
}

#[test]
fn rotation_matches_the_serial_driver_exactly() {
    let job = small_job();
    let (sched, corpus) = drive(&job, 3);
    let mut serial = LdaCluster::new(&corpus, &job.config(3)).unwrap();
    for _ in 0..job.iterations {
        serial.iteration();
    }
    assert_eq!(serial.topic_totals, sched.topic_totals());
    let a = serial.log_likelihood_per_token();
    let b = sched.metrics().final_loglik_per_token;
    assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    let trace = &sched.metrics().loglik;
    assert_eq!(trace.len(), job.iterations + 1);
    assert!(trace.last().unwrap().loglik_per_token > trace[0].loglik_per_token);
    assert_eq!(
        sched.metrics().tokens_sampled as usize,
        corpus.n_tokens() * job.iterations
    );
}

#[test]
fn any_handoff_order_gives_the_same_counts() {
    let job = LdaSettings {
        iterations: 3,
        ..small_job()
    };
    let (late, _) = drive_with(&job, 3, Delivery::Late);
    for seed in [1, 2, 3] {
        let (shuffled, _) = drive_with(&job, 3, Delivery::Shuffled(seed));
        assert_eq!(late.topic_totals(), shuffled.topic_totals());
        assert_eq!(late.blocks(), shuffled.blocks());
        assert_eq!(late.metrics().loglik, shuffled.metrics().loglik);
    }
}

#[test]
fn scheduler_messages_carry_no_blocks() {
    let job = small_job();
    let corpus = job.load().unwrap();
    let layout = LdaLayout::new(&corpus, 2);
    let mut sched = LdaScheduling::new(&corpus, &layout, &job, 2).unwrap();
    let Step::Run(Plan::PerWorker(tasks)) = sched.schedule(0, 0) else {
        panic!("first round");
    };
    assert_eq!(
        tasks[1],
        LdaTask::Init {
            block: 1,
            pass_to: 0,
            report: false
        }
    );
    for t in &tasks {
        let mut out = Vec::new();
        petrel_messages::encode_body(t, &mut out).unwrap();
        assert!(out.len() < 64, "{t:?}: {} bytes", out.len());
    }
}

#[test]
fn outputs_list_top_words() {
    let job = small_job();
    let (sched, _) = drive(&job, 2);
    let dir = tempfile::tempdir().unwrap();
    let job = LdaSettings {
        top_words: 5,
        ..LdaSettings::default()
    };
    write_outputs(dir.path(), &sched, &job).unwrap();
    let topics = std::fs::read_to_string(dir.path().join("topics.txt")).unwrap();
    assert_eq!(topics.lines().count(), 4);
    assert!(
        topics.lines().all(|l| l.split(' ').count() == 2 + 5),
        "{topics}"
    );
}

/// The scheduler (whole corpus) and every worker (its share) digest the same corpus alike,
/// from a synthetic draw and from a file; another corpus digests differently, even one
/// that keeps every count (two word occurrences swapped between documents).
#[test]
fn scheduler_and_workers_digest_one_corpus_alike() {
    use crate::kit::serial::tests::common_digest;
    let dir = tempfile::tempdir().unwrap();
    let file_job = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        LdaSettings {
            docword: Some(path),
            ..small_job()
        }
    };
    let jobs = [
        small_job(),
        file_job("a.txt", "3\n4\n5\n1 1 2\n1 2 1\n2 3 4\n3 1 1\n3 4 2\n"),
        file_job(
            "b.txt",
            "3\n4\n6\n1 1 2\n1 3 1\n2 2 1\n2 3 3\n3 1 1\n3 4 2\n",
        ),
    ];
    let stats = |job: &LdaSettings| petrel_ml::data::CorpusStats::of(&job.load().unwrap());
    assert_eq!(
        stats(&jobs[1]),
        stats(&jobs[2]),
        "the swap keeps every count"
    );
    let digests = jobs.map(|job| common_digest::<LdaApp>(&job, 3));
    assert!(digests.iter().all(Option::is_some));
    assert!(digests[0] != digests[1] && digests[1] != digests[2] && digests[0] != digests[2]);
}

/// A job whose worker 0 samples four times as slowly, static or dynamic dealing.
fn straggling_job(balance: Balance, seed: u64) -> LdaSettings {
    LdaSettings {
        synthetic: LdaCorpusParams {
            n_docs: 200,
            doc_length: 60,
            ..small_job().synthetic
        },
        iterations: 16,
        seed,
        balance,
        straggler: Some(0),
        straggler_factor: 4.0,
        ..small_job()
    }
}

#[test]
fn dynamic_dealing_moves_documents_off_a_slow_worker_and_keeps_the_model() {
    let (fixed, corpus) = drive(&straggling_job(Balance::Static, 9), 2);
    let (dynamic, _) = drive(&straggling_job(Balance::Dynamic, 9), 2);
    assert_eq!(fixed.dealing(), None);
    let dealing = dynamic.dealing().unwrap();
    assert!(dealing.deals >= 1, "{dealing:?}");
    assert_eq!(dealing.rows.iter().sum::<u64>(), 200);
    assert!(dealing.rows[0] < dealing.rows[1], "{dealing:?}");
    // Documents move only between passes, with their topics: every token is still
    // sampled once a pass (and `drive` checked the collected counts).
    let (m_fixed, m_dynamic) = (fixed.metrics(), dynamic.metrics());
    assert_eq!(m_dynamic.tokens_sampled, m_fixed.tokens_sampled);
    assert_eq!(m_dynamic.tokens_sampled as usize, corpus.n_tokens() * 16);
    assert_eq!(m_dynamic.rounds, m_fixed.rounds + dealing.deals);
    // A re-deal changes which generator draws which token, so the chains part; the
    // final log-likelihood per token stays within 2 % (seeds of the static run spread
    // some 0.5 % on this corpus; the untrained model is over 20 % away).
    let (a, b) = (
        m_fixed.final_loglik_per_token,
        m_dynamic.final_loglik_per_token,
    );
    let start = m_fixed.loglik[0].loglik_per_token;
    assert!(((a - b) / a).abs() < 0.02, "static {a}, dynamic {b}");
    assert!(
        ((start - a) / a).abs() > 0.2,
        "untrained {start}, trained {a}"
    );
}

#[test]
fn dynamic_dealing_refuses_checkpoints_and_a_straggler_factor_below_one() {
    let dynamic = straggling_job(Balance::Dynamic, 1);
    dynamic.validate().unwrap();
    let refused = [
        (
            LdaSettings {
                checkpoint_dir: Some("ck".into()),
                ..dynamic.clone()
            },
            "checkpoint_dir",
        ),
        (
            LdaSettings {
                straggler_factor: 0.5,
                ..dynamic.clone()
            },
            "straggler_factor",
        ),
    ];
    for (job, key) in refused {
        let err = job.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{err}");
    }
    // Static dealing checkpoints as before.
    LdaSettings {
        checkpoint_dir: Some("ck".into()),
        ..straggling_job(Balance::Static, 1)
    }
    .validate()
    .unwrap();
}
