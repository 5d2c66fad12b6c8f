//! Data loaders (LIBSVM, ratings, UCI bag-of-words) and seeded synthetic generators.
//!
//! Malformed input is a [`DataError`] naming the source and line, never a panic; what a
//! loader allocates is bounded by the input and [`DataLimits`]. Files are parsed in
//! parallel chunks with a line-by-line reader's results (`text`), once per process and file
//! version ([`cache`]).

pub mod bow;
pub mod cache;
pub mod digest;
pub mod libsvm;
pub mod limits;
pub mod ratings;
pub mod synthetic;
pub(crate) mod text;

#[cfg(test)]
mod chunk_tests;

#[cfg(test)]
pub(crate) mod testing {
    //! Fixtures shared by the loaders' tests.

    use super::DataError;
    use std::path::{Path, PathBuf};

    /// The line of a [`DataError::Malformed`]; panics on any other error.
    pub fn line_of(err: DataError) -> usize {
        match err {
            DataError::Malformed { line, .. } => line,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    /// `(kind, line, value, bound)` of a size refused by [`DataError::LimitExceeded`]
    /// (`"limit"`, bound: the limit) or [`DataError::TooLargeForInput`] (`"input"`, bound:
    /// the input's bytes); panics on any other error.
    pub fn refused(err: &DataError) -> (&'static str, usize, u64, u64) {
        match *err {
            DataError::LimitExceeded {
                line, value, limit, ..
            } => ("limit", line, value, limit),
            DataError::TooLargeForInput {
                line, value, bytes, ..
            } => ("input", line, value, bytes),
            ref other => panic!("expected a refused size, got {other:?}"),
        }
    }

    /// Writes `contents` to `dir/name` and returns that path.
    pub fn write_in(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// Streams the rows of LIBSVM `text` to `visit` as a reader of unknown size is read.
    pub fn stream_libsvm(
        text: &str,
        name: &str,
        limits: &super::DataLimits,
        visit: impl FnMut(f32, &super::SparseRow) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let (name, size) = (Path::new(name), super::limits::SizeRule::new(None)?);
        let mut source = super::text::ReaderBlocks::new(text.as_bytes(), name);
        super::libsvm::stream_rows(&mut source, name, limits, size, visit)
    }

    /// Sets the disk cache of this thread's loads (`None`: the environment's).
    pub fn use_disk_cache(enabled: Option<bool>) {
        let cache = enabled.map(|enabled| super::cache::DiskCache {
            enabled,
            min_bytes: 0,
        });
        super::cache::TEST_CACHE.with(|c| c.set(cache));
    }
}

use std::path::{Path, PathBuf};

pub use bow::{
    Corpus, CorpusStats, load_bow, load_bow_digested, parse_docword, parse_docword_with_limits,
    parse_vocab,
};
pub use digest::ReadDigest;
pub use libsvm::{
    LibsvmFile, SparseColumns, SparseDataset, SparseRow, load_libsvm, load_libsvm_shared,
    parse_libsvm, parse_libsvm_with_limits, visit_libsvm,
};
pub use limits::DataLimits;
pub use ratings::{
    HeldOutMask, IdMapping, Ratings, load_labelled_ratings, load_ratings, parse_matrix_market,
    parse_matrix_market_with_limits, parse_triplets, scan_ratings,
};

/// Errors of every loader and generator in this module.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The data does not fit a saved model.
    #[error(transparent)]
    DoesNotFitModel(#[from] crate::model::ModelDataError),
    /// The file could not be opened or read.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The content does not follow the format (`line`: 1-based, the last for a problem
    /// found at the end).
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file (or source name).
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An id or size in the input is larger than [`DataLimits`] allows.
    #[error(
        "{path}:{line}: {what} {value} exceeds the limit {limit} (raise it with the environment variable {knob})"
    )]
    LimitExceeded {
        /// The file (or source name).
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// Which value ("feature index", "vocabulary size W", ...).
        what: String,
        /// The value read.
        value: u64,
        /// The limit in force.
        limit: u64,
        /// The environment variable that sets the limit.
        knob: &'static str,
    },
    /// An id or dimension is larger than its input's size allows ([`limits::size_bound`]).
    #[error(
        "{path}:{line}: {what} {value} is more than {bytes} bytes of input may declare (at most {bound}; raise the allowance with the environment variable {knob})",
        knob = limits::DIMENSION_ALLOWANCE_ENV
    )]
    TooLargeForInput {
        /// The file (or source name).
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// Which value ("feature index", "row count", ...).
        what: String,
        /// The value read.
        value: u64,
        /// The input's size in bytes (or what had been read of it).
        bytes: u64,
        /// The bound for that size.
        bound: u64,
    },
    /// A caller-supplied parameter is out of range (e.g. a test fraction of 1.5).
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// A source read twice read differently the second time ([`ReadDigest`]).
    #[error("{path} changed while it was read")]
    ChangedWhileRead {
        /// The file.
        path: PathBuf,
    },
}

impl DataError {
    pub(crate) fn malformed(path: &Path, line: usize, message: impl Into<String>) -> Self {
        DataError::Malformed {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Opens `path` for buffered reading, mapping the error to [`DataError::Io`].
pub(crate) fn open_buffered(path: &Path) -> Result<std::io::BufReader<std::fs::File>, DataError> {
    std::fs::File::open(path)
        .map(std::io::BufReader::new)
        .map_err(|e| DataError::io(path, e))
}
