//! Large frames between two nodes of one host through shared memory (as ps-lite's IPC mode
//! and BytePS do): the bytes skip QUIC's per-packet encryption and the loopback packet path.
//! Each sender keeps, per peer, a few reusable **slots**: mapped files in
//! `shared_memory_dir` (a tmpfs; a fresh file costs more than QUIC on loopback, hence the
//! reuse). To send, it copies the frame into a free slot, marks it full and sends a small
//! control frame over QUIC ([`SHM_MSG_TYPE`], body `epoch u64 | slot u64 | len u64 |
//! file_len u64`, little endian). The receiver maps the file, hands the frame on as bytes
//! pointing into the mapping, and marks the slot free when the last of them is dropped.
//! A slot's 64-byte header starts with its state word (0 free, 1 full; release/acquire).
//!
//! Trust: the control frame arrives on the authenticated connection and the receiver builds
//! the file name from numbers only (verified sender id, own id, epoch, slot), so no path
//! from the wire is opened. Files are created exclusively, mode 0600, and only grown. The
//! receiver checks the length against the peer's inbound-budget share and the file size,
//! and refuses a slot not marked full. A co-located member is trusted not to write into a
//! slot it handed over or shrink its file (that would corrupt the message or SIGBUS the
//! receiver): only nodes sharing a host and a user, with the directory set, use this path.
//! Bounds: [`MAX_SLOTS`] slots and a peer's share of `inbound_buffer_bytes` per peer;
//! beyond that frames go over QUIC. Senders delete their files when the transport closes.
//!
//! Used only when the node sets the directory ([`crate::NetConfig::shared_memory_dir`],
//! the same for every node of the host), the frame has `shared_memory_min_bytes`, the peer
//! is on a loopback address and no shaper emulates a link.

use crate::error::NetError;
use bytes::{Buf, BufMut, Bytes};
use memmap2::{MmapOptions, MmapRaw};
use petrel_messages::{EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Wire name (and actor name) of a control frame whose payload is in a shared-memory slot.
pub const SHM_MSG_TYPE: &str = "petrel.shm";
/// Slots a sender keeps per peer.
pub const MAX_SLOTS: usize = 8;
/// Bytes of a control frame's body.
pub(crate) const SHM_BODY: usize = 32;
/// Bytes before a slot's data: the state word, padded to a cache line.
const SLOT_HEADER: usize = 64;
const FREE: u32 = 0;
const FULL: u32 = 1;
/// Claimed by the sender, which is copying a frame into it outside its lock.
const WRITING: u32 = 2;

/// What a control frame names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmRef {
    /// The sending transport's epoch (tells a restarted sender's slots apart).
    pub epoch: u64,
    /// The slot, below [`MAX_SLOTS`].
    pub slot: u64,
    /// Bytes of the frame in the slot.
    pub len: u64,
    /// The slot file's size when the frame was written (the receiver maps at least this).
    pub file_len: u64,
}

impl ShmRef {
    fn encode(&self) -> [u8; SHM_BODY] {
        let mut body = [0u8; SHM_BODY];
        let mut w = &mut body[..];
        w.put_u64_le(self.epoch);
        w.put_u64_le(self.slot);
        w.put_u64_le(self.len);
        w.put_u64_le(self.file_len);
        body
    }

    /// Reads a control frame's body, checking a slot below [`MAX_SLOTS`] and a frame of at
    /// most `max` bytes that fits the file.
    pub fn parse(mut body: &[u8], max: usize) -> Result<Self, NetError> {
        if body.len() != SHM_BODY {
            return Err(NetError::ShmBadBody(body.len()));
        }
        let r = Self {
            epoch: body.get_u64_le(),
            slot: body.get_u64_le(),
            len: body.get_u64_le(),
            file_len: body.get_u64_le(),
        };
        if r.slot >= MAX_SLOTS as u64 {
            let why = format!("slot {} of at most {MAX_SLOTS}", r.slot);
            return Err(NetError::ShmOutOfBounds(why));
        }
        if r.len > max as u64 {
            let why = format!("{} bytes over the limit of {max}", r.len);
            return Err(NetError::ShmOutOfBounds(why));
        }
        if r.file_len < SLOT_HEADER as u64 + r.len || r.file_len > (SLOT_HEADER + max) as u64 {
            let why = format!("a {}-byte frame in a {}-byte slot file", r.len, r.file_len);
            return Err(NetError::ShmOutOfBounds(why));
        }
        Ok(r)
    }
}

/// A slot file's name: numbers only, so a receiver never opens a path a peer chose.
pub fn slot_file_name(from: NodeId, to: NodeId, epoch: u64, slot: u64) -> String {
    format!("petrel-shm-{}-{}-{epoch:016x}-{slot}", from.0, to.0)
}

/// The state word at the start of a mapped slot.
fn state(map: &MmapRaw) -> &AtomicU32 {
    // SAFETY: the mapping is page-aligned and at least SLOT_HEADER bytes long (checked when
    // mapped), and both processes access the word only atomically.
    unsafe { &*(map.as_mut_ptr() as *const AtomicU32) }
}

/// Which slot a sender uses for a frame of `need` bytes (sans-I/O): a large enough free one,
/// else a new one, else a free one grown, within the slot count and capacity budget.
/// `slots` are (capacity, free) pairs; capacities are data bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotChoice {
    /// Reuse slot `i` as it is.
    Reuse(usize),
    /// Create a new slot with this capacity.
    Create(usize),
    /// Grow free slot `i` to this capacity.
    Grow(usize, usize),
    /// No slot: send over QUIC.
    None,
}

/// See [`SlotChoice`]. New capacities are powers of two (at least 1 MiB).
pub fn choose_slot(slots: &[(usize, bool)], need: usize, budget: usize) -> SlotChoice {
    if let Some(i) = slots.iter().position(|&(cap, free)| free && cap >= need) {
        return SlotChoice::Reuse(i);
    }
    let cap = need.next_power_of_two().max(1 << 20);
    let total: usize = slots.iter().map(|&(c, _)| c).sum();
    if slots.len() < MAX_SLOTS && total + cap <= budget {
        return SlotChoice::Create(cap);
    }
    slots
        .iter()
        .position(|&(_, free)| free)
        .filter(|&i| total - slots[i].0 + cap <= budget)
        .map_or(SlotChoice::None, |i| SlotChoice::Grow(i, cap))
}

struct SenderSlot {
    file: File,
    path: PathBuf,
    /// Shared so a copy in progress keeps the mapping alive after the lock is released.
    map: Arc<MmapRaw>,
    cap: usize,
}

impl SenderSlot {
    fn free(&self) -> bool {
        state(&self.map).load(Ordering::Acquire) == FREE
    }
}

/// The sending half: copies frames into slots and makes their control frames.
pub(crate) struct ShmSender {
    dir: PathBuf,
    node: NodeId,
    epoch: u64,
    min_bytes: usize,
    budget: usize,
    peers: Mutex<HashMap<NodeId, Vec<SenderSlot>>>,
}

impl ShmSender {
    pub(crate) fn new(
        dir: PathBuf,
        node: NodeId,
        epoch: u64,
        min_bytes: usize,
        budget: usize,
    ) -> Self {
        Self {
            dir,
            node,
            epoch,
            min_bytes: min_bytes.max(1),
            budget,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// Copies `frame` for `to` into a slot and returns its control frame, or `None` (send
    /// over QUIC instead).
    pub(crate) fn try_send(&self, to: NodeId, priority: Priority, frame: &[u8]) -> Option<Bytes> {
        if frame.len() < self.min_bytes {
            return None;
        }
        let mut peers = self.peers.lock().ok()?;
        let slots = peers.entry(to).or_default();
        let view: Vec<(usize, bool)> = slots.iter().map(|s| (s.cap, s.free())).collect();
        let i = match choose_slot(&view, frame.len(), self.budget) {
            SlotChoice::Reuse(i) => i,
            SlotChoice::Create(cap) => {
                let path = self.dir.join(slot_file_name(
                    self.node,
                    to,
                    self.epoch,
                    slots.len() as u64,
                ));
                match create_slot(&path, cap) {
                    Ok(slot) => slots.push(slot),
                    Err(error) => {
                        tracing::debug!(path = %path.display(), %error, "no shared-memory slot; sending over QUIC");
                        let _ = std::fs::remove_file(&path);
                        return None;
                    }
                }
                slots.len() - 1
            }
            SlotChoice::Grow(i, cap) => {
                if let Err(error) = grow_slot(&mut slots[i], cap) {
                    tracing::debug!(path = %slots[i].path.display(), %error, "shared-memory slot not grown; sending over QUIC");
                    return None;
                }
                i
            }
            SlotChoice::None => return None,
        };
        // Claim the slot, then copy outside the lock so other peers' sends are not held up.
        let slot = &slots[i];
        state(&slot.map).store(WRITING, Ordering::Release);
        let (map, cap) = (slot.map.clone(), slot.cap);
        drop(peers);
        // SAFETY: the slot was free (the receiver dropped every view of it) and is now
        // claimed, so nobody else touches its data; the mapping holds at least
        // `SLOT_HEADER + frame.len()` bytes and `map` keeps it alive.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                map.as_mut_ptr().add(SLOT_HEADER),
                frame.len(),
            );
        }
        state(&map).store(FULL, Ordering::Release);
        let r = ShmRef {
            epoch: self.epoch,
            slot: i as u64,
            len: frame.len() as u64,
            file_len: (SLOT_HEADER + cap) as u64,
        };
        let header = EnvelopeHeader {
            from: self.node,
            to,
            actor: SHM_MSG_TYPE.into(),
            msg_type: SHM_MSG_TYPE.into(),
            priority,
            kind: EnvelopeKind::Tell,
        };
        match Frame::encode_raw(&header, &r.encode()) {
            Ok(control) => Some(control),
            Err(_) => {
                state(&map).store(FREE, Ordering::Release);
                None
            }
        }
    }

    /// Deletes every slot file (called when the transport closes).
    pub(crate) fn clean_up(&self) {
        if let Ok(mut peers) = self.peers.lock() {
            for slot in peers.drain().flat_map(|(_, slots)| slots) {
                let _ = std::fs::remove_file(&slot.path);
            }
        }
    }
}

impl Drop for ShmSender {
    fn drop(&mut self) {
        self.clean_up();
    }
}

fn map(file: &File) -> std::io::Result<MmapRaw> {
    MmapOptions::new().map_raw(file)
}

/// Creates a slot file exclusively (mode 0600) with room for `cap` data bytes, mapped.
fn create_slot(path: &Path, cap: usize) -> std::io::Result<SenderSlot> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create_new(true);
    options.mode(0o600);
    let file = options.open(path)?;
    // Held for the slot's life: an unlocked file is a dead sender's ([`remove_stale_slots`]).
    lock_exclusive(&file)?;
    file.set_len((SLOT_HEADER + cap) as u64)?;
    let map = Arc::new(map(&file)?);
    Ok(SenderSlot {
        file,
        path: path.to_path_buf(),
        map,
        cap,
    })
}

/// Takes `file`'s exclusive advisory lock without waiting.
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock only reads the descriptor, which `file` keeps open.
    match unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Deletes the slot files in `dir` no live sender holds locked; returns their paths.
pub fn remove_stale_slots(dir: &Path) -> Vec<PathBuf> {
    crate::private_files::remove_leftovers(dir, "petrel-shm-", |path| {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path);
        file.is_ok_and(|file| lock_exclusive(&file).is_ok() && std::fs::remove_file(path).is_ok())
    })
}

fn grow_slot(slot: &mut SenderSlot, cap: usize) -> std::io::Result<()> {
    slot.file.set_len((SLOT_HEADER + cap) as u64)?;
    slot.map = Arc::new(map(&slot.file)?);
    slot.cap = cap;
    Ok(())
}

/// A full slot's bytes as the receiver hands them on; freed when the last clone drops.
struct SlotView {
    map: Arc<MmapRaw>,
    len: usize,
}

impl AsRef<[u8]> for SlotView {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: checked when the view was made: the mapping holds SLOT_HEADER + len
        // bytes, and the slot is marked full, so its sender does not write into it until
        // this view is dropped.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(SLOT_HEADER), self.len) }
    }
}

impl Drop for SlotView {
    fn drop(&mut self) {
        state(&self.map).store(FREE, Ordering::Release);
    }
}

/// The receiving half: the slots it has mapped, by (sender, epoch, slot).
pub(crate) struct ShmReceiver {
    dir: Option<PathBuf>,
    me: NodeId,
    maps: HashMap<(NodeId, u64, u64), Arc<MmapRaw>>,
}

impl ShmReceiver {
    pub(crate) fn new(dir: Option<PathBuf>, me: NodeId) -> Self {
        Self {
            dir,
            me,
            maps: HashMap::new(),
        }
    }

    /// The frame a control frame names, as bytes pointing into the slot.
    pub(crate) fn receive(&mut self, control: &Frame, max: usize) -> Result<Frame, NetError> {
        let dir = self.dir.as_deref().ok_or(NetError::ShmNotEnabled)?;
        let r = ShmRef::parse(&control.body.to_bytes(), max)?;
        let from = control.header.from;
        let path = dir.join(slot_file_name(from, self.me, r.epoch, r.slot));
        let slot_error = |reason: String| NetError::ShmSlot {
            path: path.clone(),
            reason,
        };
        let key = (from, r.epoch, r.slot);
        let mapped = self
            .maps
            .get(&key)
            .filter(|m| m.len() as u64 >= r.file_len)
            .cloned();
        let map = match mapped {
            Some(m) => m,
            None => {
                // Read and write: the receiver marks the slot free in its header.
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| slot_error(e.to_string()))?;
                let size = file
                    .metadata()
                    .map_err(|e| slot_error(e.to_string()))?
                    .len();
                if size < r.file_len {
                    let announced = r.file_len;
                    let why = format!("{size} bytes, the control frame announced {announced}");
                    return Err(slot_error(why));
                }
                let m = Arc::new(map(&file).map_err(|e| slot_error(e.to_string()))?);
                // A restarted sender's old slots are gone for good.
                self.maps.retain(|&(f, e, _), _| f != from || e == r.epoch);
                self.maps.insert(key, m.clone());
                m
            }
        };
        if state(&map).load(Ordering::Acquire) != FULL {
            return Err(slot_error(
                "not marked full (a replayed control frame?)".into(),
            ));
        }
        let bytes = Bytes::from_owner(SlotView {
            map,
            len: r.len as usize,
        });
        Frame::decode(bytes, max).map_err(|source| NetError::ShmDecode { path, source })
    }
}

#[cfg(test)]
mod tests;
