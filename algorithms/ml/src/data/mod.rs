//! Data loaders (LIBSVM, ratings, UCI bag-of-words) and seeded synthetic generators.
//!
//! Malformed input is an [`MlError`] naming the source and line, never a panic; what a
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

use std::path::Path;

use crate::MlError;

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

/// The cores a loader parses a file of `bytes` bytes on (the cores available, or one for a
/// file too small to split).
pub fn parse_threads(bytes: u64) -> usize {
    text::Split::current().threads_for(bytes)
}

/// Opens `path` for buffered reading, mapping the error to [`MlError::Io`].
pub(crate) fn open_buffered(path: &Path) -> Result<std::io::BufReader<std::fs::File>, MlError> {
    std::fs::File::open(path)
        .map(std::io::BufReader::new)
        .map_err(|e| MlError::io(path, e))
}

#[cfg(test)]
mod chunk_tests;

#[cfg(test)]
pub(crate) mod testing {
    //! Fixtures shared by the loaders' tests.

    use super::MlError;
    use std::path::{Path, PathBuf};

    /// The line of an [`MlError::Malformed`]; panics on any other error.
    pub fn line_of(err: MlError) -> usize {
        match err {
            MlError::Malformed { line, .. } => line,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    /// `(kind, line, value, bound)` of a size refused by [`MlError::LimitExceeded`]
    /// (`"limit"`, bound: the limit) or [`MlError::TooLargeForInput`] (`"input"`, bound:
    /// the input's bytes); panics on any other error.
    pub fn refused(err: &MlError) -> (&'static str, usize, u64, u64) {
        match *err {
            MlError::LimitExceeded {
                line, value, limit, ..
            } => ("limit", line, value, limit),
            MlError::TooLargeForInput {
                line, value, bytes, ..
            } => ("input", line, value, bytes),
            ref other => panic!("expected a refused size, got {other:?}"),
        }
    }

    /// Mostly `good`, sometimes `odd` (strings of either regex).
    pub fn mostly(good: &str, odd: &str) -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::string::string_regex;
        proptest::prop_oneof![
            4 => string_regex(good).unwrap(),
            1 => string_regex(odd).unwrap(),
        ]
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
        visit: impl FnMut(f32, &super::SparseRow) -> Result<(), MlError>,
    ) -> Result<(), MlError> {
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
