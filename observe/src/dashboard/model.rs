//! The dashboard's data, built from scrapes (sans-I/O: scrapes and times are passed in).

use crate::scrape::Series;
use serde::Serialize;
use std::collections::BTreeMap;

/// Points kept per curve and per timeline (older ones are thinned out, not lost at once).
const MAX_POINTS: usize = 2000;

/// A node as the dashboard shows it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NodeView {
    /// Its roles.
    pub roles: Vec<String>,
    /// `/metrics` address (empty for nodes of this process).
    pub addr: String,
    /// `up`, `unreachable` (its scrape failed), `down` (a peer's failure detector says
    /// so), `starting` (not scraped yet) or `exited` (answered until the run ended).
    pub state: String,
    /// Seconds (dashboard time) of the last successful scrape.
    pub last_seen_s: Option<f64>,
    /// Resident memory of its process, bytes.
    pub rss_bytes: Option<f64>,
    /// CPU use of its process over the last interval (1.0 = one core).
    pub cpu: Option<f64>,
    /// Bytes per second sent over the last interval.
    pub sent_bps: f64,
    /// Bytes per second received over the last interval.
    pub received_bps: f64,
    /// Bytes waiting in its outbox.
    pub outbox_bytes: f64,
    /// Items waiting in its mailboxes.
    pub mailbox_depth: f64,
    /// Last scrape error.
    pub error: Option<String>,
}

/// Throughput of one directed link over the last interval.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LinkView {
    /// Sender.
    pub from: String,
    /// Receiver.
    pub to: String,
    /// Bytes per second.
    pub bps: f64,
    /// Bytes so far.
    pub total_bytes: f64,
}

/// One point of a curve.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct CurvePoint {
    /// Job time, seconds.
    pub t: f64,
    /// The value.
    pub v: f64,
}

/// One interval of a STRADS scheduler.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoundSpan {
    /// The scheduler's node.
    pub node: String,
    /// Interval start and end, dashboard seconds.
    pub t0: f64,
    /// End.
    pub t1: f64,
    /// Rounds committed in the interval.
    pub rounds: f64,
    /// Mean round latency in the interval, seconds.
    pub mean_latency_s: f64,
    /// Rounds in flight at its end.
    pub in_flight: f64,
    /// Dependency-filter rejections in the interval.
    pub rejections: f64,
}

/// One interval of a P3 worker: bytes of gradient slices sent per layer.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SliceSpan {
    /// The worker's node.
    pub node: String,
    /// Interval start, dashboard seconds.
    pub t0: f64,
    /// End.
    pub t1: f64,
    /// `(layer, bytes sent in the interval)`.
    pub layers: Vec<(u32, f64)>,
    /// Fraction of the interval with at least one slice on the wire.
    pub busy: f64,
}

/// Everything the page draws.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DashboardState {
    /// Title (the cluster or job).
    pub title: String,
    /// Dashboard seconds since start.
    pub now_s: f64,
    /// True once the run ended (the static report).
    pub finished: bool,
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeView>,
    /// Directed links with traffic.
    pub links: Vec<LinkView>,
    /// History curves by `node/metric`.
    pub curves: BTreeMap<String, Vec<CurvePoint>>,
    /// PS staleness per table: `(upper bound in clocks, reads in this bucket)`.
    pub staleness: BTreeMap<String, Vec<(f64, f64)>>,
    /// STRADS per-interval round timeline.
    pub rounds: Vec<RoundSpan>,
    /// P3 per-interval layer timeline.
    pub slices: Vec<SliceSpan>,
}

/// Counter values of a node's previous scrape, for rates.
#[derive(Default)]
struct Previous {
    t: f64,
    series: Vec<Series>,
}

/// Builds [`DashboardState`] from scrapes.
#[derive(Default)]
pub struct DashboardModel {
    state: DashboardState,
    previous: BTreeMap<String, Previous>,
    points_seen: BTreeMap<String, f64>,
}

type Sums = BTreeMap<String, [f64; 2]>;

fn sum(series: &[Series], name: &str, node: &str) -> f64 {
    series
        .iter()
        .filter(|s| s.name == name && s.label("node") == Some(node))
        .map(|s| s.value)
        .sum()
}

/// Per value of `label` (`?`: none), the sums of `name`'s series of `node` in each scrape.
fn by_label(scrapes: [&[Series]; 2], name: &str, node: &str, label: &str) -> Sums {
    let mut out = Sums::new();
    for (k, series) in scrapes.into_iter().enumerate() {
        for x in series
            .iter()
            .filter(|x| x.name == name && x.label("node") == Some(node))
        {
            let key = x.label(label).unwrap_or("?").to_string();
            out.entry(key).or_default()[k] += x.value;
        }
    }
    out
}

fn push_capped<T>(v: &mut Vec<T>, item: T) {
    v.push(item);
    if v.len() > MAX_POINTS {
        // Drop every other point of the older half: the curve keeps its shape.
        let half = v.len() / 2;
        let mut i = 0;
        v.retain(|_| {
            i += 1;
            i > half || i % 2 == 0
        });
    }
}

impl DashboardModel {
    /// An empty dashboard titled `title`.
    pub fn new(title: &str) -> Self {
        Self {
            state: DashboardState {
                title: title.to_string(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Declares a node before its first scrape (the launcher knows them all).
    pub fn expect_node(&mut self, name: &str, roles: &[String], addr: &str) {
        let n = self.state.nodes.entry(name.to_string()).or_default();
        n.roles = roles.to_vec();
        n.addr = addr.to_string();
        if n.state.is_empty() {
            n.state = "starting".into();
        }
    }

    /// A scrape of `target` (a node's address, or this process) failed at `t`.
    pub fn scrape_failed(&mut self, node: &str, t: f64, error: &str) {
        self.state.now_s = t;
        if let Some(n) = self.state.nodes.get_mut(node) {
            if n.state != "starting" || t > 10.0 {
                n.state = "unreachable".into();
            }
            n.error = Some(error.to_string());
            n.sent_bps = 0.0;
            n.received_bps = 0.0;
        }
    }

    /// A scrape at dashboard time `t`; `process_of` names the node whose process answered
    /// (its unlabeled `process_*` series belong to it), `None` for this process.
    pub fn ingest(&mut self, t: f64, process_of: Option<&str>, series: &[Series]) {
        self.state.now_s = t;
        let nodes: Vec<(String, Vec<String>)> = series
            .iter()
            .filter(|s| s.name == "petrel_node_info")
            .filter_map(|s| {
                let roles = s
                    .label("roles")
                    .unwrap_or("")
                    .split(',')
                    .filter(|r| !r.is_empty())
                    .map(String::from)
                    .collect();
                Some((s.label("node")?.to_string(), roles))
            })
            .collect();
        for (node, roles) in &nodes {
            self.ingest_node(t, node, roles, process_of == Some(node.as_str()), series);
        }
        self.ingest_curves(series);
        self.ingest_staleness(series);
        // A peer's failure detector declaring a node down wins over a stale "up".
        for s in series
            .iter()
            .filter(|s| s.name == "petrel_peer_up" && s.value == 0.0)
        {
            if let Some(n) = s.label("peer").and_then(|p| self.state.nodes.get_mut(p)) {
                n.state = "down".into();
            }
        }
    }

    fn ingest_node(&mut self, t: f64, node: &str, roles: &[String], own: bool, s: &[Series]) {
        let prev = self.previous.remove(node).unwrap_or_default();
        let dt = t - prev.t;
        let had_prev = !prev.series.is_empty() && dt > 0.0;
        let per_s = |now: f64, then: f64| {
            if had_prev {
                ((now - then) / dt).max(0.0)
            } else {
                0.0
            }
        };
        let delta = |name: &str| sum(s, name, node) - sum(&prev.series, name, node);
        let rate = |name: &str| per_s(delta(name), 0.0);
        let view = self.state.nodes.entry(node.to_string()).or_default();
        view.roles = roles.to_vec();
        view.state = "up".into();
        view.error = None;
        view.last_seen_s = Some(t);
        view.sent_bps = rate("petrel_net_sent_bytes_total");
        view.received_bps = rate("petrel_net_received_bytes_total");
        view.outbox_bytes = sum(s, "petrel_outbox_queued_bytes", node);
        view.mailbox_depth = sum(s, "petrel_mailbox_depth", node);
        if own {
            let unlabeled = |s: &[Series], name: &str| {
                s.iter()
                    .find(|x| x.name == name && x.labels.is_empty())
                    .map(|x| x.value)
            };
            view.rss_bytes = unlabeled(s, "process_resident_memory_bytes");
            let cpu_now = unlabeled(s, "process_cpu_seconds_total");
            let cpu_then = unlabeled(&prev.series, "process_cpu_seconds_total");
            if let (Some(a), Some(b), true) = (cpu_now, cpu_then, had_prev) {
                view.cpu = Some(((a - b) / dt).max(0.0));
            }
        }
        // Links: bytes this node sent to each peer, summed over priorities.
        let sent = "petrel_net_sent_bytes_total";
        self.state.links.retain(|l| l.from != node);
        for (peer, [now, then]) in by_label([s, &prev.series], sent, node, "peer") {
            self.state.links.push(LinkView {
                from: node.to_string(),
                to: peer,
                bps: per_s(now, then),
                total_bytes: now,
            });
        }
        self.state
            .links
            .sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
        if had_prev {
            let rounds = delta("petrel_strads_rounds_total");
            if rounds > 0.0 {
                let latency = delta("petrel_strads_round_seconds_sum");
                push_capped(
                    &mut self.state.rounds,
                    RoundSpan {
                        node: node.to_string(),
                        t0: prev.t,
                        t1: t,
                        rounds,
                        mean_latency_s: latency / rounds,
                        in_flight: sum(s, "petrel_strads_rounds_in_flight", node),
                        rejections: delta("petrel_strads_filter_rejections_total"),
                    },
                );
            }
            let mut layers: BTreeMap<u32, f64> = BTreeMap::new();
            let sent = "petrel_p3_slice_bytes_sent_total";
            for (layer, [now, then]) in by_label([s, &prev.series], sent, node, "layer") {
                if let Ok(layer) = layer.parse() {
                    *layers.entry(layer).or_default() += now - then;
                }
            }
            layers.retain(|_, b| *b > 0.0);
            if !layers.is_empty() {
                let busy = delta("petrel_p3_wire_busy_seconds_total") / dt;
                push_capped(
                    &mut self.state.slices,
                    SliceSpan {
                        node: node.to_string(),
                        t0: prev.t,
                        t1: t,
                        layers: layers.into_iter().collect(),
                        busy: busy.clamp(0.0, 1.0),
                    },
                );
            }
        }
        let keep: Vec<Series> = s
            .iter()
            .filter(|x| x.label("node") == Some(node) || (own && x.labels.is_empty()))
            .cloned()
            .collect();
        self.previous
            .insert(node.to_string(), Previous { t, series: keep });
    }

    fn ingest_curves(&mut self, s: &[Series]) {
        for x in s
            .iter()
            .filter(|x| x.name == "petrel_job_progress_points_total")
        {
            let (Some(node), Some(metric)) = (x.label("node"), x.label("metric")) else {
                continue;
            };
            let key = format!("{node}/{metric}");
            if self.points_seen.get(&key) == Some(&x.value) {
                continue;
            }
            self.points_seen.insert(key.clone(), x.value);
            let find = |name: &str| {
                s.iter()
                    .find(|y| {
                        y.name == name
                            && y.label("node") == Some(node)
                            && y.label("metric") == Some(metric)
                    })
                    .map(|y| y.value)
            };
            if let (Some(v), Some(t)) = (
                find("petrel_job_progress"),
                find("petrel_job_progress_at_seconds"),
            ) && v.is_finite()
            {
                push_capped(
                    self.state.curves.entry(key).or_default(),
                    CurvePoint { t, v },
                );
            }
        }
    }

    fn ingest_staleness(&mut self, s: &[Series]) {
        // Cumulative buckets per (node, table), summed over nodes per table.
        let mut cumulative: BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
        for x in s
            .iter()
            .filter(|x| x.name == "petrel_ps_staleness_clocks_bucket")
        {
            let (Some(node), Some(table), Some(le)) =
                (x.label("node"), x.label("table"), x.label("le"))
            else {
                continue;
            };
            let le = le.parse().unwrap_or(f64::INFINITY);
            cumulative
                .entry(table.to_string())
                .or_default()
                .entry(node.to_string())
                .or_default()
                .push((le, x.value));
        }
        for (table, per_node) in cumulative {
            let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
            for (_, mut b) in per_node {
                b.sort_by(|a, c| a.0.total_cmp(&c.0));
                let mut below = 0.0;
                for (le, c) in b {
                    let key = if le.is_finite() { le as u64 } else { u64::MAX };
                    let e = buckets.entry(key).or_insert((le, 0.0));
                    e.1 += c - below;
                    below = c;
                }
            }
            let merged = buckets.into_values().collect();
            // Staleness of this process's nodes and of remote nodes of the same table
            // arrive in separate scrapes: keep the per-scrape maximum per bucket.
            let entry = self.state.staleness.entry(table).or_default();
            merge_max(entry, merged);
        }
    }

    /// The state to draw.
    pub fn state(&self) -> &DashboardState {
        &self.state
    }

    /// Marks the run as ended (the static report says so): nodes that answered during the
    /// run and no longer do have exited rather than become unreachable.
    pub fn finish(&mut self) {
        self.state.finished = true;
        for n in self.state.nodes.values_mut() {
            if n.last_seen_s.is_some() && n.state == "unreachable" {
                n.state = "exited".into();
                n.error = None;
            }
        }
    }
}

/// Staleness buckets arrive per scrape target; targets report disjoint nodes, so the sum
/// over targets is wanted. Each target's contribution is kept by replacing, per scrape, the
/// buckets with the larger count (counts only grow).
fn merge_max(into: &mut Vec<(f64, f64)>, new: Vec<(f64, f64)>) {
    if into.len() != new.len() {
        *into = new;
        return;
    }
    for (a, b) in into.iter_mut().zip(new) {
        if b.1 > a.1 {
            *a = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::parse_text;

    fn scrape(sent: u64, rounds: u64, points: u64, value: f64) -> Vec<Series> {
        parse_text(&format!(
            "petrel_node_info{{node=\"a\",roles=\"x,y\"}} 1\n\
             petrel_net_sent_bytes_total{{node=\"a\",peer=\"b\",priority=\"0\"}} {sent}\n\
             petrel_strads_rounds_total{{node=\"a\"}} {rounds}\n\
             petrel_strads_round_seconds_sum{{node=\"a\"}} {}\n\
             petrel_job_progress_points_total{{node=\"a\",metric=\"objective\"}} {points}\n\
             petrel_job_progress{{node=\"a\",metric=\"objective\"}} {value}\n\
             petrel_job_progress_at_seconds{{node=\"a\",metric=\"objective\"}} {points}\n\
             petrel_ps_staleness_clocks_bucket{{node=\"a\",table=\"0\",le=\"0.0\"}} 3\n\
             petrel_ps_staleness_clocks_bucket{{node=\"a\",table=\"0\",le=\"1.0\"}} 5\n\
             petrel_ps_staleness_clocks_bucket{{node=\"a\",table=\"0\",le=\"+Inf\"}} 5\n\
             petrel_peer_up{{node=\"a\",peer=\"b\"}} 0\n\
             process_resident_memory_bytes 1000\n",
            rounds as f64 * 0.01
        ))
    }

    #[test]
    fn rates_curves_timelines_and_liveness_come_from_consecutive_scrapes() {
        let mut m = DashboardModel::new("t");
        m.expect_node("b", &["w".into()], "127.0.0.1:1");
        assert_eq!(m.state().nodes["b"].state, "starting");
        m.ingest(1.0, Some("a"), &scrape(100, 2, 1, 9.0));
        m.ingest(1.0, Some("a"), &scrape(100, 2, 1, 9.0));
        m.ingest(3.0, Some("a"), &scrape(500, 6, 2, 7.0));
        let s = m.state();
        assert_eq!(s.nodes["a"].roles, vec!["x", "y"]);
        assert_eq!(s.nodes["a"].state, "up");
        assert_eq!(s.nodes["a"].sent_bps, 200.0);
        assert_eq!(s.nodes["a"].rss_bytes, Some(1000.0));
        assert_eq!(s.nodes["b"].state, "down");
        assert_eq!(s.links[0].bps, 200.0);
        assert_eq!(
            s.curves["a/objective"].len(),
            2,
            "a repeated point is not added twice"
        );
        assert_eq!(s.rounds.len(), 1);
        assert_eq!(s.rounds[0].rounds, 4.0);
        assert!((s.rounds[0].mean_latency_s - 0.01).abs() < 1e-9);
        assert_eq!(s.staleness["0"][0], (0.0, 3.0));
        assert_eq!(s.staleness["0"][1], (1.0, 2.0));
        m.scrape_failed("a", 20.0, "refused");
        assert_eq!(m.state().nodes["a"].state, "unreachable");
        m.finish();
        assert_eq!(m.state().nodes["a"].state, "exited");
        assert_eq!(m.state().nodes["b"].state, "down");
    }

    #[test]
    fn long_curves_are_thinned_not_truncated() {
        let mut v: Vec<u32> = Vec::new();
        for i in 0..5000 {
            push_capped(&mut v, i);
        }
        assert!(v.len() <= MAX_POINTS);
        assert_eq!(v.last(), Some(&4999));
        assert!(v[0] < 100);
    }
}
