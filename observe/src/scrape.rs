//! Fetching a node's `/metrics` (hyper's HTTP/1 client) and reading the text format.

use crate::ObserveError;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use std::sync::Mutex;
use std::time::Duration;

/// One sample line: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The sample's name (with `_total`, `_bucket`, ... suffixes).
    pub name: String,
    /// Label pairs in the order written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Series {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses Prometheus/OpenMetrics text; comment lines and lines that do not parse are
/// skipped (a scrape is read, not validated).
pub fn parse_text(text: &str) -> Vec<Series> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Series> {
    // The exporter's own reader finds the value, so a label value holding `}` or a space
    // does not end the label block early.
    let (start, end) = crate::families::value_span(line)?;
    let head = &line[..start - 1];
    let (name, labels) = match head.split_once('{') {
        Some((name, labels)) => (name, parse_labels(labels.strip_suffix('}')?)?),
        None => (head, Vec::new()),
    };
    // Rust reads OpenMetrics' `+Inf`, `-Inf` and `NaN` as they are.
    let value = line[start..end].parse().ok()?;
    Some(Series {
        name: name.to_string(),
        labels,
        value,
    })
}

fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        rest = rest[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        out.push((key, value));
        rest = rest[end + 1..]
            .trim_start()
            .trim_start_matches(',')
            .trim_start();
    }
    Some(out)
}

/// A node to scrape over HTTP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The node's name.
    pub node: String,
    /// Its roles.
    pub roles: Vec<String>,
    /// Its `/metrics` address, `host:port`.
    pub addr: String,
}

pub(crate) fn targets() -> &'static Mutex<Vec<Target>> {
    static TARGETS: std::sync::OnceLock<Mutex<Vec<Target>>> = std::sync::OnceLock::new();
    TARGETS.get_or_init(|| Mutex::new(Vec::new()))
}

/// Tells every dashboard of this process to scrape these nodes (a launcher calls it when
/// it starts its children); replaces earlier targets of the same names.
pub fn announce_targets(new: Vec<Target>) {
    if let Ok(mut t) = targets().lock() {
        t.retain(|old| new.iter().all(|n| n.node != old.node));
        t.extend(new);
    }
}

/// `GET http://target/path` with a timeout; the body as text.
pub async fn http_get(target: &str, path: &str, timeout: Duration) -> Result<String, ObserveError> {
    type Failure = Box<dyn std::error::Error + Send + Sync>;
    // `Ok(Err(status))`: the target answered, not with 200.
    let fetch = async {
        let stream = tokio::net::TcpStream::connect(target).await?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, target)
            .body(Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Ok(Err(status));
        }
        let body = resp.into_body().collect().await?.to_bytes();
        Ok::<_, Failure>(Ok(String::from_utf8(body.to_vec())?))
    };
    let target = target.to_string();
    match tokio::time::timeout(timeout, fetch).await {
        Ok(Ok(Ok(text))) => Ok(text),
        Ok(Ok(Err(status))) => Err(ObserveError::Status { target, status }),
        Ok(Err(source)) => Err(ObserveError::Scrape { target, source }),
        Err(e) => Err(ObserveError::Scrape {
            target,
            source: Box::new(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_value_may_hold_a_brace_and_a_space() {
        let s = parse_text("job_metric{name=\"a} b\",node=\"w0\"} 2.5 1700000000\n");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].label("name"), Some("a} b"));
        assert_eq!(s[0].label("node"), Some("w0"));
        assert_eq!(s[0].value, 2.5);
    }

    #[test]
    fn parses_names_labels_and_values() {
        let s = parse_text(
            "# HELP x y\nup 1\nnet_total{node=\"a\",peer=\"b \\\"q\\\"\",priority=\"-1\"} 42\nh_bucket{le=\"+Inf\"} 3\n# EOF\n",
        );
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "up");
        assert_eq!(s[1].label("peer"), Some("b \"q\""));
        assert_eq!(s[1].label("priority"), Some("-1"));
        assert_eq!(s[1].value, 42.0);
        assert_eq!(s[2].label("le"), Some("+Inf"));
    }

    #[test]
    fn serves_and_scrapes_the_registry() {
        crate::metrics()
            .job
            .point("scrape-test", "loss", Duration::from_secs(2), 0.5);
        let server = crate::MetricsServer::start("127.0.0.1:0").unwrap();
        let addr = server.local_addr().to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let text = rt
            .block_on(http_get(&addr, "/metrics", Duration::from_secs(5)))
            .unwrap();
        let series = parse_text(&text);
        assert!(series.iter().any(|s| s.name == "petrel_job_progress"
            && s.label("node") == Some("scrape-test")
            && s.value == 0.5));
        let missing = rt.block_on(http_get(&addr, "/nope", Duration::from_secs(5)));
        assert!(matches!(
            missing,
            Err(ObserveError::Status { status: 404, .. })
        ));
    }
}
