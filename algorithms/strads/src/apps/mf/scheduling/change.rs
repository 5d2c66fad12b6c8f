//! A change of STRADS MF's workers, on the scheduler: at a rotation boundary a Collect
//! round gathers W and H, then the epoch round re-forms the ring over the workers of the
//! moment, as a run starts but from the current factors.

use super::{MfScheduling, Stage};
use crate::apps::mf::{MfEpoch, MfTask};
use crate::core::StradsModelError;
use crate::core::app::{Plan, Step};
use crate::core::balance::deal_order;
use crate::core::mf::{RotationSchedule, epoch_partition};
use crate::core::roster::{NewRing, Reshape, RingChange};
use ndarray::Array2;

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
    /// [`crate::core::app::Schedule::reshape`] (see there).
    pub(super) fn change_workers(
        &mut self,
        round: u64,
        change: &Reshape,
    ) -> Result<Option<Step<MfTask>>, StradsModelError> {
        let at_boundary = matches!(self.s.stage, Stage::Rotate { t: 0, .. });
        let (dealer, steps) = (self.dealer.as_mut(), &mut self.change.steps);
        let new = steps.ring_after(dealer, (round, change), at_boundary, "strads-mf")?;
        Ok(new.map(|new| self.epoch_step(new)))
    }

    /// The epoch round re-forming the ring over `new.ring`, the users of `new.ranges` of
    /// the deal order to each, from the gathered W and H.
    pub(super) fn epoch_step(&mut self, new: NewRing) -> Step<MfTask> {
        let partition = epoch_partition(
            &self.change.user_order,
            &new.ranges,
            &self.change.item_counts,
        );
        let flat = |m: Array2<f32>| m.iter().copied().collect::<Vec<f32>>();
        let (w, h) = self
            .factors()
            .map(|(w, h)| (flat(w), flat(h)))
            .unwrap_or_default();
        let p = new.ring.len();
        self.change.user_order = deal_order(&partition.user_bucket);
        self.schedule = RotationSchedule { p };
        self.blocks = vec![None; p];
        self.w = None;
        self.change.steps.epoch_planned();
        self.s.metrics.workers = p;
        let model = MfEpoch {
            user_bucket: partition.user_bucket,
            item_bucket: partition.item_bucket,
            w,
            h,
        };
        Step::Run(Plan::All(MfTask::Ring(new.epoch(model))))
    }
}
