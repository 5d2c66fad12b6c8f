use petrel_messages::{NodeId, Priority};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Defines [`NetStats`] with the counters `reported` (also in [`NetStatsSnapshot`]) and
/// `live` (shaper gauges, only in [`NetStats`]).
macro_rules! net_stats {
    (
        reported { $($(#[doc = $doc:literal])+ $name:ident,)+ }
        live { $($(#[doc = $ldoc:literal])+ $lname:ident = $init:expr,)+ }
    ) => {
        /// Counters of a node's transport. Bad input is counted, logged and survived.
        #[derive(Debug)]
        pub struct NetStats {
            $($(#[doc = $doc])+ pub $name: AtomicU64,)+
            $($(#[doc = $ldoc])+ pub $lname: AtomicU64,)+
            /// When a complete frame last arrived from each peer, stamped on the transport's
            /// own runtime: liveness that compute on the node's thread cannot delay.
            heard: Mutex<HashMap<NodeId, Instant>>,
            /// Traffic per (peer, priority).
            links: Mutex<HashMap<(NodeId, Priority), LinkStats>>,
            /// The certificate names of the peers counted in `disconnected_peers`, in order.
            disconnected: Mutex<Vec<String>>,
        }

        impl Default for NetStats {
            fn default() -> Self {
                Self {
                    $($name: AtomicU64::default(),)+
                    $($lname: AtomicU64::new($init),)+
                    heard: Mutex::default(),
                    links: Mutex::default(),
                    disconnected: Mutex::default(),
                }
            }
        }

        /// The counters of [`NetStats`] at one moment (serializable, for reports).
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct NetStatsSnapshot {
            $($(#[doc = $doc])+ pub $name: u64,)+
            /// Who was disconnected for misbehaving (`disconnected_peers`): the node names
            /// their certificates bind, in order.
            pub disconnected_names: Vec<String>,
        }

        impl NetStats {
            fn counters(&self, disconnected_names: Vec<String>) -> NetStatsSnapshot {
                NetStatsSnapshot {
                    $($name: self.$name.load(Ordering::Relaxed),)+
                    disconnected_names,
                }
            }
        }
    };
}

net_stats! {
    reported {
        /// Frames handed to the wire.
        sent_messages,
        /// Bytes of those frames.
        sent_bytes,
        /// Frames received and decoded.
        received_messages,
        /// Bytes of those frames.
        received_bytes,
        /// Frames that did not decode (dropped).
        malformed_frames,
        /// Frames refused for exceeding `max_message_bytes`.
        oversize_frames,
        /// Streams that ended (or stalled) before their frame was complete.
        truncated_streams,
        /// Connections refused (failed authentication or handshake).
        refused_connections,
        /// Frames that could not be delivered.
        send_failures,
        /// Connections closed because their peer kept stalling frames that held inbound budget.
        disconnected_peers,
        /// Frames refused because their claimed sender is not the node the connection's
        /// certificate names (the connection is closed at the first one).
        impostor_frames,
        /// Messages above `max_message_bytes` sent split into parts.
        split_messages,
        /// Messages striped over several connections (`stripe_connections`).
        striped_messages,
        /// Messages sent through a shared-memory file (`shared_memory_dir`).
        shared_memory_messages,
        /// QUIC connections this node opened to peers (`stripe_connections` per peer).
        opened_connections,
    }
    live {
        /// Times the egress shaper made the socket wait for tokens.
        shaper_egress_waits = 0,
        /// Total time of those waits, nanoseconds.
        shaper_egress_wait_ns = 0,
        /// Times the ingress shaper paused reading for tokens.
        shaper_ingress_waits = 0,
        /// Egress token balance in bytes as `f64` bits (NaN until a shaper reports one).
        shaper_egress_tokens = f64::NAN.to_bits(),
    }
}

/// Traffic between this node and one peer at one priority (for `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Bytes sent to the peer.
    pub sent_bytes: u64,
    /// Frames sent to the peer.
    pub sent_messages: u64,
    /// Bytes received from the peer.
    pub received_bytes: u64,
    /// Frames received from the peer.
    pub received_messages: u64,
}

impl NetStats {
    /// Adds `by` to `counter`.
    pub fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    /// A frame of `bytes` went to `to` at `priority`.
    pub fn sent(&self, to: NodeId, priority: Priority, bytes: u64) {
        Self::bump(&self.sent_messages, 1);
        Self::bump(&self.sent_bytes, bytes);
        if let Ok(mut links) = self.links.lock() {
            let l = links.entry((to, priority)).or_default();
            l.sent_messages += 1;
            l.sent_bytes += bytes;
        }
    }

    /// A frame of `bytes` arrived from `from` at `priority` and decoded, just now.
    pub fn received(&self, from: NodeId, priority: Priority, bytes: u64) {
        Self::bump(&self.received_messages, 1);
        Self::bump(&self.received_bytes, bytes);
        if let Ok(mut links) = self.links.lock() {
            let l = links.entry((from, priority)).or_default();
            l.received_messages += 1;
            l.received_bytes += bytes;
        }
        if let Ok(mut heard) = self.heard.lock() {
            heard.insert(from, Instant::now());
        }
    }

    /// Traffic per (peer, priority), sorted.
    pub fn links(&self) -> Vec<(NodeId, Priority, LinkStats)> {
        let mut out: Vec<_> = match self.links.lock() {
            Ok(l) => l.iter().map(|(&(n, p), s)| (n, p, *s)).collect(),
            Err(_) => Vec::new(),
        };
        out.sort_by_key(|(n, p, _)| (n.0, p.0));
        out
    }

    /// The egress shaper's token balance, if a shaper reported one.
    pub fn shaper_egress_tokens(&self) -> Option<f64> {
        let v = f64::from_bits(self.shaper_egress_tokens.load(Ordering::Relaxed));
        (!v.is_nan()).then_some(v)
    }

    /// A peer whose certificate binds `name` was disconnected for misbehaving.
    pub(crate) fn disconnected(&self, name: &str) {
        Self::bump(&self.disconnected_peers, 1);
        if let Ok(mut names) = self.disconnected.lock() {
            names.push(name.to_string());
        }
    }

    /// When a complete frame last arrived from `peer`.
    pub fn last_heard(&self, peer: NodeId) -> Option<Instant> {
        self.heard.lock().ok().and_then(|h| h.get(&peer).copied())
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> NetStatsSnapshot {
        let names = self.disconnected.lock().map(|n| n.clone());
        self.counters(names.unwrap_or_default())
    }
}
