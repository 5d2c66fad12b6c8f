//! LDA's scheduler half: the rotation plan, the topic totals re-broadcast after every
//! sub-round, the log-likelihood trace, and the final Collect round.

use std::time::Duration;

mod change;
use change::ChangeState;

use super::{LdaApp, LdaCommit, LdaLayout, LdaPartial, LdaSettings, LdaTask};
use crate::apps::lasso::Balance;
use crate::core::StradsModelError;
use crate::core::app::{Schedule, Step, decode_state, encode_state};
use crate::core::balance::{DealGate, DealtShare, RowDealer, RowDealing, deal_step, pull_deal};
use crate::core::lda::WordTopicBlock;
use crate::core::mf::RotationSchedule;
use crate::core::roster::{Reshape, RingControl};
use crate::kit::encoded_len;
use petrel_ml::data::Corpus;
use petrel_ml::topic::{LdaMetrics, LoglikPoint, joint_log_likelihood, topic_word_matrix};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Held-out figures by name (`heldout_perplexity`, `heldout_loglik_per_token`).
pub type HeldoutFigures = BTreeMap<String, f64>;

/// The test corpus of an LDA job and how it is scored: document completion
/// ([`TopicModel::evaluate`](petrel_ml::model::TopicModel::evaluate)) with
/// `heldout_sweeps` fold-in sweeps and the job's seed, the estimator of the final figures.
#[derive(Debug, Clone)]
pub struct LdaHeldout {
    corpus: Corpus,
    sweeps: usize,
    seed: u64,
    alpha: f64,
}

impl LdaHeldout {
    /// The job's test corpus (`None` without `test_data`), read once, without the words
    /// beyond the training vocabulary of `vocab_size` words (as the final evaluation).
    pub fn of(
        job: &LdaSettings,
        vocab_size: usize,
    ) -> Result<Option<LdaHeldout>, crate::error::StradsError> {
        let Some(path) = &job.test_data else {
            return Ok(None);
        };
        let corpus = petrel_ml::data::load_bow(path, None)?;
        let shape = petrel_ml::model::TopicModel {
            alpha: job.alpha,
            beta: job.beta,
            topic_word: vec![vec![0.0; vocab_size]],
            vocab: None,
        };
        // Words beyond the training vocabulary are dropped, as `petrel eval` drops them.
        let (corpus, unseen) = shape.known_words(corpus);
        if let Some(note) = unseen.note(path) {
            tracing::warn!("{note}");
        }
        Ok(Some(LdaHeldout {
            corpus,
            sweeps: job.heldout_sweeps,
            seed: job.seed,
            alpha: job.alpha,
        }))
    }

    /// The figures of the topic-word distributions `phi` (`K x V`).
    pub fn figures(&self, phi: &ndarray::Array2<f64>, beta: f64) -> HeldoutFigures {
        let model = petrel_ml::model::TopicModel {
            alpha: self.alpha,
            beta,
            topic_word: phi.rows().into_iter().map(|r| r.to_vec()).collect(),
            vocab: None,
        };
        let figures = model.evaluate(&self.corpus, self.sweeps, self.seed);
        petrel_ml::model::heldout_names(
            figures,
            &["uniform_perplexity", "documents", "scored_tokens"],
        )
        .into_iter()
        .collect()
    }
}

/// What an [`LdaScheduling`] changes while running (what a round checkpoint holds): where
/// the rotation is, the topic totals and the metrics so far.
#[derive(Clone, Serialize, Deserialize)]
struct LdaSchedulingState {
    topic_totals: Vec<i64>,
    /// 0 = the init rotation, then 1..=iterations.
    pass: usize,
    t: usize,
    init_end_s: f64,
    metrics: LdaMetrics,
    /// Held-out figures by pass (0 = the initial assignments).
    #[serde(default)]
    heldout_trace: BTreeMap<usize, HeldoutFigures>,
    /// Seconds spent scoring the test set.
    #[serde(default)]
    heldout_s: f64,
}

/// Scheduler half: the rotation plan and the topic totals. The word-topic blocks stay
/// with the workers and come back only in the final Collect round.
pub struct LdaScheduling {
    schedule: RotationSchedule,
    blocks: Vec<Option<WordTopicBlock>>,
    collected: bool,
    s: LdaSchedulingState,
    pub(super) vocab_size: usize,
    beta: f64,
    iterations: usize,
    /// The words (when a vocabulary was read), for `topics.txt`.
    pub(super) vocab: Option<Vec<String>>,
    /// The test set scored at the end of every pass (with `test_data`; the workers then
    /// send block snapshots: [`LdaWorkerApp::with_snapshots`](super::LdaWorkerApp::with_snapshots)).
    pub(super) heldout: Option<LdaHeldout>,
    /// The digest of the corpus it was built from (`CorpusStats::digest`), compared with
    /// the workers' before the first round.
    pub(super) data_digest: Option<u64>,
    /// With `balance = "dynamic"`: the document dealer (units: documents in
    /// [`deal_order`](crate::core::balance::deal_order)), and whether a deal round is out.
    dealer: Option<RowDealer>,
    dealing: bool,
    /// A change of the workers ([`Schedule::reshape`]).
    change: ChangeState,
}

impl LdaScheduling {
    /// The rotation of `corpus` under `layout` over `workers` workers.
    pub fn new(
        corpus: &Corpus,
        layout: &LdaLayout,
        job: &LdaSettings,
        workers: usize,
    ) -> Result<Self, StradsModelError> {
        let dealer = match job.balance {
            Balance::Static => None,
            Balance::Dynamic => Some(RowDealer::from_shares(DealtShare::counts(
                &layout.docs.doc_worker,
                workers,
            ))?),
        };
        Ok(LdaScheduling {
            schedule: RotationSchedule { p: workers },
            blocks: vec![None; layout.vocabulary.block_words.len()],
            collected: false,
            s: LdaSchedulingState {
                topic_totals: vec![0; job.n_topics],
                pass: 0,
                t: 0,
                init_end_s: 0.0,
                metrics: LdaMetrics {
                    n_docs: corpus.docs.len(),
                    vocab_size: corpus.vocab_size,
                    n_tokens: corpus.n_tokens(),
                    n_topics: job.n_topics,
                    workers,
                    iterations: job.iterations,
                    elapsed_s: 0.0,
                    sampling_s: 0.0,
                    tokens_sampled: 0,
                    tokens_per_s_per_worker: 0.0,
                    loglik: Vec::new(),
                    final_loglik_per_token: f64::NAN,
                    scheduler_bytes: 0,
                    block_bytes: 0,
                    collect_bytes: 0,
                    rounds: 0,
                },
                heldout_trace: BTreeMap::new(),
                heldout_s: 0.0,
            },
            vocab_size: corpus.vocab_size,
            beta: job.beta,
            iterations: job.iterations,
            vocab: corpus.vocab.clone(),
            heldout: None,
            data_digest: None,
            dealer,
            dealing: false,
            change: ChangeState {
                word_frequencies: corpus.word_frequencies(),
                doc_owner: layout.docs.doc_worker.clone(),
                ..ChangeState::default()
            },
        })
    }

    /// `metrics.json`'s `balance` (with `balance = "dynamic"`; its rows are documents).
    pub fn dealing(&self) -> Option<RowDealing> {
        self.dealer.as_ref().map(RowDealer::report)
    }

    /// Held-out figures by pass (0 = the random initial assignments).
    pub fn heldout_trace(&self) -> &BTreeMap<usize, HeldoutFigures> {
        &self.s.heldout_trace
    }

    /// Seconds spent scoring the test set so far.
    pub fn heldout_seconds(&self) -> f64 {
        self.s.heldout_s
    }

    /// Records the bytes the scheduler node moved during the run.
    pub fn set_scheduler_bytes(&mut self, bytes: u64) {
        self.s.metrics.scheduler_bytes = bytes;
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &LdaMetrics {
        &self.s.metrics
    }

    /// The topic totals `n_k`.
    pub fn topic_totals(&self) -> &[i64] {
        &self.s.topic_totals
    }

    /// The word-topic blocks (present once the final Collect round ran).
    pub fn blocks(&self) -> Vec<&WordTopicBlock> {
        self.blocks.iter().flatten().collect()
    }

    /// `(n_wk + beta) / (n_k + V beta)`, `K x V`.
    pub fn topic_word(&self) -> ndarray::Array2<f64> {
        topic_word_matrix(
            self.blocks
                .iter()
                .flatten()
                .flat_map(|b| b.word_ids.iter().copied().zip(&b.rows)),
            &self.s.topic_totals,
            self.vocab_size,
            self.beta,
        )
    }
}

impl LdaScheduling {
    /// A Collect round's answers: the blocks come back to the scheduler.
    fn collect(&mut self, partials: Vec<LdaPartial>) -> Result<(), StradsModelError> {
        let mut block_bytes = 0u64;
        self.s.metrics.collect_bytes = partials.iter().map(encoded_len).sum();
        for (w, partial) in partials.into_iter().enumerate() {
            let LdaPartial::Collected(block) = partial else {
                return Err(StradsModelError::protocol(format!(
                    "worker {w} answered collect with a visit"
                )));
            };
            let expected = self.schedule.check_block(w, 0, block.block, "returned")?;
            block_bytes += encoded_len(&block);
            self.blocks[expected] = Some(block);
        }
        self.s.metrics.block_bytes = block_bytes;
        Ok(())
    }
}

impl Schedule<LdaApp> for LdaScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<LdaTask> {
        if in_flight > 0 {
            return Step::Wait;
        }
        if let Some(step) = self.change_step() {
            return step;
        }
        if self.s.pass > self.iterations {
            if self.collected {
                return Step::Done;
            }
            // Every rotation has P sub-rounds, so the blocks are back where they started.
            return self.schedule.plan(0, |_, block| LdaTask::Collect { block });
        }
        // Documents move only between passes, so every token is sampled once a pass.
        let between_passes = self.s.t == 0 && self.s.pass >= 1;
        if between_passes
            && let Some(dealer) = &mut self.dealer
            && let DealGate::Deal(ranges) = dealer.gate(round, false, true)
        {
            self.dealing = true;
            return deal_step(ranges, |start, end| {
                LdaTask::Ring(RingControl::Deal { start, end })
            });
        }
        let report = self.s.t + 1 == self.schedule.p;
        self.schedule.plan(self.s.t, |w, block| {
            let pass_to = self.schedule.next_holder(w) as u32;
            if self.s.pass == 0 {
                LdaTask::Init {
                    block,
                    pass_to,
                    report,
                }
            } else {
                LdaTask::Sample {
                    block,
                    pass_to,
                    report,
                }
            }
        })
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<LdaPartial>,
        elapsed: Duration,
    ) -> Result<LdaCommit, StradsModelError> {
        let p = self.schedule.p;
        self.s.metrics.rounds = round + 1;
        if self.change.steps.gathering || self.change.steps.epoch {
            return self.pull_change(partials, elapsed.as_secs_f64());
        }
        if self.s.pass > self.iterations {
            self.collect(partials)?;
            self.collected = true;
            return Ok(LdaCommit {
                topic_totals: None,
                moved: Vec::new(),
            });
        }
        if std::mem::take(&mut self.dealing) {
            // The released documents go to their new owners in the commit.
            let now = elapsed.as_secs_f64();
            let moved = pull_deal(self.dealer.as_mut(), partials, now, LdaPartial::released)?;
            return Ok(LdaCommit {
                topic_totals: None,
                moved,
            });
        }
        let mut doc_ll = 0.0;
        let mut word_ll = vec![0.0; p];
        let mut reported = 0;
        let mut snapshots = Vec::new();
        for (w, partial) in partials.into_iter().enumerate() {
            let LdaPartial::Visited {
                block,
                totals,
                doc_log_likelihood,
                word_log_likelihood,
                tokens,
                snapshot,
                busy_s,
            } = partial
            else {
                return Err(StradsModelError::protocol(format!(
                    "worker {w} answered a visit with its block"
                )));
            };
            let expected = self.schedule.check_block(w, self.s.t, block, "visited")?;
            if totals.deltas.len() != self.s.topic_totals.len() {
                return Err(StradsModelError::DimensionMismatch(format!(
                    "worker {w}: {} topic deltas",
                    totals.deltas.len()
                )));
            }
            for (t, d) in self.s.topic_totals.iter_mut().zip(&totals.deltas) {
                *t += d;
            }
            if let (Some(doc), Some(word)) = (doc_log_likelihood, word_log_likelihood) {
                doc_ll += doc;
                word_ll[expected] = word;
                reported += 1;
            }
            self.s.metrics.tokens_sampled += tokens;
            if let Some(dealer) = &mut self.dealer {
                dealer.observe(w, busy_s);
            }
            if let Some(b) = snapshot {
                if b.block != expected || b.word_ids.len() != b.rows.len() {
                    return Err(StradsModelError::protocol(format!(
                        "worker {w}: malformed snapshot of block {expected}"
                    )));
                }
                snapshots.push(b);
            }
        }
        let now = elapsed.as_secs_f64();
        self.s.metrics.elapsed_s = now;
        if let Some(dealer) = &mut self.dealer {
            dealer.pulled(now, false);
        }
        if reported == p {
            // Summed in block order, as over the whole table.
            let word: f64 = word_ll.iter().sum();
            let ll = joint_log_likelihood(
                word,
                doc_ll,
                &self.s.topic_totals,
                self.vocab_size,
                self.beta,
            ) / self.s.metrics.n_tokens.max(1) as f64;
            if self.s.pass == 0 {
                self.s.init_end_s = now;
            }
            petrel_observe::metrics().job.point(
                &petrel_observe::thread_node(),
                "loglik_per_token",
                std::time::Duration::from_secs_f64(now.max(0.0)),
                ll,
            );
            self.s.metrics.loglik.push(LoglikPoint {
                iteration: self.s.pass,
                elapsed_s: now,
                tokens_sampled: self.s.metrics.tokens_sampled,
                loglik_per_token: ll,
            });
            self.s.metrics.final_loglik_per_token = ll;
            tracing::debug!(iteration = self.s.pass, ll, "lda pass");
            if let Some(h) = &self.heldout {
                if snapshots.len() != p {
                    return Err(StradsModelError::protocol(format!(
                        "{} of {p} workers sent their block for the held-out evaluation",
                        snapshots.len()
                    )));
                }
                let started = std::time::Instant::now();
                let phi = topic_word_matrix(
                    snapshots
                        .iter()
                        .flat_map(|b| b.word_ids.iter().copied().zip(&b.rows)),
                    &self.s.topic_totals,
                    self.vocab_size,
                    self.beta,
                );
                let figures = h.figures(&phi, self.beta);
                self.s.heldout_s += started.elapsed().as_secs_f64();
                tracing::debug!(iteration = self.s.pass, ?figures, "lda held-out");
                self.s.heldout_trace.insert(self.s.pass, figures);
            }
        }
        self.s.metrics.sampling_s = (now - self.s.init_end_s).max(0.0);
        if self.s.metrics.sampling_s > 0.0 {
            self.s.metrics.tokens_per_s_per_worker =
                self.s.metrics.tokens_sampled as f64 / self.s.metrics.sampling_s / p as f64;
        }
        self.s.t += 1;
        if self.s.t == p {
            // (The init rotation's last visitors canonicalised the blocks.)
            self.s.t = 0;
            self.s.pass += 1;
        }
        Ok(LdaCommit {
            topic_totals: Some(self.s.topic_totals.clone()),
            moved: Vec::new(),
        })
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        if self.collected {
            // Nothing is left to run, so nothing to checkpoint.
            return Ok(None);
        }
        encode_state(&self.s)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let s: LdaSchedulingState = decode_state(state)?;
        let m = &self.s.metrics;
        crate::core::check_sizes(&[
            ("documents", s.metrics.n_docs, m.n_docs),
            ("tokens", s.metrics.n_tokens, m.n_tokens),
            ("topics", s.topic_totals.len(), self.s.topic_totals.len()),
            ("workers", s.metrics.workers, m.workers),
        ])?;
        if s.t >= self.schedule.p {
            return Err(StradsModelError::Invariant(format!(
                "a saved rotation step {} of {}",
                s.t, self.schedule.p
            )));
        }
        self.s = s;
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    fn reshape(
        &mut self,
        round: u64,
        change: &Reshape,
    ) -> Result<Option<Step<LdaTask>>, StradsModelError> {
        self.change_workers(round, change)
    }
}
