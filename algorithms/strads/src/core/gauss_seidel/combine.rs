//! How a round's sweeps combine at the scheduler (see the parent module's convergence
//! argument): the workers' residual deltas ([`GsShare`], [`RoundDeltas`]), their Gram
//! matrix and `omega`, the step weights that never raise the objective
//! ([`jacobi_weights`]), their weighted sum, the share of progress they keep
//! ([`kept_share`]) and the full-sweep chunk that grows with it ([`ChunkGrowth`]).

use super::{RowVector, SweepResult, dot};
use crate::core::StradsModelError;
use serde::{Deserialize, Serialize};

/// The quadratic-plus-linear bound `G(w) = -sum_p w_p c_p + 1/2 w^T M w` of the objective
/// change for step weights `w`, where `c_p = r . u_p - l1_p` (`l1_p` the L1 change of
/// worker `p`'s full step, so the L1 part is bounded by linear interpolation) and
/// `M_pq = u_p . u_q`. Exact at `w = 1` and wherever the L1 part is linear.
pub fn weights_bound(c: &[f64], gram: &[Vec<f64>], w: &[f64]) -> f64 {
    let mut g = 0.0;
    for p in 0..w.len() {
        g -= w[p] * c[p];
        for q in 0..w.len() {
            g += 0.5 * w[p] * gram[p][q] * w[q];
        }
    }
    g
}

/// A worker's residual delta `u_p` after a sweep (several workers), as the scheduler
/// combines it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GsShare {
    /// [`SweepResult::residual_delta`].
    pub residual_delta: RowVector,
    /// [`SweepResult::residual_offset`].
    pub residual_offset: f64,
}

impl GsShare {
    /// Moves the residual delta out of `result` (which keeps a zero one).
    pub fn take_from(result: &mut SweepResult) -> Self {
        GsShare {
            residual_delta: std::mem::take(&mut result.residual_delta),
            residual_offset: result.residual_offset,
        }
    }
}

/// The deltas of `shares` as dense vectors of `n_rows` (a dense one is read in place).
fn dense_deltas(
    shares: &[GsShare],
    n_rows: usize,
) -> Result<Vec<std::borrow::Cow<'_, [f64]>>, StradsModelError> {
    shares
        .iter()
        .map(|s| match &s.residual_delta {
            RowVector::Dense(v) if v.len() == n_rows => {
                Ok(std::borrow::Cow::Borrowed(v.as_slice()))
            }
            other => other.to_dense(n_rows).map(std::borrow::Cow::Owned),
        })
        .collect()
}

/// A round's deltas as dense rows, with their offsets and (centred) sums: spread out once
/// for the Gram matrix and their weighted sum.
pub struct RoundDeltas<'a> {
    u: Vec<std::borrow::Cow<'a, [f64]>>,
    offsets: Vec<f64>,
    /// `sum_i u_p[i]`, only with centring (0 otherwise: unused).
    sums: Vec<f64>,
    centred: bool,
    n_rows: usize,
}

impl<'a> RoundDeltas<'a> {
    /// The deltas of `shares` over `n_rows` rows.
    pub fn of(shares: &'a [GsShare], n_rows: usize) -> Result<Self, StradsModelError> {
        let u = dense_deltas(shares, n_rows)?;
        let offsets: Vec<f64> = shares.iter().map(|s| s.residual_offset).collect();
        let centred = offsets.iter().any(|c| *c != 0.0);
        let sums = if centred {
            u.iter().map(|u| u.iter().sum()).collect()
        } else {
            vec![0.0; u.len()]
        };
        Ok(RoundDeltas {
            u,
            offsets,
            sums,
            centred,
            n_rows,
        })
    }

    /// The Gram matrix `M_pq = u_p . u_q` (with implicit centring `u_p = u_s + c_p 1`)
    /// and `omega`, the most workers whose deltas touch one row.
    pub fn gram_and_omega(&self) -> (Vec<Vec<f64>>, usize) {
        let w = self.u.len();
        // Each row holds the entries from the diagonal on; the rest mirror them.
        let rows: Vec<Vec<f64>> = (0..w).map(|p| self.gram_row(p)).collect();
        let gram = (0..w)
            .map(|p| (0..w).map(|q| rows[p.min(q)][p.max(q)]).collect())
            .collect();
        (gram, self.omega().min(w))
    }

    /// `V = sum_q w_q u_q` with step weights `weights`: its stored part (dense) and its
    /// constant part.
    pub fn combine(&self, weights: &[f64]) -> Result<(RowVector, f64), StradsModelError> {
        let u = &self.u;
        if weights.len() != u.len() {
            return Err(StradsModelError::protocol(format!(
                "{} step weights for {} shares",
                weights.len(),
                u.len()
            )));
        }
        let Some(first) = u.first() else {
            return Ok((RowVector::zero(), 0.0));
        };
        // The first term written straight in (no zeroed buffer).
        let mut combined: Vec<f64> = first.iter().map(|v| weights[0] * v).collect();
        for p in 1..u.len() {
            combined
                .iter_mut()
                .zip(u[p].iter())
                .for_each(|(s, v)| *s += weights[p] * v);
        }
        let offset = weights.iter().zip(&self.offsets).map(|(w, c)| w * c).sum();
        Ok((RowVector::Dense(combined), offset))
    }

    /// `u_p . u_q` for `q >= p` (0 below `p`).
    fn gram_row(&self, p: usize) -> Vec<f64> {
        let (u, c, sums) = (&self.u, &self.offsets, &self.sums);
        let n = self.n_rows as f64;
        let mut row = vec![0.0; u.len()];
        for q in p..u.len() {
            let stored = dot(&u[p], &u[q]);
            row[q] = if self.centred {
                stored + c[q] * sums[p] + c[p] * sums[q] + n * c[p] * c[q]
            } else {
                stored
            };
        }
        row
    }

    /// The most workers whose deltas touch one row. The scan stops at the first row every
    /// worker touches (the first row of dense deltas): no row can exceed all of them.
    fn omega(&self) -> usize {
        let w = self.u.len();
        let everywhere = self.offsets.iter().filter(|c| **c != 0.0).count();
        let touching = (0..self.n_rows).map(|i| {
            everywhere
                + (0..w)
                    .filter(|&p| self.offsets[p] == 0.0 && self.u[p][i] != 0.0)
                    .count()
        });
        let mut omega = 0;
        for here in touching {
            omega = omega.max(here);
            if omega == w {
                break;
            }
        }
        omega
    }
}

/// The step weights of one round (see the module doc): `c` and `gram` as in
/// [`weights_bound`], `omega` the largest number of workers whose residual deltas touch
/// one row. Returns 1 for every worker when `omega <= 1` (no shared row: the sweeps do not
/// interfere); otherwise the lowest bound among `1 / omega` for all, 1 for all, and the
/// box-constrained minimiser of the bound (projected coordinate descent, `[0, 1]^W`).
pub fn jacobi_weights(c: &[f64], gram: &[Vec<f64>], omega: usize) -> Vec<f64> {
    let w = c.len();
    if omega <= 1 {
        return vec![1.0; w];
    }
    let safe = vec![1.0 / omega as f64; w];
    let ones = vec![1.0; w];
    let mut best = safe.clone();
    for _ in 0..100 {
        let mut moved = 0.0f64;
        for p in 0..w {
            if gram[p][p] <= 0.0 {
                best[p] = 1.0;
                continue;
            }
            let others: f64 = (0..w)
                .filter(|&q| q != p)
                .map(|q| gram[p][q] * best[q])
                .sum();
            let next = ((c[p] - others) / gram[p][p]).clamp(0.0, 1.0);
            moved = moved.max((next - best[p]).abs());
            best[p] = next;
        }
        if moved < 1e-12 {
            break;
        }
    }
    [best, ones, safe]
        .into_iter()
        .filter(|v| v.iter().all(|x| x.is_finite()))
        .min_by(|a, b| weights_bound(c, gram, a).total_cmp(&weights_bound(c, gram, b)))
        .unwrap_or_else(|| vec![1.0 / omega as f64; w])
}

/// The share of the workers' own progress a round's step weights `w` keep:
/// `G(w) / sum_p G_p`, with `G` the bound of [`weights_bound`] and
/// `G_p = 1/2 M_pp - c_p` worker `p`'s own objective change (exact: its sweep alone).
/// 1 when the sweeps did not interfere (orthogonal `u_p`, all weights 1), lower as their
/// residual deltas overlap (at least `1 / omega` with [`jacobi_weights`]), above 1 when
/// they partly cancel (seen in active-set rounds), and 1 when the workers made no
/// progress at all (nothing was lost).
pub fn kept_share(c: &[f64], gram: &[Vec<f64>], w: &[f64]) -> f64 {
    let own: f64 = (0..c.len()).map(|p| 0.5 * gram[p][p] - c[p]).sum();
    let kept = weights_bound(c, gram, w) / own;
    if own < 0.0 && kept.is_finite() {
        kept
    } else {
        1.0
    }
}

/// How many latency-covering chunks a worker sweeps per round of a full sweep (several
/// workers): the chunk doubles after a round whose combination kept at least
/// [`Self::GROW_AT`] of the workers' own progress ([`kept_share`]) and halves (not below
/// one) after one that kept less than [`Self::SHRINK_BELOW`]. Where the workers' columns
/// barely interact a full sweep then takes a few rounds instead of one per latency-sized
/// chunk (rounds cost their latency whatever their size); where the blend loses objective
/// the chunk shrinks back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkGrowth {
    factor: u32,
}

impl Default for ChunkGrowth {
    fn default() -> Self {
        ChunkGrowth { factor: 1 }
    }
}

impl ChunkGrowth {
    /// Kept share at or above which the chunk doubles.
    pub const GROW_AT: f64 = crate::core::tuning::CHUNK_GROW_AT;
    /// Kept share below which the chunk halves.
    pub const SHRINK_BELOW: f64 = crate::core::tuning::CHUNK_SHRINK_BELOW;

    /// The chunk as a multiple of the latency-covering one.
    pub fn factor(&self) -> u32 {
        self.factor
    }

    /// After a full-sweep round that kept `kept` of the workers' own progress; `most` is
    /// the factor that covers the longest column range in one round (no use growing past
    /// it).
    pub fn observe(&mut self, kept: f64, most: usize) {
        let most = u32::try_from(most.max(1)).unwrap_or(u32::MAX);
        if kept >= Self::GROW_AT {
            self.factor = self.factor.saturating_mul(2).min(most).max(1);
        } else if kept < Self::SHRINK_BELOW {
            self.factor = (self.factor / 2).max(1);
        }
    }
}
