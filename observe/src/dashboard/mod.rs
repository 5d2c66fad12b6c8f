//! The launcher's live dashboard and the static report a finished run leaves.
//!
//! A [`Dashboard`] scrapes this process's registry and every node announced with
//! [`announce_targets`](crate::scrape::announce_targets) once a second into a
//! [`DashboardModel`], and serves `GET /` (the page, compiled in) and `GET /api/state` (the
//! model as JSON). [`Dashboard::finish`] writes the page with the data inlined.

mod model;

pub use model::{
    CurvePoint, DashboardModel, DashboardState, LinkView, NodeView, RoundSpan, SliceSpan,
};

use crate::ObserveError;
use crate::http::HttpThread;
use crate::scrape::{http_get, parse_text, targets};
use axum::Router;
use axum::http::header;
use axum::routing::get;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// How often the dashboard scrapes.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// The page with `data` inlined (`None`: the page polls `/api/state`).
pub fn render_page(data: Option<&DashboardState>) -> Result<String, ObserveError> {
    // `</` inside a script would end it: JSON strings escape the slash.
    let data = match data {
        Some(d) => serde_json::to_string(d)?.replace("</", "<\\/"),
        None => "null".to_string(),
    };
    Ok(PAGE
        .replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", SCRIPT)
        .replace("/*DATA*/null", &data))
}

/// A running dashboard: scrapes every second and serves the page; stops when dropped.
pub struct Dashboard {
    model: Arc<Mutex<DashboardModel>>,
    http: HttpThread,
    url: String,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dashboard({})", self.url)
    }
}

impl Dashboard {
    /// Serves the dashboard titled `title` on `addr` (`host:port`, port 0: a free port).
    pub fn start(addr: &str, title: &str) -> Result<Self, ObserveError> {
        let model = Arc::new(Mutex::new(DashboardModel::new(title)));
        let state_model = model.clone();
        let (page, html) = (render_page(None)?, "text/html; charset=utf-8");
        let router = Router::new()
            .route(
                "/",
                get(move || std::future::ready(([(header::CONTENT_TYPE, html)], page.clone()))),
            )
            .route(
                "/api/state",
                get(move || {
                    let json = state_model
                        .lock()
                        .ok()
                        .and_then(|m| serde_json::to_string(m.state()).ok())
                        .unwrap_or_else(|| "{}".into());
                    std::future::ready(([(header::CONTENT_TYPE, "application/json")], json))
                }),
            );
        let scraper = scrape_loop(model.clone());
        let http = HttpThread::start(addr, "dashboard", router, Box::pin(scraper))?;
        let url = url_of(http.local_addr());
        Ok(Self { model, http, url })
    }

    /// The page's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// Stops scraping and writes the page with its data inlined to `dir/dashboard.html`.
    pub fn finish(self, dir: &Path) -> Result<PathBuf, ObserveError> {
        let state = {
            let mut m = self.model.lock().map_err(|_| ObserveError::Write {
                path: dir.display().to_string(),
                source: std::io::Error::other("dashboard model poisoned"),
            })?;
            m.finish();
            m.state().clone()
        };
        drop(self.http);
        let path = dir.join("dashboard.html");
        let write_err = |source| ObserveError::Write {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(write_err)?;
        std::fs::write(&path, render_page(Some(&state))?).map_err(write_err)?;
        Ok(path)
    }
}

fn url_of(addr: SocketAddr) -> String {
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        addr.ip().to_string()
    };
    match addr {
        SocketAddr::V6(_) if host != "127.0.0.1" => format!("http://[{host}]:{}/", addr.port()),
        _ => format!("http://{host}:{}/", addr.port()),
    }
}

/// Scrapes this process's registry and the announced targets every [`SCRAPE_INTERVAL`].
async fn scrape_loop(model: Arc<Mutex<DashboardModel>>) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(SCRAPE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let remote = targets().lock().map(|t| t.clone()).unwrap_or_default();
        let local = parse_text(&crate::encode_text());
        let t = start.elapsed().as_secs_f64();
        if let Ok(mut m) = model.lock() {
            for target in &remote {
                m.expect_node(&target.node, &target.roles, &target.addr);
            }
            // This process's own nodes; its process series are the launcher's, no node's.
            m.ingest(t, None, &local);
        }
        // Every target at once, their answers in order.
        let fetches: Vec<_> = remote
            .into_iter()
            .map(|target| {
                tokio::spawn(async move {
                    let r = http_get(&target.addr, "/metrics", Duration::from_millis(800)).await;
                    (target, r)
                })
            })
            .collect();
        let mut scrapes = Vec::with_capacity(fetches.len());
        for fetch in fetches {
            scrapes.extend(fetch.await);
        }
        let t = start.elapsed().as_secs_f64();
        if let Ok(mut m) = model.lock() {
            for (target, r) in scrapes {
                match r {
                    Ok(text) => m.ingest(t, Some(&target.node), &parse_text(&text)),
                    Err(e) => m.scrape_failed(&target.node, t, &e.to_string()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_embeds_its_script_and_style_and_inlines_data() {
        let live = render_page(None).unwrap();
        assert!(live.contains("const PETREL_DATA = null"));
        assert!(!live.contains("/*SCRIPT*/"));
        assert!(
            !live.contains("src=\"http") && !live.contains("href=\"http"),
            "no external resources"
        );
        let mut state = DashboardState {
            title: "t</script>".into(),
            ..Default::default()
        };
        state.finished = true;
        let report = render_page(Some(&state)).unwrap();
        assert!(report.contains("\"finished\":true"));
        assert!(
            !report.contains("t</script>"),
            "a title cannot end the script"
        );
    }

    #[test]
    fn the_dashboard_shows_this_process_nodes_and_writes_a_report() {
        crate::register_node("dash-test", || crate::NodeSample {
            roles: vec!["r".into()],
            ..Default::default()
        });
        let d = Dashboard::start("127.0.0.1:0", "unit").unwrap();
        assert!(d.url().starts_with("http://127.0.0.1:"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let addr = d.local_addr().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let json = rt
                .block_on(http_get(&addr, "/api/state", Duration::from_secs(2)))
                .unwrap();
            if json.contains("dash-test") {
                break;
            }
            assert!(Instant::now() < deadline, "{json}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let page = rt
            .block_on(http_get(&addr, "/", Duration::from_secs(2)))
            .unwrap();
        assert!(page.contains("<svg") || page.contains("petrel"));
        let dir = tempfile::tempdir().unwrap();
        let path = d.finish(dir.path()).unwrap();
        let html = std::fs::read_to_string(path).unwrap();
        assert!(html.contains("dash-test") && html.contains("\"finished\":true"));
        crate::unregister_node("dash-test");
    }
}
