//! STRADS `schedule()` for coordinate descent: which coordinates to update in a round.
//!
//! Dynamic mode samples by priority `(delta b_j)^2 + eta` (the last committed change), so
//! coordinates that are still moving are revisited and settled ones (typically the zeros
//! of a sparse solution) are rarely touched. The optional dependency filter keeps only
//! candidates that are pairwise nearly uncorrelated, because coordinates updated in the same
//! round all read the same residual and correlated ones overshoot together (Shotgun's bound).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

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
    /// `limit` are kept. The same as [`Self::keep_independent_around`] with nothing in
    /// flight.
    fn keep_independent(&mut self, candidates: &[usize], limit: usize, rho: f32) -> Vec<usize> {
        self.keep_independent_around(candidates, limit, rho, &[])
    }

    /// The greedy dependency check when the coordinates `in_flight` are being updated by
    /// earlier rounds that have not committed yet (a pipeline deeper than one round): a
    /// candidate is kept only if its correlation with every in-flight and every kept
    /// coordinate is below `rho` (their updates read residuals without each other's
    /// changes, exactly like two coordinates of one round), and an in-flight coordinate is
    /// never kept. The default asks [`Self::abs_correlation`] for every pair
    /// (`O(candidates x (kept + in flight))` questions); an oracle that holds the columns
    /// can answer the same question in time linear in the candidates' non-zeros
    /// ([`ColumnCorrelationCache`]).
    fn keep_independent_around(
        &mut self,
        candidates: &[usize],
        limit: usize,
        rho: f32,
        in_flight: &[usize],
    ) -> Vec<usize> {
        let mut kept: Vec<usize> = Vec::with_capacity(limit);
        for &candidate in candidates {
            if kept.len() >= limit {
                break;
            }
            if in_flight
                .iter()
                .chain(&kept)
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
/// the per-round dependency check ([`CorrelationOracle::keep_independent_around`]) does
/// not look at pairs one by one. It answers "does this candidate conflict with a kept
/// column?" in one of two ways, with the same decisions bit for bit as the pairwise check
/// (the same products summed in the same row order):
/// - scatter: each kept column is scattered into row-indexed lists and a candidate walks
///   its rows once, accumulating its dot product with every kept column it overlaps:
///   `O(candidate's non-zeros x kept columns per row)`, paid at every check;
/// - neighbour list: the columns conflicting with the candidate (`|corr| >= rho`, from one
///   pass over the rows it touches in a row-major copy of X) are computed once and kept,
///   after which a check costs one look-up per neighbour. Correlations are static, so a
///   column checked in many rounds should pay for its list once; a column checked rarely
///   should not pay for it at all. Which one is cheaper depends on how often a column is
///   a candidate, so the choice is made per column online (ski rental): a column's list
///   is built once the walks spent on it reach the list's cost, which is never more than
///   twice the cost of the better choice in hindsight.
pub struct ColumnCorrelationCache {
    columns: Arc<SparseColumns>,
    inverse_norms: Vec<f64>,
    cache: HashMap<(u32, u32), f32>,
    max_cached: usize,
    overlap: OverlapScratch,
    neighbours: NeighbourLists,
}

/// Scratch of the scatter-based check, reused across rounds (a stamp marks which rows
/// and columns belong to the current round, so nothing is cleared per round).
#[derive(Default)]
struct OverlapScratch {
    stamp: u32,
    row_stamp: Vec<u32>,
    row_head: Vec<u32>,
    /// `(slot, value, next entry of the same row)`.
    entries: Vec<(u32, f32, u32)>,
    /// A column is in this round's conflict set (kept or in flight) iff its stamp is
    /// current.
    column_stamp: Vec<u32>,
    /// The column of each slot (in-flight columns first, then the kept ones).
    slot_columns: Vec<usize>,
    dots: Vec<f64>,
    touched: Vec<u32>,
}

const NO_ENTRY: u32 = u32::MAX;

impl OverlapScratch {
    fn begin_round(&mut self, n_rows: usize, n_columns: usize) {
        if self.row_stamp.len() != n_rows {
            self.row_stamp = vec![0; n_rows];
            self.row_head = vec![NO_ENTRY; n_rows];
        }
        if self.column_stamp.len() != n_columns {
            self.column_stamp = vec![0; n_columns];
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.row_stamp.fill(0);
            self.column_stamp.fill(0);
            self.stamp = 1;
        }
        self.entries.clear();
        self.dots.clear();
        self.slot_columns.clear();
    }

    fn in_conflict_set(&self, column: usize) -> bool {
        self.column_stamp[column] == self.stamp
    }

    /// Adds `column` to the round's conflict set (scatters its non-zeros).
    fn add(&mut self, columns: &SparseColumns, column: usize) {
        let slot = self.slot_columns.len() as u32;
        self.slot_columns.push(column);
        self.column_stamp[column] = self.stamp;
        self.dots.push(f64::NAN);
        let (rows, vals) = columns.column(column);
        for (&i, &v) in rows.iter().zip(vals) {
            let i = i as usize;
            if self.row_stamp[i] != self.stamp {
                self.row_stamp[i] = self.stamp;
                self.row_head[i] = NO_ENTRY;
            }
            self.entries.push((slot, v, self.row_head[i]));
            self.row_head[i] = (self.entries.len() - 1) as u32;
        }
    }

    /// Whether `candidate` is below `rho` with every column of the conflict set, and the
    /// entries the walk visited (its cost).
    fn walk(
        &mut self,
        columns: &SparseColumns,
        inverse_norms: &[f64],
        candidate: usize,
        rho: f32,
    ) -> (bool, u64) {
        let (rows, vals) = columns.column(candidate);
        let mut steps = rows.len() as u64;
        for (&i, &v) in rows.iter().zip(vals) {
            let i = i as usize;
            if self.row_stamp[i] != self.stamp {
                continue;
            }
            let mut e = self.row_head[i];
            while e != NO_ENTRY {
                let (slot, kept_value, next) = self.entries[e as usize];
                let dot = &mut self.dots[slot as usize];
                if dot.is_nan() {
                    *dot = 0.0;
                    self.touched.push(slot);
                }
                *dot += f64::from(v) * f64::from(kept_value);
                e = next;
                steps += 1;
            }
        }
        let inverse = inverse_norms[candidate];
        let independent = self.touched.iter().all(|&slot| {
            let k = self.slot_columns[slot as usize];
            let corr = (self.dots[slot as usize] * inverse * inverse_norms[k]).abs() as f32;
            corr < rho
        });
        for &slot in &self.touched {
            self.dots[slot as usize] = f64::NAN;
        }
        self.touched.clear();
        (independent, steps)
    }
}

/// What one step of the scatter walk costs against one step of building a list: the walk
/// chases a linked list through scattered entries, a build streams through a row. From
/// the 2,000 x 20,000 design (BENCHMARKS.md): with the weight 1 about a third of
/// the checks still walked and the check cost 3.3 ms a round.
const WALK_STEP_WEIGHT: u64 = 4;

/// A neighbour list longer than this is not stored (nearly dense, strongly correlated
/// data): such a column keeps being checked by the scatter walk.
const MAX_NEIGHBOURS: usize = 4096;

/// Per-column neighbour lists for one `rho`, built on demand (see
/// [`ColumnCorrelationCache`]).
#[derive(Default)]
struct NeighbourLists {
    rho: f32,
    /// Non-zeros per row of X (what a list costs to build).
    row_nnz: Vec<u32>,
    /// Row-major copy of X, made when the first list is built.
    row_starts: Vec<usize>,
    row_columns: Vec<u32>,
    row_values: Vec<f32>,
    lists: Vec<Option<Box<[u32]>>>,
    /// Walk steps spent on each column so far.
    walked: Vec<u64>,
    /// Each column's list cost (0 = not computed yet, `u64::MAX` = never build).
    cost: Vec<u64>,
    /// Dense accumulator of a list build (NaN = untouched) and its touched columns.
    acc: Vec<f64>,
    touched: Vec<u32>,
    /// Lists built so far (for the round profile).
    built: u64,
}

impl NeighbourLists {
    fn new(columns: &SparseColumns) -> Self {
        let mut row_nnz = vec![0u32; columns.n_rows];
        for &i in &columns.row_indices {
            row_nnz[i as usize] += 1;
        }
        let n = columns.n_columns();
        NeighbourLists {
            rho: f32::NAN,
            row_nnz,
            lists: vec![None; n],
            walked: vec![0; n],
            cost: vec![0; n],
            ..NeighbourLists::default()
        }
    }

    /// Lists are only valid for the `rho` they were built with.
    fn use_rho(&mut self, rho: f32) {
        if self.rho.to_bits() != rho.to_bits() {
            self.rho = rho;
            self.lists.iter_mut().for_each(|l| *l = None);
            self.walked.fill(0);
            self.cost.fill(0);
        }
    }

    /// Charges `steps` of walking to `column`; true once its list should be built.
    fn charge(&mut self, columns: &SparseColumns, column: usize, steps: u64) -> bool {
        self.walked[column] += steps * WALK_STEP_WEIGHT;
        if self.cost[column] == 0 {
            let rows = columns.column(column).0;
            self.cost[column] = rows
                .iter()
                .map(|&i| u64::from(self.row_nnz[i as usize]))
                .sum::<u64>()
                .max(1);
        }
        self.walked[column] >= self.cost[column]
    }

    fn ensure_rows(&mut self, columns: &SparseColumns) {
        if !self.row_starts.is_empty() {
            return;
        }
        let mut starts = Vec::with_capacity(columns.n_rows + 1);
        starts.push(0usize);
        for &count in &self.row_nnz {
            starts.push(starts[starts.len() - 1] + count as usize);
        }
        let mut next = starts.clone();
        self.row_columns = vec![0; columns.row_indices.len()];
        self.row_values = vec![0.0; columns.values.len()];
        // Columns in increasing order, so each row lists its columns increasing.
        for j in 0..columns.n_columns() {
            let (rows, vals) = columns.column(j);
            for (&i, &v) in rows.iter().zip(vals) {
                let at = &mut next[i as usize];
                self.row_columns[*at] = j as u32;
                self.row_values[*at] = v;
                *at += 1;
            }
        }
        self.row_starts = starts;
        self.acc = vec![f64::NAN; columns.n_columns()];
    }

    /// Builds `column`'s list: every other column `k` with `!(|corr| < rho)`, the dot
    /// products summed over `column`'s rows in increasing order, as the walk sums them.
    fn build(&mut self, columns: &SparseColumns, inverse_norms: &[f64], column: usize) {
        self.ensure_rows(columns);
        let (rows, vals) = columns.column(column);
        for (&i, &v) in rows.iter().zip(vals) {
            let range = self.row_starts[i as usize]..self.row_starts[i as usize + 1];
            for (&k, &w) in self.row_columns[range.clone()]
                .iter()
                .zip(&self.row_values[range])
            {
                if k as usize == column {
                    continue;
                }
                let a = &mut self.acc[k as usize];
                if a.is_nan() {
                    *a = 0.0;
                    self.touched.push(k);
                }
                *a += f64::from(v) * f64::from(w);
            }
        }
        let inverse = inverse_norms[column];
        let mut list = Vec::new();
        for &k in &self.touched {
            let corr = (self.acc[k as usize] * inverse * inverse_norms[k as usize]).abs() as f32;
            if corr.partial_cmp(&self.rho) != Some(std::cmp::Ordering::Less) {
                list.push(k);
            }
            self.acc[k as usize] = f64::NAN;
        }
        self.touched.clear();
        if list.len() > MAX_NEIGHBOURS {
            self.cost[column] = u64::MAX;
        } else {
            self.lists[column] = Some(list.into_boxed_slice());
            self.built += 1;
        }
    }
}

impl ColumnCorrelationCache {
    /// `max_cached` bounds memory: the cache is cleared when it would grow past it.
    pub fn new(columns: Arc<SparseColumns>, max_cached: usize) -> Self {
        let inverse_norms = columns
            .column_sq_norms()
            .into_iter()
            .map(|sq| if sq > 0.0 { 1.0 / sq.sqrt() } else { 0.0 })
            .collect();
        ColumnCorrelationCache {
            neighbours: NeighbourLists::new(&columns),
            columns,
            inverse_norms,
            cache: HashMap::new(),
            max_cached,
            overlap: OverlapScratch::default(),
        }
    }

    /// Neighbour lists built so far (each column at most once per `rho`).
    pub fn neighbour_lists_built(&self) -> u64 {
        self.neighbours.built
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

    fn keep_independent_around(
        &mut self,
        candidates: &[usize],
        limit: usize,
        rho: f32,
        in_flight: &[usize],
    ) -> Vec<usize> {
        let columns = &self.columns;
        let n = columns.n_columns();
        let s = &mut self.overlap;
        let lists = &mut self.neighbours;
        // A round checked in chunks (lazy draws) passes the previous chunk's conflict set
        // back as `in_flight`: then the scattered state already is that set, in that
        // order, and is reused instead of scattered again.
        let continuing = s.stamp != 0
            && s.column_stamp.len() == n
            && s.row_stamp.len() == columns.n_rows
            && lists.rho.to_bits() == rho.to_bits()
            && s.slot_columns == in_flight;
        if !continuing {
            s.begin_round(columns.n_rows, n);
            lists.use_rho(rho);
            for &k in in_flight {
                if k < n && !s.in_conflict_set(k) {
                    s.add(columns, k);
                }
            }
        }
        let mut kept: Vec<usize> = Vec::with_capacity(limit);
        for &candidate in candidates {
            if kept.len() >= limit {
                break;
            }
            if candidate >= n || s.in_conflict_set(candidate) {
                continue;
            }
            // With rho <= 0 every pair conflicts (|corr| >= 0), overlapping or not.
            if !s.slot_columns.is_empty()
                && rho.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            {
                continue;
            }
            let independent = match &lists.lists[candidate] {
                Some(list) => list.iter().all(|&k| !s.in_conflict_set(k as usize)),
                None => {
                    let (independent, steps) = s.walk(columns, &self.inverse_norms, candidate, rho);
                    if lists.charge(columns, candidate, steps) {
                        lists.build(columns, &self.inverse_norms, candidate);
                    }
                    independent
                }
            };
            if independent {
                kept.push(candidate);
                s.add(columns, candidate);
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

    /// Sets several leaves (the last of repeated indices wins), then recomputes each
    /// affected inner node once, bottom up: the same tree as one [`Self::set`] per leaf,
    /// without walking the shared upper levels once per leaf.
    fn set_many(&mut self, leaves: impl IntoIterator<Item = (usize, f64)>) {
        let mut nodes: Vec<usize> = leaves
            .into_iter()
            .map(|(i, weight)| {
                self.nodes[self.leaves + i] = weight;
                (self.leaves + i) / 2
            })
            .collect();
        while !nodes.is_empty() && nodes[0] > 0 {
            nodes.sort_unstable();
            nodes.dedup();
            for &node in &nodes {
                self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1];
            }
            nodes.iter_mut().for_each(|node| *node /= 2);
            nodes.retain(|&node| node > 0);
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
    /// Time spent choosing rounds since [`LassoScheduler::take_costs`].
    costs: ScheduleCosts,
}

/// Seconds a [`LassoScheduler`] spent choosing rounds (for a run's round-time breakdown).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScheduleCosts {
    /// Drawing candidates.
    pub sample_s: f64,
    /// The dependency check.
    pub filter_s: f64,
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
            costs: ScheduleCosts::default(),
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
    /// filter) pairwise correlation below `rho`: [`Self::next_round_around`] with nothing
    /// in flight.
    pub fn next_round(&mut self) -> Vec<usize> {
        self.next_round_around(&[])
    }

    /// The next round while the coordinates `in_flight` belong to rounds not committed
    /// yet: none of them, and (with the filter) nothing correlated with them
    /// ([`Self::filter_candidates_around`]).
    ///
    /// Dynamic mode with a filter draws candidates lazily: as many as are still missing
    /// (scaled by the round's rejection rate so far), checked, then more, until the block
    /// is full or `candidate_pool` were drawn. The coordinates chosen are exactly those of
    /// drawing the whole pool first and checking it in order (the same draws, the same
    /// greedy check), but the draws the full block would never look at are not made: a
    /// round draws about `block_size` plus the rejections instead of `candidate_pool`.
    /// Other modes draw the pool first ([`Self::draw_candidates`]).
    pub fn next_round_around(&mut self, in_flight: &[usize]) -> Vec<usize> {
        let started = Instant::now();
        if self.config.mode != ScheduleMode::Dynamic || self.filter.is_none() {
            let candidates = self.draw_candidates();
            let drawn = Instant::now();
            let kept = self.filter_candidates_around(candidates, in_flight);
            self.costs.sample_s += (drawn - started).as_secs_f64();
            self.costs.filter_s += drawn.elapsed().as_secs_f64();
            return kept;
        }
        let block = self.config.block_size.min(self.n_vars);
        let pool = self.config.candidate_pool.max(block).min(self.n_vars);
        let mut drawn: Vec<(usize, f64)> = Vec::with_capacity(block);
        let mut kept: Vec<usize> = Vec::with_capacity(block);
        let mut conflicts: Vec<usize> = in_flight.to_vec();
        let (mut sample_s, mut filter_s) = (0.0, 0.0);
        while kept.len() < block && drawn.len() < pool {
            let missing = block - kept.len();
            let wanted = if kept.is_empty() {
                missing
            } else {
                missing.saturating_mul(drawn.len()).div_ceil(kept.len())
            };
            let from = drawn.len();
            let t = Instant::now();
            self.draw_by_priority(wanted.clamp(1, pool - from), &mut drawn);
            let t_drawn = Instant::now();
            sample_s += (t_drawn - t).as_secs_f64();
            if drawn.len() == from {
                break;
            }
            let chunk: Vec<usize> = drawn[from..].iter().map(|&(j, _)| j).collect();
            if let Some(filter) = &mut self.filter {
                let newly = filter
                    .oracle
                    .keep_independent_around(&chunk, missing, filter.rho, &conflicts);
                conflicts.extend_from_slice(&newly);
                kept.extend(newly);
            }
            filter_s += t_drawn.elapsed().as_secs_f64();
        }
        let t = Instant::now();
        self.filter_rejections += (drawn.len() - kept.len()) as u64;
        self.priorities.set_many(drawn);
        self.costs.sample_s += sample_s + t.elapsed().as_secs_f64();
        self.costs.filter_s += filter_s;
        kept
    }

    /// Time spent choosing rounds since the last call.
    pub fn take_costs(&mut self) -> ScheduleCosts {
        std::mem::take(&mut self.costs)
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
        self.filter_candidates_around(candidates, &[])
    }

    /// [`Self::filter_candidates`] while the coordinates `in_flight` are being updated by
    /// rounds that have not committed yet: they are never chosen again, and with the
    /// filter every chosen coordinate is also nearly uncorrelated with each of them
    /// ([`CorrelationOracle::keep_independent_around`]), so a pipeline of several rounds
    /// interferes no more than one round does.
    pub fn filter_candidates_around(
        &mut self,
        candidates: Vec<usize>,
        in_flight: &[usize],
    ) -> Vec<usize> {
        let block = self.config.block_size.min(self.n_vars);
        match &mut self.filter {
            Some(filter) => {
                let kept = filter.oracle.keep_independent_around(
                    &candidates,
                    block,
                    filter.rho,
                    in_flight,
                );
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
            None if in_flight.is_empty() => candidates,
            None => {
                let busy: std::collections::HashSet<usize> = in_flight.iter().copied().collect();
                let mut chosen = candidates;
                chosen.retain(|j| !busy.contains(j));
                chosen
            }
        }
    }

    /// Candidates the dependency filter kept out of rounds since the last call.
    pub fn take_filter_rejections(&mut self) -> u64 {
        std::mem::take(&mut self.filter_rejections)
    }

    /// Feeds committed changes back: priority becomes `|delta|^p + eta` (p = 2 by default).
    pub fn commit(&mut self, changes: &[(usize, f32)]) {
        let (p, eta, n) = (self.config.priority_exponent, self.config.eta, self.n_vars);
        self.priorities.set_many(
            changes
                .iter()
                .filter(|&&(j, _)| j < n)
                .map(|&(j, delta)| (j, f64::from(delta).abs().powf(p) + eta)),
        );
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
        self.draw_by_priority(count, &mut drawn);
        let chosen = drawn.iter().map(|&(j, _)| j).collect();
        self.priorities.set_many(drawn);
        chosen
    }

    /// Draws up to `count` more coordinates without replacement (proportionally to
    /// priority), appending `(coordinate, priority)` to `drawn`; a drawn coordinate's
    /// priority stays 0 until the caller restores `drawn`.
    fn draw_by_priority(&mut self, count: usize, drawn: &mut Vec<(usize, f64)>) {
        let until = drawn.len() + count;
        while drawn.len() < until && self.priorities.total() > 0.0 {
            let target = self.rng.gen_range(0.0..1.0) * self.priorities.total();
            let j = self.priorities.find(target);
            drawn.push((j, self.priorities.get(j)));
            self.priorities.set(j, 0.0);
        }
    }
}

#[cfg(test)]
mod tests;
