//! A change of the LDA workers re-forms the ring: both halves driven as the actor shells
//! drive them ([`crate::apps::ring_changes`]), with a join and a leave, against the fixed
//! run.

use super::*;
use crate::apps::ring_changes::{self, change};
use crate::core::app::RingPush;
use crate::core::roster::Reshape;

fn job() -> LdaSettings {
    LdaSettings {
        synthetic: LdaCorpusParams {
            n_topics: 4,
            vocab_size: 80,
            n_docs: 60,
            doc_length: 40,
            alpha: 0.1,
            beta: 0.1,
            seed: 5,
        },
        n_topics: 4,
        iterations: 10,
        seed: 2,
        balance: Balance::Dynamic,
        ..LdaSettings::default()
    }
}

fn run(job: &LdaSettings, changes: Vec<(u64, Reshape)>, withdrawn: bool) -> LdaScheduling {
    ring_changes::run_with::<LdaApp, LdaWorkerApp>(job, changes, withdrawn)
}

/// The collected word-topic counts are the corpus's tokens, each counted once, and the
/// topic totals their column sums; every token was sampled once a pass.
fn assert_counts_exact(job: &LdaSettings, sched: &LdaScheduling) {
    let corpus = job.load().unwrap();
    let freq = corpus.word_frequencies();
    let mut from_words = vec![0i64; job.n_topics];
    let mut words = 0;
    for b in sched.blocks() {
        for (row, &w) in b.rows.iter().zip(&b.word_ids) {
            assert_eq!(row.total(), freq[w as usize] as u64, "word {w}");
            words += 1;
            for &(t, n) in &row.entries {
                from_words[t as usize] += i64::from(n);
            }
        }
    }
    assert_eq!(words, corpus.vocab_size);
    assert_eq!(from_words, sched.topic_totals());
    let m = sched.metrics();
    assert_eq!(
        m.tokens_sampled as usize,
        job.iterations * corpus.n_tokens()
    );
}

#[test]
fn a_join_and_a_leave_re_deal_the_documents_and_keep_the_counts_exact() {
    let job = job();
    let fixed = run(&job, Vec::new(), false);
    let join = change(&["w0", "w1", "w2"], 3, &[false, false, true]);
    let leave = change(&["w1", "w2", "w0"], 2, &[false, false, false]);
    // Announced mid-pass: each waits for the next pass boundary.
    let elastic = run(&job, vec![(3, join), (13, leave)], false);
    assert_counts_exact(&job, &fixed);
    assert_counts_exact(&job, &elastic);
    let dealing = elastic.dealing().unwrap();
    assert_eq!(dealing.changes.len(), 2);
    assert_eq!(dealing.changes[0].joined, vec!["w2".to_string()]);
    assert_eq!(dealing.changes[1].left, vec!["w0".to_string()]);
    let staying = vec!["w1".to_string(), "w2".to_string()];
    assert_eq!(dealing.changes[1].workers, staying);
    // Every document dealt: the two workers' rows are the corpus's documents.
    assert_eq!(dealing.rows.iter().sum::<u64>(), 60);
    assert_eq!(elastic.blocks().len(), 2);
    assert_eq!(elastic.metrics().workers, 2);
    // Another chain after the re-deal: the log-likelihood of the fixed run within 2e-2.
    let (f, e) = (fixed.metrics(), elastic.metrics());
    assert_eq!(f.loglik.len(), e.loglik.len());
    let rel = (f.final_loglik_per_token - e.final_loglik_per_token).abs()
        / f.final_loglik_per_token.abs();
    assert!(
        rel < 2e-2,
        "{} vs {}",
        f.final_loglik_per_token,
        e.final_loglik_per_token
    );
}

/// A standby worker loads no documents (the change that admits it deals them), and
/// agrees with the others on the corpus.
#[test]
fn a_joiner_holds_no_documents_until_its_change() {
    let job = job();
    let shape = crate::kit::JobShape {
        workers: 3,
        schedulers: 1,
    };
    let joiner = LdaApp::joiner(&job, 2, &shape).unwrap();
    let starting = LdaApp::worker(&job, 2, &shape).unwrap();
    assert!(joiner.logic.core().doc_ids().is_empty());
    assert!(!starting.logic.core().doc_ids().is_empty());
    assert_eq!(joiner.data_digest, starting.data_digest);
}

#[test]
fn a_join_before_the_initial_counts_deals_the_random_assignments() {
    let job = job();
    let join = change(&["w0", "w1", "w2"], 3, &[false, false, true]);
    let joined = run(&job, vec![(0, join)], false);
    assert_counts_exact(&job, &joined);
    assert_eq!(joined.blocks().len(), 3);
    // Round 0 gathers the (empty) blocks, round 1 re-forms the ring.
    assert_eq!(joined.dealing().unwrap().changes[0].round, 1);
}

#[test]
fn a_change_that_goes_away_after_the_gathering_re_forms_the_same_ring() {
    let job = job();
    let join = change(&["w0", "w1", "w2"], 3, &[false, false, true]);
    let same = run(&job, vec![(2, join)], true);
    assert_counts_exact(&job, &same);
    assert_eq!(same.dealing().unwrap().changes, Vec::new());
    assert_eq!(same.metrics().workers, 2);
}

#[test]
fn a_change_waits_for_a_pass_boundary_and_a_leaver_holds_nothing() {
    let job = job();
    let mut fixed = job.clone();
    fixed.balance = Balance::Static;
    // Round 0 starts the first pass: a boundary.
    let tasks = ring_changes::first_change_round::<LdaApp>(&job, &fixed);
    assert!(matches!(
        tasks[..],
        [LdaTask::Collect { block: 0 }, LdaTask::Collect { block: 1 }]
    ));
    // A leaver of an epoch releases every document and holds no block and no work.
    let corpus = job.load().unwrap();
    let layout = LdaLayout::new(&corpus, 1);
    let model = LdaEpoch {
        doc_owner: layout.docs.doc_worker.clone(),
        ranges: vec![(0, 60)],
        blocks: layout.vocabulary.empty_blocks(),
    };
    let epoch = LdaTask::Ring(ring_changes::ring_of_w1().epoch(model));
    let mut w = ring_changes::worker::<LdaApp, LdaWorkerApp>(&job, 0, 2);
    assert!(w.holds_work());
    let (released, held) = w.rering(3, &epoch, None).unwrap();
    let LdaPartial::Released(docs) = released else {
        panic!("documents released")
    };
    assert!(!docs.is_empty() && held.is_empty() && !w.holds_work());
    // The one staying worker holds the one block and takes them.
    let mut w = ring_changes::worker::<LdaApp, LdaWorkerApp>(&job, 1, 2);
    let (_, held) = w.rering(3, &epoch, Some(0)).unwrap();
    assert_eq!(held.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![0]);
    let commit = LdaCommit {
        topic_totals: None,
        moved: docs,
    };
    w.commit(3, &commit).unwrap();
    assert_eq!(w.core().doc_ids().len(), 60);
}
