//! [`MlError`]: the crate's one error type, what every loader, generator, data set, model
//! file, optimiser step, run output and topic-count check fails with. Each variant names
//! what was wrong; the ones with an I/O or decoder cause keep it as `source()`.

use std::path::{Path, PathBuf};

use crate::data::limits;
use crate::model::{MODEL_FORMAT, MODEL_VERSION};

/// Any error of `petrel_ml`.
#[derive(Debug, thiserror::Error)]
pub enum MlError {
    // Data loaders and generators (`data`).
    /// A data file could not be opened or read.
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
    /// An id or size in the input is larger than [`crate::data::DataLimits`] allows.
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
    /// An id or dimension is larger than its input's size allows
    /// ([`crate::data::limits::size_bound`]).
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
    /// A source read twice read differently the second time ([`crate::data::ReadDigest`]).
    #[error("{path} changed while it was read")]
    ChangedWhileRead {
        /// The file.
        path: PathBuf,
    },

    // DNN data sets: IDX and CIFAR-10 files (each naming the file) and generator
    // arguments (`dnn::data`, `dnn::cifar`).
    /// A data set file could not be read or written.
    #[error("{}: cannot read/write: {source}", .path.display())]
    DatasetIo {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with the expected IDX magic number.
    #[error("{}: bad magic number {found:#010x}, expected {expected:#010x}", .path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic number of this kind of file.
        expected: u32,
        /// The one found.
        found: u32,
    },
    /// A data set file ends before its header or data does.
    #[error("{}: truncated {what}: need {expected} bytes, file has {found}", .path.display())]
    DatasetTruncated {
        /// The file.
        path: PathBuf,
        /// The part that is cut short.
        what: &'static str,
        /// Bytes needed.
        expected: usize,
        /// Bytes present.
        found: usize,
    },
    /// Dimensions that do not fit (wrong rank, overflow, mismatched lengths).
    #[error("{}: dimension mismatch: {detail}", .path.display())]
    Dimension {
        /// The file.
        path: PathBuf,
        /// What does not fit.
        detail: String,
    },
    /// An images file and a labels file of different lengths.
    #[error(
        "{} has {n_images} images but {} has {n_labels} labels",
        .images.display(),
        .labels.display()
    )]
    CountMismatch {
        /// The images file.
        images: PathBuf,
        /// The labels file.
        labels: PathBuf,
        /// Images in it.
        n_images: usize,
        /// Labels in it.
        n_labels: usize,
    },
    /// A label not below the number of classes.
    #[error("{}: label {label} at index {index} is not below {classes} classes", .path.display())]
    LabelOutOfRange {
        /// The labels file.
        path: PathBuf,
        /// The example.
        index: usize,
        /// Its label.
        label: usize,
        /// Classes expected.
        classes: usize,
    },
    /// A record of a header-less format (CIFAR-10 binary) that is cut short or invalid.
    #[error("{}: bad record at byte offset {offset}: {detail}", .path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// Byte offset of the record's start.
        offset: u64,
        /// What is wrong with it.
        detail: String,
    },
    /// A synthetic generator got impossible arguments.
    #[error("invalid generator argument: {0}")]
    InvalidArgument(String),

    // The optimiser (`dnn::optim`): caller mistakes.
    /// A flat parameter / gradient / velocity had the wrong number of elements.
    #[error("parameter tensor {index} ({name}): expected {expected} elements, got {got}")]
    ParamLength {
        /// The tensor's index in the network.
        index: usize,
        /// The tensor's name.
        name: String,
        /// Its element count.
        expected: usize,
        /// The elements given.
        got: usize,
    },

    // Why a saved model cannot be used (`model`).
    /// The model file could not be read.
    #[error("model file {}: {source}", path.display())]
    ModelIo {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The model file ends early (an interrupted copy or write).
    #[error("model file {} is truncated: {source}", path.display())]
    ModelTruncated {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The file is not a petrel model of this version's layout.
    #[error("model file {} is not a petrel model: {source}", path.display())]
    NotAModel {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The model file's format field is not [`MODEL_FORMAT`].
    #[error("model file {}: format {found:?} is not {MODEL_FORMAT:?}", path.display())]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// Its format field.
        found: String,
    },
    /// The model file was written by another version of petrel.
    #[error("model file {}: version {found} is not supported (this petrel reads version {MODEL_VERSION}); retrain the model", path.display())]
    WrongVersion {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The model was trained by another app.
    #[error("model file {} was trained by `{found}`, not `{expected}`; use `petrel eval {found} ...`", path.display())]
    WrongApp {
        /// The file.
        path: PathBuf,
        /// The app that trained it.
        found: String,
        /// The app asked for.
        expected: String,
    },
    /// The model's parameters do not fit together (a row of the wrong width, ...).
    #[error("model file {}: {reason}", path.display())]
    InconsistentModel {
        /// The file.
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },

    // Why data does not fit a model (`model`).
    /// The data file's content does not fit the model, or holds nothing to evaluate or
    /// predict.
    #[error("{}: {reason}", path.display())]
    DoesNotFitModel {
        /// The data file.
        path: PathBuf,
        /// What does not fit or is missing.
        reason: String,
    },
    /// A user asked for is not in the model.
    #[error("user {0:?} is not in the model (it had no training ratings)")]
    UnknownUser(String),

    // Why a run's outputs were not written (`job`).
    /// A figure became NaN or infinite; nothing was written.
    #[error("the run diverged: {figure} became {value} at step {step}; {advice}")]
    Diverged {
        /// The figure.
        figure: String,
        /// Its value.
        value: f64,
        /// The step where it happened.
        step: u64,
        /// What to change (the app's advice, e.g. a smaller learning rate).
        advice: String,
    },
    /// An output file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS or encoder error.
        #[source]
        source: std::io::Error,
    },

    // A document's topic counts disagree with its token assignments, a sampler bug
    // (`topic::check_doc_counts`).
    /// The counts do not sum to the document's length.
    #[error("worker {worker} doc {doc}: counts sum {counted} != {tokens} tokens")]
    DocCountTotal {
        /// The worker.
        worker: usize,
        /// The document (worker-local index).
        doc: usize,
        /// The sum of the counts.
        counted: u64,
        /// The document's tokens.
        tokens: usize,
    },
    /// One topic's count differs from the assignments.
    #[error("worker {worker} doc {doc} topic {topic}: {counted} != {assigned}")]
    DocTopicCount {
        /// The worker.
        worker: usize,
        /// The document.
        doc: usize,
        /// The topic.
        topic: u32,
        /// Its count.
        counted: u32,
        /// Tokens assigned to it.
        assigned: u32,
    },
}

impl MlError {
    /// [`MlError::Malformed`] at `path:line`.
    pub(crate) fn malformed(path: &Path, line: usize, message: impl Into<String>) -> Self {
        MlError::Malformed {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    /// [`MlError::Io`] on the data file `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        MlError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// [`MlError::DoesNotFitModel`]: the data file `path` does not fit the model.
    pub(crate) fn does_not_fit(path: &Path, reason: impl Into<String>) -> Self {
        let (path, reason) = (path.to_path_buf(), reason.into());
        MlError::DoesNotFitModel { path, reason }
    }
}
