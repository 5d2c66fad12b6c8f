//! Free UDP ports for nodes whose configured port is 0 (and TCP ports for their `/metrics`).
//!
//! "Bind port 0, note it, release it, bind again later" races when many clusters start on
//! one host: the kernel hands a released ephemeral port to the next `bind(0)`. So ports are
//! picked outside the ephemeral range, and a port for a node of this process stays bound
//! until that node's endpoint takes the socket over.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{LazyLock, Mutex};

/// Sockets bound ahead of time for nodes of this process, keyed by their address.
static HELD: LazyLock<Mutex<HashMap<SocketAddr, UdpSocket>>> = LazyLock::new(Default::default);

/// Ports below this are left to well-known services.
const LOWEST_PICKED_PORT: u16 = 10_000;
const PICK_ATTEMPTS: usize = 64;

/// Binds a free UDP port on `ip` and holds the socket until a node of this process binds
/// that address (its endpoint takes it) or it is [`release`]d.
pub fn reserve_held(ip: IpAddr) -> io::Result<SocketAddr> {
    let socket = bind_outside_ephemeral_range(ip, UdpSocket::bind)?;
    let addr = socket.local_addr()?;
    if let Ok(mut held) = HELD.lock() {
        held.insert(addr, socket);
    }
    Ok(addr)
}

/// A UDP port on `ip` that was free a moment ago, released at once, for nodes other
/// processes will start; outside the ephemeral range, so no `bind(0)` takes it meanwhile.
pub fn pick_free(ip: IpAddr) -> io::Result<SocketAddr> {
    bind_outside_ephemeral_range(ip, UdpSocket::bind)?.local_addr()
}

/// A TCP port on `ip`, picked like [`pick_free`] (a `/metrics` listener in another process).
pub fn pick_free_tcp(ip: IpAddr) -> io::Result<SocketAddr> {
    bind_outside_ephemeral_range(ip, std::net::TcpListener::bind)?.local_addr()
}

/// A `pick` that is none of `taken` (ports released at once could otherwise repeat within
/// one cluster). Gives up after a few tries.
pub fn pick_distinct(
    taken: &[SocketAddr],
    mut pick: impl FnMut() -> io::Result<SocketAddr>,
) -> io::Result<SocketAddr> {
    for _ in 0..PICK_ATTEMPTS {
        let addr = pick()?;
        if !taken.contains(&addr) {
            return Ok(addr);
        }
    }
    let n = taken.len();
    let why = format!("no free port outside the {n} already picked after {PICK_ATTEMPTS} tries");
    Err(io::Error::new(io::ErrorKind::AddrInUse, why))
}

/// Whether this process holds `addr` for one of its nodes.
pub fn is_held(addr: SocketAddr) -> bool {
    HELD.lock().map(|h| h.contains_key(&addr)).unwrap_or(false)
}

/// Lets go of a held address (a node that will never start).
pub fn release(addr: SocketAddr) {
    if let Ok(mut held) = HELD.lock() {
        held.remove(&addr);
    }
}

/// The socket held for `addr`, if any; the caller's endpoint owns it from now on.
pub(crate) fn take_held(addr: SocketAddr) -> Option<UdpSocket> {
    HELD.lock().ok()?.remove(&addr)
}

fn bind_outside_ephemeral_range<S>(
    ip: IpAddr,
    bind: impl Fn(SocketAddr) -> io::Result<S>,
) -> io::Result<S> {
    let (ephemeral_low, ephemeral_high) = ephemeral_range();
    let mut candidates = Vec::new();
    if ephemeral_low > LOWEST_PICKED_PORT {
        candidates.push((LOWEST_PICKED_PORT, ephemeral_low - 1));
    }
    if ephemeral_high < u16::MAX {
        candidates.push((ephemeral_high + 1, u16::MAX));
    }
    for attempt in 0..PICK_ATTEMPTS {
        let Some(&(low, high)) = candidates.get(attempt % candidates.len().max(1)) else {
            break;
        };
        let span = u64::from(high - low) + 1;
        let port = low + (random_u64() % span) as u16;
        if let Ok(socket) = bind(SocketAddr::new(ip, port)) {
            return Ok(socket);
        }
    }
    // Every pick was taken (or the range is empty): let the kernel choose.
    bind(SocketAddr::new(ip, 0))
}

/// The kernel's range for `bind(0)`; Linux's default where it cannot be read.
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| parse_port_range(&s))
        .unwrap_or((32_768, 60_999))
}

fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(str::parse::<u16>);
    let low = it.next()?.ok()?;
    let high = it.next()?.ok()?;
    (low <= high).then_some((low, high))
}

fn random_u64() -> u64 {
    // A fresh `RandomState` is seeded from the OS: enough to spread concurrent pickers.
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn port_range_parses_and_rejects_garbage() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_port_range("60999 32768"), None);
        assert_eq!(parse_port_range("x"), None);
    }

    #[test]
    fn held_port_stays_bound_until_taken() {
        let addr = reserve_held(LOOPBACK).unwrap();
        let (low, high) = ephemeral_range();
        assert!(!(low..=high).contains(&addr.port()), "{addr}");
        assert!(is_held(addr));
        // Nobody else can bind it while it is held.
        assert!(UdpSocket::bind(addr).is_err());
        let socket = take_held(addr).unwrap();
        assert_eq!(socket.local_addr().unwrap(), addr);
        assert!(!is_held(addr));
        assert!(take_held(addr).is_none());
    }

    #[test]
    fn picked_port_is_free_again() {
        let addr = pick_free(LOOPBACK).unwrap();
        assert!(UdpSocket::bind(addr).is_ok());
        let held = reserve_held(LOOPBACK).unwrap();
        release(held);
        assert!(UdpSocket::bind(held).is_ok());
    }

    #[test]
    fn distinct_picks_skip_the_ports_already_taken() {
        let a: SocketAddr = "127.0.0.1:20001".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:20002".parse().unwrap();
        let mut picks = [a, a, b].into_iter();
        assert_eq!(
            pick_distinct(&[a], || Ok(picks.next().unwrap())).unwrap(),
            b
        );
        let err = pick_distinct(&[a], || Ok(a)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn picked_tcp_port_is_outside_the_ephemeral_range_and_free() {
        let addr = pick_free_tcp(LOOPBACK).unwrap();
        let (low, high) = ephemeral_range();
        assert!(!(low..=high).contains(&addr.port()), "{addr}");
        assert!(std::net::TcpListener::bind(addr).is_ok());
    }
}
