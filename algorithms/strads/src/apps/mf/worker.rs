//! STRADS MF's worker half: a bucket of users with their ratings and rows of W; the H
//! blocks pass through it.

use super::{
    MfApp, MfCommit, MfEpoch, MfPartial, MfRatingsSummary, MfTask, Phase, Side, StradsMfSettings,
};
use crate::apps::lasso::Balance;
use crate::core::StradsModelError;
use crate::core::app::{BlockFate, BlockId, RingOutput, RingPush, decode_state, encode_state};
use crate::core::balance::DealtShare;
use crate::core::mf::{FactorBlock, MfLayout, MfPartition, MfRidge, MfWorker, RotationSchedule};
use crate::core::roster::{RingControl, RingEpoch, no_epoch};
use crate::error::StradsError;
use crate::kit::dealing::Straggler;
use petrel_ml::data::Ratings;
use std::sync::Arc;
use std::time::Instant;

/// Worker half.
pub struct MfWorkerApp {
    worker: MfWorker,
    ridge: MfRidge,
    /// Columns of W and H ([`MfLayout::width`]).
    rank: usize,
    n_workers: usize,
    /// With `balance = "dynamic"`: the users this worker owns, and where every item lives.
    dealing: Option<(DealtShare, MfPartition)>,
    straggler: Straggler,
    /// Seconds spent visiting blocks in all (the straggler's sleep included).
    busy_s: f64,
    /// The settings and data it was built from (a change of the workers rebuilds it).
    source: Option<Arc<(StradsMfSettings, MfRatingsSummary)>>,
    /// A change of the workers left it out of the ring.
    left: bool,
}

impl MfWorkerApp {
    /// Worker `index` of a partition; each user's row of W starts uniform in
    /// `[0, 1/sqrt(rank))` from a seed derived from `(seed, user id)`
    /// ([`MfLayout::initial_w_of_users`]), so every worker count starts from the same W; H
    /// at zero, biases at zero ([`MfLayout`]).
    pub fn new(
        index: usize,
        partition: &MfPartition,
        train: &Ratings,
        job: &StradsMfSettings,
    ) -> Result<Self, StradsModelError> {
        let (layout, init) = Self::start_of(index, partition, job)?;
        let worker = MfWorker::new(
            index,
            partition,
            train,
            layout.width(),
            init,
            &initial_blocks(partition, layout),
        )?;
        Ok(Self::of(worker, job, partition))
    }

    /// The layout and worker `index`'s starting rows of W (see [`MfWorkerApp::new`]).
    fn start_of(
        index: usize,
        partition: &MfPartition,
        job: &StradsMfSettings,
    ) -> Result<(MfLayout, Vec<f32>), StradsModelError> {
        let layout = job.layout();
        let users = partition
            .bucket_users
            .get(index)
            .ok_or_else(|| StradsModelError::InvalidConfig(format!("no bucket {index}")))?;
        let init = layout.initial_w_of_users(users, job.seed);
        Ok((layout, init))
    }

    /// Worker `index` from its users' training and test ratings alone, read one by one in
    /// [`StradsMfSettings::visit_split`]'s pass: the same worker as [`MfWorkerApp::new`] and
    /// [`MfWorkerApp::with_test`] build from the whole sets, without holding them.
    pub fn from_split(
        index: usize,
        partition: &MfPartition,
        summary: &MfRatingsSummary,
        job: &StradsMfSettings,
    ) -> Result<Self, StradsError> {
        let (layout, init) = Self::start_of(index, partition, job)?;
        let blocks = initial_blocks(partition, layout);
        let mut app = Self::build(index, partition, summary, job, (init, &blocks))?;
        app.source = Some(Arc::new((job.clone(), summary.clone())));
        Ok(app)
    }

    /// Worker `index` of `partition` reading its ratings from the data, its residuals
    /// against `w` (its users' rows) and `blocks` (all of H).
    fn build(
        index: usize,
        partition: &MfPartition,
        summary: &MfRatingsSummary,
        job: &StradsMfSettings,
        (init, blocks): (Vec<f32>, &[FactorBlock]),
    ) -> Result<Self, StradsError> {
        let layout = job.layout();
        let mut worker = MfWorker::without_ratings(
            index,
            partition,
            layout.width(),
            init,
            blocks,
            Some(summary.item_counts_u32()),
        )?;
        let dynamic = job.balance == Balance::Dynamic;
        if dynamic {
            worker.keep_ratings()?;
        }
        worker.reserve(
            &summary.block_bounds(partition, index, false),
            &summary.block_bounds(partition, index, true),
        );
        let mut failed = None;
        job.visit_split(summary, |side, u, i, r| match side {
            Side::Train => {
                if let Err(e) = worker.add_rating(partition, blocks, u, i, r) {
                    failed.get_or_insert(e);
                }
            }
            Side::Test => worker.add_test_rating(partition, u, i, r),
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        let mut app = Self::of(worker, job, partition);
        app.dealing = dynamic.then(|| {
            (
                DealtShare::of(&partition.user_bucket, index),
                partition.clone(),
            )
        });
        Ok(app)
    }

    fn of(worker: MfWorker, job: &StradsMfSettings, partition: &MfPartition) -> Self {
        MfWorkerApp {
            worker,
            ridge: job.ridge(),
            rank: job.layout().width(),
            n_workers: partition.n_buckets,
            dealing: None,
            straggler: Straggler::default(),
            busy_s: 0.0,
            source: None,
            left: false,
        }
    }

    /// Its visits are slowed as `straggler` says.
    pub fn with_straggler(mut self, straggler: Straggler) -> Self {
        self.straggler = straggler;
        self
    }

    /// A deal round: owns positions `start..end` from now on and releases the rest.
    fn deal(&mut self, start: u64, end: u64) -> Result<MfPartial, StradsModelError> {
        let (share, partition) = self
            .dealing
            .as_mut()
            .ok_or_else(|| StradsModelError::protocol("a deal to a worker of static dealing"))?;
        share.deal(start, end)?;
        let share = &*share;
        let moved = self.worker.release(|u| share.owns(u), partition)?;
        Ok(MfPartial::Released(moved))
    }

    /// A change of the workers: worker `index` of `epoch`'s ring rebuilt as a run starts,
    /// from the current W and H (`None`: it leaves and holds nothing). The blocks it
    /// holds before the new ring's first sub-round.
    fn epoch(
        &mut self,
        epoch: &RingEpoch<MfEpoch>,
        index: Option<u32>,
    ) -> Result<Vec<(BlockId, FactorBlock)>, StradsModelError> {
        let Some(index) = index.map(|i| i as usize) else {
            self.left = true;
            return Ok(Vec::new());
        };
        let source = self.source.clone().ok_or_else(|| {
            StradsModelError::protocol("a change of the workers to a worker built without its data")
        })?;
        let (job, summary) = (&source.0, &source.1);
        let (width, partition) = (self.rank, epoch.partition());
        let rows = |ids: &[u32], m: &[f32]| -> Result<Vec<f32>, StradsModelError> {
            let mut out = Vec::with_capacity(ids.len() * width);
            for &id in ids {
                let at = id as usize * width;
                let row = m.get(at..at + width).ok_or_else(|| {
                    StradsModelError::DimensionMismatch(format!("no row {id} in the epoch's model"))
                })?;
                out.extend_from_slice(row);
            }
            Ok(out)
        };
        let blocks = (partition.bucket_items.iter().enumerate())
            .map(|(b, ids)| {
                Ok(FactorBlock::new(
                    b,
                    width,
                    ids.clone(),
                    rows(ids, &epoch.model.h)?,
                ))
            })
            .collect::<Result<Vec<_>, StradsModelError>>()?;
        let users = partition.bucket_users.get(index).map(Vec::as_slice);
        let init = rows(users.unwrap_or_default(), &epoch.model.w)?;
        let rebuilt = Self::build(index, &partition, summary, job, (init, &blocks))
            .map_err(|e| StradsModelError::InvalidConfig(e.to_string()))?;
        let straggler = self.straggler;
        *self = rebuilt.with_straggler(straggler);
        self.source = Some(source);
        let schedule = RotationSchedule {
            p: partition.n_buckets,
        };
        Ok(schedule.held_at_start(index, blocks, |b| b.block))
    }

    /// The core worker (its ratings, residuals and rows of W).
    pub fn core(&self) -> &MfWorker {
        &self.worker
    }

    /// Scores `test` (this worker's users' ratings of it) during every W and Visit
    /// rotation, reported with the training error ([`MfPartial::Visited`]'s `test_error`).
    pub fn with_test(mut self, partition: &MfPartition, test: &Ratings) -> Self {
        self.worker = self.worker.with_test(partition, test);
        self
    }
}

pub(super) fn initial_blocks(partition: &MfPartition, layout: MfLayout) -> Vec<FactorBlock> {
    partition
        .bucket_items
        .iter()
        .enumerate()
        .map(|(b, ids)| {
            FactorBlock::new(b, layout.width(), ids.clone(), layout.initial_h(ids.len()))
        })
        .collect()
}

/// The blocks worker `index` holds before the first sub-round: block `index` (H at zero,
/// the constant column of the user bias at 1).
pub fn initial_ring_blocks(
    index: usize,
    partition: &MfPartition,
    layout: MfLayout,
) -> Vec<(BlockId, FactorBlock)> {
    let schedule = RotationSchedule {
        p: partition.n_buckets,
    };
    schedule.held_at_start(index, initial_blocks(partition, layout), |b| b.block)
}

impl RingPush<MfApp> for MfWorkerApp {
    fn push(
        &mut self,
        _round: u64,
        task: &MfTask,
        block: Option<FactorBlock>,
    ) -> Result<RingOutput<MfPartial, FactorBlock>, StradsModelError> {
        let started = Instant::now();
        let (expected, mut block) = match (task, block) {
            (MfTask::Ring(control), _) => return control.push(|s, e| self.deal(s, e)),
            (MfTask::Visit { block: b, .. } | MfTask::Collect { block: b }, Some(block)) => {
                (*b, block)
            }
            (_, None) => {
                return Err(StradsModelError::protocol(
                    "no block for a task that needs one",
                ));
            }
        };
        if block.block != expected || block.rank != self.rank {
            return Err(StradsModelError::protocol(format!(
                "got block {} of rank {} for block {expected} of rank {}",
                block.block, block.rank, self.rank
            )));
        }
        match task {
            MfTask::Visit {
                phase,
                k,
                pass_to,
                report,
                finalize_h,
                ..
            } => {
                if *k >= self.rank {
                    return Err(StradsModelError::protocol(format!(
                        "coordinate {k} with rank {}",
                        self.rank
                    )));
                }
                self.worker.begin_visit(&mut block);
                match phase {
                    Phase::H => self.worker.accumulate_h(&mut block, *k),
                    Phase::W => self.worker.accumulate_w(&block, *k),
                    Phase::Visit => {}
                }
                // W and H do not change during a W or Visit rotation (w_k is finalised by
                // the commit after it): its visits score the test ratings of one model,
                // the one whose training error the rotation reports.
                if *phase != Phase::H {
                    self.worker.score_test(&block);
                }
                if *finalize_h {
                    self.worker
                        .finalize_h(&mut block, *k, self.ridge, self.n_workers);
                }
                let squared_error = report.then(|| {
                    let (s, n) = self.worker.squared_error();
                    (s, n as u64)
                });
                let test_error = report.then(|| self.worker.take_test_error());
                self.straggler.slow_down(started);
                self.busy_s += started.elapsed().as_secs_f64();
                Ok(RingOutput {
                    partial: MfPartial::Visited {
                        block: expected,
                        squared_error,
                        test_error,
                        busy_s: self.busy_s,
                    },
                    block: BlockFate::PassTo {
                        worker: *pass_to,
                        block,
                    },
                })
            }
            MfTask::Ring(_) => Err(StradsModelError::protocol("a deal with a block")),
            MfTask::Collect { .. } => Ok(RingOutput {
                partial: MfPartial::Factors {
                    user_ids: self.worker.user_ids().to_vec(),
                    w: self.worker.factors().to_vec(),
                    block,
                },
                block: BlockFate::Consumed,
            }),
        }
    }

    fn rering(
        &mut self,
        _round: u64,
        task: &MfTask,
        index: Option<u32>,
    ) -> Result<(MfPartial, Vec<(BlockId, FactorBlock)>), StradsModelError> {
        let MfTask::Ring(RingControl::Epoch(epoch)) = task else {
            return Err(no_epoch());
        };
        Ok((MfPartial::Released(Vec::new()), self.epoch(epoch, index)?))
    }

    fn holds_work(&self) -> bool {
        !self.left
    }

    fn commit(&mut self, _round: u64, commit: &MfCommit) -> Result<(), StradsModelError> {
        if let Some(k) = commit.finalize_w {
            if k >= self.rank {
                return Err(StradsModelError::protocol(format!(
                    "finalize w_{k} with rank {}",
                    self.rank
                )));
            }
            self.worker.finalize_w(k, self.ridge);
        }
        if let Some((share, partition)) = &self.dealing
            && !commit.moved.is_empty()
        {
            let mine = commit.moved.iter().filter(|u| share.owns(u.id));
            self.worker.adopt(mine.cloned().collect(), partition)?;
        }
        Ok(())
    }

    /// The whole [`MfWorker`] (rows of W, residuals, accumulators); the H blocks it holds
    /// are saved by the ring shell.
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        encode_state(&self.worker)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        self.worker.restore_from(decode_state(state)?)
    }
}
