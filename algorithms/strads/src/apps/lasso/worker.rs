//! Lasso's worker half: a contiguous row block with its residual.

use super::wire::{LassoApp, LassoCommit, LassoPartial, LassoTask, WorkerBusy, check_vars};
use crate::core::StradsModelError;
use crate::core::app::{Push, decode_state, encode_state};
use crate::core::lasso::LassoWorkerState;
use crate::kit::dealing::{Fitted, WorkerDealing};
use petrel_messages::tensor::f64_bytes;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Worker half: a row block with its residual. It serves every scheduler of the job and
/// counts the commits it applied per scheduler (`applied[s]`), since each scheduler's
/// bookkeeping is indexed by its own commits. Its round checkpoints are the kit's
/// ([`crate::shells::checkpoint`]).
pub struct LassoWorker {
    state: LassoWorkerState,
    applied: Vec<u64>,
    busy: WorkerBusy,
    /// The digest of the whole data set it read, when it read one (compared with every
    /// node's before the first round).
    pub data_digest: Option<u64>,
    /// Its side of the dealing: the whole design with `balance = "dynamic"`, slowness.
    dealing: WorkerDealing,
}

/// What a round checkpoint holds of a worker: its residual, scheduler 0's commit count,
/// the running `||r||^2` (so the objective trace continues bit for bit) and, with implicit
/// centring, the running `[offset, sum(s), ||s||^2]`.
#[derive(Serialize, Deserialize)]
struct WorkerSnapshot {
    #[serde(with = "f64_bytes")]
    residual: Vec<f64>,
    applied: u64,
    sq_residual: f64,
    centring: Option<[f64; 3]>,
}

impl LassoWorker {
    /// A worker serving `schedulers` schedulers (indices `0..schedulers`).
    pub fn with_schedulers(state: LassoWorkerState, schedulers: usize) -> Self {
        LassoWorker {
            state,
            applied: vec![0; schedulers.max(1)],
            busy: WorkerBusy::default(),
            data_digest: None,
            dealing: WorkerDealing::default(),
        }
    }

    /// The worker with its side of the dealing (the whole design, the straggler).
    pub fn dealing(mut self, dealing: WorkerDealing) -> Self {
        self.dealing = dealing;
        self
    }

    /// The row block's state.
    pub fn state(&self) -> &LassoWorkerState {
        &self.state
    }

    /// Commits applied from `scheduler`.
    pub fn applied(&self, scheduler: u32) -> Result<u64, StradsModelError> {
        self.applied
            .get(scheduler as usize)
            .copied()
            .ok_or_else(|| {
                StradsModelError::protocol(format!(
                    "scheduler index {scheduler} out of range ({} schedulers)",
                    self.applied.len()
                ))
            })
    }
}

impl Push<LassoApp> for LassoWorker {
    fn push(&mut self, round: u64, task: &LassoTask) -> Result<LassoPartial, StradsModelError> {
        self.push_from(0, round, task)
    }

    fn commit(&mut self, round: u64, commit: &LassoCommit) -> Result<(), StradsModelError> {
        self.commit_from(0, round, commit)
    }

    fn push_from(
        &mut self,
        scheduler: u32,
        _round: u64,
        task: &LassoTask,
    ) -> Result<LassoPartial, StradsModelError> {
        let applied = self.applied(scheduler)?;
        match task {
            LassoTask::Update { vars, values } => {
                let started = Instant::now();
                let vars = check_vars(vars, values.len(), self.state.n_features())?;
                let z = self.state.push(&vars, values);
                self.dealing.slow_down(started);
                self.busy.push_s += started.elapsed().as_secs_f64();
                if self.busy.peak_rss_mb == 0.0 {
                    self.busy.peak_rss_mb = super::metrics::peak_rss_mb();
                }
                Ok(LassoPartial::Z {
                    z,
                    sq_residual: self.state.squared_residual(),
                    applied,
                    busy: self.busy,
                })
            }
            LassoTask::Evaluate => {
                let started = Instant::now();
                let all: Vec<usize> = (0..self.state.n_features()).collect();
                // An exact pass anyway: drop the running sum's drift.
                self.state.resync_squared_residual();
                let (yy, yr, rr) = self.state.dot_partials();
                let x_t_residual = self.state.correlation_with_residual(&all);
                self.busy.eval_s += started.elapsed().as_secs_f64();
                self.busy.peak_rss_mb = super::metrics::peak_rss_mb();
                Ok(LassoPartial::Eval {
                    x_t_residual,
                    yy,
                    yr,
                    rr,
                    applied,
                })
            }
            LassoTask::Deal { start, end, join } => {
                if let Some(join) = join {
                    self.dealing.join(&join.coefficients)?;
                    self.applied[0] = join.applied;
                }
                let applied = self.applied(scheduler)?;
                let whole = self.dealing.whole()?;
                let block = whole.rows(*start as usize..*end as usize, Fitted::Residual)?;
                let mut state = match whole.means() {
                    Some(means) => LassoWorkerState::centred(block.x, block.y, means.to_vec())?,
                    None => LassoWorkerState::new(block.x, block.y)?,
                };
                state.restore_residual(block.values, None)?;
                self.state = state;
                tracing::debug!(rows = ?(start..end), "lasso worker dealt new rows");
                Ok(LassoPartial::Dealt { applied })
            }
        }
    }

    fn commit_from(
        &mut self,
        scheduler: u32,
        _round: u64,
        commit: &LassoCommit,
    ) -> Result<(), StradsModelError> {
        let started = Instant::now();
        self.applied(scheduler)?;
        let vars = check_vars(&commit.vars, commit.deltas.len(), self.state.n_features())?;
        let changes: Vec<(usize, f32)> = vars.into_iter().zip(commit.deltas.clone()).collect();
        self.state.apply_deltas(&changes);
        self.dealing.apply(&changes);
        self.dealing.slow_down(started);
        self.applied[scheduler as usize] += 1;
        self.busy.commit_s += started.elapsed().as_secs_f64();
        Ok(())
    }

    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        encode_state(&WorkerSnapshot {
            residual: self.state.residual().to_vec(),
            applied: self.applied(0)?,
            sq_residual: self.state.squared_residual(),
            centring: self.state.centring_state(),
        })
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let s: WorkerSnapshot = decode_state(state)?;
        self.state.restore_residual(s.residual, s.centring)?;
        self.state.set_squared_residual(s.sq_residual);
        self.applied[0] = s.applied;
        Ok(())
    }

    fn data_digest(&self) -> Option<u64> {
        self.data_digest
    }

    fn holds_work(&self) -> bool {
        self.state.n_rows() > 0
    }
}
