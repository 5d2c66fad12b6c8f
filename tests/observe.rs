//! Observability end to end: a multi-process cluster running a parameter-server, a STRADS
//! and a P3 job at once; every node's `/metrics` is scraped while they run, and the series
//! must move.

use petrel::launcher;
use petrel::observe::scrape::{Series, http_get, parse_text};
use petrel_actors::Settings;
use std::collections::BTreeMap;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{dashboard_url, run_cmd};

/// One cluster, three jobs: `hub` runs the PS shard and monitor, the STRADS scheduler and
/// the P3 shard; `w0` and `w1` run a worker of each. With `held_open_s`, the MF job runs
/// until that many seconds have passed (a curve point every 100 ms) instead of stopping
/// after 150 clocks, so the run lasts at least that long however fast the machine is.
/// P3 runs 30 iterations (about 5 s here), so that the first scrape, which a loaded machine
/// can delay, still comes before its slices stop.
pub fn three_system_settings(out: &Path, held_open_s: Option<u32>) -> Settings {
    let (max_clocks, max_seconds) = match held_open_s {
        Some(s) => (1_000_000_000, s),
        None => (150, 60),
    };
    let hub = r#"["ps-shard", "ps-monitor", "strads-lasso-scheduler", "p3-shard"]"#;
    let worker = r#"["ps-worker", "strads-lasso-worker", "p3-worker"]"#;
    let text = format!(
        r#"
[cluster]
name = "observe"
failure_timeout_ms = 10000

[[nodes]]
name = "hub"
addr = "127.0.0.1:0"
roles = {hub}

[[nodes]]
name = "w0"
addr = "127.0.0.1:0"
roles = {worker}

[[nodes]]
name = "w1"
addr = "127.0.0.1:0"
roles = {worker}

[app.mf]
consistency = "ssp"
staleness = 2
rank = 4
max_clocks = {max_clocks}
max_seconds = {max_seconds}
eval_every = 1
out = "{out}/ps-mf"
{lasso}
[app.p3]
mode = "p3"
model = "resnet50"
scale = 0.002
device_gflops = 50.0
batch = 4
slice_size = 4096
workers = 2
shards = 1
iterations = 30
report_dir = "{out}/p3"
"#,
        out = out.display(),
        lasso = crate::common::fixtures::lasso_section(out, 1500, 200, 1000, 7)
    );
    Settings::from_toml(&text).unwrap()
}

/// The value of the series `name` whose labels include all of `labels`, summed.
fn total(series: &[Series], name: &str, labels: &[(&str, &str)]) -> f64 {
    series
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// The last of a node's scrapes that carries its `petrel_node_info` (the last one before
/// it unregistered at shutdown), else its last scrape.
fn last_live<'s>(scrapes: &'s [Vec<Series>], node: &str) -> &'s [Series] {
    scrapes
        .iter()
        .rev()
        .find(|x| total(x, "petrel_node_info", &[("node", node)]) > 0.0)
        .or(scrapes.last())
        .map_or(&[], Vec::as_slice)
}

/// The two tests launch clusters of the same shape and node names (`hub`, `w0`, `w1`),
/// each picking its `/metrics` ports as it starts; run side by side, one test's scrape of
/// `w0` could reach the other's. They take turns.
static ONE_CLUSTER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn every_node_serves_metrics_that_move_during_a_run() {
    let _turn = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let settings = three_system_settings(dir.path(), None);
    let rt = common::runtime(2);
    let scrapes: BTreeMap<String, Vec<Vec<Series>>> = rt.block_on(async {
        let opts = common::node_processes(dir.path().join("run"));
        let running = launcher::start(settings, opts).await.unwrap();
        let targets = running.metrics_addrs().to_vec();
        assert_eq!(targets.len(), 3);
        let wait = tokio::spawn(running.wait(Some(Duration::from_secs(240))));
        let mut scrapes: BTreeMap<String, Vec<Vec<Series>>> = BTreeMap::new();
        while !wait.is_finished() {
            for (node, addr) in &targets {
                if let Ok(text) = http_get(addr, "/metrics", Duration::from_secs(2)).await {
                    scrapes
                        .entry(node.clone())
                        .or_default()
                        .push(parse_text(&text));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        wait.await.unwrap().unwrap();
        scrapes
    });
    for node in ["hub", "w0", "w1"] {
        let s = &scrapes[node];
        assert!(s.len() >= 3, "{node}: only {} scrapes", s.len());
        let l = [("node", node)];
        // The last scrape in which the node still showed itself: one that lands after it
        // unregistered its sampler at shutdown has none of its series.
        let (first, last) = (&s[0], last_live(s, node));
        // The transport's counters, per peer and priority, grew while the jobs ran. Compared
        // at their highest scrape, not the last: a scrape during shutdown can come after a
        // peer's connection (and its series) is gone.
        for name in [
            "petrel_net_sent_bytes_total",
            "petrel_net_received_bytes_total",
        ] {
            let highest = s.iter().map(|x| total(x, name, &l)).fold(0.0, f64::max);
            assert!(
                highest > total(first, name, &l),
                "{node}: {name} did not grow"
            );
        }
        assert!(
            last.iter()
                .any(|x| x.name == "petrel_net_sent_bytes_total" && x.label("priority").is_some())
        );
        assert!(total(last, "process_resident_memory_bytes", &[]) > 1e6);
        // The petrel binary counts its heap: a node holds at least its transport's buffers.
        let heap = total(last, "process_heap_bytes", &[]);
        assert!(
            heap > 1e6 && total(last, "process_heap_peak_bytes", &[]) >= heap,
            "{node}: heap {heap}"
        );
        assert!(
            total(last, "process_cpu_seconds_total", &[])
                > total(first, "process_cpu_seconds_total", &[])
        );
        assert_eq!(total(last, "petrel_node_info", &l), 1.0);
        assert!(last.iter().any(|x| x.name == "petrel_outbox_queued_bytes"));
        assert!(last.iter().any(|x| x.name == "petrel_mailbox_depth"));
        assert_eq!(total(last, "petrel_net_refused_connections_total", &l), 0.0);
        assert_eq!(total(last, "petrel_net_malformed_frames_total", &l), 0.0);
        // Every other node is up in the failure detector's view, and heard from.
        assert_eq!(total(last, "petrel_peer_up", &l), 2.0, "{node}");
        assert!(
            last.iter()
                .any(|x| x.name == "petrel_heartbeat_age_seconds")
        );
    }
    let hub = &scrapes["hub"];
    let grew = |s: &Vec<Vec<Series>>, name: &str, node: &str| {
        let l = [("node", node)];
        s.iter()
            .any(|x| total(x, name, &l) > total(&s[0], name, &l))
    };
    assert!(grew(hub, "petrel_strads_rounds_total", "hub"));
    assert!(grew(hub, "petrel_strads_updates_total", "hub"));
    assert!(grew(hub, "petrel_strads_round_seconds_count", "hub"));
    assert!(grew(hub, "petrel_job_progress_points_total", "hub"));
    for w in ["w0", "w1"] {
        let s = &scrapes[w];
        assert!(grew(s, "petrel_ps_worker_clock", w), "{w}: PS clock");
        assert!(
            grew(s, "petrel_ps_staleness_clocks_count", w),
            "{w}: staleness"
        );
        assert!(grew(s, "petrel_p3_slices_sent_total", w), "{w}: P3 slices");
        assert!(
            grew(s, "petrel_p3_slice_seconds_count", w),
            "{w}: P3 slice times"
        );
        assert!(
            grew(s, "petrel_p3_wire_busy_seconds_total", w),
            "{w}: P3 wire"
        );
    }
    // Heartbeat gaps are a histogram per peer on the coordinator (hub).
    let last = last_live(hub, "hub");
    assert!(
        total(
            last,
            "petrel_heartbeat_gap_seconds_count",
            &[("node", "hub")]
        ) > 0.0
    );
}

/// Debian's `chromium`, if installed.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let out = Command::new("which").arg(name).output().ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
}

/// Runs headless Chromium with a fresh profile and no network besides `url`'s host;
/// `extra` adds `--dump-dom` or `--screenshot=...`. Returns stdout.
fn headless(browser: &Path, profile: &Path, extra: &[&str], url: &str) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=3000",
            "--window-size=1400,1700",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `data-points` of the history curve in a dumped DOM.
fn curve_points(dom: &str) -> u64 {
    let Some(at) = dom.find("id=\"curve\"") else {
        return 0;
    };
    let tag_end = dom[at..].find('>').map_or(dom.len(), |e| at + e);
    let tag = &dom[at..tag_end];
    tag.split("data-points=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_dashboard_shows_every_node_live_and_leaves_a_static_report() {
    let _turn = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED: no chromium on PATH (apt-get install chromium) -- dashboard not loaded"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cluster.toml");
    std::fs::write(
        &cfg,
        three_system_settings(dir.path(), Some(25))
            .to_toml()
            .unwrap(),
    )
    .unwrap();
    let run_dir = dir.path().join("run");
    let mut child = run_cmd(&cfg, &["--timeout-s", "240", "--dashboard", "--run-dir"])
        .arg(&run_dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (url, rest) = dashboard_url(child.stdout.take().unwrap());
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&shots).unwrap();
    // Live: every node is listed; the curve gains points between two loads.
    let profile = tempfile::tempdir().unwrap();
    let mut first = None;
    let mut gained = false;
    // Bounded by the run itself: on a loaded machine one Chromium load can take tens of seconds.
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        let dom = headless(&browser, profile.path(), &["--dump-dom"], &url);
        let listed = ["hub", "w0", "w1"]
            .iter()
            .all(|n| dom.contains(&format!("data-node=\"{n}\"")));
        let points = curve_points(&dom);
        if listed && points > 0 {
            match first {
                None => {
                    first = Some(points);
                    let shot = format!("--screenshot={}", shots.join("live.png").display());
                    headless(&browser, profile.path(), &[&shot], &url);
                }
                Some(p) if points > p => {
                    gained = true;
                    break;
                }
                Some(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let status = child.wait().unwrap();
    let printed = rest.join().unwrap();
    assert!(status.success(), "petrel run failed: {printed:?}");
    assert!(
        first.is_some(),
        "the live page never listed every node with a curve"
    );
    assert!(
        gained,
        "the curve did not gain points while the run went on"
    );
    assert!(shots.join("live.png").exists(), "no screenshot");
    // The static report: the same page with the data inlined, opened from the file with
    // every host unresolvable (no network).
    let report = run_dir.join("dashboard.html");
    assert!(
        printed.iter().any(|l| l.contains("dashboard.html")),
        "{printed:?}"
    );
    let offline = "--host-resolver-rules=MAP * ~NOTFOUND";
    let file_url = format!("file://{}", report.display());
    let dom = headless(
        &browser,
        profile.path(),
        &["--dump-dom", offline],
        &file_url,
    );
    for n in ["hub", "w0", "w1"] {
        assert!(
            dom.contains(&format!("data-node=\"{n}\"")),
            "report lacks {n}"
        );
    }
    assert!(dom.contains("finished (static report)"));
    assert!(curve_points(&dom) > 0);
    let shot = format!("--screenshot={}", shots.join("report.png").display());
    headless(&browser, profile.path(), &[&shot, offline], &file_url);
    assert!(shots.join("report.png").exists());
}
