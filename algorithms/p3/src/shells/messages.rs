//! P3's wire types. Tensors travel as raw little-endian `f32` bytes next to a small
//! msgpack header ([`f32_bytes`]).

use petrel_messages::remote_message;
use petrel_messages::tensor::f32_bytes;
use serde::{Deserialize, Serialize};

/// One worker's gradient for one slice of one iteration. Reply: the slice's new values.
#[derive(Serialize, Deserialize)]
pub struct PushGrad {
    /// The iteration the gradient belongs to.
    pub iter: u64,
    /// The pushing worker.
    pub worker: u32,
    /// The slice id in the job's plan.
    pub slice: u32,
    /// The gradient values of the slice.
    #[serde(with = "f32_bytes")]
    pub grad: Vec<f32>,
    /// The worker leaves after this iteration ([`crate::core::Announce`]).
    #[serde(default)]
    pub leaving: bool,
    /// Workers it saw join that are not members yet.
    #[serde(default)]
    pub joiners: Vec<u32>,
    /// Shards it saw join that serve no slice yet.
    #[serde(default)]
    pub shards_joining: Vec<u32>,
    /// Shards that said they leave.
    #[serde(default)]
    pub shards_leaving: Vec<u32>,
}

/// A slice's parameters after the update of iteration `iter`.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct SliceValues {
    /// The iteration whose gradients were applied.
    pub iter: u64,
    /// The slice id.
    pub slice: u32,
    /// The new values.
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
    /// The workers of iteration `iter + 1`, in worker order.
    #[serde(default)]
    pub workers: Vec<u32>,
    /// The shards of iteration `iter + 1`, ascending (they own the slices then).
    #[serde(default)]
    pub shards: Vec<u32>,
    /// The answering shard.
    #[serde(default)]
    pub shard: u32,
    /// The answering shard's node was asked to leave: the workers announce it.
    #[serde(default)]
    pub shard_leaving: bool,
}

remote_message!(PushGrad => SliceValues, "petrel.p3.push", payload = grad);

/// A worker of a job whose workers change asks for a slice's values at the iteration it
/// starts. Reply: the values it starts iteration `iter` from, once it is a member of that
/// iteration (or the job is over), with the iteration's workers.
#[derive(Serialize, Deserialize)]
pub struct PullSlice {
    /// The joining worker.
    pub worker: u32,
    /// The slice id.
    pub slice: u32,
}

remote_message!(PullSlice => SliceValues, "petrel.p3.pull");

/// A shard hands a slice over to its owner of the next iteration
/// ([`crate::core::SliceHandOff`]). Reply: the slice id.
#[derive(Clone, Serialize, Deserialize)]
pub struct HandOver {
    /// The slice id.
    pub slice: u32,
    /// The iteration it collects next.
    pub iter: u64,
    /// Its parameters.
    #[serde(with = "f32_bytes")]
    pub params: Vec<f32>,
    /// Its momentum.
    #[serde(with = "f32_bytes")]
    pub velocity: Vec<f32>,
    /// The workers of `iter`.
    pub workers: Vec<u32>,
    /// The workers that left.
    pub workers_left: Vec<u32>,
    /// The shards of `iter`.
    pub shards: Vec<u32>,
    /// The shards that left.
    pub shards_left: Vec<u32>,
}

remote_message!(HandOver => u32, "petrel.p3.hand-over", payload = params);

/// Shard 0 tells the other shards the job's last iteration is applied, so one that holds
/// no slice stops waiting for any. Reply: the job's iterations.
#[derive(Serialize, Deserialize)]
pub struct ShardsDone {
    /// The job's iterations.
    pub iterations: u64,
}

remote_message!(ShardsDone => u64, "petrel.p3.shards-done");

/// A worker has every reply of iteration `iter` from a shard that serves none of the next
/// ([`crate::core::shards_done_with`]): a leaving shard's node waits for these
/// ([`crate::core::Departure`]). Reply: the iteration.
#[derive(Serialize, Deserialize)]
pub struct RepliesIn {
    /// The worker.
    pub worker: u32,
    /// The iteration whose replies it has.
    pub iter: u64,
}

remote_message!(RepliesIn => u64, "petrel.p3.replies-in");

/// Initial values of a slice (sent once by worker 0 before training). Reply: the slice id.
#[derive(Serialize, Deserialize)]
pub struct InitSlice {
    /// The slice id.
    pub slice: u32,
    /// Its initial values.
    #[serde(with = "f32_bytes")]
    pub values: Vec<f32>,
}

remote_message!(InitSlice => u32, "petrel.p3.init", payload = values);

/// One checkpoint part as its writer reports it: its name, length and checksum.
pub use petrel_actors::checkpoint::PartEntry as SavedFile;

/// Worker 0 asks a shard to write its checkpoint file of round `round` (every slice at
/// iteration `round`) into `dir`. Reply: the file.
#[derive(Serialize, Deserialize)]
pub struct SaveShard {
    /// The checkpoint's round (the first iteration after it).
    pub round: u64,
    /// The checkpoint directory.
    pub dir: String,
}

remote_message!(SaveShard => SavedFile, "petrel.p3.save-shard");

/// A worker tells worker 0 it wrote its checkpoint file of round `round`. Reply: the round.
#[derive(Serialize, Deserialize)]
pub struct WorkerSaved {
    /// The checkpoint's round.
    pub round: u64,
    /// The worker.
    pub worker: u32,
    /// Its file.
    pub file: SavedFile,
}

remote_message!(WorkerSaved => u64, "petrel.p3.worker-saved");
