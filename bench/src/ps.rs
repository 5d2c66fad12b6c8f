//! `petrel bench ps`: parameter-server push+pull throughput and latency per row size, every
//! node a process talking QUIC on 127.0.0.1, beside petrel's own transport in the same
//! processes (an echo of the same bytes) and optionally an external peer (`--peer-cmd`).
//!
//! A worker's iteration: `push` of its rows, `clock()`, then `get_many_shared` (BSP: a
//! fresh read holding every worker's push). Throughput is bytes pushed + pulled per second
//! summed over workers (MB = 10^6 bytes); a row of S bytes is split into S/shards per
//! shard. The 1x1 breakdown times one iteration's steps in this process without a network.

mod roles;

pub(crate) use roles::register;
use roles::{NodeReport, PsBenchConfig, rows_for, table_for};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use petrel_messages::{EnvelopeHeader, EnvelopeKind, Frame, NodeId, Priority};
use petrel_ps::core::client::GetOutcome;
use petrel_ps::core::shard::ShardAction;
use petrel_ps::shells::{ToClient, ToShard};
use petrel_ps::{ClientCore, PsShardCore, TableId, WorkerId};
use serde::{Deserialize, Serialize};

use super::BenchError;
use crate::common::upper_median;
use petrel::report::print_json;

/// Roles of the nodes that serve shards (and the echo) and that run a worker.
const SHARD_ROLE: &str = "ps-bench-shard";
const WORKER_ROLE: &str = "ps-bench-worker";
/// The `[app.ps_bench]` section the launched nodes read.
const SECTION: &str = "ps_bench";
const ECHO_ACTOR: &str = "ps-bench-echo";
/// A peer run that prints nothing for this long is stopped (its figures are left out).
const PEER_TIMEOUT: Duration = Duration::from_secs(120);
const TABLE: TableId = TableId(0);
/// Every push adds this to every value, so the pulled value says how many pushes it holds.
const DELTA: f32 = 1.0;

/// `petrel bench ps` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PsBenchArgs {
    /// Row sizes in bytes (each a multiple of 4 x shards).
    #[arg(long, value_delimiter = ',', default_values_t = [4096usize, 65536, 1 << 20, 4 << 20, 16 << 20])]
    pub sizes: Vec<usize>,
    /// Topologies as WORKERSxSHARDS.
    #[arg(long, value_delimiter = ',', default_values = ["1x1", "2x2"])]
    pub topologies: Vec<String>,
    /// Bytes each worker pushes per size and phase (iterations = this / size, within
    /// [--min-iters, --max-iters]).
    #[arg(long, default_value_t = 256 << 20)]
    pub bytes_per_phase: usize,
    /// Fewest timed iterations per size.
    #[arg(long, default_value_t = 12)]
    pub min_iters: u32,
    /// Most timed iterations per size.
    #[arg(long, default_value_t = 2000)]
    pub max_iters: u32,
    /// Untimed iterations first (connections, windows, allocator pools).
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Runs per size and topology; petrel and the peer alternate, medians are reported.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Turn read-my-writes off on the benchmark table.
    #[arg(long)]
    pub no_read_my_writes: bool,
    /// An already-built external benchmark run as `CMD BYTES ITERS WORKERS SHARDS`, printing
    /// one JSON line per worker with `mbps`, `p50_ms` and `p99_ms` (the ps-lite peer is in
    /// bench/pslite; see BENCHMARKS.md). Run alternately with petrel; ratios are printed
    /// per size.
    #[arg(long)]
    pub peer_cmd: Option<PathBuf>,
    #[command(flatten)]
    pub net: crate::common::NetArgs,
    /// Stop a launched cluster after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// Also run every size with `shared_memory_dir` set to DIR (a tmpfs such as
    /// `/dev/shm`), alternating with the QUIC run: large rows then travel between the
    /// co-located processes through files, QUIC carries only control frames. Reported in
    /// its own columns (`shm_mbps`, `shm_over_quic`).
    #[arg(long, value_name = "DIR")]
    pub shared_memory: Option<PathBuf>,
}

fn parse_topology(t: &str) -> Result<(u32, u32), BenchError> {
    let bad = || BenchError::Incomplete(format!("topology {t:?} is not WORKERSxSHARDS"));
    let [w, s] = crate::common::dims(t).ok_or_else(bad)?;
    Ok((w, s))
}

/// The `q` quantile of sorted values (0 without values).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted
        .get(i.min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// Figures of one petrel run, or the medians of several.
#[derive(Debug, Clone, Serialize)]
struct RunFigures {
    ps_mbps: f64,
    p50_ms: f64,
    p99_ms: f64,
    push_p50_ms: f64,
    transport_mbps: f64,
    transport_p50_ms: f64,
    rss_mb: f64,
    #[serde(skip)]
    shm_messages: u64,
}

impl RunFigures {
    /// The median of every figure of `runs` (`shm_messages`: their sum); `None` without runs.
    fn median_of(runs: &[RunFigures]) -> Option<RunFigures> {
        let m = |f: fn(&RunFigures) -> f64| upper_median(runs.iter().map(f).collect());
        (!runs.is_empty()).then(|| RunFigures {
            ps_mbps: m(|r| r.ps_mbps),
            p50_ms: m(|r| r.p50_ms),
            p99_ms: m(|r| r.p99_ms),
            push_p50_ms: m(|r| r.push_p50_ms),
            transport_mbps: m(|r| r.transport_mbps),
            transport_p50_ms: m(|r| r.transport_p50_ms),
            rss_mb: m(|r| r.rss_mb),
            shm_messages: runs.iter().map(|r| r.shm_messages).sum(),
        })
    }
}

async fn petrel_run(
    bytes: usize,
    workers: u32,
    shards: u32,
    iters: u32,
    args: &PsBenchArgs,
    shared_memory: Option<&Path>,
) -> Result<RunFigures, BenchError> {
    let dir = std::env::temp_dir().join(format!(
        "petrel-bench-ps-{}-{bytes}-{workers}x{shards}",
        std::process::id()
    ));
    let shard_nodes = (0..shards).map(|s| (format!("shard{s}"), SHARD_ROLE));
    let worker_nodes = (0..workers).map(|w| (format!("worker{w}"), WORKER_ROLE));
    let nodes: Vec<_> = shard_nodes.chain(worker_nodes).collect();
    let mut settings = super::local_settings("ps-bench", nodes.iter().cloned());
    settings.net = args.net.config()?;
    if let Some(shm) = shared_memory {
        settings.net.shared_memory_dir = Some(shm.to_path_buf());
    }
    let cfg = PsBenchConfig {
        bytes,
        iters,
        warmup: args.warmup,
        report_dir: Some(dir.clone()),
        no_read_my_writes: args.no_read_my_writes,
    };
    settings
        .app
        .insert(SECTION.into(), serde_json::to_value(&cfg)?);
    super::launch(settings, &dir)
        .await?
        .wait(Some(Duration::from_secs(args.timeout_s)))
        .await?;
    let report = |n: &String| -> Result<NodeReport, BenchError> {
        let path = dir.join(format!("{n}.json"));
        let text =
            std::fs::read_to_string(&path).map_err(BenchError::io(path.display().to_string()))?;
        Ok(serde_json::from_str(&text)?)
    };
    let reports = nodes
        .iter()
        .map(|(n, _)| report(n))
        .collect::<Result<Vec<_>, _>>()?;
    let _ = std::fs::remove_dir_all(&dir);
    let moved = 2.0 * bytes as f64 * f64::from(iters);
    let ws: Vec<&NodeReport> = reports.iter().filter(|r| !r.ps_iter_s.is_empty()).collect();
    // Every worker's iteration times of one kind, sorted.
    let sorted = |times: fn(&NodeReport) -> &Vec<f64>| {
        let mut all: Vec<f64> = ws.iter().flat_map(|r| times(r).iter().copied()).collect();
        all.sort_by(f64::total_cmp);
        all
    };
    let (lat, echo) = (sorted(|r| &r.ps_iter_s), sorted(|r| &r.echo_iter_s));
    // Summed over the workers.
    let mbps = |total_s: fn(&NodeReport) -> f64| -> f64 {
        ws.iter().map(|r| moved / total_s(r).max(1e-9) / 1e6).sum()
    };
    Ok(RunFigures {
        ps_mbps: mbps(|r| r.ps_total_s),
        p50_ms: percentile(&lat, 0.5) * 1e3,
        p99_ms: percentile(&lat, 0.99) * 1e3,
        push_p50_ms: upper_median(sorted(|r| &r.push_iter_s)) * 1e3,
        transport_mbps: mbps(|r| r.echo_total_s),
        transport_p50_ms: percentile(&echo, 0.5) * 1e3,
        rss_mb: reports.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max),
        shm_messages: reports.iter().map(|r| r.shm_messages).sum(),
    })
}

/// Figures of a peer run, or of one of its workers (a line it prints).
#[derive(Debug, Clone, Default, Deserialize)]
struct PeerFigures {
    mbps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn peer_run(
    cmd: &Path,
    bytes: usize,
    iters: u32,
    workers: u32,
    shards: u32,
) -> Result<PeerFigures, BenchError> {
    let child = tokio::process::Command::new(cmd)
        .args([
            bytes.to_string(),
            iters.to_string(),
            workers.to_string(),
            shards.to_string(),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(BenchError::io(format!("running {}", cmd.display())))?;
    let out = tokio::time::timeout(PEER_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            BenchError::Incomplete(format!(
                "{} gave no figures within {PEER_TIMEOUT:?}",
                cmd.display()
            ))
        })?
        .map_err(BenchError::io(format!("running {}", cmd.display())))?;
    let lines: Vec<PeerFigures> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect();
    if lines.len() != workers as usize {
        return Err(BenchError::Incomplete(format!(
            "{} printed {} figure lines for {workers} workers (status {})",
            cmd.display(),
            lines.len(),
            out.status
        )));
    }
    Ok(PeerFigures {
        mbps: lines.iter().map(|l| l.mbps).sum(),
        p50_ms: lines.iter().map(|l| l.p50_ms).fold(0.0, f64::max),
        p99_ms: lines.iter().map(|l| l.p99_ms).fold(0.0, f64::max),
    })
}

/// One iteration of 1 worker + 1 shard taken apart, without a network (milliseconds):
/// the client's push + clock, encoding the batch, decoding it, the shard applying it, the
/// shard serving the read (reply encoded), the client receiving it (cache hit included).
#[derive(Debug, Clone, Default, Serialize)]
struct IterationBreakdown {
    client_push_ms: f64,
    encode_ms: f64,
    decode_ms: f64,
    apply_ms: f64,
    reply_ms: f64,
    receive_ms: f64,
    total_ms: f64,
}

/// The header of a tell to shard 0.
fn tell_header() -> EnvelopeHeader {
    EnvelopeHeader {
        from: NodeId(1),
        to: NodeId(0),
        actor: "ps-shard-0".into(),
        msg_type: "petrel.ps.to_shard".into(),
        priority: Priority::NORMAL,
        kind: EnvelopeKind::Tell,
    }
}

/// Measures [`IterationBreakdown`] for a row of `bytes` (median of `iters`).
fn breakdown(
    bytes: usize,
    iters: u32,
    read_my_writes: bool,
) -> Result<IterationBreakdown, BenchError> {
    fn bad(e: impl std::fmt::Display) -> BenchError {
        BenchError::Incomplete(format!("breakdown: {e}"))
    }
    let (width, rows) = rows_for(bytes, 1).map_err(bad)?;
    let row = rows[0];
    let spec = table_for(width, read_my_writes);
    let mut client = ClientCore::new(WorkerId(0), 1, vec![spec.clone()]).map_err(bad)?;
    let mut shard = PsShardCore::new(1, vec![spec]).map_err(bad)?;
    let (max, tell) = (usize::MAX >> 1, tell_header());
    let mut samples: Vec<[f64; 6]> = Vec::new();
    for i in 0..iters + 1 {
        let t0 = Instant::now();
        let values = petrel_ps::Row::Dense(vec![DELTA; width as usize]);
        client.push(TABLE, row, values).map_err(bad)?;
        let batch = client.clock().pop().ok_or_else(|| bad("no batch"))?;
        let t1 = Instant::now();
        let frame = Frame::encode(&tell, &ToShard::Batch(batch)).map_err(bad)?;
        let t2 = Instant::now();
        let f = Frame::decode(frame, max).map_err(bad)?;
        let msg: ToShard = f.body.decode("to_shard").map_err(bad)?;
        drop(f);
        let t3 = Instant::now();
        let ToShard::Batch(b) = msg else {
            return Err(bad("not a batch"));
        };
        shard.handle_batch(&b).map_err(bad)?;
        drop(b);
        let t4 = Instant::now();
        let GetOutcome::Fetch(req) = client.get_shared(TABLE, row).map_err(bad)? else {
            return Err(bad("BSP read after a clock must fetch"));
        };
        let actions: Vec<ShardAction> = shard.handle_read(&req).map_err(bad)?;
        let reply = Frame::encode(&tell, &ToClient::Actions { shard: 0, actions }).map_err(bad)?;
        let t5 = Instant::now();
        let f = Frame::decode(reply, max).map_err(bad)?;
        let msg: ToClient = f.body.decode("to_client").map_err(bad)?;
        drop(f);
        let ToClient::Actions { actions, .. } = msg else {
            return Err(bad("not actions"));
        };
        for a in actions {
            client.handle(0, a).map_err(bad)?;
        }
        let GetOutcome::Hit(got) = client.get_shared(TABLE, row).map_err(bad)? else {
            return Err(bad("the reply did not fill the cache"));
        };
        drop(std::hint::black_box(got));
        let t = [t0, t1, t2, t3, t4, t5, Instant::now()];
        if i > 0 {
            samples.push(std::array::from_fn(|k| {
                (t[k + 1] - t[k]).as_secs_f64() * 1e3
            }));
        }
    }
    let col = |k: usize| upper_median(samples.iter().map(|s| s[k]).collect());
    Ok(IterationBreakdown {
        client_push_ms: col(0),
        encode_ms: col(1),
        decode_ms: col(2),
        apply_ms: col(3),
        reply_ms: col(4),
        receive_ms: col(5),
        total_ms: (0..6).map(col).sum(),
    })
}

/// One line of the JSON figures.
#[derive(Debug, Clone, Serialize)]
struct SizeFigures {
    bytes: usize,
    workers: u32,
    shards: u32,
    iters: u32,
    #[serde(flatten)]
    run: RunFigures,
    ps_over_transport: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_mbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ps_over_peer: Option<f64>,
    /// With `--shared-memory`: throughput and p50 through shared memory, over QUIC's.
    #[serde(skip_serializing_if = "Option::is_none")]
    shm_mbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shm_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shm_over_quic: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shm_messages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    breakdown: Option<IterationBreakdown>,
    /// p50 minus the in-process breakdown: sending, receiving and scheduling.
    #[serde(skip_serializing_if = "Option::is_none")]
    wire_ms: Option<f64>,
}

#[derive(Serialize)]
struct Figures {
    bench: &'static str,
    read_my_writes: bool,
    rounds: u32,
    sizes: Vec<SizeFigures>,
    /// ps_mbps of the largest size, 2x2 over 1x1 (when both ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    scaling_2x2_over_1x1: Option<f64>,
}

/// Runs the benchmark, prints the table and the JSON line.
pub fn run(args: PsBenchArgs) -> Result<(), BenchError> {
    args.net.config()?;
    if let Some(dir) = &args.shared_memory {
        std::fs::read_dir(dir).map_err(BenchError::io(dir.display().to_string()))?;
    }
    let topologies = args
        .topologies
        .iter()
        .map(|t| parse_topology(t))
        .collect::<Result<Vec<_>, _>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::io("tokio runtime"))?;
    let mut out = Vec::new();
    for &(workers, shards) in &topologies {
        for &bytes in &args.sizes {
            out.push(measure_size(&rt, &args, workers, shards, bytes)?);
        }
    }
    print_tables(&out);
    let largest = args.sizes.iter().copied().max().unwrap_or(0);
    let at = |w: u32, s: u32| {
        out.iter()
            .find(|f| f.bytes == largest && f.workers == w && f.shards == s)
            .map(|f| f.run.ps_mbps)
    };
    let scaling = at(2, 2).zip(at(1, 1)).map(|(a, b)| a / b.max(1e-9));
    Ok(print_json(&Figures {
        bench: "ps",
        read_my_writes: !args.no_read_my_writes,
        rounds: args.rounds.max(1),
        sizes: out,
        scaling_2x2_over_1x1: scaling,
    })?)
}

/// One topology and row size: every round's petrel run (and its shared-memory and peer
/// runs when asked), their medians, and the in-process breakdown for 1x1.
fn measure_size(
    rt: &tokio::runtime::Runtime,
    args: &PsBenchArgs,
    workers: u32,
    shards: u32,
    bytes: usize,
) -> Result<SizeFigures, BenchError> {
    let iters = ((args.bytes_per_phase / bytes.max(1)) as u32)
        .clamp(args.min_iters.max(1), args.max_iters.max(1));
    let mut runs = Vec::new();
    let mut shm_runs = Vec::new();
    let mut peers = Vec::new();
    for round in 0..args.rounds.max(1) {
        eprintln!(
            "ps bench: {workers} worker(s) x {shards} shard(s), {bytes} bytes, {iters} iterations, round {} ...",
            round + 1
        );
        let run = |shm| rt.block_on(petrel_run(bytes, workers, shards, iters, args, shm));
        runs.push(run(None)?);
        if let Some(dir) = &args.shared_memory {
            shm_runs.push(run(Some(dir))?);
        }
        if let Some(cmd) = &args.peer_cmd {
            match rt.block_on(peer_run(cmd, bytes, iters, workers, shards)) {
                Ok(p) => peers.push(p),
                // A failed peer run leaves its figures out; petrel's still count.
                Err(e) => eprintln!("ps bench: peer run failed: {e}"),
            }
        }
    }
    let run =
        RunFigures::median_of(&runs).ok_or_else(|| BenchError::Incomplete("no runs".into()))?;
    let shm = RunFigures::median_of(&shm_runs);
    let pm = |f: fn(&PeerFigures) -> f64| {
        (!peers.is_empty()).then(|| upper_median(peers.iter().map(f).collect()))
    };
    let (ps_mbps, peer_mbps, shm_mbps) =
        (run.ps_mbps, pm(|p| p.mbps), shm.as_ref().map(|r| r.ps_mbps));
    let bd = ((workers, shards) == (1, 1))
        .then(|| breakdown(bytes, iters.min(50), !args.no_read_my_writes))
        .transpose()?;
    Ok(SizeFigures {
        bytes,
        workers,
        shards,
        iters,
        ps_over_transport: ps_mbps / run.transport_mbps.max(1e-9),
        peer_mbps,
        peer_p50_ms: pm(|p| p.p50_ms),
        peer_p99_ms: pm(|p| p.p99_ms),
        ps_over_peer: peer_mbps.map(|p| ps_mbps / p.max(1e-9)),
        shm_mbps,
        shm_p50_ms: shm.as_ref().map(|r| r.p50_ms),
        shm_over_quic: shm_mbps.map(|s| s / ps_mbps.max(1e-9)),
        shm_messages: shm.map(|r| r.shm_messages),
        wire_ms: bd.as_ref().map(|b| (run.p50_ms - b.total_ms).max(0.0)),
        breakdown: bd,
        run,
    })
}

/// The figures' table, then the 1x1 breakdown's.
fn print_tables(out: &[SizeFigures]) {
    let keys = "workers shards bytes ps_mbps p50_ms p99_ms transport_mbps ps_over_transport \
                peer_mbps ps_over_peer shm_mbps shm_over_quic rss_mb";
    crate::common::json_table(out, keys).print();
    println!("one 1x1 iteration taken apart (ms, in-process, no network):");
    let keys = "bytes breakdown/client_push_ms breakdown/encode_ms breakdown/decode_ms \
                breakdown/apply_ms breakdown/reply_ms breakdown/receive_ms breakdown/total_ms \
                p50_ms wire_ms";
    crate::common::json_table(out.iter().filter(|s| s.breakdown.is_some()), keys).print();
}

#[cfg(test)]
mod tests;
