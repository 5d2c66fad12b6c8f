//! LDA's worker half: a share of the documents with their topic assignments; the
//! word-topic blocks pass through it.

use super::{LdaApp, LdaCommit, LdaLayout, LdaPartial, LdaTask};
use crate::core::StradsModelError;
use crate::core::app::{BlockFate, BlockId, RingOutput, RingPush, decode_state, encode_state};
use crate::core::lda::{LdaWorker, TopicTotalsDelta, VocabularyPartition, WordTopicBlock};
use crate::core::mf::RotationSchedule;
use petrel_ml::topic::LdaConfig;

/// Worker half.
pub struct LdaWorkerApp {
    worker: LdaWorker,
    vocabulary: VocabularyPartition,
    n_topics: usize,
    beta: f64,
    tokens_per_block: Vec<u64>,
    /// Attach a copy of the block to every report (the scheduler scores a test set).
    snapshots: bool,
}

impl LdaWorkerApp {
    /// The worker of its own documents `(global id, tokens)` (a [`CorpusShare`]'s), without
    /// the rest of the corpus.
    ///
    /// [`CorpusShare`]: petrel_ml::topic::CorpusShare
    pub fn with_docs(
        index: usize,
        docs: Vec<(u32, Vec<u32>)>,
        layout: &LdaLayout,
        config: &LdaConfig,
    ) -> Result<Self, StradsModelError> {
        let mut tokens_per_block = vec![0u64; layout.vocabulary.block_words.len()];
        for (_, doc) in &docs {
            for &w in doc {
                tokens_per_block[layout.vocabulary.word_block[w as usize] as usize] += 1;
            }
        }
        Ok(LdaWorkerApp {
            worker: LdaWorker::new(index, docs, &layout.vocabulary, config)?,
            vocabulary: layout.vocabulary.clone(),
            n_topics: config.n_topics,
            beta: config.beta,
            tokens_per_block,
            snapshots: false,
        })
    }

    /// With `on`, every report (a block's last visit of a pass) carries a copy of the
    /// block as the pass leaves it: the scheduler's held-out evaluation needs the whole
    /// word-topic table at every pass end.
    pub fn with_snapshots(mut self, on: bool) -> Self {
        self.snapshots = on;
        self
    }
}

/// The blocks worker `index` holds before the first sub-round: its empty word-topic block.
pub fn initial_ring_blocks(index: usize, layout: &LdaLayout) -> Vec<(BlockId, WordTopicBlock)> {
    let schedule = RotationSchedule {
        p: layout.vocabulary.block_words.len(),
    };
    schedule.held_at_start(index, layout.vocabulary.empty_blocks(), |b| b.block)
}

impl RingPush<LdaApp> for LdaWorkerApp {
    fn push(
        &mut self,
        _round: u64,
        task: &LdaTask,
        block: Option<WordTopicBlock>,
    ) -> Result<RingOutput<LdaPartial, WordTopicBlock>, StradsModelError> {
        let init = matches!(task, LdaTask::Init { .. });
        let (expected, pass_to, report) = match task {
            LdaTask::Init {
                block,
                pass_to,
                report,
            }
            | LdaTask::Sample {
                block,
                pass_to,
                report,
            } => (*block, *pass_to, *report),
            LdaTask::Collect { block } => (*block, 0, false),
        };
        let mut block = block.ok_or_else(|| {
            StradsModelError::protocol("no word-topic block for a task that needs one")
        })?;
        if block.block != expected
            || block.block >= self.tokens_per_block.len()
            || block.word_ids.len() != block.rows.len()
        {
            return Err(StradsModelError::protocol(format!(
                "malformed word-topic block {} (expected {expected})",
                block.block
            )));
        }
        if let LdaTask::Collect { .. } = task {
            return Ok(RingOutput {
                partial: LdaPartial::Collected(block),
                block: BlockFate::Consumed,
            });
        }
        let (totals, tokens) = if init {
            self.worker.add_initial_counts(&mut block, &self.vocabulary);
            let deltas = if report {
                self.worker.own_topic_counts()
            } else {
                vec![0; self.n_topics]
            };
            (
                TopicTotalsDelta {
                    worker: self.worker.worker,
                    deltas,
                },
                0,
            )
        } else {
            self.worker.sample_block(&mut block, &self.vocabulary);
            (
                self.worker.take_totals_delta(),
                self.tokens_per_block[block.block],
            )
        };
        let word_log_likelihood = report.then(|| block.log_likelihood_part(self.beta));
        if init && report {
            // Last visit of the init rotation: same canonical row order as the serial
            // driver's initial tables.
            block.canonicalize();
        }
        let snapshot = (report && self.snapshots).then(|| block.clone());
        Ok(RingOutput {
            partial: LdaPartial::Visited {
                block: expected,
                totals,
                doc_log_likelihood: report.then(|| self.worker.log_likelihood_part()),
                word_log_likelihood,
                tokens,
                snapshot,
            },
            block: BlockFate::PassTo {
                worker: pass_to,
                block,
            },
        })
    }

    fn commit(&mut self, _round: u64, commit: &LdaCommit) -> Result<(), StradsModelError> {
        if let Some(totals) = &commit.topic_totals {
            crate::core::check_sizes(&[("topic totals", totals.len(), self.n_topics)])?;
            self.worker.set_topic_totals(totals);
        }
        Ok(())
    }

    /// The topic assignments, counts, totals and the sampler's exact generator position;
    /// the word-topic blocks it holds are saved by the ring shell.
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        encode_state(&self.worker.export_state())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        self.worker.import_state(decode_state(state)?)
    }
}
