//! STRADS MF's scheduler half: the rotation sequence of H and W rotations, the RMSE trace,
//! and the final Collect round that brings W and the blocks back.

use std::time::Duration;

mod change;
use change::ChangeState;

use super::{MfApp, MfCommit, MfPartial, MfRatingsSummary, MfTask, Phase, StradsMfSettings};
use crate::apps::lasso::Balance;
use crate::core::StradsModelError;
use crate::core::app::{Schedule, Step, decode_state, encode_state};
use crate::core::balance::{
    DealGate, DealtShare, RowDealer, RowDealing, deal_order, deal_step, pull_deal,
};
use crate::core::mf::{CoordinateStep, FactorBlock, MfPartition, RotationSchedule};
use crate::core::roster::{ChangeRound, Reshape, RingControl};
use crate::kit::encoded_len;
use ndarray::Array2;
use petrel_ml::data::{IdMapping, Ratings};
use serde::{Deserialize, Serialize};

/// One point of the RMSE trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StradsMfRmsePoint {
    /// Rank-one coordinate updates so far.
    pub coordinate_updates: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// Train RMSE.
    pub train_rmse: f64,
    /// RMSE on the test set (`test_data` or the `test_fraction` split) of the same model,
    /// scored by the workers over the rotation (none without a test set).
    #[serde(default)]
    pub test_rmse: Option<f64>,
}

/// `metrics.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MfMetrics {
    /// Users.
    pub n_users: usize,
    /// Items.
    pub n_items: usize,
    /// Train ratings.
    pub train_ratings: usize,
    /// Test ratings.
    pub test_ratings: usize,
    /// Rank.
    pub rank: usize,
    /// L2 weight.
    pub lambda: f32,
    /// Workers.
    pub workers: usize,
    /// Ratings per worker (balance of the buckets).
    pub worker_ratings: Vec<u64>,
    /// Rounds (sub-rounds) run.
    pub rounds: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// RMSE trace.
    pub train_rmse: Vec<StradsMfRmsePoint>,
    /// Last train RMSE.
    pub final_train_rmse: f64,
    /// Test RMSE of the final model.
    pub final_test_rmse: f64,
    /// The target train RMSE.
    pub target_rmse: Option<f64>,
    /// When the target was first reached.
    pub time_to_target_s: Option<f64>,
    /// Bytes the scheduler node sent and received during the run (0 without a network):
    /// block ids and small partials only, the blocks travel worker to worker.
    #[serde(default)]
    pub scheduler_bytes: u64,
    /// The mean taken off the ratings (`global_mean`; 0 otherwise).
    #[serde(default)]
    pub global_mean: f32,
    /// Serialized size of all H blocks at the end: what one sub-round would move through
    /// the scheduler twice (out and back) if the blocks were routed through it.
    #[serde(default)]
    pub block_bytes: u64,
    /// Serialized size of the final Collect round's partials (W and the blocks), included
    /// in `scheduler_bytes`.
    #[serde(default)]
    pub collect_bytes: u64,
    /// With `balance = "dynamic"`: how the users were dealt (its rows are users).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<RowDealing>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Stage {
    /// Rotation of `phase` for coordinate `k`, sub-round `t`.
    Rotate {
        phase: Phase,
        k: usize,
        t: usize,
    },
    Collect,
    Finished,
}

/// What an [`MfScheduling`] changes while running (what a round checkpoint holds): where
/// the rotation sequence is and the metrics so far.
#[derive(Clone, Serialize, Deserialize)]
struct MfSchedulingState {
    /// Sweep steps done (over all sweeps).
    iteration: usize,
    inner_done: usize,
    stage: Stage,
    coordinate_updates: u64,
    metrics: MfMetrics,
}

/// What the scheduler needs of the training ratings: their shape, not the ratings.
struct RatingsShape {
    n_users: usize,
    n_items: usize,
    train_ratings: usize,
    ids: Option<IdMapping>,
    item_counts: Vec<usize>,
}

/// Scheduler half: the rotation sequence. The blocks stay with the workers and come back
/// only in the final Collect round.
pub struct MfScheduling {
    schedule: RotationSchedule,
    blocks: Vec<Option<FactorBlock>>,
    /// Columns of W and H ([`crate::core::mf::MfLayout::width`]).
    rank: usize,
    /// The steps of one sweep (biases, then the factor coordinates).
    sweep: Vec<CoordinateStep>,
    inner: usize,
    outer: usize,
    s: MfSchedulingState,
    n_users: usize,
    w: Option<Array2<f32>>,
    /// Held out for the final test RMSE.
    pub(super) test: Ratings,
    /// Original user and item ids (triplet files), for the outputs.
    pub(super) ids: Option<IdMapping>,
    /// The digest of the ratings it was built from ([`MfRatingsSummary::digest`]).
    pub(super) data_digest: Option<u64>,
    /// With `balance = "dynamic"`: the user dealer (units: users in
    /// [`deal_order`](crate::core::balance::deal_order)), and whether a deal round is out.
    dealer: Option<RowDealer>,
    dealing: bool,
    /// A change of the workers ([`MfScheduling`]'s `reshape`).
    change: ChangeState,
}

impl MfScheduling {
    /// The rotation over `partition`'s buckets for `train` (keeps `test` for the final
    /// test RMSE).
    pub fn new(
        partition: &MfPartition,
        train: &Ratings,
        test: &Ratings,
        job: &StradsMfSettings,
    ) -> Self {
        let shape = RatingsShape {
            n_users: train.n_users,
            n_items: train.n_items,
            train_ratings: train.entries.len(),
            ids: train.id_mapping.clone(),
            item_counts: train.item_counts(),
        };
        Self::with_shape(partition.n_buckets, shape, test.clone(), job)
    }

    /// The rotation over `workers` buckets for the ratings `summary` describes (and the
    /// mean taken off them), keeping `test` (moved) for the final test RMSE: all the
    /// scheduler holds of the ratings.
    pub fn from_summary(
        workers: usize,
        summary: &MfRatingsSummary,
        test: Ratings,
        job: &StradsMfSettings,
    ) -> Self {
        let shape = RatingsShape {
            n_users: summary.shape.n_users,
            n_items: summary.shape.n_items,
            train_ratings: summary.train_ratings,
            ids: summary.shape.id_mapping.clone(),
            item_counts: summary.item_train_counts.clone(),
        };
        let mut scheduling = Self::with_shape(workers.max(1), shape, test, job);
        scheduling.data_digest = Some(summary.digest());
        scheduling.s.metrics.global_mean = summary.mean;
        scheduling
    }

    fn with_shape(p: usize, shape: RatingsShape, test: Ratings, job: &StradsMfSettings) -> Self {
        let RatingsShape {
            n_users,
            n_items,
            train_ratings,
            ids,
            item_counts,
        } = shape;
        MfScheduling {
            schedule: RotationSchedule { p },
            blocks: vec![None; p],
            rank: job.layout().width(),
            sweep: job.layout().sweep(),
            inner: job.inner_iterations.max(1),
            outer: job.outer_iterations,
            s: MfSchedulingState {
                iteration: 0,
                inner_done: 0,
                // Start with a Visit rotation: its report is the RMSE of the initial model.
                stage: Stage::Rotate {
                    phase: Phase::Visit,
                    k: 0,
                    t: 0,
                },
                coordinate_updates: 0,
                metrics: MfMetrics {
                    n_users,
                    n_items,
                    train_ratings,
                    test_ratings: test.entries.len(),
                    rank: job.rank,
                    lambda: job.lambda,
                    workers: p,
                    final_train_rmse: f64::NAN,
                    final_test_rmse: f64::NAN,
                    target_rmse: job.target_rmse,
                    ..MfMetrics::default()
                },
            },
            n_users,
            w: None,
            test,
            ids,
            data_digest: None,
            dealer: None,
            dealing: false,
            change: ChangeState {
                item_counts,
                ..ChangeState::default()
            },
        }
    }

    /// With `balance = "dynamic"`, re-deals the users of `partition` by measured speed.
    pub fn deal_users(
        &mut self,
        partition: &MfPartition,
        job: &StradsMfSettings,
    ) -> Result<(), StradsModelError> {
        if job.balance == Balance::Dynamic {
            let shares = DealtShare::counts(&partition.user_bucket, partition.n_buckets);
            self.dealer = Some(RowDealer::from_shares(shares)?);
            self.change.user_order = deal_order(&partition.user_bucket);
        }
        Ok(())
    }

    /// Records the bytes the scheduler node moved during the run.
    pub fn set_scheduler_bytes(&mut self, bytes: u64) {
        self.s.metrics.scheduler_bytes = bytes;
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &MfMetrics {
        &self.s.metrics
    }

    /// `(W, H)` once the job finished.
    pub fn factors(&self) -> Option<(Array2<f32>, Array2<f32>)> {
        let w = self.w.clone()?;
        let n_items = self.s.metrics.n_items;
        let mut h = Array2::zeros((n_items, self.rank));
        for block in self.blocks.iter().flatten() {
            for (c, &i) in block.item_ids.iter().enumerate() {
                for k in 0..self.rank {
                    h[[i as usize, k]] = block.factors[c * self.rank + k];
                }
            }
        }
        Some((w, h))
    }

    /// A Collect round's answers: W and the blocks come back to the scheduler.
    fn collect(&mut self, partials: Vec<MfPartial>) -> Result<(), StradsModelError> {
        let mut w = Array2::zeros((self.n_users, self.rank));
        let mut block_bytes = 0u64;
        self.s.metrics.collect_bytes = partials.iter().map(encoded_len).sum();
        for (worker, partial) in partials.into_iter().enumerate() {
            let MfPartial::Factors {
                user_ids,
                w: rows,
                block,
            } = partial
            else {
                return Err(StradsModelError::protocol(format!(
                    "worker {worker} answered collect with a visit"
                )));
            };
            if rows.len() != user_ids.len() * self.rank {
                return Err(StradsModelError::DimensionMismatch(
                    "factor rows do not match the user ids".into(),
                ));
            }
            for (r, &u) in user_ids.iter().enumerate() {
                for k in 0..self.rank {
                    if let Some(slot) = w.get_mut([u as usize, k]) {
                        *slot = rows[r * self.rank + k];
                    }
                }
            }
            let expected = self
                .schedule
                .check_block(worker, 0, block.block, "returned")?;
            if block.rank != self.rank {
                return Err(StradsModelError::protocol(format!(
                    "worker {worker} returned block {expected} of rank {}",
                    block.rank
                )));
            }
            block_bytes += encoded_len(&block);
            self.blocks[expected] = Some(block);
        }
        self.s.metrics.block_bytes = block_bytes;
        self.w = Some(w);
        Ok(())
    }

    /// Sweep step number `iteration` (over all sweeps).
    fn step(&self, iteration: usize) -> CoordinateStep {
        self.sweep[iteration % self.sweep.len()]
    }

    /// The first rotation of a step: H, or W for a step that updates only W.
    fn start(step: CoordinateStep) -> Stage {
        Stage::Rotate {
            phase: if step.update_h { Phase::H } else { Phase::W },
            k: step.k,
            t: 0,
        }
    }

    /// The stage after a finished rotation of `phase` for `k`.
    fn after_rotation(&mut self, phase: Phase, k: usize) -> Stage {
        let total = self.outer * self.sweep.len();
        let step = self.step(self.s.iteration);
        match phase {
            Phase::Visit if self.s.iteration < total => Self::start(step),
            Phase::Visit => Stage::Collect,
            Phase::H if step.update_w => Stage::Rotate {
                phase: Phase::W,
                k,
                t: 0,
            },
            Phase::H | Phase::W => {
                self.s.coordinate_updates += 1;
                self.s.inner_done += 1;
                // A bias has a closed form: repeating its step would change nothing.
                let repeats = if step.update_h && step.update_w {
                    self.inner
                } else {
                    1
                };
                if self.s.inner_done < repeats {
                    return Self::start(step);
                }
                self.s.inner_done = 0;
                self.s.iteration += 1;
                if self.s.iteration < total {
                    Self::start(self.step(self.s.iteration))
                } else {
                    // A last Visit rotation folds the final change into the residuals.
                    Stage::Rotate {
                        phase: Phase::Visit,
                        k: 0,
                        t: 0,
                    }
                }
            }
        }
    }
}

impl Schedule<MfApp> for MfScheduling {
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<MfTask> {
        if in_flight > 0 {
            // Every sub-round needs the blocks of the previous one (and its commit).
            return Step::Wait;
        }
        match self.change.steps.next_round(self.dealer.as_ref()) {
            Some(ChangeRound::Gather) => {
                return self.schedule.plan(0, |_, block| MfTask::Collect { block });
            }
            Some(ChangeRound::Reform(ring)) => return self.epoch_step(ring),
            None => {}
        }
        // Users move only between rotations, with the W accumulators empty.
        if let Stage::Rotate { t: 0, .. } = self.s.stage
            && let Some(dealer) = &mut self.dealer
            && let DealGate::Deal(ranges) = dealer.gate(round, false, true)
        {
            self.dealing = true;
            return deal_step(ranges, |start, end| {
                MfTask::Ring(RingControl::Deal { start, end })
            });
        }
        match self.s.stage {
            Stage::Rotate { phase, k, t } => {
                let last = t + 1 == self.schedule.p;
                self.schedule.plan(t, |w, block| MfTask::Visit {
                    phase,
                    k,
                    block,
                    pass_to: self.schedule.next_holder(w) as u32,
                    report: last && phase != Phase::H,
                    finalize_h: last && phase == Phase::H,
                })
            }
            // Every rotation has P sub-rounds, so the blocks are back where they started.
            Stage::Collect => self.schedule.plan(0, |_, block| MfTask::Collect { block }),
            Stage::Finished => Step::Done,
        }
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<MfPartial>,
        elapsed: Duration,
    ) -> Result<MfCommit, StradsModelError> {
        self.s.metrics.rounds = round + 1;
        self.s.metrics.elapsed_s = elapsed.as_secs_f64();
        if std::mem::take(&mut self.dealing) {
            // The released users go to their new owners in the commit.
            let now = elapsed.as_secs_f64();
            let moved = pull_deal(self.dealer.as_mut(), partials, now, MfPartial::released)?;
            return Ok(MfCommit {
                finalize_w: None,
                moved,
            });
        }
        if let Some(dealer) = &mut self.dealer {
            dealer.pulled(elapsed.as_secs_f64(), false);
            self.s.metrics.balance = Some(dealer.report());
        }
        let none = MfCommit {
            finalize_w: None,
            moved: Vec::new(),
        };
        if std::mem::take(&mut self.change.steps.gathering) {
            self.collect(partials)?;
            self.change.steps.gathered = true;
            return Ok(none);
        }
        if std::mem::take(&mut self.change.steps.epoch) {
            return Ok(none);
        }
        match self.s.stage {
            Stage::Rotate { phase, k, t } => {
                let mut sq = 0.0;
                let mut n = 0u64;
                let (mut test_sq, mut test_n) = (0.0, 0u64);
                let mut reported = false;
                let mut per_worker = Vec::new();
                for (w, partial) in partials.into_iter().enumerate() {
                    let MfPartial::Visited {
                        block,
                        squared_error,
                        test_error,
                        busy_s,
                    } = partial
                    else {
                        return Err(StradsModelError::protocol(format!(
                            "worker {w} answered a visit with factors"
                        )));
                    };
                    self.schedule.check_block(w, t, block, "visited")?;
                    if let Some(dealer) = &mut self.dealer {
                        dealer.observe(w, busy_s);
                    }
                    if let Some((s, c)) = squared_error {
                        sq += s;
                        n += c;
                        reported = true;
                        per_worker.push(c);
                    }
                    if let Some((s, c)) = test_error {
                        test_sq += s;
                        test_n += c;
                    }
                }
                if reported && n > 0 {
                    let train_rmse = (sq / n as f64).sqrt();
                    self.s.metrics.worker_ratings = per_worker;
                    self.s.metrics.final_train_rmse = train_rmse;
                    let node = petrel_observe::thread_node();
                    petrel_observe::metrics()
                        .job
                        .point(&node, "train_rmse", elapsed, train_rmse);
                    self.s.metrics.train_rmse.push(StradsMfRmsePoint {
                        coordinate_updates: self.s.coordinate_updates,
                        elapsed_s: elapsed.as_secs_f64(),
                        train_rmse,
                        test_rmse: (test_n > 0).then(|| (test_sq / test_n as f64).sqrt()),
                    });
                    if let Some(target) = self.s.metrics.target_rmse
                        && train_rmse <= target
                        && self.s.metrics.time_to_target_s.is_none()
                    {
                        self.s.metrics.time_to_target_s = Some(elapsed.as_secs_f64());
                    }
                }
                if t + 1 < self.schedule.p {
                    self.s.stage = Stage::Rotate { phase, k, t: t + 1 };
                    return Ok(MfCommit {
                        finalize_w: None,
                        moved: Vec::new(),
                    });
                }
                // End of a rotation (an H rotation's last visits finalised h_k).
                self.s.stage = self.after_rotation(phase, k);
                Ok(MfCommit {
                    finalize_w: (phase == Phase::W).then_some(k),
                    moved: Vec::new(),
                })
            }
            Stage::Collect => {
                self.collect(partials)?;
                self.s.stage = Stage::Finished;
                Ok(none)
            }
            Stage::Finished => Err(StradsModelError::protocol("pull after the job finished")),
        }
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        if self.s.stage == Stage::Finished {
            // Collected: nothing is left to run, so nothing to checkpoint.
            return Ok(None);
        }
        encode_state(&self.s)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let s: MfSchedulingState = decode_state(state)?;
        let m = &self.s.metrics;
        crate::core::check_sizes(&[
            ("users", s.metrics.n_users, m.n_users),
            ("items", s.metrics.n_items, m.n_items),
            ("factors (rank)", s.metrics.rank, m.rank),
            ("workers", s.metrics.workers, m.workers),
        ])?;
        self.s = s;
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    /// With `balance = "dynamic"`, at a rotation boundary: first a Collect round gathers
    /// W and H (this answers `None`, the next round is it), then the change's round
    /// re-forms the ring over the staying workers with the users dealt evenly. Elsewhere
    /// in a rotation, and once the job is collecting, the workers stay for now.
    fn reshape(
        &mut self,
        round: u64,
        change: &Reshape,
    ) -> Result<Option<Step<MfTask>>, StradsModelError> {
        self.change_workers(round, change)
    }
}
