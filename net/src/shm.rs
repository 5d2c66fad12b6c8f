//! Large frames between two nodes of one host through shared memory: the sender writes the
//! encoded frame into a file in `shared_memory_dir` (a tmpfs such as `/dev/shm`) and sends
//! a small control frame over QUIC (wire name [`SHM_MSG_TYPE`], body
//! `epoch u64 | id u64 | len u64`, little endian); the receiver reads the file, deletes
//! it and hands the original frame on, in lane order like any other frame. This is what
//! ps-lite's IPC mode and BytePS do for co-located processes: the bytes skip QUIC's
//! per-packet encryption and the loopback's packet path.
//!
//! Safety: the control frame arrives on the authenticated connection, and the receiver
//! builds the file name itself from numbers only (the sender's verified node id, its
//! own id, the epoch and id in the body), so no path from the wire is ever opened. Files
//! are created exclusively with mode 0600. Bounds: a file is read only if its length is
//! the announced one and at most a peer's share of the inbound budget (the same bound as
//! split messages); a sender keeps at most that many bytes of unread files per peer and
//! sends over QUIC when it would exceed it, so a slow receiver cannot fill the tmpfs.
//! Files a receiver never read (it died) are deleted by their sender when it shuts down.
//!
//! When it is used (see [`crate::NetConfig::shared_memory_dir`]): only when the node sets
//! the directory, the frame has at least `shared_memory_min_bytes`, the peer's address is
//! a loopback address (so both processes are in one network namespace of one host) and no
//! shaper emulates a link (a shaped link must carry the bytes). Every node of a cluster
//! must see the same directory.

use bytes::{Buf, BufMut, Bytes};
use petrel_messages::{CodecError, EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Wire name (and actor name) of a control frame whose payload is in a shared-memory file.
pub const SHM_MSG_TYPE: &str = "petrel.shm";
/// Bytes of a control frame's body.
const SHM_BODY: usize = 24;

/// Why a shared-memory frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The control frame's body is not `epoch | id | len`.
    #[error("shared-memory control frame has a {0}-byte body, expected {SHM_BODY}")]
    BadBody(usize),
    /// The announced length is over the bound.
    #[error("shared-memory frame of {len} bytes is over the limit of {max}")]
    TooBig {
        /// Announced length.
        len: u64,
        /// The bound.
        max: usize,
    },
    /// This node has no `shared_memory_dir`, but a peer sent through one.
    #[error(
        "a peer sent a frame through shared memory but this node has no `shared_memory_dir`; \
         set the same [net] shared_memory_dir on every node of the host"
    )]
    NotEnabled,
    /// The file is missing, unreadable or of the wrong length.
    #[error(
        "shared-memory file {path}: {reason} (do all nodes of this host see the same \
         `shared_memory_dir`?)"
    )]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The file's bytes are not a frame.
    #[error("shared-memory file {path}: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The codec's complaint.
        source: CodecError,
    },
}

/// What a control frame names: the sender's epoch, the file's id and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmRef {
    /// The sending transport's epoch (tells a restarted sender's files apart).
    pub epoch: u64,
    /// Per-sender file number.
    pub id: u64,
    /// Bytes in the file (the encoded frame).
    pub len: u64,
}

impl ShmRef {
    fn encode(&self) -> [u8; SHM_BODY] {
        let mut body = [0u8; SHM_BODY];
        let mut w = &mut body[..];
        w.put_u64_le(self.epoch);
        w.put_u64_le(self.id);
        w.put_u64_le(self.len);
        body
    }

    /// Reads a control frame's body.
    pub fn parse(mut body: &[u8]) -> Result<Self, ShmError> {
        if body.len() != SHM_BODY {
            return Err(ShmError::BadBody(body.len()));
        }
        Ok(Self {
            epoch: body.get_u64_le(),
            id: body.get_u64_le(),
            len: body.get_u64_le(),
        })
    }

    /// The file's name: numbers only, so a receiver never opens a path a peer chose.
    pub fn file_name(&self, from: NodeId, to: NodeId) -> String {
        format!(
            "petrel-shm-{}-{}-{:016x}-{}",
            from.0, to.0, self.epoch, self.id
        )
    }
}

/// Bytes of unread files per peer, against a bound (sans-I/O: the caller says which files
/// are gone).
#[derive(Debug, Default)]
pub struct ShmLedger {
    live: HashMap<NodeId, Vec<(PathBuf, u64)>>,
}

impl ShmLedger {
    /// Forgets the files of `to` for which `gone` says the receiver deleted them, and
    /// returns the bytes still unread.
    pub fn unread(&mut self, to: NodeId, mut gone: impl FnMut(&Path) -> bool) -> u64 {
        let files = self.live.entry(to).or_default();
        files.retain(|(path, _)| !gone(path));
        files.iter().map(|(_, len)| len).sum()
    }

    /// Records a written file.
    pub fn add(&mut self, to: NodeId, path: PathBuf, len: u64) {
        self.live.entry(to).or_default().push((path, len));
    }

    /// Forgets a file (its control frame could not be queued, so it was deleted).
    pub fn remove(&mut self, to: NodeId, path: &Path) {
        if let Some(files) = self.live.get_mut(&to) {
            files.retain(|(p, _)| p != path);
        }
    }

    /// Every file still recorded (deleted at shutdown).
    pub fn drain(&mut self) -> Vec<PathBuf> {
        self.live
            .drain()
            .flat_map(|(_, files)| files.into_iter().map(|(p, _)| p))
            .collect()
    }
}

/// The sending half: writes frames into files and makes their control frames.
pub(crate) struct ShmSender {
    dir: PathBuf,
    node: NodeId,
    epoch: u64,
    min_bytes: usize,
    max_unread: u64,
    next_id: AtomicU64,
    ledger: Mutex<ShmLedger>,
}

impl ShmSender {
    pub(crate) fn new(
        dir: PathBuf,
        node: NodeId,
        epoch: u64,
        min_bytes: usize,
        max_unread: usize,
    ) -> Self {
        Self {
            dir,
            node,
            epoch,
            min_bytes: min_bytes.max(1),
            max_unread: max_unread as u64,
            next_id: AtomicU64::new(0),
            ledger: Mutex::new(ShmLedger::default()),
        }
    }

    /// Writes `frame` for `to` into a new file and returns its control frame, or `None`
    /// when the frame is too small, the peer already has its share of unread files, or
    /// the file cannot be written (the caller then sends over QUIC: nothing is lost).
    pub(crate) fn try_send(&self, to: NodeId, priority: Priority, frame: &[u8]) -> Option<Bytes> {
        if frame.len() < self.min_bytes {
            return None;
        }
        let len = frame.len() as u64;
        let r = ShmRef {
            epoch: self.epoch,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            len,
        };
        let path = self.dir.join(r.file_name(self.node, to));
        {
            let mut ledger = self.ledger.lock().ok()?;
            if ledger.unread(to, |p| !p.exists()) + len > self.max_unread {
                return None;
            }
            // Recorded before writing, so that a shutdown racing this send deletes it.
            ledger.add(to, path.clone(), len);
        }
        let written = write_new(&path, frame);
        let header = EnvelopeHeader {
            from: self.node,
            to,
            actor: SHM_MSG_TYPE.into(),
            msg_type: SHM_MSG_TYPE.into(),
            priority,
            kind: EnvelopeKind::Tell,
        };
        match written
            .and_then(|()| Frame::encode_raw(&header, &r.encode()).map_err(std::io::Error::other))
        {
            Ok(control) => Some(control),
            Err(error) => {
                tracing::debug!(path = %path.display(), %error, "shared-memory write failed; sending over QUIC");
                let _ = std::fs::remove_file(&path);
                if let Ok(mut ledger) = self.ledger.lock() {
                    ledger.remove(to, &path);
                }
                None
            }
        }
    }

    /// Deletes every file no receiver has read yet (called when the transport closes).
    pub(crate) fn clean_up(&self) {
        let paths = match self.ledger.lock() {
            Ok(mut ledger) => ledger.drain(),
            Err(_) => return,
        };
        for path in paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for ShmSender {
    fn drop(&mut self) {
        self.clean_up();
    }
}

/// Creates `path` exclusively (mode 0600) and writes `bytes` into it.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)
}

/// The receiving half: reads the frame a control frame names (from `frame.header.from` to
/// `me`), deletes its file and decodes it.
pub(crate) fn receive(
    dir: Option<&Path>,
    control: &Frame,
    me: NodeId,
    max: usize,
) -> Result<Frame, ShmError> {
    let dir = dir.ok_or(ShmError::NotEnabled)?;
    let r = ShmRef::parse(&control.body)?;
    if r.len > max as u64 {
        return Err(ShmError::TooBig { len: r.len, max });
    }
    let path = dir.join(r.file_name(control.header.from, me));
    let read = read_exact_len(&path, r.len);
    // Deleted whatever happened: a wrong file must not linger in memory.
    let _ = std::fs::remove_file(&path);
    let bytes = read.map_err(|reason| ShmError::File {
        path: path.clone(),
        reason,
    })?;
    Frame::decode(bytes, max).map_err(|source| ShmError::Decode { path, source })
}

/// The file's bytes if it holds exactly `len` of them.
fn read_exact_len(path: &Path, len: u64) -> Result<Bytes, String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let actual = file.metadata().map_err(|e| e.to_string())?.len();
    if actual != len {
        return Err(format!("{actual} bytes, the control frame announced {len}"));
    }
    let mut buf = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut file, &mut buf).map_err(|e| e.to_string())?;
    if buf.len() as u64 != len {
        return Err(format!(
            "read {} bytes, the control frame announced {len}",
            buf.len()
        ));
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Bytes {
        let header = EnvelopeHeader {
            from: NodeId(3),
            to: NodeId(5),
            actor: "a".into(),
            msg_type: "t".into(),
            priority: Priority::default(),
            kind: EnvelopeKind::Tell,
        };
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        Frame::encode_raw(&header, &body).unwrap()
    }

    fn control(bytes: Bytes) -> Frame {
        Frame::decode(bytes, 1 << 20).unwrap()
    }

    #[test]
    fn a_frame_goes_through_a_file_and_the_file_is_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let tx = ShmSender::new(dir.path().into(), NodeId(3), 7, 1000, 1 << 30);
        let original = frame(100_000);
        assert!(
            tx.try_send(NodeId(5), Priority::default(), &frame(10))
                .is_none()
        );
        let c = control(
            tx.try_send(NodeId(5), Priority::default(), &original)
                .unwrap(),
        );
        assert_eq!(c.header.msg_type, SHM_MSG_TYPE);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let got = receive(Some(dir.path()), &c, NodeId(5), 1 << 20).unwrap();
        assert_eq!(got.body.len(), 100_000);
        assert_eq!(got.header.from, NodeId(3));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn unread_files_bound_what_goes_through_memory() {
        let dir = tempfile::tempdir().unwrap();
        let f = frame(50_000);
        let tx = ShmSender::new(dir.path().into(), NodeId(3), 1, 1, 2 * f.len());
        let a = tx.try_send(NodeId(5), Priority::default(), &f).unwrap();
        assert!(tx.try_send(NodeId(5), Priority::default(), &f).is_some());
        // Two unread files: the third goes over QUIC; another peer has its own share.
        assert!(tx.try_send(NodeId(5), Priority::default(), &f).is_none());
        assert!(tx.try_send(NodeId(6), Priority::default(), &f).is_some());
        receive(Some(dir.path()), &control(a), NodeId(5), 1 << 20).unwrap();
        assert!(tx.try_send(NodeId(5), Priority::default(), &f).is_some());
        // Shutdown deletes what nobody read.
        tx.clean_up();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn bad_control_frames_and_files_are_refused_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let tx = ShmSender::new(dir.path().into(), NodeId(3), 1, 1, 1 << 30);
        let c = control(
            tx.try_send(NodeId(5), Priority::default(), &frame(5000))
                .unwrap(),
        );
        // Not enabled here.
        assert!(matches!(
            receive(None, &c, NodeId(5), 1 << 20),
            Err(ShmError::NotEnabled)
        ));
        // Over the bound: refused before any read.
        assert!(matches!(
            receive(Some(dir.path()), &c, NodeId(5), 100),
            Err(ShmError::TooBig { .. })
        ));
        // A truncated file is refused, named, and deleted.
        let r = ShmRef::parse(&c.body).unwrap();
        let path = dir.path().join(r.file_name(NodeId(3), NodeId(5)));
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(100).unwrap();
        let err = receive(Some(dir.path()), &c, NodeId(5), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("petrel-shm-3-5-"), "{err}");
        assert!(!path.exists());
        // Read twice (a replayed control frame): the file is gone.
        assert!(matches!(
            receive(Some(dir.path()), &c, NodeId(5), 1 << 20),
            Err(ShmError::File { .. })
        ));
        // A control frame for someone else's file names a file this node cannot have.
        assert!(ShmRef::parse(&[0u8; 7]).is_err());
    }

    #[test]
    fn file_names_hold_numbers_only() {
        let r = ShmRef {
            epoch: u64::MAX,
            id: 12,
            len: 1,
        };
        let name = r.file_name(NodeId(1), NodeId(2));
        assert_eq!(name, "petrel-shm-1-2-ffffffffffffffff-12");
        assert!(!name.contains('/') && !name.contains(".."));
    }
}
