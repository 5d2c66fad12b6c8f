use super::*;
use petrel_ml::data::synthetic::{LdaCorpusParams, lda_corpus};
use std::collections::HashMap;

fn config(iterations: usize) -> LdaConfig {
    LdaConfig {
        n_topics: 5,
        alpha: 0.1,
        beta: 0.1,
        n_workers: 2,
        iterations,
        seed: 4,
    }
}

/// The worker's own word-topic counts `(global word, counts)`, from its assignments.
fn own_word_counts(w: &PsLdaWorker) -> Vec<(u32, TopicCounts)> {
    let mut rows = vec![TopicCounts::default(); w.words.len()];
    for (ws, ts) in w.docs.iter().zip(&w.assignments) {
        for (&l, &t) in ws.iter().zip(ts) {
            rows[l as usize].increment(t);
        }
    }
    w.words.iter().copied().zip(rows).collect()
}

fn corpus() -> petrel_ml::data::Corpus {
    lda_corpus(&LdaCorpusParams {
        n_topics: 5,
        vocab_size: 120,
        n_docs: 120,
        doc_length: 60,
        alpha: 0.1,
        beta: 0.05,
        seed: 17,
    })
    .unwrap()
    .corpus
}

fn split(c: &petrel_ml::data::Corpus, p: usize) -> Vec<Vec<(u32, Vec<u32>)>> {
    let mut out = vec![Vec::new(); p];
    for (d, doc) in c.docs.iter().enumerate() {
        out[d % p].push((d as u32, doc.clone()));
    }
    out
}

#[test]
fn stale_data_parallel_sampling_improves_log_likelihood() {
    let c = corpus();
    for staleness in [0, 2] {
        let (trace, table) = simulate(split(&c, 2), c.vocab_size, &config(20), staleness).unwrap();
        let (first, last) = (trace[0], *trace.last().unwrap());
        assert!(
            last > first + 0.5,
            "staleness {staleness}: ll/token {first} -> {last}"
        );
        // simulate checks the invariants after every clock; check the end once more.
        let t = FinalTable::check(|r| table.get(r as usize), &c.word_frequencies(), 5).unwrap();
        assert_eq!(t.topic_totals.iter().sum::<i64>(), c.n_tokens() as i64);
    }
}

#[test]
fn deltas_are_exact_even_against_an_empty_view() {
    let c = corpus();
    let docs = split(&c, 1).pop().unwrap();
    let mut w = PsLdaWorker::new(0, docs, c.vocab_size, &config(0)).unwrap();
    let mut table: Vec<Row> = vec![Row::Sparse(Vec::new()); c.vocab_size + 1];
    let mut apply = |deltas: Vec<(RowId, Row)>| {
        for (r, d) in deltas {
            table[r.0 as usize].add(&d);
        }
    };
    let init = w.take_initial_deltas();
    let sum: f32 = init.iter().map(|(_, d)| d.l1_norm()).sum();
    assert_eq!(sum as usize, 2 * c.n_tokens(), "words + totals");
    apply(init);
    // A view with every count zero (maximally stale): the sampler clamps, the deltas
    // still describe the worker's true changes.
    let zeros = vec![Row::Sparse(Vec::new()); w.words.len() + 1];
    for _ in 0..3 {
        // Two takes from one view: the second must report only the later changes.
        let mut view = w.view(&zeros).unwrap();
        let half = w.docs.len() / 2;
        let first = w.sweep(0..half, &mut view);
        apply(w.take_deltas(&mut view));
        let second = w.sweep(half..w.docs.len(), &mut view);
        apply(w.take_deltas(&mut view));
        assert_eq!(first + second, c.n_tokens() as u64);
    }
    w.check_doc_counts().unwrap();
    let t = FinalTable::check(|r| table.get(r as usize), &c.word_frequencies(), 5).unwrap();
    for (word, counts) in own_word_counts(&w) {
        let mut a = counts.entries.clone();
        let mut b = t.word_topic[word as usize].entries.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "word {word}");
    }
    assert!(
        w.take_initial_deltas().is_empty(),
        "nothing pending after a take"
    );
}

#[test]
fn a_worker_restored_from_its_saved_state_samples_exactly_as_the_original() {
    let c = corpus();
    let docs = split(&c, 2).swap_remove(1);
    let mut a = PsLdaWorker::new(1, docs.clone(), c.vocab_size, &config(0)).unwrap();
    let mut table: Vec<Row> = vec![Row::Sparse(Vec::new()); c.vocab_size + 1];
    for (r, d) in a.take_initial_deltas() {
        table[r.0 as usize].add(&d);
    }
    let read = |w: &PsLdaWorker, table: &[Row]| -> Vec<Row> {
        w.row_ids()
            .iter()
            .map(|r| table[r.0 as usize].clone())
            .collect()
    };
    let mut view = a.view(&read(&a, &table)).unwrap();
    a.sweep(0..a.docs.len(), &mut view);
    for (r, d) in a.take_deltas(&mut view) {
        table[r.0 as usize].add(&d);
    }
    let saved = a.export_state().unwrap();
    let mut b = PsLdaWorker::new(1, docs.clone(), c.vocab_size, &config(0)).unwrap();
    b.import_state(saved.clone()).unwrap();
    assert!(
        b.take_initial_deltas().is_empty(),
        "the shards hold them already"
    );
    for w in [&mut a, &mut b] {
        let mut view = w.view(&read(w, &table)).unwrap();
        w.sweep(0..w.docs.len(), &mut view);
        let _ = w.take_deltas(&mut view);
    }
    assert_eq!(a.export_state().unwrap(), b.export_state().unwrap());
    assert_eq!(a.doc_log_likelihood(), b.doc_log_likelihood());
    // Another worker's state, or pending changes, are refused.
    let mut other =
        PsLdaWorker::new(0, split(&c, 2).swap_remove(0), c.vocab_size, &config(0)).unwrap();
    assert!(other.import_state(saved).is_err());
    assert!(
        other.export_state().is_err(),
        "initial counts not taken yet"
    );
}

#[test]
fn view_clamps_negative_and_fractional_counts() {
    let rows = vec![
        Row::Sparse(vec![(0, -2.0), (1, 3.0)]),
        Row::Dense(vec![0.0, 1.4, 2.0]),
        Row::Sparse(vec![(0, 5.0), (2, -1.0)]),
    ];
    let v = WordTopicView::from_rows(&rows, 2, 3).unwrap();
    assert_eq!(v.rows[0].entries, vec![(1, 3)]);
    assert_eq!(v.rows[1].entries, vec![(1, 1), (2, 2)]);
    assert_eq!(v.totals, vec![5, 0, 0]);
    assert_eq!(v.clamped, 3);
    let bad = vec![Row::Sparse(vec![(7, 1.0)]), Row::Sparse(vec![])];
    assert!(matches!(
        WordTopicView::from_rows(&bad, 1, 3),
        Err(PsCoreError::BadRow { row: 0, .. })
    ));
    assert!(matches!(
        WordTopicView::from_rows(&bad[..1], 1, 3),
        Err(PsCoreError::RowCount(1, 1))
    ));
}

#[test]
fn final_check_rejects_broken_tables() {
    // Two words with 2 and 1 tokens, K = 2.
    let freq = [2usize, 1];
    let good = [
        Row::Sparse(vec![(0, 1.0), (1, 1.0)]),
        Row::Sparse(vec![(1, 1.0)]),
        Row::Sparse(vec![(0, 1.0), (1, 2.0)]),
    ];
    let t = FinalTable::check(|r| good.get(r as usize), &freq, 2).unwrap();
    assert_eq!(t.topic_totals, vec![1, 2]);
    let mut negative = good.clone();
    negative[0] = Row::Sparse(vec![(0, 3.0), (1, -1.0)]);
    let e = FinalTable::check(|r| negative.get(r as usize), &freq, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a non-negative integer"), "{e}");
    let mut fractional = good.clone();
    fractional[1] = Row::Sparse(vec![(1, 0.5), (0, 0.5)]);
    assert!(FinalTable::check(|r| fractional.get(r as usize), &freq, 2).is_err());
    let mut totals = good.clone();
    totals[2] = Row::Sparse(vec![(0, 2.0), (1, 1.0)]);
    let e = FinalTable::check(|r| totals.get(r as usize), &freq, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("column sums"), "{e}");
    let mut lost = good.clone();
    lost[1] = Row::Sparse(vec![]);
    let e = FinalTable::check(|r| lost.get(r as usize), &freq, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("word 1"), "{e}");
}

#[test]
fn refuses_corpora_beyond_exact_f32_counts() {
    // Why 2^24: the next integer is not representable, so a count would stop moving.
    let max = MAX_TOKENS as f32;
    assert_eq!(max + 1.0, max);
    assert_eq!((max - 1.0) + 1.0, max);
    assert!(check_corpus(MAX_TOKENS as usize, 3, [&[0, 2][..]]).is_ok());
    let e = check_corpus(MAX_TOKENS as usize + 1, 3, []).unwrap_err();
    assert!(matches!(e, PsCoreError::TooManyTokens { .. }));
    assert!(e.to_string().contains("2^24"), "{e}");
    assert!(matches!(
        check_corpus(2, 3, [&[0, 3][..]]),
        Err(PsCoreError::WordOutOfRange {
            word: 3,
            vocab_size: 3
        })
    ));
}

#[test]
fn parts_and_chunks_cover_the_documents() {
    let c = corpus();
    let docs = split(&c, 1).pop().unwrap();
    let w = PsLdaWorker::new(0, docs, c.vocab_size, &config(0)).unwrap();
    let parts: Vec<_> = (0..3).map(|p| w.part(p, 3)).collect();
    assert_eq!(parts[0].start, 0);
    assert_eq!(parts[2].end, w.docs.len());
    assert!(parts.windows(2).all(|p| p[0].end == p[1].start));
    let chunks = w.doc_chunks(parts[1].clone(), 200);
    assert_eq!(chunks.first().unwrap().start, parts[1].start);
    assert_eq!(chunks.last().unwrap().end, parts[1].end);
    assert!(chunks.windows(2).all(|p| p[0].end == p[1].start));
    assert!(chunks.len() >= 10, "{} chunks", chunks.len());
}

/// Serial data-parallel simulation (the reference for the cluster app): per clock every
/// worker sweeps its documents against the table of `staleness` clocks ago plus its own
/// changes. Returns the log-likelihood per token per iteration and the final rows.
pub fn simulate(
    docs_per_worker: Vec<Vec<(u32, Vec<u32>)>>,
    vocab_size: usize,
    config: &LdaConfig,
    staleness: usize,
) -> Result<(Vec<f64>, Vec<Row>), PsCoreError> {
    let mut workers = docs_per_worker
        .into_iter()
        .enumerate()
        .map(|(w, d)| PsLdaWorker::new(w, d, vocab_size, config))
        .collect::<Result<Vec<_>, _>>()?;
    let n_tokens: usize = workers.iter().flat_map(|w| &w.docs).map(Vec::len).sum();
    let freq = word_frequencies(&workers, vocab_size);
    let mut table: Vec<Row> = vec![Row::Sparse(Vec::new()); vocab_size + 1];
    for w in &mut workers {
        for (r, d) in w.take_initial_deltas() {
            table[r.0 as usize].add(&d);
        }
    }
    // history[c]: the table once every worker's clock c - 1 was applied; own[w][c]: worker
    // w's deltas of clock c (applied between history[c] and history[c + 1]).
    let mut history = vec![table.clone()];
    let mut own: Vec<Vec<Vec<(RowId, Row)>>> = vec![Vec::new(); workers.len()];
    let log_likelihood = |table: &[Row], workers: &[PsLdaWorker]| -> Result<f64, PsCoreError> {
        let t = FinalTable::check(|r| table.get(r as usize), &freq, config.n_topics)?;
        let doc: f64 = workers.iter().map(PsLdaWorker::doc_log_likelihood).sum();
        Ok((t.word_log_likelihood(config.beta) + doc) / n_tokens.max(1) as f64)
    };
    let mut trace = vec![log_likelihood(&table, &workers)?];
    for _ in 0..config.iterations {
        let h = history.len().saturating_sub(staleness + 1);
        let mut flushed = Vec::new();
        for (w, worker) in workers.iter_mut().enumerate() {
            let mut rows: Vec<Row> = worker
                .row_ids()
                .iter()
                .map(|r| history[h][r.0 as usize].clone())
                .collect();
            let index: std::collections::HashMap<RowId, usize> = worker
                .row_ids()
                .into_iter()
                .enumerate()
                .map(|(i, r)| (r, i))
                .collect();
            for (r, d) in own[w].iter().skip(h).flatten() {
                if let Some(&i) = index.get(r) {
                    rows[i].add(d);
                }
            }
            let mut view = worker.view(&rows)?;
            worker.sweep(0..worker.docs.len(), &mut view);
            let deltas = worker.take_deltas(&mut view);
            flushed.extend(deltas.iter().cloned());
            own[w].push(deltas);
        }
        for (r, d) in flushed {
            table[r.0 as usize].add(&d);
        }
        history.push(table.clone());
        trace.push(log_likelihood(&table, &workers)?);
    }
    Ok((trace, table))
}

fn word_frequencies(workers: &[PsLdaWorker], vocab_size: usize) -> Vec<usize> {
    let mut freq = vec![0usize; vocab_size];
    for w in workers {
        for d in &w.docs {
            for &l in d {
                freq[w.words[l as usize] as usize] += 1;
            }
        }
    }
    freq
}

/// Adds `deltas` to `table`.
fn apply(table: &mut [Row], deltas: Vec<(RowId, Row)>) {
    for (r, d) in deltas {
        table[r.0 as usize].add(&d);
    }
}

/// One sweep of every worker against the exact table, its changes applied.
fn sweep_all(workers: &mut [PsLdaWorker], table: &mut [Row]) {
    for w in workers {
        let rows: Vec<Row> = (w.row_ids().iter())
            .map(|r| table[r.0 as usize].clone())
            .collect();
        let mut view = w.view(&rows).unwrap();
        w.sweep(0..w.docs.len(), &mut view);
        apply(table, w.take_deltas(&mut view));
    }
}

/// The table holds exactly the sum of the workers' assignments, and every document is
/// held by exactly one of them (the total token count is the corpus's).
fn assert_table_is_the_assignments(
    c: &petrel_ml::data::Corpus,
    workers: &[PsLdaWorker],
    table: &[Row],
) {
    let t = FinalTable::check(|r| table.get(r as usize), &c.word_frequencies(), 5).unwrap();
    assert_eq!(t.topic_totals.iter().sum::<i64>(), c.n_tokens() as i64);
    let mut sum = vec![vec![0u32; 5]; c.vocab_size];
    for w in workers {
        w.check_doc_counts().unwrap();
        for (word, counts) in own_word_counts(w) {
            for (t, n) in counts.entries {
                sum[word as usize][t as usize] += n;
            }
        }
    }
    for (word, row) in t.word_topic.iter().enumerate() {
        assert_eq!(
            per_topic(row, 5),
            sum[word].iter().map(|&n| i64::from(n)).collect::<Vec<_>>()
        );
    }
    let mut held: Vec<u32> = workers.iter().flat_map(|w| w.doc_ids().to_vec()).collect();
    held.sort_unstable();
    assert_eq!(held, (0..c.docs.len() as u32).collect::<Vec<_>>());
}

/// A join (members 0, 1 -> 0, 1, 2) and a leave (-> 1, 2) between sweeps: each worker
/// retakes its share by rank, the leaver gives every document up, and the shared counts
/// equal the sum of the current assignments after each change; kept documents keep their
/// topics, and the sampler goes on from there.
#[test]
fn documents_follow_the_members_and_the_counts_stay_the_assignments() {
    let c = corpus();
    let cfg = config(0);
    let mut table: Vec<Row> = vec![Row::Sparse(Vec::new()); c.vocab_size + 1];
    let mut workers: Vec<PsLdaWorker> = (0..2u32)
        .map(|w| {
            let docs = share_of(&c, &[0, 1], w);
            PsLdaWorker::new(w as usize, docs, c.vocab_size, &cfg).unwrap()
        })
        .collect();
    for w in &mut workers {
        let init = w.take_initial_deltas();
        apply(&mut table, init);
    }
    sweep_all(&mut workers, &mut table);
    assert_table_is_the_assignments(&c, &workers, &table);
    // Worker 2 joins: it starts with its share; 0 and 1 give up theirs of it.
    let mut joiner = PsLdaWorker::new(2, share_of(&c, &[0, 1, 2], 2), c.vocab_size, &cfg).unwrap();
    apply(&mut table, joiner.take_initial_deltas());
    for w in &mut workers {
        let before: HashMap<u32, Vec<u32>> = w
            .doc_ids()
            .iter()
            .copied()
            .zip(w.assignments.clone())
            .collect();
        let n_before = before.len();
        let r = w.retake(share_of(&c, &[0, 1, 2], w.worker as u32)).unwrap();
        assert_eq!(r.kept + r.dropped, n_before);
        assert_eq!(r.kept + r.drawn, w.doc_ids().len());
        assert!(r.dropped > 0, "worker {} gave nothing up", w.worker);
        for (id, topics) in w.doc_ids().iter().zip(&w.assignments) {
            if let Some(old) = before.get(id) {
                assert_eq!(old, topics, "document {id} kept its topics");
            }
        }
        apply(&mut table, r.deltas);
    }
    workers.push(joiner);
    assert_table_is_the_assignments(&c, &workers, &table);
    sweep_all(&mut workers, &mut table);
    assert_table_is_the_assignments(&c, &workers, &table);
    // Worker 0 leaves: it gives everything up; 1 and 2 take the documents of two.
    let r = workers[0].retake(Vec::new()).unwrap();
    assert_eq!((r.kept, r.drawn), (0, 0));
    apply(&mut table, r.deltas);
    assert!(workers[0].row_ids().len() == 1, "only the totals row left");
    let mut left = workers.split_off(1);
    for w in &mut left {
        let r = w.retake(share_of(&c, &[1, 2], w.worker as u32)).unwrap();
        apply(&mut table, r.deltas);
    }
    assert_table_is_the_assignments(&c, &left, &table);
    for _ in 0..2 {
        sweep_all(&mut left, &mut table);
    }
    assert_table_is_the_assignments(&c, &left, &table);
    // A retake to the same share moves nothing and sends nothing.
    let same = share_of(&c, &[1, 2], 1);
    let r = left[0].retake(same).unwrap();
    assert_eq!((r.dropped, r.drawn), (0, 0));
    assert!(r.deltas.is_empty());
    // Documents given up before their initial counts were sent cancel out: nothing to send.
    let mut late = PsLdaWorker::new(3, share_of(&c, &[1, 2, 3], 3), c.vocab_size, &cfg).unwrap();
    let r = late.retake(Vec::new()).unwrap();
    assert!(r.dropped > 0 && r.deltas.is_empty(), "{r:?}");
}

#[test]
fn a_worker_not_among_the_members_takes_no_documents() {
    let c = corpus();
    assert!(share_of(&c, &[0, 2], 1).is_empty());
    let n: usize = [0, 2].iter().map(|&w| share_of(&c, &[0, 2], w).len()).sum();
    assert_eq!(n, c.docs.len());
}
