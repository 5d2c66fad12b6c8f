//! Column-holding Gauss-Seidel Lasso, sans-I/O: the decision logic of `solver =
//! "gauss-seidel"` (`apps::lasso::gs` runs it). This file is the worker's side (its sweep);
//! the centring and packed active columns it shares with the baseline are in
//! `gauss_seidel/columns.rs`, and how a round's sweeps combine is in
//! `gauss_seidel/combine.rs`.
//!
//! The features are cut into contiguous column ranges of about equal non-zeros, one per
//! worker. A worker holds its columns (all rows) and a full residual `r = y - X b` (f64).
//! In a round it sweeps its coordinates **sequentially** against its residual
//! ([`GsWorkerCore::sweep`], each update the squared loss's
//! [`cd_step`](super::loss::cd_step)) and returns its coefficient changes `d_p` and residual
//! delta `u_p = X d_p`. The scheduler combines the
//! sweeps with step weights `w_p` ([`jacobi_weights`]) and sends back `V = sum_p w_p u_p`;
//! every worker sets `r = r_start - V`, so all residuals stay equal (bit for bit).
//!
//! **Why the weights, and why they converge to the baseline's optimum.** Inside a worker
//! the sweep is Gauss-Seidel, so worker `p` alone lowers the objective:
//! `Delta_p = F(b + d_p) - F(b) <= 0`. Across workers the sweeps run at once against the
//! same start (block Jacobi) and their sum can overshoot where columns of different
//! workers share rows. With `omega` the most workers whose `u_p` touch one row,
//! `||sum_p u_p||^2 <= omega sum_p ||u_p||^2` (Cauchy-Schwarz per row), and with the L1
//! term's convexity `w_p = 1 / omega` gives `F(b + sum_p d_p / omega) - F(b) <=
//! (1 / omega) sum_p Delta_p <= 0` (the ESO / block-Jacobi safeguard). The scheduler knows
//! the exact quadratic part along any weights (`r . u_p` comes with each sweep, `u_p . u_q`
//! it computes) and an upper bound of the L1 part, so it takes the lowest of `1 / omega`,
//! all ones and that bound's box-constrained minimiser: never worse than the safeguard.
//! Every round lowers `F` by at least `(1 / W) sum_p |Delta_p|`; a full sweep no worker
//! can improve is a coordinate-wise minimum, the Lasso's optimum (smooth plus separable);
//! and the run stops only on a certified duality gap, as the baseline does. With disjoint
//! row supports (`omega = 1`, e.g. one worker) the weights are 1 and the run is the
//! baseline's coordinate descent. (The scheduled mode's pairwise dependency check bounds
//! pairs, not the aggregate, so it is not used here.)

use super::StradsModelError;
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};
use std::ops::Range;

mod columns;
mod combine;
pub use columns::RowVector;
pub(crate) use columns::{Centring, PackedColumns, column_step, dot, gather_dot, resident_zeros};
pub use combine::{ChunkGrowth, GsShare, RoundDeltas, jacobi_weights, kept_share, weights_bound};

/// Which of its coordinates a worker sweeps in a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Coords {
    /// Its local columns `start..end`, in order (a chunk of a full sweep).
    Range {
        /// First local column.
        start: u32,
        /// One past the last.
        end: u32,
    },
    /// Its non-zero coefficients (the active set), taken afresh when `fresh`, else the
    /// list taken last time (the baseline keeps the active set fixed between full sweeps).
    Active {
        /// Take the list afresh.
        fresh: bool,
    },
}

/// A round's sweep order for one worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepOrder {
    /// The coordinates.
    pub coords: Coords,
    /// Passes over them at most.
    pub max_passes: u32,
    /// Stop passing once a pass's largest step `delta^2 ||x_j||^2` is at most this.
    pub settle: f64,
    /// Stop as soon as `1/2 ||r||^2 + lambda ||b_own||_1` is at or below this (only sent
    /// to a single worker, whose view is the whole objective).
    pub target: Option<f64>,
    /// Stop as soon as this sweep has lowered the worker's own view of the objective
    /// (`1/2 ||r||^2 + lambda ||b_own||_1`, its residual holding only its own steps) by this
    /// much: with several workers, each one's share of what the target still needs, so the
    /// round that reaches it does not run its remaining passes as well.
    #[serde(default)]
    pub decrease: Option<f64>,
}

/// What a worker's sweep returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    /// Coordinate visits.
    pub updates: u64,
    /// Passes run.
    pub passes: u32,
    /// Largest step `delta^2 ||x_j||^2` of the last pass.
    pub largest: f64,
    /// The target, or the order's `decrease`, was reached (the sweep stopped there, maybe
    /// mid-pass).
    pub reached_target: bool,
    /// Local columns whose coefficient changed, increasing.
    #[serde(with = "petrel_messages::tensor::u32_bytes")]
    pub changed: Vec<u32>,
    /// Their net changes `d_p`.
    #[serde(with = "petrel_messages::tensor::f64_bytes")]
    pub deltas: Vec<f64>,
    /// `u_p = X d_p = r_start - r_end`, from the net changes `d_p` (zero with one worker:
    /// nobody needs it); with implicit centring its stored part `X_stored d_p`.
    pub residual_delta: RowVector,
    /// With implicit centring, `u_p`'s constant part `-(mu . d_p)` (`u_p` is
    /// `residual_delta + residual_offset 1`); 0 otherwise.
    pub residual_offset: f64,
    /// `r_start . u_p`.
    pub r_dot_u: f64,
    /// `||r||^2` after the sweep (the worker's running value).
    pub sq_residual: f64,
    /// `||b_own||_1` after the sweep (running).
    pub l1: f64,
}

/// A worker's share of an exact evaluation (its columns; the residual is everyone's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// `max |x_j^T r|` over its columns.
    pub max_abs_corr: f64,
    /// Largest KKT violation over its columns.
    pub kkt: f64,
    /// `||b_own||_1`, recomputed.
    pub l1: f64,
    /// Non-zero coefficients.
    pub nonzeros: u64,
    /// `y . y`.
    pub yy: f64,
    /// `y . r`.
    pub yr: f64,
    /// `r . r`, recomputed.
    pub rr: f64,
}

/// The state a worker checkpoints (its data comes from the job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GsWorkerSnapshot {
    /// Its coefficients.
    pub coefficients: Vec<f64>,
    /// The residual.
    pub residual: Vec<f64>,
    /// `||r||^2` (running).
    pub sq_residual: f64,
    /// `||b_own||_1` (running).
    pub l1: f64,
    /// The active list.
    pub active: Vec<u32>,
    /// With implicit centring, `[offset c, sum(s), ||s||^2]` (the residual is `s + c 1`).
    pub centring: Option<[f64; 3]>,
}

/// The round in progress between a sweep and its commit.
#[derive(Debug, Clone)]
struct Pending {
    /// The residual at the start of the round and its centring offset (several workers
    /// only).
    start: Option<(Vec<f64>, f64)>,
    /// `(local column, value before the round)` of the changed coordinates.
    changed: Vec<(usize, f64)>,
}

/// One worker's columns, its coefficients and the full residual.
#[derive(Debug, Clone)]
pub struct GsWorkerCore {
    x: SparseColumns,
    sq_norms: Vec<f64>,
    y: Vec<f32>,
    lambda: f64,
    coefficients: Vec<f64>,
    residual: Vec<f64>,
    sq_residual: f64,
    l1: f64,
    /// The active set taken last (packed) and the slots of it still swept.
    active: PackedColumns,
    active_slots: Vec<usize>,
    /// Implicit centring (`fit_intercept`): the residual is `residual + offset 1`.
    centring: Option<Centring>,
    /// Other workers hold columns too: the residual deltas combine at the commit.
    shared: bool,
    pending: Option<Pending>,
}

impl GsWorkerCore {
    /// A worker holding columns `x` (all rows) at `b = 0`; `shared`: there are other
    /// workers (it then keeps the round's start residual and reports `u_p`). With
    /// `centred`, column `j` stands for `x_j - mean(x_j)`, nothing densified (`y` centred
    /// by the caller): the problem of `fit_intercept`. A worker holds every row of its
    /// columns, so their means are its own.
    pub fn build(
        x: SparseColumns,
        y: Vec<f32>,
        lambda: f64,
        shared: bool,
        centred: bool,
    ) -> Result<Self, StradsModelError> {
        super::baseline::check_shape(&x, y.len(), "y")?;
        if !(lambda >= 0.0 && lambda.is_finite()) {
            return Err(StradsModelError::InvalidConfig(format!(
                "lambda {lambda} must be finite and >= 0"
            )));
        }
        let residual: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
        let (centring, sq_norms) = if centred {
            let (c, norms) = Centring::of(&x, &residual);
            (Some(c), norms)
        } else {
            (None, x.column_sq_norms())
        };
        Ok(GsWorkerCore {
            sq_norms,
            centring,
            sq_residual: residual.iter().map(|r| r * r).sum(),
            coefficients: vec![0.0; x.n_columns()],
            residual,
            x,
            y,
            lambda,
            l1: 0.0,
            active: PackedColumns::default(),
            active_slots: Vec::new(),
            shared,
            pending: None,
        })
    }

    /// Columns held.
    pub fn n_columns(&self) -> usize {
        self.x.n_columns()
    }

    /// Other workers sweep beside this one (its sweeps report residual deltas).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The baseline's exact update of one coordinate against the residual (centred or
    /// not): local column `k`, or with `packed` the active set's slot `k` (its column
    /// copied into [`PackedColumns`]). Returns `new - old` and the column's squared norm.
    #[inline]
    fn step_at(&mut self, k: usize, packed: bool) -> (f64, f64) {
        let (j, rows, vals, norm) = if packed {
            self.active.slot(k)
        } else {
            let (rows, vals) = self.x.column(k);
            (k, rows, vals, self.sq_norms[k])
        };
        let delta = column_step(
            self.centring.as_mut(),
            j,
            rows,
            vals,
            norm,
            self.lambda,
            &mut self.coefficients[j],
            &mut self.residual,
            &mut self.sq_residual,
            &mut self.l1,
        );
        (delta, norm)
    }

    /// Sweeps `order`'s coordinates Gauss-Seidel against the residual.
    pub fn sweep(&mut self, order: &SweepOrder) -> Result<SweepResult, StradsModelError> {
        if self.pending.is_some() {
            return Err(StradsModelError::protocol(
                "sweep before the previous round's commit",
            ));
        }
        // A full-sweep chunk is walked as a range (no list of its columns); active-set
        // passes walk a list that shrinks.
        let (range, mut sweep_list): (Option<Range<usize>>, Vec<usize>) = match order.coords {
            Coords::Range { start, end } => {
                let (start, end) = (start as usize, end as usize);
                if start > end || end > self.n_columns() {
                    return Err(StradsModelError::protocol(format!(
                        "columns {start}..{end} out of range ({} held)",
                        self.n_columns()
                    )));
                }
                (Some(start..end), Vec::new())
            }
            Coords::Active { fresh } => {
                if fresh {
                    let coefficients = &self.coefficients;
                    self.active = PackedColumns::of(
                        &self.x,
                        &self.sq_norms,
                        (0..coefficients.len()).filter(|&j| coefficients[j] != 0.0),
                    );
                    self.active_slots = (0..self.active.len()).collect();
                }
                (None, self.active_slots.clone())
            }
        };
        let offset = self.centring.as_ref().map_or(0.0, |c| c.offset);
        let start = self.shared.then(|| (self.residual.clone(), offset));
        let mut result = SweepResult::default();
        // `(column or active slot, value before)` of every step that moved a coefficient;
        // the first entry of a coordinate holds its value at the round's start.
        let mut moved: Vec<(usize, f64)> = Vec::new();
        // Active-set passes shrink their list as the baseline's do: a coordinate a pass
        // left at zero is not swept again until the set is taken afresh.
        let shrinks = range.is_none();
        let view = |s: &Self| 0.5 * s.sq_residual + s.lambda * s.l1;
        // The view this sweep must reach: the target, or its start less the decrease.
        let stop_at = match (order.target, order.decrease.map(|d| view(self) - d)) {
            (Some(t), Some(d)) => Some(t.max(d)),
            (t, d) => t.or(d),
        };
        'passes: while result.passes < order.max_passes.max(1) {
            let mut largest = 0.0f64;
            // One of the two is empty: a chunk's columns, or the active set's slots.
            let chunk = range.clone().unwrap_or_default();
            for k in chunk.chain(sweep_list.iter().copied()) {
                let old = if shrinks {
                    self.coefficients[self.active.column_of(k)]
                } else {
                    self.coefficients[k]
                };
                let (delta, norm) = self.step_at(k, shrinks);
                if delta != 0.0 {
                    // The slot in an active pass (slots run in column order).
                    moved.push((k, old));
                }
                result.updates += 1;
                largest = largest.max(delta * delta * norm);
                if stop_at.is_some_and(|t| view(self) <= t) {
                    result.reached_target = true;
                    result.largest = largest;
                    result.passes += 1;
                    break 'passes;
                }
            }
            result.passes += 1;
            result.largest = largest;
            if largest <= order.settle {
                break;
            }
            if shrinks {
                sweep_list.retain(|&s| self.coefficients[self.active.column_of(s)] != 0.0);
            }
        }
        if shrinks {
            sweep_list.retain(|&s| self.coefficients[self.active.column_of(s)] != 0.0);
            self.active_slots = sweep_list;
        }
        // Each column once (its first entry: the value before the round), and only if it
        // ended elsewhere than it started.
        let active = &self.active;
        let column_of = |k: usize| if shrinks { active.column_of(k) } else { k };
        moved.sort_by_key(|m| m.0);
        moved.dedup_by_key(|m| m.0);
        moved.retain(|&(k, old)| self.coefficients[column_of(k)] != old);
        result.changed = moved.iter().map(|&(k, _)| column_of(k) as u32).collect();
        result.deltas = moved
            .iter()
            .map(|&(k, old)| self.coefficients[column_of(k)] - old)
            .collect();
        if let Some((start, c)) = &start {
            self.fill_residual_delta(start, *c, &moved, shrinks, &mut result);
        }
        result.sq_residual = self.sq_residual;
        result.l1 = self.l1;
        let changed = moved
            .into_iter()
            .map(|(k, old)| (column_of(k), old))
            .collect();
        self.pending = Some(Pending { start, changed });
        Ok(result)
    }

    /// A shared sweep's residual delta `u_p`, `r . u_p` and the centring's offset, into
    /// `result` (`start`, `c`: the residual and offset at the round's start; `moved`: each
    /// changed column or active slot, with `result.deltas` its net change).
    fn fill_residual_delta(
        &self,
        start: &[f64],
        c: f64,
        moved: &[(usize, f64)],
        shrinks: bool,
        result: &mut SweepResult,
    ) {
        let active = &self.active;
        // `u_p = X d_p` from the net changes, not `start - r`: near the optimum the
        // difference would keep only a few digits of the steps (the weights then stall).
        let mut u = vec![0.0; self.residual.len()];
        let mut u_offset = 0.0f64;
        for (&(k, _), &d) in moved.iter().zip(&result.deltas) {
            // An active pass's columns from the packed copy.
            let (j, rows, vals) = if shrinks {
                let (j, rows, vals, _) = active.slot(k);
                (j, rows, vals)
            } else {
                let (rows, vals) = self.x.column(k);
                (k, rows, vals)
            };
            for (&i, &v) in rows.iter().zip(vals) {
                u[i as usize] += f64::from(v) * d;
            }
            if let Some(c) = &self.centring {
                u_offset -= d * c.mean(j);
            }
        }
        result.r_dot_u = dot(start, &u);
        if self.centring.is_some() {
            // (s + c 1) . (u_s + u_c 1)
            let n = self.residual.len() as f64;
            let (sum_s, sum_u): (f64, f64) = (start.iter().sum(), u.iter().sum());
            result.r_dot_u += c * sum_u + u_offset * sum_s + n * c * u_offset;
            result.residual_offset = u_offset;
        }
        result.residual_delta = RowVector::from_dense(u);
    }

    /// Applies a round's commit: this worker's step weight `weight` and the combined
    /// residual delta `combined + combined_offset 1 = sum_q w_q u_q` (ignored by a lone
    /// worker, whose weight is 1 and whose residual is already exact; the offset is 0
    /// without centring).
    pub fn commit(
        &mut self,
        weight: f64,
        combined: &RowVector,
        combined_offset: f64,
    ) -> Result<(), StradsModelError> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        if !(weight.is_finite() && (0.0..=1.0).contains(&weight)) {
            return Err(StradsModelError::protocol(format!(
                "step weight {weight} outside [0, 1]"
            )));
        }
        if weight != 1.0 {
            for &(j, old) in &pending.changed {
                let b = &mut self.coefficients[j];
                let new = old + weight * (*b - old);
                self.l1 += new.abs() - b.abs();
                *b = new;
            }
        }
        if let Some((mut start, offset)) = pending.start {
            combined.add_scaled_to(-1.0, &mut start)?;
            self.residual = start;
            self.sq_residual = match &mut self.centring {
                Some(c) => {
                    c.offset = offset - combined_offset;
                    c.resync(&self.residual)
                }
                None => self.residual.iter().map(|r| r * r).sum(),
            };
        }
        Ok(())
    }

    /// Recomputes `||r||^2` and `||b_own||_1` exactly and returns this worker's share of
    /// the certificate (`O(its non-zeros + rows)`).
    pub fn certify(&mut self) -> Certificate {
        if let Some(c) = &mut self.centring {
            // As the baseline: every worker folds the same offset into the same residual.
            c.fold(&mut self.residual);
        }
        self.sq_residual = self.residual.iter().map(|r| r * r).sum();
        self.l1 = self.coefficients.iter().map(|b| b.abs()).sum();
        let (mut max_abs_corr, mut kkt) = (0.0f64, 0.0f64);
        for (j, &b) in self.coefficients.iter().enumerate() {
            let (rows, vals) = self.x.column(j);
            let g: f64 = rows
                .iter()
                .zip(vals)
                .map(|(&i, &v)| f64::from(v) * self.residual[i as usize])
                .sum();
            let g = self.centring.as_ref().map_or(g, |c| c.dot(j, g));
            max_abs_corr = max_abs_corr.max(g.abs());
            let violation = if b != 0.0 {
                (g - self.lambda * b.signum()).abs()
            } else {
                (g.abs() - self.lambda).max(0.0)
            };
            kkt = kkt.max(violation);
        }
        let (mut yy, mut yr) = (0.0, 0.0);
        for (&y, &r) in self.y.iter().zip(&self.residual) {
            let y = f64::from(y);
            yy += y * y;
            yr += y * r;
        }
        Certificate {
            max_abs_corr,
            kkt,
            l1: self.l1,
            nonzeros: self.coefficients.iter().filter(|b| **b != 0.0).count() as u64,
            yy,
            yr,
            rr: self.sq_residual,
        }
    }

    /// The state to checkpoint (between rounds).
    pub fn snapshot(&self) -> Result<GsWorkerSnapshot, StradsModelError> {
        if self.pending.is_some() {
            return Err(StradsModelError::protocol("checkpoint inside a round"));
        }
        Ok(GsWorkerSnapshot {
            coefficients: self.coefficients.clone(),
            residual: self.residual.clone(),
            sq_residual: self.sq_residual,
            l1: self.l1,
            active: self
                .active_slots
                .iter()
                .map(|&s| self.active.column_of(s) as u32)
                .collect(),
            centring: self.centring.as_ref().map(Centring::state),
        })
    }

    /// Continues from a [`Self::snapshot`] of the same worker of the same job.
    pub fn restore(&mut self, s: GsWorkerSnapshot) -> Result<(), StradsModelError> {
        let n = self.coefficients.len();
        super::check_sizes(&[
            ("coefficients", s.coefficients.len(), n),
            ("rows", s.residual.len(), self.residual.len()),
        ])?;
        // The active list is in column order, each column once: a pass's slots then run in
        // column order, which the round's list of changes relies on.
        if s.active.windows(2).any(|w| w[0] >= w[1])
            || s.active.last().is_some_and(|&j| j as usize >= n)
        {
            return Err(StradsModelError::protocol(
                "checkpoint's active list is not this worker's columns in increasing order",
            ));
        }
        match (&mut self.centring, s.centring) {
            (Some(c), Some(state)) => c.restore(state),
            (None, None) => {}
            (mine, theirs) => {
                return Err(StradsModelError::protocol(format!(
                    "checkpoint {} the implicit centring, this worker {}",
                    if theirs.is_some() { "has" } else { "lacks" },
                    if mine.is_some() {
                        "centres"
                    } else {
                        "does not"
                    }
                )));
            }
        }
        self.coefficients = s.coefficients;
        self.residual = s.residual;
        self.sq_residual = s.sq_residual;
        self.l1 = s.l1;
        self.active = PackedColumns::of(
            &self.x,
            &self.sq_norms,
            s.active.into_iter().map(|j| j as usize),
        );
        self.active_slots = (0..self.active.len()).collect();
        self.pending = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
