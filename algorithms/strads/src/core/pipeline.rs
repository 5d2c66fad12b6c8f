//! Pipeline bookkeeping of a scheduler: which round may be dispatched next, and that
//! commits happen strictly in round order. Up to `depth` rounds are in flight at once.
//! Both the actor loop ([`crate::shells::run_scheduler`]) and the serial driver
//! ([`crate::kit::serial`]) ask [`PipelineCore::next_action`] what to do.

use super::StradsModelError;
use super::app::Step;

/// The rounds of one scheduler (plain data).
#[derive(Debug, Clone)]
pub struct PipelineCore {
    depth: usize,
    next_round: u64,
    next_commit: u64,
    done: bool,
}

/// What the scheduler loop should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineAction {
    /// Ask the app for round `r` (a slot is free).
    Schedule(u64),
    /// Wait for the oldest in-flight round.
    AwaitOldest,
    /// Nothing in flight and no more rounds: stop.
    Stop,
}

impl PipelineCore {
    /// A pipeline of `depth` rounds (0 means 1) starting at round 0.
    pub fn new(depth: usize) -> Self {
        Self::starting_at(depth, 0)
    }

    /// A pipeline whose first round is `first_round` (a scheduler that runs its job in
    /// several segments keeps its round numbers increasing).
    pub fn starting_at(depth: usize, first_round: u64) -> Self {
        PipelineCore {
            depth: depth.max(1),
            next_round: first_round,
            next_commit: first_round,
            done: false,
        }
    }

    /// The round number the next `Schedule` action will offer.
    pub fn next_round(&self) -> u64 {
        self.next_round
    }

    /// Rounds dispatched but not yet committed.
    pub fn in_flight(&self) -> usize {
        (self.next_round - self.next_commit) as usize
    }

    /// What to do now (ignoring a preceding `Wait`: see [`Self::must_await`]).
    pub fn next_action(&self) -> PipelineAction {
        if !self.done && self.in_flight() < self.depth {
            PipelineAction::Schedule(self.next_round)
        } else if self.in_flight() > 0 {
            PipelineAction::AwaitOldest
        } else {
            PipelineAction::Stop
        }
    }

    /// What to do now, given whether the app's last answer was `Wait`.
    pub fn next_action_after(&self, last_step_was_wait: bool) -> PipelineAction {
        if self.must_await(last_step_was_wait) {
            PipelineAction::AwaitOldest
        } else {
            self.next_action()
        }
    }

    /// The app's answer for the round offered by [`PipelineAction::Schedule`]: the round
    /// number when it runs. A `Wait` with nothing in flight is an error (a deadlock).
    pub fn scheduled<T>(&mut self, step: &Step<T>) -> Result<Option<u64>, StradsModelError> {
        match step {
            Step::Run(_) => {
                self.next_round += 1;
                Ok(Some(self.next_round - 1))
            }
            Step::Done => {
                self.done = true;
                Ok(None)
            }
            Step::Wait if self.in_flight() == 0 => Err(StradsModelError::WaitWithNothingInFlight {
                round: self.next_round,
            }),
            Step::Wait => Ok(None),
        }
    }

    /// After a `Wait`, the loop must await a commit before scheduling again.
    pub fn must_await(&self, last_step_was_wait: bool) -> bool {
        last_step_was_wait && self.in_flight() > 0
    }

    /// The oldest in-flight round committed.
    pub fn committed(&mut self, round: u64) -> Result<(), StradsModelError> {
        if round != self.next_commit || self.in_flight() == 0 {
            return Err(StradsModelError::CommitOutOfOrder {
                round,
                expected: self.next_commit,
            });
        }
        self.next_commit += 1;
        Ok(())
    }

    /// The rounds in flight are given up (a worker they went to died): returns them,
    /// oldest first. Their numbers are not used again, and the app schedules afresh (a
    /// `Done` it said is forgotten: the given-up rounds' work is still to do).
    pub fn abandon(&mut self) -> Vec<u64> {
        let rounds = (self.next_commit..self.next_round).collect();
        self.next_commit = self.next_round;
        self.done = false;
        rounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::app::Plan;

    #[test]
    fn pipeline_fills_to_depth_then_awaits_in_order() {
        let mut core = PipelineCore::new(2);
        assert_eq!(core.next_action(), PipelineAction::Schedule(0));
        assert_eq!(core.scheduled(&Step::Run(Plan::All(()))), Ok(Some(0)));
        assert_eq!(core.next_action(), PipelineAction::Schedule(1));
        assert_eq!(core.scheduled(&Step::Run(Plan::All(()))), Ok(Some(1)));
        assert_eq!(core.next_action(), PipelineAction::AwaitOldest);
        assert!(core.committed(1).is_err(), "round 1 cannot commit before 0");
        assert_eq!(core.committed(0), Ok(()));
        assert_eq!(core.next_action(), PipelineAction::Schedule(2));
        assert_eq!(core.scheduled::<()>(&Step::Done), Ok(None));
        assert_eq!(core.next_action(), PipelineAction::AwaitOldest);
        assert_eq!(core.committed(1), Ok(()));
        assert_eq!(core.next_action(), PipelineAction::Stop);
    }

    #[test]
    fn wait_needs_a_round_in_flight() {
        let mut core = PipelineCore::new(3);
        assert_eq!(
            core.scheduled::<()>(&Step::Wait),
            Err(StradsModelError::WaitWithNothingInFlight { round: 0 })
        );
        core.scheduled(&Step::Run(Plan::All(()))).unwrap();
        assert_eq!(core.scheduled::<()>(&Step::Wait), Ok(None));
        assert!(core.must_await(true));
        assert!(!core.must_await(false));
        assert_eq!(core.next_action_after(true), PipelineAction::AwaitOldest);
    }

    #[test]
    fn abandoned_rounds_are_not_awaited_and_their_numbers_are_not_reused() {
        let mut core = PipelineCore::new(3);
        for _ in 0..3 {
            core.scheduled(&Step::Run(Plan::All(()))).unwrap();
        }
        core.committed(0).unwrap();
        core.scheduled::<()>(&Step::Done).unwrap();
        assert_eq!(core.abandon(), vec![1, 2]);
        assert_eq!(core.in_flight(), 0);
        // The app schedules again from the next number.
        assert_eq!(core.next_action(), PipelineAction::Schedule(3));
        assert!(core.committed(1).is_err());
        assert_eq!(core.abandon(), Vec::<u64>::new());
    }

    #[test]
    fn depth_zero_means_one() {
        let mut core = PipelineCore::new(0);
        core.scheduled(&Step::Run(Plan::All(()))).unwrap();
        assert_eq!(core.next_action(), PipelineAction::AwaitOldest);
    }

    #[test]
    fn a_pipeline_can_start_at_a_later_round() {
        let mut core = PipelineCore::starting_at(2, 40);
        assert_eq!(core.next_action(), PipelineAction::Schedule(40));
        assert_eq!(core.scheduled(&Step::Run(Plan::All(()))), Ok(Some(40)));
        assert_eq!(core.in_flight(), 1);
        assert_eq!(
            core.committed(0),
            Err(StradsModelError::CommitOutOfOrder {
                round: 0,
                expected: 40
            })
        );
        assert_eq!(core.committed(40), Ok(()));
        assert_eq!(core.next_round(), 41);
    }
}
