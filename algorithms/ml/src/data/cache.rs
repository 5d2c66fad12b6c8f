//! A data file is parsed once per process and, across runs, once per version of the file.
//!
//! - **In the process**: the loaders of a file version share one parsed value through an
//!   `Arc` while some loader holds it (the registry keeps a weak reference).
//! - **Across runs**: the value is written next to the file as `<file>.petrel-cache` (a
//!   header naming the format, kind and file version, a checksum, raw little-endian
//!   arrays); a stale or damaged cache is ignored and rewritten. [`CACHE_ENV`]`=off` turns
//!   it off; files below [`MIN_CACHED_BYTES`] parse faster than a cache is read.
//! - **Across the processes of a host**: a loader that finds no cache parses under an
//!   advisory lock on the file (`HostTurn`); the others wait and read its cache.
//!
//! A shared or cached value is checked against the limits in force now; one that fails
//! them is parsed again, so the error is the text's own.

use std::any::Any;
use std::collections::HashMap;
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rustc_hash::FxHasher;

use super::limits::SizeRule;
use super::text::{Blocks, ReaderBlocks, SliceBlocks};
use super::{DataLimits, MlError};

/// The environment variable that turns the binary cache off (`off`, `0`, `false`, `no`).
pub const CACHE_ENV: &str = "PETREL_DATA__CACHE";
/// Files smaller than this are not cached on disk.
pub const MIN_CACHED_BYTES: u64 = 1 << 20;
/// The suffix of a cache file.
pub const CACHE_SUFFIX: &str = ".petrel-cache";

const MAGIC: &[u8; 8] = b"PETRCACH";
/// Bumped whenever a payload's layout or a parser's output changes.
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 48;

/// What identifies one version of a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FileKey {
    path: PathBuf,
    device: u64,
    inode: u64,
    /// Size in bytes.
    pub len: u64,
    modified: (i64, u32),
}

impl FileKey {
    /// The key of the regular file `path` opened as `file`; `None` for anything else.
    pub(crate) fn of(path: &Path, file: &std::fs::File) -> Result<Option<FileKey>, MlError> {
        let meta = file.metadata().map_err(|e| MlError::io(path, e))?;
        if !meta.is_file() {
            return Ok(None);
        }
        let modified = match meta.modified() {
            Ok(time) => match time.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
                Err(e) => (
                    -(e.duration().as_secs() as i64),
                    e.duration().subsec_nanos(),
                ),
            },
            Err(_) => return Ok(None),
        };
        #[cfg(unix)]
        let (device, inode) = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let (device, inode) = (0, 0);
        Ok(Some(FileKey {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            device,
            inode,
            len: meta.len(),
            modified,
        }))
    }

    /// Whether `path` still is this version (after it was read through a map).
    pub(crate) fn still(&self, path: &Path) -> bool {
        std::fs::File::open(path)
            .ok()
            .and_then(|f| FileKey::of(path, &f).ok().flatten())
            .is_some_and(|now| now == *self)
    }
}

type Slot = Arc<Mutex<Option<Weak<dyn Any + Send + Sync>>>>;

fn registry() -> &'static Mutex<HashMap<(FileKey, &'static str), Slot>> {
    static REGISTRY: OnceLock<Mutex<HashMap<(FileKey, &'static str), Slot>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The value of `kind` for the file version `key`: the one another loader of this process
/// holds, else what `load` gives (loaders of the same key wait for the first; an error is
/// not kept).
pub(crate) fn shared<T: Any + Send + Sync>(
    key: &FileKey,
    kind: &'static str,
    load: impl FnOnce() -> Result<T, MlError>,
) -> Result<Arc<T>, MlError> {
    let slot = {
        let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
        // Drop the slots nobody holds or waits on.
        map.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot
                    .try_lock()
                    .map_or(true, |v| v.as_ref().is_some_and(|w| w.strong_count() > 0))
        });
        map.entry((key.clone(), kind)).or_default().clone()
    };
    let mut held = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(value) = held.as_ref().and_then(Weak::upgrade)
        && let Ok(value) = value.downcast::<T>()
    {
        return Ok(value);
    }
    let value = Arc::new(load()?);
    let erased: Arc<dyn Any + Send + Sync> = value.clone();
    *held = Some(Arc::downgrade(&erased));
    Ok(value)
}

/// 0: [`CACHE_ENV`] decides; 1: on; 2: off.
static FORCED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Turns the binary cache on or off for this process whatever [`CACHE_ENV`] says (`None`:
/// it decides again).
pub fn set_disk_cache(enabled: Option<bool>) {
    let value = enabled.map_or(0, |on| if on { 1 } else { 2 });
    FORCED.store(value, std::sync::atomic::Ordering::Relaxed);
}

/// Where the binary cache is read and written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiskCache {
    /// Whether to use it at all.
    pub enabled: bool,
    /// Files below this size are not cached.
    pub min_bytes: u64,
}

impl DiskCache {
    /// From [`CACHE_ENV`].
    pub(crate) fn current() -> DiskCache {
        #[cfg(test)]
        if let Some(cache) = TEST_CACHE.with(|c| c.get()) {
            return cache;
        }
        let off = match FORCED.load(std::sync::atomic::Ordering::Relaxed) {
            0 => std::env::var(CACHE_ENV).is_ok_and(|v| {
                let v = v.trim().to_ascii_lowercase();
                matches!(v.as_str(), "off" | "0" | "false" | "no")
            }),
            forced => forced == 2,
        };
        DiskCache {
            enabled: !off,
            min_bytes: MIN_CACHED_BYTES,
        }
    }

    fn applies(&self, key: &FileKey) -> bool {
        self.enabled && key.len >= self.min_bytes
    }
}

#[cfg(test)]
thread_local! {
    /// A cache setting tests force on the loaders they call.
    pub(crate) static TEST_CACHE: std::cell::Cell<Option<DiskCache>> = const { std::cell::Cell::new(None) };
}

/// The cache file of `path`.
pub fn cache_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(CACHE_SUFFIX);
    PathBuf::from(name)
}

/// A value kept in the binary cache: its kind's tag and its payload.
pub(crate) trait Cached: Sized {
    /// Tells one kind of data from another in the header.
    const KIND: u32;
    /// Writes the payload.
    fn encode(&self, out: &mut Encoder);
    /// Reads the payload back; `None` if it does not decode.
    fn decode(input: &mut Decoder<'_>) -> Option<Self>;
    /// Whether it passes the limits and the size rule in force.
    fn fits(&self, limits: &DataLimits, size: &SizeRule, name: &Path) -> bool;
}

/// The parse of `kind` of the file `path` as the process shares it ([`load`]), `parse`
/// reading its map. A pipe or device is neither shared nor cached ([`parse_file`]).
pub(crate) fn load_file<T: Cached + Any + Send + Sync>(
    path: &Path,
    kind: &'static str,
    whole: bool,
    parse: impl Fn(&mut dyn Blocks, &DataLimits, SizeRule) -> Result<T, MlError>,
) -> Result<Arc<T>, MlError> {
    let file = std::fs::File::open(path).map_err(|e| MlError::io(path, e))?;
    let (limits, key) = (DataLimits::from_env()?, FileKey::of(path, &file)?);
    let parse_once = || {
        parse_file(path, &file, key.as_ref(), whole, |s, size| {
            parse(s, &limits, size)
        })
    };
    let Some(key) = &key else {
        return parse_once().map(Arc::new);
    };
    let size = SizeRule::new(Some(key.len))?;
    load(path, key, kind, (&limits, &size), parse_once)
}

/// Hands `parse` the bytes of `file` (of version `key`) with their size rule: a regular file
/// through a read-only map (or a copy), refused if it changed meanwhile; anything else as a
/// stream, or read whole first with `whole`.
#[allow(unsafe_code)]
pub(crate) fn parse_file<T>(
    path: &Path,
    file: &std::fs::File,
    key: Option<&FileKey>,
    whole: bool,
    mut parse: impl FnMut(&mut dyn Blocks, SizeRule) -> Result<T, MlError>,
) -> Result<T, MlError> {
    let size = SizeRule::new(key.map(|k| k.len))?;
    let read_whole = || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &*file, &mut bytes).map_err(|e| MlError::io(path, e))?;
        Ok::<_, MlError>(bytes)
    };
    let Some(key) = key else {
        return if whole {
            parse(&mut SliceBlocks::new(&read_whole()?), size)
        } else {
            parse(&mut ReaderBlocks::new(file, path), size)
        };
    };
    if key.len == 0 {
        return parse(&mut SliceBlocks::new(&[]), size);
    }
    // SAFETY: the map is read-only, private to this call and dropped before it returns;
    // `parse` returns owned values. Bytes changed meanwhile are still checked text (a
    // truncation raises SIGBUS), and a file whose version moved is refused below.
    let value = match unsafe { memmap2::Mmap::map(file) } {
        Ok(map) => {
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Sequential);
            parse(&mut SliceBlocks::new(&map), size)?
        }
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "cannot map the file; reading it");
            parse(&mut SliceBlocks::new(&read_whole()?), size)?
        }
    };
    if !key.still(path) {
        return Err(MlError::ChangedWhileRead {
            path: path.to_path_buf(),
        });
    }
    Ok(value)
}

/// The parse of `kind` of the file version `key`: the one this process holds, else the disk
/// cache's, else `parse`'s (then cached); one that does not fit the limits is parsed again.
pub(crate) fn load<T: Cached + Any + Send + Sync>(
    path: &Path,
    key: &FileKey,
    kind: &'static str,
    (limits, size): (&DataLimits, &SizeRule),
    parse: impl Fn() -> Result<T, MlError>,
) -> Result<Arc<T>, MlError> {
    let held = shared(key, kind, || {
        let disk = DiskCache::current();
        let cached = || read::<T>(path, key, disk).filter(|v| v.fits(limits, size, path));
        if let Some(value) = cached() {
            return Ok(value);
        }
        // Held while parsing and writing: other processes of the host wait, then read it.
        let turn = disk.applies(key).then(|| HostTurn::take(path)).flatten();
        if turn.is_some()
            && let Some(value) = cached()
        {
            return Ok(value);
        }
        let value = parse()?;
        write(path, key, disk, &value);
        Ok(value)
    })?;
    if held.fits(limits, size, path) {
        Ok(held)
    } else {
        parse().map(Arc::new)
    }
}

/// How long a loader waits for another process of the host to parse a file.
const HOST_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The turn of this process to parse a file and write its cache: an exclusive `flock` on
/// the file through a descriptor of its own, released when dropped or at exit.
pub(crate) struct HostTurn {
    #[cfg(unix)]
    _locked: std::fs::File,
}

impl HostTurn {
    /// Waits for the turn on `path`; `None` where there is no such lock.
    pub(crate) fn take(path: &Path) -> Option<HostTurn> {
        #[cfg(unix)]
        {
            use rustix::fs::{FlockOperation, flock};
            let file = std::fs::File::open(path).ok()?;
            // Bounded: a stopped or slow holder costs at most this wait.
            let deadline = std::time::Instant::now() + HOST_TURN_WAIT;
            let mut waited = false;
            loop {
                match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                    Ok(()) => return Some(HostTurn { _locked: file }),
                    Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR)
                        if std::time::Instant::now() < deadline =>
                    {
                        if !waited {
                            waited = true;
                            tracing::debug!(path = %path.display(), "waiting for another process reading this file");
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::debug!(path = %path.display(), error = %e, "parsing without the host's turn");
                        return None;
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            None
        }
    }
}

/// A payload being written: little-endian words and arrays, each array 8-byte aligned.
#[derive(Default)]
pub(crate) struct Encoder {
    bytes: Vec<u8>,
}

impl Encoder {
    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// An array of plain numbers in this machine's order (little-endian, see [`read`]).
    pub(crate) fn array<T: bytemuck::NoUninit>(&mut self, values: &[T]) {
        let raw: &[u8] = bytemuck::cast_slice(values);
        self.u64(raw.len() as u64);
        self.bytes.extend_from_slice(raw);
        self.bytes.resize(self.bytes.len().next_multiple_of(8), 0);
    }
}

/// A payload being read.
pub(crate) struct Decoder<'a> {
    bytes: &'a [u8],
}

impl Decoder<'_> {
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let (word, rest) = self.bytes.split_first_chunk::<8>()?;
        self.bytes = rest;
        Some(u64::from_le_bytes(*word))
    }

    pub(crate) fn array<T: bytemuck::NoUninit + bytemuck::AnyBitPattern>(
        &mut self,
    ) -> Option<Vec<T>> {
        let len = usize::try_from(self.u64()?).ok()?;
        if len % std::mem::size_of::<T>() != 0 || len > self.bytes.len() {
            return None;
        }
        let values = bytemuck::allocation::pod_collect_to_vec(&self.bytes[..len]);
        let padded = len.next_multiple_of(8).min(self.bytes.len());
        self.bytes = &self.bytes[padded..];
        Some(values)
    }

    /// Whether everything was read.
    pub(crate) fn done(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The checksum of a payload: FxHash over its 8-byte words (any single damaged word shows).
fn checksum(bytes: &[u8]) -> u64 {
    let mut hash = FxHasher::default();
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        hash.write_u64(u64::from_le_bytes(w));
    }
    for &b in words.remainder() {
        hash.write_u8(b);
    }
    hash.write_u64(bytes.len() as u64);
    hash.finish()
}

fn header(kind: u32, key: &FileKey, payload: &[u8]) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&kind.to_le_bytes());
    h[16..24].copy_from_slice(&key.len.to_le_bytes());
    h[24..32].copy_from_slice(&key.modified.0.to_le_bytes());
    h[32..36].copy_from_slice(&key.modified.1.to_le_bytes());
    // 36..40: zero.
    h[40..48].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h
}

/// The cached value of `path` (of version `key`), if one is there and intact.
pub(crate) fn read<T: Cached>(path: &Path, key: &FileKey, cache: DiskCache) -> Option<T> {
    if !cache.applies(key) || cfg!(target_endian = "big") {
        return None;
    }
    let file = cache_path(path);
    let bytes = std::fs::read(&file).ok()?;
    let why = check(&bytes, T::KIND, key);
    let value = why.and_then(|payload| {
        let mut input = Decoder { bytes: payload };
        T::decode(&mut input).filter(|_| input.done())
    });
    if value.is_none() {
        tracing::debug!(cache = %file.display(), "binary cache is stale or damaged; parsing the file");
    }
    value
}

/// The payload of a cache file, if its header matches `kind` and `key` and its checksum holds.
fn check<'a>(bytes: &'a [u8], kind: u32, key: &FileKey) -> Option<&'a [u8]> {
    let (head, rest) = bytes.split_first_chunk::<HEADER_BYTES>()?;
    let (body, sum) = rest.split_last_chunk::<8>()?;
    let want = header(kind, key, body);
    (head == &want && u64::from_le_bytes(*sum) == checksum(body)).then_some(body)
}

/// Writes `value` as the cache of `path` (of version `key`), atomically; a failure is only
/// a debug message.
pub(crate) fn write<T: Cached>(path: &Path, key: &FileKey, cache: DiskCache, value: &T) {
    if !cache.applies(key) || cfg!(target_endian = "big") {
        return;
    }
    let mut payload = Encoder::default();
    value.encode(&mut payload);
    let body = payload.bytes;
    let file = cache_path(path);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut tmp = file.clone().into_os_string();
    tmp.push(format!(".tmp-{}-{nanos}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&header(T::KIND, key, &body))?;
        f.write_all(&body)?;
        f.write_all(&checksum(&body).to_le_bytes())
    });
    let renamed = written.and_then(|()| std::fs::rename(&tmp, &file));
    match renamed {
        Ok(()) => tracing::debug!(cache = %file.display(), "wrote the binary cache"),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            tracing::debug!(cache = %file.display(), error = %e, "not writing the binary cache");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Numbers(Vec<u32>, Vec<f32>);

    impl Cached for Numbers {
        const KIND: u32 = 99;
        fn encode(&self, out: &mut Encoder) {
            out.array(&self.0);
            out.array(&self.1);
        }
        fn decode(input: &mut Decoder<'_>) -> Option<Self> {
            Some(Numbers(input.array()?, input.array()?))
        }
        fn fits(&self, _: &DataLimits, _: &SizeRule, _: &Path) -> bool {
            true
        }
    }

    /// A 3-byte file in a temporary directory (kept alive by the first), its key, and the
    /// disk cache on for any size.
    fn a_cached_file() -> (tempfile::TempDir, PathBuf, FileKey, DiskCache) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "abc").unwrap();
        let key = FileKey::of(&path, &std::fs::File::open(&path).unwrap())
            .unwrap()
            .unwrap();
        let on = DiskCache {
            enabled: true,
            min_bytes: 0,
        };
        (dir, path, key, on)
    }

    #[test]
    fn a_cache_is_read_back_only_for_its_file_version_and_intact() {
        let (_dir, path, key, on) = a_cached_file();
        let value = Numbers(vec![1, 2, 3], vec![0.5, -0.0]);
        write(&path, &key, on, &value);
        let back: Numbers = read(&path, &key, on).unwrap();
        assert_eq!(back.0, value.0);
        assert_eq!(
            back.1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [0.5f32.to_bits(), (-0.0f32).to_bits()]
        );
        let mut other = key.clone();
        other.len += 1;
        assert!(read::<Numbers>(&path, &other, on).is_none());
        let mut bytes = std::fs::read(cache_path(&path)).unwrap();
        let n = bytes.len();
        bytes[n - 12] ^= 1;
        std::fs::write(cache_path(&path), &bytes).unwrap();
        assert!(read::<Numbers>(&path, &key, on).is_none());
        let off = DiskCache {
            enabled: false,
            min_bytes: 0,
        };
        write(&path, &key, on, &value);
        assert!(read::<Numbers>(&path, &key, off).is_none());
        assert!(read::<Numbers>(&path, &key, on).is_some());
    }

    /// A loader that finds another process parsing the file waits for its turn and reads
    /// the cache that process wrote, without parsing.
    #[cfg(unix)]
    #[test]
    fn a_loader_waits_for_another_process_and_reads_its_cache() {
        let (_dir, path, key, on) = a_cached_file();
        // A descriptor of its own locks as another process would.
        let other = HostTurn::take(&path).unwrap();
        let parsed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let loader = scope.spawn(|| {
                TEST_CACHE.with(|c| c.set(Some(on)));
                let limits = DataLimits::default();
                let size = SizeRule::new(Some(key.len)).unwrap();
                load(&path, &key, "test", (&limits, &size), || {
                    parsed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(Numbers(vec![7], vec![]))
                })
            });
            std::thread::sleep(std::time::Duration::from_millis(100));
            write(&path, &key, on, &Numbers(vec![1, 2, 3], vec![]));
            drop(other);
            let value = loader.join().unwrap().unwrap();
            assert_eq!(value.0, [1, 2, 3]);
        });
        assert_eq!(parsed.into_inner(), 0);
    }
}
