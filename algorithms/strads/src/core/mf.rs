// Over 600 lines: ratings, residuals, biases and checkpoint state share `MfWorker`'s private fields.
//! CCD++ matrix factorisation `R ~ W H^T` with STRADS block rotation.
//!
//! Users (rows) and items (columns) are bucketed into P buckets balanced by rating counts.
//! Worker w owns row bucket w: its rows of W and all its ratings, split by column bucket,
//! each rating with its residual `E_ij = R_ij - w_i . h_j`. Column blocks of H
//! ([`FactorBlock`]) travel: in sub-round t worker w holds block `(w + t) mod P`
//! ([`RotationSchedule`]), so no block is touched by two workers at once.
//!
//! One rank-one coordinate k is updated in two full rotations (P sub-rounds each):
//! 1. H phase: each visit adds the worker's partial sums for `h_jk` into the travelling
//!    block; after the rotation every block holds complete sums and
//!    [`FactorBlock::finalize`] sets `h_jk = sum_i (E_ij + w_ik h_jk) w_ik / (lambda +
//!    sum_i w_ik^2)`.
//! 2. W phase: each visit adds partial sums for the worker's own `w_ik`;
//!    [`MfWorker::finalize_w`] then applies the update in the task's formula.
//!
//! `lambda` is per row and column with [`MfRidge::per_rating`] (`lambda * n_j`, ALS-WR).
//! User and item biases ([`MfLayout`]) are two more coordinates whose other side is a
//! constant column of 1s: the user bias has only a W phase, the item bias only an H phase.
//!
//! Residual updates caused by a finalisation are applied lazily on the next visit of each
//! (worker, block) pair ([`MfWorker::begin_visit`]), which the next rotation guarantees.
//! This is exact CCD++ as long as every finalisation is followed by a full rotation before
//! the other factor's finalisation, as the STRADS MF app's rounds and the tests' serial run do.

use ndarray::Array2;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::StradsModelError;
use super::app::{BlockId, Plan, Step};
use petrel_ml::data::Ratings;
use petrel_ml::topic::balanced_buckets;

/// Ring rotation of P column blocks over P workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RotationSchedule {
    /// Workers (and blocks).
    pub p: usize,
}

impl RotationSchedule {
    /// Block held by `worker` in sub-round `subround`: `(worker + subround) mod P`.
    pub fn block_held(&self, worker: usize, subround: usize) -> usize {
        (worker + subround) % self.p
    }

    /// Worker holding `block` in `subround` (inverse of [`Self::block_held`]).
    pub fn holder(&self, block: usize, subround: usize) -> usize {
        (block + self.p - subround % self.p) % self.p
    }

    /// Worker that receives `worker`'s block after this sub-round (the ring predecessor).
    pub fn next_holder(&self, worker: usize) -> usize {
        (worker + self.p - 1) % self.p
    }

    /// Of `blocks` (`index(b)`: block `b`'s index), the ones `worker` holds before the first
    /// sub-round, by id.
    pub fn held_at_start<B>(
        &self,
        worker: usize,
        blocks: Vec<B>,
        index: impl Fn(&B) -> usize,
    ) -> Vec<(BlockId, B)> {
        blocks
            .into_iter()
            .filter(|b| self.holder(index(b), 0) == worker)
            .map(|b| (index(&b) as BlockId, b))
            .collect()
    }

    /// The round of sub-round `subround`: worker `w`'s task is `task(w, block it holds)`.
    pub fn plan<T>(&self, subround: usize, task: impl Fn(usize, usize) -> T) -> Step<T> {
        Step::Run(Plan::PerWorker(
            (0..self.p)
                .map(|w| task(w, self.block_held(w, subround)))
                .collect(),
        ))
    }

    /// The block `worker` holds in `subround`, if it is the one it answered for (`what`:
    /// `"visited"` or `"returned"`).
    pub fn check_block(
        &self,
        worker: usize,
        subround: usize,
        block: usize,
        what: &str,
    ) -> Result<usize, StradsModelError> {
        let expected = self.block_held(worker, subround);
        if block != expected {
            return Err(StradsModelError::protocol(format!(
                "worker {worker} {what} block {block} instead of {expected}"
            )));
        }
        Ok(expected)
    }
}

/// L2 weight of one row of W or column of H: `lambda`, or with `per_rating` (ALS-WR's
/// weighted-lambda regularisation) `lambda * n` for a user or item with `n` training
/// ratings, which keeps the pull towards zero in proportion to the data term.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MfRidge {
    /// The L2 weight.
    pub lambda: f32,
    /// Scale it by the row's or column's rating count.
    pub per_rating: bool,
}

impl MfRidge {
    /// The weight for a row or column with `ratings` training ratings.
    pub fn weight(&self, ratings: u32) -> f64 {
        if self.per_rating {
            f64::from(self.lambda) * f64::from(ratings)
        } else {
            f64::from(self.lambda)
        }
    }
}

/// Column layout of W and H. Without biases both have `rank` columns. With biases two more:
/// users `[w, b_user, 1]`, items `[h, 1, b_item]`, so `w_u . h_i` includes both biases. The
/// user bias is coordinate `rank` with H's column fixed at 1 (only its W side is updated),
/// the item bias coordinate `rank + 1` with W's column fixed at 1 (only its H side): each
/// bias is solved in closed form against the residual like a rank-one factor whose other
/// side is the constant 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MfLayout {
    /// Factor rank.
    pub rank: usize,
    /// The two bias coordinates are present.
    pub biases: bool,
}

/// One step of a CCD++ sweep: coordinate `k`, and which of its sides are updated (H first,
/// then W).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinateStep {
    /// The column of W and H.
    pub k: usize,
    /// Update `h_k` (an H rotation).
    pub update_h: bool,
    /// Update `w_k` (a W rotation).
    pub update_w: bool,
}

impl MfLayout {
    /// Columns of W and H.
    pub fn width(&self) -> usize {
        if self.biases {
            self.rank + 2
        } else {
            self.rank
        }
    }

    /// The steps of one sweep: the biases first (user, then item), then every factor
    /// coordinate with both sides.
    pub fn sweep(&self) -> Vec<CoordinateStep> {
        let mut steps = Vec::with_capacity(self.rank + 2);
        if self.biases {
            steps.push(CoordinateStep {
                k: self.rank,
                update_h: false,
                update_w: true,
            });
            steps.push(CoordinateStep {
                k: self.rank + 1,
                update_h: true,
                update_w: false,
            });
        }
        steps.extend((0..self.rank).map(|k| CoordinateStep {
            k,
            update_h: true,
            update_w: true,
        }));
        steps
    }

    /// Initial rows of W for the users `user_ids` (global ids): each user's factors are
    /// drawn uniform in `[0, 1/sqrt(rank))` from a generator seeded by `(seed, user id)`, so
    /// a user starts from the same row whichever worker holds it and however many workers
    /// there are (runs with 1, 2 or 4 workers start from one model and their curves compare).
    pub fn initial_w_of_users(&self, user_ids: &[u32], seed: u64) -> Vec<f32> {
        let scale = 1.0 / (self.rank.max(1) as f32).sqrt();
        let mut w = Vec::with_capacity(user_ids.len() * self.width());
        for &user in user_ids {
            let mut rng = StdRng::seed_from_u64(user_seed(seed, user));
            w.extend((0..self.rank).map(|_| rng.gen_range(0.0..scale)));
            if self.biases {
                w.extend([0.0, 1.0]);
            }
        }
        w
    }

    /// Initial rows of H for `items` items: zeros, and `[1, 0]` in the bias columns.
    pub fn initial_h(&self, items: usize) -> Vec<f32> {
        let mut h = vec![0.0; items * self.width()];
        if self.biases {
            let width = self.width();
            for row in h.chunks_mut(width) {
                row[self.rank] = 1.0;
            }
        }
        h
    }

    /// Splits full-width rows into the factors and the bias column `bias_column` (empty
    /// without biases).
    pub fn split(&self, full: &Array2<f32>, bias_column: usize) -> (Array2<f32>, Vec<f32>) {
        let factors = full.slice(ndarray::s![.., ..self.rank]).to_owned();
        let bias = if self.biases {
            full.column(bias_column).to_vec()
        } else {
            Vec::new()
        };
        (factors, bias)
    }

    /// `(user factors, item factors, user biases, item biases)` from full-width W and H.
    pub fn split_model(
        &self,
        w: &Array2<f32>,
        h: &Array2<f32>,
    ) -> (Array2<f32>, Array2<f32>, Vec<f32>, Vec<f32>) {
        let (wf, bu) = self.split(w, self.rank);
        let (hf, bi) = self.split(h, self.rank + 1);
        (wf, hf, bu, bi)
    }
}

/// A finalised change of one factor column that some workers still have to fold into
/// their residuals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingColumnUpdate {
    /// The rank-one coordinate.
    pub k: usize,
    /// Change of `h_jk` per local column of the block.
    #[serde(with = "petrel_messages::tensor::f32_bytes")]
    pub deltas: Vec<f32>,
    /// Which workers have applied it.
    pub applied_by: Vec<bool>,
}

/// A block of H (item factors) with the accumulators of the coordinate being updated: the
/// unit that travels around the ring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactorBlock {
    /// The block's index.
    pub block: usize,
    /// Rank.
    pub rank: usize,
    /// Global item ids of the local columns.
    pub item_ids: Vec<u32>,
    /// `item_ids.len() x rank`, row-major.
    #[serde(with = "petrel_messages::tensor::f32_bytes")]
    pub factors: Vec<f32>,
    /// Pending sums of the numerators of `h_k`.
    #[serde(with = "petrel_messages::tensor::f64_bytes")]
    pub numerators: Vec<f64>,
    /// Pending sums of the denominators of `h_k`.
    #[serde(with = "petrel_messages::tensor::f64_bytes")]
    pub denominators: Vec<f64>,
    /// Column updates not yet folded into every worker's residuals.
    pub pending: Vec<PendingColumnUpdate>,
}

impl FactorBlock {
    /// Block `block` of items `item_ids` with their factors (item-major).
    pub fn new(block: usize, rank: usize, item_ids: Vec<u32>, factors: Vec<f32>) -> Self {
        let n = item_ids.len();
        FactorBlock {
            block,
            rank,
            item_ids,
            factors,
            numerators: vec![0.0; n],
            denominators: vec![0.0; n],
            pending: Vec::new(),
        }
    }

    /// Ends an H phase for coordinate k: every worker has added its sums. `item_ratings`
    /// holds every item's training rating count (by global id) for a per-rating `ridge`.
    /// Records the change for the workers' residuals.
    pub fn finalize(&mut self, k: usize, ridge: MfRidge, item_ratings: &[u32], n_workers: usize) {
        let mut deltas = Vec::with_capacity(self.item_ids.len());
        for c in 0..self.item_ids.len() {
            let count = item_ratings
                .get(self.item_ids[c] as usize)
                .copied()
                .unwrap_or(0);
            let new = (self.numerators[c] / (ridge.weight(count) + self.denominators[c])) as f32;
            let slot = &mut self.factors[c * self.rank + k];
            let new = if new.is_finite() { new } else { 0.0 };
            deltas.push(new - *slot);
            *slot = new;
        }
        self.numerators.iter_mut().for_each(|v| *v = 0.0);
        self.denominators.iter_mut().for_each(|v| *v = 0.0);
        self.pending.push(PendingColumnUpdate {
            k,
            deltas,
            applied_by: vec![false; n_workers],
        });
    }
}

/// One rating held by a worker, in block-local coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct LocalRating {
    row: u32,
    col: u32,
    residual: f32,
}

/// Where every user and item lives: bucket and index inside the bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MfPartition {
    /// Buckets (workers).
    pub n_buckets: usize,
    /// Bucket of each user.
    pub user_bucket: Vec<u32>,
    /// Index of each user within its bucket.
    pub user_local: Vec<u32>,
    /// Bucket (block) of each item.
    pub item_bucket: Vec<u32>,
    /// Index of each item within its block.
    pub item_local: Vec<u32>,
    /// Global ids per bucket.
    pub bucket_users: Vec<Vec<u32>>,
    /// Items of each block.
    pub bucket_items: Vec<Vec<u32>>,
}

impl MfPartition {
    /// Buckets users and items balanced by rating counts.
    pub fn balanced(ratings: &Ratings, n_buckets: usize) -> Self {
        Self::from_counts(&ratings.user_counts(), &ratings.item_counts(), n_buckets)
    }

    /// [`MfPartition::balanced`] from the ratings per user and per item alone (index =
    /// user or item), which a node can count without holding the ratings.
    pub fn from_counts(user_counts: &[usize], item_counts: &[usize], n_buckets: usize) -> Self {
        let n_buckets = n_buckets.max(1);
        let user_bucket = balanced_buckets(user_counts, n_buckets);
        let item_bucket = balanced_buckets(item_counts, n_buckets);
        Self::from_buckets(user_bucket, item_bucket, n_buckets)
    }
}

/// The seed of one user's initial row: SplitMix64's finaliser over the job seed and the id,
/// so neighbouring ids get unrelated streams.
fn user_seed(seed: u64, user: u32) -> u64 {
    let mut z = seed ^ (u64::from(user) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Worker state: its rows of W, its ratings grouped by column block with residuals, the W
/// accumulators and the W changes not yet folded into every block's residuals. All of it
/// is mutable state (the residuals change with every visit), so a checkpoint saves it whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MfWorker {
    /// The worker's index.
    pub worker: usize,
    rank: usize,
    user_ids: Vec<u32>,
    /// `user_ids.len() x rank`, row-major.
    w: Vec<f32>,
    blocks: Vec<Vec<LocalRating>>,
    numerators: Vec<f64>,
    denominators: Vec<f64>,
    pending_w: Vec<(usize, Vec<f32>)>,
    pending_applied: Vec<usize>,
    /// Training ratings of each of the worker's rows.
    row_ratings: Vec<u32>,
    /// Training ratings of every item (global ids), for finalising any block.
    item_ratings: Vec<u32>,
    /// Test ratings of the worker's rows by column block, `(row, col, rating)`: data, not
    /// state (a restored worker keeps its own).
    #[serde(skip)]
    test_blocks: Vec<Vec<(u32, u32, f32)>>,
    /// Squared test error and test ratings scored since the last [`Self::take_test_error`].
    #[serde(default)]
    test_error: (f64, u64),
    /// With dynamic dealing ([`MfWorker::keep_ratings`]): every training rating's value,
    /// parallel to `blocks`, and per block how many leading entries have a current residual
    /// (the rest were just adopted: [`MfWorker::begin_visit`] computes theirs).
    #[serde(default)]
    dealt: Option<dealing::DealtRatings>,
}

impl MfWorker {
    /// Builds worker `worker` from the ratings of its row bucket. Residuals start as
    /// `R - W H^T` for the given initial factors (`w_init` rows for this bucket's users,
    /// `h_blocks` all column blocks).
    pub fn new(
        worker: usize,
        partition: &MfPartition,
        ratings: &Ratings,
        rank: usize,
        w_init: Vec<f32>,
        h_blocks: &[FactorBlock],
    ) -> Result<Self, StradsModelError> {
        let mut this = Self::without_ratings(worker, partition, rank, w_init, h_blocks, None)?;
        for &(u, i, _) in &ratings.entries {
            match this.item_ratings.get_mut(i as usize) {
                Some(count) if (u as usize) < partition.user_bucket.len() => *count += 1,
                _ => {
                    return Err(StradsModelError::DimensionMismatch(format!(
                        "rating ({u}, {i}) outside the partition"
                    )));
                }
            }
        }
        for &(u, i, rating) in &ratings.entries {
            this.add_rating(partition, h_blocks, u, i, rating)?;
        }
        Ok(this)
    }

    /// Worker `worker` before its ratings: [`MfWorker::add_rating`] and
    /// [`MfWorker::add_test_rating`] then add them one by one as they are read (in the
    /// order [`MfWorker::new`] would take them from a whole set, the result is the same), so
    /// a worker never holds more ratings than its own. `item_ratings`: every item's training
    /// rating count (by global id, all workers' ratings; zeros when `None`).
    pub fn without_ratings(
        worker: usize,
        partition: &MfPartition,
        rank: usize,
        w_init: Vec<f32>,
        h_blocks: &[FactorBlock],
        item_ratings: Option<Vec<u32>>,
    ) -> Result<Self, StradsModelError> {
        let user_ids = partition.bucket_users.get(worker).cloned().ok_or_else(|| {
            StradsModelError::InvalidConfig(format!("no bucket {worker} in the partition"))
        })?;
        let n_items = partition.item_bucket.len();
        let item_ratings = item_ratings.unwrap_or_else(|| vec![0; n_items]);
        if w_init.len() != user_ids.len() * rank
            || h_blocks.len() != partition.n_buckets
            || item_ratings.len() != n_items
        {
            return Err(StradsModelError::DimensionMismatch(
                "initial factors do not match the partition".into(),
            ));
        }
        let n_rows = user_ids.len();
        let blocks = vec![Vec::new(); partition.n_buckets];
        Ok(MfWorker {
            worker,
            rank,
            user_ids,
            w: w_init,
            pending_applied: vec![0; blocks.len()],
            test_blocks: vec![Vec::new(); blocks.len()],
            blocks,
            numerators: vec![0.0; n_rows],
            denominators: vec![0.0; n_rows],
            pending_w: Vec::new(),
            row_ratings: vec![0; n_rows],
            item_ratings,
            test_error: (0.0, 0),
            dealt: None,
        })
    }

    /// Reserves room for `train[b]` training and `test[b]` test ratings in block `b` before
    /// [`MfWorker::add_rating`] and [`MfWorker::add_test_rating`] add them (upper bounds:
    /// room never written is never touched).
    pub fn reserve(&mut self, train: &[usize], test: &[usize]) {
        for (block, &n) in self.blocks.iter_mut().zip(train) {
            block.reserve_exact(n);
        }
        for (block, &n) in self.test_blocks.iter_mut().zip(test) {
            block.reserve_exact(n);
        }
    }

    /// Adds training rating `(u, i, rating)` if user `u` is in this worker's bucket (other
    /// workers' ratings are skipped), its residual against the initial factors (`h_blocks`
    /// as given to [`MfWorker::without_ratings`]). Refuses a rating outside the partition.
    pub fn add_rating(
        &mut self,
        partition: &MfPartition,
        h_blocks: &[FactorBlock],
        u: u32,
        i: u32,
        rating: f32,
    ) -> Result<(), StradsModelError> {
        let (u, i) = (u as usize, i as usize);
        let (Some(&bucket), Some(&b)) =
            (partition.user_bucket.get(u), partition.item_bucket.get(i))
        else {
            return Err(StradsModelError::DimensionMismatch(format!(
                "rating ({u}, {i}) outside the partition"
            )));
        };
        if bucket as usize != self.worker {
            return Ok(());
        }
        let rank = self.rank;
        let row = partition.user_local[u];
        let col = partition.item_local[i];
        let b = b as usize;
        let (Some(w_row), Some(h_row), Some(count), Some(block)) = (
            self.w.get(row as usize * rank..(row as usize + 1) * rank),
            h_blocks.get(b).and_then(|h| {
                h.factors
                    .get(col as usize * rank..(col as usize + 1) * rank)
            }),
            self.row_ratings.get_mut(row as usize),
            self.blocks.get_mut(b),
        ) else {
            return Err(StradsModelError::DimensionMismatch(format!(
                "rating ({u}, {i}) outside the initial factors"
            )));
        };
        *count += 1;
        let prediction: f32 = w_row.iter().zip(h_row).map(|(a, b)| a * b).sum();
        if let Some(dealt) = &mut self.dealt {
            dealt.push(b, rating);
        }
        block.push(LocalRating {
            row,
            col,
            residual: rating - prediction,
        });
        Ok(())
    }

    /// Keeps test rating `(u, i, rating)` for [`Self::score_test`] if user `u` is in this
    /// worker's bucket; other workers' ratings and ratings outside the partition are left
    /// out (as by [`rmse`]).
    pub fn add_test_rating(&mut self, partition: &MfPartition, u: u32, i: u32, rating: f32) {
        let (u, i) = (u as usize, i as usize);
        if u >= partition.user_bucket.len()
            || i >= partition.item_bucket.len()
            || partition.user_bucket[u] as usize != self.worker
        {
            return;
        }
        let b = partition.item_bucket[i] as usize;
        if let Some(block) = self.test_blocks.get_mut(b) {
            block.push((partition.user_local[u], partition.item_local[i], rating));
        }
    }

    /// Keeps the test ratings of this worker's users (by column block) for
    /// [`Self::score_test`]; ratings outside the partition are left out (as by [`rmse`]).
    pub fn with_test(mut self, partition: &MfPartition, test: &Ratings) -> Self {
        self.test_blocks = vec![Vec::new(); partition.n_buckets];
        for &(u, i, rating) in &test.entries {
            self.add_test_rating(partition, u, i, rating);
        }
        self
    }

    /// Adds the squared errors of this worker's test ratings in `block` under the current
    /// rows of W and the block's H: over a rotation in which neither changes (a W or Visit
    /// rotation), every test rating of the worker is scored once against one model.
    pub fn score_test(&mut self, block: &FactorBlock) {
        let rank = self.rank;
        let Some(ratings) = self.test_blocks.get(block.block) else {
            return;
        };
        for &(row, col, rating) in ratings {
            let (row, col) = (row as usize * rank, col as usize * rank);
            let (Some(w), Some(h)) = (
                self.w.get(row..row + rank),
                block.factors.get(col..col + rank),
            ) else {
                continue;
            };
            // As `rmse` computes a prediction (f32 dot product).
            let prediction: f32 = w.iter().zip(h).map(|(a, b)| a * b).sum();
            self.test_error.0 += f64::from(rating - prediction).powi(2);
            self.test_error.1 += 1;
        }
    }

    /// `(sum of squared test errors, test ratings)` scored since the last call.
    pub fn take_test_error(&mut self) -> (f64, u64) {
        std::mem::take(&mut self.test_error)
    }

    /// Continues from a checkpointed copy of this worker; refuses another worker, rank or
    /// set of users, and a copy whose sizes do not agree.
    pub fn restore_from(&mut self, saved: MfWorker) -> Result<(), StradsModelError> {
        if saved.worker != self.worker
            || saved.rank != self.rank
            || saved.user_ids != self.user_ids
            || saved.w.len() != self.w.len()
            || saved.blocks.len() != self.blocks.len()
            || saved.numerators.len() != self.numerators.len()
            || saved.denominators.len() != self.denominators.len()
            || saved.row_ratings != self.row_ratings
            || saved.item_ratings != self.item_ratings
        {
            return Err(StradsModelError::DimensionMismatch(format!(
                "checkpoint of MF worker {} (rank {}, {} users) does not fit worker {} (rank {}, {} users)",
                saved.worker,
                saved.rank,
                saved.user_ids.len(),
                self.worker,
                self.rank,
                self.user_ids.len()
            )));
        }
        let test_blocks = std::mem::take(&mut self.test_blocks);
        *self = saved;
        self.test_blocks = test_blocks;
        Ok(())
    }

    /// Ends an H phase on `block` (its last visit): [`FactorBlock::finalize`] with the item
    /// counts this worker knows.
    pub fn finalize_h(&self, block: &mut FactorBlock, k: usize, ridge: MfRidge, n_workers: usize) {
        block.finalize(k, ridge, &self.item_ratings, n_workers);
    }

    /// Users of the worker's rows of W.
    pub fn user_ids(&self) -> &[u32] {
        &self.user_ids
    }

    /// This worker's rows of W, `user_ids().len() x rank` row-major.
    pub fn factors(&self) -> &[f32] {
        &self.w
    }

    /// First thing on receiving a block: fold every finalised change this (worker, block)
    /// pair has not seen into the residuals.
    pub fn begin_visit(&mut self, block: &mut FactorBlock) {
        let b = block.block;
        let rank = self.rank;
        for (k, deltas) in &self.pending_w[self.pending_applied[b]..] {
            for e in &mut self.blocks[b] {
                e.residual -= deltas[e.row as usize] * block.factors[e.col as usize * rank + k];
            }
        }
        self.pending_applied[b] = self.pending_w.len();
        if self
            .pending_applied
            .iter()
            .all(|&a| a == self.pending_w.len())
        {
            self.pending_w.clear();
            self.pending_applied.iter_mut().for_each(|a| *a = 0);
        }
        for update in &mut block.pending {
            if update.applied_by.get(self.worker).copied().unwrap_or(true) {
                continue;
            }
            for e in &mut self.blocks[b] {
                e.residual -=
                    self.w[e.row as usize * rank + update.k] * update.deltas[e.col as usize];
            }
            update.applied_by[self.worker] = true;
        }
        block.pending.retain(|u| !u.applied_by.iter().all(|&a| a));
        self.refresh(block);
    }

    /// W phase: add this block's contribution to the sums for `w_ik`.
    pub fn accumulate_w(&mut self, block: &FactorBlock, k: usize) {
        let rank = self.rank;
        for e in &self.blocks[block.block] {
            let h = f64::from(block.factors[e.col as usize * rank + k]);
            let w = f64::from(self.w[e.row as usize * rank + k]);
            self.numerators[e.row as usize] += (f64::from(e.residual) + w * h) * h;
            self.denominators[e.row as usize] += h * h;
        }
    }

    /// Ends a W phase: `w_ik = sum_j (E_ij + w_ik h_jk) h_jk / (lambda_i + sum_j h_jk^2)`
    /// (`lambda_i` from `ridge`).
    pub fn finalize_w(&mut self, k: usize, ridge: MfRidge) {
        let mut deltas = Vec::with_capacity(self.user_ids.len());
        for r in 0..self.user_ids.len() {
            let l2 = ridge.weight(self.row_ratings[r]);
            let new = (self.numerators[r] / (l2 + self.denominators[r])) as f32;
            let new = if new.is_finite() { new } else { 0.0 };
            let slot = &mut self.w[r * self.rank + k];
            deltas.push(new - *slot);
            *slot = new;
        }
        self.numerators.iter_mut().for_each(|v| *v = 0.0);
        self.denominators.iter_mut().for_each(|v| *v = 0.0);
        self.pending_w.push((k, deltas));
    }

    /// H phase: add this worker's contribution to the travelling block's sums for `h_jk`.
    pub fn accumulate_h(&self, block: &mut FactorBlock, k: usize) {
        let rank = self.rank;
        for e in &self.blocks[block.block] {
            let h = f64::from(block.factors[e.col as usize * rank + k]);
            let w = f64::from(self.w[e.row as usize * rank + k]);
            block.numerators[e.col as usize] += (f64::from(e.residual) + w * h) * w;
            block.denominators[e.col as usize] += w * w;
        }
    }

    /// `(sum of squared residuals, rating count)`; exact once every pending change has been
    /// applied (after a full rotation of [`Self::begin_visit`]s).
    pub fn squared_error(&self) -> (f64, usize) {
        self.blocks.iter().flatten().fold((0.0, 0), |(s, n), e| {
            (s + f64::from(e.residual).powi(2), n + 1)
        })
    }
}

/// RMSE of `w_u . h_i` against `ratings` (e.g. a test split; full-width rows include the
/// biases).
pub fn rmse(ratings: &Ratings, user_factors: &Array2<f32>, item_factors: &Array2<f32>) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for &(u, i, r) in &ratings.entries {
        let (u, i) = (u as usize, i as usize);
        if u < user_factors.nrows() && i < item_factors.nrows() {
            let prediction = user_factors.row(u).dot(&item_factors.row(i));
            sum += f64::from(r - prediction).powi(2);
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { (sum / n as f64).sqrt() }
}

mod dealing;
mod epoch;
pub use dealing::MovedUser;
pub use epoch::epoch_partition;

#[cfg(test)]
mod tests;
