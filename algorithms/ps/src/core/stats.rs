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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
