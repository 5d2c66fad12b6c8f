// Over 600 lines: the link, its accept loop and the per-peer frame reader share the read limits.
//! QUIC link: one endpoint per node, `stripe_connections` connections per peer and
//! direction (frames round-robin over them by lane position, so a striped message's parts
//! travel at once), one unidirectional stream per message at the message's priority.

use crate::config::NetConfig;
use crate::datagram::{SegmentCappedSocket, endpoint_config};
use crate::error::NetError;
use crate::identity::{Origin, PeerDirectory, SenderRefusal};
use crate::inbound_budget::{
    InboundBudgets, PeerBudget, Progress, ProgressSample, ProgressWatch, lane_of, may_be_control,
};
use crate::net::{Arrival, Inbound, LinkCause};
use crate::refusal_log::RefusalLog;
use crate::sequencer::{LANE_HEADER_LEN, LaneHeader};
use crate::shaper::ShapedSocket;
use crate::stats::NetStats;
use crate::tls::{ClusterCredentials, node_names_in_certificate, node_server_name};
use bytes::Bytes;
use petrel_messages::envelope::FramePrefix;
use petrel_messages::{CodecError, EnvelopeHeader, FRAME_PREFIX_LEN, Frame, NodeId, Priority};
use quinn::{Connection, Endpoint, RecvStream, VarInt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Application error codes on streams and connections.
const CODE_OVERSIZE: u32 = 1;
const CODE_MALFORMED: u32 = 2;
const CODE_SHUTDOWN: u32 = 3;
const CODE_STALLED: u32 = 4;
pub(crate) const CODE_HOARDING: u32 = 5;
pub(crate) const CODE_IMPOSTOR: u32 = 6;
pub(crate) const CODE_ELSEWHERE: u32 = 7;
pub(crate) const CODE_TOO_SLOW: u32 = 8;

type PeerSlot = Arc<tokio::sync::Mutex<Option<Connection>>>;

/// How often each connection's frame progress is judged.
const PROGRESS_TICK: Duration = Duration::from_millis(250);

/// The connection settings by kind of peer (see [`NetConfig::for_peer`]).
struct PeerConfigs {
    server: Arc<quinn::ServerConfig>,
    loopback_server: Arc<quinn::ServerConfig>,
    loopback_client: quinn::ClientConfig,
    net: NetConfig,
}

impl PeerConfigs {
    fn server_for(&self, remote: SocketAddr) -> Arc<quinn::ServerConfig> {
        if self.net.is_loopback_peer(remote) {
            self.loopback_server.clone()
        } else {
            self.server.clone()
        }
    }
}

pub(crate) struct QuicLink {
    endpoint: Endpoint,
    peer_configs: Arc<PeerConfigs>,
    addrs: Mutex<HashMap<NodeId, SocketAddr>>,
    /// Connections by (peer, stripe index).
    conns: Mutex<HashMap<(NodeId, usize), PeerSlot>>,
    directory: Arc<PeerDirectory>,
    connect_timeout: Duration,
    stripes: usize,
    stats: Arc<NetStats>,
}

impl QuicLink {
    /// Binds the endpoint and starts accepting. Must run inside the transport's runtime.
    pub(crate) fn start(
        node: NodeId,
        bind: SocketAddr,
        creds: &ClusterCredentials,
        cfg: &NetConfig,
        stats: Arc<NetStats>,
        tx: mpsc::Sender<Arrival>,
    ) -> Result<Self, NetError> {
        let server = creds.server_config(cfg)?;
        let client = creds.client_config(cfg)?;
        // Loopback peers get large datagrams (`crate::datagram`); the server picks per peer.
        let loopback = cfg.for_peer(SocketAddr::from(([127, 0, 0, 1], 0)));
        let peer_configs = PeerConfigs {
            server: Arc::new(server.clone()),
            loopback_server: Arc::new(creds.server_config(&loopback)?),
            loopback_client: creds.client_config(&loopback)?,
            net: cfg.clone(),
        };
        let socket = match crate::ports::take_held(bind) {
            Some(held) => held,
            None => std::net::UdpSocket::bind(bind)
                .map_err(|source| NetError::Bind { addr: bind, source })?,
        };
        crate::datagram::size_socket_buffers(cfg, &socket);
        let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
        let mut udp = runtime.wrap_udp_socket(socket).map_err(NetError::Runtime)?;
        udp = Arc::new(SegmentCappedSocket::new(udp, cfg));
        if let Some(shaper) = &cfg.shaper {
            udp = Arc::new(ShapedSocket::new(udp, shaper, stats.clone()));
        }
        let mut endpoint =
            Endpoint::new_with_abstract_socket(endpoint_config(cfg), Some(server), udp, runtime)
                .map_err(NetError::Runtime)?;
        endpoint.set_default_client_config(client);
        let peer_configs = Arc::new(peer_configs);
        let directory = Arc::new(PeerDirectory::default());
        let limits = ReadLimits {
            max_frame: cfg.max_message_bytes,
            budgets: InboundBudgets::new(cfg.inbound_buffer_bytes, cfg.max_message_bytes),
            stall: Duration::from_millis(cfg.frame_timeout_ms.max(1)),
            directory: directory.clone(),
            peers: Arc::default(),
        };
        tokio::spawn(accept_loop(
            node,
            endpoint.clone(),
            peer_configs.clone(),
            limits,
            stats.clone(),
            tx,
        ));
        Ok(Self {
            endpoint,
            peer_configs,
            addrs: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
            directory,
            connect_timeout: Duration::from_millis(cfg.connect_timeout_ms),
            stripes: if cfg.shaper.is_some() {
                1
            } else {
                cfg.stripe_connections.max(1)
            },
            stats,
        })
    }

    /// Connections per peer that frames are spread over.
    pub(crate) fn stripes(&self) -> usize {
        self.stripes
    }

    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.local_addr().ok()
    }

    /// Where `node` is reached, if known.
    pub(crate) fn peer_addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.addrs.lock().ok()?.get(&node).copied()
    }

    pub(crate) fn add_peer(&self, node: NodeId, name: &str, addr: SocketAddr) {
        if let Ok(mut a) = self.addrs.lock() {
            a.insert(node, addr);
        }
        self.directory.insert(node, name, Some(addr));
    }

    pub(crate) fn disconnect(&self, node: NodeId) {
        let slots: Vec<PeerSlot> = self
            .conns
            .lock()
            .map(|mut c| {
                (0..self.stripes)
                    .filter_map(|i| c.remove(&(node, i)))
                    .collect()
            })
            .unwrap_or_default();
        for slot in slots {
            if let Ok(guard) = slot.try_lock()
                && let Some(conn) = guard.as_ref()
            {
                conn.close(VarInt::from_u32(CODE_SHUTDOWN), b"peer left");
            }
        }
    }

    pub(crate) fn close(&self) {
        self.endpoint
            .close(VarInt::from_u32(CODE_SHUTDOWN), b"shutdown");
    }

    /// A new connection to `to` from this node's socket, outside the per-peer slots.
    pub(crate) async fn dial(&self, to: NodeId) -> Result<Connection, NetError> {
        let addr = self.peer_addr(to).ok_or(NetError::UnknownPeer(to))?;
        let connect_err = |source: LinkCause| NetError::Connect {
            peer: to,
            addr,
            source,
        };
        // The server must hold the certificate of the node we mean to reach.
        let name = self
            .directory
            .registered(to)
            .ok_or(NetError::UnknownPeer(to))?;
        let server_name = node_server_name(&name);
        let connecting = if self.peer_configs.net.is_loopback_peer(addr) {
            let loopback = self.peer_configs.loopback_client.clone();
            self.endpoint.connect_with(loopback, addr, &server_name)
        } else {
            self.endpoint.connect(addr, &server_name)
        }
        .map_err(|e| connect_err(e.into()))?;
        let conn = tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .map_err(|_| connect_err("timed out".into()))?
            .map_err(|e| connect_err(e.into()))?;
        Ok(conn)
    }

    async fn connection(&self, to: NodeId, stripe: usize) -> Result<Connection, NetError> {
        let slot = {
            let mut conns = self.conns.lock().map_err(|_| NetError::Closed)?;
            conns.entry((to, stripe)).or_default().clone()
        };
        let mut guard = slot.lock().await;
        if let Some(conn) = guard.as_ref()
            && conn.close_reason().is_none()
        {
            return Ok(conn.clone());
        }
        let conn = self.dial(to).await?;
        NetStats::bump(&self.stats.opened_connections, 1);
        *guard = Some(conn.clone());
        Ok(conn)
    }

    /// Sends one frame on its own stream and waits until the peer acknowledged all of it,
    /// so the outbox's in-flight accounting reflects the wire. A lane's consecutive frames
    /// (a striped message's parts) take consecutive connections.
    pub(crate) async fn deliver(
        &self,
        to: NodeId,
        priority: Priority,
        lane: LaneHeader,
        frame: Bytes,
        tail: Vec<Bytes>,
    ) -> Result<(), NetError> {
        let stripe = (lane.seq % self.stripes as u64) as usize;
        let conn = self.connection(to, stripe).await?;
        let send_err = |source: LinkCause| NetError::Send { peer: to, source };
        let mut stream = conn.open_uni().await.map_err(|e| send_err(e.into()))?;
        stream
            .set_priority(priority.0)
            .map_err(|e| send_err(e.into()))?;
        let mut chunks = Vec::with_capacity(2 + tail.len());
        chunks.push(Bytes::copy_from_slice(&lane.encode()));
        chunks.push(frame);
        chunks.extend(tail);
        stream
            .write_all_chunks(&mut chunks)
            .await
            .map_err(|e| send_err(e.into()))?;
        stream.finish().map_err(|e| send_err(e.into()))?;
        match stream.stopped().await {
            // 0 is what a reader that consumed everything and dropped the stream reports.
            Ok(None) => Ok(()),
            Ok(Some(code)) if code.into_inner() == 0 => Ok(()),
            Ok(Some(code)) => Err(send_err(
                format!("peer refused the frame (code {code})").into(),
            )),
            Err(e) => Err(send_err(e.into())),
        }
    }
}

/// What bounds a node's receive path.
#[derive(Clone)]
struct ReadLimits {
    max_frame: usize,
    /// Bytes of frames being read or waiting, per peer and node ([`crate::inbound_budget`]).
    budgets: InboundBudgets,
    /// Longest pause between a frame's bytes.
    stall: Duration,
    /// Node names by id: whom a frame's claimed sender must be.
    directory: Arc<PeerDirectory>,
    /// Inbound shares by the node names a peer's certificate binds (one per peer).
    peers: Arc<Mutex<HashMap<Arc<[String]>, PeerBudget>>>,
}

impl ReadLimits {
    /// The budget of a new connection from the peer whose certificate binds `certified`.
    fn connection_budget(&self, certified: &Arc<[String]>) -> PeerBudget {
        match self.peers.lock() {
            Ok(mut peers) => peers
                .entry(certified.clone())
                .or_insert_with(|| self.budgets.peer())
                .another_connection(),
            Err(_) => self.budgets.peer(),
        }
    }
}

async fn accept_loop(
    node: NodeId,
    endpoint: Endpoint,
    peer_configs: Arc<PeerConfigs>,
    limits: ReadLimits,
    stats: Arc<NetStats>,
    tx: mpsc::Sender<Arrival>,
) {
    let refusals = Arc::new(Mutex::new(RefusalLog::default()));
    while let Some(incoming) = endpoint.accept().await {
        let peer_configs = peer_configs.clone();
        let stats = stats.clone();
        let tx = tx.clone();
        let limits = limits.clone();
        let refusals = refusals.clone();
        let remote = incoming.remote_address();
        tokio::spawn(async move {
            // One line per source a minute, with the count: anyone can reach the port.
            let log_due = || {
                refusals
                    .lock()
                    .ok()
                    .and_then(|mut log| log.refused(remote.ip(), Instant::now()))
            };
            let accepted = match incoming.accept_with(peer_configs.server_for(remote)) {
                Ok(connecting) => connecting.await,
                Err(e) => Err(e),
            };
            let conn = match accepted {
                Ok(c) => c,
                Err(e) => {
                    NetStats::bump(&stats.refused_connections, 1);
                    if let Some(refused) = log_due() {
                        tracing::warn!(%node, %remote, error = %e, refused, "refused connection (handshake failed)");
                    }
                    return;
                }
            };
            let certified: Arc<[String]> = certificate_names(&conn).into();
            if certified.is_empty() {
                NetStats::bump(&stats.refused_connections, 1);
                if let Some(refused) = log_due() {
                    tracing::warn!(%node, %remote, refused, "refused connection: its certificate names no node");
                }
                conn.close(
                    VarInt::from_u32(CODE_IMPOSTOR),
                    b"certificate names no node",
                );
                return;
            }
            // A certificate used from elsewhere than its node's address is a stolen key,
            // refused before it can take any budget.
            if let Origin::Elsewhere { name, home } = limits
                .directory
                .origin(&certified, remote, limits.stall)
                .await
            {
                NetStats::bump(&stats.refused_connections, 1);
                if limits.directory.first_misplaced(&certified, remote) {
                    tracing::warn!(
                        %node,
                        peer = %name,
                        %remote,
                        %home,
                        "refused a connection with {name}'s certificate from another address than {name}'s (a stolen key?)"
                    );
                }
                let reason =
                    format!("{name}'s certificate used from another address than {name}'s");
                conn.close(VarInt::from_u32(CODE_ELSEWHERE), reason.as_bytes());
                return;
            }
            tracing::debug!(%node, %remote, peer = ?certified, "peer connected");
            let peer = limits.connection_budget(&certified);
            let progress = Arc::new(FrameProgress::default());
            tokio::spawn(watch_progress(
                node,
                conn.clone(),
                certified.clone(),
                progress.clone(),
                stats.clone(),
            ));
            while let Ok(recv) = conn.accept_uni().await {
                tokio::spawn(read_frame(
                    node,
                    recv,
                    PeerReader {
                        conn: conn.clone(),
                        budget: peer.clone(),
                        certified: certified.clone(),
                        progress: progress.clone(),
                    },
                    limits.clone(),
                    stats.clone(),
                    tx.clone(),
                ));
            }
        });
    }
}

/// The node names in the certificate a connection's peer presented.
fn certificate_names(conn: &Connection) -> Vec<String> {
    conn.peer_identity()
        .and_then(|id| {
            id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| chain.first().map(node_names_in_certificate))
        .unwrap_or_default()
}

/// The connection a stream arrived on, its peer's budget, names and frame progress.
struct PeerReader {
    conn: quinn::Connection,
    budget: PeerBudget,
    certified: Arc<[String]>,
    progress: Arc<FrameProgress>,
}

/// What a connection's frames holding budget have brought, for [`watch_progress`].
#[derive(Default)]
struct FrameProgress {
    /// Frames holding budget whose bytes (and end) have not all arrived.
    partial: AtomicUsize,
    /// Bytes read into frames holding budget.
    bytes: AtomicU64,
}

/// A frame holding budget while read; counted in [`FrameProgress::partial`] until dropped.
struct PartialFrame(Arc<FrameProgress>);

impl PartialFrame {
    fn start(progress: &Arc<FrameProgress>) -> Self {
        progress.partial.fetch_add(1, Ordering::Relaxed);
        Self(progress.clone())
    }

    fn read(&self, bytes: usize) {
        self.0.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl Drop for PartialFrame {
    fn drop(&mut self) {
        self.0.partial.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Closes `conn`, naming its peer, when its frames hold budget without progressing.
async fn watch_progress(
    node: NodeId,
    conn: Connection,
    certified: Arc<[String]>,
    progress: Arc<FrameProgress>,
    stats: Arc<NetStats>,
) {
    let mut watch = ProgressWatch::new(Instant::now());
    let mut tick = tokio::time::interval(PROGRESS_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let closed = conn.closed();
    tokio::pin!(closed);
    loop {
        tokio::select! {
            _ = &mut closed => return,
            _ = tick.tick() => {}
        }
        let sample = ProgressSample {
            now: Instant::now(),
            partial_frames: progress.partial.load(Ordering::Relaxed),
            frame_bytes: progress.bytes.load(Ordering::Relaxed),
            datagrams: conn.stats().udp_rx.datagrams,
        };
        if let Progress::TooSlow { bytes, over } = watch.observe(sample) {
            if conn.close_reason().is_none() {
                let peer = certified.join(",");
                stats.disconnected(&peer);
                tracing::warn!(
                    %node,
                    %peer,
                    remote = %conn.remote_address(),
                    partial_frames = sample.partial_frames,
                    bytes,
                    over = ?over,
                    "peer's frames hold inbound budget without progressing (stalled or trickled); disconnected"
                );
                conn.close(
                    VarInt::from_u32(CODE_TOO_SLOW),
                    b"frames held inbound budget without progressing",
                );
            }
            return;
        }
    }
}

impl PeerReader {
    /// Checks the claimed sender against the certificate; an impostor is refused, counted,
    /// logged once and disconnected.
    async fn admit_sender(
        &self,
        node: NodeId,
        claimed: NodeId,
        limits: &ReadLimits,
        stats: &NetStats,
    ) -> bool {
        match limits
            .directory
            .check_sender(&self.certified, claimed, limits.stall)
            .await
        {
            Ok(()) => true,
            Err(refusal) => {
                self.impostor(node, &refusal, limits, stats);
                false
            }
        }
    }

    fn impostor(
        &self,
        node: NodeId,
        refusal: &SenderRefusal,
        limits: &ReadLimits,
        stats: &NetStats,
    ) {
        NetStats::bump(&stats.impostor_frames, 1);
        if limits.directory.first_report(&self.certified, refusal) {
            tracing::warn!(
                %node,
                certificate = %self.certified.join(","),
                claimed = %refusal.claimed(),
                remote = %self.conn.remote_address(),
                "refused a member claiming another node's name; connection closed"
            );
        }
        self.conn.close(
            VarInt::from_u32(CODE_IMPOSTOR),
            b"sender is not the certified node",
        );
    }

    /// A frame from this peer stalled; a peer that keeps stalling is disconnected and named.
    fn stalled(&self, node: NodeId, from: u32, stats: &NetStats) {
        if self.budget.strike() && self.conn.close_reason().is_none() {
            stats.disconnected(&self.certified.join(","));
            tracing::warn!(
                %node,
                peer = %self.certified.join(","),
                id = %NodeId(from),
                remote = %self.conn.remote_address(),
                strikes = crate::inbound_budget::STALL_STRIKES,
                "peer keeps stalling frames that hold inbound budget; disconnected"
            );
            self.conn
                .close(VarInt::from_u32(CODE_HOARDING), b"stalled frames");
        }
    }
}

/// Reads a frame's envelope header (`len` bytes) ahead of its budget: its type and the
/// bytes read; `None` (counted, logged, stream stopped) when it ended, stalled or is bad.
async fn read_envelope_head(
    node: NodeId,
    recv: &mut RecvStream,
    peer: &PeerReader,
    limits: &ReadLimits,
    stats: &NetStats,
    len: usize,
) -> Option<(String, Vec<u8>)> {
    let mut head = vec![0u8; len];
    match tokio::time::timeout(limits.stall, recv.read_exact(&mut head)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            NetStats::bump(&stats.truncated_streams, 1);
            tracing::warn!(%node, error = %e, "stream ended inside a frame header");
            return None;
        }
        Err(_) => {
            NetStats::bump(&stats.truncated_streams, 1);
            tracing::warn!(%node, peer = %peer.certified.join(","), "frame header stalled; abandoned");
            let _ = recv.stop(VarInt::from_u32(CODE_STALLED));
            return None;
        }
    }
    match petrel_messages::decode_body::<EnvelopeHeader>("envelope header", &head) {
        Ok(header) => Some((header.msg_type, head)),
        Err(e) => {
            NetStats::bump(&stats.malformed_frames, 1);
            tracing::warn!(%node, error = %e, "malformed frame header");
            let _ = recv.stop(VarInt::from_u32(CODE_MALFORMED));
            None
        }
    }
}

/// Whether the stream ends right after the frame (trailing bytes or a reset are counted).
async fn finished_after_frame(
    node: NodeId,
    recv: &mut RecvStream,
    limits: &ReadLimits,
    stats: &NetStats,
) -> bool {
    let mut probe = [0u8; 1];
    let end = tokio::time::timeout(limits.stall, recv.read(&mut probe))
        .await
        .unwrap_or(Ok(Some(0)));
    match end {
        Ok(None) => true,
        Ok(Some(_)) => {
            NetStats::bump(&stats.malformed_frames, 1);
            tracing::warn!(%node, "trailing bytes after frame");
            let _ = recv.stop(VarInt::from_u32(CODE_MALFORMED));
            false
        }
        Err(e) => {
            NetStats::bump(&stats.truncated_streams, 1);
            tracing::warn!(%node, error = %e, "stream reset after frame");
            false
        }
    }
}

/// Reads one frame from a stream; every way it can be bad is counted and logged.
async fn read_frame(
    node: NodeId,
    mut recv: RecvStream,
    peer: PeerReader,
    limits: ReadLimits,
    stats: Arc<NetStats>,
    tx: mpsc::Sender<Arrival>,
) {
    let max = limits.max_frame;
    let mut head = [0u8; LANE_HEADER_LEN + FRAME_PREFIX_LEN];
    if let Err(e) = recv.read_exact(&mut head).await {
        NetStats::bump(&stats.truncated_streams, 1);
        tracing::warn!(%node, error = %e, "stream ended before a lane header and frame prefix");
        return;
    }
    let (lane_bytes, prefix) = head.split_at(LANE_HEADER_LEN);
    let mut lane = [0u8; LANE_HEADER_LEN];
    lane.copy_from_slice(lane_bytes);
    let lane = LaneHeader::decode(&lane);
    let parsed = match FramePrefix::parse(prefix, max) {
        Ok(p) => p,
        Err(e) => {
            let (counter, code) = match e {
                CodecError::Oversize { .. } => (&stats.oversize_frames, CODE_OVERSIZE),
                _ => (&stats.malformed_frames, CODE_MALFORMED),
            };
            NetStats::bump(counter, 1);
            tracing::warn!(%node, error = %e, "refused frame");
            let _ = recv.stop(VarInt::from_u32(code));
            return;
        }
    };
    // Before any memory is committed: the sender must be the node the certificate names.
    if !peer
        .admit_sender(node, NodeId(lane.from), &limits, &stats)
        .await
    {
        let _ = recv.stop(VarInt::from_u32(CODE_IMPOSTOR));
        return;
    }
    // Memory is committed only once the frame fits the budget (flow control waits till then).
    let total = parsed.total_len();
    let Ok(need) = u32::try_from(total) else {
        NetStats::bump(&stats.oversize_frames, 1);
        let _ = recv.stop(VarInt::from_u32(CODE_OVERSIZE));
        return;
    };
    // Chunks stay as quinn hands them over (zero-copy), so a large tensor is copied once.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut got = FRAME_PREFIX_LEN;
    // The receiver decides the lane: a frame claiming control priority has its small
    // envelope read first; only the runtime's control kinds get the control lane.
    let mut kind = None;
    if may_be_control(lane.priority, &parsed) {
        let Some((msg_type, head)) =
            read_envelope_head(node, &mut recv, &peer, &limits, &stats, parsed.header_len).await
        else {
            return;
        };
        kind = Some(msg_type);
        got += head.len();
        chunks.push(Bytes::from(head));
    }
    let lane_kind = lane_of(lane.priority, total, kind.as_deref());
    let Some(permit) = limits.budgets.acquire(&peer.budget, lane_kind, need).await else {
        return;
    };
    let partial = PartialFrame::start(&peer.progress);
    while got < total {
        let want = total - got;
        match tokio::time::timeout(limits.stall, recv.read_chunk(want, true)).await {
            Ok(Ok(Some(chunk))) => {
                got += chunk.bytes.len();
                partial.read(chunk.bytes.len());
                chunks.push(chunk.bytes);
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                NetStats::bump(&stats.truncated_streams, 1);
                tracing::warn!(%node, got, expected = total, "truncated frame");
                return;
            }
            Err(_) => {
                NetStats::bump(&stats.truncated_streams, 1);
                tracing::warn!(%node, peer = %NodeId(lane.from), got, expected = total, stall = ?limits.stall, "frame stalled; abandoned");
                let _ = recv.stop(VarInt::from_u32(CODE_STALLED));
                drop(permit);
                peer.stalled(node, lane.from, &stats);
                return;
            }
        }
    }
    if !finished_after_frame(node, &mut recv, &limits, &stats).await {
        return;
    }
    // Complete: it holds budget until the node takes it, which is not the peer's doing.
    drop(partial);
    let len = total;
    // A chunk pins its whole datagram: a small frame is copied out, a large one fills them.
    let chunks = if total < petrel_messages::body::LARGE_BIN {
        let mut one = bytes::BytesMut::with_capacity(total - FRAME_PREFIX_LEN);
        for c in &chunks {
            one.extend_from_slice(c);
        }
        vec![one.freeze()]
    } else {
        chunks
    };
    match Frame::from_chunks(parsed, chunks) {
        Ok(frame) if frame.header.from.0 != lane.from => {
            let claimed = limits
                .directory
                .registered(frame.header.from)
                .map(|claimed| SenderRefusal::NotCertified { claimed })
                .unwrap_or(SenderRefusal::Unknown(frame.header.from));
            peer.impostor(node, &claimed, &limits, &stats);
        }
        Ok(frame) => {
            stats.received(frame.header.from, frame.header.priority, len as u64);
            if tx
                .send(Arrival {
                    lane,
                    inbound: Inbound {
                        frame,
                        len,
                        _budget: permit,
                    },
                })
                .await
                .is_err()
            {
                tracing::debug!(%node, "inbound queue closed; frame dropped at shutdown");
            }
        }
        Err(e) => {
            NetStats::bump(&stats.malformed_frames, 1);
            tracing::warn!(%node, error = %e, "malformed frame");
            let _ = recv.stop(VarInt::from_u32(CODE_MALFORMED));
        }
    }
}
