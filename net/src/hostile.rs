//! A member gone bad, for fault injection (`petrel bench chaos`, the transport tests).
//!
//! [`connect_as_member`] opens a raw QUIC connection with a member's own credentials, as
//! a node whose key was stolen or whose code is broken would; [`open_stalled_frames`] then
//! opens streams that each announce a large frame, send a few bytes of it and stall. A
//! node must keep serving its other peers, heartbeats included, while such a peer holds
//! its share of the inbound budget, and must disconnect it when it keeps stalling
//! (RELIABILITY.md). Used with the key of another node, the connection comes
//! from another address than that node's and is refused at once ([`Refusal::StolenKey`]).

use crate::NetConfig;
use crate::net::NetError;
use crate::sequencer::LaneHeader;
use crate::tls::{CLUSTER_SERVER_NAME, ClusterCredentials};
use petrel_messages::envelope::FRAME_MAGIC;
use petrel_messages::{NodeId, Priority};
use std::net::SocketAddr;

/// How a hostile member's frames look: `streams` frames that each announce
/// `announced_bytes` of body and send only `sent_bytes` of it.
#[derive(Clone, Copy, Debug)]
pub struct StalledFrames {
    /// Streams opened (one frame each).
    pub streams: u64,
    /// Body length each frame's header announces.
    pub announced_bytes: u32,
    /// Bytes of body actually sent before the stream stalls.
    pub sent_bytes: usize,
}

impl StalledFrames {
    /// The stalled-frames attack: five frames of 60 MiB, 300 bytes sent of each.
    pub const FIVE_OF_60_MIB: StalledFrames = StalledFrames {
        streams: 5,
        announced_bytes: 60 << 20,
        sent_bytes: 300,
    };
}

/// A raw QUIC connection to `to`, authenticated with `creds` (a member's certificate), on
/// an endpoint of its own. Keep the endpoint alive as long as the connection.
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

/// Opens `frames.streams` streams on `conn`, each carrying the lane header of node `from`
/// and a frame header that announces `frames.announced_bytes`, then `frames.sent_bytes`
/// of body, and never finishes them. Dropping the returned streams resets them.
pub async fn open_stalled_frames(
    conn: &quinn::Connection,
    from: u32,
    frames: StalledFrames,
) -> Result<Vec<quinn::SendStream>, NetError> {
    let failed = |source: LinkError| NetError::Send {
        peer: NodeId(u32::MAX),
        source: Box::new(source),
    };
    let mut hoarding = Vec::new();
    for seq in 0..frames.streams {
        let mut stream = conn
            .open_uni()
            .await
            .map_err(|e| failed(LinkError::Connection(e)))?;
        let mut bytes = LaneHeader {
            from,
            priority: Priority::NORMAL,
            epoch: 1,
            seq,
        }
        .encode()
        .to_vec();
        bytes.extend_from_slice(&FRAME_MAGIC);
        bytes.extend_from_slice(&64u32.to_le_bytes());
        bytes.extend_from_slice(&frames.announced_bytes.to_le_bytes());
        bytes.resize(bytes.len() + frames.sent_bytes, 7);
        stream
            .write_all(&bytes)
            .await
            .map_err(|e| failed(LinkError::Write(e)))?;
        hoarding.push(stream); // never finished: the frame stalls
    }
    Ok(hoarding)
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
}

/// What `closed` (what `quinn::Connection::closed` returned) says about why the node
/// closed the connection; `None` when it was not refused (it shut down, or the link broke).
pub fn refusal(closed: &quinn::ConnectionError) -> Option<Refusal> {
    let quinn::ConnectionError::ApplicationClosed(c) = closed else {
        return None;
    };
    [
        (crate::quic::CODE_HOARDING, Refusal::Hoarding),
        (crate::quic::CODE_ELSEWHERE, Refusal::StolenKey),
        (crate::quic::CODE_IMPOSTOR, Refusal::Impostor),
    ]
    .into_iter()
    .find(|(code, _)| c.error_code == quinn::VarInt::from_u32(*code))
    .map(|(_, why)| why)
}

/// What an error of [`connect_as_member`] or [`open_stalled_frames`] says about why the
/// node refused the connection (`None`: another failure, e.g. nobody listening).
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

/// True when `closed` says the node closed the connection because its peer kept stalling
/// frames, not because it shut down.
pub fn closed_for_hoarding(closed: &quinn::ConnectionError) -> bool {
    refusal(closed) == Some(Refusal::Hoarding)
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
}
