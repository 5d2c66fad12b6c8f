//! LDA's worker half: a share of the documents with their topic assignments; the
//! word-topic blocks pass through it.

use super::{LdaApp, LdaCommit, LdaEpoch, LdaLayout, LdaPartial, LdaTask};
use crate::core::StradsModelError;
use crate::core::app::{BlockFate, BlockId, RingOutput, RingPush, decode_state, encode_state};
use crate::core::balance::DealtShare;
use crate::core::lda::{LdaWorker, TopicTotalsDelta, VocabularyPartition, WordTopicBlock};
use crate::core::mf::RotationSchedule;
use crate::core::roster::{RingControl, RingEpoch, no_epoch};
use crate::kit::dealing::Straggler;
use petrel_ml::topic::LdaConfig;
use std::time::Instant;

/// Worker half.
pub struct LdaWorkerApp {
    worker: LdaWorker,
    vocabulary: VocabularyPartition,
    n_topics: usize,
    beta: f64,
    /// Attach a copy of the block to every report (the scheduler scores a test set).
    snapshots: bool,
    /// With `balance = "dynamic"`: the documents this worker owns.
    dealing: Option<DealtShare>,
    straggler: Straggler,
    /// Seconds spent sampling in all (the straggler's sleep included).
    busy_s: f64,
    /// A change of the workers left it out of the ring.
    left: bool,
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
            left: false,
        })
    }

    /// With `dynamic`, takes part in re-deals, starting from the layout's static split.
    pub fn with_dealing(mut self, dynamic: bool, layout: &LdaLayout) -> Self {
        let worker = self.worker.worker;
        self.dealing = dynamic.then(|| DealtShare::of(&layout.docs.doc_worker, worker));
        self
    }

    /// Its sampling is slowed as `straggler` says.
    pub fn with_straggler(mut self, straggler: Straggler) -> Self {
        self.straggler = straggler;
        self
    }

    /// A deal round: owns positions `start..end` from now on and releases the rest.
    fn deal(&mut self, start: u64, end: u64) -> Result<LdaPartial, StradsModelError> {
        let share = self
            .dealing
            .as_mut()
            .ok_or_else(|| StradsModelError::protocol("a deal to a worker of static dealing"))?;
        share.deal(start, end)?;
        let share = &*share;
        Ok(LdaPartial::Released(
            self.worker.release(|d| share.owns(d), &self.vocabulary),
        ))
    }

    /// A change of the workers: worker `index` of `epoch`'s ring (`None`: it leaves),
    /// its documents those of its range, the words split as the epoch's blocks. The
    /// documents it gives up and the blocks it holds before the new ring's first
    /// sub-round.
    fn epoch(
        &mut self,
        epoch: &RingEpoch<LdaEpoch>,
        index: Option<u32>,
    ) -> Result<(LdaPartial, Vec<(BlockId, WordTopicBlock)>), StradsModelError> {
        let Some(index) = index.map(|i| i as usize) else {
            self.left = true;
            let released = self.worker.release(|_| false, &self.vocabulary);
            return Ok((LdaPartial::Released(released), Vec::new()));
        };
        let &(start, end) = epoch.model.ranges.get(index).ok_or_else(|| {
            StradsModelError::protocol(format!("no documents for ring worker {index}"))
        })?;
        let mut share = DealtShare::of(&epoch.model.doc_owner, 0);
        share.deal(start, end)?;
        let vocabulary = VocabularyPartition::of_blocks(&epoch.model.blocks)?;
        let fresh = epoch.joined.get(index).copied().unwrap_or(false);
        let released = (self.worker).rering(index, fresh, |d| share.owns(d), &vocabulary);
        self.vocabulary = vocabulary;
        self.dealing = Some(share);
        let schedule = RotationSchedule {
            p: epoch.ring.len(),
        };
        let blocks = schedule.held_at_start(index, epoch.model.blocks.clone(), |b| b.block);
        Ok((LdaPartial::Released(released), blocks))
    }

    /// The core worker (its documents, their topics and the token index).
    pub fn core(&self) -> &LdaWorker {
        &self.worker
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
            LdaTask::Ring(control) => return control.push(|s, e| self.deal(s, e)),
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

    fn rering(
        &mut self,
        _round: u64,
        task: &LdaTask,
        index: Option<u32>,
    ) -> Result<(LdaPartial, Vec<(BlockId, WordTopicBlock)>), StradsModelError> {
        let LdaTask::Ring(RingControl::Epoch(epoch)) = task else {
            return Err(no_epoch());
        };
        self.epoch(epoch, index)
    }

    fn holds_work(&self) -> bool {
        !self.left
    }

    fn commit(&mut self, _round: u64, commit: &LdaCommit) -> Result<(), StradsModelError> {
        if let Some(totals) = &commit.topic_totals {
            crate::core::check_sizes(&[("topic totals", totals.len(), self.n_topics)])?;
            self.worker.set_topic_totals(totals);
        }
        if let Some(share) = &self.dealing
            && !commit.moved.is_empty()
        {
            let mine = commit.moved.iter().filter(|d| share.owns(d.id));
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
