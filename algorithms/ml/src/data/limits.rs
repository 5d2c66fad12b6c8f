//! How much a loader may allocate on the word of its input.
//!
//! A text file can announce sizes it does not contain (a LIBSVM line `0.5 4000000000:0.1`
//! makes a 4-billion-column dataset out of 18 bytes). Every id and size a loader reads is
//! checked, before anything is sized by it, against [`DataLimits`] (set by the environment:
//! `PETREL_DATA__MAX_DIMENSION`, `..._MAX_DOCUMENTS`, `..._MAX_TOKENS`), else a
//! [`MlError::LimitExceeded`] naming the file, line, limit and knob.
//!
//! Every dimension or id that sizes a dense per-id array must also fit the input's size:
//! at most [`size_bound`]`(bytes)` = [`DEFAULT_DIMENSION_ALLOWANCE`] (2^20, raised by
//! `PETREL_DATA__DIMENSION_ALLOWANCE`) + [`IDS_PER_BYTE`] (16) x the input's bytes, else
//! [`MlError::TooLargeForInput`]. Real data sets stay far below it. A file read by path
//! is checked as a dimension is read; a reader of unknown size against the bytes read
//! through the line, or the whole input once read.

use std::path::Path;

use super::MlError;

/// Environment variable that sets [`DataLimits::max_dimension`].
pub const MAX_DIMENSION_ENV: &str = "PETREL_DATA__MAX_DIMENSION";
/// Environment variable that sets [`DataLimits::max_documents`].
pub const MAX_DOCUMENTS_ENV: &str = "PETREL_DATA__MAX_DOCUMENTS";
/// Environment variable that sets [`DataLimits::max_tokens`].
pub const MAX_TOKENS_ENV: &str = "PETREL_DATA__MAX_TOKENS";
/// Environment variable that sets the fixed part of [`size_bound`].
pub const DIMENSION_ALLOWANCE_ENV: &str = "PETREL_DATA__DIMENSION_ALLOWANCE";
/// Ids any input may declare whatever its size (a per-id array of 2^20 entries costs at most
/// a few hundred MB in the costliest app).
pub const DEFAULT_DIMENSION_ALLOWANCE: u64 = 1 << 20;
/// Ids each byte of input adds to [`size_bound`] (an entry takes at least 4 bytes).
pub const IDS_PER_BYTE: u64 = 16;

/// Upper bounds on what one loaded data set may make the process allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataLimits {
    /// Largest number of features, rows or columns, or words: each sizes a dense per-id
    /// array downstream. Default 2^26.
    pub max_dimension: u64,
    /// Largest bag-of-words document count D (each costs a list even when empty). Default
    /// 2·10^7.
    pub max_documents: u64,
    /// Largest bag-of-words corpus in tokens (one `u32` each). Default 2^28.
    pub max_tokens: u64,
}

impl Default for DataLimits {
    fn default() -> Self {
        DataLimits {
            max_dimension: 1 << 26,
            max_documents: 20_000_000,
            max_tokens: 1 << 28,
        }
    }
}

impl DataLimits {
    /// The defaults, overridden by [`MAX_DIMENSION_ENV`], [`MAX_DOCUMENTS_ENV`] and
    /// [`MAX_TOKENS_ENV`]; a value that is not a positive integer is an error naming it.
    pub fn from_env() -> Result<Self, MlError> {
        let mut limits = DataLimits::default();
        for (var, slot) in [
            (MAX_DIMENSION_ENV, &mut limits.max_dimension),
            (MAX_DOCUMENTS_ENV, &mut limits.max_documents),
            (MAX_TOKENS_ENV, &mut limits.max_tokens),
        ] {
            if let Some(value) = env_u64(var, 1, "positive")? {
                *slot = value;
            }
        }
        Ok(limits)
    }

    /// Checks `value` (a `what`, e.g. "feature index") against [`Self::max_dimension`].
    pub(crate) fn check_dimension(
        &self,
        path: &Path,
        line: usize,
        what: &str,
        value: u64,
    ) -> Result<(), MlError> {
        let limit = (self.max_dimension, MAX_DIMENSION_ENV);
        check(path, line, what, value, limit)
    }

    /// Checks a bag-of-words document count against [`Self::max_documents`].
    pub(crate) fn check_documents(&self, path: &Path, line: usize, n: u64) -> Result<(), MlError> {
        let limit = (self.max_documents, MAX_DOCUMENTS_ENV);
        check(path, line, "document count D", n, limit)
    }

    /// Checks a running token total against [`Self::max_tokens`].
    pub(crate) fn check_tokens(&self, path: &Path, line: usize, n: u64) -> Result<(), MlError> {
        let limit = (self.max_tokens, MAX_TOKENS_ENV);
        check(path, line, "corpus size in tokens", n, limit)
    }
}

/// The integer set by the environment variable `var`, if any; one below `min` or text that
/// is not one is an error naming it (a `what` integer).
fn env_u64(var: &str, min: u64, what: &str) -> Result<Option<u64>, MlError> {
    let Ok(text) = std::env::var(var) else {
        return Ok(None);
    };
    match text.trim().parse::<u64>() {
        Ok(value) if value >= min => Ok(Some(value)),
        _ => Err(MlError::InvalidParameter(format!(
            "{var}={text:?} is not a {what} integer"
        ))),
    }
}

/// The largest dimension or id an input of `bytes` bytes may declare.
pub fn size_bound(bytes: u64) -> Result<u64, MlError> {
    Ok(SizeRule::new(Some(bytes))?.bound(bytes))
}

/// [`size_bound`] as one load applies it (the input's size when known).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SizeRule {
    allowance: u64,
    known: Option<u64>,
}

impl SizeRule {
    /// The rule for an input of `known` bytes (`None`: unknown).
    pub(crate) fn new(known: Option<u64>) -> Result<Self, MlError> {
        let allowance = env_u64(DIMENSION_ALLOWANCE_ENV, 0, "non-negative")?
            .unwrap_or(DEFAULT_DIMENSION_ALLOWANCE);
        Ok(SizeRule { allowance, known })
    }

    /// Whether the input's size is known (checks can come before the data).
    pub(crate) fn is_known(&self) -> bool {
        self.known.is_some()
    }

    fn bound(&self, bytes: u64) -> u64 {
        self.allowance
            .saturating_add(IDS_PER_BYTE.saturating_mul(bytes))
    }

    /// How many ids the bytes before a chunk must pay for `value`, read through `local`
    /// bytes of the chunk ([`Self::covers`]).
    pub(crate) fn excess(&self, value: u64, local: u64) -> i128 {
        i128::from(value)
            - i128::from(self.allowance)
            - i128::from(IDS_PER_BYTE) * i128::from(local)
    }

    /// Whether `before` bytes ahead of a chunk pay for its largest [`Self::excess`].
    pub(crate) fn covers(&self, excess: i128, before: u64) -> bool {
        excess <= i128::from(IDS_PER_BYTE) * i128::from(before)
    }

    /// Checks `value` (a `what` read on `line`) against the bound of the input's size, or of
    /// the `read` bytes when the size is not known.
    pub(crate) fn check(
        &self,
        path: &Path,
        line: usize,
        what: &str,
        value: u64,
        read: u64,
    ) -> Result<(), MlError> {
        if value <= self.allowance {
            return Ok(());
        }
        let bytes = self.known.unwrap_or(read);
        let bound = self.bound(bytes);
        if value > bound {
            return Err(MlError::TooLargeForInput {
                path: path.to_path_buf(),
                line,
                what: what.to_owned(),
                value,
                bytes,
                bound,
            });
        }
        Ok(())
    }
}

/// `value` against `(limit, the variable that sets it)`.
fn check(
    path: &Path,
    line: usize,
    what: &str,
    value: u64,
    (limit, knob): (u64, &'static str),
) -> Result<(), MlError> {
    if value > limit {
        return Err(MlError::LimitExceeded {
            path: path.to_path_buf(),
            line,
            what: what.to_owned(),
            value,
            limit,
            knob,
        });
    }
    Ok(())
}
