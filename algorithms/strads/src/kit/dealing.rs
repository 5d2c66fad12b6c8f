//! The workers' side of `balance = "dynamic"`, shared by the apps: the emulated
//! [`Straggler`] (every app), and for the scheduled linear models (Lasso, logistic
//! regression) the [`WholeDesign`] from which any row block is rebuilt at the committed
//! coefficients. The scheduler's side is [`crate::core::balance::RowDealer`].

use crate::apps::lasso::Balance;
use crate::apps::lasso::wire::LassoJoin;
use crate::core::StradsModelError;
use crate::core::app::{Plan, Step};
use crate::core::balance::RowDealer;
use crate::core::roster::Reshape;
use petrel_ml::data::SparseColumns;
use petrel_ml::job::SettingChecks;
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
        add_changes(&mut self.coefficients, changes);
    }

    /// Takes the model of a running job it joins: `coefficients`.
    pub(crate) fn set_coefficients(
        &mut self,
        coefficients: &[f64],
    ) -> Result<(), StradsModelError> {
        if coefficients.len() != self.coefficients.len() {
            return Err(StradsModelError::DimensionMismatch(format!(
                "{} coefficients for {} columns",
                coefficients.len(),
                self.coefficients.len()
            )));
        }
        self.coefficients = coefficients.to_vec();
        Ok(())
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

/// Adds a commit's coefficient changes to `coefficients` (in f64, as every worker's whole
/// design and the scheduler's copy for joiners do, so they agree bit for bit).
pub(crate) fn add_changes(coefficients: &mut [f64], changes: &[(usize, f32)]) {
    for &(j, delta) in changes {
        if let Some(b) = coefficients.get_mut(j) {
            *b += f64::from(delta);
        }
    }
}

/// The deal round of a change of the workers: the rows dealt evenly over the staying
/// workers, none to the leavers, and to each joiner the model so far (`coefficients` as
/// [`add_changes`] sums them, after `applied` commits); `task(rows, join)` is one worker's
/// task. Refused without a `dealer` (`balance = "static"`).
pub(crate) fn change_deal<T>(
    dealer: Option<&mut RowDealer>,
    round: u64,
    change: &Reshape,
    (coefficients, applied): (&[f64], u64),
    task: impl Fn(Range<u64>, Option<LassoJoin>) -> T,
) -> Result<Step<T>, StradsModelError> {
    let dealer = dealer.ok_or_else(|| {
        StradsModelError::InvalidConfig("joins and leaves need balance = \"dynamic\"".into())
    })?;
    let ranges = dealer.reshape(round, change)?;
    let join = LassoJoin {
        coefficients: coefficients.to_vec(),
        applied,
    };
    let tasks = ranges
        .into_iter()
        .zip(&change.joined)
        .map(|(rows, &joined)| task(rows, joined.then(|| join.clone())))
        .collect();
    Ok(Step::Run(Plan::PerWorker(tasks)))
}

/// Why a setting is refused with `balance = "dynamic"`.
pub(crate) const STATIC_ONLY: &str =
    "applies to balance = \"static\" only (dynamic dealing moves work between the workers)";

/// The dealing settings every app shares: a `straggler_factor` of at least 1 and, with
/// `balance = "dynamic"`, no round checkpoints (a worker's checkpoint holds its static
/// share).
pub(crate) fn check_dealing(
    c: &mut SettingChecks,
    balance: Balance,
    straggler_factor: f64,
    checkpoint_dir: &Option<std::path::PathBuf>,
    resume: bool,
) {
    c.finite("straggler_factor", straggler_factor);
    c.at_least("straggler_factor", straggler_factor, 1.0);
    if balance == Balance::Static {
        return;
    }
    let dir = checkpoint_dir.as_deref().map(|d| d.display().to_string());
    c.require(
        checkpoint_dir.is_none(),
        "checkpoint_dir",
        dir.unwrap_or_default(),
        STATIC_ONLY,
    );
    c.require(!resume, "resume", resume, STATIC_ONLY);
}

/// A worker's emulated slowness (the straggler of benches and tests): its compute takes
/// `slowdown` times as long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Straggler {
    slowdown: f64,
}

impl Default for Straggler {
    fn default() -> Self {
        Straggler { slowdown: 1.0 }
    }
}

impl Straggler {
    /// Worker `index`, slowed `factor` times when it is `straggler`.
    pub fn of(straggler: Option<u32>, factor: f64, index: usize) -> Self {
        Straggler {
            slowdown: if straggler == Some(index as u32) {
                factor.max(1.0)
            } else {
                1.0
            },
        }
    }

    /// Sleeps `slowdown - 1` times the compute since `started`: an emulated slower
    /// machine (a factor of 1 sleeps nothing).
    pub fn slow_down(&self, started: Instant) {
        if self.slowdown > 1.0 {
            std::thread::sleep(started.elapsed().mul_f64(self.slowdown - 1.0));
        }
    }
}

/// A linear model worker's side of the dealing: with `balance = "dynamic"` the whole
/// design, to take any rows on a deal, and its emulated slowness.
#[derive(Default)]
pub struct WorkerDealing {
    whole: Option<WholeDesign>,
    straggler: Straggler,
}

impl WorkerDealing {
    /// A worker that holds `whole` (given with `balance = "dynamic"`) and is slowed as
    /// `straggler` says.
    pub fn of(straggler: Straggler, whole: Option<WholeDesign>) -> Self {
        WorkerDealing { whole, straggler }
    }

    /// [`Straggler::slow_down`].
    pub(crate) fn slow_down(&self, started: Instant) {
        self.straggler.slow_down(started);
    }

    /// Follows a commit's coefficient changes (with the whole design).
    pub(crate) fn apply(&mut self, changes: &[(usize, f32)]) {
        if let Some(whole) = &mut self.whole {
            whole.apply(changes);
        }
    }

    /// Joins a running job at `coefficients` (with the whole design).
    pub(crate) fn join(&mut self, coefficients: &[f64]) -> Result<(), StradsModelError> {
        match &mut self.whole {
            Some(whole) => whole.set_coefficients(coefficients),
            None => Err(StradsModelError::protocol(
                "a join of a worker of static dealing",
            )),
        }
    }

    /// The whole design, or a protocol error: a deal needs it.
    pub(crate) fn whole(&self) -> Result<&WholeDesign, StradsModelError> {
        self.whole
            .as_ref()
            .ok_or_else(|| StradsModelError::protocol("a deal to a worker of static dealing"))
    }
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
    fn a_joiner_at_the_schedulers_sums_rebuilds_rows_as_a_worker_that_saw_every_commit() {
        let commits = [vec![(0, 0.1f32), (1, -0.3)], vec![(0, 0.7), (1, 0.2)]];
        let mut old = WholeDesign::new(design(), vec![1.0, -1.0, 1.0, 2.0], None);
        let mut sums = vec![0.0; 2];
        for c in &commits {
            old.apply(c);
            add_changes(&mut sums, c);
        }
        let mut joiner = WholeDesign::new(design(), vec![1.0, -1.0, 1.0, 2.0], None);
        joiner.set_coefficients(&sums).unwrap();
        let (a, b) = (
            old.rows(0..4, Fitted::Residual).unwrap(),
            joiner.rows(0..4, Fitted::Residual).unwrap(),
        );
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.values), bits(&b.values));
        assert!(joiner.set_coefficients(&[0.0]).is_err());
    }
}
