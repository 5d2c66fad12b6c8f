//! Transport knobs. Every field is documented here and in README.md; the defaults run on a
//! laptop and were chosen for throughput on loopback and LAN links.

use serde::{Deserialize, Serialize};

/// QUIC congestion controller of every connection (quinn's implementations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Congestion {
    /// CUBIC (RFC 8312), quinn's default.
    #[default]
    Cubic,
    /// BBR (experimental in quinn).
    Bbr,
    /// NewReno (RFC 6582).
    #[value(name = "newreno")]
    NewReno,
}

impl std::fmt::Display for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
            Congestion::NewReno => "newreno",
        })
    }
}

/// Every transport knob, read from `[net]` (an unknown key is rejected, naming it; a value
/// that would stall a cluster by [`NetConfig::validate`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NetConfig {
    /// Largest frame (header + body) on the wire. Larger incoming frames are refused after
    /// reading their 12-byte prefix and counted as `oversize_frames`. Larger messages are
    /// split into parts by the sender and joined again by the receiver
    /// ([`crate::reassembly`]), up to a peer's share of `inbound_buffer_bytes`.
    pub max_message_bytes: usize,
    /// Concurrent incoming unidirectional streams per connection (one message per stream).
    /// Bounds a peer's parallel in-flight messages, and so the memory it can pin.
    pub max_concurrent_streams: u32,
    /// Per-stream flow-control window (bytes). Large enough for one big tensor to flow
    /// without waiting for window updates on a fast link.
    pub stream_receive_window: u64,
    /// Per-connection flow-control window (bytes): the most a peer can have unread here.
    pub receive_window: u64,
    /// Per-connection send buffer (bytes) in quinn.
    pub send_window: u64,
    /// Initial UDP payload size. 1200 is always safe; on loopback and jumbo-frame LANs a
    /// larger value cuts per-packet crypto and syscall cost.
    pub initial_mtu: u16,
    /// Upper bound for path-MTU discovery (UDP payload bytes). Loopback takes 65527; the
    /// default stays below 9000-byte jumbo frames. Set `mtu_discovery = false` to pin
    /// `initial_mtu`.
    pub max_udp_payload: u16,
    /// The UDP payload towards a peer on a loopback address (a node on the same host),
    /// where connections start instead of discovering it: loopback's MTU is 64 KiB, so one datagram carries ~45 times what an
    /// Ethernet one does and the per-packet cost (crypto calls, syscalls, acks) falls
    /// accordingly. 65000 fits both IPv4 (65507) and IPv6 loopback (65488). Such
    /// connections send without segmentation offload (one datagram is already as large as
    /// an offloaded batch may be). 0 = loopback peers get `max_udp_payload` like others.
    /// A node with a `shaper` emulates an Ethernet link instead: datagrams of at most
    /// [`SHAPED_LINK_PAYLOAD`](crate::datagram::SHAPED_LINK_PAYLOAD) bytes, 10 per send.
    pub loopback_udp_payload: u16,
    /// Path-MTU discovery on (`true`, default) or off (stay at `initial_mtu`).
    pub mtu_discovery: bool,
    /// Kernel receive and send buffer of the node's UDP socket (`SO_RCVBUF`/`SO_SNDBUF`),
    /// bytes. The kernel's default (~208 KB) holds three 64 KB loopback datagrams, and
    /// every datagram beyond it is dropped and resent after a loss timeout; the kernel caps
    /// the request at `net.core.rmem_max`/`wmem_max`. 0 = leave the kernel's default.
    pub socket_buffer_bytes: usize,
    /// Overrides the send half of [`NetConfig::socket_buffer_bytes`] (`SO_SNDBUF`), bytes;
    /// unset = the same as the receive buffer, 0 = leave the kernel's default. A UDP
    /// socket's send buffer is its only back-pressure from the kernel: behind a slow
    /// interface whose queue (qdisc) holds less than the send buffer, the qdisc drops the
    /// excess instead of making the sender wait, and QUIC pays each drop with a loss
    /// recovery. Loopback has no such queue, so only the receive side needs the 4 MiB.
    pub socket_send_buffer_bytes: Option<usize>,
    /// UDP segmentation offload (GSO): one `sendmsg` hands the kernel many packets of a
    /// connection at once, where the kernel offers it (Linux); quinn falls back to one
    /// packet per call elsewhere. A batch holds at most 10 datagrams and never more than
    /// one UDP send may carry (65535 bytes: 7 datagrams of 8952 bytes).
    pub segmentation_offload: bool,
    /// QUIC ack frequency (draft-ietf-quic-ack-frequency, which quinn implements on both
    /// ends): ask the peer to acknowledge only every this many ack-eliciting packets
    /// instead of every second one, which saves the receiver and the sender work per
    /// packet on a bulk transfer. 0 leaves QUIC's default (every second packet).
    pub ack_eliciting_threshold: u32,
    /// The longest the peer may hold back an acknowledgement, in microseconds (QUIC ack
    /// frequency, asked of the peer at the handshake; quinn does not go below 1 ms). A
    /// receiver acknowledges every second packet at once, but a lone packet only when this
    /// delay runs out, and a sender whose congestion window is full waits for that
    /// acknowledgement: with QUIC's 25 ms default, a fresh connection's first large message
    /// stalls 25 ms after its first datagram (the Lasso's first rounds). 0
    /// leaves the peer's own (25 ms).
    pub max_ack_delay_us: u64,
    /// The congestion window a connection starts with, in bytes; slow start grows it from
    /// there. 0 = QUIC's default (quinn's: ten 1,200-byte datagrams, 12,000 bytes), right
    /// where the path is unknown.
    pub initial_window: u64,
    /// `initial_window` towards a peer on a loopback address (see `loopback_udp_payload`).
    /// QUIC's default is a fifth of one 65 KB loopback datagram, so a fresh connection
    /// sent a 400 KB message one datagram per acknowledgement; loopback has no bottleneck to
    /// probe, and 1 MiB fits the receiving socket's buffer (`socket_buffer_bytes`). 0 =
    /// `initial_window`.
    pub loopback_initial_window: u64,
    /// Congestion controller: `cubic` (default), `bbr` or `newreno`; any other value is
    /// rejected when the settings are read.
    pub congestion: Congestion,
    /// Keep-alive interval; keeps idle connections (and NAT bindings) open.
    pub keep_alive_ms: u64,
    /// A connection with no traffic for this long is closed.
    pub idle_timeout_ms: u64,
    /// Give up connecting to a peer after this long.
    pub connect_timeout_ms: u64,
    /// Bytes handed to QUIC streams per peer at once. Messages beyond it wait in the
    /// priority outbox, where a later high-priority message can still overtake them; a
    /// message with higher priority than everything in flight is always admitted.
    pub outbox_inflight_bytes: usize,
    /// Frames buffered between the transport and the node runtime; when full, reading
    /// stops and QUIC flow control pushes back on senders.
    pub inbound_queue: usize,
    /// Bytes of received frames the transport may hold at once (partly read, or waiting for
    /// the node). A frame is only read once its size fits; until then QUIC flow control
    /// holds the sender back. Bounds the memory peers can make this node spend. Raised to
    /// `max_message_bytes` if smaller.
    pub inbound_buffer_bytes: usize,
    /// A frame whose bytes stop arriving for this long is abandoned (its stream stopped,
    /// its buffer released), so a stalled or malicious sender cannot pin memory.
    pub frame_timeout_ms: u64,
    /// Messages between two nodes at one priority are delivered in order. If one is missing
    /// for this long (its stream failed), the ones behind it are delivered anyway.
    pub reorder_timeout_ms: u64,
    /// Threads of the transport's own tokio runtime (QUIC crypto and I/O). 0 = run on the
    /// caller's runtime (a node's own thread): no thread is woken between a frame and its
    /// handler, but the node's heartbeats then wait while one of its handlers computes.
    pub threads: usize,
    /// QUIC connections per peer and direction. quinn drives each connection from one
    /// task, so one connection's crypto and packet work use one core at most; with more
    /// connections (and `threads` > 1) a frame of at least `stripe_min_bytes` is striped:
    /// cut into parts ([`crate::reassembly`]) that travel on different connections at once
    /// and are joined, in lane order, by the receiver. 1 = one connection, no striping.
    /// Ignored with a `shaper`: on a bottleneck link the wire, not a core, is the limit,
    /// and QUIC's stream priorities must see all of a peer's traffic on one connection.
    pub stripe_connections: usize,
    /// Smallest frame striped over `stripe_connections` (smaller ones gain nothing from a
    /// second core and would only pay the part headers).
    pub stripe_min_bytes: usize,
    /// Shared memory for co-located nodes (off when unset): a frame of at least
    /// `shared_memory_min_bytes` to a peer on a loopback address is copied into a reusable
    /// slot (a mapped file in this directory; use a tmpfs, e.g. `/dev/shm`) and only a small
    /// control frame goes over QUIC ([`crate::shm`]). Every node of the host must set the
    /// same directory.
    /// Ignored with a `shaper` (an emulated link must carry the bytes).
    pub shared_memory_dir: Option<std::path::PathBuf>,
    /// Smallest frame sent through `shared_memory_dir` (smaller ones are cheap over QUIC).
    pub shared_memory_min_bytes: usize,
    /// Optional bandwidth shaper for this node's traffic.
    pub shaper: Option<ShaperConfig>,
    /// QUIC fair queuing among streams of equal priority (quinn's default, `true`): equal-
    /// priority messages share the link round-robin and finish together. `false` sends them
    /// in the order they were written (FIFO on the wire), so a stream of equal-priority
    /// messages completes one by one and a receiver can start on the first ones early.
    pub send_fairness: bool,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: 64 << 20,
            max_concurrent_streams: 256,
            stream_receive_window: 16 << 20,
            receive_window: 64 << 20,
            send_window: 64 << 20,
            initial_mtu: 1452,
            max_udp_payload: 8952,
            loopback_udp_payload: 65_000,
            mtu_discovery: true,
            socket_buffer_bytes: 4 << 20,
            socket_send_buffer_bytes: None,
            segmentation_offload: true,
            ack_eliciting_threshold: 0,
            max_ack_delay_us: 1000,
            initial_window: 0,
            loopback_initial_window: 1 << 20,
            congestion: Congestion::Cubic,
            keep_alive_ms: 1000,
            idle_timeout_ms: 30_000,
            connect_timeout_ms: 5_000,
            outbox_inflight_bytes: 8 << 20,
            inbound_queue: 1024,
            inbound_buffer_bytes: 256 << 20,
            frame_timeout_ms: 30_000,
            reorder_timeout_ms: 5_000,
            threads: 1,
            stripe_connections: 1,
            stripe_min_bytes: 1 << 20,
            shared_memory_dir: None,
            shared_memory_min_bytes: 256 << 10,
            shaper: None,
            send_fairness: true,
        }
    }
}

/// A `[net]` value outside its range, named as in the settings file, e.g. `[net]
/// max_message_bytes = 0: must be at least 1024`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[net] {key} = {value}: {rule}")]
pub struct NetConfigError {
    /// The key, as in `[net]`.
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// What the value must be.
    pub rule: String,
}

/// The most transport threads any node gets, whatever its core count.
pub const MAX_THREADS: usize = 1024;
/// Transport threads allowed per core: beyond this they only contend.
pub const THREADS_PER_CORE: usize = 64;
/// The largest flow-control window or send buffer (1 TiB): QUIC encodes windows as
/// 62-bit integers, and anything near this is a typo, not a tuning.
pub const MAX_WINDOW: u64 = 1 << 40;

impl NetConfig {
    /// Checks the knobs whose wrong values do not fail on their own but leave a cluster
    /// that never forms or a node that never starts (a zero window or stream limit stalls
    /// every frame; 100 000 transport threads exhaust the machine). Run before any node
    /// starts, with the machine's core count.
    pub fn validate(&self) -> Result<(), NetConfigError> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        self.validate_for(cores)
    }

    /// [`NetConfig::validate`] for a machine of `cores` cores.
    pub fn validate_for(&self, cores: usize) -> Result<(), NetConfigError> {
        fn at_least<T: PartialOrd + std::fmt::Display>(
            key: &'static str,
            value: T,
            min: T,
        ) -> Result<(), NetConfigError> {
            if value < min {
                return Err(NetConfigError {
                    key,
                    value: value.to_string(),
                    rule: format!("must be at least {min}"),
                });
            }
            Ok(())
        }
        fn at_most<T: PartialOrd + std::fmt::Display>(
            key: &'static str,
            value: T,
            max: T,
            why: &str,
        ) -> Result<(), NetConfigError> {
            if value > max {
                return Err(NetConfigError {
                    key,
                    value: value.to_string(),
                    rule: format!("must be at most {max}{why}"),
                });
            }
            Ok(())
        }
        // A frame must hold an envelope header plus some body; parts are cut to this size.
        at_least("max_message_bytes", self.max_message_bytes, 1024)?;
        at_most("max_message_bytes", self.max_message_bytes, 1 << 30, "")?;
        at_least("max_concurrent_streams", self.max_concurrent_streams, 1)?;
        at_most(
            "max_concurrent_streams",
            self.max_concurrent_streams,
            1 << 20,
            "",
        )?;
        for (key, value) in [
            ("stream_receive_window", self.stream_receive_window),
            ("receive_window", self.receive_window),
            ("send_window", self.send_window),
        ] {
            at_least(key, value, 1024)?;
            at_most(key, value, MAX_WINDOW, "")?;
        }
        // With no credit only a frame that outranks everything in flight would ever leave.
        at_least("outbox_inflight_bytes", self.outbox_inflight_bytes, 1024)?;
        at_least("inbound_queue", self.inbound_queue, 1)?;
        at_most("inbound_queue", self.inbound_queue, 1 << 20, "")?;
        let max_threads = MAX_THREADS.min(THREADS_PER_CORE.saturating_mul(cores.max(1)));
        at_most(
            "threads",
            self.threads,
            max_threads,
            &format!(" ({THREADS_PER_CORE} per core on {cores} cores, at most {MAX_THREADS})"),
        )?;
        at_least("stripe_connections", self.stripe_connections, 1)?;
        at_most("stripe_connections", self.stripe_connections, 64, "")?;
        for (key, value) in [
            ("keep_alive_ms", self.keep_alive_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("frame_timeout_ms", self.frame_timeout_ms),
            ("reorder_timeout_ms", self.reorder_timeout_ms),
        ] {
            at_least(key, value, 1)?;
        }
        // Keep-alives are what keep an idle connection open.
        if self.keep_alive_ms >= self.idle_timeout_ms {
            return Err(NetConfigError {
                key: "keep_alive_ms",
                value: self.keep_alive_ms.to_string(),
                rule: format!(
                    "must be less than idle_timeout_ms ({})",
                    self.idle_timeout_ms
                ),
            });
        }
        Ok(())
    }
}

/// Emulates a network link at the node's UDP socket: egress and ingress rate limits (token
/// buckets) and an added one-way latency on received packets. Egress limiting applies
/// back-pressure to QUIC (the socket reports "not writable"), so QUIC's stream priorities
/// decide which data uses the limited bandwidth, as on a real bottleneck link.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ShaperConfig {
    /// Egress limit in bytes per second (0 = unlimited).
    pub egress_bytes_per_s: u64,
    /// Ingress limit in bytes per second (0 = unlimited).
    pub ingress_bytes_per_s: u64,
    /// Added latency in milliseconds on every received packet (0 = none).
    pub latency_ms: u64,
    /// Jitter: each received packet is held a further uniform `0..=jitter_ms` ms (seeded per
    /// socket), without reordering (a packet never leaves before the one received before
    /// it, as on a link whose queue delay varies).
    pub jitter_ms: u64,
    /// Token bucket depth in bytes (0 = 16 KiB): how much may leave at once after idle.
    pub burst_bytes: u64,
}

impl ShaperConfig {
    /// A symmetric link of `mbit` megabits per second.
    pub fn mbit(mbit: f64) -> Self {
        let bps = (mbit * 1e6 / 8.0) as u64;
        Self {
            egress_bytes_per_s: bps,
            ingress_bytes_per_s: bps,
            latency_ms: 0,
            jitter_ms: 0,
            burst_bytes: 0,
        }
    }

    /// A link of `mbit` megabits per second limited at the sender only: with every node
    /// configured this way, each direction of a full-duplex link is shaped exactly once.
    pub fn egress_mbit(mbit: f64) -> Self {
        Self {
            ingress_bytes_per_s: 0,
            ..Self::mbit(mbit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        NetConfig::default().validate_for(1).unwrap();
        NetConfig::default().validate().unwrap();
    }

    #[test]
    fn knobs_that_would_stall_a_cluster_are_refused_naming_the_key() {
        let cases: Vec<(NetConfig, &str)> = vec![
            (
                NetConfig {
                    max_message_bytes: 0,
                    ..NetConfig::default()
                },
                "[net] max_message_bytes = 0: must be at least 1024",
            ),
            (
                NetConfig {
                    max_concurrent_streams: 0,
                    ..NetConfig::default()
                },
                "[net] max_concurrent_streams = 0: must be at least 1",
            ),
            (
                NetConfig {
                    receive_window: 0,
                    ..NetConfig::default()
                },
                "[net] receive_window = 0: must be at least 1024",
            ),
            (
                NetConfig {
                    stream_receive_window: u64::MAX,
                    ..NetConfig::default()
                },
                "[net] stream_receive_window = 18446744073709551615: must be at most",
            ),
            (
                NetConfig {
                    outbox_inflight_bytes: 0,
                    ..NetConfig::default()
                },
                "[net] outbox_inflight_bytes = 0",
            ),
            (
                NetConfig {
                    stripe_connections: 0,
                    ..NetConfig::default()
                },
                "[net] stripe_connections = 0",
            ),
            (
                NetConfig {
                    keep_alive_ms: 60_000,
                    ..NetConfig::default()
                },
                "[net] keep_alive_ms = 60000: must be less than idle_timeout_ms (30000)",
            ),
        ];
        for (cfg, want) in cases {
            let e = cfg.validate_for(4).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e} does not start with {want}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn transport_threads_are_bounded_by_the_cores_and_a_ceiling() {
        let threads = |n| NetConfig {
            threads: n,
            ..NetConfig::default()
        };
        threads(0).validate_for(2).unwrap();
        threads(128).validate_for(2).unwrap();
        let e = threads(129).validate_for(2).unwrap_err().to_string();
        assert!(
            e.starts_with("[net] threads = 129: must be at most 128"),
            "{e}"
        );
        threads(1024).validate_for(64).unwrap();
        let e = threads(100_000).validate_for(1000).unwrap_err().to_string();
        assert!(
            e.starts_with("[net] threads = 100000: must be at most 1024"),
            "{e}"
        );
    }

    #[test]
    fn congestion_reads_its_three_names_and_rejects_others() {
        #[derive(Debug, Deserialize)]
        struct Wrap {
            c: Congestion,
        }
        for (text, want) in [
            ("cubic", Congestion::Cubic),
            ("bbr", Congestion::Bbr),
            ("newreno", Congestion::NewReno),
        ] {
            let got: Wrap = serde_json::from_str(&format!("{{\"c\": \"{text}\"}}")).unwrap();
            assert_eq!(got.c, want);
            assert_eq!(want.to_string(), text);
        }
        let bad = serde_json::from_str::<Wrap>("{\"c\": \"reno\"}").unwrap_err();
        assert!(bad.to_string().contains("newreno"), "{bad}");
    }
}
