//! STRADS `schedule()` for coordinate descent: which coordinates to update in a round.
//!
//! Dynamic mode samples by priority `(delta b_j)^2 + eta` (the last committed change), so
//! coordinates that are still moving are revisited and settled ones (typically the zeros
//! of a sparse solution) are rarely touched. The optional dependency filter keeps only
//! candidates that are pairwise nearly uncorrelated, because coordinates updated in the same
//! round all read the same residual and correlated ones overshoot together (Shotgun's bound).

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use super::StradsModelError;

mod dependency;
pub use dependency::{ColumnCorrelationCache, CorrelationOracle};

/// How candidates are chosen before the (optional) dependency filter. Read as `dynamic`,
/// `random` or `cyclic` from flags and TOML; anything else is rejected naming these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
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

impl ScheduleMode {
    /// Every mode, in the order the flags' help lists them.
    pub const ALL: [ScheduleMode; 3] = [
        ScheduleMode::Dynamic,
        ScheduleMode::Random,
        ScheduleMode::Cyclic,
    ];

    /// The mode's name in flags and TOML.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleMode::Dynamic => "dynamic",
            ScheduleMode::Random => "random",
            ScheduleMode::Cyclic => "cyclic",
        }
    }
}

impl std::str::FromStr for ScheduleMode {
    type Err = StradsModelError;

    /// `dynamic`, `random` or `cyclic` (any case); the error names the valid values.
    fn from_str(s: &str) -> Result<Self, StradsModelError> {
        ScheduleMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                StradsModelError::InvalidConfig(format!(
                    "mode {s:?}: expected one of dynamic, random, cyclic"
                ))
            })
    }
}

impl std::fmt::Display for ScheduleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
    /// Dynamic mode with a filter draws candidates lazily (as many as are still missing,
    /// scaled by the rejection rate so far) until the block is full or `candidate_pool`
    /// were drawn: the same coordinates as drawing the whole pool first, without the draws
    /// the full block never looks at. Other modes draw the pool first
    /// ([`Self::draw_candidates`]).
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
    /// filter): at most `block_size` pairwise nearly uncorrelated coordinates, while the
    /// coordinates `in_flight` are being updated by rounds that have not committed yet:
    /// they are never chosen again, and with the filter every chosen coordinate is also
    /// nearly uncorrelated with each of them
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
        super::check_sizes(&[("scheduled variables", state.priorities.len(), n)])?;
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
