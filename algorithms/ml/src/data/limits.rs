//! How much a loader may allocate on the word of its input.
//!
//! A text file can announce sizes it does not contain: a LIBSVM line `0.5 4000000000:0.1`
//! makes a 4-billion-column dataset out of 18 bytes, a bag-of-words header `W = 10^9` a
//! billion-row word table. Every id and size a loader reads is checked against these limits
//! (and against what the input really holds) before anything is sized by it, and a value
//! above a limit is a [`DataError::LimitExceeded`] naming the file, the line, the limit and
//! the knob that raises it.
//!
//! The limits are read from the environment, in the `PETREL_<SECTION>__<KEY>` style of the
//! cluster settings: `PETREL_DATA__MAX_DIMENSION`, `PETREL_DATA__MAX_DOCUMENTS` and
//! `PETREL_DATA__MAX_TOKENS`.

use std::path::Path;

use super::DataError;

/// Environment variable that sets [`DataLimits::max_dimension`].
pub const MAX_DIMENSION_ENV: &str = "PETREL_DATA__MAX_DIMENSION";
/// Environment variable that sets [`DataLimits::max_documents`].
pub const MAX_DOCUMENTS_ENV: &str = "PETREL_DATA__MAX_DOCUMENTS";
/// Environment variable that sets [`DataLimits::max_tokens`].
pub const MAX_TOKENS_ENV: &str = "PETREL_DATA__MAX_TOKENS";

/// Upper bounds on what one loaded data set may make the process allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataLimits {
    /// Largest number of features (LIBSVM), rows or columns (Matrix Market), documents or
    /// words (bag-of-words): every one of them sizes a dense per-id array downstream (a
    /// weight vector, a factor matrix, a word-topic table). Default 2^26 (a dense `f32`
    /// vector of 256 MiB).
    pub max_dimension: u64,
    /// Largest bag-of-words document count D. Every document costs a list header (24
    /// bytes) even when empty, so a header alone could otherwise claim gigabytes. Default
    /// 2·10^7, about twice PubMed's 8.2 million documents (at most 480 MB).
    pub max_documents: u64,
    /// Largest bag-of-words corpus in tokens (each is one `u32` once expanded). Default 2^28
    /// (1 GiB of tokens; the UCI NYTimes corpus has 10^8).
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
    /// [`MAX_TOKENS_ENV`] when set.
    /// A variable that is set but not a positive integer is an error naming it.
    pub fn from_env() -> Result<Self, DataError> {
        let mut limits = DataLimits::default();
        for (var, slot) in [
            (MAX_DIMENSION_ENV, &mut limits.max_dimension),
            (MAX_DOCUMENTS_ENV, &mut limits.max_documents),
            (MAX_TOKENS_ENV, &mut limits.max_tokens),
        ] {
            if let Ok(text) = std::env::var(var) {
                *slot = text
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|&v| v > 0)
                    .ok_or_else(|| {
                        DataError::InvalidParameter(format!(
                            "{var}={text:?} is not a positive integer"
                        ))
                    })?;
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
    ) -> Result<(), DataError> {
        let limit = (self.max_dimension, MAX_DIMENSION_ENV);
        check(path, line, what, value, limit)
    }

    /// Checks a bag-of-words document count against [`Self::max_documents`].
    pub(crate) fn check_documents(
        &self,
        path: &Path,
        line: usize,
        n: u64,
    ) -> Result<(), DataError> {
        let limit = (self.max_documents, MAX_DOCUMENTS_ENV);
        check(path, line, "document count D", n, limit)
    }

    /// Checks a running token total against [`Self::max_tokens`].
    pub(crate) fn check_tokens(&self, path: &Path, line: usize, n: u64) -> Result<(), DataError> {
        let limit = (self.max_tokens, MAX_TOKENS_ENV);
        check(path, line, "corpus size in tokens", n, limit)
    }
}

/// `value` against `(limit, the variable that sets it)`.
fn check(
    path: &Path,
    line: usize,
    what: &str,
    value: u64,
    (limit, knob): (u64, &'static str),
) -> Result<(), DataError> {
    if value > limit {
        return Err(DataError::LimitExceeded {
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
