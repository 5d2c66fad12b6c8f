//! How fast this machine streams memory with one thread and with two: the ceiling of what
//! two workers on one host gain in passes that only read (`bench lasso-scale` prints it).

use serde::Serialize;
use std::time::Instant;

/// Streaming read bandwidth over a buffer of `bytes`, GB/s (best of the repetitions): one
/// thread reading all of it, two threads each reading its half at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StreamBandwidth {
    pub bytes: usize,
    pub one_thread_gbps: f64,
    pub two_threads_gbps: f64,
}

impl StreamBandwidth {
    pub(crate) fn two_over_one(&self) -> f64 {
        self.two_threads_gbps / self.one_thread_gbps
    }
}

/// Measures [`StreamBandwidth`] over `bytes` (whole `u64`s), best of `repeat` reads each
/// way; a buffer smaller than the last-level cache measures the cache.
pub(crate) fn measure(bytes: usize, repeat: usize) -> StreamBandwidth {
    let words = (bytes / 8).max(2);
    // Written once, so every page is resident before the timed reads.
    let buffer: Vec<u64> = (0..words as u64).collect();
    let (low, high) = buffer.split_at(words / 2);
    let best = |read: &dyn Fn() -> u64| {
        (0..repeat.max(1))
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(read());
                started.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let one = best(&|| sum(&buffer));
    let two = best(&|| {
        std::thread::scope(|s| {
            let other = s.spawn(|| sum(high));
            let mine = sum(low);
            mine.wrapping_add(other.join().unwrap_or_default())
        })
    });
    let total = (words * 8) as f64;
    StreamBandwidth {
        bytes: words * 8,
        one_thread_gbps: total / one / 1e9,
        two_threads_gbps: total / two / 1e9,
    }
}

fn sum(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |a, &w| a.wrapping_add(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_figures_are_measured_over_the_whole_buffer() {
        let b = measure(8 << 20, 2);
        assert_eq!(b.bytes, 8 << 20);
        for gbps in [b.one_thread_gbps, b.two_threads_gbps] {
            // Far below any real memory's speed would mean the read was not timed.
            assert!(gbps.is_finite() && gbps > 0.05, "{b:?}");
        }
        assert!(b.two_over_one() > 0.0);
    }
}
