//! Matrix factorisation by CCD++ with block rotation on the STRADS actor runtime.
//!
//! Users and items are bucketed over the P workers, balanced by rating counts
//! ([`crate::core::mf::MfPartition::balanced`]); worker `w` owns user bucket `w`. The P
//! column blocks of H rotate around the ring ([`crate::shells::ring`],
//! [`RotationSchedule`](crate::core::mf::RotationSchedule)): in sub-round `t` worker `w`
//! holds block `(w + t) mod P`, then hands it to worker `w - 1`, so no two workers update
//! one block at once and blocks never pass through the scheduler. One rank-one coordinate
//! `k` is an H rotation (the last visitor finalises `h_k` in the block) followed by a W
//! rotation (the commit tells the workers to finalise `w_k`); the end of a W or Visit
//! rotation reports the squared errors. A final Collect round moves W and the blocks to
//! the scheduler for the outputs.
//!
//! With `balance = "dynamic"` the scheduler re-deals the users between rotations by each
//! worker's measured visit time per user ([`crate::core::balance::RowDealer`]): a moved
//! user takes its row of W and its ratings, and its new owner computes its residuals
//! afresh on its first visit of each block, so the updates are those of static dealing.
//!
//! Roles `strads-mf-scheduler` / `strads-mf-worker`, settings `[app.strads_mf]`; outputs
//! `user_factors.tsv`, `item_factors.tsv`, `metrics.json`.

use std::path::PathBuf;

use crate::apps::lasso::Balance;
use crate::core::StradsModelError;
use crate::core::app::{BlockId, RingApp, strads_app};
use crate::core::roster::{RingControl, RingEpoch};
use crate::error::StradsError;
use crate::kit::dealing::Straggler;
use crate::kit::{FinishedRun, JobShape, RingHalf, StradsJob, StradsSettings, write_output};
use crate::shells::{RoundCheckpointSettings, SchedulerOptions};
use ndarray::Array2;

mod data;
mod scheduling;
mod worker;

pub use data::{MfRatingsSummary, Side};
use petrel_messages::tensor::f32_bytes;
pub use scheduling::{MfMetrics, MfScheduling, StradsMfRmsePoint};
use serde::{Deserialize, Serialize};
pub use worker::{MfWorkerApp, initial_ring_blocks};

use crate::core::mf::{FactorBlock, MfLayout, MfPartition, MfRidge, MovedUser, rmse};
use petrel_ml::data::synthetic::{LowRankParams, low_rank_ratings};
use petrel_ml::data::{IdMapping, Ratings};

/// The scheduler's role.
pub const SCHEDULER_ROLE: &str = "strads-mf-scheduler";
/// The workers' role (and actor).
pub const WORKER_ROLE: &str = "strads-mf-worker";

/// `[app.strads_mf]` and the flags of `petrel train strads-mf`: one settings struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct StradsMfSettings {
    /// Ratings: `user item rating` triplets, or MatrixMarket coordinate format. Without
    /// it: synthetic low-rank ratings.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Held-out ratings file: replaces the `test_fraction` split as the test set (pairs
    /// without a training rating for their user or item only count in the final
    /// `heldout_*` figures).
    #[arg(long)]
    pub test_data: Option<PathBuf>,
    /// The synthetic ratings used without a data file (TOML only).
    #[arg(skip)]
    pub synthetic: LowRankParams,
    /// Rank of the model.
    #[arg(long, default_value_t = 10)]
    pub rank: usize,
    /// L2 weight.
    #[arg(long, default_value_t = 0.05)]
    pub lambda: f32,
    /// Weight the L2 term by rating counts (ALS-WR): `lambda * n_u` for a user's row of W,
    /// `lambda * n_i` for an item's column of H (and for their biases).
    #[arg(long)]
    pub weighted_lambda: bool,
    /// Fit a bias per user and per item (`rating = mean + b_user + b_item + w_u . h_i`), one
    /// more CCD++ coordinate per sweep; saved in the model, not in the factor files.
    #[arg(long)]
    pub biases: bool,
    /// Sweeps over all rank-one coordinates.
    #[arg(long = "iterations", default_value_t = 5)]
    pub outer_iterations: usize,
    /// (h_k, w_k) alternations per coordinate and sweep.
    #[arg(long = "inner", default_value_t = 1)]
    pub inner_iterations: usize,
    /// Held-out fraction for the test RMSE (unused with `test_data`).
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    /// Train RMSE at which `time_to_target_s` is recorded.
    #[arg(long)]
    pub target_rmse: Option<f64>,
    /// Seed of the split and of the initial factors.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fit `rating = mean + w_u . h_i` (CCD++ on the ratings minus the training mean).
    #[arg(long)]
    pub global_mean: bool,
    /// Where the scheduler writes the factors and `metrics.json` (`--out`).
    #[arg(skip)]
    #[serde(rename = "out", alias = "out_dir")]
    pub out_dir: Option<PathBuf>,
    /// Timeout of one round's requests, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
    /// Round checkpoint directory, shared by all nodes (`petrel train`: `<out>/checkpoints`).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Rounds (sub-rounds of the rotation) between two checkpoints (0 = never write).
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: u64,
    /// Continue from the newest valid checkpoint in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
    /// How users are dealt to the workers: `static` (once, balanced by rating counts) or
    /// `dynamic` (re-dealt between rotations by each worker's measured time per user; a
    /// moved user takes its row of W and its ratings along).
    #[arg(long, value_enum, default_value_t = Balance::Static)]
    pub balance: Balance,
    /// Emulated slow worker (benches, tests): this worker's visits take
    /// `straggler_factor` times as long.
    #[arg(long)]
    pub straggler: Option<u32>,
    /// How many times as long the straggler's visits take.
    #[arg(long, default_value_t = 1.0)]
    pub straggler_factor: f64,
}

// Every default is written once, on its flag.
impl Default for StradsMfSettings {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl StradsMfSettings {
    /// Columns of W and H.
    pub fn layout(&self) -> MfLayout {
        MfLayout {
            rank: self.rank,
            biases: self.biases,
        }
    }

    /// The L2 weights.
    pub fn ridge(&self) -> MfRidge {
        MfRidge {
            lambda: self.lambda,
            per_rating: self.weighted_lambda,
        }
    }

    /// `(train, test)` ratings, whole (minus the training mean with `global_mean`).
    pub fn load(&self) -> Result<(Ratings, Ratings), StradsError> {
        let (train, test, _) = self.load_centred()?;
        Ok((train, test))
    }

    /// [`StradsMfSettings::load`] and the mean taken off the ratings (0 without `global_mean`).
    pub fn load_centred(&self) -> Result<(Ratings, Ratings, f32), StradsError> {
        let (mut train, mut test) = self.load_uncentred()?;
        let mut mean = 0.0f32;
        if self.global_mean && !train.entries.is_empty() {
            let sum: f64 = train.entries.iter().map(|e| f64::from(e.2)).sum();
            mean = (sum / train.entries.len() as f64) as f32;
            for e in train.entries.iter_mut().chain(test.entries.iter_mut()) {
                e.2 -= mean;
            }
        }
        Ok((train, test, mean))
    }

    fn load_uncentred(&self) -> Result<(Ratings, Ratings), StradsError> {
        let all = match &self.data {
            Some(path) => petrel_ml::data::load_ratings(path)?,
            None => low_rank_ratings(&self.synthetic)?.ratings,
        };
        if all.entries.is_empty() {
            return Err(StradsModelError::InvalidConfig("no ratings".into()).into());
        }
        if self.rank == 0 {
            return Err(StradsModelError::InvalidConfig("rank must be >= 1".into()).into());
        }
        match &self.test_data {
            Some(path) => {
                let test = self.held_out(&all, path)?;
                Ok((all, test))
            }
            None => Ok(all.into_train_test_split(self.test_fraction, self.seed)?),
        }
    }
}

impl StradsSettings for StradsMfSettings {
    /// Every value in range (keys as in `[app.strads_mf]`), checked before any node starts.
    fn validate(&self) -> Result<(), petrel_ml::job::InvalidSetting> {
        let mut c = petrel_ml::job::SettingChecks::new();
        if self.data.is_none() {
            self.synthetic.check("synthetic.", &mut c);
        }
        c.at_least("rank", self.rank, 1);
        c.non_negative("lambda", self.lambda);
        c.at_least("outer_iterations", self.outer_iterations, 1);
        c.at_least("inner_iterations", self.inner_iterations, 1);
        c.fraction("test_fraction", self.test_fraction);
        if let Some(t) = self.target_rmse {
            c.non_negative("target_rmse", t);
        }
        c.at_least("timeout_s", self.timeout_s, 1);
        RoundCheckpointSettings::check_resume(&mut c, self.resume, &self.checkpoint_dir);
        crate::kit::dealing::check_dealing(
            &mut c,
            self.balance,
            self.straggler_factor,
            &self.checkpoint_dir,
            self.resume,
        );
        c.finish()
    }

    /// Round checkpoints every `checkpoint_every` rounds into `checkpoint_dir`.
    fn round_checkpoints(&self) -> Option<RoundCheckpointSettings> {
        RoundCheckpointSettings::of(&self.checkpoint_dir, self.checkpoint_every, self.resume)
    }

    /// Depth 1: a ring round starts from every earlier commit.
    fn scheduler_options(&self) -> SchedulerOptions {
        SchedulerOptions::with_depth_and_timeout(1, self.timeout_s)
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

/// Scheduler -> worker: names the block (which travels worker to worker).
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
        /// Report the worker's squared error after this visit (a rotation's last).
        report: bool,
        /// Last visit of an H rotation: finalise `h_k` in the block before passing it on.
        finalize_h: bool,
    },
    /// Send back this worker's rows of W and the block (it leaves the ring).
    Collect {
        /// The block.
        block: usize,
    },
    /// A re-deal of the users (between rotations), or a change of the workers (after a
    /// Collect round gathered W and H): the ring re-forms over the workers of the moment,
    /// each rebuilding its users' ratings from the data against the current factors.
    Ring(RingControl<MfEpoch>),
}

/// MF's part of a change of the workers: the model as a run starts, but the current one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MfEpoch {
    /// Each user's worker (index in the ring).
    pub user_bucket: Vec<u32>,
    /// Each item's block (one block per worker).
    pub item_bucket: Vec<u32>,
    /// W, `users x width` row-major.
    #[serde(with = "f32_bytes")]
    pub w: Vec<f32>,
    /// H, `items x width` row-major.
    #[serde(with = "f32_bytes")]
    pub h: Vec<f32>,
}

impl RingEpoch<MfEpoch> {
    /// The partition it deals.
    pub fn partition(&self) -> MfPartition {
        let (users, items) = (
            self.model.user_bucket.clone(),
            self.model.item_bucket.clone(),
        );
        MfPartition::from_buckets(users, items, self.ring.len())
    }
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
        /// With the report: the same of the worker's test ratings.
        #[serde(default)]
        test_error: Option<(f64, u64)>,
        /// Seconds the worker has spent visiting in all (what dynamic dealing measures).
        #[serde(default)]
        busy_s: f64,
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
    /// The users the worker gave up in a deal round.
    Released(Vec<MovedUser>),
}

/// Finalise `w_k` after a W rotation (or nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MfCommit {
    /// The coordinate whose `w_k` every worker finalises.
    pub finalize_w: Option<usize>,
    /// After a deal round: every released user; each worker takes those it now owns.
    #[serde(default)]
    pub moved: Vec<MovedUser>,
}

strads_app!(MfApp, "petrel.strads.mf", MfTask, MfPartial, MfCommit);

impl MfPartial {
    /// The users of a deal round's answer (`None`: another answer).
    pub fn released(self) -> Option<Vec<MovedUser>> {
        match self {
            MfPartial::Released(users) => Some(users),
            _ => None,
        }
    }
}

impl RingApp for MfApp {
    const HANDOFF_NAME: &'static str = "petrel.strads.mf.handoff";
    type Block = FactorBlock;

    fn block_needed(task: &MfTask) -> Option<BlockId> {
        match task {
            MfTask::Visit { block, .. } | MfTask::Collect { block } => Some(*block as BlockId),
            MfTask::Ring(_) => None,
        }
    }

    fn new_ring(task: &MfTask) -> Option<&[String]> {
        match task {
            MfTask::Ring(control) => control.new_ring(),
            _ => None,
        }
    }
}

/// Writes `user_factors.tsv`, `item_factors.tsv` (`id<TAB>f_0<TAB>...`), the saved model,
/// `history.csv` and `metrics.json`; nothing if a figure diverged. `w` and `h` are full
/// width ([`MfLayout::width`]).
pub fn write_outputs(
    dir: &std::path::Path,
    w: &Array2<f32>,
    h: &Array2<f32>,
    ids: Option<&IdMapping>,
    metrics: &MfMetrics,
    job: &StradsMfSettings,
) -> Result<(), StradsError> {
    let mut run = metrics.run_metrics(job);
    run.check_finite("lower lambda's range or check the ratings for extreme values")?;
    let saved = saved_model(w, h, ids, metrics, job);
    saved.add_heldout(&mut run, job.test_data.as_deref(), job.seed)?;
    let (w, h, _, _) = job.layout().split_model(w, h);
    let (w, h) = (&w, &h);
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
    crate::kit::write_saved_model(dir, &saved)?;
    crate::kit::write_run_metrics(dir, &run)
}

/// The saved model: `rating = mean + b_u + b_i + w_u . h_i`, ids as in the training file.
fn saved_model(
    w: &Array2<f32>,
    h: &Array2<f32>,
    ids: Option<&IdMapping>,
    metrics: &MfMetrics,
    job: &StradsMfSettings,
) -> petrel_ml::model::SavedModel {
    use petrel_ml::model::{FactorModel, ModelParams, SavedModel};
    let rows = |m: &Array2<f32>| m.rows().into_iter().map(|r| r.to_vec()).collect();
    let mean = metrics.global_mean;
    let (w, h, user_bias, item_bias) = job.layout().split_model(w, h);
    let (w, h) = (&w, &h);
    let labels = |given: Option<&Vec<String>>, n: usize| {
        given
            .cloned()
            .unwrap_or_else(|| (0..n).map(|i| i.to_string()).collect())
    };
    SavedModel::new(
        "strads-mf",
        job,
        ModelParams::Factors(FactorModel {
            global_mean: mean,
            user_ids: labels(ids.map(|m| &m.user_ids), w.nrows()),
            item_ids: labels(ids.map(|m| &m.item_ids), h.nrows()),
            user_factors: rows(w),
            item_factors: rows(h),
            user_bias,
            item_bias,
        }),
    )
}

impl MfMetrics {
    /// The one metrics format: a record per RMSE point; `converged` when `target_rmse` was
    /// reached.
    pub fn run_metrics(&self, job: &StradsMfSettings) -> petrel_ml::job::RunMetrics {
        let mut m = petrel_ml::job::RunMetrics::new("strads-mf", job, self, self.elapsed_s);
        for p in &self.train_rmse {
            let mut values = vec![("train_rmse", p.train_rmse)];
            if let Some(test) = p.test_rmse {
                values.push(("test_rmse", test));
            }
            m.record(p.coordinate_updates, p.elapsed_s, &values);
        }
        m.finals(&[
            ("train_rmse", self.final_train_rmse),
            ("rounds", self.rounds as f64),
        ]);
        // No test set (test_fraction 0 without test_data): no test figure, rather than the
        // RMSE of nothing.
        if self.test_ratings > 0 {
            m.finals(&[("test_rmse", self.final_test_rmse)]);
        }
        m.converged = self.time_to_target_s.is_some();
        m.stop_reason = match (self.target_rmse, self.time_to_target_s) {
            (Some(t), Some(s)) => format!("train RMSE reached target_rmse {t} after {s:.2} s"),
            (Some(t), None) => format!(
                "stopped at the iteration limit (outer_iterations = {}) before target_rmse {t}: train RMSE {:.4}",
                job.outer_iterations, self.final_train_rmse
            ),
            (None, _) => format!("ran outer_iterations = {}", job.outer_iterations),
        };
        m
    }
}

impl StradsJob for MfApp {
    const SECTION: &'static str = "strads_mf";
    const SCHEDULER_ROLE: &'static str = SCHEDULER_ROLE;
    const WORKER_ROLE: &'static str = WORKER_ROLE;
    type Config = StradsMfSettings;
    type Scheduler = MfScheduling;
    type Worker = RingHalf<MfApp, MfWorkerApp>;

    fn scheduler(job: &StradsMfSettings, shape: &JobShape) -> Result<MfScheduling, StradsError> {
        let (summary, test) = job.summary_and_test()?;
        let mut half = MfScheduling::from_summary(shape.workers, &summary, test, job);
        half.deal_users(&summary.partition(shape.workers), job)?;
        Ok(half)
    }

    /// Keeps only its users' ratings ([`StradsMfSettings::visit_split`]).
    fn worker(
        job: &StradsMfSettings,
        index: usize,
        shape: &JobShape,
    ) -> Result<RingHalf<MfApp, MfWorkerApp>, StradsError> {
        let summary = job.summary()?;
        let partition = summary.partition(shape.workers);
        let initial = initial_ring_blocks(index, &partition, job.layout());
        let worker = MfWorkerApp::from_split(index, &partition, &summary, job)?
            .with_straggler(Straggler::of(job.straggler, job.straggler_factor, index));
        Ok(RingHalf::new(worker, initial).with_data_digest(summary.digest()))
    }

    fn finish(
        job: &StradsMfSettings,
        mut scheduler: MfScheduling,
        run: &FinishedRun,
    ) -> Result<(), StradsError> {
        scheduler.set_scheduler_bytes(run.scheduler_bytes);
        let (w, h) = scheduler.factors().ok_or_else(|| {
            StradsModelError::protocol("the job ended without collecting the factors")
        })?;
        let mut metrics = scheduler.metrics().clone();
        metrics.final_test_rmse = rmse(&scheduler.test, &w, &h);
        tracing::info!(
            train_rmse = metrics.final_train_rmse,
            test_rmse = metrics.final_test_rmse,
            seconds = format!("{:.2}", metrics.elapsed_s),
            "mf finished"
        );
        if let Some(dir) = &job.out_dir {
            write_outputs(dir, &w, &h, scheduler.ids.as_ref(), &metrics, job)?;
        }
        Ok(())
    }
}

/// Registers the MF roles. They take joins and leaves of workers with `balance =
/// "dynamic"`; a worker's death (`on_node_death = "leave"`) loses its H block, so it is
/// refused.
pub fn register(cluster: petrel_actors::Cluster) -> petrel_actors::Cluster {
    crate::kit::register_elastic_ring::<MfApp>(cluster, supports_membership_changes)
}

/// Whether `job` takes workers that join and leave: with `balance = "dynamic"`, whose
/// dealer deals the users over the workers of the moment.
pub fn supports_membership_changes(job: &StradsMfSettings) -> bool {
    job.balance == Balance::Dynamic
}

#[cfg(test)]
mod epoch_tests;
#[cfg(test)]
mod tests;
