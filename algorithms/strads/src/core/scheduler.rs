//! STRADS `schedule()` for coordinate descent: which coordinates to update in a round.
//!
//! Dynamic mode samples by priority `(delta b_j)^2 + eta` (the last committed change), so
//! coordinates that are still moving are revisited and settled ones (typically the zeros
//! of a sparse solution) are rarely touched. The optional dependency filter keeps only
//! candidates that are pairwise nearly uncorrelated, because coordinates updated in the same
//! round all read the same residual and correlated ones overshoot together (Shotgun's bound).

use std::collections::HashMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::StradsModelError;
use petrel_ml::data::SparseColumns;

/// How candidates are chosen before the (optional) dependency filter. Read as `dynamic`,
/// `random` or `cyclic` from flags and TOML; anything else is rejected naming these.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleMode {
    /// Sample without replacement with probability proportional to `delta^2 + eta`.
    #[default]
    #[serde(alias = "Dynamic")]
    Dynamic,
    /// Uniformly random coordinates without replacement (Shotgun-like baseline).
    #[serde(alias = "Random")]
    Random,
    /// The next coordinates in index order, wrapping around.
    #[serde(alias = "Cyclic")]
    Cyclic,
}

impl std::str::FromStr for ScheduleMode {
    type Err = StradsModelError;

    /// `dynamic`, `random` or `cyclic` (any case); the error names the valid values.
    fn from_str(s: &str) -> Result<Self, StradsModelError> {
        <ScheduleMode as clap::ValueEnum>::from_str(s, true).map_err(|_| {
            StradsModelError::InvalidConfig(format!(
                "mode {s:?}: expected one of dynamic, random, cyclic"
            ))
        })
    }
}

impl std::fmt::Display for ScheduleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ScheduleMode::Dynamic => "dynamic",
            ScheduleMode::Random => "random",
            ScheduleMode::Cyclic => "cyclic",
        })
    }
}

/// Scheduler parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfig {
    /// How candidates are chosen.
    pub mode: ScheduleMode,
    /// U: coordinates updated in parallel per round (at most).
    pub block_size: usize,
    /// U': candidates drawn before the dependency filter; ignored (= U) without a filter.
    pub candidate_pool: usize,
    /// Floor added to every priority so no coordinate becomes unreachable.
    pub eta: f64,
    /// Priority of a coordinate that was never updated. Large relative to typical
    /// `delta^2` so the first rounds sweep every coordinate (the reference starts with uniform
    /// sweeps for the same reason).
    pub initial_priority: f64,
    /// Priority is `|delta|^priority_exponent + eta`: 2 is the paper's `(delta b_j)^2`,
    /// 1 is the reference code's `|delta b_j|`.
    #[serde(default = "default_exponent")]
    pub priority_exponent: f64,
    /// RNG seed.
    pub seed: u64,
}

fn default_exponent() -> f64 {
    2.0
}

impl SchedulerConfig {
    /// Defaults for `mode` with `block_size` coordinates per round.
    pub fn new(mode: ScheduleMode, block_size: usize) -> Self {
        SchedulerConfig {
            mode,
            block_size,
            candidate_pool: block_size.saturating_mul(4),
            eta: 1e-4,
            initial_priority: 1.0,
            priority_exponent: 2.0,
            seed: 0,
        }
    }
}

/// Source of `|corr(x_j, x_k)|` for normalised columns. A scheduler that does not hold X can
/// be given any implementation, e.g. one that asks the workers for partial dot products.
pub trait CorrelationOracle {
    /// `|corr(x_j, x_k)|`.
    fn abs_correlation(&mut self, j: usize, k: usize) -> f32;

    /// The greedy dependency check of [`filter_dependent`]: walks `candidates` in order
    /// and keeps one if its correlation with every kept coordinate is below `rho`, until
    /// `limit` are kept. The default asks [`Self::abs_correlation`] for every pair
    /// (`O(candidates x kept)` questions); an oracle that holds the columns can answer the
    /// same question in time linear in the candidates' non-zeros
    /// ([`ColumnCorrelationCache`]).
    fn keep_independent(&mut self, candidates: &[usize], limit: usize, rho: f32) -> Vec<usize> {
        let mut kept: Vec<usize> = Vec::with_capacity(limit);
        for &candidate in candidates {
            if kept.len() >= limit {
                break;
            }
            if kept
                .iter()
                .all(|&k| k != candidate && self.abs_correlation(candidate, k) < rho)
            {
                kept.push(candidate);
            }
        }
        kept
    }
}

impl<F: FnMut(usize, usize) -> f32> CorrelationOracle for F {
    fn abs_correlation(&mut self, j: usize, k: usize) -> f32 {
        self(j, k)
    }
}

/// Correlations from the column data. Single pairs are computed on demand and cached;
/// the per-round dependency check ([`CorrelationOracle::keep_independent`]) does not look at
/// pairs at all: it scatters each kept column into a row-indexed list and walks each
/// candidate's rows once, accumulating its dot product with every kept column it overlaps.
/// A round then costs `O(sum of the candidates' non-zeros x kept columns per row)`, which
/// for sparse data is linear in the candidates' non-zeros, instead of one sparse merge per
/// (candidate, kept) pair. The decisions are those of the pairwise check, bit for bit: the
/// same products are summed in the same (row) order.
pub struct ColumnCorrelationCache {
    columns: Arc<SparseColumns>,
    inverse_norms: Vec<f64>,
    cache: HashMap<(u32, u32), f32>,
    max_cached: usize,
    overlap: OverlapScratch,
}

/// Scratch of the scatter-based check, reused across rounds (a stamp marks which rows
/// belong to the current round, so nothing is cleared per round).
#[derive(Default)]
struct OverlapScratch {
    stamp: u32,
    row_stamp: Vec<u32>,
    row_head: Vec<u32>,
    /// `(kept slot, value, next entry of the same row)`.
    entries: Vec<(u32, f32, u32)>,
    column_stamp: Vec<u32>,
    dots: Vec<f64>,
    touched: Vec<u32>,
}

const NO_ENTRY: u32 = u32::MAX;

impl ColumnCorrelationCache {
    /// `max_cached` bounds memory: the cache is cleared when it would grow past it.
    pub fn new(columns: Arc<SparseColumns>, max_cached: usize) -> Self {
        let inverse_norms = columns
            .column_sq_norms()
            .into_iter()
            .map(|sq| if sq > 0.0 { 1.0 / sq.sqrt() } else { 0.0 })
            .collect();
        ColumnCorrelationCache {
            columns,
            inverse_norms,
            cache: HashMap::new(),
            max_cached,
            overlap: OverlapScratch::default(),
        }
    }
}

impl CorrelationOracle for ColumnCorrelationCache {
    fn abs_correlation(&mut self, j: usize, k: usize) -> f32 {
        let key = (j.min(k) as u32, j.max(k) as u32);
        if let Some(&c) = self.cache.get(&key) {
            return c;
        }
        let c = (self.columns.column_dot(j, k) * self.inverse_norms[j] * self.inverse_norms[k])
            .abs() as f32;
        if self.cache.len() >= self.max_cached {
            self.cache.clear();
        }
        self.cache.insert(key, c);
        c
    }

    fn keep_independent(&mut self, candidates: &[usize], limit: usize, rho: f32) -> Vec<usize> {
        let columns = &self.columns;
        let s = &mut self.overlap;
        if s.row_stamp.len() != columns.n_rows {
            s.row_stamp = vec![0; columns.n_rows];
            s.row_head = vec![NO_ENTRY; columns.n_rows];
        }
        if s.column_stamp.len() != columns.n_columns() {
            s.column_stamp = vec![0; columns.n_columns()];
        }
        s.stamp = s.stamp.wrapping_add(1);
        if s.stamp == 0 {
            s.row_stamp.fill(0);
            s.column_stamp.fill(0);
            s.stamp = 1;
        }
        s.entries.clear();
        s.dots.clear();
        let mut kept: Vec<usize> = Vec::with_capacity(limit);
        for &candidate in candidates {
            if kept.len() >= limit {
                break;
            }
            if candidate >= columns.n_columns() || s.column_stamp[candidate] == s.stamp {
                continue;
            }
            // A column that overlaps no kept one has correlation 0 with all of them.
            if !kept.is_empty() && rho.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                continue;
            }
            let (rows, vals) = columns.column(candidate);
            for (&i, &v) in rows.iter().zip(vals) {
                let i = i as usize;
                if s.row_stamp[i] != s.stamp {
                    continue;
                }
                let mut e = s.row_head[i];
                while e != NO_ENTRY {
                    let (slot, kept_value, next) = s.entries[e as usize];
                    let dot = &mut s.dots[slot as usize];
                    if dot.is_nan() {
                        *dot = 0.0;
                        s.touched.push(slot);
                    }
                    *dot += f64::from(v) * f64::from(kept_value);
                    e = next;
                }
            }
            let inverse = self.inverse_norms[candidate];
            let independent = s.touched.iter().all(|&slot| {
                let k = kept[slot as usize];
                let corr = (s.dots[slot as usize] * inverse * self.inverse_norms[k]).abs() as f32;
                corr < rho
            });
            for &slot in &s.touched {
                s.dots[slot as usize] = f64::NAN;
            }
            s.touched.clear();
            if !independent {
                continue;
            }
            let slot = kept.len() as u32;
            kept.push(candidate);
            s.column_stamp[candidate] = s.stamp;
            s.dots.push(f64::NAN);
            for (&i, &v) in rows.iter().zip(vals) {
                let i = i as usize;
                if s.row_stamp[i] != s.stamp {
                    s.row_stamp[i] = s.stamp;
                    s.row_head[i] = NO_ENTRY;
                }
                s.entries.push((slot, v, s.row_head[i]));
                s.row_head[i] = (s.entries.len() - 1) as u32;
            }
        }
        kept
    }
}

/// Greedy dependency check: walks `candidates` in order and keeps one if its correlation
/// with every already kept coordinate is below `rho`, until `limit` are kept (the oracle's
/// [`CorrelationOracle::keep_independent`]).
pub fn filter_dependent(
    candidates: &[usize],
    limit: usize,
    rho: f32,
    oracle: &mut dyn CorrelationOracle,
) -> Vec<usize> {
    oracle.keep_independent(candidates, limit, rho)
}

/// Binary sum tree over non-negative weights: O(log n) update and proportional sampling.
/// Inner nodes are recomputed from their children on every update, so sums never drift.
#[derive(Debug, Clone)]
struct SumTree {
    leaves: usize,
    nodes: Vec<f64>,
}

impl SumTree {
    fn new(weights: &[f64]) -> Self {
        let leaves = weights.len().next_power_of_two().max(1);
        let mut nodes = vec![0.0; 2 * leaves];
        nodes[leaves..leaves + weights.len()].copy_from_slice(weights);
        for i in (1..leaves).rev() {
            nodes[i] = nodes[2 * i] + nodes[2 * i + 1];
        }
        SumTree { leaves, nodes }
    }

    fn total(&self) -> f64 {
        self.nodes[1]
    }

    fn get(&self, i: usize) -> f64 {
        self.nodes[self.leaves + i]
    }

    fn set(&mut self, i: usize, weight: f64) {
        let mut node = self.leaves + i;
        self.nodes[node] = weight;
        while node > 1 {
            node /= 2;
            self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1];
        }
    }

    /// Index whose cumulative weight range contains `target` (`0 <= target < total`);
    /// always a leaf of positive weight when the total is positive.
    fn find(&self, mut target: f64) -> usize {
        let mut node = 1;
        while node < self.leaves {
            let left = self.nodes[2 * node];
            let right = self.nodes[2 * node + 1];
            if (target < left && left > 0.0) || right <= 0.0 {
                node *= 2;
            } else {
                target -= left;
                node = 2 * node + 1;
            }
        }
        node - self.leaves
    }
}

/// The filter half of the scheduler: threshold plus where correlations come from.
pub struct DependencyFilter {
    /// Threshold on `|corr|` above which two candidates conflict.
    pub rho: f32,
    /// Where correlations come from.
    pub oracle: Box<dyn CorrelationOracle + Send>,
}

/// Coordinate scheduler for Lasso and sparse logistic regression.
pub struct LassoScheduler {
    config: SchedulerConfig,
    n_vars: usize,
    priorities: SumTree,
    cursor: usize,
    /// Cyclic mode: candidates the filter skipped last round, retried first.
    deferred: Vec<usize>,
    /// ChaCha12: the same stream as rand 0.8's `StdRng` for a seed, but its position can be
    /// saved and restored exactly ([`SchedulerState`]).
    rng: ChaCha12Rng,
    filter: Option<DependencyFilter>,
    /// Candidates the filter kept out since [`LassoScheduler::take_filter_rejections`].
    filter_rejections: u64,
}

/// Everything a [`LassoScheduler`] needs to continue bit-identically after a restart
/// (the configuration and the dependency filter come from the job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerState {
    /// Per-variable priority (the sum tree's leaves; inner nodes are sums of them).
    pub priorities: Vec<f64>,
    /// Cyclic mode's next coordinate.
    pub cursor: u64,
    /// Coordinates deferred by the filter.
    pub deferred: Vec<u64>,
    /// ChaCha seed.
    pub rng_seed: [u8; 32],
    /// ChaCha stream.
    pub rng_stream: u64,
    /// ChaCha word position (u128) as (low, high) 64-bit halves.
    pub rng_word_pos: (u64, u64),
}

impl LassoScheduler {
    /// A scheduler over `n_vars` coordinates.
    pub fn new(
        n_vars: usize,
        config: SchedulerConfig,
        filter: Option<DependencyFilter>,
    ) -> Result<Self, StradsModelError> {
        if n_vars == 0 || config.block_size == 0 {
            return Err(StradsModelError::InvalidConfig(
                "need at least one variable and block_size >= 1".into(),
            ));
        }
        if !(config.eta > 0.0 && config.initial_priority > 0.0) {
            return Err(StradsModelError::InvalidConfig(
                "eta and initial_priority must be positive".into(),
            ));
        }
        Ok(LassoScheduler {
            priorities: SumTree::new(&vec![config.initial_priority; n_vars]),
            rng: ChaCha12Rng::seed_from_u64(config.seed),
            n_vars,
            cursor: 0,
            deferred: Vec::new(),
            config,
            filter,
            filter_rejections: 0,
        })
    }

    /// Its parameters.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Current priority of coordinate `j`.
    pub fn priority(&self, j: usize) -> f64 {
        self.priorities.get(j)
    }

    /// Coordinates to update this round: at most `block_size`, distinct, and (with the
    /// filter) pairwise correlation below `rho`. The same as
    /// `self.filter_candidates(self.draw_candidates())`.
    pub fn next_round(&mut self) -> Vec<usize> {
        let candidates = self.draw_candidates();
        self.filter_candidates(candidates)
    }

    /// The round's candidates before the dependency check: U' of them with a filter, U
    /// without (`O(U' log d)` for dynamic sampling, never `O(d)`).
    pub fn draw_candidates(&mut self) -> Vec<usize> {
        let block = self.config.block_size.min(self.n_vars);
        let n_candidates = if self.filter.is_some() {
            self.config.candidate_pool.max(block).min(self.n_vars)
        } else {
            block
        };
        match self.config.mode {
            ScheduleMode::Dynamic => self.sample_by_priority(n_candidates),
            ScheduleMode::Random => {
                rand::seq::index::sample(&mut self.rng, self.n_vars, n_candidates).into_vec()
            }
            ScheduleMode::Cyclic => {
                let mut candidates = std::mem::take(&mut self.deferred);
                candidates.truncate(n_candidates);
                while candidates.len() < n_candidates {
                    let j = self.cursor;
                    self.cursor = (self.cursor + 1) % self.n_vars;
                    if !candidates.contains(&j) {
                        candidates.push(j);
                    } else {
                        break;
                    }
                }
                candidates
            }
        }
    }

    /// The dependency check of [`Self::draw_candidates`]' output (identity without a
    /// filter): at most `block_size` pairwise nearly uncorrelated coordinates.
    pub fn filter_candidates(&mut self, candidates: Vec<usize>) -> Vec<usize> {
        let block = self.config.block_size.min(self.n_vars);
        match &mut self.filter {
            Some(filter) => {
                let kept = filter_dependent(&candidates, block, filter.rho, filter.oracle.as_mut());
                self.filter_rejections += (candidates.len() - kept.len()) as u64;
                if self.config.mode == ScheduleMode::Cyclic {
                    // Coordinates the filter skipped go first next round, so every
                    // coordinate is still updated once per sweep (with correlated
                    // neighbours a plain window would skip the same ones every sweep).
                    let kept_set: std::collections::HashSet<usize> = kept.iter().copied().collect();
                    self.deferred = candidates
                        .iter()
                        .copied()
                        .filter(|c| !kept_set.contains(c))
                        .collect();
                }
                kept
            }
            None => candidates,
        }
    }

    /// Candidates the dependency filter kept out of rounds since the last call.
    pub fn take_filter_rejections(&mut self) -> u64 {
        std::mem::take(&mut self.filter_rejections)
    }

    /// Feeds committed changes back: priority becomes `|delta|^p + eta` (p = 2 by default).
    pub fn commit(&mut self, changes: &[(usize, f32)]) {
        let p = self.config.priority_exponent;
        for &(j, delta) in changes {
            if j < self.n_vars {
                self.priorities
                    .set(j, f64::from(delta).abs().powf(p) + self.config.eta);
            }
        }
    }

    /// The state to checkpoint (see [`SchedulerState`]).
    pub fn export_state(&self) -> SchedulerState {
        let pos = self.rng.get_word_pos();
        SchedulerState {
            priorities: (0..self.n_vars).map(|j| self.priorities.get(j)).collect(),
            cursor: self.cursor as u64,
            deferred: self.deferred.iter().map(|&j| j as u64).collect(),
            rng_seed: self.rng.get_seed(),
            rng_stream: self.rng.get_stream(),
            rng_word_pos: (pos as u64, (pos >> 64) as u64),
        }
    }

    /// Continues from a checkpointed state; refuses a state of another size.
    pub fn import_state(&mut self, state: &SchedulerState) -> Result<(), StradsModelError> {
        let n = self.n_vars;
        if state.priorities.len() != n {
            return Err(StradsModelError::InvalidConfig(format!(
                "checkpointed scheduler has {} variables, this job {n}",
                state.priorities.len()
            )));
        }
        if state.cursor as usize >= n || state.deferred.iter().any(|&j| j as usize >= n) {
            return Err(StradsModelError::InvalidConfig(
                "checkpointed scheduler cursor out of range".into(),
            ));
        }
        if state
            .priorities
            .iter()
            .any(|p| !(p.is_finite() && *p >= 0.0))
        {
            return Err(StradsModelError::InvalidConfig(
                "checkpointed priorities must be finite and non-negative".into(),
            ));
        }
        self.priorities = SumTree::new(&state.priorities);
        self.cursor = state.cursor as usize;
        self.deferred = state.deferred.iter().map(|&j| j as usize).collect();
        let mut rng = ChaCha12Rng::from_seed(state.rng_seed);
        rng.set_stream(state.rng_stream);
        rng.set_word_pos(
            u128::from(state.rng_word_pos.0) | (u128::from(state.rng_word_pos.1) << 64),
        );
        self.rng = rng;
        Ok(())
    }

    fn sample_by_priority(&mut self, count: usize) -> Vec<usize> {
        let mut drawn: Vec<(usize, f64)> = Vec::with_capacity(count);
        while drawn.len() < count && self.priorities.total() > 0.0 {
            let target = self.rng.gen_range(0.0..1.0) * self.priorities.total();
            let j = self.priorities.find(target);
            drawn.push((j, self.priorities.get(j)));
            self.priorities.set(j, 0.0);
        }
        for &(j, weight) in &drawn {
            self.priorities.set(j, weight);
        }
        drawn.into_iter().map(|(j, _)| j).collect()
    }
}

#[cfg(test)]
mod tests;
