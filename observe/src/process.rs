//! This process's resident memory and CPU time, read from `/proc/self` at scrape time
//! (Linux; elsewhere the series are absent).

use crate::families::encode_rows;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Resident set size and CPU time of this process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessStats {
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// User plus system CPU time, seconds.
    pub cpu_s: f64,
}

/// Reads `/proc/self/statm` and `/proc/self/stat`; `None` where they are missing or odd.
pub fn read() -> Option<ProcessStats> {
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // SAFETY: as above.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if page <= 0 || ticks <= 0 {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces: fields are counted after its ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after ')'.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcessStats {
        rss_bytes: resident * page as u64,
        cpu_s: (utime + stime) as f64 / ticks as f64,
    })
}

/// The peak resident memory (`VmHWM`) of process `pid`, or of this process with `None`, in
/// MB; `None` where `/proc` has no such process (it exited, or this is not Linux).
pub fn peak_rss_mb(pid: Option<u32>) -> Option<f64> {
    parse_status_mb(&status_text(pid)?, "VmHWM")
}

/// The resident pages of process `pid` (or of this process) that are file-backed
/// (`RssFile`), MB: above all the binary's code, whose pages every process of that binary
/// on the host shares through the page cache.
pub fn resident_file_mb(pid: Option<u32>) -> Option<f64> {
    parse_status_mb(&status_text(pid)?, "RssFile")
}

fn status_text(pid: Option<u32>) -> Option<String> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    std::fs::read_to_string(path).ok()
}

/// Field `key` (in kB) of the text of a `/proc/<pid>/status` file, in MB.
fn parse_status_mb(status: &str, key: &str) -> Option<f64> {
    let line = status.lines().find(|l| {
        l.strip_prefix(key)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[derive(Debug)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = read() else {
            return Ok(());
        };
        let none: [(&str, &str); 0] = [];
        let rss = [(none, ConstGauge::new(p.rss_bytes as i64))];
        let help = "Resident memory of this process";
        encode_rows(&mut enc, "process_resident_memory_bytes", help, &rss)?;
        let cpu = [(none, ConstCounter::new(p.cpu_s))];
        let help = "User and system CPU time of this process";
        encode_rows(&mut enc, "process_cpu_seconds", help, &cpu)?;
        // Only in a binary that counts its heap (`heap::CountingAllocator`).
        let Some((live, peak)) = crate::heap::counts() else {
            return Ok(());
        };
        let help = "Bytes this process has allocated now (the petrel binary's counting allocator)";
        let live = [(none, ConstGauge::new(live as i64))];
        encode_rows(&mut enc, "process_heap_bytes", help, &live)?;
        let help = "The most bytes this process had allocated at once";
        let peak = [(none, ConstGauge::new(peak as i64))];
        encode_rows(&mut enc, "process_heap_peak_bytes", help, &peak)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let p = super::read().expect("linux /proc");
        assert!(p.rss_bytes > 1 << 20);
        // Spin until the kernel has charged this process CPU time (it counts in clock
        // ticks, and on a loaded machine a short wall-clock spin may get none).
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while super::read().expect("linux").cpu_s <= 0.0 {
            assert!(
                spin.elapsed() < std::time::Duration::from_secs(60),
                "no CPU time charged after a minute of spinning"
            );
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
    }

    #[test]
    fn peak_memory_of_this_process_and_of_a_status_text() {
        let me = super::peak_rss_mb(None).expect("linux /proc");
        assert!(me > 1.0, "{me}");
        let by_pid = super::peak_rss_mb(Some(std::process::id())).expect("linux /proc");
        assert!(by_pid >= me, "{by_pid} < {me}");
        let text = "Name:\tpetrel\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(super::parse_status_mb(text, "VmHWM"), Some(2.0));
        assert_eq!(super::parse_status_mb("VmHWM: lots", "VmHWM"), None);
        assert_eq!(super::parse_status_mb("", "VmHWM"), None);
        let text = "VmHWM:\t 4096 kB\nRssAnon:\t 1024 kB\nRssFile:\t 3072 kB\n";
        assert_eq!(super::parse_status_mb(text, "RssFile"), Some(3.0));
        assert_eq!(super::parse_status_mb(text, "Rss"), None);
        // A running binary has its code resident.
        let file = super::resident_file_mb(None).expect("linux /proc");
        assert!(file > 0.0 && file <= me, "{file} of {me}");
        // A pid that cannot exist.
        assert_eq!(super::peak_rss_mb(Some(u32::MAX)), None);
    }
}
