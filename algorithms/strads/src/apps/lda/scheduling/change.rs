//! A change of the LDA workers, on the scheduler: at a pass boundary a Collect round
//! gathers the word-topic blocks, then the epoch round re-forms the ring over the workers
//! of the moment: the vocabulary split into one block per worker, the documents dealt
//! evenly with their topic assignments (the commit hands the released ones over).

use super::LdaScheduling;
use crate::apps::lda::{LdaCommit, LdaEpoch, LdaPartial, LdaTask};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Step};
use crate::core::balance::pull_deal;
use crate::core::lda::{rows_by_word, split_rows};
use crate::core::mf::RotationSchedule;
use crate::core::roster::{ChangeRound, NewRing, Reshape, RingChange};
use petrel_ml::topic::TopicCounts;

/// A change of the workers: where it is, and what the epoch deals.
#[derive(Default)]
pub(super) struct ChangeState {
    /// The gather and epoch rounds.
    pub(super) steps: RingChange,
    /// Every word's counts, gathered at the boundary.
    pub(super) rows: Vec<TopicCounts>,
    /// Token count of each word (the vocabulary's split into blocks).
    pub(super) word_frequencies: Vec<usize>,
    /// The starting static split of the documents (their deal order).
    pub(super) doc_owner: Vec<u32>,
}

impl LdaScheduling {
    /// The next round of a change, if one is under way ([`RingChange::next_round`]).
    pub(super) fn change_step(&mut self) -> Option<Step<LdaTask>> {
        match self.change.steps.next_round(self.dealer.as_ref())? {
            ChangeRound::Gather => {
                Some(self.schedule.plan(0, |_, block| LdaTask::Collect { block }))
            }
            ChangeRound::Reform(ring) => Some(self.epoch_step(ring)),
        }
    }

    /// The answers of a change's round: the gathered blocks, or the documents the epoch
    /// released, handed to their new owners with the topic totals.
    pub(super) fn pull_change(
        &mut self,
        partials: Vec<LdaPartial>,
        now: f64,
    ) -> Result<LdaCommit, StradsModelError> {
        if std::mem::take(&mut self.change.steps.gathering) {
            self.collect(partials)?;
            let blocks = self.blocks.iter_mut().filter_map(Option::take).collect();
            self.change.rows = rows_by_word(blocks, self.vocab_size)?;
            self.change.steps.gathered = true;
            return Ok(LdaCommit {
                topic_totals: None,
                moved: Vec::new(),
            });
        }
        self.change.steps.epoch = false;
        let moved = pull_deal(self.dealer.as_mut(), partials, now, LdaPartial::released)?;
        Ok(LdaCommit {
            topic_totals: Some(self.s.topic_totals.clone()),
            moved,
        })
    }

    /// The epoch round re-forming the ring over `new.ring`, the documents of
    /// `new.ranges` of the deal order to each.
    fn epoch_step(&mut self, new: NewRing) -> Step<LdaTask> {
        let p = new.ring.len();
        let rows = std::mem::take(&mut self.change.rows);
        let blocks = split_rows(&rows, &self.change.word_frequencies, p);
        self.schedule = RotationSchedule { p };
        self.blocks = vec![None; p];
        self.change.steps.epoch_planned();
        self.s.metrics.workers = p;
        let model = LdaEpoch {
            doc_owner: self.change.doc_owner.clone(),
            ranges: new.ranges.iter().map(|r| (r.start, r.end)).collect(),
            blocks,
        };
        Step::Run(Plan::All(LdaTask::Ring(new.epoch(model))))
    }

    /// [`crate::core::app::Schedule::reshape`]: with `balance = "dynamic"`, at a pass
    /// boundary, first a Collect round gathers the blocks (this answers `None`, the next
    /// round is it), then the epoch round. Within a pass, and once the job is collecting,
    /// the workers stay for now.
    pub(super) fn change_workers(
        &mut self,
        round: u64,
        change: &Reshape,
    ) -> Result<Option<Step<LdaTask>>, StradsModelError> {
        let at_boundary = self.s.t == 0 && self.s.pass <= self.iterations;
        let (dealer, steps) = (self.dealer.as_mut(), &mut self.change.steps);
        let new = steps.ring_after(dealer, (round, change), at_boundary, "lda")?;
        Ok(new.map(|new| self.epoch_step(new)))
    }
}
