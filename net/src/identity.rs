//! Binds every frame's claimed sender to the peer's certificate.
//!
//! The cluster CA says a peer is *a* member; the node name in its certificate
//! ([`crate::tls::node_names_in_certificate`]) says *which*. Every frame's lane header and
//! envelope carry the sender's [`NodeId`]; the receiver refuses the frame unless the
//! connection's certificate names the node registered for that id ([`crate::Net::add_peer`]),
//! so a holder of `a`'s certificate cannot speak as `b`.
//!
//! A certificate is also bound to its node's registered address ([`check_origin`]): a
//! stolen key used elsewhere is refused at the handshake and can never draw on the real
//! node's inbound share (RELIABILITY.md, "Resource bounds").

use petrel_messages::NodeId;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// The names of the nodes this node knows, by id.
#[derive(Default)]
pub(crate) struct PeerDirectory {
    names: RwLock<HashMap<NodeId, String>>,
    /// Where each node name sends from (its registered address), by name.
    homes: RwLock<HashMap<String, SocketAddr>>,
    /// Woken when a name is added (a frame may race its sender's registration at start-up).
    added: Notify,
    /// (certificate name, claimed sender) pairs already logged, so each is logged once.
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
    /// Registers `node` as `name`, reached at (and sending from) `home` when known.
    pub(crate) fn insert(&self, node: NodeId, name: &str, home: Option<SocketAddr>) {
        if let Ok(mut names) = self.names.write() {
            names.insert(node, name.to_string());
        }
        if let Some(home) = home
            && let Ok(mut homes) = self.homes.write()
        {
            homes.insert(name.to_string(), home);
        }
        self.added.notify_waiters();
    }

    /// Whether a connection from `remote` whose certificate names `certified` comes from
    /// its node's address, waiting up to `wait` while none of the names is registered yet.
    pub(crate) async fn origin(
        &self,
        certified: &[String],
        remote: SocketAddr,
        wait: Duration,
    ) -> Origin {
        let known = || {
            let names = self.names.read().ok()?;
            names.values().any(|n| certified.contains(n)).then_some(())
        };
        self.wait_for(wait, known).await;
        let homes = self.homes.read().map(|h| h.clone()).unwrap_or_default();
        check_origin(certified, &homes, remote)
    }

    /// The name registered for `node`, if any.
    pub(crate) fn registered(&self, node: NodeId) -> Option<String> {
        self.names.read().ok()?.get(&node).cloned()
    }

    /// Waits up to `wait` (for registrations under way) until `found` gives a value.
    async fn wait_for<T>(&self, wait: Duration, found: impl Fn() -> Option<T>) -> Option<T> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let added = self.added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            if let Some(value) = found() {
                return Some(value);
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
        match self.wait_for(wait, || self.registered(claimed)).await {
            None => Err(SenderRefusal::Unknown(claimed)),
            Some(name) if certified.contains(&name) => Ok(()),
            Some(name) => Err(SenderRefusal::NotCertified { claimed: name }),
        }
    }

    /// True the first time a connection with this certificate comes from this IP address.
    pub(crate) fn first_misplaced(&self, certified: &[String], remote: SocketAddr) -> bool {
        self.reported
            .lock()
            .map(|mut r| r.insert((certified.join(","), format!("from {}", remote.ip()))))
            .unwrap_or(true)
    }

    /// True the first time this certificate is caught claiming this sender.
    pub(crate) fn first_report(&self, certified: &[String], refusal: &SenderRefusal) -> bool {
        self.reported
            .lock()
            .map(|mut r| r.insert((certified.join(","), refusal.claimed())))
            .unwrap_or(true)
    }
}

/// Where a connection comes from, compared with where its certificate's node sends from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// From the registered address of a node its certificate names.
    Home,
    /// None of its names has a known address: nothing to compare (frames still checked).
    Unbound,
    /// From another address than that of the node its certificate names: refused.
    Elsewhere {
        /// The node the certificate names.
        name: String,
        /// Where that node sends from.
        home: SocketAddr,
    },
}

/// Decides [`Origin`] for a connection from `remote` whose certificate names `certified`.
/// A node sends from the socket bound at its registered address, so the port must match,
/// and the IP too unless it binds `0.0.0.0`/`::`. IPv4-mapped IPv6 counts as IPv4.
pub(crate) fn check_origin(
    certified: &[String],
    homes: &HashMap<String, SocketAddr>,
    remote: SocketAddr,
) -> Origin {
    let bound: Vec<(&String, SocketAddr)> = certified
        .iter()
        .filter_map(|name| homes.get(name).map(|home| (name, *home)))
        .filter(|(_, home)| home.port() != 0)
        .collect();
    if bound.iter().any(|(_, home)| same_origin(*home, remote)) {
        return Origin::Home;
    }
    match bound.first() {
        Some((name, home)) => Origin::Elsewhere {
            name: (*name).clone(),
            home: *home,
        },
        None => Origin::Unbound,
    }
}

fn same_origin(home: SocketAddr, remote: SocketAddr) -> bool {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    home.port() == remote.port()
        && (home.ip().is_unspecified() || canonical(home.ip()) == canonical(remote.ip()))
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
        dir.insert(NodeId(0), "a", None);
        dir.insert(NodeId(1), "b", None);
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
            later.insert(NodeId(3), "c", None);
        });
        let c = names(&["c"]);
        assert_eq!(
            dir.check_sender(&c, NodeId(3), Duration::from_secs(30))
                .await,
            Ok(())
        );
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_certificate_is_admitted_only_from_its_nodes_address() {
        let homes: HashMap<String, SocketAddr> = [
            ("w0".to_string(), addr("127.0.0.1:7001")),
            ("w1".to_string(), addr("10.0.0.2:7002")),
            ("any".to_string(), addr("0.0.0.0:7003")),
            ("unset".to_string(), addr("127.0.0.1:0")),
        ]
        .into_iter()
        .collect();
        let w0 = names(&["w0"]);
        assert_eq!(
            check_origin(&w0, &homes, addr("127.0.0.1:7001")),
            Origin::Home
        );
        // The same IP on another port (a second process on w0's host) or w0's port on
        // another host: the key is stolen.
        for remote in ["127.0.0.1:40000", "127.0.0.2:7001", "[::1]:7001"] {
            assert_eq!(
                check_origin(&w0, &homes, addr(remote)),
                Origin::Elsewhere {
                    name: "w0".into(),
                    home: addr("127.0.0.1:7001")
                },
                "{remote}"
            );
        }
        // IPv4-mapped IPv6 is the IPv4 address.
        assert_eq!(
            check_origin(&names(&["w1"]), &homes, addr("[::ffff:10.0.0.2]:7002")),
            Origin::Home
        );
        // A node bound to 0.0.0.0 sends from any of its IPs, but from its port.
        let any = names(&["any"]);
        assert_eq!(
            check_origin(&any, &homes, addr("192.168.1.5:7003")),
            Origin::Home
        );
        assert!(matches!(
            check_origin(&any, &homes, addr("192.168.1.5:7004")),
            Origin::Elsewhere { .. }
        ));
        // Port 0 or no registration: no address to hold it to.
        for cert in [names(&["unset"]), names(&["stranger"])] {
            assert_eq!(
                check_origin(&cert, &homes, addr("127.0.0.1:5")),
                Origin::Unbound
            );
        }
        // A certificate naming two nodes is at home at either's address.
        let both = names(&["w0", "w1"]);
        assert_eq!(
            check_origin(&both, &homes, addr("10.0.0.2:7002")),
            Origin::Home
        );
    }

    #[tokio::test]
    async fn a_connection_racing_its_nodes_registration_waits_for_it() {
        let dir = std::sync::Arc::new(PeerDirectory::default());
        let later = dir.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            later.insert(NodeId(3), "c", Some(addr("127.0.0.1:7003")));
        });
        let c = names(&["c"]);
        assert_eq!(
            dir.origin(&c, addr("127.0.0.1:9999"), Duration::from_secs(30))
                .await,
            Origin::Elsewhere {
                name: "c".into(),
                home: addr("127.0.0.1:7003")
            }
        );
        // An unknown name waits out `wait` and is left to the per-frame checks.
        assert_eq!(
            dir.origin(
                &names(&["x"]),
                addr("127.0.0.1:9999"),
                Duration::from_millis(20)
            )
            .await,
            Origin::Unbound
        );
    }
}
