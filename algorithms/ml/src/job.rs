//! What every training app's settings share, sans I/O: [`InvalidSetting`], the error of a
//! value that cannot be right (it names the key, the value and what is allowed), and
//! [`SettingChecks`], the range, finiteness and relation checks an app's `validate` runs
//! before any node starts.
//!
//! ```
//! use petrel_ml::job::SettingChecks;
//! let mut c = SettingChecks::new();
//! c.positive("learning_rate", 0.02_f64);
//! c.at_least("rank", 0, 1);
//! let e = c.finish().unwrap_err();
//! assert!(e.to_string().contains("rank = 0"));
//! ```

use std::fmt::Display;

/// A setting whose value cannot be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {reason}")]
pub struct InvalidSetting {
    /// The key as written in a job file (`learning_rate`, `synthetic.n_users`); the flag is
    /// the same with dashes.
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
/// failure (the order of the checks is the order of the keys in the docs).
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
        self.require(
            v.is_finite() && v > 0.0,
            key,
            value,
            "must be a finite number > 0",
        );
    }

    /// A finite number >= 0.
    pub fn non_negative(&mut self, key: &str, value: impl Into<f64> + Copy + Display) {
        let v: f64 = value.into();
        self.require(
            v.is_finite() && v >= 0.0,
            key,
            value,
            "must be a finite number >= 0",
        );
    }

    /// A finite number in `[lo, hi]`.
    pub fn within(&mut self, key: &str, value: impl Into<f64> + Copy + Display, lo: f64, hi: f64) {
        let v: f64 = value.into();
        if !(v.is_finite() && (lo..=hi).contains(&v)) {
            self.fail(InvalidSetting::new(
                key,
                value,
                format!("must be a finite number in [{lo}, {hi}]"),
            ));
        }
    }

    /// A fraction in `[0, 1)` (a held-out share that leaves training data).
    pub fn fraction(&mut self, key: &str, value: f64) {
        self.require(
            value.is_finite() && (0.0..1.0).contains(&value),
            key,
            value,
            "must be a fraction in [0, 1)",
        );
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
            self.fail(InvalidSetting::new(
                key,
                value,
                format!("must be <= {max} ({why})"),
            ));
        }
    }

    /// The first failure, if any.
    pub fn finish(self) -> Result<(), InvalidSetting> {
        match self.first {
            None => Ok(()),
            Some(e) => Err(e),
        }
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
