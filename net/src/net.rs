//! [`Net`]: the handle a node uses to send frames and receive them, over QUIC or memory.

use crate::config::NetConfig;
use crate::error::NetError;
use crate::memory::{MemoryHub, MemoryLink};
use crate::outbox::OutboxQueue;
use crate::quic::QuicLink;
use crate::reassembly::{Assembled, PART_MSG_TYPE, Reassembler, max_split_message};
use crate::sequencer::{LaneHeader, LaneNumbering, Sequencer};
use crate::shm::{SHM_MSG_TYPE, ShmSender};
use crate::stats::{NetStats, NetStatsSnapshot};
use crate::tls::ClusterCredentials;
use bytes::Bytes;
use petrel_messages::{Frame, NodeId, Priority};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

/// Smallest payload of a striped part: below it, part overhead outweighs a second connection.
pub const STRIPE_MIN_PART: usize = 256 << 10;
/// Room for a part frame's envelope header and part head on top of its payload.
const STRIPE_PART_OVERHEAD: usize = 512;

/// The underlying failure of a connect or send (a quinn error, or a plain reason).
pub type LinkCause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where a peer is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAddr {
    /// A UDP address for QUIC.
    Quic(SocketAddr),
    /// The in-memory hub of this process.
    Memory,
}

/// A frame as it came off a link, before lane ordering.
pub(crate) struct Arrival {
    pub(crate) lane: LaneHeader,
    pub(crate) inbound: Inbound,
}

/// A frame that arrived, already split into header and body.
#[derive(Debug)]
pub struct Inbound {
    /// The frame: header decoded, body still encoded.
    pub frame: Frame,
    /// Encoded size on the wire.
    pub len: usize,
    /// The frame's share of the node's inbound byte budgets, released when dropped.
    pub(crate) _budget: [Option<tokio::sync::OwnedSemaphorePermit>; 2],
}

pub(crate) enum Link {
    Quic(QuicLink),
    Memory(MemoryLink),
}

impl Link {
    async fn deliver(
        &self,
        to: NodeId,
        priority: Priority,
        lane: LaneHeader,
        frame: Bytes,
        tail: Vec<Bytes>,
    ) -> Result<(), NetError> {
        match self {
            Link::Quic(q) => q.deliver(to, priority, lane, frame, tail).await,
            Link::Memory(m) => m.deliver(to, lane, gather(frame, tail)).await,
        }
    }
}

/// A tokio runtime owned by the transport, shut down without blocking when dropped (a
/// runtime dropped in async code would panic).
pub(crate) struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub(crate) struct Shared {
    pub(crate) node: NodeId,
    pub(crate) cfg: NetConfig,
    pub(crate) stats: Arc<NetStats>,
    outbox: Mutex<OutboxQueue>,
    /// Numbers frames per (peer, priority) lane as they go to the wire.
    lanes: Mutex<LaneNumbering>,
    wake: Notify,
    closed: AtomicBool,
    /// Peers are joining or leaving: a send to one that is not there is expected to fail.
    membership_changing: AtomicBool,
    pub(crate) link: Link,
    /// Large frames to co-located peers go through files ([`crate::shm`]), when set.
    shm: Option<ShmSender>,
    pub(crate) handle: tokio::runtime::Handle,
    _runtime: OwnedRuntime,
}

/// A node's transport. Cheap to clone; the transport shuts down when the last clone drops.
#[derive(Clone)]
pub struct Net {
    shared: Arc<Shared>,
    _guard: Arc<ShutdownOnDrop>,
}

struct ShutdownOnDrop(Arc<Shared>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

fn make_runtime(cfg: &NetConfig) -> Result<(tokio::runtime::Handle, OwnedRuntime), NetError> {
    if cfg.threads == 0 {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| NetError::Runtime(std::io::Error::other(e)))?;
        return Ok((handle, OwnedRuntime(None)));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads)
        .thread_name("petrel-net")
        .enable_all()
        .build()
        .map_err(NetError::Runtime)?;
    Ok((rt.handle().clone(), OwnedRuntime(Some(rt))))
}

impl Net {
    /// Starts a QUIC transport bound to `bind` (port 0 picks a free port).
    pub fn quic(
        node: NodeId,
        bind: SocketAddr,
        creds: &ClusterCredentials,
        cfg: NetConfig,
    ) -> Result<(Net, mpsc::Receiver<Inbound>), NetError> {
        if let Some(dir) = &cfg.shared_memory_dir {
            check_shared_memory_dir(dir)?;
        }
        Self::start(node, cfg, |cfg, stats, tx| {
            QuicLink::start(node, bind, creds, cfg, stats, tx).map(Link::Quic)
        })
    }

    /// Joins an in-memory hub: same interface, no sockets, no encryption.
    pub fn memory(
        hub: &MemoryHub,
        node: NodeId,
        cfg: NetConfig,
    ) -> Result<(Net, mpsc::Receiver<Inbound>), NetError> {
        Self::start(node, cfg, |cfg, stats, tx| {
            Ok(Link::Memory(MemoryLink::join(hub, node, cfg, stats, tx)))
        })
    }

    /// The transport of either kind: its runtime, counters and inbound path around the
    /// `link` made (on that runtime) to feed them.
    fn start(
        node: NodeId,
        cfg: NetConfig,
        link: impl FnOnce(&NetConfig, Arc<NetStats>, mpsc::Sender<Arrival>) -> Result<Link, NetError>,
    ) -> Result<(Net, mpsc::Receiver<Inbound>), NetError> {
        let (handle, runtime) = make_runtime(&cfg)?;
        let stats = Arc::new(NetStats::default());
        let (tx, rx) = sequenced_inbound(node, &cfg, &handle, stats.clone());
        let link = {
            let _guard = handle.enter();
            link(&cfg, stats.clone(), tx)?
        };
        let epoch = epoch_now();
        let shm = match (&link, &cfg.shared_memory_dir, &cfg.shaper) {
            (Link::Quic(_), Some(dir), None) => {
                let min = cfg.shared_memory_min_bytes;
                let max = max_split_message(&cfg);
                Some(ShmSender::new(dir.clone(), node, epoch, min, max))
            }
            _ => None,
        };
        let shared = Arc::new(Shared {
            node,
            outbox: Mutex::new(OutboxQueue::new(cfg.outbox_inflight_bytes)),
            lanes: Mutex::new(LaneNumbering::new(node.0, epoch)),
            cfg,
            stats,
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            membership_changing: AtomicBool::new(false),
            link,
            shm,
            handle: handle.clone(),
            _runtime: runtime,
        });
        handle.spawn(dispatch(shared.clone()));
        let net = Net {
            _guard: Arc::new(ShutdownOnDrop(shared.clone())),
            shared,
        };
        Ok((net, rx))
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.shared.node
    }

    /// The transport settings in use.
    pub fn config(&self) -> &NetConfig {
        &self.shared.cfg
    }

    /// The QUIC link, `None` in memory.
    pub(crate) fn quic_link(&self) -> Option<&QuicLink> {
        match &self.shared.link {
            Link::Quic(q) => Some(q),
            Link::Memory(_) => None,
        }
    }

    /// The bound UDP address (QUIC) or `None` (memory).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.shared.link {
            Link::Quic(q) => q.local_addr(),
            Link::Memory(_) => None,
        }
    }

    /// Records a peer's node name and where it is reached. Over QUIC, frames from `node`
    /// are accepted only on a connection whose certificate names `name`, a connection to
    /// `node` must reach that certificate's holder, and `name`'s certificate is accepted
    /// only from `addr` (its port, and its IP unless unspecified; port 0 binds nothing).
    pub fn add_peer(&self, node: NodeId, name: &str, addr: PeerAddr) {
        if let (Link::Quic(q), PeerAddr::Quic(a)) = (&self.shared.link, addr) {
            q.add_peer(node, name, a);
        }
    }

    /// Queues a frame. Returns at once; frames leave in priority order.
    pub fn send(&self, to: NodeId, priority: Priority, frame: Bytes) -> Result<(), NetError> {
        if self.is_closed() {
            return Err(NetError::Closed);
        }
        if let Some(control) = self.through_shared_memory(to, priority, &frame) {
            NetStats::bump(&self.shared.stats.shared_memory_messages, 1);
            return self.enqueue(|q| q.push(to, priority, control));
        }
        let max = self.shared.cfg.max_message_bytes;
        let (part_max, counter) = if frame.len() > max {
            // Split: the parts leave consecutively on one lane, the receiver joins them.
            let limit = self.max_send_bytes();
            if frame.len() > limit {
                return Err(NetError::Oversize {
                    len: frame.len(),
                    max: limit,
                });
            }
            (Some(max), &self.shared.stats.split_messages)
        } else {
            let part_max = self.stripe_part_bytes(frame.len());
            (part_max, &self.shared.stats.striped_messages)
        };
        let Some(part_max) = part_max else {
            return self.enqueue(|q| q.push(to, priority, frame));
        };
        let len = frame.len();
        let parts = crate::reassembly::split(&frame, self.shared.node, to, priority, part_max)
            .map_err(|_| NetError::Oversize { len, max })?;
        NetStats::bump(counter, 1);
        self.enqueue(|q| {
            parts
                .into_iter()
                .for_each(|part| q.push(to, priority, part))
        })
    }

    /// Puts frames into the outbox with `push` and wakes the sender.
    fn enqueue(&self, push: impl FnOnce(&mut OutboxQueue)) -> Result<(), NetError> {
        if let Ok(mut q) = self.shared.outbox.lock() {
            push(&mut q);
        }
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Queues a frame given in pieces (as [`Frame::encode_chunks`] makes it), written to
    /// the stream without being joined. A frame that is split, striped, goes through shared
    /// memory or the memory transport is joined and takes [`Self::send`]'s path.
    ///
    /// [`Frame::encode_chunks`]: petrel_messages::Frame::encode_chunks
    pub fn send_chunks(
        &self,
        to: NodeId,
        priority: Priority,
        mut chunks: Vec<Bytes>,
    ) -> Result<(), NetError> {
        if chunks.len() < 2 {
            return self.send(to, priority, chunks.pop().unwrap_or_default());
        }
        let len: usize = chunks.iter().map(Bytes::len).sum();
        let whole_path = self.shared.shm.is_some()
            || matches!(self.shared.link, Link::Memory(_))
            || len > self.shared.cfg.max_message_bytes
            || self.stripe_part_bytes(len).is_some();
        let first = chunks.remove(0);
        if whole_path {
            return self.send(to, priority, gather(first, chunks));
        }
        if self.is_closed() {
            return Err(NetError::Closed);
        }
        self.enqueue(|q| q.push_chunks(to, priority, first, chunks))
    }

    /// The shared-memory control frame for `frame`, when `to` is on this host and it qualifies.
    fn through_shared_memory(&self, to: NodeId, priority: Priority, frame: &[u8]) -> Option<Bytes> {
        let shm = self.shared.shm.as_ref()?;
        let Link::Quic(q) = &self.shared.link else {
            return None;
        };
        if frame.len() > self.max_send_bytes() || !q.peer_addr(to)?.ip().is_loopback() {
            return None;
        }
        shm.try_send(to, priority, frame)
    }

    /// The largest part frame of a striped `len`-byte frame, or `None` when it is not
    /// striped: one part per connection, at most a connection's share of the in-flight
    /// window, at least [`STRIPE_MIN_PART`].
    fn stripe_part_bytes(&self, len: usize) -> Option<usize> {
        let stripes = self.stripes();
        let cfg = &self.shared.cfg;
        if stripes < 2 || len < cfg.stripe_min_bytes.max(2 * STRIPE_MIN_PART) {
            return None;
        }
        let window_share = cfg.outbox_inflight_bytes / stripes;
        let payload = len.div_ceil(stripes).min(window_share).max(STRIPE_MIN_PART);
        Some((payload + STRIPE_PART_OVERHEAD).min(cfg.max_message_bytes))
    }

    /// Connections a frame may be striped over (1 on memory and shaped links).
    fn stripes(&self) -> usize {
        match &self.shared.link {
            Link::Quic(q) => q.stripes(),
            Link::Memory(_) => 1,
        }
    }

    /// The largest frame [`Self::send`] takes: above `max_message_bytes` frames are split,
    /// up to a peer's share of `inbound_buffer_bytes` (peers are assumed to share `[net]`).
    pub fn max_send_bytes(&self) -> usize {
        max_split_message(&self.shared.cfg)
    }

    /// The live counters (per-link traffic and shaper waits included), for `/metrics`.
    pub fn counters(&self) -> Arc<NetStats> {
        self.shared.stats.clone()
    }

    /// True once [`shutdown`](Self::shutdown) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Bytes waiting in the outbox (not yet handed to the wire).
    pub fn queued_bytes(&self) -> usize {
        self.shared
            .outbox
            .lock()
            .map(|q| q.queued_bytes())
            .unwrap_or(0)
    }

    /// Forgets a peer that left: its queued frames are dropped and its connection closed.
    pub fn drop_peer(&self, peer: NodeId) {
        let dropped = self
            .shared
            .outbox
            .lock()
            .map(|mut q| q.drop_peer(peer))
            .unwrap_or(0);
        if dropped > 0 {
            tracing::debug!(%peer, dropped, "dropped queued frames for departed peer");
        }
        if let Link::Quic(q) = &self.shared.link {
            q.disconnect(peer);
        }
    }

    /// When a complete frame from `peer` last arrived (stamped on the transport's runtime).
    pub fn last_heard(&self, peer: NodeId) -> Option<std::time::Instant> {
        self.shared.stats.last_heard(peer)
    }

    /// The transport's counters now.
    pub fn stats(&self) -> NetStatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// The runtime the transport runs on (spawn I/O work here).
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.shared.handle.clone()
    }

    /// Whether peers are joining or leaving now. Meanwhile a failed send is logged at debug
    /// level, not as a warning: the caller (a retrying join, a finished run) already knows.
    pub fn set_membership_changing(&self, changing: bool) {
        self.shared
            .membership_changing
            .store(changing, Ordering::Release);
    }

    /// Stops sending and closes connections.
    pub fn shutdown(&self) {
        self.shared.close();
    }
}

impl Shared {
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.wake.notify_one();
        match &self.link {
            Link::Quic(q) => q.close(),
            Link::Memory(m) => m.leave(),
        }
        // Processes often exit without dropping their transport: delete the slot files now.
        if let Some(shm) = &self.shm {
            shm.clean_up();
        }
    }
}

/// The node's single sender: drains the outbox in priority order, a task per frame.
async fn dispatch(s: Arc<Shared>) {
    while !s.closed.load(Ordering::Acquire) {
        let next = s.outbox.lock().ok().and_then(|mut q| q.pop_ready());
        let Some((msg, token)) = next else {
            s.wake.notified().await;
            continue;
        };
        // Numbered here, in wire order: a lane's frames leave the outbox FIFO.
        let lane = match s.lanes.lock() {
            Ok(mut l) => l.next(msg.to.0, msg.priority, std::time::Instant::now()),
            Err(_) => return,
        };
        let task_shared = s.clone();
        s.handle.spawn(async move {
            let len = msg.len() as u64;
            match task_shared
                .link
                .deliver(msg.to, msg.priority, lane, msg.frame, msg.tail)
                .await
            {
                Ok(()) => task_shared.stats.sent(msg.to, msg.priority, len),
                Err(e) => {
                    NetStats::bump(&task_shared.stats.send_failures, 1);
                    if let Ok(mut l) = task_shared.lanes.lock() {
                        l.failed(msg.to.0);
                    }
                    if task_shared.closed.load(Ordering::Acquire)
                        || task_shared.membership_changing.load(Ordering::Acquire)
                    {
                        tracing::debug!(node = %task_shared.node, to = %msg.to, error = %e, "send abandoned at shutdown");
                    } else {
                        tracing::warn!(node = %task_shared.node, to = %msg.to, error = %e, "send failed");
                    }
                }
            }
            if let Ok(mut q) = task_shared.outbox.lock() {
                q.complete(token);
            }
            task_shared.wake.notify_one();
        });
    }
}

/// Refuses a `shared_memory_dir` that is not a directory (else large frames silently use QUIC).
fn check_shared_memory_dir(dir: &std::path::Path) -> Result<(), NetError> {
    let error = |source| NetError::SharedMemoryDir {
        path: dir.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(dir).map_err(error)?;
    if meta.is_dir() {
        Ok(())
    } else {
        Err(error(std::io::Error::other("not a directory")))
    }
}

/// A process-unique epoch, so receivers tell a restarted sender from a late frame.
pub(crate) fn epoch_now() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

/// The channel links push arrivals into, and the task releasing them in lane order.
fn sequenced_inbound(
    me: NodeId,
    cfg: &NetConfig,
    handle: &tokio::runtime::Handle,
    stats: Arc<NetStats>,
) -> (mpsc::Sender<Arrival>, mpsc::Receiver<Inbound>) {
    let (arrive_tx, mut arrive_rx) = mpsc::channel::<Arrival>(cfg.inbound_queue.max(1));
    let (tx, rx) = mpsc::channel(cfg.inbound_queue.max(1));
    let max_pending = cfg.inbound_queue.max(1) * 4;
    let hole_timeout = Duration::from_millis(cfg.reorder_timeout_ms.max(1));
    let part_timeout = Duration::from_millis(cfg.frame_timeout_ms.max(1));
    let max_message = max_split_message(cfg);
    let mut assembler = Reassembler::new(max_message);
    let mut shm = crate::shm::ShmReceiver::new(cfg.shared_memory_dir.clone(), me);
    // A frame that arrived whole through shared memory or in parts holds no inbound budget.
    let whole = |frame: Frame| Inbound {
        len: frame.body.len(),
        frame,
        _budget: [None, None],
    };
    handle.spawn(async move {
        let mut sequencer = Sequencer::new(max_pending, hole_timeout);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let ready = tokio::select! {
                a = arrive_rx.recv() => match a {
                    Some(a) => sequencer.accept(a.lane, a.inbound, std::time::Instant::now()),
                    None => return,
                },
                _ = tick.tick() => {
                    let now = std::time::Instant::now();
                    for from in assembler.expire(now, part_timeout) {
                        NetStats::bump(&stats.malformed_frames, 1);
                        tracing::warn!(%from, timeout = ?part_timeout, "split message incomplete; dropped");
                    }
                    sequencer.expire(now)
                }
            };
            for inbound in ready {
                let inbound = if inbound.frame.header.msg_type == SHM_MSG_TYPE {
                    match shm.receive(&inbound.frame, max_message) {
                        Ok(frame) => whole(frame),
                        Err(error) => {
                            NetStats::bump(&stats.malformed_frames, 1);
                            tracing::warn!(from = %inbound.frame.header.from, %error, "shared-memory message dropped");
                            continue;
                        }
                    }
                } else if inbound.frame.header.msg_type == PART_MSG_TYPE {
                    match assembler.accept(inbound.frame, std::time::Instant::now()) {
                        Assembled::Whole(frame) => whole(frame),
                        Assembled::Pending => continue,
                        Assembled::Dropped { from, reason } => {
                            NetStats::bump(&stats.malformed_frames, 1);
                            tracing::warn!(%from, %reason, "split message dropped");
                            continue;
                        }
                    }
                } else {
                    inbound
                };
                if tx.send(inbound).await.is_err() {
                    return;
                }
            }
        }
    });
    (arrive_tx, rx)
}

/// `frame` and `tail` joined into one buffer (free when `tail` is empty).
fn gather(frame: Bytes, tail: Vec<Bytes>) -> Bytes {
    if tail.is_empty() {
        return frame;
    }
    let len = frame.len() + tail.iter().map(Bytes::len).sum::<usize>();
    let mut buf = bytes::BytesMut::with_capacity(len);
    buf.extend_from_slice(&frame);
    for piece in &tail {
        buf.extend_from_slice(piece);
    }
    buf.freeze()
}
