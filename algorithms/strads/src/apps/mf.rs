//! Matrix factorisation by CCD++ with block rotation on the STRADS actor runtime.
//!
//! Users and items are bucketed over the P workers, balanced by rating counts
//! ([`MfPartition::balanced`]). Worker `w` owns user bucket `w` (its rows of W and their
//! ratings with residuals). The P column blocks of H rotate around the ring of workers
//! ([`crate::shells::ring`]): in sub-round `t` of a rotation worker `w` holds block
//! `(w + t) mod P` ([`RotationSchedule`]) and afterwards hands it to worker `w - 1` in a
//! worker-to-worker `Handoff`, so no two workers update the same block at once and the
//! blocks never pass through the scheduler. The scheduler's tasks carry only the block id,
//! the next holder and flags; partials carry the block id and, at the end of a W or Visit
//! rotation, the worker's squared error. One rank-one coordinate `k` is an H rotation
//! (every worker adds its sums into each block; the last visitor finalises `h_k` in the
//! block) followed by a W rotation (every worker sums over each block; the commit tells the
//! workers to finalise `w_k`). A final Collect round moves W and the blocks to the
//! scheduler for the outputs.
//!
//! Roles `strads-mf-scheduler` / `strads-mf-worker`, settings `[app.strads_mf]`; outputs
//! `user_factors.tsv`, `item_factors.tsv`, `metrics.json`.

use std::path::PathBuf;
use std::time::Duration;

use crate::core::ModelError;
use crate::core::app::{
    BlockFate, BlockId, Plan, RingApp, RingOutput, RingPush, Schedule, Step, StradsApp,
};
use crate::error::StradsError;
use crate::kit::{FinishedRun, JobShape, RingHalf, StradsJob, write_json, write_output};
use crate::shells::SchedulerOptions;
use ndarray::Array2;
use petrel_messages::tensor::f32_bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::core::mf::{FactorBlock, MfPartition, MfWorker, RotationSchedule, rmse};
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use petrel_ml::data::{IdMapping, Ratings};

/// The scheduler's role.
pub const SCHEDULER_ROLE: &str = "strads-mf-scheduler";
/// The workers' role (and actor).
pub const WORKER_ROLE: &str = "strads-mf-worker";

/// Synthetic low-rank ratings (see [`low_rank_ratings`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyntheticRatings {
    /// Users.
    pub n_users: usize,
    /// Items.
    pub n_items: usize,
    /// Rank of the generating factors.
    pub rank: usize,
    /// Fraction of the matrix observed.
    pub observed_fraction: f64,
    /// Noise of the ratings.
    pub noise_std: f32,
    /// Seed.
    pub seed: u64,
}

impl Default for SyntheticRatings {
    fn default() -> Self {
        SyntheticRatings {
            n_users: 2000,
            n_items: 1000,
            rank: 10,
            observed_fraction: 0.05,
            noise_std: 0.1,
            seed: 42,
        }
    }
}

/// `[app.strads_mf]` and the flags of `petrel train strads-mf`: one settings struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
pub struct StradsMfJob {
    /// Ratings: `user item rating` triplets, or MatrixMarket coordinate format. Without
    /// it: synthetic low-rank ratings.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The synthetic ratings used without a data file (TOML only).
    #[arg(skip)]
    pub synthetic: SyntheticRatings,
    /// Rank of the model.
    #[arg(long, default_value_t = 10)]
    pub rank: usize,
    /// L2 weight.
    #[arg(long, default_value_t = 0.05)]
    pub lambda: f32,
    /// Sweeps over all rank-one coordinates.
    #[arg(long = "iterations", default_value_t = 5)]
    pub outer_iterations: usize,
    /// (h_k, w_k) alternations per coordinate and sweep.
    #[arg(long = "inner", default_value_t = 1)]
    pub inner_iterations: usize,
    /// Held-out fraction for the test RMSE.
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    /// Train RMSE at which `time_to_target_s` is recorded.
    #[arg(long)]
    pub target_rmse: Option<f64>,
    /// Seed of the split and of the initial factors.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where the scheduler writes the factors and `metrics.json` (`--out`).
    #[arg(skip)]
    pub out_dir: Option<PathBuf>,
    /// Timeout of one round's requests, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
}

impl Default for StradsMfJob {
    fn default() -> Self {
        StradsMfJob {
            data: None,
            synthetic: SyntheticRatings::default(),
            rank: 10,
            lambda: 0.05,
            outer_iterations: 5,
            inner_iterations: 1,
            test_fraction: 0.1,
            target_rmse: None,
            seed: 0,
            out_dir: None,
            timeout_s: 60,
        }
    }
}

impl StradsMfJob {
    /// `(train, test)` ratings, identical on every node.
    pub fn load(&self) -> Result<(Ratings, Ratings), StradsError> {
        let all = match &self.data {
            Some(path) => petrel_ml::data::load_ratings(path)?,
            None => {
                let s = &self.synthetic;
                low_rank_ratings(&LowRankParams {
                    n_users: s.n_users,
                    n_items: s.n_items,
                    rank: s.rank,
                    observed_fraction: s.observed_fraction,
                    noise_std: s.noise_std,
                    seed: s.seed,
                })?
                .ratings
            }
        };
        if all.entries.is_empty() {
            return Err(ModelError::InvalidConfig("no ratings".into()).into());
        }
        if self.rank == 0 {
            return Err(ModelError::InvalidConfig("rank must be >= 1".into()).into());
        }
        Ok(all.train_test_split(self.test_fraction, self.seed)?)
    }
}

/// Marker type of the MF wire types.
pub struct MfApp;

/// What a rotation does with the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Add sums for `h_k` into the block.
    H,
    /// Add sums for `w_k` from the block.
    W,
    /// Only fold pending changes into the residuals (for an exact RMSE).
    Visit,
}

/// Scheduler -> worker: names the block (held by the worker or on its way there); the
/// block itself travels worker to worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MfTask {
    /// Visit a block.
    Visit {
        /// The rotation's phase.
        phase: Phase,
        /// The rank-one coordinate.
        k: usize,
        /// The block.
        block: usize,
        /// Worker that gets the block afterwards.
        pass_to: u32,
        /// Report the worker's squared error after this visit (last sub-round of a W or
        /// Visit rotation: every pending change has been folded in).
        report: bool,
        /// Last visit of an H rotation: every worker has added its sums, finalise `h_k`
        /// in the block before passing it on.
        finalize_h: bool,
    },
    /// Send back this worker's rows of W and the block (it leaves the ring).
    Collect {
        /// The block.
        block: usize,
    },
}

/// Worker -> scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MfPartial {
    /// A visit is done.
    Visited {
        /// The block visited.
        block: usize,
        /// `(sum of squared errors, ratings)` when asked to report.
        squared_error: Option<(f64, u64)>,
    },
    /// The worker's factors and its block (Collect).
    Factors {
        /// Users of the worker's rows of W.
        user_ids: Vec<u32>,
        /// Its rows of W.
        #[serde(with = "f32_bytes")]
        w: Vec<f32>,
        /// The block.
        block: FactorBlock,
    },
}

/// Finalise `w_k` after a W rotation (or nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MfCommit {
    /// The coordinate whose `w_k` every worker finalises.
    pub finalize_w: Option<usize>,
}

impl StradsApp for MfApp {
    const DISPATCH_NAME: &'static str = "petrel.strads.mf.dispatch";
    const COMMIT_NAME: &'static str = "petrel.strads.mf.commit";
    type Task = MfTask;
    type Partial = MfPartial;
    type Commit = MfCommit;
}

impl RingApp for MfApp {
    const HANDOFF_NAME: &'static str = "petrel.strads.mf.handoff";
    type Block = FactorBlock;

    fn block_needed(task: &MfTask) -> Option<BlockId> {
        match task {
            MfTask::Visit { block, .. } | MfTask::Collect { block } => Some(*block as BlockId),
        }
    }
}

/// Worker half.
pub struct MfWorkerApp {
    worker: MfWorker,
    lambda: f32,
    rank: usize,
    n_workers: usize,
}

impl MfWorkerApp {
    /// Worker `index` of a partition; W starts uniform in `[0, 1/sqrt(rank))` from a seed
    /// derived from `(seed, index)`, H at zero.
    pub fn new(
        index: usize,
        partition: &MfPartition,
        train: &Ratings,
        job: &StradsMfJob,
    ) -> Result<Self, ModelError> {
        let rank = job.rank;
        let users = partition
            .bucket_users
            .get(index)
            .ok_or_else(|| ModelError::InvalidConfig(format!("no bucket {index}")))?
            .len();
        let mut rng = StdRng::seed_from_u64(job.seed.wrapping_mul(1_000_003) ^ index as u64);
        let scale = 1.0 / (rank as f32).sqrt();
        let init = (0..users * rank)
            .map(|_| rng.gen_range(0.0..scale))
            .collect();
        let worker = MfWorker::new(
            index,
            partition,
            train,
            rank,
            init,
            &initial_blocks(partition, rank),
        )?;
        Ok(MfWorkerApp {
            worker,
            lambda: job.lambda,
            rank,
            n_workers: partition.n_buckets,
        })
    }
}

fn initial_blocks(partition: &MfPartition, rank: usize) -> Vec<FactorBlock> {
    partition
        .bucket_items
        .iter()
        .enumerate()
        .map(|(b, ids)| FactorBlock::new(b, rank, ids.clone(), vec![0.0; ids.len() * rank]))
        .collect()
}

/// The blocks worker `index` holds before the first sub-round: block `index` (H at zero).
pub fn initial_ring_blocks(
    index: usize,
    partition: &MfPartition,
    rank: usize,
) -> Vec<(BlockId, FactorBlock)> {
    let schedule = RotationSchedule {
        p: partition.n_buckets,
    };
    initial_blocks(partition, rank)
        .into_iter()
        .filter(|b| schedule.holder(b.block, 0) == index)
        .map(|b| (b.block as BlockId, b))
        .collect()
}

impl RingPush<MfApp> for MfWorkerApp {
    fn push(
        &mut self,
        _round: u64,
        task: &MfTask,
        block: Option<FactorBlock>,
    ) -> Result<RingOutput<MfPartial, FactorBlock>, ModelError> {
        let (expected, mut block) = match (task, block) {
            (MfTask::Visit { block: b, .. } | MfTask::Collect { block: b }, Some(block)) => {
                (*b, block)
            }
            (_, None) => return Err(ModelError::protocol("no block for a task that needs one")),
        };
        if block.block != expected || block.rank != self.rank {
            return Err(ModelError::protocol(format!(
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
                    return Err(ModelError::protocol(format!(
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
                if *finalize_h {
                    block.finalize(*k, self.lambda, self.n_workers);
                }
                let squared_error = report.then(|| {
                    let (s, n) = self.worker.squared_error();
                    (s, n as u64)
                });
                Ok(RingOutput {
                    partial: MfPartial::Visited {
                        block: expected,
                        squared_error,
                    },
                    block: BlockFate::PassTo {
                        worker: *pass_to,
                        block,
                    },
                })
            }
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

    fn commit(&mut self, _round: u64, commit: &MfCommit) -> Result<(), ModelError> {
        if let Some(k) = commit.finalize_w {
            if k >= self.rank {
                return Err(ModelError::protocol(format!(
                    "finalize w_{k} with rank {}",
                    self.rank
                )));
            }
            self.worker.finalize_w(k, self.lambda);
        }
        Ok(())
    }
}

/// One point of the RMSE trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RmsePoint {
    /// Rank-one coordinate updates so far.
    pub coordinate_updates: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// Train RMSE.
    pub train_rmse: f64,
}

/// `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub train_rmse: Vec<RmsePoint>,
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
    /// Serialized size of all H blocks at the end: what one sub-round would move through
    /// the scheduler twice (out and back) if the blocks were routed through it.
    #[serde(default)]
    pub block_bytes: u64,
    /// Serialized size of the final Collect round's partials (W and the blocks), included
    /// in `scheduler_bytes`.
    #[serde(default)]
    pub collect_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
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

/// Scheduler half: the rotation sequence. The blocks stay with the workers and come back
/// only in the final Collect round.
pub struct MfScheduling {
    schedule: RotationSchedule,
    blocks: Vec<Option<FactorBlock>>,
    rank: usize,
    inner: usize,
    outer: usize,
    /// (outer, k, inner) progress.
    iteration: usize,
    inner_done: usize,
    stage: Stage,
    coordinate_updates: u64,
    n_users: usize,
    w: Option<Array2<f32>>,
    metrics: MfMetrics,
    /// Held out for the final test RMSE.
    test: Ratings,
    /// Original user and item ids (triplet files), for the outputs.
    ids: Option<IdMapping>,
}

impl MfScheduling {
    /// The rotation over `partition`'s buckets for `train` (keeps `test` for the final
    /// test RMSE).
    pub fn new(
        partition: &MfPartition,
        train: &Ratings,
        test: &Ratings,
        job: &StradsMfJob,
    ) -> Self {
        let p = partition.n_buckets;
        MfScheduling {
            schedule: RotationSchedule { p },
            blocks: vec![None; p],
            rank: job.rank,
            inner: job.inner_iterations.max(1),
            outer: job.outer_iterations,
            iteration: 0,
            inner_done: 0,
            // Start with a Visit rotation: its report is the RMSE of the initial model.
            stage: Stage::Rotate {
                phase: Phase::Visit,
                k: 0,
                t: 0,
            },
            coordinate_updates: 0,
            n_users: train.n_users,
            w: None,
            metrics: MfMetrics {
                n_users: train.n_users,
                n_items: train.n_items,
                train_ratings: train.entries.len(),
                test_ratings: test.entries.len(),
                rank: job.rank,
                lambda: job.lambda,
                workers: p,
                worker_ratings: Vec::new(),
                rounds: 0,
                elapsed_s: 0.0,
                train_rmse: Vec::new(),
                final_train_rmse: f64::NAN,
                final_test_rmse: f64::NAN,
                target_rmse: job.target_rmse,
                time_to_target_s: None,
                scheduler_bytes: 0,
                block_bytes: 0,
                collect_bytes: 0,
            },
            test: test.clone(),
            ids: train.id_mapping.clone(),
        }
    }

    /// Records the bytes the scheduler node moved during the run.
    pub fn set_scheduler_bytes(&mut self, bytes: u64) {
        self.metrics.scheduler_bytes = bytes;
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &MfMetrics {
        &self.metrics
    }

    /// `(W, H)` once the job finished.
    pub fn factors(&self) -> Option<(Array2<f32>, Array2<f32>)> {
        let w = self.w.clone()?;
        let n_items = self.metrics.n_items;
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

    /// The stage after a finished rotation of `phase` for `k`.
    fn after_rotation(&mut self, phase: Phase, k: usize) -> Stage {
        let total = self.outer * self.rank;
        match phase {
            Phase::Visit if self.iteration < total => Stage::Rotate {
                phase: Phase::H,
                k: 0,
                t: 0,
            },
            Phase::Visit => Stage::Collect,
            Phase::H => Stage::Rotate {
                phase: Phase::W,
                k,
                t: 0,
            },
            Phase::W => {
                self.coordinate_updates += 1;
                self.inner_done += 1;
                if self.inner_done < self.inner {
                    return Stage::Rotate {
                        phase: Phase::H,
                        k,
                        t: 0,
                    };
                }
                self.inner_done = 0;
                self.iteration += 1;
                if self.iteration < total {
                    Stage::Rotate {
                        phase: Phase::H,
                        k: self.iteration % self.rank,
                        t: 0,
                    }
                } else {
                    // A last Visit rotation folds the final w_k into the residuals.
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
    fn schedule(&mut self, _round: u64, in_flight: usize) -> Step<MfTask> {
        if in_flight > 0 {
            // Every sub-round needs the blocks of the previous one (and its commit).
            return Step::Wait;
        }
        let p = self.schedule.p;
        match self.stage {
            Stage::Rotate { phase, k, t } => {
                let last = t + 1 == p;
                Step::Run(Plan::PerWorker(
                    (0..p)
                        .map(|w| MfTask::Visit {
                            phase,
                            k,
                            block: self.schedule.block_held(w, t),
                            pass_to: self.schedule.next_holder(w) as u32,
                            report: last && phase != Phase::H,
                            finalize_h: last && phase == Phase::H,
                        })
                        .collect(),
                ))
            }
            // Every rotation has P sub-rounds, so the blocks are back where they started.
            Stage::Collect => Step::Run(Plan::PerWorker(
                (0..p)
                    .map(|w| MfTask::Collect {
                        block: self.schedule.block_held(w, 0),
                    })
                    .collect(),
            )),
            Stage::Finished => Step::Done,
        }
    }

    fn pull(
        &mut self,
        round: u64,
        partials: Vec<MfPartial>,
        elapsed: Duration,
    ) -> Result<MfCommit, ModelError> {
        self.metrics.rounds = round + 1;
        self.metrics.elapsed_s = elapsed.as_secs_f64();
        match self.stage {
            Stage::Rotate { phase, k, t } => {
                let mut sq = 0.0;
                let mut n = 0u64;
                let mut reported = false;
                let mut per_worker = Vec::new();
                for (w, partial) in partials.into_iter().enumerate() {
                    let MfPartial::Visited {
                        block,
                        squared_error,
                    } = partial
                    else {
                        return Err(ModelError::protocol(format!(
                            "worker {w} answered a visit with factors"
                        )));
                    };
                    let expected = self.schedule.block_held(w, t);
                    if block != expected {
                        return Err(ModelError::protocol(format!(
                            "worker {w} visited block {block} instead of {expected}"
                        )));
                    }
                    if let Some((s, c)) = squared_error {
                        sq += s;
                        n += c;
                        reported = true;
                        per_worker.push(c);
                    }
                }
                if reported && n > 0 {
                    let train_rmse = (sq / n as f64).sqrt();
                    self.metrics.worker_ratings = per_worker;
                    self.metrics.final_train_rmse = train_rmse;
                    self.metrics.train_rmse.push(RmsePoint {
                        coordinate_updates: self.coordinate_updates,
                        elapsed_s: elapsed.as_secs_f64(),
                        train_rmse,
                    });
                    if let Some(target) = self.metrics.target_rmse
                        && train_rmse <= target
                        && self.metrics.time_to_target_s.is_none()
                    {
                        self.metrics.time_to_target_s = Some(elapsed.as_secs_f64());
                    }
                }
                if t + 1 < self.schedule.p {
                    self.stage = Stage::Rotate { phase, k, t: t + 1 };
                    return Ok(MfCommit { finalize_w: None });
                }
                // End of a rotation (an H rotation's last visits finalised h_k).
                self.stage = self.after_rotation(phase, k);
                Ok(MfCommit {
                    finalize_w: (phase == Phase::W).then_some(k),
                })
            }
            Stage::Collect => {
                let mut w = Array2::zeros((self.n_users, self.rank));
                let mut block_bytes = 0u64;
                self.metrics.collect_bytes = partials.iter().map(encoded_len).sum();
                for (worker, partial) in partials.into_iter().enumerate() {
                    let MfPartial::Factors {
                        user_ids,
                        w: rows,
                        block,
                    } = partial
                    else {
                        return Err(ModelError::protocol(format!(
                            "worker {worker} answered collect with a visit"
                        )));
                    };
                    if rows.len() != user_ids.len() * self.rank {
                        return Err(ModelError::DimensionMismatch(
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
                    let expected = self.schedule.block_held(worker, 0);
                    if block.block != expected || block.rank != self.rank {
                        return Err(ModelError::protocol(format!(
                            "worker {worker} returned block {} instead of {expected}",
                            block.block
                        )));
                    }
                    block_bytes += encoded_len(&block);
                    self.blocks[expected] = Some(block);
                }
                self.metrics.block_bytes = block_bytes;
                self.w = Some(w);
                self.stage = Stage::Finished;
                Ok(MfCommit { finalize_w: None })
            }
            Stage::Finished => Err(ModelError::protocol("pull after the job finished")),
        }
    }
}

/// Size of `value` as a message body.
fn encoded_len<T: Serialize>(value: &T) -> u64 {
    let mut bytes = Vec::new();
    match petrel_messages::encode_body(value, &mut bytes) {
        Ok(()) => bytes.len() as u64,
        Err(_) => 0,
    }
}

/// Writes `user_factors.tsv`, `item_factors.tsv` (`id<TAB>f_0<TAB>...`, original ids for
/// triplet files) and `metrics.json`.
pub fn write_outputs(
    dir: &std::path::Path,
    w: &Array2<f32>,
    h: &Array2<f32>,
    ids: Option<&IdMapping>,
    metrics: &MfMetrics,
) -> Result<(), StradsError> {
    let table = |m: &Array2<f32>, ids: Option<&Vec<String>>| {
        let mut s = String::new();
        for (i, row) in m.rows().into_iter().enumerate() {
            match ids.and_then(|v| v.get(i)) {
                Some(id) => s.push_str(id),
                None => s.push_str(&i.to_string()),
            }
            for v in row {
                s.push_str(&format!("\t{v}"));
            }
            s.push('\n');
        }
        s
    };
    write_output(
        dir,
        "user_factors.tsv",
        table(w, ids.map(|m| &m.user_ids)).as_bytes(),
    )?;
    write_output(
        dir,
        "item_factors.tsv",
        table(h, ids.map(|m| &m.item_ids)).as_bytes(),
    )?;
    write_json(dir, "metrics.json", metrics)
}

impl StradsJob for MfApp {
    const SECTION: &'static str = "strads_mf";
    const SCHEDULER_ROLE: &'static str = SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = WORKER_ROLE;
    type Config = StradsMfJob;
    type Scheduler = MfScheduling;
    type Worker = RingHalf<MfApp, MfWorkerApp>;

    fn scheduler_options(job: &StradsMfJob) -> SchedulerOptions {
        SchedulerOptions {
            timeout: Duration::from_secs(job.timeout_s.max(1)),
            ..SchedulerOptions::default()
        }
    }

    fn scheduler(job: &StradsMfJob, shape: &JobShape) -> Result<MfScheduling, StradsError> {
        let (train, test) = job.load()?;
        let partition = MfPartition::balanced(&train, shape.workers);
        Ok(MfScheduling::new(&partition, &train, &test, job))
    }

    fn worker(
        job: &StradsMfJob,
        index: usize,
        shape: &JobShape,
    ) -> Result<RingHalf<MfApp, MfWorkerApp>, StradsError> {
        let (train, _) = job.load()?;
        let partition = MfPartition::balanced(&train, shape.workers);
        let initial = initial_ring_blocks(index, &partition, job.rank);
        let worker = MfWorkerApp::new(index, &partition, &train, job)?;
        Ok(RingHalf::new(worker, initial))
    }

    fn finish(
        job: &StradsMfJob,
        mut scheduler: MfScheduling,
        run: &FinishedRun,
    ) -> Result<(), StradsError> {
        scheduler.set_scheduler_bytes(run.scheduler_bytes);
        let (w, h) = scheduler
            .factors()
            .ok_or_else(|| ModelError::protocol("the job ended without collecting the factors"))?;
        let mut metrics = scheduler.metrics().clone();
        metrics.final_test_rmse = rmse(&scheduler.test, &w, &h);
        tracing::info!(
            train_rmse = metrics.final_train_rmse,
            test_rmse = metrics.final_test_rmse,
            seconds = format!("{:.2}", metrics.elapsed_s),
            "mf finished"
        );
        if let Some(dir) = &job.out_dir {
            write_outputs(dir, &w, &h, scheduler.ids.as_ref(), &metrics)?;
        }
        Ok(())
    }
}

/// Registers the MF roles.
pub fn register(cluster: petrel_actors::Cluster) -> petrel_actors::Cluster {
    crate::kit::register::<MfApp>(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::serial::Delivery;
    use proptest::prelude::*;

    /// Runs the two halves without actors through the runtime's ring cores (blocks handed
    /// from worker to worker, every dispatch arriving before its block).
    pub(super) fn drive(job: &StradsMfJob, p: usize) -> (MfScheduling, Ratings, Ratings) {
        drive_with(job, p, Delivery::Late).unwrap()
    }

    fn drive_with(
        job: &StradsMfJob,
        p: usize,
        delivery: Delivery,
    ) -> Result<(MfScheduling, Ratings, Ratings), StradsError> {
        let (train, test) = job.load().unwrap();
        let (sched, run) = crate::kit::run_serial::<MfApp>(job, p, delivery)?;
        assert!(
            run.held.iter().all(Vec::is_empty),
            "collect empties the ring"
        );
        Ok((sched, train, test))
    }

    fn small_job() -> StradsMfJob {
        StradsMfJob {
            synthetic: SyntheticRatings {
                n_users: 120,
                n_items: 80,
                rank: 3,
                observed_fraction: 0.3,
                noise_std: 0.05,
                seed: 1,
            },
            rank: 3,
            lambda: 0.05,
            outer_iterations: 6,
            target_rmse: Some(0.5),
            ..StradsMfJob::default()
        }
    }

    #[test]
    fn rotation_ccdpp_fits_low_rank_ratings() {
        let (sched, train, test) = drive(&small_job(), 3);
        let m = sched.metrics();
        let first = m.train_rmse.first().unwrap().train_rmse;
        // The trace's reported RMSE matches the RMSE recomputed from the gathered factors.
        let (w, h) = sched.factors().unwrap();
        let recomputed = rmse(&train, &w, &h);
        assert!(
            (recomputed - m.final_train_rmse).abs() < 1e-3,
            "{recomputed} vs {}",
            m.final_train_rmse
        );
        assert!(
            m.final_train_rmse < 0.3 * first,
            "{first} -> {}",
            m.final_train_rmse
        );
        assert!(
            rmse(&test, &w, &h) < 0.5,
            "test rmse {}",
            rmse(&test, &w, &h)
        );
        assert!(m.time_to_target_s.is_some());
        assert_eq!(
            m.worker_ratings.iter().sum::<u64>() as usize,
            train.entries.len()
        );
    }

    #[test]
    fn distributed_rotation_matches_one_worker_quality() {
        let job = small_job();
        let (one, _, _) = drive(&job, 1);
        let (four, _, _) = drive(&job, 4);
        let a = one.metrics().final_train_rmse;
        let b = four.metrics().final_train_rmse;
        // Both fit down to about the noise level (0.05); initialisations differ per bucket.
        assert!(a < 0.1 && b < 0.1, "{a} vs {b}");
    }

    #[test]
    fn scheduler_messages_carry_no_blocks() {
        let job = small_job();
        let (train, test) = job.load().unwrap();
        let partition = MfPartition::balanced(&train, 3);
        let mut sched = MfScheduling::new(&partition, &train, &test, &job);
        let Step::Run(Plan::PerWorker(tasks)) = sched.schedule(0, 0) else {
            panic!("first round");
        };
        let size = |t: &MfTask| {
            let mut out = Vec::new();
            petrel_messages::encode_body(t, &mut out).unwrap();
            out.len()
        };
        // Field names and a handful of small numbers.
        assert!(tasks.iter().all(|t| size(t) < 100), "{tasks:?}");
        let mut block = Vec::new();
        petrel_messages::encode_body(&initial_blocks(&partition, job.rank)[0], &mut block).unwrap();
        assert!(block.len() > 200, "a block is {} bytes", block.len());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        /// Whatever order dispatches and handoffs arrive in, the ring never has one block in
        /// two places (the driver checks after every message; a wrong plan would deadlock)
        /// and the result is the same bit for bit.
        #[test]
        fn ring_never_holds_a_block_twice(p in 1usize..5, seed in any::<u64>()) {
            let job = StradsMfJob { outer_iterations: 2, ..small_job() };
            let (late, _, _) = drive_with(&job, p, Delivery::Late).unwrap();
            let shuffled = drive_with(&job, p, Delivery::Shuffled(seed));
            prop_assert!(shuffled.is_ok(), "{:?}", shuffled.err());
            let (shuffled, _, _) = shuffled.unwrap();
            prop_assert_eq!(&late.metrics().train_rmse, &shuffled.metrics().train_rmse);
            prop_assert_eq!(late.metrics().rounds, shuffled.metrics().rounds);
            prop_assert_eq!(late.factors(), shuffled.factors());
        }
    }

    #[test]
    fn worker_rejects_a_block_it_was_not_asked_for() {
        let job = small_job();
        let (train, _) = job.load().unwrap();
        let partition = MfPartition::balanced(&train, 2);
        let mut w = MfWorkerApp::new(0, &partition, &train, &job).unwrap();
        let task = MfTask::Visit {
            phase: Phase::H,
            k: 0,
            block: 0,
            pass_to: 1,
            report: false,
            finalize_h: false,
        };
        let other = initial_ring_blocks(1, &partition, job.rank).remove(0).1;
        let err = w.push(0, &task, Some(other)).unwrap_err().to_string();
        assert!(err.contains("got block 1"), "{err}");
        assert!(w.push(0, &task, None).is_err());
        let mine = initial_ring_blocks(0, &partition, job.rank).remove(0).1;
        let out = w.push(0, &task, Some(mine)).unwrap();
        assert!(matches!(out.block, BlockFate::PassTo { worker: 1, .. }));
    }

    #[test]
    fn worker_rejects_a_bad_coordinate() {
        let job = small_job();
        let (train, _) = job.load().unwrap();
        let partition = MfPartition::balanced(&train, 2);
        let mut w = MfWorkerApp::new(0, &partition, &train, &job).unwrap();
        assert!(
            w.commit(
                0,
                &MfCommit {
                    finalize_w: Some(99)
                }
            )
            .is_err()
        );
    }
}
