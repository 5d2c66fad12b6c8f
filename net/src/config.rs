//! Transport knobs, documented here and in README.md; the defaults suit loopback and LAN.

use crate::error::NetError;
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
        let name = clap::ValueEnum::to_possible_value(self).map(|v| v.get_name().to_owned());
        f.write_str(&name.unwrap_or_default())
    }
}

/// Every transport knob, read from `[net]` (unknown keys are rejected by name; values that
/// would stall a cluster by [`NetConfig::validate`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NetConfig {
    /// Largest frame (header + body) on the wire; larger incoming frames are refused after
    /// their 12-byte prefix (`oversize_frames`). Larger messages are split into parts and
    /// rejoined ([`crate::reassembly`]), up to a peer's share of `inbound_buffer_bytes`.
    pub max_message_bytes: usize,
    /// Concurrent incoming streams (one message each) per connection: bounds pinned memory.
    pub max_concurrent_streams: u32,
    /// Per-stream flow-control window (bytes), enough for one big tensor on a fast link.
    pub stream_receive_window: u64,
    /// Per-connection flow-control window (bytes): the most a peer can have unread here.
    pub receive_window: u64,
    /// Per-connection send buffer (bytes) in quinn.
    pub send_window: u64,
    /// Initial UDP payload size. 1200 is always safe; larger cuts per-packet cost.
    pub initial_mtu: u16,
    /// Upper bound for path-MTU discovery (UDP payload bytes).
    pub max_udp_payload: u16,
    /// The UDP payload towards a loopback peer, used from the start instead of discovered:
    /// loopback's MTU is 64 KiB, so per-packet cost falls ~45-fold. 65000 fits IPv4 and IPv6
    /// loopback; such connections send without segmentation offload. 0 = `max_udp_payload`.
    /// With a `shaper`, datagrams of at most
    /// [`SHAPED_LINK_PAYLOAD`](crate::datagram::SHAPED_LINK_PAYLOAD) bytes, 10 per send.
    pub loopback_udp_payload: u16,
    /// Path-MTU discovery on (`true`, default) or off (stay at `initial_mtu`).
    pub mtu_discovery: bool,
    /// Kernel receive and send buffer of the UDP socket (`SO_RCVBUF`/`SO_SNDBUF`), bytes.
    /// The kernel default (~208 KB) holds three 64 KB loopback datagrams and drops the rest.
    /// 0 = leave the kernel's default.
    pub socket_buffer_bytes: usize,
    /// Overrides the send half of [`NetConfig::socket_buffer_bytes`]; unset = same, 0 =
    /// kernel default. The send buffer is UDP's only back-pressure: behind a qdisc smaller
    /// than it, excess is dropped and QUIC pays a loss recovery per drop.
    pub socket_send_buffer_bytes: Option<usize>,
    /// UDP segmentation offload (GSO) where the kernel offers it: at most 10 datagrams
    /// and 65535 bytes per batch.
    pub segmentation_offload: bool,
    /// QUIC ack frequency: ask the peer to acknowledge every this many ack-eliciting
    /// packets instead of every second one. 0 = QUIC's default.
    pub ack_eliciting_threshold: u32,
    /// The longest the peer may delay an acknowledgement (µs; quinn's floor is 1 ms). A
    /// sender with a full congestion window waits for the ack of a lone packet: with QUIC's
    /// 25 ms default a fresh connection's first large message stalls 25 ms. 0 = peer's own.
    pub max_ack_delay_us: u64,
    /// Initial congestion window, bytes. 0 = QUIC's default (12,000 bytes).
    pub initial_window: u64,
    /// `initial_window` towards a loopback peer: loopback has no bottleneck to probe, and
    /// 1 MiB fits the receiving socket's buffer. 0 = `initial_window`.
    pub loopback_initial_window: u64,
    /// Congestion controller: `cubic` (default), `bbr` or `newreno`.
    pub congestion: Congestion,
    /// Keep-alive interval; keeps idle connections (and NAT bindings) open.
    pub keep_alive_ms: u64,
    /// A connection with no traffic for this long is closed.
    pub idle_timeout_ms: u64,
    /// Give up connecting to a peer after this long.
    pub connect_timeout_ms: u64,
    /// Bytes handed to QUIC streams per peer at once; the rest waits in the priority outbox.
    /// A message outranking everything in flight is always admitted.
    pub outbox_inflight_bytes: usize,
    /// Frames buffered between transport and node; when full, flow control pushes back.
    pub inbound_queue: usize,
    /// Bytes of received frames the transport may hold at once; a frame is read only once
    /// its size fits, so this bounds the memory peers can make this node spend. Raised to
    /// `max_message_bytes` if smaller.
    pub inbound_buffer_bytes: usize,
    /// A frame stalled this long is abandoned, so a stalled sender cannot pin memory.
    pub frame_timeout_ms: u64,
    /// Messages between two nodes at one priority arrive in order; a gap this long is skipped.
    pub reorder_timeout_ms: u64,
    /// Threads of the transport's own tokio runtime. 0 = run on the caller's runtime (no
    /// thread hop per frame, but heartbeats wait while a handler computes).
    pub threads: usize,
    /// QUIC connections per peer and direction. quinn drives a connection from one task
    /// (one core), so frames of at least `stripe_min_bytes` are striped over these
    /// ([`crate::reassembly`]). 1 = no striping. Ignored with a `shaper` (the wire is the
    /// limit, and stream priorities must see all traffic on one connection).
    pub stripe_connections: usize,
    /// Smallest frame striped over `stripe_connections`.
    pub stripe_min_bytes: usize,
    /// Shared memory for co-located nodes (off when unset): a frame of at least
    /// `shared_memory_min_bytes` to a loopback peer goes through a mapped slot file here
    /// (use a tmpfs) and only a control frame over QUIC ([`crate::shm`]). Every node of
    /// the host must set the same directory. Ignored with a `shaper`.
    pub shared_memory_dir: Option<std::path::PathBuf>,
    /// Smallest frame sent through `shared_memory_dir`.
    pub shared_memory_min_bytes: usize,
    /// Optional bandwidth shaper for this node's traffic.
    pub shaper: Option<ShaperConfig>,
    /// QUIC fair queuing among equal-priority streams (default); `false` sends them FIFO.
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

/// The most transport threads any node gets, whatever its core count.
pub const MAX_THREADS: usize = 1024;
/// Transport threads allowed per core: beyond this they only contend.
pub const THREADS_PER_CORE: usize = 64;
/// The largest flow-control window or send buffer (1 TiB, QUIC windows are 62-bit).
pub const MAX_WINDOW: u64 = 1 << 40;

impl NetConfig {
    /// Checks the knobs whose wrong values leave a cluster that never forms.
    pub fn validate(&self) -> Result<(), NetError> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        self.validate_for(cores)
    }

    /// [`NetConfig::validate`] for a machine of `cores` cores.
    pub fn validate_for(&self, cores: usize) -> Result<(), NetError> {
        fn check<T: PartialOrd + std::fmt::Display>(
            key: &'static str,
            value: T,
            min: T,
            max: Option<T>,
            why: &str,
        ) -> Result<(), NetError> {
            let rule = match max {
                _ if value < min => format!("must be at least {min}"),
                Some(max) if value > max => format!("must be at most {max}{why}"),
                _ => return Ok(()),
            };
            let value = value.to_string();
            Err(NetError::Config { key, value, rule })
        }
        // A frame must hold an envelope header plus some body; parts are cut to this size.
        let max_message = self.max_message_bytes;
        check("max_message_bytes", max_message, 1024, Some(1 << 30), "")?;
        let streams = self.max_concurrent_streams;
        check("max_concurrent_streams", streams, 1, Some(1 << 20), "")?;
        for (key, value) in [
            ("stream_receive_window", self.stream_receive_window),
            ("receive_window", self.receive_window),
            ("send_window", self.send_window),
        ] {
            check(key, value, 1024, Some(MAX_WINDOW), "")?;
        }
        // With no credit only a frame that outranks everything in flight would ever leave.
        let outbox = self.outbox_inflight_bytes;
        check("outbox_inflight_bytes", outbox, 1024, None, "")?;
        check("inbound_queue", self.inbound_queue, 1, Some(1 << 20), "")?;
        let max_threads = MAX_THREADS.min(THREADS_PER_CORE.saturating_mul(cores.max(1)));
        let why = format!(" ({THREADS_PER_CORE} per core on {cores} cores, at most {MAX_THREADS})");
        check("threads", self.threads, 0, Some(max_threads), &why)?;
        let stripes = self.stripe_connections;
        check("stripe_connections", stripes, 1, Some(64), "")?;
        for (key, value) in [
            ("keep_alive_ms", self.keep_alive_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("frame_timeout_ms", self.frame_timeout_ms),
            ("reorder_timeout_ms", self.reorder_timeout_ms),
        ] {
            check(key, value, 1, None, "")?;
        }
        // Keep-alives are what keep an idle connection open.
        if self.keep_alive_ms >= self.idle_timeout_ms {
            let idle = self.idle_timeout_ms;
            let rule = format!("must be less than idle_timeout_ms ({idle})");
            let value = self.keep_alive_ms.to_string();
            return Err(NetError::Config {
                key: "keep_alive_ms",
                value,
                rule,
            });
        }
        Ok(())
    }
}

/// Emulates a network link at the node's UDP socket: egress and ingress token buckets and
/// added latency on received packets. Egress limiting back-pressures QUIC, so its stream
/// priorities decide who uses the bandwidth, as on a real bottleneck link.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ShaperConfig {
    /// Egress limit in bytes per second (0 = unlimited).
    pub egress_bytes_per_s: u64,
    /// Ingress limit in bytes per second (0 = unlimited).
    pub ingress_bytes_per_s: u64,
    /// Added latency in milliseconds on every received packet (0 = none).
    pub latency_ms: u64,
    /// Jitter: each received packet is held a further uniform `0..=jitter_ms` ms, in order.
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
            ..Self::default()
        }
    }

    /// A link of `mbit` Mbit/s limited at the sender only (each direction shaped once).
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
