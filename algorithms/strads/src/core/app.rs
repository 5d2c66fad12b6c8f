//! The contract of a model-parallel app, sans-I/O.
//!
//! An app declares its wire types ([`StradsApp`]), the scheduler half ([`Schedule`]:
//! `schedule` and `pull`) and the worker half ([`Push`]: `push` on its data shard and
//! `commit` of aggregated changes). A round is
//!
//! ```text
//! schedule -> Dispatch{round, task} to every worker -> push -> partials back
//!          -> pull (aggregate) -> Commit{round, commit} to every worker
//!          -> the changes feed the next schedule
//! ```
//!
//! A task may be the same for every worker or different per worker ([`Plan::PerWorker`],
//! used by rotation schedules where worker `p` works on block `(p + s) mod P` in step `s`).
//! Rotation apps whose blocks should travel worker to worker rather than through the
//! scheduler implement [`RingApp`] and [`RingPush`]: the push gets the block it needs by
//! value and says where it goes next ([`BlockFate`]).
//!
//! Who runs these halves: the actor shells ([`crate::shells`]) on a cluster, and the serial
//! driver ([`crate::kit::serial`]) in one thread with the same message order.

use super::StradsModelError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// The wire types of one model-parallel app. Wire names must be unique in the cluster.
pub trait StradsApp: Send + 'static {
    /// Wire name of the app's dispatch message.
    const DISPATCH_NAME: &'static str;
    /// Wire name of the app's commit message.
    const COMMIT_NAME: &'static str;
    /// What `schedule` produces for a worker (e.g. the variables and their values).
    type Task: Serialize + DeserializeOwned + Send + Clone + 'static;
    /// What a worker's `push` returns (partial results on its data shard).
    type Partial: Serialize + DeserializeOwned + Send + 'static;
    /// What `pull` produces and every worker applies (e.g. committed deltas).
    type Commit: Serialize + DeserializeOwned + Send + Clone + 'static;
}

/// `strads_app!(App, "prefix", Task, Partial, Commit)`: the [`StradsApp`] impl of a marker
/// type, its messages named `prefix.dispatch` and `prefix.commit`.
macro_rules! strads_app {
    ($app:ty, $prefix:literal, $task:ty, $partial:ty, $commit:ty) => {
        impl $crate::core::app::StradsApp for $app {
            const DISPATCH_NAME: &'static str = concat!($prefix, ".dispatch");
            const COMMIT_NAME: &'static str = concat!($prefix, ".commit");
            type Task = $task;
            type Partial = $partial;
            type Commit = $commit;
        }
    };
}
pub(crate) use strads_app;

/// What a scheduler sends in one round.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan<T> {
    /// The same task to every worker (star topology, e.g. Lasso).
    All(T),
    /// One task per worker, in worker order (rotation schedules over a ring).
    PerWorker(Vec<T>),
}

impl<T: Clone> Plan<T> {
    /// One task per each of `workers` workers; `Err(tasks)`: a per-worker plan of `tasks`
    /// tasks for another worker count.
    pub fn into_tasks(self, workers: usize) -> Result<Vec<T>, usize> {
        match self {
            Plan::All(task) => Ok(vec![task; workers]),
            Plan::PerWorker(tasks) if tasks.len() == workers => Ok(tasks),
            Plan::PerWorker(tasks) => Err(tasks.len()),
        }
    }
}

/// The answer of [`Schedule::schedule`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step<T> {
    /// Dispatch this round now.
    Run(Plan<T>),
    /// Nothing can be scheduled until an in-flight round commits (e.g. a barrier round
    /// that must see every earlier commit). Must not be returned with nothing in flight.
    Wait,
    /// The job is over: finish the in-flight rounds and stop.
    Done,
}

/// Scheduler half of an app.
pub trait Schedule<A: StradsApp> {
    /// Called whenever a pipeline slot is free; `in_flight` rounds are dispatched but not
    /// yet committed.
    fn schedule(&mut self, round: u64, in_flight: usize) -> Step<A::Task>;
    /// Aggregates the partial results (one per worker, in worker order) of `round`. Rounds
    /// are pulled in increasing order; `elapsed` is the time since the run started.
    fn pull(
        &mut self,
        round: u64,
        partials: Vec<A::Partial>,
        elapsed: Duration,
    ) -> Result<A::Commit, StradsModelError>;

    /// The scheduler half's state for a round checkpoint ([`crate::core::checkpoint`]),
    /// taken between rounds with nothing in flight; `Ok(None)`: no checkpoint at this round
    /// boundary (the default, always: the app does not checkpoint through the kit; or the
    /// job's work is over).
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        Ok(None)
    }

    /// Continues from a [`Self::snapshot_state`] of the same job; refuses a state that does
    /// not fit it.
    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let _ = state;
        Err(no_checkpoints())
    }
    /// The rounds so far that count toward a round checkpoint's `every` (part of the
    /// state); `None` (the default): every committed round counts.
    fn checkpoint_progress(&self) -> Option<u64> {
        None
    }

    /// A round checkpoint of round boundary `round` was written (`resumed = false`), or
    /// this run resumed from it (`true`); the default ignores it.
    fn checkpointed(&mut self, round: u64, resumed: bool) {
        let _ = (round, resumed);
    }

    /// A digest of the data every node must share, compared at the ready barrier so that
    /// nodes that read different data fail there (`None`, the default: nothing compared).
    fn data_digest(&self) -> Option<u64> {
        None
    }

    /// The workers change ([`crate::core::roster::Reshape`]) at round boundary `round`,
    /// with nothing in flight: the round that deals the work over `change.dealt` (the
    /// leavers get none), or `Ok(None)` to keep the workers for now (e.g. the job is
    /// stopping). The default refuses: the app keeps a fixed membership.
    fn reshape(
        &mut self,
        round: u64,
        change: &crate::core::roster::Reshape,
    ) -> Result<Option<Step<A::Task>>, StradsModelError> {
        let _ = change;
        Err(StradsModelError::InvalidConfig(format!(
            "round {round}: this app keeps a fixed membership (no joins or leaves)"
        )))
    }

    /// `rounds` (oldest first, all that were in flight) are given up: a worker they went
    /// to died. The app forgets them as if never scheduled (their work is scheduled again
    /// after the change that deals the dead worker's share to the others). The default
    /// refuses: the app keeps a fixed membership.
    fn lost(&mut self, rounds: &[u64]) -> Result<(), StradsModelError> {
        Err(StradsModelError::InvalidConfig(format!(
            "rounds {rounds:?}: a worker died and this app keeps a fixed membership"
        )))
    }
}

/// Worker half of a star app: holds a data shard and the local model state.
pub trait Push<A: StradsApp>: Unpin + 'static {
    /// Computes this worker's partial result of `task` (dispatched in `round`).
    fn push(&mut self, round: u64, task: &A::Task) -> Result<A::Partial, StradsModelError>;
    /// Applies the aggregated result of `round`.
    fn commit(&mut self, round: u64, commit: &A::Commit) -> Result<(), StradsModelError>;

    /// [`Self::push`] with the index of the scheduler that sent the dispatch. Apps driven
    /// by several schedulers override this to keep per-scheduler bookkeeping (round
    /// numbers are only unique per scheduler); the default ignores the index.
    fn push_from(
        &mut self,
        scheduler: u32,
        round: u64,
        task: &A::Task,
    ) -> Result<A::Partial, StradsModelError> {
        let _ = scheduler;
        self.push(round, task)
    }

    /// [`Self::commit`] with the index of the scheduler that sent the commit.
    fn commit_from(
        &mut self,
        scheduler: u32,
        round: u64,
        commit: &A::Commit,
    ) -> Result<(), StradsModelError> {
        let _ = scheduler;
        self.commit(round, commit)
    }

    /// The worker half's state for a round checkpoint (see [`Schedule::snapshot_state`]);
    /// `Ok(None)` (the default): this app does not checkpoint through the kit.
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        Ok(None)
    }

    /// Continues from a [`Self::snapshot_state`] of the same worker of the same job.
    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let _ = state;
        Err(no_checkpoints())
    }

    /// The digest of the data this worker loaded (see [`Schedule::data_digest`]).
    fn data_digest(&self) -> Option<u64> {
        None
    }

    /// Whether this worker holds work (a worker of an elastic job that holds none after a
    /// change's round committed may leave); the default: always.
    fn holds_work(&self) -> bool {
        true
    }
}

/// Identifies a block within one ring (e.g. the block index of a rotation schedule).
pub type BlockId = u64;

/// A model-parallel app whose blocks rotate worker to worker.
pub trait RingApp: StradsApp {
    /// Wire name of the app's handoff message; unique in the cluster.
    const HANDOFF_NAME: &'static str;
    /// The unit that travels around the ring (e.g. a column block of a factor matrix).
    type Block: Serialize + DeserializeOwned + Send + 'static;
    /// The block a task works on (`None`: the task needs no block).
    fn block_needed(task: &Self::Task) -> Option<BlockId>;

    /// The ring a task re-forms (its workers' node names, in ring order): a change of
    /// the workers' round, handled by [`RingPush::rering`]. `None` (the default): a task
    /// of the current ring.
    fn new_ring(task: &Self::Task) -> Option<&[String]> {
        let _ = task;
        None
    }
}

/// What happens to the block a push held.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockFate<B> {
    /// The worker keeps it for a later task.
    Keep(B),
    /// Send it to another worker (to itself = keep, no message).
    PassTo {
        /// The receiving worker's index.
        worker: u32,
        /// The block.
        block: B,
    },
    /// No block stays behind: the task needed none, or the push moved it into the partial.
    Consumed,
}

/// The answer of [`RingPush::push`].
#[derive(Debug, Clone, PartialEq)]
pub struct RingOutput<P, B> {
    /// The partial result for the scheduler.
    pub partial: P,
    /// Where the block goes.
    pub block: BlockFate<B>,
}

/// Worker half of a ring app, like [`Push`] but the push receives the block its task
/// needs by value.
pub trait RingPush<A: RingApp>: Unpin + 'static {
    /// `block` is `Some` exactly when [`RingApp::block_needed`] names a block.
    fn push(
        &mut self,
        round: u64,
        task: &A::Task,
        block: Option<A::Block>,
    ) -> Result<RingOutput<A::Partial, A::Block>, StradsModelError>;
    /// Applies the aggregated result of `round`.
    fn commit(&mut self, round: u64, commit: &A::Commit) -> Result<(), StradsModelError>;

    /// A task that re-forms the ring ([`RingApp::new_ring`]), with nothing in flight:
    /// this worker is `index` of the new ring (`None`: it leaves). The partial and the
    /// blocks it holds from now on. The default refuses: the app keeps its ring.
    #[allow(clippy::type_complexity)]
    fn rering(
        &mut self,
        round: u64,
        task: &A::Task,
        index: Option<u32>,
    ) -> Result<(A::Partial, Vec<(BlockId, A::Block)>), StradsModelError> {
        let _ = (task, index);
        Err(StradsModelError::InvalidConfig(format!(
            "round {round}: this app keeps a fixed ring (no joins or leaves)"
        )))
    }

    /// Whether this worker holds work (see [`Push::holds_work`]); the default: always.
    fn holds_work(&self) -> bool {
        true
    }

    /// The worker half's state for a round checkpoint (see [`Schedule::snapshot_state`]),
    /// without the blocks it holds (the shell saves those); `Ok(None)` (the default): this
    /// app does not checkpoint through the kit.
    fn snapshot_state(&self) -> Result<Option<Vec<u8>>, StradsModelError> {
        Ok(None)
    }

    /// Continues from a [`Self::snapshot_state`] of the same worker of the same job.
    fn restore_state(&mut self, state: &[u8]) -> Result<(), StradsModelError> {
        let _ = state;
        Err(no_checkpoints())
    }
}

/// What the default `restore_state` answers: the app keeps no kit checkpoints.
fn no_checkpoints() -> StradsModelError {
    StradsModelError::InvalidConfig(
        "this app does not implement snapshot_state/restore_state (no round checkpoints)".into(),
    )
}

/// Encodes an app half's state for [`Schedule::snapshot_state`] (MessagePack).
pub fn encode_state<T: Serialize>(state: &T) -> Result<Option<Vec<u8>>, StradsModelError> {
    rmp_serde::to_vec(state)
        .map(Some)
        .map_err(|e| StradsModelError::CheckpointState(format!("cannot encode it: {e}")))
}

/// Decodes what [`encode_state`] wrote. A state that does not decode was most likely
/// written by another petrel version (an app's saved state changes with its algorithm),
/// so the error says that and how to go on.
pub fn decode_state<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StradsModelError> {
    rmp_serde::from_slice(bytes).map_err(|e| {
        StradsModelError::CheckpointState(format!(
            "it does not read as this version's ({e}): it was written by another petrel \
             version or another app; resume from a checkpoint this version wrote, or start \
             afresh without `resume` (or with an empty checkpoint_dir)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize)]
    struct OlderState {
        coefficients: Vec<f64>,
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct NewerState {
        coefficients: Vec<f64>,
        growth: u32,
    }

    #[test]
    fn a_state_of_another_layout_is_refused_saying_what_to_do() {
        let newer = NewerState {
            coefficients: vec![1.5, -2.0],
            growth: 3,
        };
        let bytes = encode_state(&newer).unwrap().unwrap();
        assert_eq!(decode_state::<NewerState>(&bytes).unwrap(), newer);
        let older = encode_state(&OlderState {
            coefficients: vec![1.0],
        })
        .unwrap()
        .unwrap();
        let err = decode_state::<NewerState>(&older).unwrap_err();
        assert!(matches!(err, StradsModelError::CheckpointState(_)), "{err}");
        let text = err.to_string();
        assert!(text.contains("another petrel version"), "{text}");
        assert!(text.contains("without `resume`"), "{text}");
        assert!(decode_state::<NewerState>(b"\xc1 not msgpack").is_err());
    }
}
