//! The HTTP servers (`/metrics`, the dashboard) against clients that try to hold them: a
//! half-sent request, a head trickled byte by byte, an idle keep-alive connection and a
//! flood of idle connections. Each must be cut within the server's bounds, and stopping
//! the server must not wait for them.

use petrel_observe::MetricsServer;
use petrel_observe::http::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, SHUTDOWN_GRACE};
use petrel_observe::scrape::http_get;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Slack over a bound for a loaded machine (two cores shared with other builds).
const SLACK: Duration = Duration::from_secs(3);

/// A request head cut before its final empty line: the server waits for the rest.
const HALF_REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: petrel\r\n";

fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap()
}

/// Runs `f` on a thread and returns how long it took, failing the test (instead of
/// hanging it) when it takes longer than `limit`.
fn timed(limit: Duration, what: &str, f: impl FnOnce() + Send + 'static) -> Duration {
    let (done, finished) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => start.elapsed(),
        Err(_) => panic!("{what} took longer than {limit:?}"),
    }
}

/// Whether the server closed `stream` within `limit` (reads until EOF or a reset; bytes of
/// a response, such as a 408, are read past).
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// The flood test counts this process's descriptors: the others wait while it runs.
static FD_COUNT: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    FD_COUNT
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn get(addr: SocketAddr, path: &str) -> Result<String, petrel_observe::ObserveError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(http_get(&addr.to_string(), path, Duration::from_secs(2)))
}

#[test]
fn a_half_sent_request_does_not_hold_the_exporter_when_it_stops() {
    let _turn = shared();
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    let mut client = connect(addr);
    client.write_all(HALF_REQUEST).unwrap();
    // The server has read the half head before it is told to stop.
    std::thread::sleep(Duration::from_millis(300));
    let took = timed(SHUTDOWN_GRACE + SLACK, "stopping the exporter", move || {
        drop(server)
    });
    assert!(took <= SHUTDOWN_GRACE + SLACK, "{took:?}");
    // The client still holds its half of the connection; the server's half is gone.
    assert!(closed_within(&mut client, Duration::from_secs(1)));
}

#[cfg(feature = "dashboard")]
#[test]
fn a_half_sent_request_does_not_hold_the_dashboard_when_it_finishes() {
    let _turn = shared();
    let dashboard = petrel_observe::dashboard::Dashboard::start("127.0.0.1:0", "bounds").unwrap();
    let mut client = connect(dashboard.local_addr());
    client
        .write_all(b"GET /api/state HTTP/1.1\r\nHost: petrel\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().to_path_buf();
    timed(
        SHUTDOWN_GRACE + SLACK,
        "finishing the dashboard",
        move || {
            dashboard.finish(&report).unwrap();
        },
    );
    assert!(dir.path().join("dashboard.html").exists());
    assert!(closed_within(&mut client, Duration::from_secs(1)));
}

#[test]
fn a_trickled_request_head_is_cut_at_the_header_read_timeout() {
    let _turn = shared();
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let mut client = connect(server.local_addr());
    client.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let start = Instant::now();
    // One header byte every 200 ms: never idle, never done.
    let mut cut = false;
    while !cut && start.elapsed() < HEADER_READ_TIMEOUT + SLACK {
        cut = client.write_all(b"X").is_err()
            || closed_within(&mut client, Duration::from_millis(200));
    }
    assert!(
        cut,
        "a trickled head held the connection for {:?}",
        start.elapsed()
    );
    assert!(start.elapsed() >= HEADER_READ_TIMEOUT - Duration::from_millis(500));
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let _turn = shared();
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let mut client = connect(server.local_addr());
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: petrel\r\n\r\n")
        .unwrap();
    // Read the answer's head at least; the connection stays open for a next request.
    let mut buf = [0u8; 64];
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = client.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    let start = Instant::now();
    assert!(
        closed_within(&mut client, HEADER_READ_TIMEOUT + SLACK),
        "an idle keep-alive connection stayed open"
    );
    assert!(start.elapsed() >= HEADER_READ_TIMEOUT - Duration::from_secs(1));
}

#[test]
fn a_flood_of_idle_connections_holds_at_most_the_limit_and_the_server_recovers() {
    let _alone = FD_COUNT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    assert!(get(addr, "/metrics").is_ok());
    let flood = 4 * MAX_CONNECTIONS + 44;
    let before = open_fds();
    let clients: Vec<TcpStream> = (0..flood)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok())
        .collect();
    assert!(clients.len() > 2 * MAX_CONNECTIONS, "{}", clients.len());
    // Let the server accept (and refuse) every one of them.
    std::thread::sleep(Duration::from_millis(500));
    let server_fds = open_fds().saturating_sub(before + clients.len());
    // Other tests of this binary run beside this one and hold a few descriptors too.
    assert!(
        server_fds <= MAX_CONNECTIONS + 16,
        "the server holds {server_fds} descriptors for {} idle clients",
        clients.len()
    );
    // Once the idle ones are cut at the header timeout, a new client is served again
    // while the flood's sockets are still open on this side.
    let start = Instant::now();
    loop {
        if get(addr, "/metrics").is_ok_and(|t| t.ends_with("# EOF\n")) {
            break;
        }
        assert!(
            start.elapsed() < HEADER_READ_TIMEOUT + 2 * SLACK,
            "no answer {:?} into the flood",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(clients);
    let took = timed(SHUTDOWN_GRACE + SLACK, "stopping the exporter", move || {
        drop(server)
    });
    assert!(took <= SHUTDOWN_GRACE + SLACK);
}
