//! [`NetError`]: every failure the transport reports, from `[net]` validation and
//! certificates to connects, sends and shared-memory frames.

use crate::net::LinkCause;
use crate::shm::SHM_BODY;
use crate::tls::InvalidNodeName;
use petrel_messages::{CodecError, NodeId};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the transport could not be configured, start, connect, send or read a frame.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A `[net]` value outside its range ([`crate::NetConfig::validate`]), e.g.
    /// `[net] max_message_bytes = 0: must be at least 1024`.
    #[error("[net] {key} = {value}: {rule}")]
    Config {
        /// The key, as in `[net]`.
        key: &'static str,
        /// The value given.
        value: String,
        /// What the value must be.
        rule: String,
    },
    /// No address was registered for the peer ([`crate::Net::add_peer`]).
    #[error("no address known for {0}")]
    UnknownPeer(NodeId),
    /// The QUIC connection to a peer could not be opened.
    #[error("cannot connect to {peer} at {addr}: {source}")]
    Connect {
        /// The peer.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
        /// What failed (quinn's error, or a timeout).
        #[source]
        source: LinkCause,
    },
    /// A frame could not be written or was refused.
    #[error("sending to {peer} failed: {source}")]
    Send {
        /// The peer.
        peer: NodeId,
        /// What failed.
        #[source]
        source: LinkCause,
    },
    /// The frame is larger than [`crate::NetConfig::max_message_bytes`].
    #[error("frame of {len} bytes exceeds max_message_bytes = {max}")]
    Oversize {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// [`crate::Net::shutdown`] was called.
    #[error("transport is shut down")]
    Closed,
    /// The UDP socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The transport's runtime or socket could not be set up.
    #[error("transport runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// `shared_memory_dir` is set but is not a directory this node can use.
    #[error("[net] shared_memory_dir = {path}: {source}")]
    SharedMemoryDir {
        /// The configured directory.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: std::io::Error,
    },
    /// rcgen failed to generate a key or certificate.
    #[error("certificate generation failed: {0}")]
    CertGenerate(#[from] rcgen::Error),
    /// A certificate or key file could not be read or written.
    #[error("{path}: {error}")]
    CertFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// A file is not the PEM it should be.
    #[error("{path}: invalid PEM: {error}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        error: String,
    },
    /// rustls or quinn refused the TLS configuration.
    #[error("TLS configuration rejected: {0}")]
    TlsConfig(String),
    /// A node name that cannot name files and certificates.
    #[error(transparent)]
    NodeName(#[from] InvalidNodeName),
    /// A node's certificate is not this node's, or not from the cluster CA beside it.
    #[error("{path}: not a certificate of node {node} from the CA in ca.pem ({reason})")]
    NotThisNode {
        /// The certificate file.
        path: PathBuf,
        /// The node it was loaded for.
        node: String,
        /// What the check found.
        reason: String,
    },
    /// A shared-memory control frame's body is not `epoch | slot | len | file_len`.
    #[error("shared-memory control frame has a {0}-byte body, expected {SHM_BODY}")]
    ShmBadBody(usize),
    /// A shared-memory frame's announced length or slot is out of bounds.
    #[error("shared-memory frame: {0}")]
    ShmOutOfBounds(String),
    /// This node has no `shared_memory_dir`, but a peer sent through one.
    #[error(
        "a peer sent a frame through shared memory but this node has no `shared_memory_dir`; \
         set the same [net] shared_memory_dir on every node of the host"
    )]
    ShmNotEnabled,
    /// The slot file is missing, unreadable, too small or not marked full.
    #[error(
        "shared-memory slot {path}: {reason} (do all nodes of this host see the same \
         `shared_memory_dir`?)"
    )]
    ShmSlot {
        /// The slot's file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The slot's bytes are not a frame.
    #[error("shared-memory slot {path}: {source}")]
    ShmDecode {
        /// The slot's file.
        path: PathBuf,
        /// The codec's complaint.
        source: CodecError,
    },
}
