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
}

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
mod tests {
    use super::*;

    #[test]
    fn a_message_may_speak_only_for_its_sender() {
        assert!(check_claim(None, NodeId(1)).is_ok());
        assert!(check_claim(Some(NodeId(1)), NodeId(1)).is_ok());
        let e = check_claim(Some(NodeId(0)), NodeId(1)).unwrap_err();
        assert!(matches!(
            e,
            MembershipError::Impersonation {
                sender: NodeId(0),
                claimed: NodeId(1)
            }
        ));
    }

    fn core3() -> ClusterCore<u32> {
        let expected = (0..3).map(|i| (NodeId(i), format!("n{i}"))).collect();
        ClusterCore::new(expected, Duration::from_millis(100))
    }

    #[test]
    fn the_nodes_not_yet_joined_are_missing() {
        let mut c = core3();
        assert_eq!(c.missing(), ["n0", "n1", "n2"]);
        c.join(join(1), 1, Instant::now());
        assert_eq!(c.missing(), ["n0", "n2"]);
    }

    /// [`core3`] with all three nodes joined at `t0`.
    fn joined3(t0: Instant) -> ClusterCore<u32> {
        let mut c = core3();
        for i in 0..3 {
            c.join(join(i), i, t0);
        }
        c
    }

    fn join(i: u32) -> Join {
        Join {
            node: NodeId(i),
            name: format!("n{i}"),
            roles: vec![],
        }
    }

    #[test]
    fn a_run_failure_refuses_waiting_and_later_joins_at_once() {
        // A node joining just after a failure was broadcast must hear of it at once, not
        // after the whole failure timeout.
        let mut c = core3();
        let now = Instant::now();
        assert!(c.join(join(0), 10, now).is_empty());
        let refused = c.fail_run("n1", "bad --mode");
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, 10);
        assert_eq!(
            refused[0].1,
            Err(MembershipError::RunFailed {
                node: "n1".into(),
                reason: "bad --mode".into()
            })
        );
        let late = c.join(join(2), 12, now);
        assert_eq!(late.len(), 1);
        let text = late[0].1.clone().unwrap_err().to_string();
        assert_eq!(text, "the run already failed on n1: bad --mode");
        assert_eq!(
            MembershipError::parse_run_failed(&format!("x failed: {text}")),
            Some(("n1".into(), "bad --mode".into()))
        );
        // The first failure stays the reported one.
        assert!(c.fail_run("n0", "stopped by a peer").is_empty());
        let again = c.join(join(1), 11, now);
        assert!(
            again[0]
                .1
                .clone()
                .unwrap_err()
                .to_string()
                .contains("n1: bad --mode")
        );
    }

    #[test]
    fn join_completes_when_all_joined() {
        let mut c = core3();
        let t = Instant::now();
        assert!(c.join(join(0), 0, t).is_empty());
        assert!(c.join(join(1), 1, t).is_empty());
        let out = c.join(join(2), 2, t);
        assert_eq!(out.len(), 3);
        assert!(
            out.iter()
                .all(|(_, r)| r.as_ref().map(|m| m.len()) == Ok(3))
        );
        let wrong = c.join(
            Join {
                node: NodeId(1),
                name: "other".into(),
                roles: vec![],
            },
            9,
            t,
        );
        assert!(wrong[0].1.is_err());
        assert!(c.join(join(7), 7, t)[0].1.is_err());
    }

    #[test]
    fn failure_clock_starts_when_the_cluster_formed() {
        let mut c = core3();
        let t0 = Instant::now();
        c.join(join(0), 0, t0);
        // Node 0 waits for the others without heartbeating; it is not judged meanwhile.
        assert!(c.tick(t0 + Duration::from_millis(500)).is_empty());
        c.join(join(1), 1, t0 + Duration::from_millis(600));
        c.join(join(2), 2, t0 + Duration::from_millis(700));
        assert!(c.tick(t0 + Duration::from_millis(750)).is_empty());
        assert_eq!(c.tick(t0 + Duration::from_millis(850)).len(), 3);
    }

    #[test]
    fn silent_node_is_found_dead_and_fails_barriers() {
        let t0 = Instant::now();
        let mut c = joined3(t0);
        assert!(c.enter_barrier("b", NodeId(0), None, 10).is_empty());
        let t1 = t0 + Duration::from_millis(80);
        c.heartbeat(NodeId(0), t1);
        c.heartbeat(NodeId(1), t1);
        assert!(c.tick(t1).is_empty());
        let t2 = t0 + Duration::from_millis(150);
        assert_eq!(c.tick(t2), vec![NodeId(2)]);
        let failed = c.mark_dead(NodeId(2));
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0]
                .1
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("n2 died")
        );
        // A barrier among the survivors still works.
        assert!(c.enter_barrier("c", NodeId(0), None, 11).is_empty());
        let out = c.enter_barrier("c", NodeId(1), None, 12);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1.as_ref().unwrap().participants, 2);
        assert!(
            c.join(join(2), 2, t2)[0].1.is_err(),
            "dead nodes do not rejoin"
        );
    }

    /// Nodes that enter with the same value (or none) pass; one value apart fails the
    /// barrier for every waiter, naming each value's nodes; the next barrier is unaffected.
    #[test]
    fn a_barrier_fails_for_all_when_the_values_to_agree_on_differ() {
        let mut c = joined3(Instant::now());
        assert!(c.enter_barrier("same", NodeId(0), Some(7), 0).is_empty());
        assert!(c.enter_barrier("same", NodeId(1), None, 1).is_empty());
        let out = c.enter_barrier("same", NodeId(2), Some(7), 2);
        assert!(out.iter().all(|(_, r)| r.is_ok()), "{:?}", out.len());
        assert!(c.enter_barrier("data", NodeId(0), Some(7), 0).is_empty());
        assert!(c.enter_barrier("data", NodeId(1), Some(9), 1).is_empty());
        let out = c.enter_barrier("data", NodeId(2), Some(7), 2);
        assert_eq!(out.len(), 3);
        for (_, r) in &out {
            let e = r.as_ref().unwrap_err();
            assert!(matches!(e, MembershipError::Disagreement { .. }), "{e}");
            let text = e.to_string();
            assert!(
                text.contains("0x0000000000000007 from n0, n2")
                    && text.contains("0x0000000000000009 from n1"),
                "{text}"
            );
        }
        assert_eq!(
            c.enter_barrier("next", NodeId(0), Some(1), 0).len()
                + c.enter_barrier("next", NodeId(1), Some(1), 1).len()
                + c.enter_barrier("next", NodeId(2), Some(1), 2).len(),
            3
        );
    }

    /// Three nodes, `n2` standby: the cluster forms with two; `n2` joins later at once,
    /// in epoch 1; `n0` leaves in epoch 2 and the barrier it held up is released.
    #[test]
    fn a_standby_node_joins_a_formed_cluster_and_a_member_leaves() {
        let t = Instant::now();
        let mut c = core3().with_standby([NodeId(2)]);
        assert_eq!(c.missing(), ["n0", "n1"]);
        assert!(c.join(join(0), 0, t).is_empty());
        let formed = c.join(join(1), 1, t);
        assert_eq!(formed.len(), 2);
        assert!(c.is_formed());
        assert_eq!(c.epoch(), 0);
        assert!(c.missing().is_empty());
        let late = c.join(join(2), 2, t);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].1.as_ref().map(Vec::len), Ok(3));
        assert_eq!(c.epoch(), 1);
        assert_eq!(c.view().members.len(), 3);
        // A barrier waits for the newcomer too.
        assert!(c.enter_barrier("b", NodeId(1), None, 11).is_empty());
        assert!(c.enter_barrier("b", NodeId(2), None, 12).is_empty());
        let (epoch, released) = c.leave(NodeId(0)).unwrap();
        assert_eq!(epoch, 2);
        assert_eq!(released.len(), 2);
        assert_eq!(released[0].1.as_ref().unwrap().participants, 2);
        let view = c.view();
        assert_eq!(view.epoch, 2);
        assert_eq!(view.departed, vec![(NodeId(0), 2)]);
        assert_eq!(
            view.members.iter().map(|m| m.node.0).collect::<Vec<_>>(),
            [1, 2]
        );
        // The node that left is refused by name, is not judged dead, and may come back.
        let refused = c.enter_barrier("c", NodeId(0), None, 10);
        let text = refused[0].1.as_ref().unwrap_err().to_string();
        assert_eq!(
            text,
            "n0 left the cluster at membership epoch 2; its messages are refused"
        );
        assert!(c.leave(NodeId(0)).is_err());
        assert!(c.tick(t + Duration::from_millis(90)).is_empty());
        assert_eq!(c.join(join(0), 0, t)[0].1.as_ref().map(Vec::len), Ok(3));
        assert_eq!(c.epoch(), 3);
        assert!(c.view().departed.is_empty());
    }

    /// A barrier whose last missing member leaves is checked for agreement like any other.
    #[test]
    fn a_leave_that_completes_a_barrier_still_checks_agreement() {
        let mut c = joined3(Instant::now());
        assert!(c.enter_barrier("d", NodeId(0), Some(1), 0).is_empty());
        assert!(c.enter_barrier("d", NodeId(1), Some(2), 1).is_empty());
        let (_, out) = c.leave(NodeId(2)).unwrap();
        assert_eq!(out.len(), 2);
        assert!(
            out.iter()
                .all(|(_, r)| matches!(r, Err(MembershipError::Disagreement { .. })))
        );
        // The leaver's own entry goes with it.
        assert!(c.enter_barrier("e", NodeId(0), Some(5), 0).is_empty());
        let (_, out) = c.leave(NodeId(0)).unwrap();
        assert!(out.is_empty(), "n1 has not entered e");
        let out = c.enter_barrier("e", NodeId(1), Some(6), 1);
        assert!(out.iter().all(|(_, r)| r.is_ok()));
    }
}
