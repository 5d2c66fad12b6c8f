//! The coordinator's decisions, free of I/O: who joined, who is alive, which barriers are
//! complete. Time is passed in; every input returns the waiters to answer and how.

use petrel_messages::NodeId;
use petrel_messages::runtime::{BarrierReleased, Join, Member, MembershipView};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Why the coordinator refused a join or failed a barrier.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The joining node is not in the settings.
    #[error("{0} is not part of this cluster")]
    NotMember(NodeId),
    /// The joining node's name differs from the settings.
    #[error("{node} is expected to be named {expected}, not {got}")]
    WrongName {
        /// The node.
        node: NodeId,
        /// Its name in the settings.
        expected: String,
        /// The name it joined with.
        got: String,
    },
    /// A node declared dead tried to join again.
    #[error("{0} was declared dead and cannot rejoin")]
    DeclaredDead(String),
    /// A member died while others waited at a barrier.
    #[error("barrier {barrier}: node {node} died")]
    MemberDied {
        /// The barrier.
        barrier: String,
        /// The dead node's name.
        node: String,
    },
    /// Nodes entered a barrier with different values to agree on (different data loaded).
    #[error(
        "barrier {barrier}: the nodes disagree on what they must share, a digest of the data each loaded ({values})"
    )]
    Disagreement {
        /// The barrier.
        barrier: String,
        /// Each value and the nodes that entered with it.
        values: String,
    },
    /// A node that is not a live member entered a barrier.
    #[error("{0} is not a live member")]
    NotLive(NodeId),
    /// A node that left the cluster spoke as a member.
    #[error("{name} left the cluster at membership epoch {epoch}; its messages are refused")]
    Departed {
        /// The node's name.
        name: String,
        /// The epoch at which it left.
        epoch: u64,
    },
    /// The run already failed on a node; joins are refused at once with the cause.
    #[error("the run already failed on {node}: {reason}")]
    RunFailed {
        /// The node where the run failed.
        node: String,
        /// Why.
        reason: String,
    },
    /// A message speaks for another node than its authenticated sender.
    #[error("{sender} sent a message on behalf of {claimed}; refused")]
    Impersonation {
        /// The authenticated sender.
        sender: NodeId,
        /// The node the body claims.
        claimed: NodeId,
    },
    /// The coordinator actor stopped before answering.
    #[error("coordinator stopped")]
    Stopped,
    /// A standby node asked to join after every member reached the final barrier.
    #[error("{JOB_ENDED}")]
    JobEnded,
}

/// The final barrier every member enters once its roles returned.
pub const FINISH_BARRIER: &str = "petrel.finish";

/// [`MembershipError::JobEnded`]'s text, read back by the refused joiner.
const JOB_ENDED: &str = "the job ended before this node joined";

/// Checks that a runtime message's claimed node is its authenticated sender (`None`: a
/// local send, which speaks for this node).
pub fn check_claim(sender: Option<NodeId>, claimed: NodeId) -> Result<(), MembershipError> {
    match sender {
        Some(sender) if sender != claimed => {
            Err(MembershipError::Impersonation { sender, claimed })
        }
        _ => Ok(()),
    }
}

impl MembershipError {
    /// Reads back a [`MembershipError::RunFailed`] from a refused join's text: `(node, reason)`.
    pub fn parse_run_failed(text: &str) -> Option<(String, String)> {
        let rest = text.split("the run already failed on ").nth(1)?;
        let (node, reason) = rest.split_once(": ")?;
        Some((node.to_owned(), reason.to_owned()))
    }

    /// Whether a refused join's text is a [`MembershipError::JobEnded`].
    pub fn is_job_ended(text: &str) -> bool {
        text.contains(JOB_ENDED)
    }
}

/// A barrier or join completing (`Ok`) or failing (`Err`) for one waiter.
pub type Outcome<W, T> = Vec<(W, Result<T, MembershipError>)>;

struct BarrierState<W> {
    entered: BTreeSet<NodeId>,
    waiters: Vec<W>,
    /// The values entered to agree on, by node (a node with two roles may enter twice).
    values: Vec<(NodeId, u64)>,
}

/// The coordinator's decisions, free of I/O. `W` identifies a waiting caller.
///
/// The cluster forms once every node but the standby ones joined. After that, a standby
/// node (or one that left) may join and a member may leave; each change raises the
/// membership epoch by one, and barriers count the members of the moment.
pub struct ClusterCore<W> {
    expected: BTreeMap<NodeId, String>,
    standby: BTreeSet<NodeId>,
    formed: bool,
    epoch: u64,
    /// Nodes that left, with the epoch at which each left.
    departed: BTreeMap<NodeId, u64>,
    /// The current members.
    joined: BTreeMap<NodeId, Member>,
    join_waiters: Vec<W>,
    last_seen: HashMap<NodeId, Instant>,
    dead: BTreeSet<NodeId>,
    timeout: Duration,
    barriers: HashMap<String, BarrierState<W>>,
    /// The first run failure, refusing every later join.
    run_failure: Option<MembershipError>,
    /// The final barrier was released: the job is over and a late joiner has nothing to do.
    finished: bool,
}

impl<W> ClusterCore<W> {
    /// A core expecting the nodes `expected` (id to name); a member silent for
    /// `failure_timeout` is found dead by [`tick`](Self::tick).
    pub fn new(expected: BTreeMap<NodeId, String>, failure_timeout: Duration) -> Self {
        Self {
            expected,
            standby: BTreeSet::new(),
            formed: false,
            epoch: 0,
            departed: BTreeMap::new(),
            joined: BTreeMap::new(),
            join_waiters: Vec::new(),
            last_seen: HashMap::new(),
            dead: BTreeSet::new(),
            timeout: failure_timeout,
            barriers: HashMap::new(),
            run_failure: None,
            finished: false,
        }
    }

    /// These nodes are standby: the cluster forms without them.
    pub fn with_standby(mut self, standby: impl IntoIterator<Item = NodeId>) -> Self {
        self.standby.extend(standby);
        self
    }

    /// True once every expected node but the standby ones joined (and ever after).
    pub fn is_formed(&self) -> bool {
        self.formed
    }

    /// The membership epoch: 0 when the cluster formed, one more per join or leave since.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What every live member holds: the epoch, the live members and who left when.
    pub fn view(&self) -> MembershipView {
        MembershipView {
            epoch: self.epoch,
            members: self
                .joined
                .values()
                .filter(|m| !self.dead.contains(&m.node))
                .cloned()
                .collect(),
            departed: self.departed.iter().map(|(&n, &e)| (n, e)).collect(),
        }
    }

    /// Names of the expected nodes, standby ones aside, that have not joined, in settings
    /// order.
    pub fn missing(&self) -> Vec<String> {
        self.expected
            .iter()
            .filter(|(id, _)| !self.joined.contains_key(id) && !self.standby.contains(id))
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// The nodes that joined, by id.
    pub fn members(&self) -> Vec<Member> {
        self.joined.values().cloned().collect()
    }

    /// Joined nodes not declared dead.
    pub fn alive(&self) -> Vec<NodeId> {
        self.joined
            .keys()
            .filter(|n| !self.dead.contains(n))
            .copied()
            .collect()
    }

    /// A node's name from the settings (its id if unknown).
    pub fn name(&self, node: NodeId) -> String {
        self.expected
            .get(&node)
            .cloned()
            .unwrap_or_else(|| node.to_string())
    }

    /// A node joins. Returns the waiters to answer (all of them once the cluster formed).
    pub fn join(&mut self, join: Join, waiter: W, now: Instant) -> Outcome<W, Vec<Member>> {
        let dead = || MembershipError::DeclaredDead(join.name.clone());
        let refused = match self.expected.get(&join.node) {
            None => Some(MembershipError::NotMember(join.node)),
            Some(name) if *name != join.name => Some(MembershipError::WrongName {
                node: join.node,
                expected: name.clone(),
                got: join.name.clone(),
            }),
            _ if self.run_failure.is_some() => self.run_failure.clone(),
            _ if self.finished => Some(MembershipError::JobEnded),
            _ => self.dead.contains(&join.node).then(dead),
        };
        if let Some(refused) = refused {
            return vec![(waiter, Err(refused))];
        }
        self.last_seen.insert(join.node, now);
        let member = Member {
            node: join.node,
            name: join.name,
            roles: join.roles,
        };
        if self.formed {
            // A node joining a running cluster: a new member at once, in a new epoch.
            if self.joined.insert(join.node, member).is_none() {
                self.departed.remove(&join.node);
                self.epoch += 1;
            }
            return vec![(waiter, Ok(self.members()))];
        }
        self.joined.insert(join.node, member);
        self.join_waiters.push(waiter);
        let required = self.expected.keys().filter(|n| !self.standby.contains(n));
        if !required.into_iter().all(|n| self.joined.contains_key(n)) {
            return Vec::new();
        }
        self.formed = true;
        // The failure clock of every member starts when the cluster forms, so a slow
        // starter does not make the early joiners look dead.
        for n in self.joined.keys() {
            self.last_seen.insert(*n, now);
        }
        let members = self.members();
        self.join_waiters
            .drain(..)
            .map(|w| (w, Ok(members.clone())))
            .collect()
    }

    /// `node` was heard from at `now` (earlier stamps than recorded are ignored).
    pub fn heartbeat(&mut self, node: NodeId, now: Instant) {
        if self.joined.contains_key(&node) && !self.dead.contains(&node) {
            let seen = self.last_seen.entry(node).or_insert(now);
            if now > *seen {
                *seen = now;
            }
        }
    }

    /// Nodes newly found dead at `now`. Nothing is judged before the cluster formed.
    pub fn tick(&mut self, now: Instant) -> Vec<NodeId> {
        if !self.is_formed() {
            return Vec::new();
        }
        self.joined
            .keys()
            .filter(|n| !self.dead.contains(n))
            .filter(|n| {
                self.last_seen
                    .get(n)
                    .is_none_or(|t| now.saturating_duration_since(*t) > self.timeout)
            })
            .copied()
            .collect()
    }

    /// Declares `node` dead; returns the barrier waiters that must fail.
    pub fn mark_dead(&mut self, node: NodeId) -> Outcome<W, BarrierReleased> {
        if !self.dead.insert(node) {
            return Vec::new();
        }
        let name = self.name(node);
        let mut failed = Vec::new();
        for (barrier, state) in self.barriers.drain() {
            for w in state.waiters {
                failed.push((
                    w,
                    Err(MembershipError::MemberDied {
                        barrier: barrier.clone(),
                        node: name.clone(),
                    }),
                ));
            }
        }
        failed
    }

    /// `node` enters barrier `name`; when every live member has entered, all waiters are
    /// released with the participant count, or fail with
    /// [`MembershipError::Disagreement`] if the values entered differ.
    pub fn enter_barrier(
        &mut self,
        name: &str,
        node: NodeId,
        agree_on: Option<u64>,
        waiter: W,
    ) -> Outcome<W, BarrierReleased> {
        if let Err(refused) = self.check_live(node) {
            return vec![(waiter, Err(refused))];
        }
        let state = self
            .barriers
            .entry(name.to_string())
            .or_insert_with(|| BarrierState {
                entered: BTreeSet::new(),
                waiters: Vec::new(),
                values: Vec::new(),
            });
        state.entered.insert(node);
        state.waiters.push(waiter);
        if let Some(value) = agree_on {
            state.values.push((node, value));
        }
        self.release_if_complete(name)
    }

    /// `Ok` for a live member; otherwise why its messages are refused.
    pub fn check_live(&self, node: NodeId) -> Result<(), MembershipError> {
        if let Some(&epoch) = self.departed.get(&node) {
            let name = self.name(node);
            return Err(MembershipError::Departed { name, epoch });
        }
        if self.dead.contains(&node) || !self.joined.contains_key(&node) {
            return Err(MembershipError::NotLive(node));
        }
        Ok(())
    }

    /// `node` leaves the running cluster after draining its work: a new epoch without it,
    /// and the barriers it held up are released if every remaining member is in.
    /// Returns the new epoch and the barrier waiters to answer.
    pub fn leave(
        &mut self,
        node: NodeId,
    ) -> Result<(u64, Outcome<W, BarrierReleased>), MembershipError> {
        self.check_live(node)?;
        self.joined.remove(&node);
        self.last_seen.remove(&node);
        self.epoch += 1;
        self.departed.insert(node, self.epoch);
        let open: Vec<String> = self.barriers.keys().cloned().collect();
        let mut released = Vec::new();
        for name in open {
            if let Some(state) = self.barriers.get_mut(&name) {
                state.entered.remove(&node);
                state.values.retain(|&(n, _)| n != node);
            }
            released.extend(self.release_if_complete(&name));
        }
        Ok((self.epoch, released))
    }

    /// Releases (or fails, on disagreement) barrier `name` once every live member entered.
    fn release_if_complete(&mut self, name: &str) -> Outcome<W, BarrierReleased> {
        let alive: BTreeSet<NodeId> = self.alive().into_iter().collect();
        let complete = self
            .barriers
            .get(name)
            .is_some_and(|state| alive.is_subset(&state.entered));
        if !complete {
            return Vec::new();
        }
        let Some(state) = self.barriers.remove(name) else {
            return Vec::new();
        };
        let mut by_value: BTreeMap<u64, BTreeSet<NodeId>> = BTreeMap::new();
        for &(node, value) in &state.values {
            by_value.entry(value).or_default().insert(node);
        }
        if by_value.len() > 1 {
            let values = by_value
                .iter()
                .map(|(value, nodes)| {
                    let names: Vec<String> = nodes.iter().map(|&n| self.name(n)).collect();
                    format!("{value:#018x} from {}", names.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ");
            let failed = MembershipError::Disagreement {
                barrier: name.to_string(),
                values,
            };
            return state
                .waiters
                .into_iter()
                .map(|w| (w, Err(failed.clone())))
                .collect();
        }
        let released = BarrierReleased {
            name: name.to_string(),
            participants: state.entered.len() as u32,
        };
        self.finished |= name == FINISH_BARRIER;
        state
            .waiters
            .into_iter()
            .map(|w| (w, Ok(released.clone())))
            .collect()
    }

    /// The run failed on `node`: every later join is refused with the cause at once, and
    /// the nodes still waiting for the cluster to form are returned to be refused too. The
    /// first failure is kept (the root cause).
    pub fn fail_run(&mut self, node: &str, reason: &str) -> Outcome<W, Vec<Member>> {
        let failed = self
            .run_failure
            .get_or_insert_with(|| MembershipError::RunFailed {
                node: node.to_owned(),
                reason: reason.to_owned(),
            })
            .clone();
        let waiters = self.join_waiters.drain(..);
        waiters.map(|w| (w, Err(failed.clone()))).collect()
    }

    /// The failure timeout this core judges by.
    pub fn failure_timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
