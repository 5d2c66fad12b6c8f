//! A member gone bad, for fault injection (`petrel bench chaos`, the transport tests).
//!
//! [`connect_as_member`] opens a raw QUIC connection with a member's own credentials (a
//! stolen key or broken code). On it [`open_stalled_frames`] announces frames and stalls,
//! [`trickle`] feeds them a few bytes at a time so none looks stalled yet none completes,
//! and [`flood_frames`] sends many complete frames at once, at control priority if asked.
//!
//! A node must keep serving its other peers, heartbeats included, meanwhile, and disconnect
//! such a peer, naming it, when its frames do not progress (RELIABILITY.md). Used with
//! another node's key, the connection comes from the wrong address and is refused at once
//! ([`Refusal::StolenKey`]).

use crate::NetConfig;
use crate::error::NetError;
use crate::sequencer::LaneHeader;
use crate::tls::{CLUSTER_SERVER_NAME, ClusterCredentials};
use petrel_messages::envelope::FRAME_MAGIC;
use petrel_messages::runtime::Heartbeat;
use petrel_messages::{
    EnvelopeHeader, EnvelopeKind, FRAME_PREFIX_LEN, NodeId, Priority, RemoteMessage,
};
use std::net::SocketAddr;
use std::time::Duration;

/// What a hostile frame's envelope says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// An application message (to an actor the victim does not have).
    Application,
    /// The runtime's heartbeat: a control kind, forged with an oversized body.
    Heartbeat,
}

impl Claimed {
    fn msg_type(self) -> &'static str {
        match self {
            Claimed::Application => "petrel.hostile",
            Claimed::Heartbeat => Heartbeat::TYPE_NAME,
        }
    }
}

/// `streams` hostile frames of `frame_bytes` each (prefix, header and body) at `priority`,
/// claiming `claimed`, of which only `sent_bytes` of body are sent.
#[derive(Clone, Copy, Debug)]
pub struct StalledFrames {
    /// Streams opened (one frame each).
    pub streams: u64,
    /// Length each frame announces, header included.
    pub frame_bytes: u32,
    /// Bytes of body actually sent before the stream stalls.
    pub sent_bytes: usize,
    /// The priority of the frames' lane headers and QUIC streams.
    pub priority: Priority,
    /// What the envelopes say the frames are.
    pub claimed: Claimed,
}

impl StalledFrames {
    /// The stalled-frames attack: five frames of 60 MiB, 300 bytes sent of each.
    pub const FIVE_OF_60_MIB: StalledFrames = StalledFrames {
        streams: 5,
        frame_bytes: 60 << 20,
        sent_bytes: 300,
        priority: Priority::NORMAL,
        claimed: Claimed::Application,
    };

    /// The control-lane attack: 128 control-priority frames of 64 KiB, 300 bytes sent each.
    pub const CONTROL_128_OF_64_KIB: StalledFrames = StalledFrames {
        streams: 128,
        frame_bytes: 64 << 10,
        sent_bytes: 300,
        priority: Priority::CONTROL,
        claimed: Claimed::Application,
    };
}

/// A raw QUIC connection to `to` with a member's `creds`, on its own endpoint (keep it
/// alive as long as the connection).
pub async fn connect_as_member(
    creds: &ClusterCredentials,
    cfg: &NetConfig,
    to: SocketAddr,
) -> Result<(quinn::Endpoint, quinn::Connection), NetError> {
    let ip: std::net::IpAddr = match (to.is_ipv4(), to.ip().is_loopback()) {
        (true, true) => std::net::Ipv4Addr::LOCALHOST.into(),
        (true, false) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        (false, true) => std::net::Ipv6Addr::LOCALHOST.into(),
        (false, false) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let local = SocketAddr::new(ip, 0);
    let mut endpoint = quinn::Endpoint::client(local).map_err(|source| NetError::Bind {
        addr: local,
        source,
    })?;
    endpoint.set_default_client_config(creds.client_config(cfg)?);
    let failed = |source: LinkError| NetError::Connect {
        peer: NodeId(u32::MAX),
        addr: to,
        source: Box::new(source),
    };
    let connecting = endpoint
        .connect(to, CLUSTER_SERVER_NAME)
        .map_err(|e| failed(LinkError::Connect(e)))?;
    let conn = connecting
        .await
        .map_err(|e| failed(LinkError::Connection(e)))?;
    Ok((endpoint, conn))
}

/// The first bytes of a hostile frame from `from`: lane header, prefix and valid envelope.
fn frame_head(
    from: u32,
    frames: &StalledFrames,
    epoch: u64,
    seq: u64,
) -> Result<Vec<u8>, NetError> {
    let header = EnvelopeHeader {
        from: NodeId(from),
        to: NodeId(u32::MAX),
        actor: "petrel.hostile".into(),
        msg_type: frames.claimed.msg_type().into(),
        priority: frames.priority,
        kind: EnvelopeKind::Tell,
    };
    let mut envelope = Vec::new();
    petrel_messages::encode_body(&header, &mut envelope).map_err(send_failed)?;
    let header_len = envelope.len() as u32;
    let body_len = frames
        .frame_bytes
        .saturating_sub(FRAME_PREFIX_LEN as u32 + header_len);
    let mut bytes = LaneHeader {
        from,
        priority: frames.priority,
        epoch,
        seq,
    }
    .encode()
    .to_vec();
    bytes.extend_from_slice(&FRAME_MAGIC);
    bytes.extend_from_slice(&header_len.to_le_bytes());
    bytes.extend_from_slice(&body_len.to_le_bytes());
    bytes.extend_from_slice(&envelope);
    Ok(bytes)
}

/// Opens a stream as node `from` and writes frame `seq`'s head, padded with body bytes to
/// `len(head length)` bytes.
async fn start_frame(
    conn: &quinn::Connection,
    from: u32,
    frames: &StalledFrames,
    epoch: u64,
    seq: u64,
    len: impl FnOnce(usize) -> usize,
) -> Result<quinn::SendStream, NetError> {
    let mut stream = conn
        .open_uni()
        .await
        .map_err(|e| send_failed(LinkError::Connection(e)))?;
    let _ = stream.set_priority(frames.priority.0);
    let mut bytes = frame_head(from, frames, epoch, seq)?;
    bytes.resize(len(bytes.len()), 7);
    write(&mut stream, &bytes).await?;
    Ok(stream)
}

async fn write(stream: &mut quinn::SendStream, bytes: &[u8]) -> Result<(), NetError> {
    (stream.write_all(bytes).await).map_err(|e| send_failed(LinkError::Write(e)))
}

fn send_failed(source: impl std::error::Error + Send + Sync + 'static) -> NetError {
    NetError::Send {
        peer: NodeId(u32::MAX),
        source: Box::new(source),
    }
}

/// Opens `frames.streams` streams as node `from`, each announcing `frames.frame_bytes` and
/// sending `frames.sent_bytes` of body, never finished (dropping them resets them).
pub async fn open_stalled_frames(
    conn: &quinn::Connection,
    from: u32,
    frames: StalledFrames,
) -> Result<Vec<quinn::SendStream>, NetError> {
    // A fresh lane epoch: two attacks' frames never look like duplicates.
    let epoch = crate::net::epoch_now();
    let mut hoarding = Vec::new();
    for seq in 0..frames.streams {
        let started = |head| head + frames.sent_bytes;
        let stream = start_frame(conn, from, &frames, epoch, seq, started).await?;
        hoarding.push(stream); // never finished: the frame stalls
    }
    Ok(hoarding)
}

/// Writes `bytes` more body bytes to each of `streams` (from [`open_stalled_frames`]).
pub async fn trickle(streams: &mut [quinn::SendStream], bytes: usize) -> Result<(), NetError> {
    let drip = vec![7u8; bytes];
    for stream in streams {
        write(stream, &drip).await?;
    }
    Ok(())
}

/// Opens `frames` and trickles a byte into each every `every`; returns why the node closed.
pub async fn trickle_frames(
    conn: &quinn::Connection,
    from: u32,
    frames: StalledFrames,
    every: Duration,
) -> quinn::ConnectionError {
    let mut streams = match open_stalled_frames(conn, from, frames).await {
        Ok(s) => s,
        Err(_) => return conn.closed().await,
    };
    loop {
        tokio::select! {
            closed = conn.closed() => return closed,
            _ = tokio::time::sleep(every) => {}
        }
        if trickle(&mut streams, 1).await.is_err() {
            return conn.closed().await;
        }
    }
}

/// Sends `count` complete frames shaped as `frames` on `conn` as node `from`, all at once.
pub async fn flood_frames(
    conn: &quinn::Connection,
    from: u32,
    frames: StalledFrames,
    count: u64,
) -> Result<(), NetError> {
    // A fresh lane epoch: two attacks' frames never look like duplicates.
    let epoch = crate::net::epoch_now();
    let total = crate::sequencer::LANE_HEADER_LEN + frames.frame_bytes as usize;
    for seq in 0..count {
        let whole = |head: usize| total.max(head);
        let mut stream = start_frame(conn, from, &frames, epoch, seq, whole).await?;
        stream
            .finish()
            .map_err(|e| send_failed(LinkError::Closed(e)))?;
    }
    Ok(())
}

/// One attack of a member gone bad ([`misbehave`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// [`StalledFrames::FIVE_OF_60_MIB`], held.
    Stall,
    /// [`StalledFrames::CONTROL_128_OF_64_KIB`], one more byte of each every second.
    Trickle,
    /// 256 complete 64 KiB control-priority frames at once, half forged heartbeats.
    Flood,
}

impl Attack {
    /// All three, in the order [`misbehave`] makes them.
    pub const ALL: [Attack; 3] = [Attack::Stall, Attack::Trickle, Attack::Flood];
}

/// What became of one attack of [`misbehave`].
#[derive(Clone, Debug)]
pub struct AttackOutcome {
    /// The attack.
    pub attack: Attack,
    /// Why the victim closed the connection; `None` if it did not within the hold time.
    pub refused: Option<Refusal>,
    /// How long the connection lasted.
    pub lasted: Duration,
    /// A connection or send that failed otherwise (e.g. the victim was gone).
    pub error: Option<String>,
}

impl std::fmt::Display for AttackOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let attack = format!("{:?}", self.attack).to_lowercase();
        match (self.refused, &self.error) {
            (None, Some(e)) => write!(f, "{attack}: failed ({e})"),
            (Some(why), _) => write!(
                f,
                "{attack}: disconnected ({why:?}) after {:.1} s",
                self.lasted.as_secs_f64()
            ),
            (None, None) => write!(f, "{attack}: held {:.1} s", self.lasted.as_secs_f64()),
        }
    }
}

/// `net`'s node gone bad: makes `attacks` on `victim` one after another, each on a new
/// connection from the node's own socket (admitted as this node), held until the victim
/// closes it or `hold` passes. For fault injection only.
pub async fn misbehave(
    net: &crate::Net,
    victim: NodeId,
    attacks: &[Attack],
    hold: Duration,
) -> Vec<AttackOutcome> {
    let mut outcomes = Vec::new();
    for &attack in attacks {
        let started = tokio::time::Instant::now();
        let outcome = |refused, error: Option<String>| AttackOutcome {
            attack,
            refused,
            lasted: started.elapsed(),
            error,
        };
        let Some(link) = net.quic_link() else {
            outcomes.push(outcome(None, Some("not a QUIC transport".into())));
            break;
        };
        let conn = match link.dial(victim).await {
            Ok(conn) => conn,
            Err(e) => {
                outcomes.push(outcome(refusal_of(&e), Some(e.to_string())));
                continue;
            }
        };
        let from = net.node().0;
        let closed = match attack {
            Attack::Stall => {
                let stalled = open_stalled_frames(&conn, from, StalledFrames::FIVE_OF_60_MIB).await;
                match stalled {
                    Ok(_held) => Ok(tokio::time::timeout(hold, conn.closed()).await.ok()),
                    Err(e) => Err(e),
                }
            }
            Attack::Trickle => {
                let frames = StalledFrames::CONTROL_128_OF_64_KIB;
                let trickled = trickle_frames(&conn, from, frames, Duration::from_secs(1));
                Ok(tokio::time::timeout(hold, trickled).await.ok())
            }
            Attack::Flood => {
                let flood = |claimed| StalledFrames {
                    claimed,
                    ..StalledFrames::CONTROL_128_OF_64_KIB
                };
                let sent = match flood_frames(&conn, from, flood(Claimed::Application), 128).await {
                    Ok(()) => flood_frames(&conn, from, flood(Claimed::Heartbeat), 128).await,
                    Err(e) => Err(e),
                };
                // Served, not refused: a moment for the victim to read it is enough.
                let served = hold.min(Duration::from_secs(2));
                match sent {
                    Ok(()) => Ok(tokio::time::timeout(served, conn.closed()).await.ok()),
                    Err(e) => Err(e),
                }
            }
        };
        conn.close(quinn::VarInt::from_u32(0), b"done");
        outcomes.push(match closed {
            Ok(closed) => outcome(closed.as_ref().and_then(refusal), None),
            Err(e) => outcome(refusal_of(&e), Some(e.to_string())),
        });
    }
    outcomes
}

/// Why a node closed a hostile member's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It kept stalling frames that held inbound budget (QUIC code 5).
    Hoarding,
    /// Its certificate's node is registered at another address: a stolen key (code 7).
    StolenKey,
    /// A frame claimed another node than its certificate names (code 6).
    Impostor,
    /// Its frames held inbound budget and progressed too slowly (trickled, code 8).
    TooSlow,
}

/// Why the node closed the connection, by what `quinn::Connection::closed` returned.
pub fn refusal(closed: &quinn::ConnectionError) -> Option<Refusal> {
    let quinn::ConnectionError::ApplicationClosed(c) = closed else {
        return None;
    };
    [
        (crate::quic::CODE_HOARDING, Refusal::Hoarding),
        (crate::quic::CODE_ELSEWHERE, Refusal::StolenKey),
        (crate::quic::CODE_IMPOSTOR, Refusal::Impostor),
        (crate::quic::CODE_TOO_SLOW, Refusal::TooSlow),
    ]
    .into_iter()
    .find(|(code, _)| c.error_code == quinn::VarInt::from_u32(*code))
    .map(|(_, why)| why)
}

/// Why the node refused the connection, by an error of [`connect_as_member`] or
/// [`open_stalled_frames`].
pub fn refusal_of(error: &NetError) -> Option<Refusal> {
    let (NetError::Connect { source, .. } | NetError::Send { source, .. }) = error else {
        return None;
    };
    match source.downcast_ref::<LinkError>()? {
        LinkError::Connection(closed) => refusal(closed),
        LinkError::Write(quinn::WriteError::ConnectionLost(closed)) => refusal(closed),
        _ => None,
    }
}

/// What went wrong on the hostile connection.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error(transparent)]
    Connect(#[from] quinn::ConnectError),
    #[error(transparent)]
    Connection(#[from] quinn::ConnectionError),
    #[error(transparent)]
    Write(#[from] quinn::WriteError),
    #[error(transparent)]
    Closed(#[from] quinn::ClosedStream),
}
