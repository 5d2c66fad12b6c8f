//! Lasso `min 1/2 ||y - X b||^2 + lambda ||b||_1` by scheduled parallel coordinate descent,
//! with X split by rows over P workers (STRADS push/pull).
//!
//! Round: scheduler picks vars -> a dispatch to every worker -> each worker
//! [`LassoWorkerState::push`]es partial `z_jp` -> [`pull`] sums and soft-thresholds -> the
//! changes go back to the workers ([`LassoWorkerState::apply_deltas`]) and to the scheduler
//! ([`LassoScheduler::commit`](super::scheduler::LassoScheduler::commit)).

use super::StradsModelError;
use super::gauss_seidel::Centring;
use petrel_ml::data::SparseColumns;

/// One worker's share: a row block of X (column-major), its slice of y and the residual
/// `r = y - X b` for those rows, kept current by [`Self::apply_deltas`]. The residual is
/// f64 so that millions of incremental updates do not drift.
#[derive(Debug, Clone)]
pub struct LassoWorkerState {
    x: SparseColumns,
    y: Vec<f32>,
    residual: Vec<f64>,
    /// `||r||^2`, kept current by [`Self::apply_deltas`] (O(changed non-zeros) instead of
    /// O(rows) per round) and recomputed exactly by [`Self::resync_squared_residual`].
    sq_residual: f64,
    /// Implicit centring ([`Self::centred`]); `None` for the design as given.
    centring: Option<Centring>,
}

impl LassoWorkerState {
    /// Worker starting from `b = 0` (residual = y).
    pub fn new(x_block: SparseColumns, y_block: Vec<f32>) -> Result<Self, StradsModelError> {
        super::check_sizes(&[("targets", y_block.len(), x_block.n_rows)])?;
        let residual: Vec<f64> = y_block.iter().map(|&v| f64::from(v)).collect();
        Ok(LassoWorkerState {
            sq_residual: residual.iter().map(|r| r * r).sum(),
            x: x_block,
            y: y_block,
            residual,
            centring: None,
        })
    }

    /// A worker of the implicitly centred design (`fit_intercept` without densifying): its
    /// row block as stored, its share of the centred labels, and the whole design's column
    /// `means`. Memory and the cost of a change stay proportional to the non-zeros.
    pub fn centred(
        x_block: SparseColumns,
        y_block: Vec<f32>,
        means: Vec<f64>,
    ) -> Result<Self, StradsModelError> {
        super::check_sizes(&[("column means", means.len(), x_block.n_columns())])?;
        let mut state = LassoWorkerState::new(x_block, y_block)?;
        state.centring = Some(Centring::with_means(&state.x, &state.residual, means));
        Ok(state)
    }

    /// Folds the centring's offset into the stored residual and recomputes its sums
    /// exactly (O(rows)).
    fn fold_offset(&mut self) {
        if let Some(c) = &mut self.centring {
            c.fold(&mut self.residual);
        }
    }

    /// Rows of the block.
    pub fn n_rows(&self) -> usize {
        self.y.len()
    }

    /// Features (columns).
    pub fn n_features(&self) -> usize {
        self.x.n_columns()
    }

    /// `z_jp = sum_i x_ij (r_i + x_ij b_j)` for each var, where `values[k]` is the current
    /// value of `vars[k]`: the partial of the exact one-coordinate minimiser's numerator.
    pub fn push(&self, vars: &[usize], values: &[f32]) -> Vec<f32> {
        if let Some(c) = &self.centring {
            return vars
                .iter()
                .zip(values)
                .map(|(&j, &b_j)| {
                    let z = c.dot(j, self.stored_dot(j))
                        + c.sq_norm(j, self.x.column(j).1) * f64::from(b_j);
                    z as f32
                })
                .collect();
        }
        vars.iter()
            .zip(values)
            .map(|(&j, &b_j)| {
                let (rows, vals) = self.x.column(j);
                let b_j = f64::from(b_j);
                rows.iter()
                    .zip(vals)
                    .map(|(&i, &x)| {
                        let x = f64::from(x);
                        x * (self.residual[i as usize] + x * b_j)
                    })
                    .sum::<f64>() as f32
            })
            .collect()
    }

    /// The stored residual on this worker's rows (what a checkpoint saves): `y - X b`,
    /// or with implicit centring its sparse part `s` (the residual is `s + c 1`, `c` in
    /// [`Self::centring_state`]).
    pub fn residual(&self) -> &[f64] {
        &self.residual
    }

    /// With implicit centring, the running `[offset c, sum(s), ||s||^2]` (what a
    /// checkpoint saves beside [`Self::residual`]).
    pub fn centring_state(&self) -> Option<[f64; 3]> {
        self.centring.as_ref().map(Centring::state)
    }

    /// Continues from a checkpointed residual (same rows) and, with implicit centring, its
    /// saved [`Self::centring_state`] (without it, `residual` is taken as the whole
    /// residual, offset 0).
    pub fn restore_residual(
        &mut self,
        residual: Vec<f64>,
        centring: Option<[f64; 3]>,
    ) -> Result<(), StradsModelError> {
        super::check_sizes(&[("rows", residual.len(), self.residual.len())])?;
        self.residual = residual;
        if let Some(c) = &mut self.centring {
            c.offset = 0.0;
        }
        self.resync_squared_residual();
        if let (Some(c), Some(state)) = (&mut self.centring, centring) {
            c.restore(state);
            self.sq_residual = c.sq_residual();
        }
        Ok(())
    }

    /// Sets the running `||r||^2` (a checkpoint's saved value, so a resumed run's
    /// objective trace continues bit for bit).
    pub fn set_squared_residual(&mut self, sq_residual: f64) {
        self.sq_residual = sq_residual;
    }

    /// Recomputes `||r||^2` from the residual (the running sum's rounding drift is gone).
    pub fn resync_squared_residual(&mut self) -> f64 {
        self.fold_offset();
        self.sq_residual = self.residual.iter().map(|r| r * r).sum();
        self.sq_residual
    }

    /// `r -= x_j * delta` for every committed change (and `||r||^2` with it).
    pub fn apply_deltas(&mut self, changes: &[(usize, f32)]) {
        let mut sq_change = 0.0f64;
        for &(j, delta) in changes.iter().filter(|c| c.1 != 0.0) {
            let delta = f64::from(delta);
            let (rows, vals) = self.x.column(j);
            for (&i, &x) in rows.iter().zip(vals) {
                let r = &mut self.residual[i as usize];
                let before = *r;
                *r -= f64::from(x) * delta;
                sq_change += *r * *r - before * before;
            }
            // With centring: s -= delta x_j on the non-zeros (above), c += delta mu_j.
            if let Some(c) = &mut self.centring {
                c.sum_s -= delta * c.sums[j];
                c.offset += delta * c.means[j];
            }
        }
        match &mut self.centring {
            Some(c) => {
                c.sq_s += sq_change;
                self.sq_residual = c.sq_residual();
            }
            None => self.sq_residual += sq_change,
        }
    }

    /// Partial `x_j^T r` for each var (gradient of the smooth part is `-x_j^T r`).
    pub fn correlation_with_residual(&self, vars: &[usize]) -> Vec<f64> {
        vars.iter()
            .map(|&j| {
                let dot = self.stored_dot(j);
                self.centring.as_ref().map_or(dot, |c| c.dot(j, dot))
            })
            .collect()
    }

    /// `x_j . s` over the column's stored non-zeros and the stored residual, in row order.
    fn stored_dot(&self, j: usize) -> f64 {
        let (rows, vals) = self.x.column(j);
        rows.iter()
            .zip(vals)
            .map(|(&i, &x)| f64::from(x) * self.residual[i as usize])
            .sum()
    }

    /// Partial `||r||^2` (the running sum: O(1)).
    pub fn squared_residual(&self) -> f64 {
        self.sq_residual
    }

    /// Partials `(y.y, y.r, r.r)`: enough for the duality gap with any dual scale `s`, since
    /// `||y - s r||^2 = y.y - 2 s y.r + s^2 r.r`.
    pub fn dot_partials(&self) -> (f64, f64, f64) {
        let offset = self.centring.as_ref().map_or(0.0, |c| c.offset);
        self.y
            .iter()
            .zip(&self.residual)
            .fold((0.0, 0.0, 0.0), |(yy, yr, rr), (&y, &r)| {
                let (y, r) = (f64::from(y), r + offset);
                (yy + y * y, yr + y * r, rr + r * r)
            })
    }
}

/// `S(z, l) = sign(z) max(|z| - l, 0)`.
pub fn soft_threshold(z: f64, threshold: f64) -> f64 {
    z.signum() * (z.abs() - threshold).max(0.0)
}

/// Aggregation: `b_j = S(sum_p z_jp, lambda) / ||x_j||^2` (0 for an all-zero column).
/// `col_sq_norms` is indexed by variable; `summed_z` is aligned with `vars`.
pub fn pull(vars: &[usize], summed_z: &[f32], col_sq_norms: &[f64], lambda: f32) -> Vec<f32> {
    vars.iter()
        .zip(summed_z)
        .map(|(&j, &z)| {
            let norm = col_sq_norms.get(j).copied().unwrap_or(0.0);
            if norm > 0.0 {
                (soft_threshold(f64::from(z), f64::from(lambda)) / norm) as f32
            } else {
                0.0
            }
        })
        .collect()
}

/// Largest subgradient-optimality violation given `x_j^T r` for all j: for `b_j != 0`
/// `|x_j^T r - lambda sign(b_j)|`, else `max(|x_j^T r| - lambda, 0)`. Zero at the optimum.
pub fn kkt_violation(x_t_residual: &[f64], b: &[f32], lambda: f32) -> f64 {
    let lambda = f64::from(lambda);
    x_t_residual
        .iter()
        .zip(b)
        .map(|(&g, &b_j)| {
            if b_j != 0.0 {
                (g - lambda * f64::from(b_j.signum())).abs()
            } else {
                (g.abs() - lambda).max(0.0)
            }
        })
        .fold(0.0, f64::max)
}

/// Dual scaling `s = min(1, lambda / ||X^T r||_inf)` making `theta = s r` dual-feasible.
pub fn dual_scale(x_t_residual: &[f64], lambda: f32) -> f64 {
    let max_corr = x_t_residual.iter().fold(0.0f64, |m, g| m.max(g.abs()));
    if max_corr > f64::from(lambda) {
        f64::from(lambda) / max_corr
    } else {
        1.0
    }
}

#[cfg(test)]
pub(crate) mod tests;
