//! Exchange routing's decision logic: which shares an [`ExchangePush`] worker holds for a
//! round, and when the round is complete.
//!
//! After its push a worker sends its share to every other worker and answers the scheduler
//! only once it holds every worker's share of that round. A peer's share may arrive before
//! this worker's own dispatch of the round (it comes from another node), so shares wait
//! here by round. Nothing is trusted: a share from outside the group, from this worker
//! itself, twice for one round, or for a round already completed is a protocol error (the
//! shell then poisons the worker), and at most [`MAX_ROUNDS_AHEAD`] rounds wait at once,
//! so a peer cannot grow this worker's memory without bound.
//!
//! [`ExchangePush`]: super::app::ExchangePush

use super::StradsModelError;
use std::collections::BTreeMap;

/// Rounds whose shares may wait at once (a round's shares arrive at most a pipeline's
/// depth ahead of this worker's own dispatch).
pub const MAX_ROUNDS_AHEAD: usize = 64;

/// One round's shares, by worker.
struct RoundShares<S> {
    by_worker: Vec<Option<S>>,
    /// This worker's own share is in (its push ran).
    own: bool,
}

/// The shares worker `index` of `workers` holds, per round.
pub struct ShareBoard<S> {
    index: usize,
    workers: usize,
    rounds: BTreeMap<u64, RoundShares<S>>,
    /// Every round up to this one (exclusive) completed; shares for them are stale.
    completed_below: u64,
}

impl<S> ShareBoard<S> {
    /// The board of worker `index` in a group of `workers`.
    pub fn new(index: usize, workers: usize) -> Result<Self, StradsModelError> {
        if index >= workers {
            return Err(StradsModelError::InvalidConfig(format!(
                "worker {index} outside a group of {workers}"
            )));
        }
        Ok(ShareBoard {
            index,
            workers,
            rounds: BTreeMap::new(),
            completed_below: 0,
        })
    }

    /// Shares waiting, over all rounds (0 at a drain point).
    pub fn waiting(&self) -> usize {
        self.rounds
            .values()
            .map(|r| r.by_worker.iter().filter(|s| s.is_some()).count())
            .sum()
    }

    fn round_mut(&mut self, round: u64) -> Result<&mut RoundShares<S>, StradsModelError> {
        if round < self.completed_below {
            return Err(StradsModelError::protocol(format!(
                "a share of round {round}, which already completed"
            )));
        }
        if !self.rounds.contains_key(&round) && self.rounds.len() >= MAX_ROUNDS_AHEAD {
            return Err(StradsModelError::protocol(format!(
                "shares of more than {MAX_ROUNDS_AHEAD} rounds waiting (round {round})"
            )));
        }
        let workers = self.workers;
        Ok(self.rounds.entry(round).or_insert_with(|| RoundShares {
            by_worker: (0..workers).map(|_| None).collect(),
            own: false,
        }))
    }

    fn put(&mut self, round: u64, from: usize, share: S) -> Result<(), StradsModelError> {
        let slot = self
            .round_mut(round)?
            .by_worker
            .get_mut(from)
            .ok_or_else(|| StradsModelError::protocol(format!("a share from worker {from}")))?;
        if slot.is_some() {
            return Err(StradsModelError::protocol(format!(
                "a second share of round {round} from worker {from}"
            )));
        }
        *slot = Some(share);
        Ok(())
    }

    /// Every worker's share of `round` in worker order, once all are here and the own one
    /// too; the round is then complete.
    fn take_if_complete(&mut self, round: u64) -> Option<Vec<S>> {
        let entry = self.rounds.get(&round)?;
        if !entry.own || entry.by_worker.iter().any(Option::is_none) {
            return None;
        }
        let entry = self.rounds.remove(&round)?;
        self.completed_below = self.completed_below.max(round + 1);
        entry.by_worker.into_iter().collect()
    }

    /// This worker's own share of `round` (its push ran); returns the round's shares if
    /// every peer's is already here.
    pub fn own(&mut self, round: u64, share: S) -> Result<Option<Vec<S>>, StradsModelError> {
        self.put(round, self.index, share)?;
        self.round_mut(round)?.own = true;
        Ok(self.take_if_complete(round))
    }

    /// Peer `from`'s share of `round`; returns the round's shares if this completes it.
    pub fn offer(
        &mut self,
        round: u64,
        from: usize,
        share: S,
    ) -> Result<Option<Vec<S>>, StradsModelError> {
        if from == self.index {
            return Err(StradsModelError::protocol(format!(
                "a share of round {round} that claims to come from this worker ({from})"
            )));
        }
        self.put(round, from, share)?;
        Ok(self.take_if_complete(round))
    }

    /// Forgets every waiting share (a restored worker continues after a drain point).
    pub fn clear(&mut self, next_round: u64) {
        self.rounds.clear();
        self.completed_below = next_round;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_completes_once_its_own_and_every_peer_share_are_in_whatever_the_order() {
        let mut board = ShareBoard::new(1, 3).unwrap();
        // A peer's share may come before this worker's own dispatch.
        assert_eq!(board.offer(0, 2, "c").unwrap(), None);
        assert_eq!(board.own(0, "b").unwrap(), None);
        assert_eq!(board.waiting(), 2);
        assert_eq!(board.offer(0, 0, "a").unwrap(), Some(vec!["a", "b", "c"]));
        assert_eq!(board.waiting(), 0);
        // The next round, own share last.
        assert_eq!(board.offer(1, 0, "x").unwrap(), None);
        assert_eq!(board.offer(1, 2, "z").unwrap(), None);
        assert_eq!(board.own(1, "y").unwrap(), Some(vec!["x", "y", "z"]));
    }

    #[test]
    fn a_lone_worker_completes_on_its_own_share() {
        let mut board = ShareBoard::new(0, 1).unwrap();
        assert_eq!(board.own(7, 1.5).unwrap(), Some(vec![1.5]));
    }

    #[test]
    fn shares_that_break_the_protocol_are_refused_with_the_reason() {
        assert!(ShareBoard::<u8>::new(2, 2).is_err());
        let mut board = ShareBoard::new(0, 2).unwrap();
        let err = |r: Result<Option<Vec<u8>>, StradsModelError>| r.unwrap_err().to_string();
        assert!(err(board.offer(0, 0, 1)).contains("from this worker"));
        assert!(err(board.offer(0, 5, 1)).contains("worker 5"));
        board.offer(0, 1, 1).unwrap();
        assert!(err(board.offer(0, 1, 2)).contains("second share"));
        assert_eq!(board.own(0, 0).unwrap(), Some(vec![0, 1]));
        assert!(err(board.offer(0, 1, 3)).contains("already completed"));
        assert!(err(board.own(0, 3)).contains("already completed"));
        // A flood of future rounds stops at the bound.
        for r in 1..=MAX_ROUNDS_AHEAD as u64 {
            board.offer(r, 1, 0).unwrap();
        }
        let far = MAX_ROUNDS_AHEAD as u64 + 1;
        assert!(err(board.offer(far, 1, 0)).contains("rounds waiting"));
        board.clear(far);
        assert_eq!(board.waiting(), 0);
        assert!(err(board.offer(3, 1, 0)).contains("already completed"));
        assert_eq!(board.offer(far, 1, 9).unwrap(), None);
    }
}
