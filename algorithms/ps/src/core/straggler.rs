//! Emulated compute time per clock, with stragglers as in a shared cluster.
//!
//! *Transient* stragglers (as the SSP and ESSP papers measured): each clock of each worker
//! is slowed with some probability. A *persistent* straggler is always slower and holds
//! every shard's min clock. Whether clock `c` of worker `w` is slowed is a pure function of
//! the seed, `w` and `c`, so every consistency model of a comparison sees the same slowdowns.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::core::types::mix64;

/// Per-clock compute time of every worker.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StragglerModel {
    /// Compute time of a normal clock (ms).
    pub clock_ms: f64,
    /// A worker whose every clock takes `persistent_factor` times longer.
    pub persistent: Option<u32>,
    /// Slowdown of the persistent straggler (>= 1).
    pub persistent_factor: f64,
    /// Probability that a given clock of a given worker is slowed (0 = none).
    pub transient_probability: f64,
    /// Slowdown of a transiently slowed clock (>= 1).
    pub transient_factor: f64,
    /// Seed of the transient slowdowns.
    pub seed: u64,
}

/// splitmix64 of one word, so neighbouring (worker, clock) pairs are independent draws.
fn mix(z: u64) -> u64 {
    mix64(z.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

impl StragglerModel {
    /// Whether clock `clock` of `worker` is transiently slowed.
    pub fn transient(&self, worker: u32, clock: u64) -> bool {
        if self.transient_probability <= 0.0 {
            return false;
        }
        let h = mix(mix(self.seed ^ (u64::from(worker) << 40)) ^ clock);
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        u < self.transient_probability
    }

    /// How many times longer than `clock_ms` clock `clock` of `worker` takes.
    pub fn factor(&self, worker: u32, clock: u64) -> f64 {
        let mut f = 1.0;
        if self.persistent == Some(worker) {
            f *= self.persistent_factor.max(1.0);
        }
        if self.transient(worker, clock) {
            f *= self.transient_factor.max(1.0);
        }
        f
    }

    /// Emulated compute time of clock `clock` of `worker`.
    pub fn clock_time(&self, worker: u32, clock: u64) -> Duration {
        Duration::from_secs_f64((self.clock_ms * self.factor(worker, clock)).max(0.0) / 1000.0)
    }

    /// Expected ms per clock of one worker, and of the slowest of `workers` (BSP's pace).
    pub fn expected_clock_ms(&self, workers: u32) -> (f64, f64) {
        let p = self.transient_probability.clamp(0.0, 1.0);
        let tf = self.transient_factor.max(1.0);
        let pf = if self.persistent.is_some() {
            self.persistent_factor.max(1.0)
        } else {
            1.0
        };
        let mean = self.clock_ms * (1.0 + p * (tf - 1.0));
        // Worker 0 stands for the persistent one (factor pf); the others are plain. The
        // slowest factor is pf*tf if worker 0 is slowed, else max(pf, tf) if another is.
        let others = workers.max(1) - 1;
        let any_other = 1.0 - (1.0 - p).powi(others as i32);
        let slowest = p * pf * tf + (1.0 - p) * (any_other * pf.max(tf) + (1.0 - any_other) * pf);
        (mean, self.clock_ms * slowest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No compute time and no stragglers.
    fn plain() -> StragglerModel {
        StragglerModel {
            clock_ms: 0.0,
            persistent: None,
            persistent_factor: 1.0,
            transient_probability: 0.0,
            transient_factor: 1.0,
            seed: 0,
        }
    }

    fn transient(p: f64, f: f64) -> StragglerModel {
        StragglerModel {
            clock_ms: 10.0,
            transient_probability: p,
            transient_factor: f,
            seed: 42,
            ..plain()
        }
    }

    #[test]
    fn slowdowns_are_reproducible_per_seed_worker_and_clock() {
        let m = transient(0.2, 4.0);
        for w in 0..4 {
            for c in 0..200 {
                assert_eq!(m.transient(w, c), m.transient(w, c));
            }
        }
        let other = StragglerModel { seed: 43, ..m };
        let same = (0..400).filter(|&c| m.transient(0, c) == other.transient(0, c));
        assert!(same.count() < 400, "another seed gives other slowdowns");
    }

    #[test]
    fn the_fraction_of_slowed_clocks_is_the_probability() {
        let m = transient(0.15, 3.0);
        let n = 20_000u64;
        let slowed = (0..4)
            .flat_map(|w| (0..n).map(move |c| (w, c)))
            .filter(|&(w, c)| m.transient(w, c))
            .count() as f64;
        let frac = slowed / (4 * n) as f64;
        assert!((frac - 0.15).abs() < 0.01, "{frac}");
        // Workers are slowed independently: not all at the same clocks.
        let together = (0..n)
            .filter(|&c| m.transient(0, c) && m.transient(1, c))
            .count();
        assert!((together as f64 / n as f64 - 0.15 * 0.15).abs() < 0.01);
    }

    #[test]
    fn persistent_and_transient_multiply_and_none_is_plain() {
        let plain = StragglerModel {
            clock_ms: 20.0,
            ..plain()
        };
        assert_eq!(plain.clock_time(3, 7), Duration::from_millis(20));
        let both = StragglerModel {
            clock_ms: 10.0,
            persistent: Some(0),
            persistent_factor: 4.0,
            transient_probability: 1.0,
            transient_factor: 2.0,
            seed: 1,
        };
        assert_eq!(both.factor(0, 5), 8.0);
        assert_eq!(both.factor(1, 5), 2.0);
        assert_eq!(both.clock_time(0, 5), Duration::from_millis(80));
    }

    #[test]
    fn bsp_pays_the_slowest_worker_per_clock() {
        let m = transient(0.1, 4.0);
        let (mean, slowest) = m.expected_clock_ms(4);
        assert!((mean - 13.0).abs() < 1e-9);
        // 1 - 0.9^4 = 0.3439 of the clocks have a slowed worker.
        assert!((slowest - 10.0 * (1.0 + 0.3439 * 3.0)).abs() < 1e-6);
    }
}
