//! What the benches share: medians, ratios and the table of JSON rows; for the
//! parameter-server benches their nodes, data, stragglers and `--json-out`.

use crate::BenchError;
use petrel::report::{Table, fmt, print_json, save_json};
use petrel_actors::{Settings, Transport};
use petrel_ps::kit::settings::StragglerSettings;
use petrel_ps::{PsApp, PsError, PsLrSettings, PsMfSettings};
use serde::Serialize;
use std::path::Path;

/// The `--net` overrides of the benches that measure the transport.
#[derive(clap::Args, Debug, Clone)]
pub struct NetArgs {
    /// A transport knob for every node, as `KEY=VALUE` of `[net]` (repeatable), e.g.
    /// `--net max_udp_payload=65527`.
    #[arg(long = "net", value_name = "KEY=VALUE")]
    pub net: Vec<String>,
}

impl NetArgs {
    /// The transport knobs with the overrides applied (the `[net]` keys of the settings; a
    /// value is read as JSON when it parses, as a string otherwise), so a benchmark can
    /// measure one knob against the defaults.
    pub(crate) fn config(&self) -> Result<petrel_net::NetConfig, BenchError> {
        let mut value = serde_json::to_value(petrel_net::NetConfig::default())?;
        for given in &self.net {
            let bad = |reason: String| BenchError::NetOverride {
                given: given.clone(),
                reason,
            };
            let (key, raw) = given
                .split_once('=')
                .ok_or_else(|| bad("expected KEY=VALUE".into()))?;
            let parsed = serde_json::from_str(raw.trim())
                .unwrap_or_else(|_| serde_json::Value::String(raw.trim().to_string()));
            let Some(map) = value.as_object_mut() else {
                return Err(bad("the [net] knobs are not a table".into()));
            };
            map.insert(key.trim().to_string(), parsed);
            serde_json::from_value::<petrel_net::NetConfig>(value.clone())
                .map_err(|e| bad(e.to_string()))?;
        }
        Ok(serde_json::from_value(value)?)
    }
}

/// The nodes of each run of a parameter-server bench.
#[derive(clap::Args, Debug, Clone)]
pub struct PsClusterArgs {
    /// Worker nodes.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Shard nodes.
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
}

impl PsClusterArgs {
    /// Runs `A` on an in-process cluster of these nodes (10 s failure timeout, then `tweak`).
    pub(crate) fn run<A: PsApp>(
        &self,
        cfg: A::Config,
        transport: Transport,
        tweak: impl FnOnce(&mut Settings),
    ) -> Result<A::Output, PsError> {
        let tweak = |s: &mut Settings| {
            s.cluster.failure_timeout_ms = 10_000;
            tweak(s);
        };
        petrel_ps::run_local_with::<A>(cfg, self.shards, self.workers, transport, tweak)
    }
}

/// The synthetic logistic-regression data of the PS benches.
#[derive(clap::Args, Debug, Clone)]
pub struct LrDataArgs {
    /// LR: synthetic samples.
    #[arg(long, default_value_t = 8000)]
    pub lr_samples: usize,
    /// LR: synthetic features.
    #[arg(long, default_value_t = 200)]
    pub lr_features: usize,
    /// LR: synthetic classes.
    #[arg(long, default_value_t = 10)]
    pub lr_classes: usize,
    /// LR: samples per clock and worker.
    #[arg(long, default_value_t = 20)]
    pub lr_batch: usize,
}

impl LrDataArgs {
    /// The LR job on this data (`quick`: 1000 samples, 40 features, 4 classes), without a
    /// clock limit.
    pub(crate) fn config(&self, quick: bool) -> PsLrSettings {
        let (samples, features, classes) = if quick {
            (1000, 40, 4)
        } else {
            (self.lr_samples, self.lr_features, self.lr_classes)
        };
        PsLrSettings {
            synthetic_samples: samples,
            synthetic_features: features,
            synthetic_classes: classes,
            batch_size: self.lr_batch,
            max_clocks: u64::MAX,
            eval_every: Some(1),
            ..PsLrSettings::default()
        }
    }
}

/// Transient stragglers.
#[derive(clap::Args, Debug, Clone)]
pub struct TransientArgs {
    /// Probability that a clock of a worker is slowed (transient stragglers).
    #[arg(long, default_value_t = 0.1)]
    pub transient_probability: f64,
    /// How much slower a transiently slowed clock is.
    #[arg(long, default_value_t = 4.0)]
    pub transient_factor: f64,
}

impl TransientArgs {
    /// These stragglers on clocks of `clock_ms`.
    pub(crate) fn settings(&self, clock_ms: f64) -> StragglerSettings {
        StragglerSettings {
            clock_ms,
            transient_probability: self.transient_probability,
            transient_factor: self.transient_factor,
            ..StragglerSettings::default()
        }
    }
}

/// Saves `figures` to `json_out` and prints them as the bench's JSON line.
pub(crate) fn save_and_print<T: Serialize>(json_out: &Path, figures: &T) -> Result<(), BenchError> {
    save_json(json_out, figures).map_err(BenchError::io(json_out.display().to_string()))?;
    Ok(print_json(figures)?)
}

/// The median (the mean of the two middle values of an even count); `None` when empty.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some(0.5 * (sorted[n / 2 - 1] + sorted[n / 2])),
    }
}

/// The upper median (the larger middle value of an even count); the default when empty.
pub(crate) fn upper_median<T: Copy + PartialOrd + Default>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The synthetic MF job of the PS benches (smaller with `quick`).
pub(crate) fn ps_mf(quick: bool) -> PsMfSettings {
    let (users, items, observed) = if quick {
        (400, 200, 0.05)
    } else {
        (2000, 1000, 0.02)
    };
    PsMfSettings {
        synthetic_users: users,
        synthetic_items: items,
        synthetic_rank: 5,
        synthetic_observed: observed,
        synthetic_noise: 0.1,
        rank: 8,
        learning_rate: 0.08,
        batches_per_epoch: 4,
        max_clocks: Some(u64::MAX),
        init_scale: 0.3,
        regularization: 0.02,
        ..PsMfSettings::default()
    }
}

/// `a / b` when both are known and `b` is positive.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).filter(|&(_, b)| b > 0.0).map(|(a, b)| a / b)
}

/// `rows` as a table of their JSON values at `keys` (whitespace-separated; a path such as
/// `breakdown/encode_ms` is headed by its last part): floats through [`fmt`] (`e` notation
/// below 0.001), `-` where a row has no value.
pub(crate) fn json_table<T: Serialize>(rows: impl IntoIterator<Item = T>, keys: &str) -> Table {
    let keys: Vec<&str> = keys.split_whitespace().collect();
    let headers: Vec<&str> = keys.iter().filter_map(|k| k.rsplit('/').next()).collect();
    let mut table = Table::new(&headers);
    for row in rows {
        let value = serde_json::to_value(row).unwrap_or_default();
        table.row(
            keys.iter()
                .map(|k| match value.pointer(&format!("/{k}")) {
                    Some(serde_json::Value::Number(n)) if n.is_f64() => {
                        let x = n.as_f64().unwrap_or(f64::NAN);
                        if x != 0.0 && x.abs() < 1e-3 {
                            format!("{x:.2e}")
                        } else {
                            fmt(x)
                        }
                    }
                    Some(serde_json::Value::String(s)) => s.clone(),
                    None | Some(serde_json::Value::Null) => "-".into(),
                    Some(v) => v.to_string(),
                })
                .collect(),
        );
    }
    table
}

/// `x` through [`fmt`], or `-` when unknown.
pub(crate) fn fmt_opt(x: Option<f64>) -> String {
    x.map_or("-".into(), fmt)
}

/// A value's name on the command line (and in the JSON).
pub(crate) fn name_of(value: &impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// `N` positive numbers separated by `x` (`2x2`, `ROWSxFEATURESxNNZ`); `None` otherwise.
pub(crate) fn dims<T: std::str::FromStr + PartialOrd + Default, const N: usize>(
    s: &str,
) -> Option<[T; N]> {
    let parse = |p: &str| p.trim().parse().ok().filter(|n| *n > T::default());
    let parts: Vec<T> = s.split(['x', 'X']).map(parse).collect::<Option<_>>()?;
    parts.try_into().ok()
}
