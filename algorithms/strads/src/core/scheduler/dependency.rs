//! The dependency check of a STRADS round: which drawn candidates may be updated together.
//! [`CorrelationOracle`] is the pairwise `|corr| < rho` rule; [`ColumnCorrelationCache`]
//! answers it from the columns in time linear in the candidates' non-zeros and can also
//! bound the block's aggregate interference (its row loads).

use std::collections::HashMap;
use std::sync::Arc;

use petrel_ml::data::SparseColumns;

/// Source of `|corr(x_j, x_k)|` for normalised columns. A scheduler that does not hold X can
/// be given any implementation, e.g. one that asks the workers for partial dot products.
pub trait CorrelationOracle {
    /// `|corr(x_j, x_k)|`.
    fn abs_correlation(&mut self, j: usize, k: usize) -> f32;

    /// The greedy dependency check: walks `candidates` in order
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
/// the per-round dependency check ([`CorrelationOracle::keep_independent_around`]) makes
/// the pairwise check's decisions bit for bit (the same products in the same row order)
/// in one of two ways per candidate column:
/// - scatter: the kept columns are scattered into row-indexed lists and the candidate
///   walks its rows once, paid at every check;
/// - neighbour list: the columns conflicting with the candidate, computed once from a
///   row-major copy of X, then one look-up per neighbour.
///
/// The choice is made per column online (ski rental): its list is built once the walks
/// spent on it reach the list's cost, at most twice the better choice in hindsight.
/// [`Self::with_row_load_bound`] also bounds the block's aggregate interference.
pub struct ColumnCorrelationCache {
    columns: Arc<SparseColumns>,
    inverse_norms: Vec<f64>,
    /// `||x_k||_1 / ||x_k||_2^2` per column: `|x_ik|` times this is column k's load on
    /// row i (see [`Self::with_row_load_bound`]).
    load_factors: Vec<f32>,
    /// Largest row load a block may reach (`None`: pairwise check only).
    row_load_bound: Option<f32>,
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
    /// Per row: the summed load of the conflict set's columns (valid where the row's
    /// stamp is current).
    row_load: Vec<f32>,
}

const NO_ENTRY: u32 = u32::MAX;

impl OverlapScratch {
    fn begin_round(&mut self, n_rows: usize, n_columns: usize) {
        if self.row_stamp.len() != n_rows {
            self.row_stamp = vec![0; n_rows];
            self.row_head = vec![NO_ENTRY; n_rows];
            self.row_load = vec![0.0; n_rows];
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

    /// Adds `column` to the round's conflict set (scatters its non-zeros and adds its
    /// load, `|x_ik| * load_factor`, to each of its rows).
    fn add(&mut self, columns: &SparseColumns, column: usize, load_factor: f32) {
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
                self.row_load[i] = 0.0;
            }
            self.row_load[i] += v.abs() * load_factor;
            self.entries.push((slot, v, self.row_head[i]));
            self.row_head[i] = (self.entries.len() - 1) as u32;
        }
    }

    /// Whether adding `candidate` keeps every row it shares with the conflict set at a load
    /// of at most `bound` (rows it has to itself are not limited: one column alone does
    /// not interfere). `O(candidate's non-zeros)`.
    fn fits_load(
        &self,
        columns: &SparseColumns,
        candidate: usize,
        load_factor: f32,
        bound: f32,
    ) -> bool {
        let (rows, vals) = columns.column(candidate);
        rows.iter().zip(vals).all(|(&i, &v)| {
            let i = i as usize;
            let load = if self.row_stamp[i] == self.stamp {
                self.row_load[i]
            } else {
                0.0
            };
            load == 0.0 || load + v.abs() * load_factor <= bound
        })
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
/// chases a linked list through scattered entries, a build streams through a row.
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
        let load_factors = (0..columns.n_columns())
            .map(|k| {
                let (_, vals) = columns.column(k);
                let l1: f64 = vals.iter().map(|v| f64::from(v.abs())).sum();
                let sq: f64 = vals.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                if sq > 0.0 { (l1 / sq) as f32 } else { 0.0 }
            })
            .collect();
        ColumnCorrelationCache {
            neighbours: NeighbourLists::new(&columns),
            columns,
            inverse_norms,
            load_factors,
            row_load_bound: None,
            cache: HashMap::new(),
            max_cached,
            overlap: OverlapScratch::default(),
        }
    }

    /// Also bounds the block's aggregate interference: a candidate is kept only if every
    /// row it shares with the kept and in-flight columns stays at a load of at most
    /// `bound` (a non-finite or non-positive bound is ignored).
    ///
    /// A round's joint step is a Jacobi step, which decreases the objective when the
    /// largest eigenvalue of the block's normalised Gram matrix `G` is below 2; pairwise
    /// `|corr| < rho` bounds each off-diagonal entry but not their sum. The row load of row
    /// i is `sum over block columns k of |x_ik| ||x_k||_1` (unit-norm columns), and the
    /// Schur test (`p_i = 1`, `q_k = ||x_k||_1`) gives `lambda_max(G) <= max_i load_i`, so
    /// the cap bounds `lambda_max(G)` by `bound` (rows with a single column are exempt: a
    /// lone column does not interfere). The data, not a fixed U, sets how much parallelism
    /// is safe (Shotgun's `P < d / rho(X^T X)` for a chosen block).
    pub fn with_row_load_bound(mut self, bound: f32) -> Self {
        self.row_load_bound = (bound.is_finite() && bound > 0.0).then_some(bound);
        self
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
                    s.add(columns, k, self.load_factors[k]);
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
            if let Some(bound) = self.row_load_bound
                && !s.fits_load(columns, candidate, self.load_factors[candidate], bound)
            {
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
                s.add(columns, candidate, self.load_factors[candidate]);
            }
        }
        kept
    }
}
