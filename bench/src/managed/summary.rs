//! A run's figures from an app's metrics, and each variant's medians over the repeats of
//! `bench managed`.

use super::{ManagedBenchArgs, ManagedRun};
use crate::common::median;
use petrel_ps::{PsLdaMetrics, PsMfResult};
use serde::Serialize;
use std::collections::BTreeMap;

/// One variant's medians over the repeats.
#[derive(Default, Debug, Clone, Serialize, PartialEq)]
pub struct VariantSummary {
    pub variant: String,
    /// Repeats that reached the target, of `repeats`.
    pub reached: usize,
    /// Median time to target (a repeat that missed it counts as slower than all others;
    /// `None` when half or more missed it).
    pub time_to_target_s: Option<f64>,
    /// Median clocks to target, the same way.
    pub clocks_to_target: Option<f64>,
    /// Median bytes per clock all workers sent, and both ways.
    pub bytes_per_clock: Option<f64>,
    pub both_ways_per_clock: Option<f64>,
    /// Median seconds per clock (wall over clocks).
    pub clock_s: Option<f64>,
    /// Median seconds per clock a worker waited for reads.
    pub wait_s_per_clock: Option<f64>,
    /// LDA: median seconds per clock a worker sampled.
    pub sweep_s_per_clock: Option<f64>,
    pub cpu_cores: Option<f64>,
    /// With `--netns`: median CPU seconds of each node's process.
    pub cpu_seconds_by_node: BTreeMap<String, f64>,
    /// With `--netns`: median seconds each node's threads waited for a core.
    pub runqueue_wait_s_by_node: BTreeMap<String, f64>,
    pub times: Vec<Option<f64>>,
}

/// The median of `values`, `None` counted above every number (`None` if it is the middle).
fn median_missing(values: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().map(|x| x.unwrap_or(f64::INFINITY)).collect();
    v.sort_by(f64::total_cmp);
    let m = *v.get(v.len().checked_sub(1)? / 2)?;
    m.is_finite().then_some(m)
}

/// Each node's median of `figure` over `runs`.
fn by_node(
    runs: &[&ManagedRun],
    figure: fn(&ManagedRun) -> &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let mut all: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (node, s) in runs.iter().flat_map(|r| figure(r)) {
        all.entry(node).or_default().push(*s);
    }
    (all.into_iter())
        .filter_map(|(node, s)| Some((node.to_string(), median(&s)?)))
        .collect()
}

pub(super) fn summarise_variant(name: &str, runs: &[ManagedRun]) -> VariantSummary {
    let mine: Vec<&ManagedRun> = runs.iter().filter(|r| r.variant == name).collect();
    let of =
        |f: &dyn Fn(&ManagedRun) -> f64| median(&mine.iter().map(|r| f(r)).collect::<Vec<_>>());
    let times: Vec<Option<f64>> = mine.iter().map(|r| r.time_to_target_s).collect();
    let clocks: Vec<Option<f64>> = (mine.iter())
        .map(|r| r.clocks_to_target.map(|c| c as f64))
        .collect();
    VariantSummary {
        variant: name.to_string(),
        reached: mine.iter().filter(|r| r.reached_target).count(),
        time_to_target_s: median_missing(&times),
        clocks_to_target: median_missing(&clocks),
        bytes_per_clock: of(&|r| r.bytes_per_clock),
        both_ways_per_clock: of(&|r| r.both_ways_per_clock),
        clock_s: of(&|r| r.wall_s / r.clocks.max(1.0)),
        wait_s_per_clock: of(&|r| r.wait_s_per_clock),
        sweep_s_per_clock: median(
            &mine
                .iter()
                .filter_map(|r| r.sweep_s_per_clock)
                .collect::<Vec<_>>(),
        ),
        cpu_cores: of(&|r| r.cpu_cores),
        cpu_seconds_by_node: by_node(&mine, |r| &r.cpu_seconds_by_node),
        runqueue_wait_s_by_node: by_node(&mine, |r| &r.runqueue_wait_s_by_node),
        times,
    }
}

/// A run's traffic figures from its workers' bytes and clocks; the rest to be filled in.
fn traffic(
    name: &str,
    sent: &[u64],
    received: &[u64],
    clocks: &[u64],
    mean_staleness: f64,
    (wall_s, wait_s): (f64, &[f64]),
) -> ManagedRun {
    let (sent, received) = (sent.iter().sum::<u64>(), received.iter().sum::<u64>());
    let clocks = clocks.iter().sum::<u64>() as f64 / clocks.len().max(1) as f64;
    let per_clock = |bytes: u64| {
        if clocks > 0.0 {
            bytes as f64 / clocks
        } else {
            0.0
        }
    };
    let wait = wait_s.iter().sum::<f64>() / wait_s.len().max(1) as f64;
    ManagedRun {
        variant: name.to_string(),
        clocks,
        wait_s_per_clock: if clocks > 0.0 { wait / clocks } else { 0.0 },
        sent_bytes: sent,
        received_bytes: received,
        bytes_per_clock: per_clock(sent),
        both_ways_per_clock: per_clock(sent + received),
        mean_staleness,
        wall_s,
        ..ManagedRun::default()
    }
}

/// An LDA run's figures (the target by [`lda_targets`]).
pub(super) fn summarise_lda(name: &str, m: &PsLdaMetrics) -> ManagedRun {
    let cpi = u64::from(m.clocks_per_iteration.max(1));
    let clocks = m.worker_clocks.iter().sum::<u64>().max(1) as f64;
    let sweep = m.per_worker_sweep_s.iter().sum::<f64>();
    ManagedRun {
        sweep_s_per_clock: Some(sweep / clocks),
        iterations: m.lda.iterations as u64,
        final_value: m.lda.final_loglik_per_token,
        managed_rows: m.managed_rows_sent,
        // Clock 0 holds the initial counts; pass `i` ends at clock `1 + i * cpi`.
        curve: m
            .lda
            .loglik
            .iter()
            .map(|p| {
                let clock = 1 + p.iteration as u64 * cpi;
                (p.elapsed_s, clock, p.loglik_per_token)
            })
            .collect(),
        ..traffic(
            name,
            &m.per_worker_sent_bytes,
            &m.per_worker_received_bytes,
            &m.worker_clocks,
            m.read_staleness.mean,
            (m.lda.elapsed_s, &m.per_worker_wait_s),
        )
    }
}

/// The LDA target (given, or 90 % of the clock run's gain) and each run's first pass at
/// or above it.
pub(super) fn lda_targets(args: &ManagedBenchArgs, runs: &mut [ManagedRun]) -> f64 {
    let target = args.target_loglik.unwrap_or_else(|| {
        let clock = runs.iter().find(|r| r.variant == "clock");
        let first = clock.and_then(|r| r.curve.first()).map_or(0.0, |p| p.2);
        let last = clock.map_or(0.0, |r| r.final_value);
        first + 0.9 * (last - first)
    });
    for r in runs.iter_mut() {
        if let Some(p) = r.curve.iter().find(|p| p.2 >= target) {
            r.reached_target = true;
            r.time_to_target_s = Some(p.0);
            r.iterations = (r.curve.iter().position(|q| q == p).unwrap_or(0)) as u64;
            r.bytes_to_target = Some(r.both_ways_per_clock * p.1 as f64);
            r.clocks_to_target = Some(p.1);
        }
    }
    target
}

pub(super) fn summarise(name: &str, r: &PsMfResult) -> ManagedRun {
    let run = traffic(
        name,
        &r.per_worker_sent_bytes,
        &r.per_worker_received_bytes,
        &r.worker_clocks,
        r.staleness.mean,
        (r.wall_s, &r.per_worker_wait_s),
    );
    ManagedRun {
        reached_target: r.reached_target,
        time_to_target_s: r.time_to_target_s,
        iterations: r.iterations,
        clocks_to_target: r.reached_target.then_some(r.iterations),
        bytes_to_target: r
            .reached_target
            .then_some(run.both_ways_per_clock * r.iterations as f64),
        final_value: r.final_rmse,
        curve: r
            .curve
            .iter()
            .map(|p| (p.seconds, p.clock, p.rmse))
            .collect(),
        ..run
    }
}
