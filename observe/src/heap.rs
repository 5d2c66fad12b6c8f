//! What a process has allocated, counted at the allocator: [`CountingAllocator`] wraps the
//! system allocator and keeps the bytes live and their peak.
//!
//! The peak RSS includes the binary's code pages (about 20 MB for `petrel node`); the heap
//! peak is what the node itself asked for (capacity reserved and never written included),
//! so read the two together. Unlike the `peak_alloc` crate, it forwards all four calls
//! unchanged (`alloc_zeroed` writes nothing, `realloc` may grow in place).
//!
//! A binary installs it with
//! `#[global_allocator] static HEAP: CountingAllocator = CountingAllocator;`; in a process
//! that did not, [`peak_mb`] is `None`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting the bytes live and their peak (see the module doc).
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAllocator;

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    // A plain load first: most allocations do not raise the peak.
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract; the
// counters are updated only after a successful allocation and never touch the memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above; System's calloc leaves fresh pages untouched.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above; System may resize in place.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            let old = layout.size();
            if new_size >= old {
                grew(new_size - old);
            } else {
                shrank(old - new_size);
            }
        }
        moved
    }
}

/// Marks the counting allocator as installed: call once from `main` of a binary that
/// installed it.
pub fn mark_installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// The bytes allocated now and the most allocated at once; `None` unless the binary
/// installed [`CountingAllocator`] and called [`mark_installed`].
pub fn counts() -> Option<(usize, usize)> {
    INSTALLED.load(Ordering::Relaxed).then(|| {
        let live = LIVE.load(Ordering::Relaxed);
        (live, PEAK.load(Ordering::Relaxed).max(live))
    })
}

/// The most MB this process had allocated at once ([`counts`]).
pub fn peak_mb() -> Option<f64> {
    counts().map(|(_, peak)| peak as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The unit tests of this crate run under it: the counters see every allocation.
    #[global_allocator]
    static HEAP: CountingAllocator = CountingAllocator;

    // The counters are process-wide and the test harness runs tests on threads beside
    // each other: every assertion leaves room for what other threads allocate meanwhile,
    // and the tests of this module, which allocate tens of MB, take turns.
    const SLACK_MB: f64 = 4.0;
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn live_mb() -> Option<f64> {
        counts().map(|(live, _)| live as f64 / 1e6)
    }

    #[test]
    fn the_peak_counts_a_block_while_it_lives_and_the_live_bytes_fall_when_it_goes() {
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        mark_installed();
        let before = live_mb().unwrap_or(f64::NAN);
        let block = vec![1u8; 64_000_000];
        let during = live_mb().unwrap_or(f64::NAN);
        assert!(during - before > 64.0 - SLACK_MB, "{before} -> {during}");
        assert!(peak_mb().unwrap_or(0.0) >= during - SLACK_MB);
        drop(block);
        let after = live_mb().unwrap_or(f64::NAN);
        assert!(during - after > 64.0 - SLACK_MB, "{during} -> {after}");
        assert!(peak_mb().unwrap_or(0.0) > after + 64.0 - SLACK_MB);
    }

    #[test]
    fn zeroed_blocks_and_resized_blocks_are_counted_at_their_new_size() {
        let _turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        mark_installed();
        let before = live_mb().unwrap_or(f64::NAN);
        let mut zeros = vec![0u64; 8_000_000];
        assert!(zeros.iter().all(|&z| z == 0));
        let zeroed = live_mb().unwrap_or(f64::NAN);
        assert!(zeroed - before > 64.0 - SLACK_MB, "{before} -> {zeroed}");
        zeros.truncate(1_000_000);
        zeros.shrink_to_fit();
        let shrunk = live_mb().unwrap_or(f64::NAN);
        assert!(zeroed - shrunk > 56.0 - SLACK_MB, "{zeroed} -> {shrunk}");
        zeros.reserve_exact(15_000_000);
        let grown = live_mb().unwrap_or(f64::NAN);
        assert!(grown - shrunk > 120.0 - SLACK_MB, "{shrunk} -> {grown}");
        assert_eq!(zeros.len(), 1_000_000);
    }
}
