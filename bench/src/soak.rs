//! `petrel bench soak`: a multi-process cluster under sustained load for a fixed time,
//! sampling every node's resident memory. The workload is the demo job (workers averaging
//! tensors through an aggregator), which exercises messaging end to end.

use super::BenchError;
use indicatif::{ProgressBar, ProgressStyle};
use petrel::report::print_json;
use petrel_actors::Settings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `petrel bench soak` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct SoakBenchArgs {
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 180.0)]
    pub duration_s: f64,
    /// Seconds of warm-up before the reference memory sample (allocator pools, flow-control
    /// windows and connection state settle in the first minute).
    #[arg(long, default_value_t = 60.0)]
    pub warmup_s: f64,
    /// Worker processes (plus one aggregator).
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Floats per contribution.
    #[arg(long, default_value_t = 65536)]
    pub tensor_len: usize,
    /// Seconds between memory samples.
    #[arg(long, default_value_t = 1.0)]
    pub sample_s: f64,
}

/// Resident set size of a process in MB, from /proc.
fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[derive(Serialize)]
struct Figures {
    duration_s: f64,
    messages: u64,
    errors: u64,
    #[serde(flatten)]
    rss: RssFigures,
    rss_growth_after_warmup: f64,
    /// Least-squares slope of the total RSS after warm-up, MB/minute (near zero: levelled).
    rss_slope_after_warmup_mb_per_min: f64,
    nodes: usize,
    samples_csv: String,
}

/// Least-squares slope of `y` over `t`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mt, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (t, y)| (a + t / n, b + y / n));
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (t, y)| {
        (num + (t - mt) * (y - my), den + (t - mt) * (t - mt))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

/// Runs the soak, prints the table and the JSON line; fails if the cluster failed.
pub fn run(args: SoakBenchArgs) -> Result<(), BenchError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(BenchError::io("tokio runtime"))?;
    rt.block_on(soak(args))
}

async fn soak(args: SoakBenchArgs) -> Result<(), BenchError> {
    let run_dir = std::env::temp_dir().join(format!("petrel-soak-{}", std::process::id()));
    let running = super::launch(settings_for(&args, &run_dir), &run_dir).await?;
    let pids = running.pids();
    let bar = ProgressBar::new(args.duration_s as u64);
    bar.set_style(
        ProgressStyle::with_template("soak {bar:30} {pos}/{len} s  rss {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut samples: Samples = Vec::new();
    let sample_every = Duration::from_secs_f64(args.sample_s.max(0.1));
    let waiter = tokio::spawn(running.wait(Some(Duration::from_secs_f64(args.duration_s + 120.0))));
    while !waiter.is_finished() {
        let per_node: BTreeMap<String, f64> = pids
            .iter()
            .filter_map(|(n, pid)| rss_mb(*pid).map(|r| (n.clone(), r)))
            .collect();
        if per_node.len() == pids.len() {
            let total: f64 = per_node.values().sum();
            bar.set_position(started.elapsed().as_secs());
            bar.set_message(format!("{total:.1} MB"));
            samples.push((started.elapsed().as_secs_f64(), per_node));
        }
        tokio::time::sleep(sample_every).await;
    }
    bar.finish_and_clear();
    let outcome = waiter
        .await
        .map_err(|_| BenchError::Incomplete("the launcher task failed".into()))?;
    let mut errors = u64::from(outcome.is_err());
    if let Err(e) = &outcome {
        tracing::error!(error = %petrel_actors::error_chain(e), "soak cluster failed");
    }
    let (messages, report_errors) = worker_reports(&args, &run_dir);
    errors += report_errors;
    let total = |s: &BTreeMap<String, f64>| Some(s.values().sum::<f64>());
    let all = rss_figures(&args, &samples, total);
    let after_warmup: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(t, _)| *t >= args.warmup_s && *t <= args.duration_s)
        .map(|(t, s)| (*t, s.values().sum()))
        .collect();
    let csv_path = run_dir.join("rss.csv");
    write_csv(&csv_path, &samples)?;
    let node = |name: &str, f: &RssFigures| {
        let mut row = serde_json::to_value(f).unwrap_or_default();
        row["node"] = name.into();
        row
    };
    let mut rows: Vec<serde_json::Value> = (pids.iter())
        .map(|(name, _)| {
            node(
                name,
                &rss_figures(&args, &samples, |m| m.get(name).copied()),
            )
        })
        .collect();
    rows.push(node("all", &all));
    let keys = "node rss_start_mb rss_after_warmup_mb rss_end_mb rss_max_mb";
    crate::common::json_table(&rows, keys).print();
    println!(
        "messages {messages}, errors {errors}, {} samples",
        samples.len()
    );
    let (warm, end) = (all.rss_after_warmup_mb, all.rss_end_mb);
    print_json(&Figures {
        duration_s: args.duration_s,
        messages,
        errors,
        rss_growth_after_warmup: warm
            .zip(end)
            .filter(|w| w.0 > 0.0)
            .map_or(0.0, |(w, e)| e / w - 1.0),
        rss: all,
        rss_slope_after_warmup_mb_per_min: slope(&after_warmup) * 60.0,
        nodes: pids.len(),
        samples_csv: csv_path.display().to_string(),
    })?;
    Ok(outcome.map(|_| ())?)
}

/// Resident memory samples: seconds since the start, and each node's MB.
type Samples = Vec<(f64, BTreeMap<String, f64>)>;

/// A demo aggregator `hub` and `--workers` demo workers reporting into `run_dir`.
fn settings_for(args: &SoakBenchArgs, run_dir: &std::path::Path) -> Settings {
    let workers = (1..=args.workers.max(1)).map(|i| (format!("w{i}"), "demo-worker"));
    let mut settings = super::local_settings(
        "soak",
        std::iter::once(("hub".to_string(), "demo-aggregator")).chain(workers),
    );
    settings.app.insert(
        "demo".into(),
        serde_json::json!({
            "rounds": u32::MAX,
            "tensor_len": args.tensor_len,
            "duration_s": args.duration_s,
            "report_dir": run_dir,
        }),
    );
    settings
}

/// Messages the workers exchanged and the errors they counted, from their reports (a
/// missing or unreadable report is one error).
fn worker_reports(args: &SoakBenchArgs, run_dir: &std::path::Path) -> (u64, u64) {
    let (mut messages, mut errors) = (0u64, 0u64);
    for i in 1..=args.workers.max(1) {
        let path = run_dir.join(format!("w{i}.json"));
        match std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<petrel::demo::DemoWorkerReport>(&t).ok())
        {
            Some(r) => {
                // Each round is one contribution and its reply.
                messages += 2 * u64::from(r.rounds);
                errors += r.net.malformed_frames
                    + r.net.oversize_frames
                    + r.net.truncated_streams
                    + r.net.send_failures;
            }
            None => errors += 1,
        }
    }
    (messages, errors)
}

/// Every sample of every node, one CSV line each.
fn write_csv(path: &std::path::Path, samples: &Samples) -> Result<(), BenchError> {
    let mut csv = String::from("seconds,node,rss_mb\n");
    for (t, per_node) in samples {
        for (name, mb) in per_node {
            csv.push_str(&format!("{t:.1},{name},{mb:.3}\n"));
        }
    }
    std::fs::write(path, csv).map_err(BenchError::io(path.display().to_string()))
}

/// One node's or all nodes' memory (`mb` of a sample, MB) at the start, after the warm-up
/// (or the last sample), at the end of the load and at its peak.
#[derive(Serialize)]
struct RssFigures {
    rss_start_mb: Option<f64>,
    rss_after_warmup_mb: Option<f64>,
    rss_end_mb: Option<f64>,
    rss_max_mb: f64,
}

fn rss_figures(
    args: &SoakBenchArgs,
    samples: &Samples,
    mb: impl Fn(&BTreeMap<String, f64>) -> Option<f64>,
) -> RssFigures {
    let at = |s: Option<&(f64, BTreeMap<String, f64>)>| s.and_then(|(_, m)| mb(m));
    let warm = samples.iter().find(|(t, _)| *t >= args.warmup_s);
    RssFigures {
        rss_start_mb: at(samples.first()),
        rss_after_warmup_mb: at(warm.or(samples.last())),
        rss_end_mb: at(samples.iter().rev().find(|(t, _)| *t <= args.duration_s)),
        rss_max_mb: samples
            .iter()
            .filter_map(|(_, m)| mb(m))
            .fold(0.0, f64::max),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slope_of_a_line() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 + 2.0 * i as f64)).collect();
        assert!((super::slope(&pts) - 2.0).abs() < 1e-9);
        assert_eq!(super::slope(&[(1.0, 1.0)]), 0.0);
    }
}
