//! One P3 job as separate `petrel node` processes (`petrel train p3`, `bench p3-real`,
//! `bench p3 --netns`): on 127.0.0.1 ports, or one per network namespace
//! ([`crate::netns::Hosts`]) joined by veth links that `tc tbf` limits in the kernel. The
//! workers' JSON reports ([`petrel_p3::roles::WorkerReportFile`]) are the measurements.

use crate::netns::Hosts;
use crate::train::p3::P3JobError;
use petrel_actors::Topology;
use petrel_net::NetConfig;
use petrel_net::tls::ClusterCa;
use petrel_p3::roles::{P3NodeConfig, WorkerReportFile};
use petrel_p3::shells::{SHARD_ROLE, WORKER_ROLE};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Tears the namespaces down when dropped (also on error and panic).
pub struct Teardown(pub Hosts);

impl Drop for Teardown {
    fn drop(&mut self) {
        self.0.down();
    }
}

/// A namespace prefix unique to this process (interface names stay within 15 chars).
pub fn prefix() -> String {
    format!("p3n{}", std::process::id() % 10_000)
}

/// CPU seconds (user + system) of this process's waited-for children, from /proc.
pub fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // cutime is field 16, cstime 17; after ')' field 3 is index 0.
    let cu: f64 = f.get(13)?.parse().ok()?;
    let cs: f64 = f.get(14)?.parse().ok()?;
    Some((cu + cs) / 100.0)
}

/// Where a job's node processes run.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// Node `i` in namespace `i` of the hosts, links limited by `tc tbf` (the user-space
    /// shaper is off).
    Netns(&'a Hosts),
    /// Every node on this host at `127.0.0.1:ports[i]`, links limited by the transport's
    /// user-space shaper.
    Loopback(&'a [u16]),
}

impl Placement<'_> {
    fn capacity(&self) -> usize {
        match self {
            Placement::Netns(h) => h.count,
            Placement::Loopback(ports) => ports.len(),
        }
    }

    fn addr(&self, i: usize) -> String {
        match self {
            Placement::Netns(h) => format!("{}:7000", h.host_ip(i)),
            Placement::Loopback(ports) => format!("127.0.0.1:{}", ports[i]),
        }
    }

    fn command(&self, i: usize, exe: &str) -> Command {
        match self {
            Placement::Netns(h) => h.command(i, exe),
            Placement::Loopback(_) => Command::new(exe),
        }
    }
}

/// `n` UDP ports on 127.0.0.1 that were free a moment ago (the OS picks them).
pub fn free_loopback_ports(n: usize) -> Result<Vec<u16>, P3JobError> {
    let sockets = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|s| s.iter().map(|s| Ok(s.local_addr()?.port())).collect());
    sockets.map_err(|source| P3JobError::Io {
        path: PathBuf::from("127.0.0.1 UDP ports"),
        source,
    })
}

fn node_names(cfg: &P3NodeConfig) -> Vec<(String, &'static str)> {
    (0..cfg.workers)
        .map(|w| (format!("w{w}"), WORKER_ROLE))
        .chain((0..cfg.shards).map(|s| (format!("s{s}"), SHARD_ROLE)))
        .collect()
}

/// Writes the cluster TOML (and its certificates) for `cfg` on `hosts` into `dir`.
fn write_config(
    hosts: Placement<'_>,
    cfg: &P3NodeConfig,
    net: &NetConfig,
    dir: &Path,
) -> Result<PathBuf, P3JobError> {
    let names = node_names(cfg);
    if names.len() > hosts.capacity() {
        return Err(P3JobError::TooFewHosts {
            nodes: names.len(),
            hosts: hosts.capacity(),
        });
    }
    let mut topo = Topology::builder("p3");
    for (i, (name, role)) in names.iter().enumerate() {
        topo = topo.node_at(name, &hosts.addr(i), &[role]);
    }
    let certs = dir.join("certs");
    let ca = ClusterCa::generate()?;
    ca.write(&certs)?;
    for (name, _) in &names {
        ca.issue(name).and_then(|c| c.write(&certs, name))?;
    }
    let app = serde_json::to_value(cfg)?;
    let net = match hosts {
        // tc shapes the namespaces' links; the user-space shaper would count twice.
        Placement::Netns(_) => NetConfig {
            shaper: None,
            ..net.clone()
        },
        Placement::Loopback(_) => net.clone(),
    };
    let timeout_ms = cfg.ask_timeout_ms;
    let settings = topo
        .with(|s| {
            s.net = net;
            s.cluster.certs_dir = Some(certs.clone());
            s.cluster.request_timeout_ms = timeout_ms;
            s.cluster.failure_timeout_ms = s.cluster.failure_timeout_ms.max(10_000);
            s.app.insert("p3".into(), app);
        })
        .build()?;
    let path = dir.join("cluster.toml");
    let text = settings.to_toml()?;
    std::fs::write(&path, text).map_err(|source| P3JobError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn kill_all(children: &mut [(String, Child, PathBuf)]) {
    for (_, c, _) in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

/// The failure of a node process that a signal ended, if one did.
fn killed_node(children: &mut [(String, Child, PathBuf)], done: &[bool]) -> Option<P3JobError> {
    use std::os::unix::process::ExitStatusExt;
    children
        .iter_mut()
        .zip(done)
        .filter(|(_, done)| !**done)
        .find_map(|((name, child, log), _)| match child.try_wait() {
            Ok(Some(status)) if status.signal().is_some() => Some(P3JobError::NodeFailed {
                name: name.clone(),
                status,
                log: log.clone(),
                tail: log_tail(log),
            }),
            _ => None,
        })
}

/// Runs one job: `cfg.workers + cfg.shards` node processes placed by `hosts` (node i in
/// host i). Returns the workers' reports (worker order) and the CPU cores the
/// node processes used on average.
pub fn run_job(
    hosts: Placement<'_>,
    cfg: &P3NodeConfig,
    net: &NetConfig,
    dir: &Path,
    limit: Duration,
) -> Result<(Vec<WorkerReportFile>, f64), P3JobError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| P3JobError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let config = write_config(hosts, cfg, net, dir)?;
    let exe = std::env::current_exe().map_err(io(Path::new("current executable")))?;
    let exe = exe
        .to_str()
        .ok_or(P3JobError::NotUtf8 { what: "executable" })?
        .to_string();
    let config_s = config
        .to_str()
        .ok_or(P3JobError::NotUtf8 { what: "config" })?
        .to_string();
    let cpu0 = children_cpu_seconds();
    let t0 = Instant::now();
    let mut children: Vec<(String, Child, PathBuf)> = Vec::new();
    for (i, (name, _)) in node_names(cfg).into_iter().enumerate() {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).map_err(io(&log))?;
        let err = out.try_clone().map_err(io(&log))?;
        let spawned = hosts
            .command(i, &exe)
            .args(["node", "--config", &config_s, "--name", &name])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn();
        match spawned {
            Ok(c) => children.push((name, c, log)),
            Err(source) => {
                kill_all(&mut children);
                return Err(P3JobError::Spawn { name, source });
            }
        }
    }
    let mut done = vec![false; children.len()];
    let outcome = loop {
        let mut failed = None;
        for (k, (name, child, log)) in children.iter_mut().enumerate() {
            if done[k] {
                continue;
            }
            match child.try_wait() {
                Ok(Some(st)) if st.success() => done[k] = true,
                Ok(Some(status)) => {
                    failed = Some(P3JobError::NodeFailed {
                        name: name.clone(),
                        status,
                        log: log.clone(),
                        tail: log_tail(log),
                    });
                    break;
                }
                Ok(None) => {}
                Err(source) => {
                    failed = Some(P3JobError::Wait {
                        name: name.clone(),
                        source,
                    });
                    break;
                }
            }
        }
        if let Some(f) = failed {
            // A node killed by a signal is the cause, not the peers that then lost it.
            break Err(killed_node(&mut children, &done).unwrap_or(f));
        }
        if done.iter().all(|d| *d) {
            break Ok(());
        }
        if t0.elapsed() > limit {
            break Err(P3JobError::Timeout {
                mode: cfg.mode,
                limit,
                dir: dir.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if outcome.is_err() {
        kill_all(&mut children);
    }
    outcome?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, children_cpu_seconds()) {
        (Some(a), Some(b)) => (b - a) / wall.max(1e-9),
        _ => f64::NAN,
    };
    let reports = (0..cfg.workers)
        .map(|w| WorkerReportFile::read(&cfg.report_dir, w))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((reports, cpu))
}
