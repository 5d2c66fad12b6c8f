//! Emulated hosts (needs root and iproute2): namespaces `p-h{i}` at `198.18.0.{i+1}/24` (the
//! RFC 2544 range) joined by veth links to bridge `br0` in `p-sw`; `tbf` rate limits on both
//! ends, `netem` delay.

use crate::launcher::{self, LaunchError, LaunchMode, LaunchOptions, LaunchReport};
use petrel_actors::Cluster;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Why emulated hosts could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// Not running as root.
    #[error("network namespaces need root")]
    NotRoot,
    /// iproute2 or tc is missing or unusable.
    #[error("`ip netns` is unavailable: {0}")]
    NoIproute(String),
    /// A host of a set that should exist (`petrel netns up`) does not.
    #[error(
        "network namespace {namespace} does not exist; create the hosts with `petrel netns up --prefix {prefix} --hosts {count}`"
    )]
    Missing {
        /// The missing namespace.
        namespace: String,
        /// The set's prefix.
        prefix: String,
        /// How many hosts the set needs.
        count: usize,
    },
    /// `--delay-ms` on a kernel without the `netem` qdisc.
    #[error(
        "--delay-ms needs the kernel's netem qdisc (module sch_netem), which this machine lacks; no namespace was left behind (a rate limit alone uses tbf)"
    )]
    NoNetem,
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr (or why it could not start).
        stderr: String,
    },
}

/// A set of emulated hosts. Dropping it does not tear them down; call [`Hosts::down`].
#[derive(Clone, Debug)]
pub struct Hosts {
    /// Namespace name prefix.
    pub prefix: String,
    /// Number of hosts.
    pub count: usize,
}

/// Link emulation settings.
#[derive(Clone, Debug, Default)]
pub struct LinkShape {
    /// Rate limit per direction in Mbit/s (none if unset).
    pub rate_mbit: Option<f64>,
    /// Added one-way delay in ms (none if unset).
    pub delay_ms: Option<f64>,
    /// With a rate and no delay: the `tbf` queue's `latency`, ms (default 50).
    pub queue_ms: Option<f64>,
}

fn run(args: &[&str]) -> Result<String, NetnsError> {
    let failed = |stderr: String| NetnsError::Command {
        cmd: args.join(" "),
        stderr,
    };
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Checks that namespaces can be made here; the error says why not.
pub fn available() -> Result<(), NetnsError> {
    let uid = run(&["id", "-u"]).map_err(|e| NetnsError::NoIproute(e.to_string()))?;
    if uid.trim() != "0" {
        return Err(NetnsError::NotRoot);
    }
    run(&["ip", "netns", "list"]).map_err(|e| NetnsError::NoIproute(e.to_string()))?;
    run(&["tc", "-V"]).map_err(|e| NetnsError::NoIproute(format!("tc: {e}")))?;
    Ok(())
}

/// The UDP port a node listens on in its own host.
pub const NODE_PORT: u16 = 7000;

impl Hosts {
    /// The set `prefix` of `count` hosts made earlier; fails naming the first one missing.
    pub fn existing(prefix: &str, count: usize) -> Result<Hosts, NetnsError> {
        available()?;
        let hosts = Hosts {
            prefix: prefix.to_string(),
            count,
        };
        let listed = run(&["ip", "netns", "list"])?;
        match hosts.missing_in(&listed).into_iter().next() {
            Some(namespace) => Err(NetnsError::Missing {
                namespace,
                prefix: prefix.to_string(),
                count,
            }),
            None => Ok(hosts),
        }
    }

    /// The namespaces of this set that `ip netns list` output does not name.
    pub fn missing_in(&self, listed: &str) -> Vec<String> {
        let names: Vec<&str> = listed
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        (0..self.count)
            .map(|i| self.host_ns(i))
            .filter(|ns| !names.contains(&ns.as_str()))
            .collect()
    }

    /// Whether any namespace of this set (a host or the switch) still exists.
    pub fn any_left(&self) -> bool {
        let Ok(listed) = run(&["ip", "netns", "list"]) else {
            return false;
        };
        self.missing_in(&listed).len() < self.count
            || listed
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .any(|n| n == self.switch_ns())
    }

    /// The address a node placed on host `i` listens at.
    pub fn node_addr(&self, i: usize) -> String {
        format!("{}:{NODE_PORT}", self.host_ip(i))
    }

    /// The namespace of host `i`.
    pub fn host_ns(&self, i: usize) -> String {
        format!("{}-h{i}", self.prefix)
    }

    /// The IP address of host `i`.
    pub fn host_ip(&self, i: usize) -> String {
        format!("198.18.0.{}", i + 1)
    }

    fn switch_ns(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    /// Creates `count` hosts. Any leftovers with the same prefix are removed first.
    pub fn up(prefix: &str, count: usize, shape: &LinkShape) -> Result<Hosts, NetnsError> {
        available()?;
        if count == 0 || count > 250 {
            return Err(NetnsError::Command {
                cmd: "netns up".into(),
                stderr: format!("host count {count} out of range 1..=250"),
            });
        }
        let hosts = Hosts {
            prefix: prefix.to_string(),
            count,
        };
        hosts.down();
        // Half a set is no use and would block the next `up`: take it all down on failure.
        hosts.build(shape).inspect_err(|_| hosts.down())?;
        Ok(hosts)
    }

    fn build(&self, shape: &LinkShape) -> Result<(), NetnsError> {
        let (hosts, prefix, count) = (self, &self.prefix, self.count);
        let sw = hosts.switch_ns();
        run(&["ip", "netns", "add", &sw])?;
        run(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        run(&["ip", "-n", &sw, "link", "set", "br0", "up"])?;
        run(&["ip", "-n", &sw, "link", "set", "lo", "up"])?;
        for i in 0..count {
            let ns = hosts.host_ns(i);
            let host_if = format!("{prefix}{i}a");
            let sw_if = format!("{prefix}{i}b");
            run(&["ip", "netns", "add", &ns])?;
            run(&[
                "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &sw_if,
            ])?;
            run(&["ip", "link", "set", &host_if, "netns", &ns])?;
            run(&["ip", "link", "set", &sw_if, "netns", &sw])?;
            run(&["ip", "-n", &ns, "link", "set", &host_if, "name", "eth0"])?;
            let addr = format!("{}/24", hosts.host_ip(i));
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", &sw, "link", "set", &sw_if, "master", "br0"])?;
            run(&["ip", "-n", &sw, "link", "set", &sw_if, "up"])?;
            shape_link(&ns, "eth0", shape)?;
            shape_link(&sw, &sw_if, shape)?;
        }
        Ok(())
    }

    /// Takes host `i`'s link up or down (a cable pulled and plugged back).
    pub fn set_link(&self, i: usize, up: bool) -> Result<(), NetnsError> {
        let state = if up { "up" } else { "down" };
        run(&["ip", "-n", &self.host_ns(i), "link", "set", "eth0", state]).map(|_| ())
    }

    /// Runs a command inside host `i`.
    pub fn command(&self, i: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host_ns(i), program]);
        c
    }

    /// Packets the `tc` qdiscs of this set's links (both ends) have dropped so far.
    pub fn qdisc_drops(&self) -> Result<u64, NetnsError> {
        let mut total = 0;
        for i in 0..self.count {
            let ns = self.host_ns(i);
            let text = run(&[
                "ip", "netns", "exec", &ns, "tc", "-s", "qdisc", "show", "dev", "eth0",
            ])?;
            total += parse_qdisc_drops(&text);
        }
        let sw = self.switch_ns();
        let text = run(&["ip", "netns", "exec", &sw, "tc", "-s", "qdisc", "show"])?;
        Ok(total + parse_qdisc_drops(&text))
    }

    /// Removes every namespace of this set (ignores the ones that do not exist).
    pub fn down(&self) {
        for i in 0..self.count.max(1) {
            let _ = run(&["ip", "netns", "del", &self.host_ns(i)]);
        }
        let _ = run(&["ip", "netns", "del", &self.switch_ns()]);
    }
}

/// Tears the hosts down when dropped (also on error and panic).
pub struct Teardown(pub Hosts);

impl Drop for Teardown {
    fn drop(&mut self) {
        self.0.down();
    }
}

/// A namespace prefix unique to this process: `tag` (3 characters at most, so interface
/// names stay within 15) and the process id's last four digits.
pub fn process_prefix(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 10_000)
}

/// CPU seconds (user + system) of this process's waited-for children, from /proc.
fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // cutime is field 16, cstime 17; after ')' field 3 is index 0.
    let cu: f64 = f.get(13)?.parse().ok()?;
    let cs: f64 = f.get(14)?.parse().ok()?;
    Some((cu + cs) / 100.0)
}

/// Runs `cluster`'s nodes as `node` processes of this executable with run directory `dir`,
/// on 127.0.0.1 or node `i` on host `i` of `hosts` (links shaped by `tc`), all stopped
/// after `limit`. Returns the launcher's report (each node's CPU seconds in its
/// [`launcher::NodePeak`]) and the CPU cores the nodes used on average.
pub fn run_nodes(
    cluster: &Cluster,
    hosts: Option<&Hosts>,
    dir: &Path,
    limit: Duration,
) -> Result<(LaunchReport, f64), LaunchError> {
    let mut opts = LaunchOptions::new()?;
    opts.run_dir = Some(dir.to_path_buf());
    opts.timeout = Some(limit);
    opts.progress = false;
    opts.netns = hosts.map(|h| h.prefix.clone());
    let cpu0 = children_cpu_seconds();
    let t0 = Instant::now();
    let launched = launcher::launch_with(cluster, LaunchMode::Processes, opts)?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, children_cpu_seconds()) {
        (Some(a), Some(b)) => (b - a) / wall.max(1e-9),
        _ => f64::NAN,
    };
    let report = launched
        .report
        .ok_or_else(|| LaunchError::Usage("a processes launch returned no report".into()))?;
    Ok((report, cpu))
}

/// The sum of the `(dropped N, ...` counters in `tc -s qdisc show` output.
pub fn parse_qdisc_drops(text: &str) -> u64 {
    text.split("(dropped ")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u64>().ok()
        })
        .sum()
}

fn shape_link(ns: &str, dev: &str, shape: &LinkShape) -> Result<(), NetnsError> {
    let mut args = [
        "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
    ]
    .map(String::from)
    .to_vec();
    match (shape.rate_mbit, shape.delay_ms) {
        (None, None) => return Ok(()),
        (Some(rate), None) => {
            let burst = ((rate * 1e6 / 8.0 / 250.0) as u64)
                .max(16 * 1024)
                .to_string();
            let rate = format!("{rate}mbit");
            let latency = format!("{}ms", shape.queue_ms.unwrap_or(50.0));
            let tbf = ["tbf", "rate", &rate, "burst", &burst, "latency", &latency];
            args.extend(tbf.map(String::from));
        }
        (rate, Some(delay)) => {
            args.extend(["netem".into(), "delay".into(), format!("{delay}ms")]);
            if let Some(rate) = rate {
                args.extend(["rate".into(), format!("{rate}mbit")]);
            }
            args.extend(["limit".into(), "100000".into()]);
        }
    }
    match run(&args.iter().map(String::as_str).collect::<Vec<_>>()) {
        Err(NetnsError::Command { stderr, .. })
            if shape.delay_ms.is_some() && stderr.contains("qdisc kind is unknown") =>
        {
            Err(NetnsError::NoNetem)
        }
        other => other.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_drop_counters_of_every_qdisc() {
        let text = "qdisc tbf 8001: root refcnt 2 rate 80Mbit burst 40000b lat 50ms\n \
                    Sent 40499128 bytes 28092 pkt (dropped 401196, overlimits 485207 requeues 0)\n \
                    backlog 220626b 153p requeues 0\n\
                    qdisc noqueue 0: dev br0 root refcnt 2\n \
                    Sent 0 bytes 0 pkt (dropped 4, overlimits 0 requeues 0)\n";
        assert_eq!(parse_qdisc_drops(text), 401_200);
        assert_eq!(parse_qdisc_drops("qdisc noqueue 0: dev lo root"), 0);
    }

    #[test]
    fn missing_hosts_are_found_in_the_namespace_list() {
        let hosts = Hosts {
            prefix: "pc1".into(),
            count: 3,
        };
        let listed = "pc1-h2 (id: 7)\npc1-sw (id: 4)\npc1-h0\npc1-h10 (id: 9)\n";
        assert_eq!(hosts.missing_in(listed), ["pc1-h1"]);
        assert_eq!(hosts.missing_in(""), ["pc1-h0", "pc1-h1", "pc1-h2"]);
        assert_eq!(hosts.node_addr(2), "198.18.0.3:7000");
    }
}
