//! Binds every frame's claimed sender to the peer's certificate.
//!
//! The cluster CA authenticates that a peer is *a* member; the node name in its
//! certificate ([`crate::tls::node_names_in_certificate`]) says *which*. The lane header
//! and the envelope of every frame carry the sender's [`NodeId`]; the receiver maps that id
//! to the node name registered with [`crate::Net::add_peer`] and refuses the frame unless
//! the connection's certificate names that node. A member holding the certificate of `a`
//! therefore cannot speak as `b` (join as `b`, heartbeat for `b`, answer asks sent to `b`).

use petrel_messages::NodeId;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// The names of the nodes this node knows, by id.
#[derive(Default)]
pub(crate) struct PeerDirectory {
    names: RwLock<HashMap<NodeId, String>>,
    /// Woken when a name is added (a frame may race its sender's registration at start-up).
    added: Notify,
    /// (certificate name, claimed sender) pairs already logged: each impersonation is
    /// logged once, however many frames or reconnections it takes.
    reported: Mutex<HashSet<(String, String)>>,
}

/// Why a frame's claimed sender was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SenderRefusal {
    /// The id is no registered node.
    Unknown(NodeId),
    /// The id is another node than the certificate names.
    NotCertified {
        /// The name registered for the claimed id.
        claimed: String,
    },
}

impl SenderRefusal {
    /// The claimed sender, for logs.
    pub(crate) fn claimed(&self) -> String {
        match self {
            SenderRefusal::Unknown(id) => format!("unknown {id}"),
            SenderRefusal::NotCertified { claimed } => claimed.clone(),
        }
    }
}

impl PeerDirectory {
    pub(crate) fn insert(&self, node: NodeId, name: &str) {
        if let Ok(mut names) = self.names.write() {
            names.insert(node, name.to_string());
        }
        self.added.notify_waiters();
    }

    /// The name registered for `node`, if any.
    pub(crate) fn registered(&self, node: NodeId) -> Option<String> {
        self.names.read().ok()?.get(&node).cloned()
    }

    /// The name registered for `node`, waiting up to `wait` for a registration still under
    /// way.
    async fn name_of(&self, node: NodeId, wait: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let added = self.added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            if let Some(name) = self.registered(node) {
                return Some(name);
            }
            if tokio::time::timeout_at(deadline, added).await.is_err() {
                return None;
            }
        }
    }

    /// Checks that a connection whose certificate names `certified` may send as `claimed`.
    pub(crate) async fn check_sender(
        &self,
        certified: &[String],
        claimed: NodeId,
        wait: Duration,
    ) -> Result<(), SenderRefusal> {
        match self.name_of(claimed, wait).await {
            None => Err(SenderRefusal::Unknown(claimed)),
            Some(name) if certified.contains(&name) => Ok(()),
            Some(name) => Err(SenderRefusal::NotCertified { claimed: name }),
        }
    }

    /// True the first time this certificate is caught claiming this sender.
    pub(crate) fn first_report(&self, certified: &[String], refusal: &SenderRefusal) -> bool {
        self.reported
            .lock()
            .map(|mut r| r.insert((certified.join(","), refusal.claimed())))
            .unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn a_certificate_may_send_only_as_its_own_node() {
        let dir = PeerDirectory::default();
        dir.insert(NodeId(0), "a");
        dir.insert(NodeId(1), "b");
        let a = names(&["a"]);
        let wait = Duration::from_millis(10);
        assert_eq!(dir.check_sender(&a, NodeId(0), wait).await, Ok(()));
        let refusal = dir.check_sender(&a, NodeId(1), wait).await.unwrap_err();
        assert_eq!(
            refusal,
            SenderRefusal::NotCertified {
                claimed: "b".into()
            }
        );
        assert_eq!(
            dir.check_sender(&a, NodeId(7), wait).await,
            Err(SenderRefusal::Unknown(NodeId(7)))
        );
        // Logged once per (certificate, claimed sender).
        assert!(dir.first_report(&a, &refusal));
        assert!(!dir.first_report(&a, &refusal));
    }

    #[tokio::test]
    async fn a_frame_racing_its_senders_registration_waits_for_it() {
        let dir = std::sync::Arc::new(PeerDirectory::default());
        let later = dir.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            later.insert(NodeId(3), "c");
        });
        let c = names(&["c"]);
        assert_eq!(
            dir.check_sender(&c, NodeId(3), Duration::from_secs(30))
                .await,
            Ok(())
        );
    }
}
