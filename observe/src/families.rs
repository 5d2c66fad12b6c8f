//! The process's registry and the metric families the systems record into.

use crate::node::NodesCollector;
use crate::process::ProcessCollector;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A label's value, written escaped as OpenMetrics requires (`prometheus-client` writes
/// label values verbatim; a table, role or metric name may hold `"`, `\` or a newline).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LabelValue(String);

impl LabelValue {
    pub(crate) fn new(value: impl ToString) -> Self {
        Self(value.to_string())
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

/// A series' labels: `node` first, then the family's own (`peer`, `worker`, `layer`, ...).
type Labels<const N: usize> = [(&'static str, LabelValue); N];
type NodeLabels = Labels<1>;
type PairLabels = Labels<2>;

fn node(n: &str) -> NodeLabels {
    [("node", LabelValue::new(n))]
}

/// `{node, key}`.
fn pair(n: &str, key: &'static str, value: impl ToString) -> PairLabels {
    [("node", LabelValue::new(n)), (key, LabelValue::new(value))]
}

/// `Self` with every `field: family, name, help;`, each family registered.
macro_rules! families {
    ($registry:expr, $($field:ident: $family:expr, $name:literal, $help:literal;)+) => {{
        let s = Self { $($field: $family,)+ };
        $($registry.register($name, $help, s.$field.clone());)+
        s
    }};
}

type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Round and latency buckets (seconds): 1 ms to ~33 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The process's registry and every family petrel records into. One per process
/// ([`metrics()`]); every series has a `node` label.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    heartbeat_gap: Family<PairLabels, Histogram>,
    /// Parameter server: clocks and observed staleness.
    pub ps: PsMetrics,
    /// STRADS: rounds, updates, round latency, dependency-filter rejections.
    pub strads: StradsMetrics,
    /// P3: slices on the wire per layer, slice round trips, wire busy time.
    pub p3: P3Metrics,
    /// The job's history curve (objective, RMSE, log-likelihood, loss).
    pub job: JobMetrics,
}

/// The process's one registry (created on first use).
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// The registry as OpenMetrics text (what `GET /metrics` answers), ending in `# EOF`.
pub fn encode_text() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; a collector's error would only cut the text short.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &metrics().registry) {
        tracing::warn!(error = %e, "metrics encoding failed");
    }
    canonical_infinities(out)
}

/// Rewrites sample values `inf` and `-inf` (how `prometheus-client` formats an infinite
/// gauge or sum) as OpenMetrics' canonical `+Inf` and `-Inf`. `NaN` is already canonical.
fn canonical_infinities(text: String) -> String {
    if !text.contains("inf") {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        match value_span(line) {
            Some((start, end)) if matches!(&line[start..end], "inf" | "-inf") => {
                let sign = if end - start == 3 { "+" } else { "-" };
                out.push_str(&format!("{}{sign}Inf{}", &line[..start], &line[end..]));
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// Where a sample line's value is (byte range); `None` for a comment or a line that does
/// not parse. Label values may hold spaces, braces and escaped quotes.
pub(crate) fn value_span(line: &str) -> Option<(usize, usize)> {
    if line.starts_with('#') {
        return None;
    }
    let bytes = line.as_bytes();
    let name_end = line.find(['{', ' '])?;
    let mut at = name_end;
    if bytes[at] == b'{' {
        let mut quoted = false;
        let mut escaped = false;
        loop {
            at += 1;
            let b = *bytes.get(at)?;
            match (quoted, escaped, b) {
                (true, true, _) => escaped = false,
                (true, false, b'\\') => escaped = true,
                (_, false, b'"') => quoted = !quoted,
                (false, _, b'}') => break,
                _ => {}
            }
        }
        at += 1;
    }
    if bytes.get(at) != Some(&b' ') {
        return None;
    }
    let start = at + 1;
    let end = line[start..]
        .find([' ', '\n'])
        .map_or(line.len(), |e| start + e);
    Some((start, end))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let heartbeat_gap = Family::<PairLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.05, 2.0, 10))
        });
        let help = "Time between two heartbeats heard from a peer (the failure detector's input)";
        registry.register("petrel_heartbeat_gap_seconds", help, heartbeat_gap.clone());
        let ps = PsMetrics::new(&mut registry);
        let strads = StradsMetrics::new(&mut registry);
        let p3 = P3Metrics::new(&mut registry);
        let job = JobMetrics::new(&mut registry);
        registry.register_collector(Box::new(NodesCollector));
        registry.register_collector(Box::new(ProcessCollector));
        Self {
            registry,
            heartbeat_gap,
            ps,
            strads,
            p3,
            job,
        }
    }

    /// `node` heard a heartbeat from `peer`, `gap` after the previous one.
    pub fn heartbeat(&self, node: &str, peer: &str, gap: Duration) {
        self.heartbeat_gap
            .get_or_create(&pair(node, "peer", peer))
            .observe(gap.as_secs_f64());
    }
}

/// A histogram of small integers (staleness in clocks) fed with counts, not one
/// observation at a time: a worker adds a whole clock's reads at once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CountHistogram {
    /// Counts per bucket of [`CountHistogram::BOUNDS`] (last: above the largest bound).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl CountHistogram {
    /// Upper bounds of the buckets (inclusive), in clocks.
    pub const BOUNDS: [u64; 11] = [0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 32];

    /// Adds `n` observations of `value`.
    pub fn add(&mut self, value: u64, n: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; Self::BOUNDS.len() + 1];
        }
        let bucket = Self::BOUNDS
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(Self::BOUNDS.len());
        self.counts[bucket] += n;
        self.sum += value as f64 * n as f64;
        self.count += n;
    }

    /// `(upper bound, count in this bucket)`, the last bound `+Inf` (not cumulative).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = Self::BOUNDS
            .iter()
            .map(|&b| b as f64)
            .chain(std::iter::once(f64::INFINITY));
        bounds
            .zip(self.counts.iter().copied().chain(std::iter::repeat(0)))
            .collect()
    }
}

/// Parameter-server series.
#[derive(Debug)]
pub struct PsMetrics {
    worker_clock: Family<PairLabels, Gauge>,
    staleness: Arc<Mutex<BTreeMap<(String, String), CountHistogram>>>,
}

impl PsMetrics {
    fn new(registry: &mut Registry) -> Self {
        let worker_clock = Family::<PairLabels, Gauge>::default();
        let help = "Clocks a parameter-server worker has completed";
        registry.register("petrel_ps_worker_clock", help, worker_clock.clone());
        let staleness = Arc::new(Mutex::new(BTreeMap::new()));
        registry.register_collector(Box::new(StalenessCollector(staleness.clone())));
        Self {
            worker_clock,
            staleness,
        }
    }

    /// Worker `worker` on `node` completed `clock` clocks.
    pub fn worker_clock(&self, node: &str, worker: u32, clock: u64) {
        self.worker_clock
            .get_or_create(&pair(node, "worker", worker))
            .set(i64::try_from(clock).unwrap_or(i64::MAX));
    }

    /// Adds reads of `table` on `node`: `counts[s]` reads observed staleness `s` clocks.
    pub fn staleness(&self, node: &str, table: &str, counts: &[u64]) {
        if counts.iter().all(|&c| c == 0) {
            return;
        }
        if let Ok(mut map) = self.staleness.lock() {
            let h = map.entry((node.into(), table.into())).or_default();
            for (value, &n) in counts.iter().enumerate() {
                if n > 0 {
                    h.add(value as u64, n);
                }
            }
        }
    }
}

#[derive(Debug)]
struct StalenessCollector(Arc<Mutex<BTreeMap<(String, String), CountHistogram>>>);

impl Collector for StalenessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(map) = self.0.lock() else {
            return Ok(());
        };
        if map.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "petrel_ps_staleness_clocks",
            "Observed staleness of parameter-server reads served from the cache, per table",
            None,
            MetricType::Histogram,
        )?;
        for ((node, table), h) in map.iter() {
            let labels = [
                ("node", LabelValue::new(node)),
                ("table", LabelValue::new(table)),
            ];
            // `prometheus-client` writes `le="+Inf"` for a bound of `f64::MAX` only (an
            // infinite bound would come out as `le="inf"`, which OpenMetrics refuses).
            let buckets: Vec<(f64, u64)> = h
                .buckets()
                .into_iter()
                .map(|(b, n)| (if b.is_infinite() { f64::MAX } else { b }, n))
                .collect();
            let mut metric = family.encode_family(&labels)?;
            metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                h.sum, h.count, &buckets, None,
            )?;
        }
        Ok(())
    }
}

/// STRADS series.
#[derive(Debug)]
pub struct StradsMetrics {
    rounds: Family<NodeLabels, Counter>,
    updates: Family<NodeLabels, Counter>,
    round_seconds: Family<NodeLabels, Histogram>,
    filter_rejections: Family<NodeLabels, Counter>,
    in_flight: Family<NodeLabels, Gauge>,
}

impl StradsMetrics {
    fn new(registry: &mut Registry) -> Self {
        families!(registry,
            rounds: Family::default(), "petrel_strads_rounds",
                "STRADS rounds committed by this scheduler";
            updates: Family::default(), "petrel_strads_updates",
                "Variables a STRADS scheduler dispatched for update";
            round_seconds: Family::new_with_constructor(latency_histogram),
                "petrel_strads_round_seconds", "Time from dispatching a STRADS round to committing it";
            filter_rejections: Family::default(), "petrel_strads_filter_rejections",
                "Candidates the dependency filter kept out of a round";
            in_flight: Family::default(), "petrel_strads_rounds_in_flight",
                "Rounds dispatched and not yet committed";
        )
    }

    /// A round of the scheduler on `node` was dispatched.
    pub fn round_dispatched(&self, node: &str) {
        self.in_flight.get_or_create(&self::node(node)).inc();
    }

    /// A round of the scheduler on `node` committed, `latency` after its dispatch.
    pub fn round_committed(&self, node: &str, latency: Duration) {
        let n = self::node(node);
        self.rounds.get_or_create(&n).inc();
        self.in_flight.get_or_create(&n).dec();
        self.round_seconds
            .get_or_create(&n)
            .observe(latency.as_secs_f64());
    }

    /// The scheduler on `node` dispatched `vars` variables.
    pub fn updates(&self, node: &str, vars: u64) {
        self.updates.get_or_create(&self::node(node)).inc_by(vars);
    }

    /// The dependency filter on `node` kept `rejected` candidates out.
    pub fn filter_rejections(&self, node: &str, rejected: u64) {
        self.filter_rejections
            .get_or_create(&self::node(node))
            .inc_by(rejected);
    }
}

/// P3 series.
#[derive(Debug)]
pub struct P3Metrics {
    slices_sent: Family<PairLabels, Counter>,
    slice_bytes_sent: Family<PairLabels, Counter>,
    slices_received: Family<PairLabels, Counter>,
    slice_bytes_received: Family<PairLabels, Counter>,
    slice_seconds: Family<NodeLabels, Histogram>,
    wire_busy: Family<NodeLabels, FloatCounter>,
}

impl P3Metrics {
    fn new(registry: &mut Registry) -> Self {
        families!(registry,
            slices_sent: Family::default(), "petrel_p3_slices_sent",
                "Gradient slices a P3 worker sent, per layer";
            slice_bytes_sent: Family::default(), "petrel_p3_slice_bytes_sent",
                "Bytes of gradient slices a P3 worker sent, per layer";
            slices_received: Family::default(), "petrel_p3_slices_received",
                "Updated parameter slices a P3 worker received, per layer";
            slice_bytes_received: Family::default(), "petrel_p3_slice_bytes_received",
                "Bytes of updated parameter slices a P3 worker received, per layer";
            slice_seconds: Family::new_with_constructor(latency_histogram), "petrel_p3_slice_seconds",
                "Time from sending a gradient slice to receiving its updated parameters";
            wire_busy: Family::default(), "petrel_p3_wire_busy_seconds",
                "Time a P3 worker had at least one slice on the wire (link utilisation = rate)";
        )
    }

    /// The worker on `node` sent a slice of `layer` of `bytes` bytes.
    pub fn slice_sent(&self, node: &str, layer: usize, bytes: u64) {
        let l = pair(node, "layer", layer);
        self.slices_sent.get_or_create(&l).inc();
        self.slice_bytes_sent.get_or_create(&l).inc_by(bytes);
    }

    /// The worker on `node` received the updated slice of `layer` (`bytes` bytes), `rtt`
    /// after it sent the gradient.
    pub fn slice_received(&self, node: &str, layer: usize, bytes: u64, rtt: Duration) {
        let l = pair(node, "layer", layer);
        self.slices_received.get_or_create(&l).inc();
        self.slice_bytes_received.get_or_create(&l).inc_by(bytes);
        self.slice_seconds
            .get_or_create(&self::node(node))
            .observe(rtt.as_secs_f64());
    }

    /// The worker on `node` had slices on the wire for `busy`.
    pub fn wire_busy(&self, node: &str, busy: Duration) {
        self.wire_busy
            .get_or_create(&self::node(node))
            .inc_by(busy.as_secs_f64());
    }
}

/// The job's history curve.
#[derive(Debug)]
pub struct JobMetrics {
    value: Family<PairLabels, FloatGauge>,
    at: Family<PairLabels, FloatGauge>,
    points: Family<PairLabels, Counter>,
}

impl JobMetrics {
    fn new(registry: &mut Registry) -> Self {
        families!(registry,
            value: Family::default(), "petrel_job_progress",
                "Latest point of the job's history curve (objective, RMSE, log-likelihood, loss)";
            at: Family::default(), "petrel_job_progress_at_seconds",
                "Job time of the latest point of the history curve";
            points: Family::default(), "petrel_job_progress_points",
                "Points of the history curve so far";
        )
    }

    /// The job on `node` measured `metric` = `value` at `elapsed` seconds into the run.
    pub fn point(&self, node: &str, metric: &str, elapsed: Duration, value: f64) {
        let l = pair(node, "metric", metric);
        self.value.get_or_create(&l).set(value);
        self.at.get_or_create(&l).set(elapsed.as_secs_f64());
        self.points.get_or_create(&l).inc();
    }
}

/// Writes one constant family (counter or gauge) from rows of `(labels, value)`.
pub(crate) fn encode_rows<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(L, M)],
) -> Result<(), std::fmt::Error> {
    let Some((_, first)) = rows.first() else {
        return Ok(());
    };
    let mut family = encoder.encode_descriptor(name, help, None, first.metric_type())?;
    for (labels, metric) in rows {
        metric.encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_histogram_buckets_by_inclusive_bound() {
        let mut h = CountHistogram::default();
        h.add(0, 3);
        h.add(7, 2);
        h.add(100, 1);
        let b = h.buckets();
        assert_eq!(b[0], (0.0, 3));
        assert_eq!(b[7], (8.0, 2));
        assert_eq!(b.last(), Some(&(f64::INFINITY, 1)));
        assert_eq!(h.count, 6);
    }

    #[test]
    fn recorded_series_appear_in_the_text() {
        let m = metrics();
        m.ps.staleness("unit-a", "0", &[4, 1]);
        m.strads.round_dispatched("unit-a");
        m.strads.round_committed("unit-a", Duration::from_millis(3));
        m.job
            .point("unit-a", "objective", Duration::from_secs(1), 2.5);
        let text = encode_text();
        assert!(
            text.contains(
                r#"petrel_ps_staleness_clocks_bucket{le="0.0",node="unit-a",table="0"} 4"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"petrel_strads_rounds_total{node="unit-a"} 1"#));
        assert!(text.contains(r#"petrel_job_progress{node="unit-a",metric="objective"} 2.5"#));
        assert!(text.contains("process_resident_memory_bytes"));
        // This test binary counts its heap (`heap`'s tests install the allocator).
        crate::heap::mark_installed();
        let text = encode_text();
        let heap = text
            .lines()
            .find_map(|l| l.strip_prefix("process_heap_peak_bytes{} "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        assert!(heap.is_some_and(|b| b > 0.0), "{text}");
        let staleness = m.ps.staleness.lock().unwrap();
        assert_eq!(staleness[&("unit-a".into(), "0".into())].count, 5);
    }

    #[test]
    fn histogram_tops_label_values_and_infinities_are_written_as_openmetrics_requires() {
        let m = metrics();
        m.ps.staleness(
            "unit-om",
            "0",
            &[
                1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 2,
            ],
        );
        m.job.point(
            "unit-om",
            "a\"b\\c\nd {x} 1",
            Duration::from_secs(1),
            f64::INFINITY,
        );
        m.job
            .point("unit-om", "down", Duration::from_secs(1), f64::NEG_INFINITY);
        m.job
            .point("unit-om", "nan", Duration::from_secs(1), f64::NAN);
        let text = encode_text();
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix) && l.contains("unit-om"))
                .unwrap_or_else(|| panic!("no {prefix} line in {text}"))
                .to_string()
        };
        assert!(
            text.contains(
                r#"petrel_ps_staleness_clocks_bucket{le="+Inf",node="unit-om",table="0"} 3"#
            ),
            "{text}"
        );
        assert!(!text.contains(r#"le="inf""#), "{text}");
        assert_eq!(
            line("petrel_job_progress{node=\"unit-om\",metric=\"a"),
            r#"petrel_job_progress{node="unit-om",metric="a\"b\\c\nd {x} 1"} +Inf"#
        );
        assert_eq!(
            line("petrel_job_progress{node=\"unit-om\",metric=\"down"),
            r#"petrel_job_progress{node="unit-om",metric="down"} -Inf"#
        );
        assert_eq!(
            line("petrel_job_progress{node=\"unit-om\",metric=\"nan"),
            r#"petrel_job_progress{node="unit-om",metric="nan"} NaN"#
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn value_span_finds_the_value_after_labels_holding_spaces_braces_and_quotes() {
        let line = r#"x{a="} 1",b="\" }"} inf 123"#;
        let (s, e) = value_span(line).unwrap();
        assert_eq!(&line[s..e], "inf");
        assert_eq!(
            value_span("y -inf\n").map(|(s, e)| &"y -inf\n"[s..e]),
            Some("-inf")
        );
        assert_eq!(value_span("# HELP x inf"), None);
        assert_eq!(
            canonical_infinities("a inf\nb{l=\"inf\"} 1\nc -inf 5\n".into()),
            "a +Inf\nb{l=\"inf\"} 1\nc -Inf 5\n"
        );
    }
}
