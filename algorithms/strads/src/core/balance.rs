//! Dynamic load balancing by measured worker speed (SchMP's): each worker's seconds per
//! unit of work (a row, for the scheduled Lasso and logistic regression), exponentially
//! smoothed, and shares of contiguous units re-dealt at round boundaries so that the
//! workers' predicted finish times are equal. A re-deal costs a round and a rebuild on the workers, and measured
//! times are noisy on a shared machine, so it is taken only after every worker answered
//! [`BALANCE_SETTLE_ROUNDS`] rounds on its current share, only when it shortens the
//! predicted round by more than [`BALANCE_MIN_GAIN`], and only once the time it would
//! have saved since the last re-deal pays for the last re-deal's measured cost (a costly
//! re-deal for a small gain waits); no share falls below
//! [`BALANCE_MIN_SHARE`] of an even one, so every worker stays measured.
//!
//! [`RowDealer`] is the scheduler's side for the apps: the balancer fed with the workers'
//! cumulative compute, the deal round (nothing in flight) and its measured cost.

use super::StradsModelError;
use super::app::{Plan, Step};
use super::tuning::{
    BALANCE_MIN_GAIN, BALANCE_MIN_SHARE, BALANCE_SETTLE_ROUNDS, BALANCE_SMOOTHING,
};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Shares of `total` contiguous units over the workers, and each worker's smoothed time
/// per unit.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancer {
    shares: Vec<u64>,
    per_unit: Vec<Option<f64>>,
    /// Measurements of each worker on its current share.
    settled: Vec<u32>,
    /// Seconds the last re-deal took (0 before any).
    deal_cost_s: f64,
    min_share: u64,
}

impl LoadBalancer {
    /// Starts from `shares` (the static dealing, worker order), none measured yet.
    pub fn new(shares: Vec<u64>) -> Result<Self, StradsModelError> {
        let total: u64 = shares.iter().sum();
        let workers = shares.len() as u64;
        if workers == 0 || total < workers || shares.contains(&0) {
            return Err(StradsModelError::InvalidConfig(format!(
                "dynamic balancing needs at least one unit per worker: shares {shares:?}"
            )));
        }
        let even = total as f64 / workers as f64;
        let min_share = ((even * BALANCE_MIN_SHARE).ceil() as u64).max(1);
        Ok(LoadBalancer {
            per_unit: vec![None; shares.len()],
            settled: vec![0; shares.len()],
            deal_cost_s: 0.0,
            shares,
            min_share,
        })
    }

    /// Units per worker.
    pub fn shares(&self) -> &[u64] {
        &self.shares
    }

    /// The shares as contiguous ranges of units, in worker order.
    pub fn ranges(&self) -> Vec<Range<u64>> {
        let mut start = 0;
        self.shares
            .iter()
            .map(|&s| {
                let range = start..start + s;
                start += s;
                range
            })
            .collect()
    }

    /// Each worker's smoothed time per unit (0 where not measured yet).
    pub fn seconds_per_unit(&self) -> Vec<f64> {
        self.per_unit.iter().map(|t| t.unwrap_or(0.0)).collect()
    }

    /// The last re-deal took `seconds` (its round, rebuilds included).
    pub fn deal_cost(&mut self, seconds: f64) {
        if seconds.is_finite() && seconds >= 0.0 {
            self.deal_cost_s = seconds;
        }
    }

    /// Worker `worker` spent `busy_s` seconds on its current share (since the last call);
    /// a non-positive or non-finite time measures nothing.
    pub fn observe(&mut self, worker: usize, busy_s: f64) {
        let (Some(&share), Some(slot), Some(settled)) = (
            self.shares.get(worker),
            self.per_unit.get_mut(worker),
            self.settled.get_mut(worker),
        ) else {
            return;
        };
        if !(busy_s.is_finite() && busy_s > 0.0) {
            return;
        }
        *settled += 1;
        let sample = busy_s / share as f64;
        *slot = Some(match *slot {
            Some(old) => BALANCE_SMOOTHING * sample + (1.0 - BALANCE_SMOOTHING) * old,
            None => sample,
        });
    }

    /// The predicted time of a round under `shares` (the slowest worker's), once every
    /// worker is measured.
    fn predicted(&self, shares: &[u64]) -> Option<f64> {
        shares
            .iter()
            .zip(&self.per_unit)
            .map(|(&s, t)| t.map(|t| s as f64 * t))
            .try_fold(0.0f64, |max, t| t.map(|t| max.max(t)))
    }

    /// Shares proportional to the measured speeds, each at least the minimum, summing to
    /// the total (largest remainders get the leftover units, ties to the lower worker).
    fn proportional(&self) -> Option<Vec<u64>> {
        let speeds: Vec<f64> = self
            .per_unit
            .iter()
            .map(|t| t.filter(|t| *t > 0.0).map(|t| 1.0 / t))
            .collect::<Option<_>>()?;
        let total: u64 = self.shares.iter().sum();
        let workers = self.shares.len() as u64;
        let free = total.saturating_sub(self.min_share * workers);
        let sum: f64 = speeds.iter().sum();
        let ideal: Vec<f64> = speeds.iter().map(|s| total as f64 * s / sum).collect();
        // Above the floor, deal what is left in proportion to how far each ideal share
        // is above it.
        let above: Vec<f64> = ideal
            .iter()
            .map(|i| (i - self.min_share as f64).max(0.0))
            .collect();
        let above_sum: f64 = above.iter().sum();
        let exact: Vec<f64> = above
            .iter()
            .map(|a| {
                if above_sum > 0.0 {
                    free as f64 * a / above_sum
                } else {
                    free as f64 / workers as f64
                }
            })
            .collect();
        let mut shares: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
        let mut left = free - shares.iter().sum::<u64>().min(free);
        let mut order: Vec<usize> = (0..shares.len()).collect();
        order.sort_by(|&a, &b| {
            let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        for &w in order.iter().cycle().take(order.len() * 2) {
            if left == 0 {
                break;
            }
            shares[w] += 1;
            left -= 1;
        }
        shares.iter_mut().for_each(|s| *s += self.min_share);
        Some(shares)
    }

    /// A new dealing, adopted, when every worker answered [`BALANCE_SETTLE_ROUNDS`] rounds
    /// on its share, it shortens the predicted round by more than [`BALANCE_MIN_GAIN`] and
    /// that saving over the rounds since the last re-deal exceeds its cost; else `None`
    /// and the shares stay.
    pub fn rebalance(&mut self) -> Option<Vec<u64>> {
        self.shares = self.proposal()?;
        self.settled.iter_mut().for_each(|n| *n = 0);
        Some(self.shares.clone())
    }

    /// The dealing [`LoadBalancer::rebalance`] would adopt now, without adopting it.
    pub fn proposal(&self) -> Option<Vec<u64>> {
        let rounds = self.settled.iter().copied().min().unwrap_or(0);
        if rounds < BALANCE_SETTLE_ROUNDS {
            return None;
        }
        let proposal = self.proportional()?;
        let now = self.predicted(&self.shares)?;
        let then = self.predicted(&proposal)?;
        if proposal == self.shares
            || then >= now * (1.0 - BALANCE_MIN_GAIN)
            || (now - then) * f64::from(rounds) < self.deal_cost_s
        {
            return None;
        }
        Some(proposal)
    }
}

/// What the scheduler does next about the dealing ([`RowDealer::gate`]).
#[derive(Debug, Clone, PartialEq)]
pub enum DealGate {
    /// A deal is in flight: schedule nothing else.
    Wait,
    /// Run a deal round: worker `i` takes rows `ranges[i]`.
    Deal(Vec<Range<u64>>),
    /// Schedule as with a static dealing.
    Proceed,
}

/// The scheduler's side of `balance = "dynamic"`: the row balancer, each worker's
/// compute (cumulative seconds) at its last answer, and the re-deals so far.
pub struct RowDealer {
    balancer: LoadBalancer,
    last_busy: Vec<f64>,
    deals: u64,
    /// The first answers after a deal also hold the last commit on the old rows: they
    /// only move `last_busy`.
    just_dealt: Vec<bool>,
    /// When the last round was pulled (seconds into the run): a deal's cost is the time
    /// from there to its own pull.
    last_pull_s: f64,
    /// The changes of the workers so far (elastic jobs).
    changes: Vec<WorkerChange>,
}

impl RowDealer {
    /// The dealer of `n_rows` rows over `workers`, starting from the static dealing, or
    /// none unless `dynamic` (`balance = "static"`).
    pub fn of(
        dynamic: bool,
        n_rows: usize,
        workers: usize,
    ) -> Result<Option<Self>, StradsModelError> {
        if !dynamic {
            return Ok(None);
        }
        let shares = super::split_evenly(n_rows, workers)
            .iter()
            .map(|r| r.len() as u64)
            .collect();
        Self::from_shares(shares).map(Some)
    }

    /// The dealer starting from `shares` units per worker (contiguous, in worker order).
    pub fn from_shares(shares: Vec<u64>) -> Result<Self, StradsModelError> {
        let workers = shares.len();
        Ok(RowDealer {
            balancer: LoadBalancer::new(shares)?,
            last_busy: vec![0.0; workers],
            deals: 0,
            just_dealt: vec![false; workers],
            last_pull_s: 0.0,
            changes: Vec::new(),
        })
    }

    /// Worker `index` has computed `busy_s` seconds in all (cumulative): the part since
    /// its last answer was on its current rows.
    pub fn observe(&mut self, index: usize, busy_s: f64) {
        if let (Some(last), Some(dealt)) = (
            self.last_busy.get_mut(index),
            self.just_dealt.get_mut(index),
        ) {
            if !std::mem::take(dealt) {
                self.balancer.observe(index, busy_s - *last);
            }
            *last = busy_s;
        }
    }

    /// Before scheduling a round: a deal round when the balancer measured that it pays,
    /// once nothing is in flight (`idle`: the pipeline drains for it, so the update
    /// rounds stay those of a static dealing); nothing else while one is in flight.
    pub fn gate(&mut self, round: u64, deal_in_flight: bool, idle: bool) -> DealGate {
        if deal_in_flight {
            return DealGate::Wait;
        }
        if self.balancer.proposal().is_none() {
            return DealGate::Proceed;
        }
        if !idle {
            return DealGate::Wait;
        }
        if self.balancer.rebalance().is_none() {
            return DealGate::Proceed;
        }
        self.deals += 1;
        self.just_dealt.iter_mut().for_each(|d| *d = true);
        tracing::debug!(round, rows = ?self.balancer.shares(), "rows re-dealt");
        DealGate::Deal(self.balancer.ranges())
    }

    /// A round was pulled `elapsed_s` into the run; a deal round's time since the last
    /// pull is the deal's cost.
    pub fn pulled(&mut self, elapsed_s: f64, deal: bool) {
        if deal {
            self.balancer.deal_cost(elapsed_s - self.last_pull_s);
        }
        self.last_pull_s = elapsed_s;
    }

    /// `metrics.json`'s `balance`.
    pub fn report(&self) -> RowDealing {
        RowDealing {
            deals: self.deals,
            rows: self.balancer.shares().to_vec(),
            seconds_per_row: self.balancer.seconds_per_unit(),
            changes: self.changes.clone(),
        }
    }

    /// The workers change at `round` ([`crate::core::roster::Reshape`]): the rows are
    /// dealt evenly over the `staying` workers, nothing measured yet, and each of the
    /// `leaving` ones (dealt after them) gets none. The ranges of the change's round, in
    /// its worker order.
    pub fn reshape(
        &mut self,
        round: u64,
        change: &crate::core::roster::Reshape,
    ) -> Result<Vec<Range<u64>>, StradsModelError> {
        let total: u64 = self.balancer.shares().iter().sum();
        let staying = change.staying().len();
        let shares = super::split_evenly(total as usize, staying)
            .iter()
            .map(|r| r.len() as u64)
            .collect();
        let changes = std::mem::take(&mut self.changes);
        *self = Self::from_shares(shares)?;
        self.just_dealt.iter_mut().for_each(|d| *d = true);
        self.changes = changes;
        self.changes.push(WorkerChange {
            round,
            joined: change.joining().iter().map(|w| w.to_string()).collect(),
            left: [change.leaving(), &change.lost].concat(),
            died: change.lost.clone(),
            workers: change.staying().to_vec(),
            rows: self.balancer.shares().to_vec(),
        });
        let mut ranges = self.balancer.ranges();
        ranges.extend(change.leaving().iter().map(|_| total..total));
        tracing::info!(round, rows = ?self.balancer.shares(), "rows dealt over the changed workers");
        Ok(ranges)
    }

    /// The change's round `round` was given up (a worker died while it ran): it is not
    /// recorded; the next change deals the rows again.
    pub fn forget_change(&mut self, round: u64) {
        self.changes.retain(|c| c.round != round);
    }
}

/// A change of the workers: who joined and left at which round, and the rows each
/// worker (in order) took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerChange {
    /// The change's round.
    pub round: u64,
    /// Workers that joined.
    pub joined: Vec<String>,
    /// Workers that left.
    pub left: Vec<String>,
    /// Which of them died (`on_node_death = "leave"`): their rows were rebuilt by the
    /// others, not handed over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub died: Vec<String>,
    /// The workers after it, in worker order.
    pub workers: Vec<String>,
    /// Rows of each of them.
    pub rows: Vec<u64>,
}

/// The deal round of `ranges`: worker `i` gets `task(start, end)` of `ranges[i]`.
pub fn deal_step<T>(ranges: Vec<Range<u64>>, task: impl Fn(u64, u64) -> T) -> Step<T> {
    Step::Run(Plan::PerWorker(
        ranges.into_iter().map(|r| task(r.start, r.end)).collect(),
    ))
}

/// A deal round pulled `now` into the run: the units every worker released
/// (`released` reads them from a worker's answer; `None`: it answered something else).
pub fn pull_deal<P, U>(
    dealer: Option<&mut RowDealer>,
    partials: Vec<P>,
    now: f64,
    released: impl Fn(P) -> Option<Vec<U>>,
) -> Result<Vec<U>, StradsModelError> {
    let dealer =
        dealer.ok_or_else(|| StradsModelError::protocol("a deal round without a dealer"))?;
    dealer.pulled(now, true);
    let mut units = Vec::new();
    for (w, partial) in partials.into_iter().enumerate() {
        units.extend(released(partial).ok_or_else(|| {
            StradsModelError::protocol(format!("worker {w} answered a deal with something else"))
        })?);
    }
    tracing::debug!(units = units.len(), "units re-dealt");
    Ok(units)
}

/// The dealer's gate, or [`DealGate::Proceed`] without one (static dealing).
pub fn gate(
    dealer: Option<&mut RowDealer>,
    round: u64,
    deal_in_flight: bool,
    idle: bool,
) -> DealGate {
    dealer.map_or(DealGate::Proceed, |d| d.gate(round, deal_in_flight, idle))
}

/// Contiguous ranges of `shares` units, in order.
pub fn ranges_of(shares: &[u64]) -> Vec<Range<u64>> {
    let mut start = 0;
    shares
        .iter()
        .map(|&n| {
            start += n;
            start - n..start
        })
        .collect()
}

/// The order in which units (documents, users) of a static split are dealt under
/// `balance = "dynamic"`: by static owner (`owner[u]`), then id, so each worker's static
/// units are one contiguous range and a re-deal moves the ranges' boundaries. Returns
/// each unit's position.
pub fn deal_order(owner: &[u32]) -> Vec<u32> {
    let mut units: Vec<u32> = (0..owner.len() as u32).collect();
    units.sort_by_key(|&u| (owner[u as usize], u));
    let mut position = vec![0u32; units.len()];
    for (p, u) in units.into_iter().enumerate() {
        position[u as usize] = p as u32;
    }
    position
}

/// A worker's share in the deal order: every unit's position (`deal_order`) and the
/// positions it owns since the last deal (at first, its static units).
#[derive(Debug, Clone, PartialEq)]
pub struct DealtShare {
    order: Vec<u32>,
    range: Range<u64>,
}

impl DealtShare {
    /// Worker `worker`'s static share of the split `owner`.
    pub fn of(owner: &[u32], worker: usize) -> Self {
        let worker = worker as u32;
        let start = owner.iter().filter(|&&w| w < worker).count() as u64;
        let len = owner.iter().filter(|&&w| w == worker).count() as u64;
        DealtShare {
            order: deal_order(owner),
            range: start..start + len,
        }
    }

    /// Units per worker of the split `owner` over `workers` (the static shares).
    pub fn counts(owner: &[u32], workers: usize) -> Vec<u64> {
        let mut shares = vec![0u64; workers];
        for &w in owner {
            if let Some(s) = shares.get_mut(w as usize) {
                *s += 1;
            }
        }
        shares
    }

    /// A deal: the worker owns positions `start..end` from now on.
    pub fn deal(&mut self, start: u64, end: u64) -> Result<(), StradsModelError> {
        if start > end || end > self.order.len() as u64 {
            return Err(StradsModelError::protocol(format!(
                "deal of units {start}..{end} of {}",
                self.order.len()
            )));
        }
        self.range = start..end;
        Ok(())
    }

    /// Whether the worker owns unit `unit`.
    pub fn owns(&self, unit: u32) -> bool {
        self.order
            .get(unit as usize)
            .is_some_and(|&p| self.range.contains(&u64::from(p)))
    }
}

/// How a job with `balance = "dynamic"` dealt its units (`metrics.json`'s `balance`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RowDealing {
    /// Re-deals (each one round).
    pub deals: u64,
    /// Rows of each worker at the end, in worker order.
    pub rows: Vec<u64>,
    /// Each worker's smoothed seconds per row at the end (0 where never measured).
    pub seconds_per_row: Vec<f64>,
    /// The workers' joins and leaves, in order (none with a fixed membership).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<WorkerChange>,
}

#[cfg(test)]
#[path = "balance_tests.rs"]
mod tests;
