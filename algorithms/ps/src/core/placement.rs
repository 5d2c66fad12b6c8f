//! Shards that join and leave a running job: where rows live ([`Placement`]), the
//! stop-the-world change of it one role coordinates ([`Reshard`]) and a worker's side of
//! it ([`WorkerPause`]).
//!
//! Rows are hashed into a fixed number of partitions per table (`P` = 256 per starting
//! shard); a placement maps partitions to shards and moves only whole partitions, as few
//! as the new shard set needs. A change happens at a clock boundary `cut`: every worker
//! says at once the next boundary it reaches and pauses there, the workers behind run to
//! the largest (`cut`) and pause there, the shards (min clock `cut`, every update of clocks
//! `< cut` applied, none later) hand the moved rows over, and the workers resume with the
//! new placement, dropping their cached copies, reads in flight and pushes of moved rows
//! (the next read asks, and under ESSP subscribes at, the new owner).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::core::error::PsCoreError;
use crate::core::types::{Clock, RowId, TableId, row_hash};

/// Partitions per starting shard: a shard that joins takes about `P / n` of them.
pub const PARTITIONS_PER_SHARD: u32 = 256;

/// Which shard owns each partition of the row hash, at one placement epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    epoch: u64,
    owners: Vec<u32>,
}

impl Placement {
    /// Epoch 0 over `shards` (distinct): partition `p` on `shards[p % n]` of
    /// `n * PARTITIONS_PER_SHARD`, so a row lands where [`crate::core::types::shard_of`]
    /// puts it among shards `0..n`.
    pub fn new(shards: &[u32]) -> Result<Placement, PsCoreError> {
        let set = distinct(shards)?;
        let n = set.len() as u32;
        let owners = (0..n * PARTITIONS_PER_SHARD)
            .map(|p| shards[(p % n) as usize])
            .collect();
        Ok(Placement { epoch: 0, owners })
    }

    /// The placement's epoch (0 at the start, one more per change).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Number of partitions (fixed for the job).
    pub fn partitions(&self) -> u32 {
        self.owners.len() as u32
    }

    /// The partition of `(table, row)`.
    pub fn partition_of(&self, table: TableId, row: RowId) -> u32 {
        (row_hash(table, row) % u64::from(self.partitions().max(1))) as u32
    }

    /// The shard owning `(table, row)`.
    pub fn shard_of(&self, table: TableId, row: RowId) -> u32 {
        self.owners[self.partition_of(table, row) as usize]
    }

    /// The shards owning partitions, sorted.
    pub fn shards(&self) -> Vec<u32> {
        let set: BTreeSet<u32> = self.owners.iter().copied().collect();
        set.into_iter().collect()
    }

    /// Whether `shard` owns a partition.
    pub fn has(&self, shard: u32) -> bool {
        self.owners.contains(&shard)
    }

    /// The next epoch over `shards` (distinct), moving as few partitions as it can: each
    /// shard keeps its partitions up to its quota (`P / n`, one more for the first `P % n`
    /// shards in id order); the others (of departed shards, or beyond a quota) go, in
    /// partition order, to the shards below theirs, in id order.
    pub fn with_shards(&self, shards: &[u32]) -> Result<Placement, PsCoreError> {
        let set = distinct(shards)?;
        let (p, n) = (self.owners.len(), set.len());
        let quota: BTreeMap<u32, usize> = (set.iter().enumerate())
            .map(|(i, &s)| (s, p / n + usize::from(i < p % n)))
            .collect();
        let mut held: BTreeMap<u32, usize> = set.iter().map(|&s| (s, 0)).collect();
        let mut owners = self.owners.clone();
        let mut orphans = Vec::new();
        for (part, owner) in owners.iter().enumerate() {
            match held.get_mut(owner) {
                Some(h) if *h < quota[owner] => *h += 1,
                _ => orphans.push(part),
            }
        }
        let mut free = set.iter().flat_map(|s| {
            let room = quota[s] - held[s];
            std::iter::repeat_n(*s, room)
        });
        for part in orphans {
            owners[part] = free.next().ok_or_else(|| {
                PsCoreError::InvalidConfig("placement: quotas do not cover the partitions".into())
            })?;
        }
        Ok(Placement {
            epoch: self.epoch + 1,
            owners,
        })
    }

    /// The partitions whose owner differs in `next`, as `(partition, from, to)`.
    pub fn moves(&self, next: &Placement) -> Vec<(u32, u32, u32)> {
        (self.owners.iter().zip(&next.owners).enumerate())
            .filter(|(_, (a, b))| a != b)
            .map(|(p, (&a, &b))| (p as u32, a, b))
            .collect()
    }
}

/// `shards` as a set, refused if empty or repeated.
fn distinct(shards: &[u32]) -> Result<BTreeSet<u32>, PsCoreError> {
    let set: BTreeSet<u32> = shards.iter().copied().collect();
    if set.is_empty() || set.len() != shards.len() {
        return Err(PsCoreError::InvalidConfig(format!(
            "a placement needs distinct shards, got {shards:?}"
        )));
    }
    Ok(set)
}

/// What the coordinator does after a worker's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReshardStep {
    /// Nothing yet.
    Wait,
    /// Every worker said where it pauses: tell them all the cut (the largest).
    Cut(Clock),
    /// Every worker is at the cut: wait for every shard's min clock to reach it, move the
    /// rows, then resume the workers with the new placement.
    HandOver(Clock),
}

/// One change of the shard set, as its coordinator sees it (see the module docs).
#[derive(Debug, Clone)]
pub struct Reshard {
    next: Placement,
    /// The workers taking part (those that end their run drop out).
    workers: BTreeSet<u32>,
    /// First reports: the boundary each worker pauses at unless told a later cut.
    clocks: BTreeMap<u32, Clock>,
    cut: Option<Clock>,
    /// Workers paused at the cut.
    at_cut: BTreeSet<u32>,
    handed: bool,
}

impl Reshard {
    /// A change from `current` to the shards `after`, among `workers`.
    pub fn new(
        current: &Placement,
        after: &[u32],
        workers: impl IntoIterator<Item = u32>,
    ) -> Result<Reshard, PsCoreError> {
        Ok(Reshard {
            next: current.with_shards(after)?,
            workers: workers.into_iter().collect(),
            clocks: BTreeMap::new(),
            cut: None,
            at_cut: BTreeSet::new(),
            handed: false,
        })
    }

    /// The placement after the change.
    pub fn next(&self) -> &Placement {
        &self.next
    }

    /// The workers taking part now (each a member of every shard at the cut).
    pub fn workers(&self) -> Vec<u32> {
        self.workers.iter().copied().collect()
    }

    /// The workers taking part that have not said where they pause.
    pub fn unreported(&self) -> Vec<u32> {
        (self.workers.iter().copied())
            .filter(|w| !self.clocks.contains_key(w))
            .collect()
    }

    /// The cut, once every worker reported.
    pub fn cut(&self) -> Option<Clock> {
        self.cut
    }

    /// `worker` pauses at the boundary of `clock`: its first report says the boundary it
    /// will pause at (the next it reaches), a later one that it is there, at the cut. A
    /// worker past the cut is an error.
    pub fn paused(&mut self, worker: u32, clock: Clock) -> Result<ReshardStep, PsCoreError> {
        if !self.workers.contains(&worker) {
            return Ok(ReshardStep::Wait);
        }
        match self.cut {
            None => {
                self.clocks.insert(worker, clock);
            }
            Some(cut) if clock == cut => {
                self.at_cut.insert(worker);
            }
            Some(cut) => {
                return Err(PsCoreError::ClockMismatch {
                    worker: crate::core::types::WorkerId(worker),
                    expected: cut,
                    got: clock,
                });
            }
        }
        Ok(self.decide())
    }

    /// `worker` ended its run (it left every shard): it is not waited for.
    pub fn gone(&mut self, worker: u32) -> ReshardStep {
        self.workers.remove(&worker);
        self.clocks.remove(&worker);
        self.at_cut.remove(&worker);
        self.decide()
    }

    fn decide(&mut self) -> ReshardStep {
        if self.handed || self.workers.is_empty() {
            return ReshardStep::Wait;
        }
        if self.cut.is_none() {
            if self.clocks.len() < self.workers.len() {
                return ReshardStep::Wait;
            }
            let cut = self.clocks.values().copied().max().unwrap_or(0);
            self.cut = Some(cut);
            return ReshardStep::Cut(cut);
        }
        match self.cut {
            Some(cut) if self.at_cut.len() >= self.workers.len() => {
                self.handed = true;
                ReshardStep::HandOver(cut)
            }
            _ => ReshardStep::Wait,
        }
    }
}

/// What a worker does at a clock boundary ([`WorkerPause::at_boundary`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtBoundary {
    /// Run the next clock.
    Step,
    /// Tell the coordinator it is at the cut (this clock), then ask again.
    Report(Clock),
    /// Wait for the coordinator's next word, then ask again.
    Wait,
    /// Take this placement (drop what moved), then run the next clock.
    Install(Placement),
}

/// A worker's side of a change of the shard set: what the coordinator said so far.
/// A pause is answered at once, from the worker's inbox, with the next boundary the worker
/// reaches (it may be inside a read that waits for a worker already paused, so its answer
/// cannot wait for that boundary); it pauses there until it knows the cut, runs to the
/// cut, reports and pauses until the new placement comes. Messages of an epoch already
/// installed are stale and ignored.
#[derive(Debug, Clone, Default)]
pub struct WorkerPause {
    /// The placement epoch this worker sends by.
    epoch: u64,
    /// The change asked (its epoch) and the boundary this worker said it pauses at.
    asked: Option<(u64, Clock)>,
    cut: Option<Clock>,
    reported: bool,
    resumed: Option<Placement>,
}

impl WorkerPause {
    /// The coordinator asks for a pause towards placement epoch `epoch`; the worker's next
    /// boundary is `next`. Returns the clock to report now (`None`: stale or already asked).
    pub fn ask(&mut self, epoch: u64, next: Clock) -> Option<Clock> {
        if epoch <= self.epoch || self.asked.is_some_and(|(e, _)| e == epoch) {
            return None;
        }
        self.asked = Some((epoch, next));
        self.cut = None;
        self.reported = false;
        Some(next)
    }

    /// The coordinator says the cut of the change towards `epoch`.
    pub fn cut(&mut self, epoch: u64, cut: Clock) {
        if self.asked.is_some_and(|(e, _)| e == epoch) {
            self.cut = Some(cut);
        }
    }

    /// The coordinator says the new placement.
    pub fn resume(&mut self, placement: Placement) {
        if placement.epoch() > self.epoch {
            self.resumed = Some(placement);
        }
    }

    /// The decision at the boundary of `clock` (the worker completed `clock` clocks).
    pub fn at_boundary(&mut self, clock: Clock) -> AtBoundary {
        if let Some(p) = self.resumed.take() {
            self.epoch = p.epoch();
            if self.asked.is_some_and(|(e, _)| e <= self.epoch) {
                self.asked = None;
                self.cut = None;
            }
            return AtBoundary::Install(p);
        }
        let Some((_, at)) = self.asked else {
            return AtBoundary::Step;
        };
        match self.cut {
            Some(cut) if clock < cut => AtBoundary::Step,
            Some(cut) if !self.reported => {
                self.reported = true;
                AtBoundary::Report(cut.max(clock))
            }
            Some(_) => AtBoundary::Wait,
            None if clock < at => AtBoundary::Step,
            None => AtBoundary::Wait,
        }
    }
}

#[cfg(test)]
mod tests;
