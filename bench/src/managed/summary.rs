//! Each variant's medians over the repeats of `bench managed`.

use super::ManagedRun;
use crate::common::median;
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
    pub times: Vec<Option<f64>>,
}

/// The median of `values`, `None` counted above every number (`None` if it is the middle).
fn median_missing(values: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().map(|x| x.unwrap_or(f64::INFINITY)).collect();
    v.sort_by(f64::total_cmp);
    let m = *v.get(v.len().checked_sub(1)? / 2)?;
    m.is_finite().then_some(m)
}

/// Each node's median CPU seconds over `runs`.
fn by_node(runs: &[&ManagedRun]) -> BTreeMap<String, f64> {
    let mut all: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (node, s) in runs.iter().flat_map(|r| &r.cpu_seconds_by_node) {
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
        cpu_seconds_by_node: by_node(&mine),
        times,
    }
}
