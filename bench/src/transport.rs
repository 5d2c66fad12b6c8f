//! `petrel bench transport`: raw quinn vs petrel messaging vs local actor sends, and how
//! long a high-priority message waits behind a low-priority backlog on a shaped link.

use super::BenchError;
use actix::prelude::*;
use bytes::Bytes;
use petrel::report::{Table, fmt, print_json};
use petrel_actors::{HandlerError, Msg, Node};
use petrel_messages::{NodeId, Priority, Tensor, remote_message};
use petrel_net::{ClusterCredentials, Net, NetConfig, PeerAddr, ShaperConfig};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `petrel bench transport` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct TransportBenchArgs {
    /// Size of each bulk message in MiB.
    #[arg(long, default_value_t = 4)]
    pub message_mib: usize,
    /// Messages per throughput run.
    #[arg(long, default_value_t = 64)]
    pub messages: usize,
    /// Low-priority backlog for the priority test, in MiB.
    #[arg(long, default_value_t = 256)]
    pub backlog_mib: usize,
    /// Shaped link rate for the priority test, in Mbit/s.
    #[arg(long, default_value_t = 100.0)]
    pub link_mbit: f64,
    /// Size of the high-priority probe in KiB.
    #[arg(long, default_value_t = 64)]
    pub probe_kib: usize,
    /// Interleaved raw/petrel pairs of throughput runs; the ratio reported is the median of
    /// the pairs' ratios (each pair runs back to back, so load from elsewhere on the
    /// machine hits both sides of a ratio alike).
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    #[command(flatten)]
    pub net: crate::common::NetArgs,
}

/// A bulk message.
#[derive(Serialize, Deserialize)]
struct Blob {
    tensor: Tensor,
}
// The tensor's bytes leave as they are, not copied into the frame.
remote_message!(Blob => (), "petrel.bench.blob", payload = tensor.data);

/// A small urgent message whose latency is measured.
#[derive(Serialize, Deserialize)]
struct Probe {
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
}
remote_message!(Probe, "petrel.bench.probe");

type Signal = Arc<Mutex<Option<tokio::sync::oneshot::Sender<Instant>>>>;

/// Counts blobs; fires `done` when `expect` arrived. Records probe arrival times.
struct Sink {
    received: usize,
    expect: usize,
    done: Signal,
    probe: Signal,
}

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<Msg<Blob>> for Sink {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, msg: Msg<Blob>, _: &mut Context<Self>) -> Self::Result {
        std::hint::black_box(msg.body.tensor.data.first());
        self.received += 1;
        if self.received == self.expect
            && let Ok(mut d) = self.done.lock()
            && let Some(tx) = d.take()
        {
            let _ = tx.send(Instant::now());
        }
        Ok(())
    }
}

impl Handler<Msg<Probe>> for Sink {
    type Result = Result<(), HandlerError>;
    fn handle(&mut self, _: Msg<Probe>, _: &mut Context<Self>) -> Self::Result {
        if let Ok(mut p) = self.probe.lock()
            && let Some(tx) = p.take()
        {
            let _ = tx.send(Instant::now());
        }
        Ok(())
    }
}

impl Handler<ResetSink> for Sink {
    type Result = ();
    fn handle(&mut self, msg: ResetSink, _: &mut Context<Self>) {
        self.received = 0;
        self.expect = msg.0;
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct ResetSink(usize);

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn mbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 * 8.0 / secs.max(1e-9) / 1e6
}

/// (a) One raw quinn stream carrying `messages` chunks of `size` bytes, each endpoint on
/// its own one-thread runtime (as petrel's transport runs).
fn raw_quinn(cfg: &NetConfig, size: usize, messages: usize) -> Result<f64, BenchError> {
    let creds = ClusterCredentials::generate_cluster(&["a", "b"])?;
    let rt = |name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(BenchError::io("raw quinn runtime"))
    };
    let (rt_a, rt_b) = (rt("raw-a")?, rt("raw-b")?);
    // The settings petrel gives a connection to a node on this host.
    let peer_cfg = cfg.for_peer(localhost());
    let server_cfg = creds[1].server_config(&peer_cfg)?;
    let client_cfg = creds[0].client_config(&peer_cfg)?;
    let bind = |what: &str| std::net::UdpSocket::bind(localhost()).map_err(BenchError::io(what));
    let (server_socket, client_socket) = (bind("raw quinn server")?, bind("raw quinn client")?);
    let server = rt_b
        .block_on(async { petrel_net::datagram::endpoint(cfg, server_socket, Some(server_cfg)) })
        .map_err(BenchError::io("raw quinn server"))?;
    let server_addr = server
        .local_addr()
        .map_err(BenchError::io("raw quinn server"))?;
    let total = size * messages;
    let reader = rt_b.spawn(async move {
        let conn = server
            .accept()
            .await
            .ok_or_else(|| BenchError::Incomplete("raw quinn: no connection".into()))?
            .await
            .map_err(BenchError::quinn)?;
        let mut recv = conn.accept_uni().await.map_err(BenchError::quinn)?;
        let mut got = 0usize;
        while got < total {
            match recv
                .read_chunk(1 << 20, true)
                .await
                .map_err(BenchError::quinn)?
            {
                Some(c) => got += c.bytes.len(),
                None => break,
            }
        }
        Ok::<_, BenchError>((Instant::now(), got))
    });
    let payload = Bytes::from(vec![7u8; size]);
    let cfg_a = cfg.clone();
    let writer = rt_a.spawn(async move {
        let mut ep = petrel_net::datagram::endpoint(&cfg_a, client_socket, None)
            .map_err(BenchError::io("raw quinn client"))?;
        ep.set_default_client_config(client_cfg);
        let conn = ep
            .connect(server_addr, petrel_net::tls::CLUSTER_SERVER_NAME)
            .map_err(BenchError::quinn)?
            .await
            .map_err(BenchError::quinn)?;
        let mut s = conn.open_uni().await.map_err(BenchError::quinn)?;
        // Warm-up handshake done; time the transfer.
        let start = Instant::now();
        for _ in 0..messages {
            s.write_chunk(payload.clone())
                .await
                .map_err(BenchError::quinn)?;
        }
        s.finish().map_err(BenchError::quinn)?;
        let _ = s.stopped().await;
        Ok::<_, BenchError>((start, conn, ep))
    });
    let (start, _conn, _ep) = rt_a.block_on(writer).map_err(BenchError::quinn)??;
    let (end, got) = rt_b.block_on(reader).map_err(BenchError::quinn)??;
    if got != total {
        return Err(BenchError::Incomplete(format!(
            "raw quinn moved {got} of {total} bytes"
        )));
    }
    rt_a.shutdown_background();
    rt_b.shutdown_background();
    Ok(mbps(total, (end - start).as_secs_f64()))
}

struct Pair {
    a: Node,
    b: Node,
    sink: Addr<Sink>,
    done: Signal,
    probe: Signal,
}

/// Two nodes over real QUIC in this process; node b hosts the sink.
fn pair(cfg: NetConfig) -> Result<Pair, BenchError> {
    let creds = ClusterCredentials::generate_cluster(&["a", "b"])?;
    let (net_a, in_a) = Net::quic(NodeId(0), localhost(), &creds[0], cfg.clone())?;
    let (net_b, in_b) = Net::quic(NodeId(1), localhost(), &creds[1], cfg)?;
    let no_addr = || BenchError::Incomplete("a QUIC transport has no local address".into());
    let addr_a = net_a.local_addr().ok_or_else(no_addr)?;
    let addr_b = net_b.local_addr().ok_or_else(no_addr)?;
    let a = Node::new(NodeId(0), "a", net_a, in_a, Duration::from_secs(30));
    let b = Node::new(NodeId(1), "b", net_b, in_b, Duration::from_secs(30));
    a.add_peer(NodeId(1), "b", PeerAddr::Quic(addr_b));
    b.add_peer(NodeId(0), "a", PeerAddr::Quic(addr_a));
    let (done, probe): (Signal, Signal) = Default::default();
    let sink = Sink {
        received: 0,
        expect: usize::MAX,
        done: done.clone(),
        probe: probe.clone(),
    }
    .start();
    b.register("sink", sink.clone())?
        .accept::<Blob>()
        .accept::<Probe>();
    a.register("local-sink", sink.clone())?.accept::<Blob>();
    Ok(Pair {
        a,
        b,
        sink,
        done,
        probe,
    })
}

fn arm(signal: &Signal) -> tokio::sync::oneshot::Receiver<Instant> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if let Ok(mut s) = signal.lock() {
        *s = Some(tx);
    }
    rx
}

/// When the sink fired `armed`, within `secs` (else: `late`).
async fn fired(
    armed: tokio::sync::oneshot::Receiver<Instant>,
    secs: u64,
    late: &str,
) -> Result<Instant, BenchError> {
    let stopped = |_| BenchError::Incomplete("the sink stopped".into());
    tokio::time::timeout(Duration::from_secs(secs), armed)
        .await
        .map_err(|_| BenchError::Incomplete(late.into()))?
        .map_err(stopped)
}

fn tensors(n: usize, size: usize) -> Vec<Tensor> {
    (0..n)
        .map(|i| Tensor::from_vec(vec![i as f32; size / 4]))
        .collect()
}

/// (b) petrel remote tells, or (c) local tells to a sink on the sender's node.
async fn petrel_throughput(
    p: &Pair,
    local: bool,
    size: usize,
    messages: usize,
) -> Result<f64, BenchError> {
    let (node, actor) = if local {
        ("a", "local-sink")
    } else {
        ("b", "sink")
    };
    let target = p.a.actor_at::<Blob>(node, actor)?;
    let blobs = tensors(messages, size);
    let reset = p.sink.send(ResetSink(messages)).await;
    reset.map_err(|_| BenchError::Incomplete("the sink stopped".into()))?;
    let done = arm(&p.done);
    let start = Instant::now();
    for t in blobs {
        target.tell(Blob { tensor: t }, Priority::NORMAL)?;
    }
    let end = fired(done, 120, "throughput run timed out").await?;
    Ok(mbps(size * messages, (end - start).as_secs_f64()))
}

async fn probe_latency(p: &Pair, kib: usize) -> Result<Duration, BenchError> {
    let probe = p.a.actor_at::<Probe>("b", "sink")?;
    let arrived = arm(&p.probe);
    let sent = Instant::now();
    let payload = vec![1u8; kib * 1024];
    probe.tell(Probe { payload }, Priority::HIGH)?;
    Ok(fired(arrived, 60, "probe never arrived").await? - sent)
}

#[derive(Serialize)]
struct Figures {
    raw_quinn_mbps: f64,
    petrel_mbps: f64,
    /// petrel/raw: the median over the interleaved pairs, and each pair's in run order.
    ratio: f64,
    pair_ratios: Vec<f64>,
    local_mbps: f64,
    idle_latency_ms: f64,
    backlog_latency_ms: f64,
    priority_delay_ratio: f64,
    link_mbit: f64,
    message_mib: usize,
    messages: usize,
    backlog_mib: usize,
}

/// Runs the benchmark, prints the table and the JSON line.
pub fn run(args: TransportBenchArgs) -> Result<(), BenchError> {
    let size = args.message_mib << 20;
    let cfg = args.net.config()?;
    let system = System::new();
    let figures = system.block_on(async {
        let p = pair(cfg.clone())?;
        eprintln!(
            "throughput: {} x {} MiB, raw quinn and petrel interleaved, {} rounds ...",
            args.messages,
            args.message_mib,
            args.repeat.max(1)
        );
        // Raw and petrel runs alternate so that outside load hits both sides of a pair; the
        // ratio is the median of the pairs', the throughputs the best of each.
        let (mut raw, mut remote, mut local) = (0f64, 0f64, 0f64);
        let mut ratios = Vec::new();
        for _ in 0..args.repeat.max(1) {
            let raw_cfg = cfg.clone();
            let messages = args.messages;
            // quinn's own runtimes cannot start inside this one: run them on a thread.
            let r = std::thread::spawn(move || raw_quinn(&raw_cfg, size, messages))
                .join()
                .map_err(|_| BenchError::Incomplete("raw quinn run panicked".into()))??;
            raw = raw.max(r);
            let pr = petrel_throughput(&p, false, size, args.messages).await?;
            remote = remote.max(pr);
            ratios.push(pr / r.max(1e-9));
            eprintln!(
                "  pair {}: raw {} Mbit/s, petrel {} Mbit/s, ratio {:.3}",
                ratios.len(),
                fmt(r),
                fmt(pr),
                pr / r.max(1e-9)
            );
            local = local.max(petrel_throughput(&p, true, size, args.messages).await?);
        }
        p.a.shutdown();
        p.b.shutdown();
        eprintln!(
            "priority: {} KiB probe vs {} MiB backlog at {} Mbit/s ...",
            args.probe_kib, args.backlog_mib, args.link_mbit
        );
        let shaped = NetConfig {
            shaper: Some(ShaperConfig::egress_mbit(args.link_mbit)),
            ..cfg.clone()
        };
        let p = pair(shaped)?;
        // Idle: warm the connection, then the best of a few probes.
        let mut idle = Duration::MAX;
        for _ in 0..5 {
            idle = idle.min(probe_latency(&p, args.probe_kib).await?);
        }
        let backlog = p.a.actor_at::<Blob>("b", "sink")?;
        let chunk = 4 << 20;
        for t in tensors(args.backlog_mib * (1 << 20) / chunk, chunk) {
            backlog.tell(Blob { tensor: t }, Priority::LOW)?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut loaded = Duration::ZERO;
        for _ in 0..3 {
            loaded = loaded.max(probe_latency(&p, args.probe_kib).await?);
        }
        p.a.shutdown();
        p.b.shutdown();
        Ok::<_, BenchError>(Figures {
            raw_quinn_mbps: raw,
            petrel_mbps: remote,
            ratio: crate::common::median(&ratios).unwrap_or(0.0),
            pair_ratios: ratios,
            local_mbps: local,
            idle_latency_ms: idle.as_secs_f64() * 1e3,
            backlog_latency_ms: loaded.as_secs_f64() * 1e3,
            priority_delay_ratio: loaded.as_secs_f64() / idle.as_secs_f64().max(1e-9),
            link_mbit: args.link_mbit,
            message_mib: args.message_mib,
            messages: args.messages,
            backlog_mib: args.backlog_mib,
        })
    })?;
    let mut t = Table::new(&["measurement", "value"]);
    let (f, mbit, ms) = (
        &figures,
        |v| format!("{} Mbit/s", fmt(v)),
        |v| format!("{} ms", fmt(v)),
    );
    for (label, value) in [
        ("(a) raw quinn, one stream", mbit(f.raw_quinn_mbps)),
        ("(b) petrel, two nodes", mbit(f.petrel_mbps)),
        ("    ratio petrel/raw (median of pairs)", fmt(f.ratio)),
        ("(c) petrel, same node", mbit(f.local_mbps)),
        ("(d) probe latency, idle link", ms(f.idle_latency_ms)),
        ("    probe latency, backlog", ms(f.backlog_latency_ms)),
        ("    priority delay ratio", fmt(f.priority_delay_ratio)),
    ] {
        t.row(vec![label.into(), value]);
    }
    t.print();
    Ok(print_json(&figures)?)
}

#[cfg(test)]
mod tests {
    use crate::common::median;

    #[test]
    fn median_of_pair_ratios() {
        assert_eq!(median(&[0.9, 0.7, 1.0, 0.95, 0.8]), Some(0.9));
        assert_eq!(median(&[1.0, 0.5]), Some(0.75));
        assert_eq!(median(&[]), None);
    }
}
