//! `balance = "dynamic"` for the scheduled linear models (Lasso, logistic regression):
//! the scheduler's `RowDealer` (the [`LoadBalancer`] fed with the workers' measured
//! compute, the deal round and its cost), the worker's [`WholeDesign`] (any row block
//! rebuilt from the committed coefficients) and the emulated straggler.

use super::config::{Balance, LassoSettings};
use super::metrics::RowDealing;
use crate::core::StradsModelError;
use crate::core::app::{Plan, Step};
use crate::core::balance::LoadBalancer;
use petrel_ml::data::SparseColumns;
use std::ops::Range;
use std::time::Instant;

/// What a worker of `balance = "dynamic"` keeps to take any rows: the whole design, its
/// labels (or response), the column means (implicit centring) and the coefficients,
/// summed from the commits, from which a new row block's state is computed.
pub struct WholeDesign {
    x: SparseColumns,
    y: Vec<f32>,
    means: Option<Vec<f64>>,
    coefficients: Vec<f64>,
}

/// What a new row block's per-row values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fitted {
    /// The residual `y - X b` (centred: `y - (X - 1 mean^T) b`): the Lasso's.
    Residual,
    /// The margins `X b`: the logistic model's (never centred).
    Margin,
}

/// A row block dealt to a worker: its design, labels and per-row values ([`Fitted`]).
pub(crate) struct RowBlock {
    pub x: SparseColumns,
    pub y: Vec<f32>,
    pub values: Vec<f64>,
}

impl WholeDesign {
    /// The design `x`, `y` (centred with `fit_intercept`) and, with implicit centring, the
    /// column means, at `b = 0`.
    pub fn new(x: SparseColumns, y: Vec<f32>, means: Option<Vec<f64>>) -> Self {
        WholeDesign {
            coefficients: vec![0.0; x.n_columns()],
            x,
            y,
            means,
        }
    }

    /// The column means, with implicit centring.
    pub(crate) fn means(&self) -> Option<&[f64]> {
        self.means.as_deref()
    }

    /// Follows a commit's coefficient changes.
    pub(crate) fn apply(&mut self, changes: &[(usize, f32)]) {
        for &(j, delta) in changes {
            if let Some(b) = self.coefficients.get_mut(j) {
                *b += f64::from(delta);
            }
        }
    }

    /// Rows `rows` with their `fitted` values at the current coefficients.
    pub(crate) fn rows(
        &self,
        rows: Range<usize>,
        fitted: Fitted,
    ) -> Result<RowBlock, StradsModelError> {
        if rows.start > rows.end || rows.end > self.y.len() {
            return Err(StradsModelError::protocol(format!(
                "deal of rows {rows:?} out of range ({} rows)",
                self.y.len()
            )));
        }
        let block = self.x.row_block(rows.clone());
        let y = self.y[rows].to_vec();
        let shift: f64 = self.means.as_ref().map_or(0.0, |m| {
            m.iter().zip(&self.coefficients).map(|(m, b)| m * b).sum()
        });
        let (mut values, sign): (Vec<f64>, f64) = match fitted {
            Fitted::Residual => (y.iter().map(|&v| f64::from(v) + shift).collect(), -1.0),
            Fitted::Margin => (vec![-shift; y.len()], 1.0),
        };
        for (j, &b) in self.coefficients.iter().enumerate().filter(|c| *c.1 != 0.0) {
            let (rows, vals) = block.column(j);
            for (&i, &x) in rows.iter().zip(vals) {
                values[i as usize] += sign * f64::from(x) * b;
            }
        }
        Ok(RowBlock {
            x: block,
            y,
            values,
        })
    }
}

/// A worker's side of the dealing: with `balance = "dynamic"` the whole design, to take
/// any rows on a deal, and its emulated slowness (the straggler of benches and tests).
pub struct WorkerDealing {
    whole: Option<WholeDesign>,
    /// Its compute takes this many times as long (1 = none).
    slowdown: f64,
}

impl Default for WorkerDealing {
    fn default() -> Self {
        WorkerDealing {
            whole: None,
            slowdown: 1.0,
        }
    }
}

impl WorkerDealing {
    /// Worker `index` of `job`: it holds `whole` (given with `balance = "dynamic"`), and
    /// is slowed `straggler_factor` times when it is the `straggler`.
    pub fn of(job: &LassoSettings, index: usize, whole: Option<WholeDesign>) -> Self {
        let straggler = job.straggler == Some(index as u32);
        WorkerDealing {
            whole,
            slowdown: if straggler {
                job.straggler_factor.max(1.0)
            } else {
                1.0
            },
        }
    }

    /// Sleeps `slowdown - 1` times the compute since `started`: an emulated slower
    /// machine (a factor of 1 sleeps nothing).
    pub(crate) fn slow_down(&self, started: Instant) {
        if self.slowdown > 1.0 {
            std::thread::sleep(started.elapsed().mul_f64(self.slowdown - 1.0));
        }
    }

    /// Follows a commit's coefficient changes (with the whole design).
    pub(crate) fn apply(&mut self, changes: &[(usize, f32)]) {
        if let Some(whole) = &mut self.whole {
            whole.apply(changes);
        }
    }

    /// The whole design, or a protocol error: a deal needs it.
    pub(crate) fn whole(&self) -> Result<&WholeDesign, StradsModelError> {
        self.whole
            .as_ref()
            .ok_or_else(|| StradsModelError::protocol("a deal to a worker of static dealing"))
    }
}

/// What the scheduler does next about the dealing ([`RowDealer::gate`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DealGate {
    /// A deal is in flight: schedule nothing else.
    Wait,
    /// Run a deal round: worker `i` takes rows `ranges[i]`.
    Deal(Vec<Range<u64>>),
    /// Schedule as with a static dealing.
    Proceed,
}

/// The scheduler's side of `balance = "dynamic"`: the row balancer, each worker's
/// compute (cumulative seconds) at its last answer, and the re-deals so far.
pub(crate) struct RowDealer {
    balancer: LoadBalancer,
    last_busy: Vec<f64>,
    deals: u64,
    /// The first answers after a deal also hold the last commit on the old rows: they
    /// only move `last_busy`.
    just_dealt: Vec<bool>,
    /// When the last round was pulled (seconds into the run): a deal's cost is the time
    /// from there to its own pull.
    last_pull_s: f64,
}

impl RowDealer {
    /// The dealer of `n_rows` rows over `workers`, starting from the static dealing, or
    /// none with `balance = "static"`.
    pub fn of(
        balance: Balance,
        n_rows: usize,
        workers: usize,
    ) -> Result<Option<Self>, StradsModelError> {
        if balance == Balance::Static {
            return Ok(None);
        }
        let shares = crate::core::split_evenly(n_rows, workers)
            .iter()
            .map(|r| r.len() as u64)
            .collect();
        Ok(Some(RowDealer {
            balancer: LoadBalancer::new(shares)?,
            last_busy: vec![0.0; workers],
            deals: 0,
            just_dealt: vec![false; workers],
            last_pull_s: 0.0,
        }))
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
        }
    }
}

/// The deal round of `ranges`: worker `i` gets `task(start, end)` of `ranges[i]`.
pub(crate) fn deal_step<T>(ranges: Vec<Range<u64>>, task: impl Fn(u64, u64) -> T) -> Step<T> {
    Step::Run(Plan::PerWorker(
        ranges.into_iter().map(|r| task(r.start, r.end)).collect(),
    ))
}

/// The dealer's gate, or [`DealGate::Proceed`] without one (static dealing).
pub(crate) fn gate(
    dealer: Option<&mut RowDealer>,
    round: u64,
    deal_in_flight: bool,
    idle: bool,
) -> DealGate {
    dealer.map_or(DealGate::Proceed, |d| d.gate(round, deal_in_flight, idle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn design() -> SparseColumns {
        // 4 rows x 2 columns.
        SparseColumns::from_dense(&ndarray::array![
            [1.0, 0.0],
            [2.0, 1.0],
            [0.0, 3.0],
            [1.0, 1.0]
        ])
    }

    #[test]
    fn a_dealt_block_holds_the_committed_models_residual_and_margins() {
        let mut whole = WholeDesign::new(design(), vec![1.0, -1.0, 1.0, 2.0], None);
        whole.apply(&[(0, 0.5), (1, -1.0), (0, 0.5)]);
        let block = whole.rows(1..3, Fitted::Margin).unwrap();
        assert_eq!(block.y, vec![-1.0, 1.0]);
        // b = (1, -1): rows 1 and 2 are (2, 1) and (0, 3).
        assert_eq!(block.values, vec![1.0, -3.0]);
        let block = whole.rows(1..3, Fitted::Residual).unwrap();
        assert_eq!(block.values, vec![-2.0, 4.0]);
        assert!(whole.rows(3..5, Fitted::Margin).is_err());
    }

    #[test]
    fn the_gate_deals_only_when_idle_and_measured_and_waits_for_a_deal() {
        assert!(RowDealer::of(Balance::Static, 100, 2).unwrap().is_none());
        assert_eq!(gate(None, 0, false, true), DealGate::Proceed);
        let mut dealer = RowDealer::of(Balance::Dynamic, 100, 2).unwrap().unwrap();
        assert_eq!(dealer.gate(0, false, true), DealGate::Proceed);
        // Worker 0 takes three times as long per row as worker 1, round after round.
        for round in 1..=20 {
            dealer.observe(0, 3.0 * round as f64);
            dealer.observe(1, round as f64);
        }
        assert_eq!(dealer.gate(21, true, true), DealGate::Wait);
        // A deal that pays drains the pipeline first.
        assert_eq!(dealer.gate(21, false, false), DealGate::Wait);
        let DealGate::Deal(ranges) = dealer.gate(21, false, true) else {
            panic!("no deal: {:?}", dealer.report());
        };
        assert_eq!(ranges.last().map(|r| r.end), Some(100));
        assert!(ranges[0].end < 50, "{ranges:?}");
        assert_eq!(dealer.report().deals, 1);
        assert_eq!(dealer.report().rows[0], ranges[0].end);
    }
}
