//! The scheduler's worker list in a cluster whose members change: joiners announce
//! themselves once their worker half is ready, leavers once they were asked to leave, and
//! at a round boundary with nothing in flight the scheduler turns the announcements into
//! one [`Reshape`]: the workers that stay (in their order, joiners after them), and the
//! leavers, who are dealt nothing in that round and then drop out. A worker that died
//! (`on_node_death = "leave"`) is lost: it is dealt nothing, not even the change's round,
//! and its share goes to the staying workers, who rebuild it from their data. For the ring
//! apps, [`RingChange`] steps a change through its rounds and [`RingControl`] is the deal
//! and epoch tasks they share.

use super::StradsModelError;
use super::app::{BlockFate, RingOutput};
use super::balance::{RowDealer, ranges_of};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::Range;

/// The workers of a running job and the announced changes not applied yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roster {
    workers: Vec<String>,
    joining: BTreeSet<String>,
    leaving: BTreeSet<String>,
    lost: BTreeSet<String>,
}

/// A change of the worker list, applied by one round dealt to `dealt`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reshape {
    /// Who gets the change's round: the staying workers, then the leavers.
    pub dealt: Vec<String>,
    /// How many of `dealt` (the first ones) stay after it.
    pub staying: usize,
    /// Which of `dealt` joined with this change (they need the model so far).
    pub joined: Vec<bool>,
    /// Workers that died: not dealt, their work goes to the staying ones.
    pub lost: Vec<String>,
}

impl Reshape {
    /// The workers after the change.
    pub fn staying(&self) -> &[String] {
        &self.dealt[..self.staying]
    }

    /// The workers that leave with this change.
    pub fn leaving(&self) -> &[String] {
        &self.dealt[self.staying..]
    }

    /// The workers that join with this change.
    pub fn joining(&self) -> Vec<&str> {
        self.dealt
            .iter()
            .zip(&self.joined)
            .filter(|(_, j)| **j)
            .map(|(w, _)| w.as_str())
            .collect()
    }
}

/// Where a change of a ring app's workers is (strads-mf, LDA): at a boundary a Collect
/// round gathers the model, then the epoch round re-forms the ring over the workers of
/// the moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RingChange {
    /// The next round gathers the model.
    pub gather_next: bool,
    /// The gathering round is in flight.
    pub gathering: bool,
    /// The model is gathered: the epoch round is due.
    pub gathered: bool,
    /// The epoch round is in flight.
    pub epoch: bool,
    /// The ring of the gathered model (its epoch when the change went away meanwhile).
    pub ring: Vec<String>,
}

impl RingChange {
    /// `change` at a boundary: `true` once the model is gathered (the epoch round is
    /// due); else the next round gathers it from the ring of the moment (the dealt
    /// workers that did not join).
    pub fn gathered_for(&mut self, change: &Reshape) -> bool {
        if self.gathered {
            return true;
        }
        self.gather_next = true;
        self.ring = (change.dealt.iter().zip(&change.joined))
            .filter(|(_, joined)| !**joined)
            .map(|(w, _)| w.clone())
            .collect();
        false
    }

    /// The epoch round is planned.
    pub fn epoch_planned(&mut self) {
        self.gathered = false;
        self.epoch = true;
    }

    /// The ring after `change` at `round`, once the model is gathered: the staying
    /// workers, which of them joined, and the ranges of units `dealer` deals them evenly.
    /// `Ok(None)` away from a boundary (`at_boundary` false) and while the next round
    /// gathers the model. Refuses deaths (the blocks of `app` die with their worker) and a
    /// job without a dealer (static dealing).
    pub fn ring_after(
        &mut self,
        dealer: Option<&mut RowDealer>,
        (round, change): (u64, &Reshape),
        at_boundary: bool,
        app: &str,
    ) -> Result<Option<NewRing>, StradsModelError> {
        if !change.lost.is_empty() {
            return Err(StradsModelError::InvalidConfig(format!(
                "workers {:?} died with their blocks: {app} takes joins and leaves, not deaths",
                change.lost
            )));
        }
        let Some(dealer) = dealer else {
            return Err(StradsModelError::InvalidConfig(
                "joins and leaves need balance = \"dynamic\"".into(),
            ));
        };
        if !at_boundary || !self.gathered_for(change) {
            return Ok(None);
        }
        let ranges = dealer.reshape(round, change)?;
        let staying = change.staying.min(ranges.len());
        Ok(Some(NewRing {
            ring: change.staying().to_vec(),
            joined: change.joined.get(..staying).unwrap_or_default().to_vec(),
            ranges: ranges.get(..staying).unwrap_or_default().to_vec(),
        }))
    }
}

/// A ring re-formed by a change of the workers ([`RingChange::ring_after`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewRing {
    /// The workers' node names, in ring order.
    pub ring: Vec<String>,
    /// Which of them joined with the change.
    pub joined: Vec<bool>,
    /// Each one's range of units in the deal order.
    pub ranges: Vec<Range<u64>>,
}

impl NewRing {
    /// The epoch task re-forming this ring with the app's part `model`.
    pub fn epoch<M>(self, model: M) -> RingControl<M> {
        RingControl::Epoch(Box::new(RingEpoch {
            ring: self.ring,
            joined: self.joined,
            model,
        }))
    }
}

impl RingChange {
    /// The next round of a change under way, at a round boundary with nothing in flight:
    /// the Collect round that gathers the model, or, once gathered, the epoch round
    /// re-forming the ring of the gathered model (a change that went away meanwhile: its
    /// joiner left again) with the units `dealer` deals now. `None`: no change is under
    /// way.
    pub fn next_round(&mut self, dealer: Option<&RowDealer>) -> Option<ChangeRound> {
        if std::mem::take(&mut self.gather_next) {
            // At a boundary every worker holds the block it started with.
            self.gathering = true;
            return Some(ChangeRound::Gather);
        }
        if !self.gathered {
            return None;
        }
        let ranges = dealer.map(|d| ranges_of(&d.report().rows));
        Some(ChangeRound::Reform(NewRing {
            ring: self.ring.clone(),
            joined: vec![false; self.ring.len()],
            ranges: ranges.unwrap_or_default(),
        }))
    }
}

/// A round of a change of a ring app's workers ([`RingChange::next_round`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeRound {
    /// Gather the model: every worker sends the block it holds.
    Gather,
    /// The epoch round re-forming the ring.
    Reform(NewRing),
}

/// The tasks an elastic ring app (strads-mf, LDA) has besides its block visits; neither
/// needs a block. `M` is the app's part of an epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RingControl<M> {
    /// A re-deal (`balance = "dynamic"`, at a rotation or pass boundary): the worker now
    /// owns the units at positions `start..end` of
    /// [`deal_order`](crate::core::balance::deal_order) and releases the others it holds.
    Deal {
        /// First position.
        start: u64,
        /// One past the last.
        end: u64,
    },
    /// A change of the workers, after a Collect round gathered the model at a boundary:
    /// the ring re-forms over the workers of the moment.
    Epoch(Box<RingEpoch<M>>),
}

/// The ring after a change of the workers, and what the app deals over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingEpoch<M> {
    /// The workers' node names in ring order (a worker not named leaves).
    pub ring: Vec<String>,
    /// Which of them joined with this change (they hold nothing of the model yet).
    pub joined: Vec<bool>,
    /// The app's part: the model and how it is dealt over `ring`.
    pub model: M,
}

impl<M> RingControl<M> {
    /// The ring an epoch re-forms ([`RingApp::new_ring`](crate::core::app::RingApp::new_ring)).
    pub fn new_ring(&self) -> Option<&[String]> {
        match self {
            RingControl::Epoch(epoch) => Some(&epoch.ring),
            RingControl::Deal { .. } => None,
        }
    }

    /// A worker's answer to this task as a push: `deal`'s partial for a deal (no block
    /// stays behind); an epoch comes as a new ring
    /// ([`RingPush::rering`](crate::core::app::RingPush::rering)), never as a push.
    pub fn push<P, B>(
        &self,
        deal: impl FnOnce(u64, u64) -> Result<P, StradsModelError>,
    ) -> Result<RingOutput<P, B>, StradsModelError> {
        match self {
            RingControl::Deal { start, end } => Ok(RingOutput {
                partial: deal(*start, *end)?,
                block: BlockFate::Consumed,
            }),
            RingControl::Epoch(_) => Err(StradsModelError::protocol("an epoch outside a new ring")),
        }
    }
}

/// What a ring worker answers a new ring's task that carries no epoch.
pub fn no_epoch() -> StradsModelError {
    StradsModelError::protocol("a new ring without an epoch")
}

impl Roster {
    /// The job's starting workers, in worker order.
    pub fn new(workers: Vec<String>) -> Self {
        Roster {
            workers,
            ..Roster::default()
        }
    }

    /// The workers now, in worker order.
    pub fn workers(&self) -> &[String] {
        &self.workers
    }

    /// `worker` announced it is ready to join (`leaving = false`) or asked to leave.
    pub fn announce(&mut self, worker: String, leaving: bool) {
        if leaving {
            self.joining.remove(&worker);
            if self.workers.contains(&worker) {
                self.leaving.insert(worker);
            }
        } else if !self.workers.contains(&worker) {
            self.joining.insert(worker);
        }
    }

    /// `worker` died: its work cannot be handed over. A joiner that died never joins (one
    /// whose change's round is in flight is lost once that change made it a worker); a
    /// node that is no worker changes nothing. Whether it is news.
    pub fn lose(&mut self, worker: &str) -> bool {
        let joiner = self.joining.remove(worker);
        self.leaving.remove(worker);
        (joiner || self.workers.iter().any(|w| w == worker)) && self.lost.insert(worker.to_string())
    }

    /// The workers that died.
    fn dead(&self) -> Vec<String> {
        (self.workers.iter())
            .filter(|w| self.lost.contains(*w))
            .cloned()
            .collect()
    }

    /// Whether a change waits for the next round boundary with nothing in flight.
    pub fn pending(&self) -> bool {
        !self.joining.is_empty() || !self.leaving.is_empty() || !self.dead().is_empty()
    }

    /// The workers that died, when no worker is left to take their work (no joiner is
    /// waiting and every other worker died or leaves): the job cannot go on.
    pub fn stranded(&self) -> Option<Vec<String>> {
        let alive = self
            .workers
            .iter()
            .any(|w| !self.lost.contains(w) && !self.leaving.contains(w));
        let dead = self.dead();
        (!dead.is_empty() && !alive && self.joining.is_empty()).then_some(dead)
    }

    /// The change to make now, or none. A leave that would leave no worker waits for a
    /// joiner. Joiners that are no longer `members` (they left again) are dropped.
    pub fn reshape(&mut self, members: &[String]) -> Option<Reshape> {
        self.joining.retain(|w| members.contains(w));
        // A joiner that died before its change is no worker to deal around.
        let workers = &self.workers;
        self.lost.retain(|w| workers.contains(w));
        if !self.pending() {
            return None;
        }
        let (lost, alive): (Vec<String>, Vec<String>) =
            (self.workers.iter().cloned()).partition(|w| self.lost.contains(w));
        let (mut stay, leave): (Vec<String>, Vec<String>) =
            alive.into_iter().partition(|w| !self.leaving.contains(w));
        let kept = stay.len();
        stay.extend(self.joining.iter().cloned());
        if stay.is_empty() {
            return None;
        }
        let staying = stay.len();
        let joined = (0..staying + leave.len())
            .map(|i| (kept..staying).contains(&i))
            .collect();
        stay.extend(leave);
        Some(Reshape {
            dealt: stay,
            staying,
            joined,
            lost,
        })
    }

    /// The change's round committed: its staying workers are the workers now (a worker
    /// that died while it ran stays lost, for the next change).
    pub fn adopt(&mut self, change: &Reshape) {
        self.workers = change.staying().to_vec();
        for w in change.dealt.iter() {
            self.joining.remove(w);
            self.leaving.remove(w);
        }
        for w in &change.lost {
            self.lost.remove(w);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Node names.
    pub(crate) fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    /// A change's rounds: the gathering, then (the change gone) the same ring re-formed;
    /// a deal is a push, an epoch only a new ring.
    #[test]
    fn a_change_gathers_then_re_forms_and_an_epoch_is_never_a_push() {
        let mut steps = RingChange::default();
        assert_eq!(steps.next_round(None), None);
        let join = Reshape {
            dealt: names(&["w0", "w1", "w2"]),
            staying: 3,
            joined: vec![false, false, true],
            lost: Vec::new(),
        };
        assert!(!steps.gathered_for(&join));
        assert_eq!(steps.next_round(None), Some(ChangeRound::Gather));
        assert!(steps.gathering);
        steps.gathered = true;
        let Some(ChangeRound::Reform(ring)) = steps.next_round(None) else {
            panic!("the epoch round")
        };
        assert_eq!(
            (ring.ring, ring.joined),
            (names(&["w0", "w1"]), vec![false; 2])
        );
        let deal = RingControl::<()>::Deal { start: 2, end: 5 };
        assert_eq!(deal.new_ring(), None);
        let out: RingOutput<u64, ()> = deal.push(|s, e| Ok(e - s)).unwrap();
        assert_eq!((out.partial, out.block), (3, BlockFate::Consumed));
        let one = NewRing {
            ring: names(&["w1"]),
            joined: vec![false],
            ranges: Vec::new(),
        };
        let epoch = one.epoch(());
        assert_eq!(epoch.new_ring(), Some(names(&["w1"]).as_slice()));
        assert!(epoch.push::<u64, ()>(|_, _| Ok(0)).is_err());
    }

    #[test]
    fn a_join_and_a_leave_become_one_change_with_the_leaver_dealt_last() {
        let mut r = Roster::new(names(&["w0", "w1"]));
        assert!(!r.pending());
        assert_eq!(r.reshape(&names(&["w0", "w1"])), None);
        r.announce("w2".into(), false);
        r.announce("w0".into(), true);
        let change = r.reshape(&names(&["w0", "w1", "w2"])).unwrap();
        assert_eq!(change.dealt, names(&["w1", "w2", "w0"]));
        assert_eq!(change.staying(), names(&["w1", "w2"]).as_slice());
        assert_eq!(change.leaving(), names(&["w0"]).as_slice());
        assert_eq!(change.joining(), vec!["w2"]);
        r.adopt(&change);
        assert_eq!(r.workers(), names(&["w1", "w2"]).as_slice());
        assert!(!r.pending());
    }

    #[test]
    fn the_last_worker_waits_for_a_joiner_and_stale_announcements_are_dropped() {
        let mut r = Roster::new(names(&["w0"]));
        r.announce("w0".into(), true);
        assert_eq!(r.reshape(&names(&["w0"])), None);
        assert!(r.pending());
        // A joiner that left again before the boundary is not dealt anything.
        r.announce("w5".into(), false);
        r.announce("w1".into(), false);
        let change = r.reshape(&names(&["w0", "w1"])).unwrap();
        assert_eq!(change.dealt, names(&["w1", "w0"]));
        assert_eq!(change.joined, vec![true, false]);
        // A leave of a node that is not a worker changes nothing.
        let mut r = Roster::new(names(&["w0"]));
        r.announce("w9".into(), true);
        assert!(!r.pending());
        // A joiner announced twice joins once.
        r.announce("w1".into(), false);
        r.announce("w1".into(), false);
        let change = r.reshape(&names(&["w0", "w1"])).unwrap();
        assert_eq!(change.dealt, names(&["w0", "w1"]));
    }

    #[test]
    fn a_dead_worker_is_dealt_nothing_and_its_work_goes_to_the_others() {
        let mut r = Roster::new(names(&["w0", "w1", "w2"]));
        r.announce("w3".into(), false);
        r.announce("w1".into(), true);
        assert!(r.lose("w1"));
        assert!(!r.lose("w1"));
        assert!(!r.lose("w9"));
        assert!(r.pending());
        assert_eq!(r.stranded(), None);
        let change = r.reshape(&names(&["w0", "w2", "w3"])).unwrap();
        // The dead leaver is neither dealt the change's round nor staying.
        assert_eq!(change.dealt, names(&["w0", "w2", "w3"]));
        assert_eq!(change.staying(), change.dealt.as_slice());
        assert_eq!(change.lost, names(&["w1"]));
        assert_eq!(change.joining(), vec!["w3"]);
        r.adopt(&change);
        assert_eq!(r.workers(), names(&["w0", "w2", "w3"]).as_slice());
        assert!(!r.pending());
    }

    #[test]
    fn a_death_during_a_change_stays_for_the_next_one_and_the_last_death_strands_the_job() {
        let mut r = Roster::new(names(&["w0", "w1"]));
        r.announce("w2".into(), false);
        let change = r.reshape(&names(&["w0", "w1", "w2"])).unwrap();
        // w2 dies while the change's round runs: it is lost after the commit.
        r.lose("w2");
        r.adopt(&change);
        assert_eq!(r.workers(), names(&["w0", "w1", "w2"]).as_slice());
        let change = r.reshape(&names(&["w0", "w1"])).unwrap();
        assert_eq!(
            (change.dealt.clone(), change.lost.clone()),
            (names(&["w0", "w1"]), names(&["w2"]))
        );
        r.adopt(&change);
        // The last worker dies while the other leaves: nobody can take the work.
        r.announce("w0".into(), true);
        r.lose("w1");
        assert_eq!(r.reshape(&names(&["w0"])), None);
        assert_eq!(r.stranded(), Some(names(&["w1"])));
        // A joiner can; one that died before its change is forgotten.
        r.announce("w6".into(), false);
        r.lose("w6");
        r.announce("w5".into(), false);
        assert_eq!(r.stranded(), None);
        let change = r.reshape(&names(&["w0", "w5"])).unwrap();
        assert_eq!(change.dealt, names(&["w5", "w0"]));
        assert_eq!(change.staying(), names(&["w5"]).as_slice());
    }
}
