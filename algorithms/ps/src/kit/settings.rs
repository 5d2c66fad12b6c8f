//! Settings more than one app has, written once: each group is flattened into the app's
//! flags and `[app.<section>]` table, whose keys stay flat (`[app.mf] clock_ms = 5`).

use petrel_ml::job::SettingChecks;
use serde::de::Error as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::managed::{BandwidthManager, SendPolicy};
use crate::core::straggler::StragglerModel;
use crate::error::PsError;
use crate::kit::PsCheckpointing;
use std::path::PathBuf;

/// Managed communication (ps-mf, ps-lda): its settings, checks, manager and clock slices.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default)]
pub struct ManagedSettings {
    /// Managed communication (Bösen): a clock sends only the rows older than the staleness
    /// tolerance plus one priority batch, and a background sender sends the pending rows in
    /// this order (fifo, random, relative-magnitude) paced at `managed_bytes_per_s` (ps-lda's
    /// shards push too). Unset: updates leave only at the clock boundary.
    #[arg(long, value_enum)]
    pub managed: Option<SendPolicy>,
    /// Slices a clock's compute is cut into under managed communication: updates become
    /// pending slice by slice, and each slice reads its rows through the cache, so rows
    /// that arrived meanwhile reach it.
    #[arg(long, default_value_t = 4)]
    pub compute_slices: u32,
    /// Bandwidth budget of managed communication, bytes per second per worker (and per
    /// shard for server push), clock sends included.
    #[arg(long, default_value_t = 1_000_000)]
    pub managed_bytes_per_s: u64,
}

impl Default for ManagedSettings {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl ManagedSettings {
    /// Range checks: `compute_slices >= 1`, a positive budget when `managed` is set.
    pub fn check(&self, c: &mut SettingChecks) {
        c.at_least("compute_slices", self.compute_slices, 1);
        if self.managed.is_some() {
            c.at_least("managed_bytes_per_s", self.managed_bytes_per_s, 1);
        }
    }

    /// Slices a clock is cut into: `compute_slices` under managed communication, else one.
    pub fn slices(&self) -> usize {
        if self.managed.is_some() {
            self.compute_slices.max(1) as usize
        } else {
            1
        }
    }

    /// The worker's manager (`None` without `managed`), paced at `managed_bytes_per_s`.
    pub fn manager(&self) -> Option<BandwidthManager> {
        (self.managed).map(|policy| BandwidthManager::new(self.managed_bytes_per_s, policy))
    }
}

/// Emulated compute time and stragglers (ps-mf, ps-lr): every clock of every worker.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default)]
pub struct StragglerSettings {
    /// Emulated compute time per clock (0: just the real compute).
    #[arg(long, default_value_t = 0.0)]
    pub clock_ms: f64,
    /// Worker slowed down by `straggler_factor` (its clocks take `clock_ms * factor`).
    #[arg(long)]
    pub straggler: Option<u32>,
    /// How much slower the straggler's clocks are.
    #[arg(long, default_value_t = 1.0)]
    pub straggler_factor: f64,
    /// Transient stragglers: probability that a clock of a worker is slowed (seeded by
    /// `seed`, the same slowdowns for every consistency model).
    #[arg(long, default_value_t = 0.0)]
    pub transient_probability: f64,
    /// How much slower a transiently slowed clock is.
    #[arg(long, default_value_t = 1.0)]
    pub transient_factor: f64,
}

impl Default for StragglerSettings {
    fn default() -> Self {
        petrel_actors::flag_defaults()
    }
}

impl StragglerSettings {
    /// Range checks: `clock_ms >= 0`, `straggler_factor >= 1`.
    pub fn check(&self, c: &mut SettingChecks) {
        c.non_negative("clock_ms", self.clock_ms);
        c.require(
            self.straggler_factor.is_finite() && self.straggler_factor >= 1.0,
            "straggler_factor",
            self.straggler_factor,
            "must be a finite number >= 1",
        );
    }

    /// The emulated compute time of every clock of every worker (seeded by `seed`).
    pub fn model(&self, seed: u64) -> StragglerModel {
        StragglerModel {
            clock_ms: self.clock_ms,
            persistent: self.straggler,
            persistent_factor: self.straggler_factor,
            transient_probability: self.transient_probability,
            transient_factor: self.transient_factor,
            seed,
        }
    }
}

/// Output and checkpoint files (every app; `checkpoint_every` is the app's).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, clap::Args)]
#[serde(default)]
pub struct RunFiles {
    /// Output directory for the run's files (the model, `history.csv`, `metrics.json`;
    /// required by `petrel train`; settings without it write no files).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a checkpoint of the whole job (the tables, every worker's state, the monitor's
    /// history) into this directory every `checkpoint_every` clocks (every node must see it;
    /// `petrel train` defaults it to `<out>/checkpoints`).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue from the newest valid checkpoint in `checkpoint_dir`.
    #[arg(long)]
    pub resume: bool,
}

impl RunFiles {
    /// The output directory as a summary line names it (`-` when there is none).
    pub fn out_shown(&self) -> &std::path::Path {
        self.out.as_deref().unwrap_or(std::path::Path::new("-"))
    }

    /// Where `app` checkpoints every `every` clocks (`resume` needs a `checkpoint_dir`).
    pub fn checkpointing(
        &self,
        app: &'static str,
        every: u64,
    ) -> Result<Option<PsCheckpointing>, PsError> {
        match &self.checkpoint_dir {
            Some(dir) => Ok(Some(PsCheckpointing {
                dir: dir.clone(),
                every,
                resume: self.resume,
            })),
            None if self.resume => Err(PsError::InvalidConfig {
                app,
                reason: "resume needs checkpoint_dir".into(),
            }),
            None => Ok(None),
        }
    }

    /// Refuses `checkpoint_every` when checkpoints would be written but are not `possible`.
    pub fn check_checkpoints(
        &self,
        c: &mut SettingChecks,
        every: u64,
        possible: bool,
        reason: &str,
    ) {
        let writes = self.checkpoint_dir.is_some() && every > 0;
        c.require(!writes || possible, "checkpoint_every", every, reason);
    }

    /// The directory `petrel train` may fill in, and `resume`, when the job wants checkpoints.
    pub fn wanted(&mut self, writes: bool) -> Option<(&mut Option<PathBuf>, bool)> {
        let wanted = self.checkpoint_dir.is_some() || self.resume || writes;
        wanted.then_some((&mut self.checkpoint_dir, self.resume))
    }
}

/// Reads an app's settings table with flattened groups, doing what serde does not then:
/// refusing unknown keys (listing the valid ones) and naming the key of a bad value.
pub fn read_flat<'de, D, T>(
    d: D,
    decode: impl Fn(Value) -> Result<T, serde_json::Error>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Serialize,
{
    let given = Map::<String, Value>::deserialize(d)?;
    let known = match serde_json::to_value(T::default()).map_err(D::Error::custom)? {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    if let Some(key) = given.keys().find(|k| !known.contains_key(*k)) {
        let valid: Vec<&str> = known.keys().map(String::as_str).collect();
        return Err(D::Error::custom(format!(
            "unknown field `{key}`, expected one of `{}`",
            valid.join("`, `")
        )));
    }
    decode(Value::Object(given.clone())).map_err(|e| {
        let alone =
            |(k, v): (&String, &Value)| Value::Object(Map::from_iter([(k.clone(), v.clone())]));
        match given.iter().find(|&kv| decode(alone(kv)).is_err()) {
            Some((key, _)) => D::Error::custom(format!("{key}: {e}")),
            None => D::Error::custom(e),
        }
    })
}

/// History rows an evaluating app aims at when `eval_every` is not set.
pub const HISTORY_ROWS: u64 = 40;

/// Why the former `eval_ms` setting is refused (the history is taken per clock now).
const EVAL_MS_REPLACED: &str = "was replaced by eval_every: the history now has one row \
     every N clocks, each measured at its clock; use --eval-every N (or eval_every = N)";

/// Checks `eval_every` (at least 1 when set) and refuses the former `eval_ms` with a hint.
pub fn check_history(c: &mut SettingChecks, eval_every: Option<u64>, eval_ms: Option<u64>) {
    if let Some(every) = eval_every {
        c.at_least("eval_every", every, 1);
    }
    if let Some(ms) = eval_ms {
        c.require(false, "eval_ms", ms, EVAL_MS_REPLACED);
    }
}

/// Checks that `learning_rate` is in `(0, max]`, `range` saying so when it is not.
pub fn check_step(c: &mut SettingChecks, learning_rate: f32, max: f32, range: &str) {
    let ok = learning_rate.is_finite() && learning_rate > 0.0 && learning_rate <= max;
    c.require(ok, "learning_rate", learning_rate, range);
}

/// Clocks between two history rows: `eval_every`, else about [`HISTORY_ROWS`] rows.
pub fn eval_stride(eval_every: Option<u64>, clocks: u64) -> u64 {
    eval_every.unwrap_or(clocks / HISTORY_ROWS).max(1)
}

/// The history rows of a run of `clocks` clocks: step 0, every stride, the last clock.
pub fn history_points(eval_every: Option<u64>, clocks: u64) -> u64 {
    let stride = eval_stride(eval_every, clocks);
    1 + clocks / stride + u64::from(!clocks.is_multiple_of(stride))
}

/// `Default` (from the flags), `Serialize` and `Deserialize` (through [`read_flat`]) of an
/// app's settings struct derived with `#[serde(remote = "Self")]`.
macro_rules! flat_settings {
    ($t:ty) => {
        impl Default for $t {
            fn default() -> Self {
                petrel_actors::flag_defaults()
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                <$t>::serialize(self, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::kit::settings::read_flat(d, <$t>::deserialize)
            }
        }
    };
}
pub(crate) use flat_settings;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_slices_manager_and_checks() {
        let mut s = ManagedSettings {
            managed: None,
            managed_bytes_per_s: 1000,
            compute_slices: 4,
        };
        assert_eq!(s.slices(), 1);
        assert!(s.manager().is_none());
        s.managed = Some(SendPolicy::Fifo);
        assert_eq!(s.slices(), 4);
        let pacer = s.manager().map(|m| m.pacer);
        assert_eq!(pacer, Some(crate::core::managed::Pacer::new(1000)));
        let mut c = SettingChecks::new();
        s.check(&mut c);
        assert!(c.finish().is_ok());
        s.managed_bytes_per_s = 0;
        let mut c = SettingChecks::new();
        s.check(&mut c);
        assert_eq!(c.finish().unwrap_err().key, "managed_bytes_per_s");
        s.managed = None; // an unused budget may be 0
        let mut c = SettingChecks::new();
        s.check(&mut c);
        assert!(c.finish().is_ok());
        s.compute_slices = 0;
        let mut c = SettingChecks::new();
        s.check(&mut c);
        assert_eq!(c.finish().unwrap_err().key, "compute_slices");
    }
}
