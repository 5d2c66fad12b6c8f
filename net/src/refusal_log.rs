//! Which refused handshakes are worth a log line: the first from a source, then at most
//! one a minute per source carrying how many were refused since. Anyone can reach a
//! node's port, so a log line per refusal would let them flood the log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// One line per source per this long.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Sources remembered at most (the oldest are forgotten first).
const MAX_SOURCES: usize = 4096;

/// Per source: when it was last logged, and its refusals since.
#[derive(Debug, Default)]
pub struct RefusalLog {
    sources: HashMap<IpAddr, (Instant, u64)>,
}

impl RefusalLog {
    /// Counts a refusal from `source` at `now`; returns the refusals the log line should
    /// report (this one included) when one is due, else `None`.
    pub fn refused(&mut self, source: IpAddr, now: Instant) -> Option<u64> {
        if let Some((last, count)) = self.sources.get_mut(&source) {
            *count += 1;
            if now.duration_since(*last) < REFUSAL_LOG_INTERVAL {
                return None;
            }
            let refused = *count;
            *last = now;
            *count = 0;
            return Some(refused);
        }
        if self.sources.len() >= MAX_SOURCES {
            let oldest = self.sources.iter().min_by_key(|(_, (at, _))| *at);
            if let Some(oldest) = oldest.map(|(ip, _)| *ip) {
                self.sources.remove(&oldest);
            }
        }
        self.sources.insert(source, (now, 0));
        Some(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_logged_once_a_minute_with_its_count() {
        let mut log = RefusalLog::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert_eq!(log.refused(a, t0), Some(1));
        for i in 1..=500 {
            assert_eq!(log.refused(a, t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(log.refused(b, t0), Some(1));
        assert_eq!(log.refused(a, t0 + REFUSAL_LOG_INTERVAL), Some(501));
        assert_eq!(log.refused(a, t0 + REFUSAL_LOG_INTERVAL), None);
    }

    #[test]
    fn memory_stays_bounded_under_many_sources() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        for i in 0..(MAX_SOURCES as u32 + 100) {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i));
            assert_eq!(
                log.refused(ip, t0 + Duration::from_micros(u64::from(i))),
                Some(1)
            );
        }
        assert_eq!(log.sources.len(), MAX_SOURCES);
    }
}
