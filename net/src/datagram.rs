//! UDP datagram sizes: which path-MTU bound a peer gets, and a socket wrapper that keeps
//! quinn's segmentation-offload batches within what the kernel accepts.
//!
//! - quinn advertises `EndpointConfig::max_udp_payload_size` (1472 by default) to the peer,
//!   whose MTU discovery never probes above it: [`endpoint_config`] raises it.
//! - Linux refuses a UDP send above 65535 bytes, GSO batches included (`EMSGSIZE`, dropped
//!   silently by quinn-udp), so [`SegmentCappedSocket`] caps quinn's batch size.

use crate::config::NetConfig;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The most bytes one UDP send (or one GRO receive) carries on Linux.
const MAX_UDP_SEND: usize = 65_535;

/// The largest datagram on a shaped (emulated) link: Ethernet's 1500-byte MTU less IP and
/// UDP headers. The shaper charges a whole send at once, so a 64 KB datagram would hold a
/// 100 Mbit/s link for 5 ms ahead of a high-priority message.
pub const SHAPED_LINK_PAYLOAD: u16 = 1472;

/// Datagrams per offloaded send on a shaped link: 10 x 1472 bytes fit the shaper's
/// default burst ([`crate::shaper::DEFAULT_BURST_BYTES`]).
const SHAPED_LINK_BATCH: usize = 10;

impl NetConfig {
    /// Whether `peer` gets the loopback datagram size (never on a shaped link).
    pub fn is_loopback_peer(&self, peer: SocketAddr) -> bool {
        self.loopback_udp_payload > 0
            && self.mtu_discovery
            && self.shaper.is_none()
            && peer.ip().is_loopback()
    }

    /// The upper bound of MTU discovery for a connection with these settings:
    /// `max_udp_payload`, and at most [`SHAPED_LINK_PAYLOAD`] on a shaped link.
    pub fn udp_payload_bound(&self) -> u16 {
        let bound = self.max_udp_payload.max(self.initial_mtu);
        if self.shaper.is_some() {
            bound.min(SHAPED_LINK_PAYLOAD.max(self.initial_mtu))
        } else {
            bound
        }
    }

    /// The settings of a connection with `peer`: a loopback peer starts at and is bounded
    /// by [`NetConfig::loopback_udp_payload`], without segmentation offload (one ~64 KB
    /// datagram is a whole batch), with [`NetConfig::loopback_initial_window`].
    pub fn for_peer(&self, peer: SocketAddr) -> NetConfig {
        if !self.is_loopback_peer(peer) {
            return self.clone();
        }
        NetConfig {
            max_udp_payload: self.loopback_udp_payload,
            // Loopback's MTU is known: start there rather than probe up to 64 KB per
            // connection just as a job's first messages go out.
            initial_mtu: self.loopback_udp_payload.max(self.initial_mtu),
            segmentation_offload: false,
            initial_window: if self.loopback_initial_window > 0 {
                self.loopback_initial_window
            } else {
                self.initial_window
            },
            ..self.clone()
        }
    }

    /// The largest UDP payload any connection of this node may use.
    pub fn largest_udp_payload(&self) -> u16 {
        let bound = if !self.mtu_discovery {
            0
        } else if self.shaper.is_some() {
            self.udp_payload_bound()
        } else {
            self.max_udp_payload.max(self.loopback_udp_payload)
        };
        bound.max(self.initial_mtu).clamp(1200, 65_527)
    }

    /// Datagrams per offload batch (for non-loopback peers): a batch of the largest
    /// datagrams must fit one send, and on a shaped link the shaper's default burst.
    pub fn offload_batch(&self) -> usize {
        let datagram = usize::from(self.udp_payload_bound().max(1200));
        let batch = (MAX_UDP_SEND / datagram).max(1);
        if self.shaper.is_some() {
            batch.min(SHAPED_LINK_BATCH)
        } else {
            batch
        }
    }
}

/// quinn's endpoint settings: this node advertises the largest payload it may use itself,
/// which bounds a peer's MTU discovery.
pub fn endpoint_config(cfg: &NetConfig) -> quinn::EndpointConfig {
    let mut endpoint = quinn::EndpointConfig::default();
    // In range by construction (largest_udp_payload clamps to 1200..=65527).
    if let Err(e) = endpoint.max_udp_payload_size(cfg.largest_udp_payload()) {
        tracing::warn!(error = %e, "max_udp_payload_size refused; peers keep 1472");
    }
    endpoint
}

/// Asks the kernel for [`NetConfig::socket_buffer_bytes`] of receive buffer and
/// [`NetConfig::socket_send_buffer_bytes`] of send buffer on `socket`, logging what it
/// grants. 0 leaves the kernel's default.
pub fn size_socket_buffers(cfg: &NetConfig, socket: &std::net::UdpSocket) {
    let sock = socket2::SockRef::from(socket);
    let recv = cfg.socket_buffer_bytes;
    let send = cfg.socket_send_buffer_bytes.unwrap_or(recv);
    if recv > 0
        && let Err(e) = sock.set_recv_buffer_size(recv)
    {
        tracing::warn!(error = %e, want = recv, "could not size the UDP receive buffer");
    }
    if send > 0
        && let Err(e) = sock.set_send_buffer_size(send)
    {
        tracing::warn!(error = %e, want = send, "could not size the UDP send buffer");
    }
    tracing::debug!(
        want_recv = recv,
        want_send = send,
        recv = ?sock.recv_buffer_size().ok(),
        send = ?sock.send_buffer_size().ok(),
        "UDP socket buffers (capped by net.core.rmem_max / wmem_max)"
    );
}

/// A quinn endpoint on `socket` with this node's datagram limits, for code that drives
/// quinn itself (benchmarks, tests).
pub fn endpoint(
    cfg: &NetConfig,
    socket: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    size_socket_buffers(cfg, &socket);
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let udp = runtime.wrap_udp_socket(socket)?;
    let udp: Arc<dyn AsyncUdpSocket> = Arc::new(SegmentCappedSocket::new(udp, cfg));
    quinn::Endpoint::new_with_abstract_socket(endpoint_config(cfg), server, udp, runtime)
}

/// A UDP socket whose offload batches and receive buffers fit the datagram sizes in use.
#[derive(Debug)]
pub struct SegmentCappedSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    transmit_segments: usize,
    receive_segments: usize,
}

impl SegmentCappedSocket {
    /// Wraps `inner` for a node with settings `cfg`.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, cfg: &NetConfig) -> Self {
        let largest = usize::from(cfg.largest_udp_payload());
        Self {
            transmit_segments: inner.max_transmit_segments().min(cfg.offload_batch()),
            // quinn sizes receive buffers as payload x segments; a GRO batch is at most 64 KiB.
            receive_segments: inner
                .max_receive_segments()
                .min(MAX_UDP_SEND.div_ceil(largest))
                .max(1),
            inner,
        }
    }
}

impl AsyncUdpSocket for SegmentCappedSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.transmit_segments
    }

    fn max_receive_segments(&self) -> usize {
        self.receive_segments
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_peers_get_the_large_bound_and_others_keep_theirs() {
        let cfg = NetConfig::default();
        let lo = cfg.for_peer(addr("127.0.0.1:9000"));
        assert_eq!(lo.max_udp_payload, cfg.loopback_udp_payload);
        assert!(!lo.segmentation_offload);
        assert_eq!(lo.initial_window, cfg.loopback_initial_window);
        assert_eq!(lo.initial_mtu, cfg.loopback_udp_payload);
        let lo6 = cfg.for_peer(addr("[::1]:9000"));
        assert_eq!(lo6.max_udp_payload, cfg.loopback_udp_payload);
        let lan = cfg.for_peer(addr("10.0.0.7:9000"));
        assert_eq!(lan, cfg);
        let off = NetConfig {
            loopback_udp_payload: 0,
            ..NetConfig::default()
        };
        assert_eq!(off.for_peer(addr("127.0.0.1:9000")), off);
        let pinned = NetConfig {
            mtu_discovery: false,
            ..NetConfig::default()
        };
        assert_eq!(pinned.for_peer(addr("127.0.0.1:9000")), pinned);
    }

    #[test]
    fn offload_batches_fit_one_udp_send() {
        for payload in [1200u16, 1452, 4000, 8952, 16_000, 65_527] {
            let cfg = NetConfig {
                max_udp_payload: payload,
                ..NetConfig::default()
            };
            // Datagrams never fall below the initial MTU.
            let datagram = usize::from(payload.max(cfg.initial_mtu));
            let batch = cfg.offload_batch();
            assert!(batch >= 1);
            assert!(batch * datagram <= MAX_UDP_SEND, "{payload}: {batch}");
            assert!((batch + 1) * datagram > MAX_UDP_SEND);
        }
        assert!(NetConfig::default().largest_udp_payload() >= 65_000);
        let cfg = NetConfig {
            loopback_udp_payload: 0,
            ..NetConfig::default()
        };
        assert_eq!(cfg.largest_udp_payload(), cfg.max_udp_payload);
    }

    #[test]
    fn a_shaped_link_keeps_ethernet_datagrams_and_small_batches() {
        let cfg = NetConfig {
            shaper: Some(crate::ShaperConfig::egress_mbit(100.0)),
            ..NetConfig::default()
        };
        assert!(!cfg.is_loopback_peer(addr("127.0.0.1:9000")));
        assert_eq!(cfg.for_peer(addr("127.0.0.1:9000")), cfg);
        assert_eq!(cfg.udp_payload_bound(), SHAPED_LINK_PAYLOAD);
        assert_eq!(cfg.largest_udp_payload(), SHAPED_LINK_PAYLOAD);
        let batch = cfg.offload_batch() * usize::from(SHAPED_LINK_PAYLOAD);
        assert!(
            batch as u64 <= crate::shaper::DEFAULT_BURST_BYTES,
            "{batch}"
        );
        // Unshaped, the same settings keep the large bounds.
        let plain = NetConfig::default();
        assert_eq!(plain.udp_payload_bound(), plain.max_udp_payload);
        assert!(plain.largest_udp_payload() >= 65_000);
    }

    #[test]
    fn socket_buffers_grow_towards_the_request() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = socket2::SockRef::from(&socket).recv_buffer_size().unwrap();
        let cfg = NetConfig {
            socket_buffer_bytes: before * 4,
            ..NetConfig::default()
        };
        size_socket_buffers(&cfg, &socket);
        let after = socket2::SockRef::from(&socket).recv_buffer_size().unwrap();
        // Linux doubles the request and caps it at rmem_max; either way it does not shrink.
        assert!(after >= before, "{before} -> {after}");
    }

    #[test]
    fn send_buffer_override_sizes_only_the_send_half() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let cfg = NetConfig {
            socket_send_buffer_bytes: Some(8 << 10),
            ..NetConfig::default()
        };
        size_socket_buffers(&cfg, &socket);
        let sock = socket2::SockRef::from(&socket);
        let (recv, send) = (
            sock.recv_buffer_size().unwrap(),
            sock.send_buffer_size().unwrap(),
        );
        // Linux doubles a request (for its bookkeeping); the receive half keeps its size.
        assert!(send <= 4 * (8 << 10), "send buffer {send}");
        assert!(recv > send, "recv {recv} send {send}");
    }
}
