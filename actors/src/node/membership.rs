//! What this node knows of the cluster's membership: the coordinator's latest view, the
//! nodes that left (whose messages are refused), and whether this node was asked to leave
//! or decided to.

use super::Node;
use crate::error::AskError;
use petrel_messages::NodeId;
use petrel_messages::runtime::MembershipView;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

pub(super) struct Membership {
    view: Mutex<MembershipView>,
    /// Asked to drain and leave (a scale plan's `remove`, an operator).
    leave_requested: watch::Sender<bool>,
    /// Leaves once its roles return, instead of waiting for the job to finish.
    leave_when_done: AtomicBool,
}

impl Default for Membership {
    fn default() -> Self {
        Self {
            view: Mutex::new(MembershipView::default()),
            leave_requested: watch::channel(false).0,
            leave_when_done: AtomicBool::new(false),
        }
    }
}

impl Node {
    /// The cluster's membership as this node last heard it: the epoch, the live members
    /// and the nodes that left.
    pub fn view(&self) -> MembershipView {
        self.membership()
            .view
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// The epoch at which `node` left, if it did.
    pub fn departed_at(&self, node: NodeId) -> Option<u64> {
        let view = self.membership().view.lock().ok()?;
        view.departed
            .iter()
            .find(|(n, _)| *n == node)
            .map(|&(_, e)| e)
    }

    /// Installs a newer view from the coordinator: requests to nodes that left fail now
    /// and subscribers hear of the change. An older view than the one held is ignored.
    /// Connections to a node that left stay until it closes them, so the answer to its
    /// leave still reaches it.
    pub(crate) fn apply_view(&self, view: MembershipView) {
        let newly_departed: Vec<(NodeId, u64)> = {
            let Ok(mut held) = self.membership().view.lock() else {
                return;
            };
            if view.epoch < held.epoch {
                return;
            }
            let fresh = view
                .departed
                .iter()
                .filter(|d| !held.departed.contains(d))
                .copied()
                .collect();
            *held = view.clone();
            fresh
        };
        for (node, epoch) in newly_departed {
            let name = self.peer_name(node);
            tracing::info!(node = %self.name(), peer = %name, epoch, "peer left the cluster");
            self.fail_pending_to(node, |actor| AskError::PeerLeft {
                name: name.clone(),
                actor,
                epoch,
            });
        }
        let _ = self.inner.events.send(super::PeerEvent::Membership(view));
    }

    /// Asks this node to drain and leave: roles that support leaving watch
    /// [`Node::leave_requested`].
    pub fn request_leave(&self) {
        self.membership().leave_requested.send_replace(true);
    }

    /// Resolves once this node was asked to leave (at once if it already was).
    pub async fn leave_requested(&self) {
        let mut rx = self.membership().leave_requested.subscribe();
        let _ = rx.wait_for(|asked| *asked).await;
    }

    /// True once this node was asked to leave.
    pub fn is_leave_requested(&self) -> bool {
        *self.membership().leave_requested.borrow()
    }

    /// This node leaves the cluster once its roles return, instead of waiting for every
    /// node to finish: the others carry on without it.
    pub fn leave_when_done(&self) {
        self.membership()
            .leave_when_done
            .store(true, Ordering::Release);
    }

    /// Whether this node leaves once its roles return.
    pub fn leaves_when_done(&self) -> bool {
        self.membership().leave_when_done.load(Ordering::Acquire)
    }

    fn membership(&self) -> &Membership {
        &self.inner.membership
    }
}
