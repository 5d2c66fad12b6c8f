//! Observed-staleness statistics (the quantities ESSP's convergence bound depends on).

use serde::{Deserialize, Serialize};

/// Running count, mean, variance (Welford) and max of observed staleness values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StalenessStats {
    count: u64,
    mean: f64,
    /// Sum of squared deviations from the mean (Welford's M2).
    m2: f64,
    max: u64,
}

/// A plain report of `StalenessStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StalenessReport {
    /// Reads recorded.
    pub count: u64,
    /// Mean staleness (clocks).
    pub mean: f64,
    /// Population variance.
    pub variance: f64,
    /// Largest staleness.
    pub max: u64,
}

impl StalenessReport {
    /// The part of the pooled variance of `parts` (e.g. one per worker) *between* them: the
    /// read-weighted variance of their means (law of total variance). Under ESSP a faster
    /// worker reads staler rows, a spread that shows here, not in per-worker variances.
    pub fn between_variance(parts: &[StalenessReport]) -> f64 {
        let n: u64 = parts.iter().map(|p| p.count).sum();
        if n == 0 {
            return 0.0;
        }
        let n = n as f64;
        let mean = parts.iter().map(|p| p.count as f64 * p.mean).sum::<f64>() / n;
        parts
            .iter()
            .map(|p| p.count as f64 * (p.mean - mean).powi(2))
            .sum::<f64>()
            / n
    }
}

impl StalenessStats {
    /// No reads yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one read of this staleness.
    pub fn record(&mut self, staleness: u64) {
        self.count += 1;
        let x = staleness as f64;
        let d = x - self.mean;
        self.mean += d / self.count as f64;
        self.m2 += d * (x - self.mean);
        self.max = self.max.max(staleness);
    }

    /// Combines two streams (Chan et al.'s parallel update), e.g. over all workers.
    pub fn merge(&mut self, other: &StalenessStats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other.clone();
            return;
        }
        let n = (self.count + other.count) as f64;
        let d = other.mean - self.mean;
        self.mean += d * other.count as f64 / n;
        self.m2 += other.m2 + d * d * self.count as f64 * other.count as f64 / n;
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// Reads recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean staleness (clocks).
    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// Population variance (0 with fewer than two samples).
    pub fn variance(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            self.m2 / self.count as f64
        }
    }

    /// Largest staleness.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The summary written to metrics.json.
    pub fn report(&self) -> StalenessReport {
        StalenessReport {
            count: self.count,
            mean: self.mean,
            variance: self.variance(),
            max: self.max,
        }
    }
}

/// What a worker's reads cost it: requests sent, and how often and long it blocked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadStats {
    /// Row reads sent to shards (misses, refreshes ahead, prefetches; not barrier probes).
    pub rows_requested: u64,
    /// Of those, rows requested ahead of the clock that needs them (refresh ahead).
    pub rows_ahead: u64,
    /// `Reads` messages sent (rows to one shard go in one message per round).
    pub request_messages: u64,
    /// Round trips a read waited for (one `get_many` to every shard at once counts once).
    pub blocking_rounds: u64,
    /// Of those, rounds that needed more than the min clock last seen (slower workers).
    pub bound_rounds: u64,
    /// Seconds blocked in all rounds.
    pub blocked_s: f64,
    /// Seconds blocked in the bound rounds.
    pub bound_blocked_s: f64,
}

impl ReadStats {
    /// Adds another worker's (or period's) figures.
    pub fn merge(&mut self, o: &ReadStats) {
        self.rows_requested += o.rows_requested;
        self.rows_ahead += o.rows_ahead;
        self.request_messages += o.request_messages;
        self.blocking_rounds += o.blocking_rounds;
        self.bound_rounds += o.bound_rounds;
        self.blocked_s += o.blocked_s;
        self.bound_blocked_s += o.bound_blocked_s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_variance_splits_the_pooled_variance() {
        // A worker always at staleness 0 and one alternating 2 and 4: pooled variance over
        // the six reads = between (the means 0 and 3) + within (0 and 1, weighted).
        let mut a = StalenessStats::new();
        let mut b = StalenessStats::new();
        for _ in 0..2 {
            a.record(0);
        }
        for x in [2, 4, 2, 4] {
            b.record(x);
        }
        let (ra, rb) = (a.report(), b.report());
        let mut all = a.clone();
        all.merge(&b);
        let between = StalenessReport::between_variance(&[ra, rb]);
        // Pooled mean 2: between = (2 * 4 + 4 * 1) / 6 = 2; within = 4 * 1 / 6.
        assert!((between - 2.0).abs() < 1e-12, "{between}");
        let within = (ra.count as f64 * ra.variance + rb.count as f64 * rb.variance) / 6.0;
        assert!((all.variance() - (between + within)).abs() < 1e-12);
        assert_eq!(StalenessReport::between_variance(&[]), 0.0);
        assert_eq!(StalenessReport::between_variance(&[rb]), 0.0);
    }

    #[test]
    fn welford_matches_direct_formula() {
        let xs = [0u64, 1, 1, 3, 2, 0, 5];
        let mut s = StalenessStats::new();
        xs.iter().for_each(|&x| s.record(x));
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<u64>() as f64 / n;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        let r = s.report();
        assert_eq!(r.count, 7);
        assert!((r.mean - mean).abs() < 1e-12);
        assert!((r.variance - var).abs() < 1e-12);
        assert_eq!(r.max, 5);
    }

    #[test]
    fn read_stats_merge_adds_every_figure() {
        let a = ReadStats {
            rows_requested: 10,
            rows_ahead: 4,
            request_messages: 2,
            blocking_rounds: 1,
            bound_rounds: 1,
            blocked_s: 0.5,
            bound_blocked_s: 0.25,
        };
        let mut m = a;
        m.merge(&a);
        assert_eq!(
            (m.rows_requested, m.rows_ahead, m.request_messages),
            (20, 8, 4)
        );
        assert_eq!((m.blocking_rounds, m.bound_rounds), (2, 2));
        assert_eq!((m.blocked_s, m.bound_blocked_s), (1.0, 0.5));
    }

    #[test]
    fn merge_equals_single_stream() {
        let (mut a, mut b, mut all) = (
            StalenessStats::new(),
            StalenessStats::new(),
            StalenessStats::new(),
        );
        for x in 0..10u64 {
            all.record(x % 4);
            if x < 3 {
                a.record(x % 4)
            } else {
                b.record(x % 4)
            }
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert!((a.mean() - all.mean()).abs() < 1e-12);
        assert!((a.variance() - all.variance()).abs() < 1e-12);
        assert_eq!(a.max(), all.max());
        let mut e = StalenessStats::new();
        e.merge(&all);
        assert_eq!(e, all);
    }
}
