//! Joining the cluster: asking the coordinator until the cluster formed, and naming the
//! missing nodes (or the unreachable coordinator) when it does not in time.

use super::*;

pub(super) async fn join(
    node: &Node,
    coordinator: NodeId,
    spec: &NodeSpec,
    expected: &[ExpectedNode],
    timeout: Duration,
) -> Result<(), NodeError> {
    let deadline = Instant::now() + timeout;
    let c = node.actor::<Join>(&ActorId::new(coordinator, COORDINATOR_ACTOR))?;
    let msg = Join {
        node: node.id(),
        name: spec.name.clone(),
        roles: spec.roles.clone(),
    };
    let mut events = node.subscribe();
    // Who is missing is asked shortly before the deadline too: the coordinator may be gone
    // by then.
    let status_at = deadline - JOIN_STATUS_TIMEOUT.min(timeout / 2);
    let mut early_status = None;
    loop {
        // A run failure announced while joining (its join reply may be lost) ends it.
        if let Some(e @ NodeError::RunFailed { .. }) = node.peer_failure() {
            return Err(e);
        }
        let now = Instant::now();
        if now >= status_at && early_status.is_none() {
            early_status = Some(join_status(node, coordinator).await);
            continue;
        }
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            let status = match (join_status(node, coordinator).await, early_status) {
                (Err(_), Some(Ok(early))) => Ok(early),
                (latest, _) => latest,
            };
            return Err(join_timed_out(node, coordinator, expected, timeout, status));
        }
        // Attempts end at the time to ask who is missing, then at the deadline.
        let until = if now < status_at {
            status_at - now
        } else {
            left
        };
        let attempt = c.ask(
            msg.clone(),
            Priority::CONTROL,
            until.min(Duration::from_secs(2)),
        );
        let answer = tokio::select! {
            a = attempt => a,
            e = first_failure(&mut events) => match e {
                e @ NodeError::RunFailed { .. } => return Err(e),
                // A peer down while joining: keep joining (the coordinator decides).
                _ => continue,
            },
        };
        match answer {
            Ok(ack) => {
                // The coordinator's broadcast of a late join may have come first.
                if node.view().members.is_empty() {
                    node.apply_view(petrel_messages::runtime::MembershipView {
                        epoch: ack.epoch,
                        members: ack.members,
                        departed: Vec::new(),
                    });
                }
                return Ok(());
            }
            Err(crate::AskError::Remote { ref error, .. })
                if let Some((name, reason)) =
                    crate::coordinator::MembershipError::parse_run_failed(error) =>
            {
                return Err(NodeError::RunFailed { name, reason });
            }
            Err(e @ crate::AskError::Remote { .. }) => return Err(NodeError::Join(e)),
            Err(e) => {
                tracing::debug!(error = %e, "join attempt failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// How long a node whose join timed out waits for the coordinator to say who is missing.
pub(super) const JOIN_STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// The coordinator's list of nodes that have not joined, or why it gave none.
async fn join_status(node: &Node, coordinator: NodeId) -> Result<JoinProgress, String> {
    let c = node
        .actor::<JoinStatus>(&ActorId::new(coordinator, COORDINATOR_ACTOR))
        .map_err(|e| e.to_string())?;
    c.ask(JoinStatus, Priority::CONTROL, JOIN_STATUS_TIMEOUT)
        .await
        .map_err(|e| e.to_string())
}

/// The error of a timed-out join: the nodes the coordinator still missed, or that it could
/// not be reached.
fn join_timed_out(
    node: &Node,
    coordinator: NodeId,
    expected: &[ExpectedNode],
    timeout: Duration,
    status: Result<JoinProgress, String>,
) -> NodeError {
    let coordinator_name = node.peer_name(coordinator);
    let named = |name: &str| {
        expected
            .iter()
            .find(|n| n.name == name)
            .cloned()
            .unwrap_or_else(|| ExpectedNode {
                name: name.to_string(),
                addr: None,
            })
    };
    match status {
        Ok(progress) => NodeError::JoinTimeout {
            timeout,
            coordinator: coordinator_name,
            missing: progress.missing.iter().map(|n| named(n)).collect(),
        },
        Err(error) => {
            tracing::debug!(%error, "the coordinator does not say who is missing");
            NodeError::CoordinatorUnreachable {
                timeout,
                coordinator: named(&coordinator_name),
            }
        }
    }
}
