use super::*;
use crate::core::balance::DealtShare;
use crate::core::lda::LdaCluster;
use crate::core::lda::tests::corpus;
use crate::core::mf::RotationSchedule;
use crate::core::split_evenly;
use petrel_ml::topic::LdaConfig;
use std::collections::BTreeMap;

/// Every (word, topic) count of the blocks equals the current assignments' count, and
/// every document is held exactly once.
fn assert_counts_are_the_assignments(cluster: &LdaCluster, n_docs: usize) {
    let mut from_tokens: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    let mut held = vec![0; n_docs];
    for worker in &cluster.workers {
        for ((id, words), topics) in worker
            .doc_ids
            .iter()
            .zip(&worker.docs)
            .zip(&worker.assignments)
        {
            held[*id as usize] += 1;
            for (&w, &t) in words.iter().zip(topics) {
                *from_tokens.entry((w, t)).or_default() += 1;
            }
        }
    }
    assert!(held.iter().all(|&n| n == 1), "documents held {held:?}");
    let mut from_blocks = BTreeMap::new();
    for block in &cluster.blocks {
        for (&w, row) in block.word_ids.iter().zip(&block.rows) {
            for &(t, n) in &row.entries {
                from_blocks.insert((w, t), n);
            }
        }
    }
    assert_eq!(from_blocks, from_tokens);
}

#[test]
fn a_join_and_a_leave_keep_the_counts_those_of_the_assignments() {
    let corpus = corpus();
    let frequencies = corpus.word_frequencies();
    let config = LdaConfig {
        n_topics: 5,
        alpha: 0.1,
        beta: 0.1,
        n_workers: 2,
        iterations: 0,
        seed: 3,
    };
    let mut cluster = LdaCluster::new(&corpus, &config).unwrap();
    cluster.iteration();
    // The static split the documents' deal order comes from.
    let lengths: Vec<usize> = corpus.docs.iter().map(Vec::len).collect();
    let owner = petrel_ml::topic::balanced_buckets(&lengths, 2);
    // A joiner built with documents of its own (a three-worker share) it never sampled.
    let theirs = (0..10)
        .map(|d| (d, corpus.docs[d as usize].clone()))
        .collect();
    let joiner = LdaWorker::new(2, theirs, &cluster.vocabulary, &config).unwrap();
    // Worker 0 leaves, worker 1 stays (now 0), the joiner is 1: the vocabulary in two
    // new blocks, the documents dealt evenly over them.
    let rows = rows_by_word(cluster.blocks.clone(), frequencies.len()).unwrap();
    let blocks = split_rows(&rows, &frequencies, 2);
    let vocabulary = VocabularyPartition::of_blocks(&blocks).unwrap();
    assert_eq!(vocabulary, VocabularyPartition::balanced(&frequencies, 2));
    let ranges = split_evenly(corpus.docs.len(), 2);
    let share = |i: usize| {
        let mut s = DealtShare::of(&owner, 0);
        s.deal(ranges[i].start as u64, ranges[i].end as u64)
            .unwrap();
        s
    };
    let mut leaver = cluster.workers.remove(0);
    let staying = cluster.workers.remove(0);
    let mut moved = leaver.release(|_| false, &cluster.vocabulary);
    assert!(leaver.doc_ids().is_empty());
    let mut workers = vec![staying, joiner];
    let (s0, s1) = (share(0), share(1));
    moved.extend(workers[0].rering(0, false, |d| s0.owns(d), &vocabulary));
    moved.extend(workers[1].rering(1, true, |d| s1.owns(d), &vocabulary));
    let (mine0, mine1): (Vec<MovedDoc>, Vec<MovedDoc>) =
        moved.into_iter().partition(|d| s0.owns(d.id));
    workers[0].adopt(mine0, &vocabulary).unwrap();
    workers[1].adopt(mine1, &vocabulary).unwrap();
    cluster.workers = workers;
    cluster.blocks = blocks;
    cluster.vocabulary = vocabulary;
    cluster.schedule = RotationSchedule { p: 2 };
    cluster.broadcast_totals();
    assert_counts_are_the_assignments(&cluster, corpus.docs.len());
    cluster.check_invariants(&frequencies).unwrap();
    // Every document of a range is with its worker, and sampling goes on exactly.
    for (w, worker) in cluster.workers.iter().enumerate() {
        assert_eq!(worker.worker, w);
        assert_eq!(worker.doc_ids().len(), ranges[w].len());
    }
    let tokens: u64 = (0..2)
        .flat_map(|b| cluster.workers.iter().map(move |w| w.tokens_in_block(b)))
        .sum();
    assert_eq!(tokens as usize, corpus.n_tokens());
    let before = cluster.log_likelihood_per_token();
    cluster.iteration();
    cluster.iteration();
    assert_counts_are_the_assignments(&cluster, corpus.docs.len());
    cluster.check_invariants(&frequencies).unwrap();
    assert!(cluster.log_likelihood_per_token().is_finite() && before.is_finite());
}

#[test]
fn blocks_that_miss_a_word_or_hold_one_twice_are_refused() {
    let frequencies = [3, 1, 2, 2];
    let vocabulary = VocabularyPartition::balanced(&frequencies, 2);
    let mut blocks = vocabulary.empty_blocks();
    blocks[0].rows[0].increment(1);
    let rows = rows_by_word(blocks.clone(), 4).unwrap();
    assert_eq!(VocabularyPartition::of_blocks(&blocks).unwrap(), vocabulary);
    let three = split_rows(&rows, &frequencies, 3);
    assert_eq!(three.len(), 3);
    assert_eq!(three.iter().map(|b| b.word_ids.len()).sum::<usize>(), 4);
    // The counted word keeps its row in its new block.
    let w = blocks[0].word_ids[0];
    let row = three.iter().find_map(|b| {
        let at = b.word_ids.iter().position(|&x| x == w)?;
        Some(b.rows[at].clone())
    });
    assert_eq!(row, Some(blocks[0].rows[0].clone()));
    let mut missing = blocks.clone();
    missing[0].word_ids.pop();
    missing[0].rows.pop();
    assert!(rows_by_word(missing, 4).is_err());
    let mut twice = blocks.clone();
    let first = twice[1].word_ids[0];
    twice[1].word_ids.push(first);
    twice[1].rows.push(TopicCounts::default());
    assert!(rows_by_word(twice.clone(), 4).is_err());
    assert!(VocabularyPartition::of_blocks(&twice).is_err());
    assert!(
        rows_by_word(blocks, 3).is_err(),
        "a word beyond the vocabulary"
    );
}
