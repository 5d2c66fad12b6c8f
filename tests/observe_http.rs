// Over 600 lines: every HTTP server's hostile-client and strict-format cases share one harness.
//! The HTTP servers of a run against hostile clients, and `/metrics` against the
//! OpenMetrics specification.
//!
//! - A client that sends half a request to a node's `/metrics`, or to `petrel run`'s
//!   dashboard, and then holds the connection, must not keep the node or `petrel run`
//!   alive once the job is over.
//! - Every node kind's exposition passes a strict check of the OpenMetrics 1.0 text format
//!   (grammar and the rules on families, histograms and counters), and CPython's
//!   `prometheus_client` OpenMetrics parser when it is installed.

use crate::common;
use crate::common::fixtures::demo_cluster;
use petrel::launcher;
use petrel::observe::scrape::http_get;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the demo job runs (`duration_s`): long enough to connect during it.
const JOB_S: u64 = 4;

/// Bound on a `petrel run` of the demo job, start to exit, on a loaded two-core machine.
/// A held connection used to keep it open until the client left (the test's holders
/// leave only after the run has exited, or after this bound).
const RUN_BOUND: Duration = Duration::from_secs(60);

/// A TCP port on 127.0.0.1 that was free a moment ago.
fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// A three-node demo cluster running `JOB_S` seconds, `hub` serving `/metrics` on `port`.
fn demo_config(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    common::write_config(
        dir,
        &demo_cluster(
            "name = \"held\"",
            &format!("metrics_addr = \"127.0.0.1:{port}\"\n"),
            &format!("rounds = 1000000000\ntensor_len = 64\nduration_s = {JOB_S}"),
        ),
    )
}

/// `petrel run <cfg> <args>` of the demo job, warnings and errors logged only, its run
/// directory in `dir`; stdout and stderr piped.
fn run_demo(cfg: &std::path::Path, dir: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = common::run_cmd(cfg, &["--timeout-s", "120"]);
    cmd.args(args)
        .arg("--run-dir")
        .arg(dir.join("run"))
        .env("RUST_LOG", "warn");
    cmd
}

/// Connects to `addr` (retrying until it listens, up to 30 s), sends a request head cut
/// before its end and returns the connection, held open by the caller.
fn hold_half_request(addr: SocketAddr, path: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            let head = format!("GET {path} HTTP/1.1\r\nHost: petrel\r\n");
            if s.write_all(head.as_bytes()).is_ok() {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "{addr} never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `petrel run` to exit within [`RUN_BOUND`] of `started`, with `held` still
/// open on this side; it must succeed.
fn exits_while_held(
    mut child: std::process::Child,
    started: Instant,
    held: Vec<TcpStream>,
    err: std::thread::JoinHandle<String>,
) {
    let status =
        common::wait_with_deadline(&mut child, RUN_BOUND.saturating_sub(started.elapsed()));
    let took = started.elapsed();
    drop(held);
    let err = err.join().unwrap_or_default();
    assert!(status.success(), "petrel run failed:\n{err}");
    assert!(
        took >= Duration::from_secs(JOB_S),
        "the run ended in {took:?}, before its job"
    );
}

#[test]
fn a_half_sent_metrics_request_holds_neither_the_node_nor_petrel_run() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_tcp_port();
    let cfg = demo_config(dir.path(), port);
    let started = Instant::now();
    let child = run_demo(&cfg, dir.path(), &[])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (child, err) = common::drain(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // Two holders: one sends nothing at all, one half a request.
    let silent = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                break s;
            }
            assert!(Instant::now() < deadline, "{addr} never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let half = hold_half_request(addr, "/metrics");
    exits_while_held(child, started, vec![silent, half], err);
}

#[test]
fn a_half_sent_dashboard_request_does_not_hold_petrel_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = demo_config(dir.path(), free_tcp_port());
    let started = Instant::now();
    let mut child = run_demo(&cfg, dir.path(), &["--dashboard=127.0.0.1:0"])
        .spawn()
        .unwrap();
    let (url, rest) = common::dashboard_url(child.stdout.take().unwrap());
    let (child, err) = common::drain(child);
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let half = hold_half_request(addr, "/api/state");
    exits_while_held(child, started, vec![half], err);
    let _ = rest.join();
    assert!(dir.path().join("run/dashboard.html").exists());
}

// ---------------------------------------------------------------------------------------
// OpenMetrics 1.0 text format, checked strictly.

/// Checks `text` against the OpenMetrics 1.0 text format: the ABNF (names, labels and
/// their escapes, numbers, one LF per line, `# EOF` last) and the rules on families
/// (metadata before samples, no family twice, no clashing names, sample names per type,
/// `UNIT` a suffix of the name, no series twice, a metric's samples together), counters
/// (`_total`, not negative or NaN) and histograms (`le` on every bucket and canonical,
/// buckets ascending and cumulative, a `+Inf` bucket, integer counts, `_count` equal to
/// the `+Inf` bucket, `_count` with `_sum`). Stricter than the spec in one point, petrel's
/// own contract: every family has `# TYPE` and `# HELP`.
fn check_openmetrics(text: &str) -> Result<(), String> {
    let body = text
        .strip_suffix("# EOF\n")
        .or_else(|| text.strip_suffix("# EOF"))
        .ok_or("the text does not end with `# EOF`")?;
    let mut families: Vec<Family> = Vec::new();
    let mut reserved: BTreeSet<String> = BTreeSet::new();
    for (n, line) in body.split_inclusive('\n').enumerate() {
        let at = |why: String| format!("line {}: {why}: {line:?}", n + 1);
        let line_text = line
            .strip_suffix('\n')
            .ok_or_else(|| at("no LF at the end".into()))?;
        if line_text.is_empty() {
            return Err(at("blank line".into()));
        }
        if let Some(meta) = line_text.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (kind, name, rest) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next(),
            );
            let rest = rest.ok_or_else(|| at("metadata without a value".into()))?;
            metric_name(name).map_err(at)?;
            let start_new = families.last().is_none_or(|f| f.name != name);
            if start_new {
                if families.iter().any(|f| f.name == name) {
                    return Err(at(format!("family {name} appears twice")));
                }
                if let Some(done) = families.last_mut() {
                    done.finish().map_err(at)?;
                }
                families.push(Family::new(name));
            }
            let family = families.last_mut().ok_or("no family")?;
            if !family.samples.is_empty() {
                return Err(at("metadata after samples".into()));
            }
            match kind {
                "HELP" => {
                    escaped_string(rest).map_err(at)?;
                    set_once(&mut family.help, rest).map_err(at)?;
                }
                "TYPE" => {
                    if !TYPES.contains(&rest) {
                        return Err(at(format!("unknown type {rest:?}")));
                    }
                    set_once(&mut family.kind, rest).map_err(at)?;
                }
                "UNIT" => {
                    if !rest
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                    {
                        return Err(at(format!("bad unit {rest:?}")));
                    }
                    set_once(&mut family.unit, rest).map_err(at)?;
                }
                other => return Err(at(format!("unknown metadata {other:?}"))),
            }
            continue;
        }
        if line_text.starts_with('#') {
            return Err(at("a comment that is not HELP, TYPE, UNIT or EOF".into()));
        }
        let sample = parse_sample(line_text).map_err(at)?;
        let family = families
            .last_mut()
            .ok_or_else(|| at("a sample before any family".into()))?;
        let kind = family
            .kind
            .clone()
            .ok_or_else(|| at(format!("family {} has no TYPE", family.name)))?;
        if family.samples.is_empty() {
            if family.help.is_none() {
                return Err(at(format!("family {} has no HELP", family.name)));
            }
            if let Some(unit) = &family.unit
                && (!family.name.ends_with(&format!("_{unit}"))
                    || kind == "info"
                    || kind == "stateset")
            {
                return Err(at(format!("unit {unit} does not fit {}", family.name)));
            }
            let names: BTreeSet<String> = suffixes(&kind)
                .iter()
                .chain(&[""])
                .map(|suffix| format!("{}{suffix}", family.name))
                .collect();
            for name in names {
                if !reserved.insert(name) {
                    return Err(at(format!("family {} clashes with another", family.name)));
                }
            }
        }
        family.add(&kind, sample).map_err(at)?;
    }
    if let Some(last) = families.last_mut() {
        last.finish()?;
    }
    Ok(())
}

const TYPES: [&str; 8] = [
    "counter",
    "gauge",
    "histogram",
    "gaugehistogram",
    "stateset",
    "info",
    "summary",
    "unknown",
];

fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        "gaugehistogram" => &["_bucket", "_gcount", "_gsum"],
        "summary" => &["", "_count", "_sum", "_created"],
        "info" => &["_info"],
        _ => &[""],
    }
}

fn set_once(slot: &mut Option<String>, value: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err("metadata given twice".into());
    }
    *slot = Some(value.to_string());
    Ok(())
}

struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

/// One family's samples so far, grouped per metric (label set without `le`).
struct Family {
    name: String,
    help: Option<String>,
    kind: Option<String>,
    unit: Option<String>,
    samples: Vec<Sample>,
    series: BTreeSet<(String, Vec<(String, String)>)>,
    metrics: Vec<Vec<(String, String)>>,
}

impl Family {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            help: None,
            kind: None,
            unit: None,
            samples: Vec::new(),
            series: BTreeSet::new(),
            metrics: Vec::new(),
        }
    }

    fn add(&mut self, kind: &str, s: Sample) -> Result<(), String> {
        let suffix = s
            .name
            .strip_prefix(&self.name)
            .filter(|x| suffixes(kind).contains(x))
            .ok_or_else(|| format!("sample {} does not belong to {kind} {}", s.name, self.name))?;
        let mut sorted = s.labels.clone();
        sorted.sort();
        if !self.series.insert((s.name.clone(), sorted.clone())) {
            return Err("the same series twice".into());
        }
        let is_bucket = suffix == "_bucket";
        if sorted.iter().any(|(k, _)| k == "le") != is_bucket && kind.contains("histogram") {
            return Err("`le` belongs on every bucket and nowhere else".into());
        }
        let value = number(&s.value)?;
        let counter_like = matches!(suffix, "_total" | "_bucket" | "_count" | "_gcount");
        if (counter_like || (kind == "histogram" && suffix == "_sum")) && value.is_nan() {
            return Err("a counter-like value is NaN".into());
        }
        if counter_like && value < 0.0 {
            return Err("a counter-like value is negative".into());
        }
        if matches!(suffix, "_bucket" | "_count" | "_gcount") && value.fract() != 0.0 {
            return Err("a count is not an integer".into());
        }
        if is_bucket {
            let le = &s.labels.iter().find(|(k, _)| k == "le").ok_or("no le")?.1;
            let bound = number(le)?;
            if bound.is_nan() || (bound.is_infinite() && le != "+Inf" && le != "-Inf") {
                return Err(format!("le={le:?} is not canonical"));
            }
        }
        let metric: Vec<(String, String)> = sorted.into_iter().filter(|(k, _)| k != "le").collect();
        match self.metrics.last() {
            Some(m) if *m == metric => {}
            _ if self.metrics.contains(&metric) => {
                return Err("a metric's samples are not together".into());
            }
            _ => self.metrics.push(metric),
        }
        self.samples.push(s);
        Ok(())
    }

    /// The histogram rules, per metric.
    fn finish(&mut self) -> Result<(), String> {
        if self.kind.as_deref() != Some("histogram") {
            return Ok(());
        }
        for metric in &self.metrics {
            let of = |suffix: &str| -> Vec<&Sample> {
                let name = format!("{}{suffix}", self.name);
                self.samples
                    .iter()
                    .filter(|s| {
                        let mut l: Vec<_> = s
                            .labels
                            .iter()
                            .filter(|(k, _)| k != "le")
                            .cloned()
                            .collect();
                        l.sort();
                        s.name == name && l == *metric
                    })
                    .collect()
            };
            let buckets: Vec<(f64, f64)> = of("_bucket")
                .into_iter()
                .map(|s| {
                    let le = s.labels.iter().find(|(k, _)| k == "le").map(|(_, v)| v);
                    (
                        number(le.map_or("", |v| v)).unwrap_or(f64::NAN),
                        number(&s.value).unwrap_or(f64::NAN),
                    )
                })
                .collect();
            let what = format!("histogram {} {metric:?}", self.name);
            if buckets.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(format!("{what}: buckets not in ascending order"));
            }
            if buckets.windows(2).any(|w| w[0].1 > w[1].1) {
                return Err(format!("{what}: buckets not cumulative"));
            }
            let top = match buckets.last() {
                Some(&(b, n)) if b == f64::INFINITY => n,
                _ => return Err(format!("{what}: no +Inf bucket")),
            };
            let count: Vec<f64> = of("_count")
                .into_iter()
                .filter_map(|s| number(&s.value).ok())
                .collect();
            let sum = of("_sum").len();
            if count.len() != sum {
                return Err(format!("{what}: _count and _sum go together"));
            }
            if count.first().is_some_and(|&c| c != top) {
                return Err(format!("{what}: _count differs from the +Inf bucket"));
            }
        }
        Ok(())
    }
}

/// `metricname = (ALPHA / "_" / ":") *(ALPHA / DIGIT / "_" / ":")`.
fn metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    ok.then_some(())
        .ok_or_else(|| format!("bad metric name {name:?}"))
}

/// `label-name = (ALPHA / "_") *(ALPHA / DIGIT / "_")`.
fn label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(())
        .ok_or_else(|| format!("bad label name {name:?}"))
}

/// `escaped-string`: no raw LF, `"` or `\`; a backslash escapes only `\`, `"` or `n`.
fn escaped_string(s: &str) -> Result<(), String> {
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\' | '"' | 'n') => {}
                other => return Err(format!("bad escape \\{other:?}")),
            },
            '"' | '\n' => return Err(format!("unescaped {c:?}")),
            _ => {}
        }
    }
    Ok(())
}

/// `number`: a real number, or (any case) `[sign] inf / infinity`, or `nan`.
fn number(s: &str) -> Result<f64, String> {
    let bad = || format!("bad number {s:?}");
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = unsigned.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Ok(if s.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if s.eq_ignore_ascii_case("nan") {
        return Ok(f64::NAN);
    }
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (unsigned, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |d: &str| d.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = digits(int)
        && frac.is_none_or(digits)
        && (!int.is_empty() || frac.is_some_and(|f| !f.is_empty()));
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    if !(mantissa_ok && exponent_ok) {
        return Err(bad());
    }
    s.parse().map_err(|_| bad())
}

/// `sample = metricname [labels] SP number [SP timestamp] [exemplar]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    metric_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let rest = rest.strip_prefix(' ').ok_or("no SP before the value")?;
    let (value, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    number(value)?;
    if !tail.is_empty() {
        let (timestamp, exemplar) = match tail.strip_prefix("# ") {
            Some(e) => ("", Some(e)),
            None => match tail.split_once(' ') {
                Some((t, e)) => (t, Some(e.strip_prefix("# ").ok_or("junk after the value")?)),
                None => (tail, None),
            },
        };
        if !timestamp.is_empty() {
            number(timestamp)?;
        }
        if let Some(e) = exemplar {
            let after = e.strip_prefix('{').ok_or("an exemplar without labels")?;
            let (_, tail) = parse_labels(after)?;
            let tail = tail
                .strip_prefix(' ')
                .ok_or("an exemplar without a value")?;
            for n in tail.split(' ') {
                number(n)?;
            }
        }
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value: value.to_string(),
    })
}

/// Label pairs in the order written.
type LabelPairs = Vec<(String, String)>;

/// `labels` after its `{`: the pairs and what follows the `}`.
fn parse_labels(mut s: &str) -> Result<(LabelPairs, &str), String> {
    let mut labels: Vec<(String, String)> = Vec::new();
    if let Some(rest) = s.strip_prefix('}') {
        return Ok((labels, rest));
    }
    loop {
        let eq = s.find('=').ok_or("a label without =")?;
        let key = &s[..eq];
        label_name(key)?;
        let body = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("an unquoted label value")?;
        let mut end = None;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let end = end.ok_or("an unterminated label value")?;
        escaped_string(&body[..end])?;
        if labels.iter().any(|(k, _)| k == key) {
            return Err(format!("label {key} twice"));
        }
        labels.push((key.to_string(), body[..end].to_string()));
        s = &body[end + 1..];
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        s = s
            .strip_prefix(',')
            .ok_or("labels not separated by a comma")?;
    }
}

/// CPython's `prometheus_client` OpenMetrics parser on `text`: `None` when it is not
/// installed, else its verdict.
fn python_check(text: &str) -> Option<Result<(), String>> {
    let script = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
        list(p(sys.stdin.read()))\n";
    let probe = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return None;
    }
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let _ = stdin.write_all(text.as_bytes());
    drop(stdin);
    let out = child.wait_with_output().ok()?;
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

#[test]
fn the_strict_checker_refuses_what_openmetrics_refuses() {
    let good = "# HELP h A histogram\n# TYPE h histogram\nh_sum{n=\"a\"} 1.5\nh_count{n=\"a\"} 2\n\
        h_bucket{le=\"1.0\",n=\"a\"} 1\nh_bucket{le=\"+Inf\",n=\"a\"} 2\n\
        # HELP c A counter\n# TYPE c counter\nc_total{n=\"x \\\"q\\\" \\\\ \\n\"} 3\n\
        # HELP g A gauge\n# TYPE g gauge\ng +Inf\ng{a=\"1\"} NaN\ng{a=\"2\"} -1e-3\n# EOF\n";
    assert_eq!(check_openmetrics(good), Ok(()));
    let bad = [
        good.replace("le=\"+Inf\"", "le=\"inf\""),
        good.replace("# EOF\n", ""),
        good.replace("c_total", "c"),
        good.replace("\\\"q\\\"", "\"q\""),
        good.replace("h_count{n=\"a\"} 2", "h_count{n=\"a\"} 3"),
        good.replace("h_bucket{le=\"+Inf\",n=\"a\"} 2\n", ""),
        good.replace(
            "h_bucket{le=\"+Inf\",n=\"a\"} 2",
            "h_bucket{le=\"+Inf\",n=\"a\"} 0",
        ),
        good.replace("# TYPE g gauge\n", ""),
        good.replace("g +Inf", "g 1.2.3"),
        good.replace("g{a=\"2\"}", "g{a=\"1\"}"),
        good.replace("# HELP g A gauge\n", "\n# HELP g A gauge\n"),
        format!("{good}g 1\n"),
        good.replace("# HELP c", "# HELP h_count"),
        good.replace("c_total{n", "c_total{1n"),
    ];
    for text in &bad {
        assert!(check_openmetrics(text).is_err(), "accepted:\n{text}");
    }
    match python_check(good) {
        None => eprintln!("SKIPPED python check: prometheus_client not installed"),
        Some(verdict) => {
            assert_eq!(verdict, Ok(()));
            assert!(python_check(&bad[0]).is_some_and(|v| v.is_err()));
        }
    }
}

/// Families whose scrape must have been checked: one per node kind and system, the PS
/// worker's staleness histogram and the coordinator's heartbeat histogram included.
const MUST_SEE: [(&str, &str); 10] = [
    ("hub", "petrel_heartbeat_gap_seconds"),
    ("hub", "petrel_strads_round_seconds"),
    ("hub", "petrel_strads_rounds"),
    ("hub", "petrel_node_info"),
    ("w0", "petrel_ps_staleness_clocks"),
    ("w0", "petrel_ps_worker_clock"),
    ("w0", "petrel_p3_slice_seconds"),
    ("w0", "petrel_net_sent_bytes"),
    ("w1", "petrel_ps_staleness_clocks"),
    ("w1", "process_cpu_seconds"),
];

#[test]
fn every_node_kind_serves_strict_openmetrics() {
    let dir = tempfile::tempdir().unwrap();
    let settings = crate::observe::three_system_settings(dir.path(), None);
    let rt = common::runtime(2);
    // Per node: the families seen in checked scrapes, and the scrape with the most.
    let (seen, richest) = rt.block_on(async {
        let opts = common::node_processes(dir.path().join("run"));
        let running = launcher::start(settings, opts).await.unwrap();
        let targets = running.metrics_addrs().to_vec();
        let wait = tokio::spawn(running.wait(Some(Duration::from_secs(240))));
        let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
        let mut richest: BTreeMap<String, (usize, String)> = BTreeMap::new();
        while !wait.is_finished() {
            for (node, addr) in &targets {
                let Ok(text) = http_get(addr, "/metrics", Duration::from_secs(2)).await else {
                    continue;
                };
                if let Err(e) = check_openmetrics(&text) {
                    panic!("{node}'s /metrics is not OpenMetrics: {e}\n{text}");
                }
                let families: Vec<String> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("# TYPE "))
                    .filter_map(|l| l.split(' ').next())
                    .map(str::to_string)
                    .collect();
                let best = richest.entry(node.clone()).or_default();
                if families.len() > best.0 {
                    *best = (families.len(), text.clone());
                }
                seen.extend(families.into_iter().map(|f| (node.clone(), f)));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        wait.await.unwrap().unwrap();
        (seen, richest)
    });
    for (node, family) in MUST_SEE {
        assert!(
            seen.contains(&(node.to_string(), family.to_string())),
            "no checked scrape of {node} had {family}"
        );
    }
    for (node, (_, text)) in &richest {
        match python_check(text) {
            None => {
                eprintln!(
                    "SKIPPED python check of {node}: prometheus_client not installed \
                     (pip install prometheus_client); the Rust check ran"
                );
                break;
            }
            Some(verdict) => assert_eq!(verdict, Ok(()), "{node}:\n{text}"),
        }
    }
}
