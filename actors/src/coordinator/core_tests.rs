//! The coordinator core's tests: joins, failures, barriers and membership changes.
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

/// A standby node that asks to join once every member is in the final barrier is refused
/// as late (its process then ends without failing the run); one that joins before is a
/// member the barrier waits for.
#[test]
fn a_join_after_the_final_barrier_is_refused_as_late() {
    let expected = (0..4).map(|i| (NodeId(i), format!("n{i}"))).collect();
    let mut c: ClusterCore<u32> =
        ClusterCore::new(expected, Duration::from_millis(100)).with_standby([NodeId(3)]);
    let now = Instant::now();
    for i in 0..3 {
        c.join(join(i), i, now);
    }
    assert!(
        c.enter_barrier(FINISH_BARRIER, NodeId(0), None, 0)
            .is_empty()
    );
    assert!(
        c.enter_barrier(FINISH_BARRIER, NodeId(1), None, 1)
            .is_empty()
    );
    let released = c.enter_barrier(FINISH_BARRIER, NodeId(2), None, 2);
    assert_eq!(released.len(), 3);
    let refused = c.join(join(3), 3, now);
    assert_eq!(refused, vec![(3, Err(MembershipError::JobEnded))]);
    let text = MembershipError::JobEnded.to_string();
    assert!(MembershipError::is_job_ended(&text), "{text}");
    assert!(!MembershipError::is_job_ended("coordinator stopped"));
    // Another barrier's release ends nothing.
    let mut c = core3();
    for i in 0..3 {
        c.join(join(i), i, now);
    }
    for i in 0..3 {
        c.enter_barrier("ready", NodeId(i), None, i);
    }
    assert!(!c.finished);
}
