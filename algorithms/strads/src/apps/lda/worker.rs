//! LDA's worker half: a share of the documents with their topic assignments; the
//! word-topic blocks pass through it.

use super::{LdaApp, LdaCommit, LdaLayout, LdaPartial, LdaTask};
use crate::core::StradsModelError;
use crate::core::app::{BlockFate, BlockId, RingOutput, RingPush, decode_state, encode_state};
use crate::core::lda::{LdaWorker, TopicTotalsDelta, VocabularyPartition, WordTopicBlock};
use crate::core::mf::RotationSchedule;
use crate::kit::dealing::Straggler;
use petrel_ml::topic::LdaConfig;
use std::ops::Range;
use std::time::Instant;

/// Worker half.
pub struct LdaWorkerApp {
    worker: LdaWorker,
    vocabulary: VocabularyPartition,
    n_topics: usize,
    beta: f64,
    /// Attach a copy of the block to every report (the scheduler scores a test set).
    snapshots: bool,
    /// With `balance = "dynamic"`: every document's position in the deal order and the
    /// positions this worker owns since the last deal.
    dealing: Option<(Vec<u32>, Range<u64>)>,
    straggler: Straggler,
    /// Seconds spent sampling in all (the straggler's sleep included).
    busy_s: f64,
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
        Ok(LdaWorkerApp {
            worker: LdaWorker::new(index, docs, &layout.vocabulary, config)?,
            vocabulary: layout.vocabulary.clone(),
            n_topics: config.n_topics,
            beta: config.beta,
            snapshots: false,
            dealing: None,
            straggler: Straggler::default(),
            busy_s: 0.0,
        })
    }

    /// With `dynamic`, takes part in re-deals: its documents start as the contiguous
    /// range of [`deal_order`](crate::core::lda::deal_order) that the layout's static
    /// split gives it.
    pub fn with_dealing(mut self, dynamic: bool, layout: &LdaLayout) -> Self {
        self.dealing = dynamic.then(|| {
            let order = crate::core::lda::deal_order(&layout.docs.doc_worker);
            let index = self.worker.worker as u32;
            let before = layout.docs.doc_worker.iter().filter(|&&w| w < index);
            let start = before.count() as u64;
            let range = start..start + self.worker.doc_ids().len() as u64;
            (order, range)
        });
        self
    }

    /// Its sampling is slowed as `straggler` says.
    pub fn with_straggler(mut self, straggler: Straggler) -> Self {
        self.straggler = straggler;
        self
    }

    /// A deal round: owns positions `start..end` from now on and releases the rest.
    fn deal(&mut self, start: u64, end: u64) -> Result<LdaPartial, StradsModelError> {
        let (order, range) = self
            .dealing
            .as_mut()
            .ok_or_else(|| StradsModelError::protocol("a deal to a worker of static dealing"))?;
        if start > end || end > order.len() as u64 {
            return Err(StradsModelError::protocol(format!(
                "deal of documents {start}..{end} of {}",
                order.len()
            )));
        }
        *range = start..end;
        let (order, range) = (&*order, &*range);
        Ok(LdaPartial::Released(
            self.worker
                .release(|d| owns(order, range, d), &self.vocabulary),
        ))
    }

    /// With `on`, every report (a block's last visit of a pass) carries a copy of the
    /// block as the pass leaves it: the scheduler's held-out evaluation needs the whole
    /// word-topic table at every pass end.
    pub fn with_snapshots(mut self, on: bool) -> Self {
        self.snapshots = on;
        self
    }
}

/// Whether document `doc` is at a position of `range` in the deal order `order`.
fn owns(order: &[u32], range: &Range<u64>, doc: u32) -> bool {
    order
        .get(doc as usize)
        .is_some_and(|&p| range.contains(&u64::from(p)))
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
            LdaTask::Deal { start, end } => {
                return Ok(RingOutput {
                    partial: self.deal(*start, *end)?,
                    block: BlockFate::Consumed,
                });
            }
        };
        let mut block = block.ok_or_else(|| {
            StradsModelError::protocol("no word-topic block for a task that needs one")
        })?;
        if block.block != expected
            || block.block >= self.vocabulary.block_words.len()
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
            let started = Instant::now();
            self.worker.sample_block(&mut block, &self.vocabulary);
            self.straggler.slow_down(started);
            self.busy_s += started.elapsed().as_secs_f64();
            (
                self.worker.take_totals_delta(),
                self.worker.tokens_in_block(block.block),
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
                busy_s: self.busy_s,
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
        if let Some((order, range)) = &self.dealing
            && !commit.moved.is_empty()
        {
            let mine = commit.moved.iter().filter(|d| owns(order, range, d.id));
            let mine = mine.cloned().collect();
            self.worker.adopt(mine, &self.vocabulary)?;
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
