//! The server shard's engine, sans I/O: [`SliceShardCore`] owns the parameter slices a
//! [`SlicePlan`] assigns to one shard, collects every worker's gradient slice of an
//! iteration, averages them (summed in worker order, so the result does not depend on
//! arrival order), applies [`FlatSgdMomentum`] and yields the new slice. [`reference_step`] is
//! the same update on whole tensors in one process.
//!
//! Because every shard applies the same element-wise update to the same averaged
//! gradient, the three modes compute identical parameters; only the timing differs.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use petrel_ml::dnn::FlatSgdMomentum;
use serde::{Deserialize, Serialize};

use crate::core::error::P3CoreError;
use crate::core::roster::{Announce, WorkerRoster};
use crate::core::slicing::{SlicePlan, owner};

/// One slice's state in a shard's checkpoint file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SliceState {
    /// The slice id in the plan.
    pub id: usize,
    /// Its parameters.
    pub params: Vec<f32>,
    /// Its momentum.
    pub velocity: Vec<f32>,
}

#[derive(Debug)]
struct ShardSlice {
    params: Vec<f32>,
    velocity: Vec<f32>,
    initialised: bool,
    /// Iteration whose gradients are being collected.
    iter: u64,
    /// By worker id.
    grads: Vec<Option<Vec<f32>>>,
    received: usize,
    /// The workers of `iter`.
    roster: WorkerRoster,
    /// Announced with this iteration's pushes: joining and leaving after it.
    joiners: BTreeSet<usize>,
    leaving: BTreeSet<usize>,
    /// Joiners waiting for the values they start from.
    pulls: BTreeSet<usize>,
    /// The shards serving the slices at `iter` (see [`owner`]), and those announced
    /// joining and leaving after it: they move like the workers' roster.
    shards: WorkerRoster,
    shards_joining: BTreeSet<usize>,
    shards_leaving: BTreeSet<usize>,
}

/// A slice leaving its shard at an iteration boundary: everything its new owner needs to
/// go on as if it had always held it.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceHandOff {
    /// The new owner.
    pub to: usize,
    /// The slice id.
    pub slice: usize,
    /// The iteration it collects next.
    pub iter: u64,
    /// Its parameters and momentum.
    pub params: Vec<f32>,
    /// Its momentum.
    pub velocity: Vec<f32>,
    /// The workers of `iter` and those that left.
    pub workers: WorkerRoster,
    /// The shards of `iter` and those that left.
    pub shards: WorkerRoster,
}

/// A slice's values after an update, and the workers of the iteration they start.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The iteration whose gradients were applied (the values start `iter + 1`).
    pub iter: u64,
    /// The slice's new values.
    pub values: Vec<f32>,
    /// The workers whose gradients of `iter` it averaged: those its replies answer.
    pub answered: Vec<usize>,
    /// The workers of iteration `iter + 1`, in worker order.
    pub members: Vec<usize>,
    /// Joiners whose pull of this slice these values answer.
    pub pulls: Vec<usize>,
    /// The shards of iteration `iter + 1`, ascending.
    pub shards: Vec<usize>,
    /// The slice moved to another shard for `iter + 1`: the shell hands it over before
    /// it answers the workers, so their next pushes find it there.
    pub handoff: Option<SliceHandOff>,
}

/// The parameter slices of one server shard.
#[derive(Debug)]
pub struct SliceShardCore {
    shard: usize,
    /// Worker ids run `0..capacity` (every worker node the job may have).
    capacity: usize,
    /// Iterations of the job: a slice past them answers every pull.
    end: u64,
    opt: FlatSgdMomentum,
    slices: HashMap<usize, ShardSlice>,
    /// Slices in the plan (ids below it may be handed to this shard).
    n_plan_slices: usize,
    /// Pulls of slices this shard is about to receive, by slice.
    held: BTreeMap<usize, BTreeSet<usize>>,
    /// Slices handed away: a pull of one is a mistake, not a wait.
    gone: BTreeSet<usize>,
}

impl SliceShardCore {
    /// Zero parameters for every slice of `plan` owned by `shard`, averaged over workers
    /// `0..n_workers`; call [`SliceShardCore::init_slice`] for each before the first
    /// gradient.
    pub fn new(
        plan: &SlicePlan,
        shard: usize,
        n_workers: usize,
        opt: FlatSgdMomentum,
    ) -> Result<Self, P3CoreError> {
        if shard >= plan.n_shards() {
            return Err(P3CoreError::ShardOutOfRange {
                shard,
                n_shards: plan.n_shards(),
            });
        }
        Self::elastic(
            plan,
            shard,
            n_workers,
            &(0..n_workers).collect::<Vec<_>>(),
            opt,
        )
    }

    /// Like [`SliceShardCore::new`] for a job whose workers may change: ids `0..capacity`,
    /// of which `members` start (the others join later, see [`crate::core::roster`]). The
    /// shards `0..plan.n_shards()` start; a `shard` past them is a standby one that starts
    /// empty and receives its slices when it joins.
    pub fn elastic(
        plan: &SlicePlan,
        shard: usize,
        capacity: usize,
        members: &[usize],
        opt: FlatSgdMomentum,
    ) -> Result<Self, P3CoreError> {
        if members.is_empty() {
            return Err(P3CoreError::NoWorkers);
        }
        if let Some(&worker) = members.iter().find(|&&w| w >= capacity) {
            return Err(P3CoreError::WorkerOutOfRange {
                worker,
                n_workers: capacity,
            });
        }
        let roster = WorkerRoster::new(members.iter().copied());
        let shards = WorkerRoster::new(0..plan.n_shards());
        let slices = plan
            .shard_slices(shard)
            .map(|s| {
                let len = s.len as usize;
                (
                    s.id,
                    ShardSlice {
                        params: vec![0.0; len],
                        velocity: vec![0.0; len],
                        initialised: false,
                        iter: 0,
                        grads: vec![None; capacity],
                        received: 0,
                        roster: roster.clone(),
                        joiners: BTreeSet::new(),
                        leaving: BTreeSet::new(),
                        pulls: BTreeSet::new(),
                        shards: shards.clone(),
                        shards_joining: BTreeSet::new(),
                        shards_leaving: BTreeSet::new(),
                    },
                )
            })
            .collect();
        Ok(SliceShardCore {
            shard,
            capacity,
            end: u64::MAX,
            opt,
            slices,
            n_plan_slices: plan.slices().len(),
            held: BTreeMap::new(),
            gone: BTreeSet::new(),
        })
    }

    /// The job ends after `iterations`: a joiner pulling a slice past them is answered at
    /// once (it has nothing left to do).
    pub fn ending_at(mut self, iterations: u64) -> Self {
        self.end = iterations;
        self
    }

    /// The job's iterations (`u64::MAX` unless [`SliceShardCore::ending_at`] set them).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// This shard's index.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// Number of slices this shard owns.
    pub fn n_slices(&self) -> usize {
        self.slices.len()
    }

    /// Whether this shard owns slices and every one is past the job's last iteration.
    pub fn finished(&self) -> bool {
        !self.slices.is_empty() && self.slices.values().all(|s| s.iter >= self.end)
    }

    fn slice_mut(&mut self, slice: usize) -> Result<&mut ShardSlice, P3CoreError> {
        let shard = self.shard;
        self.slices
            .get_mut(&slice)
            .ok_or(P3CoreError::NotOwned { shard, slice })
    }

    /// Sets a slice's initial values (velocity zero). May be repeated before training.
    pub fn init_slice(&mut self, slice: usize, params: Vec<f32>) -> Result<(), P3CoreError> {
        let s = self.slice_mut(slice)?;
        if params.len() != s.params.len() {
            return Err(P3CoreError::Length {
                slice,
                expected: s.params.len(),
                got: params.len(),
            });
        }
        s.params = params;
        s.velocity.iter_mut().for_each(|v| *v = 0.0);
        s.initialised = true;
        Ok(())
    }

    /// Current values of an owned slice.
    pub fn params(&self, slice: usize) -> Option<&[f32]> {
        self.slices.get(&slice).map(|s| s.params.as_slice())
    }

    /// Iteration a slice is collecting gradients for.
    pub fn iteration(&self, slice: usize) -> Option<u64> {
        self.slices.get(&slice).map(|s| s.iter)
    }

    /// Every owned slice's parameters and momentum (by id), for a checkpoint of round
    /// `round`: fails unless every slice is initialised and collecting the gradients of
    /// iteration `round` (all of `round - 1` applied, none of `round`). Gradients already
    /// received for `round` are not part of it: a resumed run recomputes them.
    pub fn snapshot(&self, round: u64) -> Result<Vec<SliceState>, P3CoreError> {
        let mut ids: Vec<usize> = self.slices.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter()
            .map(|id| {
                let s = &self.slices[&id];
                if !s.initialised {
                    return Err(P3CoreError::NotInitialised { slice: id });
                }
                if s.iter != round {
                    return Err(P3CoreError::WrongIteration {
                        slice: id,
                        expected: round,
                        got: s.iter,
                    });
                }
                Ok(SliceState {
                    id,
                    params: s.params.clone(),
                    velocity: s.velocity.clone(),
                })
            })
            .collect()
    }

    /// Restores every owned slice from a checkpoint of round `round` (see
    /// [`SliceShardCore::snapshot`]); the shard then collects the gradients of `round`.
    /// Fails unless `slices` holds exactly this shard's slices with their lengths.
    pub fn restore(&mut self, round: u64, slices: Vec<SliceState>) -> Result<(), P3CoreError> {
        if slices.len() != self.slices.len() {
            return Err(P3CoreError::SliceCount {
                expected: self.slices.len(),
                got: slices.len(),
            });
        }
        for state in &slices {
            let s = self.slice_mut(state.id)?;
            if state.params.len() != s.params.len() || state.velocity.len() != s.params.len() {
                return Err(P3CoreError::Length {
                    slice: state.id,
                    expected: s.params.len(),
                    got: state.params.len().min(state.velocity.len()),
                });
            }
        }
        for state in slices {
            let s = self.slice_mut(state.id)?;
            s.params = state.params;
            s.velocity = state.velocity;
            s.initialised = true;
            s.iter = round;
            s.grads.iter_mut().for_each(|g| *g = None);
            s.received = 0;
        }
        Ok(())
    }

    /// Adds worker `worker`'s gradient for `slice` at iteration `iter`. When it was the last
    /// one missing, averages the gradients (summed in worker order), applies the optimiser,
    /// moves the slice to the next iteration and returns the new parameters.
    pub fn contribute(
        &mut self,
        iter: u64,
        worker: usize,
        slice: usize,
        grad: Vec<f32>,
    ) -> Result<Option<Vec<f32>>, P3CoreError> {
        let applied = self.push(iter, worker, slice, grad, &Announce::default())?;
        Ok(applied.map(|a| a.values))
    }

    /// [`SliceShardCore::contribute`] with what the worker announces for the next
    /// iteration; the update, when this push completed the slice's iteration, comes with
    /// the next iteration's workers and the joiners' pulls it answers.
    pub fn push(
        &mut self,
        iter: u64,
        worker: usize,
        slice: usize,
        grad: Vec<f32>,
        announce: &Announce,
    ) -> Result<Option<Applied>, P3CoreError> {
        let (capacity, end, opt) = (self.capacity, self.end, self.opt);
        if worker >= capacity {
            return Err(P3CoreError::WorkerOutOfRange {
                worker,
                n_workers: capacity,
            });
        }
        let s = self.slice_mut(slice)?;
        if !s.initialised {
            return Err(P3CoreError::NotInitialised { slice });
        }
        if iter != s.iter {
            return Err(P3CoreError::WrongIteration {
                slice,
                expected: s.iter,
                got: iter,
            });
        }
        if grad.len() != s.params.len() {
            return Err(P3CoreError::Length {
                slice,
                expected: s.params.len(),
                got: grad.len(),
            });
        }
        if !s.roster.contains(worker) {
            return Err(P3CoreError::NotAMember {
                slice,
                iter,
                worker,
            });
        }
        if s.grads[worker].is_some() {
            return Err(P3CoreError::Duplicate {
                slice,
                iter,
                worker,
            });
        }
        s.grads[worker] = Some(grad);
        s.received += 1;
        s.joiners
            .extend(announce.joiners.iter().filter(|&&w| w < capacity));
        s.shards_joining.extend(&announce.shards_joining);
        s.shards_leaving.extend(&announce.shards_leaving);
        if announce.leaving {
            s.leaving.insert(worker);
        }
        if s.received < s.roster.len() {
            return Ok(None);
        }
        let mut sum = vec![0.0f32; s.params.len()];
        for g in s.grads.iter_mut() {
            if let Some(g) = g.take() {
                sum.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
            }
        }
        let n = s.received as f32;
        sum.iter_mut().for_each(|x| *x /= n);
        opt.step(&mut s.velocity, &mut s.params, &sum)
            .map_err(P3CoreError::Optimizer)?;
        s.received = 0;
        let answered = s.roster.members().iter().copied().collect();
        s.roster = s.roster.next(&s.joiners, &s.leaving);
        s.joiners.clear();
        s.leaving.clear();
        s.iter += 1;
        let done = s.iter >= end;
        // No shard change after the last iteration: nothing would be pushed to it.
        let next = s.shards.next(&s.shards_joining, &s.shards_leaving);
        if !done && !next.is_empty() {
            s.shards = next;
        }
        s.shards_joining.clear();
        s.shards_leaving.clear();
        let roster = &s.roster;
        let pulls: Vec<usize> = s
            .pulls
            .iter()
            .copied()
            .filter(|&w| done || roster.contains(w))
            .collect();
        pulls.iter().for_each(|w| {
            s.pulls.remove(w);
        });
        let shards: Vec<usize> = s.shards.members().iter().copied().collect();
        let mut applied = Applied {
            iter,
            values: s.params.clone(),
            answered,
            members: s.roster.members().iter().copied().collect(),
            pulls,
            shards,
            handoff: None,
        };
        let to = owner(slice, &applied.shards);
        if to != self.shard
            && let Some(s) = self.slices.remove(&slice)
        {
            self.gone.insert(slice);
            applied.handoff = Some(SliceHandOff {
                to,
                slice,
                iter: s.iter,
                params: s.params,
                velocity: s.velocity,
                workers: s.roster,
                shards: s.shards,
            });
        }
        Ok(Some(applied))
    }

    /// Takes over a slice another shard handed over; answers the pulls of it held here
    /// (by worker) that it can.
    pub fn receive(&mut self, h: SliceHandOff) -> Result<Vec<(usize, Pulled)>, P3CoreError> {
        let (id, len) = (h.slice, h.params.len());
        if id >= self.n_plan_slices || h.to != self.shard {
            return Err(P3CoreError::NotOwned {
                shard: self.shard,
                slice: id,
            });
        }
        if h.velocity.len() != len {
            return Err(P3CoreError::Length {
                slice: id,
                expected: len,
                got: h.velocity.len(),
            });
        }
        let slice = ShardSlice {
            params: h.params,
            velocity: h.velocity,
            initialised: true,
            iter: h.iter,
            grads: vec![None; self.capacity],
            received: 0,
            roster: h.workers,
            joiners: BTreeSet::new(),
            leaving: BTreeSet::new(),
            pulls: BTreeSet::new(),
            shards: h.shards,
            shards_joining: BTreeSet::new(),
            shards_leaving: BTreeSet::new(),
        };
        self.slices.insert(id, slice);
        self.gone.remove(&id);
        let mut answered = Vec::new();
        for w in self.held.remove(&id).unwrap_or_default() {
            // A worker that left meanwhile gets no values (it asks no more).
            if let Ok(Some(p)) = self.pull(w, id) {
                answered.push((w, p));
            }
        }
        Ok(answered)
    }

    /// A worker asks for the values it starts from: answered at once when it is a member
    /// of the iteration `slice` collects and has not pushed to it (a starting worker at
    /// iteration 0, a joiner counted in) or when the job is over, else held until an
    /// update makes it a member ([`Applied::pulls`]).
    pub fn pull(&mut self, worker: usize, slice: usize) -> Result<Option<Pulled>, P3CoreError> {
        let (capacity, end) = (self.capacity, self.end);
        if worker >= capacity {
            return Err(P3CoreError::WorkerOutOfRange {
                worker,
                n_workers: capacity,
            });
        }
        if !self.slices.contains_key(&slice)
            && !self.gone.contains(&slice)
            && slice < self.n_plan_slices
        {
            // Moving here at the boundary the worker starts from: held until it arrives.
            self.held.entry(slice).or_default().insert(worker);
            return Ok(None);
        }
        let s = self.slice_mut(slice)?;
        if s.roster.has_left(worker) {
            return Err(P3CoreError::NotAMember {
                slice,
                iter: s.iter,
                worker,
            });
        }
        let member = s.roster.contains(worker) && s.grads[worker].is_none();
        if !((s.iter >= end || member) && s.initialised) {
            s.pulls.insert(worker);
            return Ok(None);
        }
        Ok(Some(Pulled {
            start: s.iter,
            values: s.params.clone(),
            members: s.roster.members().iter().copied().collect(),
            shards: s.shards.members().iter().copied().collect(),
        }))
    }
}

/// The values a worker starts iteration `start` from, and that iteration's workers.
#[derive(Debug, Clone, PartialEq)]
pub struct Pulled {
    /// The worker's first iteration (the job's end when it came too late).
    pub start: u64,
    /// The slice's values.
    pub values: Vec<f32>,
    /// The workers of iteration `start`, in worker order.
    pub members: Vec<usize>,
    /// The shards of iteration `start`, ascending.
    pub shards: Vec<usize>,
}

impl From<&Applied> for Pulled {
    /// A held pull an update answers: the values start the next iteration.
    fn from(a: &Applied) -> Self {
        Pulled {
            start: a.iter + 1,
            values: a.values.clone(),
            members: a.members.clone(),
            shards: a.shards.clone(),
        }
    }
}

/// The same update a [`SliceShardCore`] applies, on whole tensors in one process: the reference
/// a distributed run must reproduce bit for bit.
pub fn reference_step(
    opt: &FlatSgdMomentum,
    params: &mut [Vec<f32>],
    velocity: &mut [Vec<f32>],
    worker_grads: &[Vec<Vec<f32>>],
) -> Result<(), P3CoreError> {
    let n = worker_grads.len();
    if n == 0 {
        return Err(P3CoreError::NoWorkers);
    }
    for (layer, (p, v)) in params.iter_mut().zip(velocity.iter_mut()).enumerate() {
        let mut sum = vec![0.0f32; p.len()];
        for w in worker_grads {
            let g = w.get(layer).filter(|g| g.len() == p.len());
            let g = g.ok_or(P3CoreError::LayerLength {
                layer,
                expected: p.len(),
                got: w.get(layer).map_or(0, Vec::len),
            })?;
            sum.iter_mut().zip(g).for_each(|(a, b)| *a += b);
        }
        sum.iter_mut().for_each(|x| *x /= n as f32);
        opt.step(v, p, &sum).map_err(P3CoreError::Optimizer)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
