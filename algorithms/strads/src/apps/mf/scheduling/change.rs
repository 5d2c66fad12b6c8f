//! A change of STRADS MF's workers, on the scheduler: at a rotation boundary a Collect
//! round gathers W and H, then the epoch round re-forms the ring over the workers of the
//! moment, as a run starts but from the current factors.

use super::{MfScheduling, Stage};
use crate::apps::mf::{MfEpoch, MfTask};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Step};
use crate::core::balance::deal_order;
use crate::core::mf::{RotationSchedule, epoch_partition};
use crate::core::roster::{Reshape, RingChange};
use ndarray::Array2;
use std::ops::Range;

/// A change of the workers: where it is, and how the users and items split.
#[derive(Default)]
pub(super) struct ChangeState {
    /// The gather and epoch rounds.
    pub(super) steps: RingChange,
    /// Each user's position in the deal order of the current ring.
    pub(super) user_order: Vec<u32>,
    /// Training ratings of each item (the items' split into blocks).
    pub(super) item_counts: Vec<usize>,
}

impl MfScheduling {
    /// The epoch round re-forming the ring over `ring` (node names in ring order), the
    /// users of `ranges` of the deal order to each, from the gathered W and H.
    pub(super) fn epoch_step(&mut self, ring: Vec<String>, ranges: &[Range<u64>]) -> Step<MfTask> {
        let partition = epoch_partition(&self.change.user_order, ranges, &self.change.item_counts);
        let flat = |m: Array2<f32>| m.iter().copied().collect::<Vec<f32>>();
        let (w, h) = self
            .factors()
            .map(|(w, h)| (flat(w), flat(h)))
            .unwrap_or_default();
        self.change.user_order = deal_order(&partition.user_bucket);
        self.schedule = RotationSchedule { p: ring.len() };
        self.blocks = vec![None; ring.len()];
        self.w = None;
        self.change.steps.epoch_planned();
        self.s.metrics.workers = ring.len();
        Step::Run(Plan::All(MfTask::Epoch(Box::new(MfEpoch {
            ring,
            user_bucket: partition.user_bucket,
            item_bucket: partition.item_bucket,
            w,
            h,
        }))))
    }

    /// [`crate::core::app::Schedule::reshape`] (see there).
    pub(super) fn change_workers(
        &mut self,
        round: u64,
        change: &Reshape,
    ) -> Result<Option<Step<MfTask>>, StradsModelError> {
        let at_boundary = matches!(self.s.stage, Stage::Rotate { t: 0, .. });
        let dealer = self.dealer.as_mut();
        let steps = &mut self.change.steps;
        let Some(new) = steps.ring_after(dealer, (round, change), at_boundary, "strads-mf")? else {
            return Ok(None);
        };
        Ok(Some(self.epoch_step(new.ring, &new.ranges)))
    }
}
