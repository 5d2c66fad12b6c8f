//! A change of the LDA workers re-forms the ring: the scheduler gathers the word-topic
//! blocks at a pass boundary ([`rows_by_word`]) and splits the vocabulary again into one
//! block per worker of the moment ([`split_rows`]); the documents are dealt over them with their topic
//! assignments and every worker rebuilds its token index ([`LdaWorker::rering`]). No
//! token changes topic, so the counts stay those of the current assignments.

use super::{LdaWorker, MovedDoc, VocabularyPartition, WordTopicBlock};
use crate::core::StradsModelError;
use petrel_ml::topic::TopicCounts;

/// Every word's row of counts from the gathered `blocks`, which hold each of the
/// `vocab_size` words once.
pub fn rows_by_word(
    blocks: Vec<WordTopicBlock>,
    vocab_size: usize,
) -> Result<Vec<TopicCounts>, StradsModelError> {
    let mut rows: Vec<Option<TopicCounts>> = vec![None; vocab_size];
    for block in blocks {
        if block.rows.len() != block.word_ids.len() {
            return Err(StradsModelError::protocol(format!(
                "malformed word-topic block {}",
                block.block
            )));
        }
        for (w, row) in block.word_ids.into_iter().zip(block.rows) {
            match rows.get_mut(w as usize) {
                Some(slot @ None) => *slot = Some(row),
                _ => {
                    return Err(StradsModelError::protocol(format!(
                        "word {w} twice or beyond the {vocab_size} words"
                    )));
                }
            }
        }
    }
    rows.into_iter()
        .enumerate()
        .map(|(w, row)| {
            row.ok_or_else(|| StradsModelError::protocol(format!("word {w} in no block")))
        })
        .collect()
}

/// `rows` (one per word) split into `workers` blocks balanced by `word_frequencies`, as
/// a run starts.
pub fn split_rows(
    rows: &[TopicCounts],
    word_frequencies: &[usize],
    workers: usize,
) -> Vec<WordTopicBlock> {
    let mut blocks = VocabularyPartition::balanced(word_frequencies, workers).empty_blocks();
    for block in &mut blocks {
        for (&w, row) in block.word_ids.iter().zip(&mut block.rows) {
            if let Some(counts) = rows.get(w as usize) {
                row.clone_from(counts);
            }
        }
    }
    blocks
}

impl VocabularyPartition {
    /// The partition `blocks` make (block `b` at index `b`, every word in one of them).
    pub fn of_blocks(blocks: &[WordTopicBlock]) -> Result<Self, StradsModelError> {
        let words: usize = blocks.iter().map(|b| b.word_ids.len()).sum();
        let mut word_block = vec![u32::MAX; words];
        let mut word_local = vec![0u32; words];
        for (b, block) in blocks.iter().enumerate() {
            if block.block != b || block.rows.len() != block.word_ids.len() {
                return Err(StradsModelError::protocol(format!(
                    "malformed word-topic block {} at {b}",
                    block.block
                )));
            }
            for (local, &w) in block.word_ids.iter().enumerate() {
                match word_block.get_mut(w as usize) {
                    Some(slot) if *slot == u32::MAX => *slot = b as u32,
                    _ => {
                        return Err(StradsModelError::protocol(format!(
                            "word {w} twice or beyond the {words} words of the blocks"
                        )));
                    }
                }
                word_local[w as usize] = local as u32;
            }
        }
        Ok(VocabularyPartition {
            word_block,
            word_local,
            block_words: blocks.iter().map(|b| b.word_ids.clone()).collect(),
        })
    }
}

impl LdaWorker {
    /// A change of the workers: this worker is `worker` of the new ring, the words split
    /// as `vocabulary`. Gives up every document `keep` refuses, with its topic
    /// assignments (as [`LdaWorker::release`]); with `fresh` (a joiner), first forgets
    /// the documents it was built with: their owners hold them and their topics.
    pub fn rering(
        &mut self,
        worker: usize,
        fresh: bool,
        keep: impl Fn(u32) -> bool,
        vocabulary: &VocabularyPartition,
    ) -> Vec<MovedDoc> {
        if fresh {
            self.release(|_| false, vocabulary);
        }
        self.worker = worker;
        self.release(keep, vocabulary)
    }
}

#[cfg(test)]
mod tests;
