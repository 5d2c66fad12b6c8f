//! What every training app shares: [`InvalidSetting`] (names the key, the value and what is
//! allowed), the [`SettingChecks`] an app's `validate` runs, [`RunMetrics`] (the one
//! `metrics.json` and `history.csv`) and [`write_atomic`] (how every output is written).
//!
//! ```
//! use petrel_ml::job::SettingChecks;
//! let mut c = SettingChecks::new();
//! c.positive("learning_rate", 0.02_f64);
//! c.at_least("rank", 0, 1);
//! let e = c.finish().unwrap_err();
//! assert!(e.to_string().contains("rank = 0"));
//! ```

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::MlError;

/// A setting whose value cannot be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {reason}")]
pub struct InvalidSetting {
    /// The key as written in a job file (`synthetic.n_users`).
    pub key: String,
    /// The value given.
    pub value: String,
    /// What the value must be.
    pub reason: String,
}

impl InvalidSetting {
    /// `key = value: reason`.
    pub fn new(key: impl Into<String>, value: impl Display, reason: impl Into<String>) -> Self {
        InvalidSetting {
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Collects the checks of one settings struct; [`SettingChecks::finish`] returns the first
/// failure.
#[derive(Debug, Default)]
pub struct SettingChecks {
    first: Option<InvalidSetting>,
}

impl SettingChecks {
    /// No failure yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `failure` unless an earlier check already failed.
    pub fn fail(&mut self, failure: InvalidSetting) {
        if self.first.is_none() {
            self.first = Some(failure);
        }
    }

    /// `key` must satisfy `ok`, else `reason`.
    pub fn require(&mut self, ok: bool, key: &str, value: impl Display, reason: &str) {
        if !ok {
            self.fail(InvalidSetting::new(key, value, reason));
        }
    }

    /// A finite number.
    pub fn finite(&mut self, key: &str, value: impl Into<f64> + Copy + Display) {
        let v: f64 = value.into();
        self.require(v.is_finite(), key, value, "must be a finite number");
    }

    /// A finite number > 0.
    pub fn positive(&mut self, key: &str, value: impl Into<f64> + Copy + Display) {
        let v: f64 = value.into();
        let ok = v.is_finite() && v > 0.0;
        self.require(ok, key, value, "must be a finite number > 0");
    }

    /// A finite number >= 0.
    pub fn non_negative(&mut self, key: &str, value: impl Into<f64> + Copy + Display) {
        let v: f64 = value.into();
        let ok = v.is_finite() && v >= 0.0;
        self.require(ok, key, value, "must be a finite number >= 0");
    }

    /// A finite number in `[lo, hi]`.
    pub fn within(&mut self, key: &str, value: impl Into<f64> + Copy + Display, lo: f64, hi: f64) {
        let v: f64 = value.into();
        if !(v.is_finite() && (lo..=hi).contains(&v)) {
            let why = format!("must be a finite number in [{lo}, {hi}]");
            self.fail(InvalidSetting::new(key, value, why));
        }
    }

    /// A fraction in `[0, 1)` (a held-out share that leaves training data).
    pub fn fraction(&mut self, key: &str, value: f64) {
        let ok = value.is_finite() && (0.0..1.0).contains(&value);
        self.require(ok, key, value, "must be a fraction in [0, 1)");
    }

    /// An integer >= `min`.
    pub fn at_least<T: PartialOrd + Display + Copy>(&mut self, key: &str, value: T, min: T) {
        if value < min {
            self.fail(InvalidSetting::new(key, value, format!("must be >= {min}")));
        }
    }

    /// An integer <= `max`, with why.
    pub fn at_most<T: PartialOrd + Display + Copy>(
        &mut self,
        key: &str,
        value: T,
        max: T,
        why: &str,
    ) {
        if value > max {
            let why = format!("must be <= {max} ({why})");
            self.fail(InvalidSetting::new(key, value, why));
        }
    }

    /// The first failure, if any.
    pub fn finish(self) -> Result<(), InvalidSetting> {
        self.first.map_or(Ok(()), Err)
    }
}

/// Writes `bytes` to `path` under a temporary name in the same directory (created), syncs
/// it and renames it into place, so the final name never holds a truncated file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// One record of a run's history: the step, the seconds since the start, and named figures
/// (the same names in every record of a run).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HistoryRecord {
    /// Round, clock or pass (0: before the first update).
    pub step: u64,
    /// Seconds since the run started.
    pub seconds: f64,
    /// The figures by name.
    #[serde(flatten)]
    pub values: BTreeMap<String, f64>,
}

/// The one `metrics.json` of every app.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunMetrics {
    /// The app (`lasso`, `ps-mf`, ...).
    pub app: String,
    /// The settings the run used (its `[app.<section>]`).
    pub settings: serde_json::Value,
    /// The final figures (the last record's values plus app totals).
    #[serde(rename = "final")]
    pub final_figures: BTreeMap<String, f64>,
    /// Whether the run met its stopping criterion (tolerance, target) before its limit.
    pub converged: bool,
    /// Why the run stopped, in words.
    pub stop_reason: String,
    /// Seconds the run took.
    pub seconds: f64,
    /// The records, in step order.
    pub history: Vec<HistoryRecord>,
    /// The app's own figures, beside the common ones.
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl RunMetrics {
    /// Metrics of `app` run with `settings` and its own figures `details`, no history yet.
    pub fn new(
        app: &str,
        settings: &impl serde::Serialize,
        details: &impl serde::Serialize,
        seconds: f64,
    ) -> Self {
        let settings = serde_json::to_value(settings).unwrap_or(serde_json::Value::Null);
        let details = match serde_json::to_value(details) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        RunMetrics {
            app: app.to_string(),
            settings,
            final_figures: BTreeMap::new(),
            converged: false,
            stop_reason: String::new(),
            seconds,
            history: Vec::new(),
            details,
        }
    }

    /// Adds a history record.
    pub fn record(&mut self, step: u64, seconds: f64, values: &[(&str, f64)]) {
        self.history.push(HistoryRecord {
            step,
            seconds,
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        });
    }

    /// Sets final figures.
    pub fn finals(&mut self, values: &[(&str, f64)]) {
        for (k, v) in values {
            self.final_figures.insert(k.to_string(), *v);
        }
    }

    /// Writes `files`, `history.csv` and last `metrics.json` (the mark of a finished run) into
    /// `dir`, each atomically; nothing when a figure is not finite ([`MlError::Diverged`]).
    pub fn finish_run(
        &self,
        dir: &Path,
        files: &[(&str, &[u8])],
        advice: &str,
    ) -> Result<(), MlError> {
        self.check_finite(advice)?;
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            write_atomic(&path, bytes).map_err(|source| MlError::Write { path, source })
        };
        for (name, bytes) in files {
            write(name, bytes)?;
        }
        write("history.csv", self.history_csv().as_bytes())?;
        let json = serde_json::to_vec_pretty(self).map_err(|e| MlError::Write {
            path: dir.join("metrics.json"),
            source: std::io::Error::other(e),
        })?;
        write("metrics.json", &json)?;
        Ok(())
    }

    /// The first non-finite figure of the history or the finals, as an [`MlError::Diverged`].
    pub fn check_finite(&self, advice: &str) -> Result<(), MlError> {
        let last_step = self.history.last().map(|r| r.step).unwrap_or(0);
        let finals = self.final_figures.iter().map(|(k, v)| (last_step, k, *v));
        self.history
            .iter()
            .flat_map(|r| r.values.iter().map(move |(k, v)| (r.step, k, *v)))
            .chain(finals)
            .find(|(_, _, v)| !v.is_finite())
            .map_or(Ok(()), |(step, figure, value)| {
                Err(MlError::Diverged {
                    figure: figure.clone(),
                    value,
                    step,
                    advice: advice.to_string(),
                })
            })
    }

    /// `history.csv`: `step,seconds,<figures...>` with one line per record.
    pub fn history_csv(&self) -> String {
        let names: Vec<&String> = self
            .history
            .first()
            .map(|r| r.values.keys().collect())
            .unwrap_or_default();
        let header: String = names.iter().map(|n| format!(",{n}")).collect();
        let mut out = format!("step,seconds{header}\n");
        for r in &self.history {
            let value = |n: &&String| r.values.get(*n).map_or(String::new(), f64::to_string);
            let values: String = names.iter().map(|n| format!(",{}", value(n))).collect();
            out.push_str(&format!("{},{}{values}\n", r.step, r.seconds));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_names_key_and_value() {
        type Check = Box<dyn Fn(&mut SettingChecks)>;
        let cases: Vec<(Check, &str)> = vec![
            (Box::new(|c| c.finite("a", f64::NAN)), "a = NaN"),
            (Box::new(|c| c.positive("b", -1.0)), "b = -1"),
            (Box::new(|c| c.positive("b", 0.0)), "b = 0"),
            (Box::new(|c| c.non_negative("c", -0.5)), "c = -0.5"),
            (Box::new(|c| c.non_negative("c", f64::INFINITY)), "c = inf"),
            (Box::new(|c| c.within("d", 2.0, 0.0, 1.0)), "d = 2"),
            (Box::new(|c| c.fraction("e", 1.0)), "e = 1"),
            (Box::new(|c| c.at_least("f", 0usize, 1)), "f = 0"),
            (Box::new(|c| c.at_most("g", 9usize, 4, "rows")), "g = 9"),
        ];
        for (check, text) in cases {
            let mut c = SettingChecks::new();
            check(&mut c);
            let e = c.finish().unwrap_err();
            assert!(e.to_string().starts_with(text), "{e} vs {text}");
        }
    }

    fn record(step: u64, loss: f64) -> HistoryRecord {
        HistoryRecord {
            step,
            seconds: step as f64 * 0.5,
            values: [("loss".to_string(), loss)].into_iter().collect(),
        }
    }

    fn metrics(history: Vec<HistoryRecord>) -> RunMetrics {
        RunMetrics {
            app: "t".into(),
            settings: serde_json::json!({"rank": 3}),
            final_figures: history.last().map(|r| r.values.clone()).unwrap_or_default(),
            converged: false,
            stop_reason: "iteration limit".into(),
            seconds: 1.0,
            history,
            details: serde_json::Map::new(),
        }
    }

    #[test]
    fn history_has_one_format_in_json_and_csv() {
        let m = metrics(vec![record(0, 2.0), record(1, 1.5)]);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["history"][1]["loss"], 1.5);
        assert_eq!(json["history"][1]["step"], 1);
        assert_eq!(json["final"]["loss"], 1.5);
        assert_eq!(json["converged"], false);
        let back: RunMetrics = serde_json::from_value(json).unwrap();
        assert_eq!(back, m);
        assert_eq!(m.history_csv(), "step,seconds,loss\n0,0,2\n1,0.5,1.5\n");
        assert!(m.check_finite("x").is_ok());
    }

    #[test]
    fn a_non_finite_figure_is_divergence_naming_it() {
        let m = metrics(vec![record(0, 2.0), record(3, f64::NAN)]);
        let e = m.check_finite("lower the learning rate").unwrap_err();
        assert!(
            matches!(&e, MlError::Diverged { figure, step: 3, .. } if figure == "loss"),
            "{e:?}"
        );
        assert!(e.to_string().contains("lower the learning rate"));
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/out.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
        std::fs::write(dir.path().join("a-file"), b"x").unwrap();
        assert!(write_atomic(&dir.path().join("a-file/x"), b"x").is_err());
    }

    #[test]
    fn good_values_pass_and_the_first_failure_wins() {
        let mut c = SettingChecks::new();
        c.positive("a", 0.1);
        c.non_negative("b", 0.0);
        c.within("c", 1.0, 0.0, 1.0);
        c.fraction("d", 0.0);
        c.at_least("e", 1u32, 1);
        assert!(c.finish().is_ok());
        let mut c = SettingChecks::new();
        c.positive("first", -1.0);
        c.positive("second", -1.0);
        assert_eq!(c.finish().unwrap_err().key, "first");
    }
}
