//! Documents that follow the workers: after a membership change a worker's documents are
//! its share by rank among the current workers ([`share_of`]), and [`PsLdaWorker::retake`]
//! moves it to that share.
//!
//! A moved document restarts: the worker that gives it up subtracts its counts (a -1 per
//! token), the one that takes it draws fresh topics and adds them (a +1 per token). Each
//! worker's contribution to the shared counts is thus always the sum of its own current
//! assignments, whichever order the workers see the change in, so no hand-over between
//! the two has to be ordered; what a move costs is the document's chain, which restarts
//! against word-topic counts the other documents still hold.

use std::collections::HashMap;

use rand::Rng;

use super::{OwnDeltas, PsLdaWorker, check_corpus};
use crate::core::error::PsCoreError;
use crate::core::types::{Row, RowId};
use petrel_ml::data::Corpus;
use petrel_ml::topic::{DocumentPartition, TopicCounts};

/// The documents `(global id, tokens)` of worker `me` among `members` (the current workers'
/// ids, sorted): the balanced split of the corpus over `members.len()` workers, part `rank`
/// (`me`'s position; an id not among them takes none).
pub fn share_of(corpus: &Corpus, members: &[u32], me: u32) -> Vec<(u32, Vec<u32>)> {
    match members.iter().position(|&m| m == me) {
        Some(rank) => DocumentPartition::balanced(corpus, members.len()).docs_of(corpus, rank),
        None => Vec::new(),
    }
}

/// What [`PsLdaWorker::retake`] did, and the count changes to send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retaken {
    /// Documents kept with their assignments.
    pub kept: usize,
    /// Documents given up (their counts subtracted).
    pub dropped: usize,
    /// Documents taken with fresh assignments (their counts added).
    pub drawn: usize,
    /// The changes, one sparse delta per row per half (subtractions, then additions), plus
    /// any change not sent before.
    pub deltas: Vec<(RowId, Row)>,
}

impl PsLdaWorker {
    /// Makes `docs` (`(global id, tokens)`) this worker's documents: those it holds already
    /// keep their assignments, those it no longer holds are subtracted, new ones draw
    /// fresh topics. An empty `docs` gives every document up (a leaving worker).
    pub fn retake(&mut self, docs: Vec<(u32, Vec<u32>)>) -> Result<Retaken, PsCoreError> {
        let n_tokens: usize = docs.iter().map(|d| d.1.len()).sum();
        check_corpus(
            n_tokens,
            self.vocab_size,
            docs.iter().map(|d| d.1.as_slice()),
        )?;
        let mut held: HashMap<u32, (Vec<u32>, TopicCounts)> = HashMap::new();
        let wanted: std::collections::HashSet<u32> = docs.iter().map(|d| d.0).collect();
        let old_docs = std::mem::take(&mut self.docs);
        let old_assignments = std::mem::take(&mut self.assignments);
        let old_doc_topic = std::mem::take(&mut self.doc_topic);
        let old_ids = std::mem::take(&mut self.doc_ids);
        let mut out = Retaken::default();
        for (((id, ws), ts), counts) in old_ids
            .into_iter()
            .zip(old_docs)
            .zip(old_assignments)
            .zip(old_doc_topic)
        {
            if wanted.contains(&id) {
                held.insert(id, (ts, counts));
                continue;
            }
            for (&l, &t) in ws.iter().zip(&ts) {
                self.deltas.add(l, t, -1);
            }
            out.dropped += 1;
        }
        // The subtractions are in the old words' local indexes: take them before reindexing.
        out.deltas = self.take_initial_deltas();
        let mut words: Vec<u32> = docs.iter().flat_map(|d| d.1.iter().copied()).collect();
        words.sort_unstable();
        words.dedup();
        let local: HashMap<u32, u32> = (words.iter().enumerate())
            .map(|(i, &w)| (w, i as u32))
            .collect();
        self.deltas = OwnDeltas::new(words.len(), self.n_topics);
        for (id, ws) in docs {
            let ls: Vec<u32> = ws.iter().map(|w| local[w]).collect();
            let (ts, counts) = match held.remove(&id) {
                Some(kept) if kept.0.len() == ls.len() => {
                    out.kept += 1;
                    kept
                }
                Some(kept) => {
                    return Err(PsCoreError::DocCounts(format!(
                        "document {id}: {} tokens now, {} assignments held",
                        ls.len(),
                        kept.0.len()
                    )));
                }
                None => {
                    out.drawn += 1;
                    let mut counts = TopicCounts::default();
                    let ts: Vec<u32> = (ls.iter())
                        .map(|&l| {
                            let t = self.rng.gen_range(0..self.n_topics as u32);
                            counts.increment(t);
                            self.deltas.add(l, t, 1);
                            t
                        })
                        .collect();
                    (ts, counts)
                }
            };
            self.doc_ids.push(id);
            self.docs.push(ls);
            self.assignments.push(ts);
            self.doc_topic.push(counts);
        }
        self.words = words;
        out.deltas.extend(self.take_initial_deltas());
        Ok(out)
    }

    /// The global ids of this worker's documents, in its order.
    pub fn doc_ids(&self) -> &[u32] {
        &self.doc_ids
    }
}
