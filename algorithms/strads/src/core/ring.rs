//! One ring worker's bookkeeping, sans-I/O: the FIFO of scheduler messages and the blocks
//! it holds.
//!
//! A dispatch and the handoff it needs come from different nodes, so the dispatch can
//! arrive first. [`RingCore`] keeps the scheduler's messages (dispatches and commits) in
//! arrival order, exactly as a star worker applies them: a commit at the head runs at once,
//! a dispatch at the head runs once its block is held, and everything behind it waits.
//! A handoff of a block the worker already holds means two workers would be updating one
//! block: a protocol error that poisons the worker ([`Poisoned`]), as does a block version
//! produced in the dispatch's own round or later. [`settle`] turns a push's
//! [`BlockFate`] into a local keep or an outgoing handoff.
//!
//! The actor shell ([`crate::shells::ring`]) and the serial driver
//! ([`crate::kit::serial`]) run the same core.

use super::StradsModelError;
use super::app::{BlockFate, BlockId};
use std::collections::{BTreeMap, VecDeque};

/// Where a second copy of a held block came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOrigin {
    /// Another worker handed it over.
    Handoff {
        /// The sending worker.
        from: u32,
    },
    /// A push on this worker kept it.
    Kept,
}

impl std::fmt::Display for BlockOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockOrigin::Handoff { from } => write!(f, "worker {from} handed it over"),
            BlockOrigin::Kept => f.write_str("a push kept it"),
        }
    }
}

#[derive(Debug)]
struct Held<B> {
    block: B,
    /// Round whose push produced this version (`None`: an initial block).
    produced: Option<u64>,
}

#[derive(Debug)]
enum Queued<T, C, R> {
    Dispatch {
        round: u64,
        need: Option<BlockId>,
        task: T,
        reply: R,
    },
    Commit {
        round: u64,
        commit: C,
    },
}

/// The next scheduler message to apply, with the block it needs taken out of the store.
#[derive(Debug)]
pub enum Ready<T, C, B, R> {
    /// Run the app's push.
    Push {
        /// The dispatch's round.
        round: u64,
        /// The block the task needs.
        need: Option<BlockId>,
        /// The task.
        task: T,
        /// The block (present exactly when `need` is).
        block: Option<B>,
        /// How the shell answers the dispatch.
        reply: R,
    },
    /// Apply a commit.
    Commit {
        /// The commit's round.
        round: u64,
        /// The commit.
        commit: C,
    },
}

/// The worker failed: `orphans` are the replies of the dispatches that will never run
/// (answer each with `reason`).
#[derive(Debug, PartialEq)]
pub struct Poisoned<R> {
    /// Why.
    pub reason: StradsModelError,
    /// Replies still owed.
    pub orphans: Vec<R>,
}

/// Queue and held-block bookkeeping of one ring worker. `T`, `C`, `B` are the app's task,
/// commit and block types; `R` is whatever the shell needs to answer a dispatch later (a
/// oneshot sender in the actor, a slot index in the serial driver).
#[derive(Debug)]
pub struct RingCore<T, C, B, R> {
    worker: u32,
    held: BTreeMap<BlockId, Held<B>>,
    queue: VecDeque<Queued<T, C, R>>,
    failed: Option<StradsModelError>,
}

impl<T, C, B, R> RingCore<T, C, B, R> {
    /// A worker holding `initial` blocks. Two initial blocks with one id are an error.
    pub fn new(
        worker: u32,
        initial: impl IntoIterator<Item = (BlockId, B)>,
    ) -> Result<Self, StradsModelError> {
        let mut held = BTreeMap::new();
        for (id, block) in initial {
            let fresh = Held {
                block,
                produced: None,
            };
            if held.insert(id, fresh).is_some() {
                return Err(StradsModelError::DuplicateInitialBlock { worker, block: id });
            }
        }
        Ok(RingCore {
            worker,
            held,
            queue: VecDeque::new(),
            failed: None,
        })
    }

    /// This worker's index in the ring.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    /// Why the worker failed, once it has.
    pub fn failed(&self) -> Option<&StradsModelError> {
        self.failed.as_ref()
    }

    /// Whether block `id` is held now.
    pub fn holds(&self, id: BlockId) -> bool {
        self.held.contains_key(&id)
    }

    /// Ids of the blocks held now, ascending.
    pub fn held_ids(&self) -> Vec<BlockId> {
        self.held.keys().copied().collect()
    }

    /// The blocks held now with the round that produced each version (`None`: initial),
    /// what a checkpoint saves.
    pub fn held_versions(&self) -> impl Iterator<Item = (BlockId, Option<u64>, &B)> {
        self.held.iter().map(|(id, h)| (*id, h.produced, &h.block))
    }

    /// Replaces the blocks held by those of a checkpoint (before any dispatch of the
    /// resumed run). Refused with messages queued, on a failed worker, or with a duplicate.
    pub fn restore_held(
        &mut self,
        blocks: impl IntoIterator<Item = (BlockId, Option<u64>, B)>,
    ) -> Result<(), StradsModelError> {
        if let Some(first) = &self.failed {
            return Err(StradsModelError::FailedEarlier {
                worker: self.worker,
                first: Box::new(first.clone()),
            });
        }
        let mut held = BTreeMap::new();
        for (id, produced, block) in blocks {
            if held.insert(id, Held { block, produced }).is_some() {
                return Err(StradsModelError::DuplicateInitialBlock {
                    worker: self.worker,
                    block: id,
                });
            }
        }
        self.held = held;
        Ok(())
    }

    /// Re-forms the ring: this worker is `worker` of it from now on and holds `blocks`
    /// (fresh, as at the start) instead of any it held.
    pub fn rering(
        &mut self,
        worker: u32,
        blocks: impl IntoIterator<Item = (BlockId, B)>,
    ) -> Result<(), StradsModelError> {
        self.restore_held(blocks.into_iter().map(|(id, b)| (id, None, b)))?;
        self.worker = worker;
        Ok(())
    }

    /// Scheduler messages not yet applied.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The block the dispatch at the head of the queue waits for, if it waits.
    pub fn waiting_for(&self) -> Option<BlockId> {
        match self.queue.front() {
            Some(Queued::Dispatch { need: Some(id), .. }) if !self.held.contains_key(id) => {
                Some(*id)
            }
            _ => None,
        }
    }

    /// Marks the worker failed (the first reason stays) and hands back every queued
    /// dispatch's reply.
    pub fn poison(&mut self, reason: StradsModelError) -> Poisoned<R> {
        let reason = self.failed.get_or_insert(reason).clone();
        let orphans = self
            .queue
            .drain(..)
            .filter_map(|q| match q {
                Queued::Dispatch { reply, .. } => Some(reply),
                Queued::Commit { .. } => None,
            })
            .collect();
        Poisoned { reason, orphans }
    }

    fn failed_reply(&self, reply: R) -> Poisoned<R> {
        let first = self
            .failed
            .clone()
            .unwrap_or(StradsModelError::IndexOutsideRing {
                worker: self.worker,
                ring: 0,
            });
        Poisoned {
            reason: StradsModelError::FailedEarlier {
                worker: self.worker,
                first: Box::new(first),
            },
            orphans: vec![reply],
        }
    }

    /// A dispatch from the scheduler, queued behind earlier scheduler messages. A failed
    /// worker answers at once with its error.
    pub fn dispatch(
        &mut self,
        round: u64,
        need: Option<BlockId>,
        task: T,
        reply: R,
    ) -> Result<(), Poisoned<R>> {
        if self.failed.is_some() {
            return Err(self.failed_reply(reply));
        }
        self.queue.push_back(Queued::Dispatch {
            round,
            need,
            task,
            reply,
        });
        Ok(())
    }

    /// A commit from the scheduler, queued behind earlier scheduler messages (dropped by a
    /// failed worker: returns false).
    pub fn commit(&mut self, round: u64, commit: C) -> bool {
        if self.failed.is_some() {
            return false;
        }
        self.queue.push_back(Queued::Commit { round, commit });
        true
    }

    fn store(
        &mut self,
        id: BlockId,
        block: B,
        produced: u64,
        origin: BlockOrigin,
    ) -> Result<(), Poisoned<R>> {
        if self.failed.is_some() {
            return Ok(());
        }
        if self.held.contains_key(&id) {
            let reason = StradsModelError::AlreadyHeld {
                worker: self.worker,
                block: id,
                source_of: origin,
                round: produced,
            };
            return Err(self.poison(reason));
        }
        let held = Held {
            block,
            produced: Some(produced),
        };
        self.held.insert(id, held);
        Ok(())
    }

    /// A block handed over by worker `from`, produced in round `produced`. Receiving a
    /// block that is already held poisons the worker. A failed worker drops it.
    pub fn handoff(
        &mut self,
        id: BlockId,
        block: B,
        produced: u64,
        from: u32,
    ) -> Result<(), Poisoned<R>> {
        self.store(id, block, produced, BlockOrigin::Handoff { from })
    }

    /// The block a push in round `produced` kept (or passed to this worker itself).
    pub fn keep(&mut self, id: BlockId, block: B, produced: u64) -> Result<(), Poisoned<R>> {
        self.store(id, block, produced, BlockOrigin::Kept)
    }

    /// The next scheduler message that can be applied now, in arrival order: a commit at the
    /// head at once, a dispatch at the head once its block is held (taken out of the store).
    /// A block whose version was produced in the dispatch's round or later cannot serve it:
    /// that poisons the worker.
    #[allow(clippy::type_complexity)]
    pub fn next_ready(&mut self) -> Result<Option<Ready<T, C, B, R>>, Poisoned<R>> {
        if self.failed.is_some() {
            return Ok(None);
        }
        let block = match self.queue.front() {
            None => return Ok(None),
            Some(Queued::Commit { .. }) => None,
            Some(Queued::Dispatch { need: None, .. }) => None,
            Some(Queued::Dispatch {
                need: Some(id),
                round,
                ..
            }) => {
                let (id, round) = (*id, *round);
                let Some(held) = self.held.remove(&id) else {
                    return Ok(None);
                };
                if let Some(produced) = held.produced
                    && produced >= round
                {
                    let reason = StradsModelError::StaleBlock {
                        worker: self.worker,
                        block: id,
                        produced,
                        round,
                    };
                    return Err(self.poison(reason));
                }
                Some(held.block)
            }
        };
        Ok(match self.queue.pop_front() {
            Some(Queued::Commit { round, commit }) => Some(Ready::Commit { round, commit }),
            Some(Queued::Dispatch {
                round,
                need,
                task,
                reply,
            }) => Some(Ready::Push {
                round,
                need,
                task,
                block,
                reply,
            }),
            None => None,
        })
    }
}

/// Applies a push's [`BlockFate`]: a kept block (or one passed to this worker itself) goes
/// back into `core`; a block for another worker is returned as `(worker, block id, block)`
/// for the shell to send. Errors (a block from a task that needed none, a worker index
/// outside the ring, a duplicate) are reasons to poison the worker.
pub fn settle<T, C, B, R>(
    core: &mut RingCore<T, C, B, R>,
    ring_size: usize,
    round: u64,
    need: Option<BlockId>,
    fate: BlockFate<B>,
) -> Result<Option<(u32, BlockId, B)>, StradsModelError> {
    let (to, block) = match fate {
        BlockFate::Consumed => return Ok(None),
        BlockFate::Keep(block) => (core.worker(), block),
        BlockFate::PassTo { worker, block } => (worker, block),
    };
    let worker = core.worker();
    let Some(id) = need else {
        return Err(StradsModelError::BlockForNoTask { worker, round });
    };
    if to as usize >= ring_size {
        return Err(StradsModelError::PassOutsideRing {
            worker,
            round,
            block: id,
            to,
            ring: ring_size,
        });
    }
    if to == worker {
        core.keep(id, block, round).map_err(|p| p.reason)?;
        return Ok(None);
    }
    Ok(Some((to, id, block)))
}

#[cfg(test)]
mod tests;
