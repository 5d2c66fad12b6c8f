// Over 600 lines: three propagation modes, the emulated compute profile and the link shaping share one run.
//! `petrel bench p3`: sequential vs fifo vs p3 parameter propagation side by side on an
//! in-process cluster (2 workers + 2 shards by default, each node its own QUIC endpoint on
//! 127.0.0.1) with every node's link shaped. Compute is emulated (the profiled time of
//! every layer at a set device speed); gradients and parameters are real buffers.

use crate::scale::write_plot;
use petrel::CliError;
use petrel::netns::{Hosts, LinkShape};
use petrel::report::{fmt, print_json, save_json};
use petrel::train::p3::processes;
use petrel::train::plot::Series;
use petrel_ml::dnn::FlatSgdMomentum;
use petrel_net::{NetConfig, ShaperConfig};
use petrel_p3::roles::{P3Settings, WorkerReportFile, load_profile};
use petrel_p3::{
    Bounds, CostModel, EmulatedModel, Mode, ModelProfile, P3Job, auto_slice_size,
    ideal_iteration_s, run_cluster,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `petrel bench p3` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct P3BenchArgs {
    /// vgg19, resnet50, sockeye, or a profile file (.toml / .json, see the README).
    #[arg(long, default_value = "vgg19")]
    pub model: String,
    /// Factor applied to parameter counts and FLOPs (default: shrink the model to
    /// --model-mb of f32 parameters). C/M at a given bandwidth and device does not change.
    #[arg(long)]
    pub scale: Option<f64>,
    /// Size of the scaled model in MB, when --scale is not given.
    #[arg(long, default_value_t = 3.0)]
    pub model_mb: f64,
    /// Samples per worker per iteration.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Emulated device speed in GFLOP/s applied to the *scaled* profile (default: the speed
    /// at which one iteration's compute takes --compute-ms).
    #[arg(long)]
    pub device_gflops: Option<f64>,
    /// Target compute time C per iteration in ms, when --device-gflops is not given.
    #[arg(long, default_value_t = 300.0)]
    pub compute_ms: f64,
    /// Link bandwidths in Mbit/s (comma-separated for a sweep). Default: the bandwidth at
    /// which one full model transfer takes as long as one iteration's compute (M = C).
    #[arg(long, value_delimiter = ',')]
    pub bandwidth: Vec<f64>,
    /// Parameters per slice in p3 mode; 0 = automatic (the size with the lowest simulated
    /// iteration time at the first bandwidth, given --slice-overhead-us).
    #[arg(long, default_value_t = 8192)]
    pub slice_size: u64,
    /// Per-slice cost assumed by the automatic slice size, in microseconds.
    #[arg(long, default_value_t = 100.0)]
    pub slice_overhead_us: f64,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Measured iterations per mode (after the warm-up).
    #[arg(long, default_value_t = 8)]
    pub iterations: u64,
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Also limit every node's ingress (default: egress only).
    #[arg(long)]
    pub shape_ingress: bool,
    /// Keep QUIC's round-robin among equal-priority streams (default: FIFO on the wire, so
    /// the slices of a layer complete one after another and pipeline through the shards).
    #[arg(long)]
    pub fair_queuing: bool,
    /// Credit: bytes a node may have in flight per peer, in KiB; the rest waits in the
    /// node's priority outbox. 0 = automatic (`default_credit_bytes`).
    #[arg(long, default_value_t = 0)]
    pub credit_kib: usize,
    /// QUIC congestion controller: cubic, bbr or newreno.
    #[arg(long, value_enum, default_value = "cubic")]
    pub congestion: petrel_net::Congestion,
    /// Shaper token-bucket depth in KiB (0 = the transport's default).
    #[arg(long, default_value_t = 64)]
    pub burst_kib: u64,
    /// Modes to run (default all three; the JSON needs all three for the speedups).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Mode::ALL)]
    pub modes: Vec<Mode>,
    /// Run every node as its own `petrel node` process in its own network namespace, the
    /// links limited by `tc tbf` in the kernel (needs root and iproute2); the user-space
    /// shaper is off (so --shape-ingress and --burst-kib do not apply: tbf limits both
    /// directions of every link).
    #[arg(long)]
    pub netns: bool,
    /// With --netns: the nodes' UDP send buffer (`socket_send_buffer_bytes`) in KiB; 0 = the
    /// kernel's default. Below the `tbf` queue, or QUIC overfills the qdisc.
    #[arg(long, default_value_t = 128)]
    pub netns_send_buffer_kib: usize,
    /// With --netns: the `tbf` queue of every link in ms of its rate (`latency`).
    #[arg(long, default_value_t = 50.0)]
    pub netns_queue_ms: f64,
    /// Measured iterations of the transfer probe (compute taken out) that measures the
    /// link's goodput; the probe's figure is the slowest worker's median iteration.
    #[arg(long, default_value_t = 16)]
    pub probe_iterations: u64,
    /// With --netns: stop a mode's cluster after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub netns_timeout_s: u64,
    /// Where to write the throughput-vs-bandwidth SVG.
    #[arg(long, default_value = "p3_bandwidth.svg")]
    pub plot: PathBuf,
    /// Where the JSON figures are also written (for `petrel bench report`).
    #[arg(long, default_value = "target/bench/p3.json")]
    pub json_out: PathBuf,
}

#[derive(Serialize, Clone)]
struct ModeResult {
    mode: &'static str,
    secs_per_iter: f64,
    samples_per_s: f64,
    efficiency: f64,
    cpu_cores: f64,
    /// With --netns: packets the `tbf` qdiscs dropped during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    qdisc_drops: Option<u64>,
}

/// One bandwidth's bounds, goodput and ideal pipeline.
#[derive(Serialize, Clone)]
struct AtBandwidth {
    bandwidth_mbit: f64,
    compute_s: f64,
    comm_s: f64,
    c_plus_m_s: f64,
    bound_s: f64,
    /// The link's goodput ([`probe_goodput`]), Mbit/s.
    goodput_mbit: f64,
    goodput_source: &'static str,
    /// The transfer probe's iteration (slowest worker's median).
    probe_s: f64,
    /// The ideal pipeline's iteration at the goodput ([`ideal_iteration_s`]).
    ideal_s: f64,
    ideal_nominal_s: f64,
}

#[derive(Serialize, Clone)]
struct Point {
    #[serde(flatten)]
    at: AtBandwidth,
    #[serde(skip_serializing_if = "Option::is_none")]
    probe_qdisc_drops: Option<u64>,
    modes: Vec<ModeResult>,
}

/// The link's goodput (bytes/s, at most the nominal rate), the probe's iteration and its
/// run: p3 mode with compute taken out, so an iteration is one model's push and pull.
fn probe_goodput(
    args: &P3BenchArgs,
    setup: &Setup,
    bandwidth_mbit: f64,
    hosts: Option<&Hosts>,
) -> Result<(f64, f64, ModeRun), CliError> {
    let transfer_only = Setup {
        profile: setup.profile.clone(),
        device_flops: 1e18,
        ..*setup
    };
    let probe_args = P3BenchArgs {
        iterations: args.probe_iterations.max(1),
        ..args.clone()
    };
    let run = run_mode(&probe_args, &transfer_only, Mode::P3, bandwidth_mbit, hosts)?;
    let median = |r: &WorkerReportFile, skip| median_iteration_s(&r.marks_s, skip);
    let probe_s = slowest(&run.reports, args.warmup as usize, median)?;
    let cost = setup.cost(bandwidth_mbit, args.workers);
    let nominal_wire_s = cost.wire_seconds(setup.profile.total_params());
    let goodput = if probe_s.is_finite() && probe_s > 0.0 {
        (cost.bandwidth_bytes_per_s * nominal_wire_s / probe_s).min(cost.bandwidth_bytes_per_s)
    } else {
        cost.bandwidth_bytes_per_s
    };
    Ok((goodput, probe_s, run))
}

/// The median duration of iterations `skip..` from a worker's iteration marks.
fn median_iteration_s(marks_s: &[f64], skip: usize) -> Option<f64> {
    let d: Vec<f64> = marks_s.windows(2).skip(skip).map(|w| w[1] - w[0]).collect();
    crate::common::median(&d)
}

/// What one mode's cluster measured.
struct ModeRun {
    reports: Vec<WorkerReportFile>,
    cpu: f64,
    qdisc_drops: Option<u64>,
}

/// The slowest worker's figure by `stat` over iterations `skip..`.
pub(crate) fn slowest(
    reports: &[WorkerReportFile],
    skip: usize,
    stat: impl Fn(&WorkerReportFile, usize) -> Option<f64>,
) -> Result<f64, CliError> {
    reports.iter().try_fold(0.0f64, |worst, r| {
        Ok(worst.max(stat(r, skip).ok_or(CliError::NoMeasuredIterations)?))
    })
}

#[derive(Serialize)]
struct Figures {
    bench: &'static str,
    /// "user-space-shaper" or "netns-tc".
    links: &'static str,
    model: String,
    scale: f64,
    params: u64,
    workers: usize,
    shards: usize,
    batch: usize,
    slice_size: u64,
    credit_bytes: usize,
    device_gflops: f64,
    #[serde(flatten)]
    first: AtBandwidth,
    sequential_s: f64,
    fifo_s: f64,
    p3_s: f64,
    speedup_vs_sequential: f64,
    speedup_vs_fifo: f64,
    p3_over_bound: f64,
    p3_over_ideal: f64,
    p3_efficiency: f64,
    max_cpu_cores: f64,
    available_cores: usize,
    sweep: Vec<Point>,
}

struct Setup {
    profile: ModelProfile,
    scale: f64,
    device_flops: f64,
    batch: usize,
}

impl Setup {
    fn cost(&self, bandwidth_mbit: f64, workers: usize) -> CostModel {
        CostModel::new(
            self.device_flops,
            self.batch,
            bandwidth_mbit * 1e6 / 8.0,
            workers,
        )
    }
}

fn run_mode(
    args: &P3BenchArgs,
    setup: &Setup,
    mode: Mode,
    bandwidth_mbit: f64,
    hosts: Option<&Hosts>,
) -> Result<ModeRun, CliError> {
    let counts: Vec<u64> = setup.profile.layers.iter().map(|l| l.params).collect();
    let mut shaper = ShaperConfig::mbit(bandwidth_mbit);
    if !args.shape_ingress {
        shaper.ingress_bytes_per_s = 0;
    }
    shaper.burst_bytes = args.burst_kib * 1024;
    let net = NetConfig {
        shaper: Some(shaper),
        send_fairness: args.fair_queuing,
        congestion: args.congestion,
        outbox_inflight_bytes: credit_bytes(args),
        ..NetConfig::default()
    };
    if let Some(hosts) = hosts {
        let dir = netns_run_dir().join(format!("{}-{bandwidth_mbit:.1}mbit", mode.name()));
        let cfg = P3Settings {
            mode,
            model: args.model.clone(),
            scale: setup.scale,
            device_gflops: setup.device_flops / 1e9,
            batch: setup.batch,
            slice_size: args.slice_size,
            workers: args.workers,
            shards: args.shards,
            iterations: args.warmup + args.iterations,
            lr: 0.01,
            momentum: 0.9,
            ask_timeout_ms: 120_000,
            report_dir: dir.join("reports"),
            ..P3Settings::default()
        };
        let net = NetConfig {
            socket_send_buffer_bytes: Some(args.netns_send_buffer_kib * 1024),
            ..net
        };
        let limit = Duration::from_secs(args.netns_timeout_s);
        let drops0 = hosts.qdisc_drops().ok();
        let (reports, cpu) = processes::run_job(Some(hosts), &cfg, &net, &dir, limit)?;
        let drops = (drops0.zip(hosts.qdisc_drops().ok())).map(|(a, b)| b.saturating_sub(a));
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(ModeRun {
            reports,
            cpu,
            qdisc_drops: drops,
        });
    }
    let job = P3Job {
        mode,
        slice_size: args.slice_size,
        n_workers: args.workers,
        n_shards: args.shards,
        iterations: args.warmup + args.iterations,
        opt: FlatSgdMomentum::new(0.01, 0.9),
        initial: Arc::new(counts.iter().map(|&c| vec![0.5; c as usize]).collect()),
        net,
        transport: petrel_actors::Transport::Quic,
        ask_timeout: Duration::from_secs(120),
        checkpoint: None,
    };
    let profile = setup.profile.clone();
    let (device, batch) = (setup.device_flops, setup.batch);
    let factory = move |_| Ok(EmulatedModel::new(&profile, device, batch));
    let cpu0 = petrel_observe::process::read().map(|p| p.cpu_s);
    let t0 = Instant::now();
    let reports = run_cluster(&job, factory, None)?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, petrel_observe::process::read().map(|p| p.cpu_s)) {
        (Some(a), Some(b)) => (b - a) / wall.max(1e-9),
        _ => f64::NAN,
    };
    Ok(ModeRun {
        reports: reports
            .iter()
            .map(|r| WorkerReportFile::new(r, mode))
            .collect(),
        cpu,
        qdisc_drops: None,
    })
}

/// `--credit-kib`, or [`default_credit_bytes`].
fn credit_bytes(args: &P3BenchArgs) -> usize {
    match args.credit_kib {
        0 => default_credit_bytes(args.slice_size, args.netns),
        kib => kib * 1024,
    }
}

/// In process: two slices per peer, at least 16 KiB, so the order stays in the node's
/// priority outbox (the shaper keeps QUIC's congestion window from bounding what is in
/// flight). Across namespaces congestion control does, so the transport default stays.
fn default_credit_bytes(slice_params: u64, netns: bool) -> usize {
    if netns {
        return NetConfig::default().outbox_inflight_bytes;
    }
    let slice_bytes = usize::try_from(slice_params.saturating_mul(4)).unwrap_or(usize::MAX);
    slice_bytes.saturating_mul(2).max(16 * 1024)
}

/// Where `--netns` runs keep their files (a failed mode's stay).
fn netns_run_dir() -> PathBuf {
    std::env::temp_dir().join(format!("petrel-p3-netns-{}", std::process::id()))
}

/// Samples/s against the link bandwidth, one line per mode (a failure only warns).
fn plot(path: &Path, points: &[Point]) {
    let series: Vec<Series> = Mode::ALL
        .iter()
        .map(|mode| Series {
            name: mode.name().into(),
            points: points
                .iter()
                .filter_map(|p| {
                    let m = p.modes.iter().find(|m| m.mode == mode.name())?;
                    Some((p.at.bandwidth_mbit, m.samples_per_s))
                })
                .collect(),
        })
        .collect();
    let (title, x) = (
        "P3 bench: throughput vs bandwidth",
        "link bandwidth (Mbit/s)",
    );
    if let Err(e) = write_plot(path, title, x, "samples/s (all workers)", &series, false) {
        tracing::warn!(error = %e, path = %path.display(), "cannot write plot");
    }
}

/// Runs the bench and prints its table, plot and JSON figures.
pub fn run(mut args: P3BenchArgs) -> Result<(), CliError> {
    validate(&args)?;
    let full = load_profile(&args.model)?;
    let setup = setup_for(&args, &full)?;
    let probe = setup.cost(1000.0, args.workers);
    let balanced_mbit = Bounds::balanced_bandwidth(&setup.profile, &probe) * 8.0 / 1e6;
    let bandwidths = if args.bandwidth.is_empty() {
        vec![balanced_mbit]
    } else {
        args.bandwidth.clone()
    };
    if bandwidths.iter().any(|b| !(b.is_finite() && *b > 0.0)) {
        return bad("--bandwidth values must be positive".into());
    }
    if args.slice_size == 0 {
        args.slice_size = auto_slice(&args, &setup, bandwidths[0])?;
    }
    print_setup(&args, &full, &setup);
    println!("balanced bandwidth (M = C): {:.1} Mbit/s", balanced_mbit);
    let points = (bandwidths.iter())
        .map(|&bw| measure_bandwidth(&args, &setup, bw))
        .collect::<Result<Vec<_>, _>>()?;
    if args.netns {
        // Succeeds only when every mode's directory is gone (all runs succeeded).
        let _ = std::fs::remove_dir(netns_run_dir());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max_cpu = points
        .iter()
        .flat_map(|p| p.modes.iter().map(|m| m.cpu_cores))
        .fold(0.0, f64::max);
    let bound = match max_cpu > 0.8 * cores as f64 {
        true => " -- CPU-BOUND: the figures are not a network result",
        false => "",
    };
    println!(
        "\nCPU: the cluster used at most {max_cpu:.2} of {cores} cores (CPU time of its \
         process(es) / wall time per run){bound}"
    );
    plot(&args.plot, &points);
    let point = points.first().ok_or(CliError::NoBandwidthPoint)?;
    let first = &point.at;
    let get = |name: &str| point.modes.iter().find(|m| m.mode == name);
    let secs = |name| get(name).map_or(f64::NAN, |m| m.secs_per_iter);
    let (seq, fifo, p3) = (secs("sequential"), secs("fifo"), secs("p3"));
    // The first bandwidth's figures in full, and the whole sweep.
    let figures = Figures {
        bench: "p3",
        links: if args.netns {
            "netns-tc"
        } else {
            "user-space-shaper"
        },
        model: full.name.clone(),
        scale: setup.scale,
        params: setup.profile.total_params(),
        workers: args.workers,
        shards: args.shards,
        batch: args.batch,
        slice_size: args.slice_size,
        credit_bytes: credit_bytes(&args),
        device_gflops: setup.device_flops / 1e9,
        first: first.clone(),
        sequential_s: seq,
        fifo_s: fifo,
        p3_s: p3,
        speedup_vs_sequential: seq / p3,
        speedup_vs_fifo: fifo / p3,
        p3_over_bound: p3 / first.bound_s,
        p3_over_ideal: p3 / first.ideal_s,
        p3_efficiency: get("p3").map_or(f64::NAN, |m| m.efficiency),
        max_cpu_cores: max_cpu,
        available_cores: cores,
        sweep: points.clone(),
    };
    if let Err(e) = save_json(&args.json_out, &figures) {
        tracing::warn!(error = %e, path = %args.json_out.display(), "cannot write the figures");
    }
    print_json(&figures).map_err(CliError::JsonOutput)
}

/// A usage error.
fn bad<T>(m: String) -> Result<T, CliError> {
    Err(CliError::Args(m))
}

fn validate(args: &P3BenchArgs) -> Result<(), CliError> {
    if args.workers < 2 || args.shards < 1 || args.iterations == 0 || args.batch == 0 {
        return bad("need --workers >= 2, --shards >= 1, --iterations >= 1, --batch >= 1".into());
    }
    if !(args.netns_queue_ms.is_finite() && args.netns_queue_ms > 0.0) {
        return bad(format!(
            "--netns-queue-ms must be positive, got {}",
            args.netns_queue_ms
        ));
    }
    if args.netns {
        petrel::netns::available().map_err(CliError::NetnsUnavailable)?;
    }
    Ok(())
}

/// The model scaled (`--scale` or `--model-mb`) and the device's speed (`--device-gflops`
/// or `--compute-ms`).
fn setup_for(args: &P3BenchArgs, full: &ModelProfile) -> Result<Setup, CliError> {
    let full_params = full.total_params();
    if full_params == 0 {
        return bad(format!("model {} has no parameters", args.model));
    }
    let scale = match args.scale {
        Some(s) if s.is_finite() && s > 0.0 => s,
        Some(s) => return bad(format!("--scale must be positive, got {s}")),
        None => (args.model_mb * 1e6 / 4.0 / full_params as f64).min(1.0),
    };
    let profile = full.scaled(scale);
    let flops_per_iter =
        (profile.total_fwd_flops() + profile.total_bwd_flops()) * args.batch as f64;
    let device_flops = match args.device_gflops {
        Some(g) if g > 0.0 => g * 1e9,
        Some(g) => return bad(format!("--device-gflops must be positive, got {g}")),
        None if flops_per_iter > 0.0 => flops_per_iter / (args.compute_ms / 1e3),
        None => 1e12,
    };
    Ok(Setup {
        profile,
        scale,
        device_flops,
        batch: args.batch,
    })
}

/// The slice size the simulator finds fastest at `bandwidth_mbit` (`--slice-size 0`).
fn auto_slice(args: &P3BenchArgs, setup: &Setup, bandwidth_mbit: f64) -> Result<u64, CliError> {
    let mut cost = setup.cost(bandwidth_mbit, args.workers);
    cost.per_slice_overhead_s = args.slice_overhead_us.max(0.0) * 1e-6;
    let candidates: Vec<u64> = (10..=17).map(|k| 1u64 << k).collect();
    let (size, t) = auto_slice_size(&setup.profile, &cost, &candidates, 4)?;
    println!(
        "automatic slice size: {size} params (simulated {} s/iteration at {:.1} Mbit/s, \
         {} us per slice)",
        fmt(t),
        bandwidth_mbit,
        args.slice_overhead_us
    );
    Ok(size)
}

/// The bench's opening line: the model, the cluster, the links and the device.
fn print_setup(args: &P3BenchArgs, full: &ModelProfile, setup: &Setup) {
    let params = setup.profile.total_params();
    let measured = if setup.profile.layers.iter().any(|l| l.measured.is_some()) {
        " (measured layer times, scaled)"
    } else {
        ""
    };
    let links = match (args.netns, args.shape_ingress) {
        (true, _) => {
            "as node processes in network namespaces, each link limited by tc tbf both ways"
        }
        (false, false) => "in-process over QUIC on 127.0.0.1, per-node egress shaper",
        (false, true) => "in-process over QUIC on 127.0.0.1, per-node egress shaper + ingress",
    };
    println!(
        "P3 bench: {} scaled x{:.5} -> {params} params ({:.2} MB), {} layers{measured}; {} workers + \
         {} shards {links}; batch {}/worker, emulated device {:.1} GFLOP/s (= {:.1} TFLOP/s on \
         the full model), slice {} params, credit {} KiB per peer",
        full.name,
        setup.scale,
        params as f64 * 4e-6,
        setup.profile.layers.len(),
        args.workers,
        args.shards,
        args.batch,
        setup.device_flops / 1e9,
        setup.device_flops / setup.scale / 1e12,
        args.slice_size,
        credit_bytes(args) / 1024,
    );
}

/// Every chosen mode and the transfer probe at `bw` Mbit/s; prints the bounds and table.
fn measure_bandwidth(args: &P3BenchArgs, setup: &Setup, bw: f64) -> Result<Point, CliError> {
    let b = Bounds::compute(&setup.profile, &setup.cost(bw, args.workers));
    let shape = LinkShape {
        rate_mbit: Some(bw),
        delay_ms: None,
        queue_ms: Some(args.netns_queue_ms),
    };
    let hosts = (args.netns)
        .then(|| Hosts::up(&processes::prefix(), args.workers + args.shards, &shape))
        .transpose()
        .map_err(CliError::Namespaces)?
        .map(processes::Teardown);
    let mut modes = Vec::new();
    for mode in Mode::ALL.into_iter().filter(|m| args.modes.contains(m)) {
        let run = run_mode(args, setup, mode, bw, hosts.as_ref().map(|h| &h.0))?;
        let t = slowest(
            &run.reports,
            args.warmup as usize,
            WorkerReportFile::secs_per_iter,
        )?;
        tracing::info!(
            mode = mode.name(),
            bandwidth_mbit = bw,
            secs_per_iter = t,
            "p3 bench"
        );
        modes.push(ModeResult {
            mode: mode.name(),
            secs_per_iter: t,
            samples_per_s: (args.workers * args.batch) as f64 / t,
            efficiency: b.efficiency(t),
            cpu_cores: run.cpu,
            qdisc_drops: run.qdisc_drops,
        });
    }
    let cost = setup.cost(bw, args.workers);
    let (goodput, probe_s, probe) = probe_goodput(args, setup, bw, hosts.as_ref().map(|h| &h.0))?;
    let goodput_source = "transfer probe (median iteration)";
    tracing::info!(bandwidth_mbit = bw, probe_s, "p3 bench transfer probe");
    let ideal_nominal_s = ideal_iteration_s(&setup.profile, &cost);
    let ideal_s = ideal_iteration_s(
        &setup.profile,
        &CostModel {
            bandwidth_bytes_per_s: goodput,
            ..cost
        },
    );
    let point = Point {
        at: AtBandwidth {
            bandwidth_mbit: bw,
            compute_s: b.compute_s,
            comm_s: b.comm_s,
            c_plus_m_s: b.no_overlap_s,
            bound_s: b.optimal_s,
            goodput_mbit: goodput * 8.0 / 1e6,
            goodput_source,
            probe_s,
            ideal_s,
            ideal_nominal_s,
        },
        probe_qdisc_drops: probe.qdisc_drops,
        modes,
    };
    print_point(args, &b, &point);
    Ok(point)
}

/// One bandwidth's bounds, goodput and ideal pipeline, then its table of modes.
fn print_point(args: &P3BenchArgs, b: &Bounds, point: &Point) {
    println!(
        "\nbandwidth {:.1} Mbit/s: C = {} s (fwd {} + bwd {}), M = {} s, C+M = {} s, \
         max(C,M) = {} s, T_fwd + max(T_bwd, M) = {} s",
        point.at.bandwidth_mbit,
        fmt(b.compute_s),
        fmt(b.fwd_s),
        fmt(b.bwd_s),
        fmt(b.comm_s),
        fmt(b.no_overlap_s),
        fmt(b.optimal_s),
        fmt(b.wait_free_s)
    );
    println!(
        "goodput {:.1} Mbit/s ({}: {} s over {} iterations{}); ideal \
         pipeline (fluid, infinitely fine slices) at the goodput: {} s, at the nominal \
         rate: {} s",
        point.at.goodput_mbit,
        point.at.goodput_source,
        fmt(point.at.probe_s),
        args.probe_iterations,
        point
            .probe_qdisc_drops
            .map_or(String::new(), |d| format!(", {d} qdisc drops")),
        fmt(point.at.ideal_s),
        fmt(point.at.ideal_nominal_s)
    );
    let rows = point.modes.iter().map(|m| {
        let mut row = serde_json::to_value(m).unwrap_or_default();
        row["over_c_plus_m"] = (m.secs_per_iter / b.no_overlap_s).into();
        row["over_max_c_m"] = (m.secs_per_iter / b.optimal_s).into();
        row["over_ideal"] = (m.secs_per_iter / point.at.ideal_s).into();
        row
    });
    let keys = "mode secs_per_iter samples_per_s over_c_plus_m over_max_c_m over_ideal efficiency \
                cpu_cores qdisc_drops";
    crate::common::json_table(rows, keys).print();
}

#[cfg(test)]
mod tests;
