//! Bandwidth and latency emulation at the UDP socket. [`TokenBucket`] is the sans-I/O rate
//! limiter; [`ShapedSocket`] wraps quinn's socket and reports "not writable" until there
//! are tokens, so data waits in QUIC's stream buffers where priorities decide what goes
//! next; on ingress it reads only with tokens and can hold packets for added latency.

use crate::config::ShaperConfig;
use crate::stats::NetStats;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Bucket depth when none is configured: a few packets, so idle gives no unrealistic head start.
pub const DEFAULT_BURST_BYTES: u64 = 16 * 1024;

/// A token bucket that may go into debt by one send: a send is allowed while the balance
/// is positive and charged whole, so the long-run rate is exact without splitting packets.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    balance: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(bytes_per_s: u64, burst_bytes: u64, now: Instant) -> Self {
        let burst = if burst_bytes == 0 {
            DEFAULT_BURST_BYTES as f64
        } else {
            burst_bytes as f64
        };
        Self {
            rate: bytes_per_s as f64,
            burst,
            balance: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.balance = (self.balance + dt * self.rate).min(self.burst);
    }

    /// How long until a send is allowed (zero if now).
    pub fn wait_time(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.balance > 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((-self.balance + 1.0) / self.rate)
        }
    }

    /// Charges `bytes` if a send is allowed now; returns false otherwise.
    pub fn try_take(&mut self, now: Instant, bytes: usize) -> bool {
        self.refill(now);
        if self.balance > 0.0 {
            self.balance -= bytes as f64;
            true
        } else {
            false
        }
    }

    /// Tokens left in bytes (negative: in debt for the last send), as of the last refill.
    pub fn balance(&self) -> f64 {
        self.balance
    }

    /// Charges `bytes` unconditionally (ingress: the packet is already here).
    pub fn charge(&mut self, now: Instant, bytes: usize) {
        self.refill(now);
        self.balance -= bytes as f64;
    }
}

struct Delayed {
    release: Instant,
    data: Vec<u8>,
    meta: RecvMeta,
}

struct IngressState {
    bucket: Option<TokenBucket>,
    delayed: VecDeque<Delayed>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    scratch: Vec<u8>,
    /// xorshift64* state of the jitter draws.
    jitter_rng: u64,
}

impl IngressState {
    /// When a packet received at `now` is handed over: after latency plus jitter, never
    /// before the packet received before it.
    fn release_at(&mut self, now: Instant, latency: Duration, jitter: Duration) -> Instant {
        let mut at = now + latency;
        if !jitter.is_zero() {
            let mut x = self.jitter_rng;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.jitter_rng = x;
            let u = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
            at += jitter.mul_f64(u);
        }
        self.delayed.back().map_or(at, |last| at.max(last.release))
    }
}

/// A UDP socket with an egress/ingress rate limit and an added receive latency.
pub struct ShapedSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    egress: Option<Arc<Mutex<TokenBucket>>>,
    ingress: Mutex<IngressState>,
    latency: Duration,
    /// Waits and the token balance are counted here (the node's `/metrics`).
    stats: Arc<NetStats>,
    jitter: Duration,
}

impl fmt::Debug for ShapedSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShapedSocket")
            .field("latency", &self.latency)
            .finish()
    }
}

impl ShapedSocket {
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, cfg: &ShaperConfig, stats: Arc<NetStats>) -> Self {
        let now = Instant::now();
        let egress = (cfg.egress_bytes_per_s > 0).then(|| {
            Arc::new(Mutex::new(TokenBucket::new(
                cfg.egress_bytes_per_s,
                cfg.burst_bytes,
                now,
            )))
        });
        let ingress_bucket = (cfg.ingress_bytes_per_s > 0)
            .then(|| TokenBucket::new(cfg.ingress_bytes_per_s, cfg.burst_bytes, now));
        Self {
            inner,
            egress,
            ingress: Mutex::new(IngressState {
                bucket: ingress_bucket,
                delayed: VecDeque::new(),
                timer: None,
                scratch: Vec::new(),
                jitter_rng: 0x9E37_79B9_7F4A_7C15 ^ (cfg.jitter_ms << 17) | 1,
            }),
            latency: Duration::from_millis(cfg.latency_ms),
            stats,
            jitter: Duration::from_millis(cfg.jitter_ms),
        }
    }
}

struct ShapedPoller {
    inner: Pin<Box<dyn UdpPoller>>,
    egress: Option<Arc<Mutex<TokenBucket>>>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    stats: Arc<NetStats>,
    /// When the current wait for tokens began (a wait spans several polls).
    waiting_since: Option<Instant>,
}

impl fmt::Debug for ShapedPoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShapedPoller")
    }
}

impl UdpPoller for ShapedPoller {
    fn poll_writable(mut self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        if let Some(bucket) = &self.egress {
            let wait = match bucket.lock() {
                Ok(mut b) => b.wait_time(Instant::now()),
                Err(_) => Duration::ZERO,
            };
            if !wait.is_zero() {
                if self.waiting_since.is_none() {
                    self.waiting_since = Some(Instant::now());
                    NetStats::bump(&self.stats.shaper_egress_waits, 1);
                }
                let deadline = tokio::time::Instant::now() + wait;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                timer.as_mut().reset(deadline);
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        if let Some(since) = self.waiting_since.take() {
            let waited = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
            NetStats::bump(&self.stats.shaper_egress_wait_ns, waited);
        }
        self.inner.as_mut().poll_writable(cx)
    }
}

impl AsyncUdpSocket for ShapedSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(ShapedPoller {
            inner: self.inner.clone().create_io_poller(),
            egress: self.egress.clone(),
            timer: None,
            stats: self.stats.clone(),
            waiting_since: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        if let Some(bucket) = &self.egress {
            let allowed = bucket
                .lock()
                .map(|mut b| {
                    let ok = b.try_take(Instant::now(), transmit.contents.len());
                    let tokens = &self.stats.shaper_egress_tokens;
                    tokens.store(b.balance().to_bits(), std::sync::atomic::Ordering::Relaxed);
                    ok
                })
                .unwrap_or(true);
            if !allowed {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let Ok(mut st) = self.ingress.lock() else {
            return self.inner.poll_recv(cx, bufs, meta);
        };
        if st.bucket.is_none() && self.latency.is_zero() && self.jitter.is_zero() {
            drop(st);
            return self.inner.poll_recv(cx, bufs, meta);
        }
        let now = Instant::now();
        // Pull what the kernel has while the ingress budget allows, into the delay line.
        loop {
            if let Some(b) = st.bucket.as_mut() {
                let wait = b.wait_time(now);
                if !wait.is_zero() {
                    let until = tokio::time::Instant::now() + wait;
                    NetStats::bump(&self.stats.shaper_ingress_waits, 1);
                    if st.delayed.is_empty() {
                        let timer = st
                            .timer
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
                        timer.as_mut().reset(until);
                        if timer.as_mut().poll(cx).is_ready() {
                            continue;
                        }
                    }
                    break;
                }
            }
            let mut one_meta = [RecvMeta::default()];
            let cap = bufs.first().map_or(65536, |b| b.len());
            st.scratch.resize(cap, 0);
            let mut scratch = std::mem::take(&mut st.scratch);
            let polled = {
                let mut slice = [IoSliceMut::new(&mut scratch)];
                self.inner.poll_recv(cx, &mut slice, &mut one_meta)
            };
            match polled {
                Poll::Ready(Ok(n)) if n > 0 => {
                    let m = one_meta[0];
                    if let Some(b) = st.bucket.as_mut() {
                        b.charge(now, m.len);
                    }
                    let release = st.release_at(now, self.latency, self.jitter);
                    st.delayed.push_back(Delayed {
                        release,
                        data: scratch[..m.len].to_vec(),
                        meta: m,
                    });
                    st.scratch = scratch;
                }
                Poll::Ready(Err(e)) => {
                    st.scratch = scratch;
                    return Poll::Ready(Err(e));
                }
                _ => {
                    st.scratch = scratch;
                    break;
                }
            }
        }
        // Hand over what is due.
        let mut delivered = 0;
        while delivered < bufs.len().min(meta.len()) {
            let due = st.delayed.front().is_some_and(|d| d.release <= now);
            if !due {
                break;
            }
            let Some(d) = st.delayed.pop_front() else {
                break;
            };
            let buf = &mut bufs[delivered];
            if buf.len() < d.data.len() {
                tracing::warn!(
                    len = d.data.len(),
                    cap = buf.len(),
                    "shaper dropped a datagram larger than the receive buffer"
                );
                continue;
            }
            buf[..d.data.len()].copy_from_slice(&d.data);
            meta[delivered] = d.meta;
            delivered += 1;
        }
        if delivered > 0 {
            return Poll::Ready(Ok(delivered));
        }
        if let Some(front) = st.delayed.front() {
            let until = tokio::time::Instant::from_std(front.release);
            let timer = st
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
            timer.as_mut().reset(until);
            if timer.as_mut().poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        // Receive buffers must hold the inner socket's GRO batches.
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_delays_within_bounds_without_reordering() {
        let mut st = IngressState {
            bucket: None,
            delayed: VecDeque::new(),
            timer: None,
            scratch: Vec::new(),
            jitter_rng: 12345,
        };
        let t0 = Instant::now();
        let (lat, jit) = (Duration::from_millis(5), Duration::from_millis(10));
        let mut spread = Vec::new();
        for k in 0..200u64 {
            let now = t0 + Duration::from_micros(100 * k);
            let at = st.release_at(now, lat, jit);
            assert!(at >= now + lat, "at least the latency");
            if let Some(last) = st.delayed.back() {
                assert!(at >= last.release, "no reordering");
            }
            spread.push((at - now).as_micros());
            st.delayed.push_back(Delayed {
                release: at,
                data: Vec::new(),
                meta: RecvMeta::default(),
            });
        }
        let (lo, hi) = (spread.iter().min().unwrap(), spread.iter().max().unwrap());
        assert!(hi - lo > 2000, "delays vary: {lo}..{hi} us");
        // Without jitter, exactly the latency.
        let mut plain = IngressState {
            bucket: None,
            delayed: VecDeque::new(),
            timer: None,
            scratch: Vec::new(),
            jitter_rng: 1,
        };
        assert_eq!(plain.release_at(t0, lat, Duration::ZERO), t0 + lat);
    }

    #[test]
    fn bucket_enforces_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 100, t0);
        assert!(b.try_take(t0, 600)); // burst allows one send into debt
        assert!(!b.try_take(t0, 10));
        let w = b.wait_time(t0);
        assert!(
            w >= Duration::from_millis(500) && w <= Duration::from_millis(502),
            "{w:?}"
        );
        assert!(b.try_take(t0 + Duration::from_millis(502), 10));
    }

    #[test]
    fn long_run_rate_is_exact() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1_000_000, 0, t0);
        let mut now = t0;
        let mut sent = 0usize;
        while now < t0 + Duration::from_secs(1) {
            if b.try_take(now, 1200) {
                sent += 1200;
            } else {
                now += b.wait_time(now);
            }
        }
        let expected = 1_000_000 + DEFAULT_BURST_BYTES as i64;
        assert!((sent as i64 - expected).abs() < 3000, "sent {sent}");
    }
}
