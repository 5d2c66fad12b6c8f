//! The scheduler's pull side: a round's sweeps combined with their step weights, the
//! certificates' objective and duality gap, and the stop rules they feed.

use super::{GsScheduling, Phase, RoundKind};
use crate::apps::lasso::gs::{GsCombined, GsCommit, GsPartial};
use crate::apps::lasso::metrics::{
    EvalNumbers, Evaluation, ObjectivePoint, RoundProfile, peak_rss_mb,
};
use crate::apps::lasso::wire::WorkerBusy;
use crate::core::StradsModelError;
use crate::core::gauss_seidel::{
    Certificate, GsShare, RoundDeltas, SweepResult, jacobi_weights, kept_share,
};
use crate::core::tuning::{MAX_ACTIVE_PASSES, MAX_FULL_SWEEPS};
use std::time::{Duration, Instant};

impl GsScheduling {
    pub(super) fn pull_sweep(
        &mut self,
        round: u64,
        kind: RoundKind,
        partials: Vec<GsPartial>,
        elapsed: Duration,
    ) -> Result<GsCommit, StradsModelError> {
        let started = Instant::now();
        let mut results: Vec<SweepResult> = Vec::with_capacity(partials.len());
        let mut slowest = WorkerBusy::default();
        for p in partials {
            let GsPartial::Swept { result, busy } = p else {
                return Err(StradsModelError::protocol(format!(
                    "round {round}: certificate answer to a sweep"
                )));
            };
            slowest = slowest.slowest(busy);
            results.push(result);
        }
        if results.len() != self.workers() {
            return Err(StradsModelError::protocol(format!(
                "round {round}: {} answers from {} workers",
                results.len(),
                self.workers()
            )));
        }
        for (p, r) in results.iter().enumerate() {
            let n = self.ranges[p].len();
            if r.changed.len() != r.deltas.len() || r.changed.iter().any(|&j| j as usize >= n) {
                return Err(StradsModelError::protocol(format!(
                    "round {round}: worker {p} reports changes outside its {n} columns"
                )));
            }
        }
        let lambda = f64::from(self.lambda);
        let commit = if self.workers() == 1 {
            let r = &results[0];
            self.apply(0, r, 1.0);
            // A lone worker's running figures are the objective, exactly as the baseline
            // keeps them.
            self.s.sq_residual = r.sq_residual;
            self.s.l1 = r.l1;
            GsCommit {
                weights: vec![1.0],
                combined: None,
            }
        } else {
            // The scheduler holds every worker's delta: it computes the Gram matrix and
            // omega, and sends back their weighted sum.
            let w = results.len();
            let shares: Vec<GsShare> = results.iter_mut().map(GsShare::take_from).collect();
            let deltas = RoundDeltas::of(&shares, self.n_rows)?;
            let (gram, omega) = deltas.gram_and_omega();
            let c: Vec<f64> = results
                .iter()
                .enumerate()
                .map(|(p, r)| r.r_dot_u - lambda * self.l1_change(p, r))
                .collect();
            let weights = jacobi_weights(&c, &gram, omega);
            let kept = kept_share(&c, &gram, &weights);
            if kind == RoundKind::Chunk && self.job.gs_chunk == 0 {
                let most = (0..w)
                    .map(|p| self.ranges[p].len().div_ceil(self.chunks[p].max(1)))
                    .max()
                    .unwrap_or(1);
                self.s.growth.observe(kept, most);
            }
            tracing::debug!(
                round,
                ?kind,
                kept,
                omega,
                ?weights,
                factor = self.s.growth.factor(),
                "lasso gauss-seidel combination"
            );
            let mut quadratic = 0.0;
            for p in 0..w {
                quadratic -= weights[p] * results[p].r_dot_u;
                for q in 0..w {
                    quadratic += 0.5 * weights[p] * gram[p][q] * weights[q];
                }
            }
            self.s.sq_residual += 2.0 * quadratic;
            for (p, r) in results.iter().enumerate() {
                self.apply(p, r, weights[p]);
            }
            let (stored, offset) = deltas.combine(&weights)?;
            GsCommit {
                weights,
                combined: Some(GsCombined { stored, offset }),
            }
        };
        self.s.updates += results.iter().map(|r| r.updates).sum::<u64>();
        let objective = self.objective();
        self.s.metrics.objective.push(ObjectivePoint {
            round,
            updates: self.s.updates,
            elapsed_s: elapsed.as_secs_f64(),
            objective,
        });
        // A lone worker's flag is the target; several workers' flags are their shares.
        if self.workers() == 1 && results.iter().any(|r| r.reached_target) {
            self.reached_target(f64::NEG_INFINITY, elapsed);
        }
        self.reached_target(objective, elapsed);
        if !objective.is_finite() {
            tracing::warn!(round, "objective is not finite: diverged");
            self.stop();
        }
        if let Phase::Active { .. } = self.s.phase {
            self.s.active_passes += results.iter().map(|r| r.passes).max().unwrap_or(1);
            // A sweep stopped at its share of the target ended mid-pass: not settled.
            let settled = results
                .iter()
                .all(|r| r.largest <= self.s.settle && !r.reached_target);
            if settled || self.s.active_passes >= MAX_ACTIVE_PASSES {
                self.start_full_sweep();
            }
        }
        let profile = &mut self.s.metrics.profile;
        profile.update_rounds += 1;
        profile.pull_s += started.elapsed().as_secs_f64();
        absorb_busy(profile, slowest);
        Ok(commit)
    }

    /// `||b + d||_1 - ||b||_1` of worker `p`'s full step.
    fn l1_change(&self, p: usize, r: &SweepResult) -> f64 {
        let offset = self.ranges[p].start;
        r.changed
            .iter()
            .zip(&r.deltas)
            .map(|(&j, &d)| {
                let old = self.s.coefficients[offset + j as usize];
                (old + d).abs() - old.abs()
            })
            .sum()
    }

    /// Applies worker `p`'s changes with step weight `weight` (and the L1 norm's change).
    fn apply(&mut self, p: usize, r: &SweepResult, weight: f64) {
        let offset = self.ranges[p].start;
        for (&j, &d) in r.changed.iter().zip(&r.deltas) {
            let b = &mut self.s.coefficients[offset + j as usize];
            let new = if weight == 1.0 {
                *b + d
            } else {
                *b + weight * d
            };
            self.s.l1 += new.abs() - b.abs();
            *b = new;
        }
    }

    /// Records the certificate `c` (every worker's share summed) of the state after
    /// `round`: the objective, the duality gap, the evaluation and the target; returns
    /// `(objective, gap)`.
    pub(super) fn record_certificate(
        &mut self,
        round: u64,
        c: &Certificate,
        elapsed: Duration,
    ) -> (f64, f64) {
        let lambda = f64::from(self.lambda);
        let (max_corr, kkt, nonzeros, yr, rr) = (c.max_abs_corr, c.kkt, c.nonzeros, c.yr, c.rr);
        self.s.sq_residual = rr;
        self.s.l1 = c.l1;
        let objective = self.objective();
        let scale = if max_corr > lambda {
            lambda / max_corr
        } else {
            1.0
        };
        // P(b) - D(scale r), D(theta) = 1/2 ||y||^2 - 1/2 ||y - theta||^2.
        let gap = objective - (scale * yr - 0.5 * scale * scale * rr);
        let heldout = self
            .heldout
            .as_ref()
            .map(|h| h.figures_of_solver(&self.s.coefficients))
            .unwrap_or_default();
        let numbers = EvalNumbers {
            objective,
            kkt_violation: kkt,
            duality_gap: gap,
            l1: c.l1,
            nonzeros: nonzeros as usize,
        };
        let (updates, elapsed_s) = (self.s.updates, elapsed.as_secs_f64());
        let eval = Evaluation::of(round, updates, elapsed_s, &numbers, heldout);
        self.s
            .metrics
            .record_evaluation(eval, "lasso gauss-seidel certificate");
        self.s.certified_at = Some(self.s.updates);
        self.reached_target(objective, elapsed);
        if !objective.is_finite() {
            self.stop();
        }
        (objective, gap)
    }

    /// The certificate first (the stop tests and the settle threshold, as after a plain
    /// certification), then the sweep: committed as an active-set round, or discarded
    /// with weights 0 (every worker back on the certified state) when the certificate
    /// ended the run or left nothing to sweep. A discarded sweep's updates still count
    /// (work done).
    pub(super) fn pull_certify_then_sweep(
        &mut self,
        round: u64,
        partials: Vec<GsPartial>,
        elapsed: Duration,
    ) -> Result<GsCommit, StradsModelError> {
        let (certified, swept, discarded) = split_answers(round, partials)?;
        self.pull_certify(round, certified, elapsed)?;
        if !self.s.stopping && self.s.phase == (Phase::Active { fresh: true }) {
            self.s.phase = Phase::Active { fresh: false };
            return self.pull_sweep(round, RoundKind::Active, swept, elapsed);
        }
        self.s.updates += discarded;
        self.s.certified_at = Some(self.s.updates);
        Ok(GsCommit {
            weights: vec![0.0; self.workers()],
            combined: None,
        })
    }

    /// A lone worker's last full-sweep chunk, committed as any chunk, then the
    /// certification of the state it left, recorded as after a certification round.
    pub(super) fn pull_sweep_then_certify(
        &mut self,
        round: u64,
        partials: Vec<GsPartial>,
        elapsed: Duration,
    ) -> Result<GsCommit, StradsModelError> {
        if partials.len() != 1 {
            return Err(StradsModelError::protocol(format!(
                "round {round}: {} answers to a lone worker's sweep and certification",
                partials.len()
            )));
        }
        let (certified, swept, _) = split_answers(round, partials)?;
        let commit = self.pull_sweep(round, RoundKind::Chunk, swept, elapsed)?;
        self.pull_certify(round, certified, elapsed)?;
        Ok(commit)
    }

    pub(super) fn pull_certify(
        &mut self,
        round: u64,
        partials: Vec<GsPartial>,
        elapsed: Duration,
    ) -> Result<GsCommit, StradsModelError> {
        let started = Instant::now();
        let mut slowest = WorkerBusy::default();
        let mut certificates = Vec::with_capacity(partials.len());
        for p in partials {
            let GsPartial::Certified { certificate, busy } = p else {
                return Err(StradsModelError::protocol(format!(
                    "round {round}: sweep answer to a certification"
                )));
            };
            slowest = slowest.slowest(busy);
            certificates.push(certificate);
        }
        let Some(first) = certificates.first().copied() else {
            return Err(StradsModelError::protocol(format!(
                "round {round}: no certificate"
            )));
        };
        let max_corr = certificates
            .iter()
            .fold(0.0f64, |m, c| m.max(c.max_abs_corr));
        // Every worker holds the same residual: y.y, y.r and r.r are the first one's.
        let total = Certificate {
            max_abs_corr: max_corr,
            kkt: certificates.iter().fold(0.0f64, |m, c| m.max(c.kkt)),
            l1: certificates.iter().map(|c| c.l1).sum(),
            nonzeros: certificates.iter().map(|c| c.nonzeros).sum(),
            ..first
        };
        let (objective, gap) = self.record_certificate(round, &total, elapsed);
        let nonzeros = total.nonzeros;
        match self.s.phase {
            _ if self.s.stopping => {}
            Phase::AfterFull => {
                self.s.full_sweeps += 1;
                let tolerance = self.job.gap_tolerance.filter(|t| *t > 0.0);
                if tolerance.is_some_and(|t| gap <= t * objective.abs().max(f64::MIN_POSITIVE))
                    || self.s.full_sweeps >= MAX_FULL_SWEEPS as u64
                {
                    self.stop();
                } else if nonzeros == 0 {
                    self.start_full_sweep();
                } else {
                    self.s.settle = (0.1 * gap / nonzeros as f64).max(f64::MIN_POSITIVE);
                    self.s.phase = Phase::Active { fresh: true };
                    self.s.active_passes = 0;
                }
            }
            Phase::Full | Phase::Active { .. } => {}
        }
        if self.s.stopping {
            self.s.done = true;
        }
        let profile = &mut self.s.metrics.profile;
        profile.eval_rounds += 1;
        profile.scheduler_peak_rss_mb = peak_rss_mb();
        profile.eval_pull_s += started.elapsed().as_secs_f64();
        absorb_busy(profile, slowest);
        Ok(GsCommit::default())
    }
}

/// Answers that carry a certificate and a sweep, as the answers to a certification and to
/// a sweep, with the sweeps' updates.
fn split_answers(
    round: u64,
    partials: Vec<GsPartial>,
) -> Result<(Vec<GsPartial>, Vec<GsPartial>, u64), StradsModelError> {
    let mut certified = Vec::with_capacity(partials.len());
    let mut swept = Vec::with_capacity(partials.len());
    let mut updates = 0u64;
    for p in partials {
        let GsPartial::CertifiedAndSwept {
            certificate,
            result,
            busy,
        } = p
        else {
            return Err(StradsModelError::protocol(format!(
                "round {round}: expected a certificate and a sweep"
            )));
        };
        updates += result.updates;
        certified.push(GsPartial::Certified { certificate, busy });
        swept.push(GsPartial::Swept { result, busy });
    }
    Ok((certified, swept, updates))
}

fn absorb_busy(profile: &mut RoundProfile, slowest: WorkerBusy) {
    profile.worker_push_s = profile.worker_push_s.max(slowest.push_s);
    profile.worker_commit_s = profile.worker_commit_s.max(slowest.commit_s);
    profile.worker_eval_s = profile.worker_eval_s.max(slowest.eval_s);
    profile.worker_peak_rss_mb = profile.worker_peak_rss_mb.max(slowest.peak_rss_mb);
}
