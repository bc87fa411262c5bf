//! The one error type of shoal.
//!
//! Every variant belongs to exactly one [`ErrorKind`] (bad input, not
//! found, conflict, overloaded, cancelled, deadline, internal), given by the
//! exhaustive match in [`Error::kind`]: a new variant does not compile until
//! it is classified, so it cannot fall into the wrong HTTP status silently.
//! The enum is `#[non_exhaustive]` so variants can be added without breaking
//! users who match on it. Errors are `Clone` so that one batch-wide failure
//! can be fanned out to every caller of the batch.

use std::path::PathBuf;
use std::sync::Arc;

/// The class of an [`Error`]: what the caller can do about it (and the
/// HTTP status family it maps to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request or input is wrong; retrying it unchanged fails again (400).
    InvalidInput,
    /// A dataset, version or column the caller named does not exist (404).
    NotFound,
    /// Another writer won, or the target already exists (409).
    Conflict,
    /// The service is too busy to take the request now; retry later (503).
    Overloaded,
    /// The caller (or shutdown) cancelled the request.
    Cancelled,
    /// The request's deadline passed before it could run (504).
    DeadlineExceeded,
    /// Object storage could not be reached or refused shoal's credentials;
    /// nothing was changed, and retrying later may succeed (503).
    Unavailable,
    /// shoal or its storage failed: I/O, corruption, a bug (500).
    Internal,
}

/// Everything that can go wrong in shoal.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A query or input vector has the wrong number of dimensions.
    #[error("vector has dimension {got}, but column '{column}' has dimension {expected}")]
    DimensionMismatch {
        /// The vector column.
        column: String,
        /// Its dimension.
        expected: usize,
        /// The vector's length.
        got: usize,
    },
    /// A vector contains NaN or an infinite value.
    #[error("{what} contains a non-finite value (NaN or infinity) at position {position}")]
    NonFinite {
        /// Which vector (`query vector 3`, a row of an input file).
        what: String,
        /// The offending coordinate.
        position: usize,
    },
    /// A request is malformed in a way not covered by a more specific variant.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A configured limit was exceeded (k, batch size, payload, ...).
    #[error("{what} is {value}, above the configured maximum of {max}")]
    LimitExceeded {
        /// What was too large (`k`, `batch size`, ...).
        what: &'static str,
        /// The value asked for.
        value: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A column named by the user does not exist.
    #[error("unknown column '{name}'{}", available_hint(.available))]
    UnknownColumn {
        /// The name asked for.
        name: String,
        /// The columns there are.
        available: Vec<String>,
    },
    /// A column exists but has the wrong type for the requested use.
    #[error("column '{name}' is {actual}, expected {expected}")]
    WrongColumnType {
        /// The column.
        name: String,
        /// The type the use needs.
        expected: String,
        /// The column's type.
        actual: String,
    },
    /// A filter expression failed to parse or type-check.
    #[error("bad filter: {message}")]
    Filter {
        /// What is wrong, and where.
        message: String,
    },
    /// The dataset directory does not exist.
    #[error("no dataset at {0}")]
    DatasetNotFound(PathBuf),
    /// The directory exists but is not a shoal dataset.
    #[error("{0} is not a shoal dataset (no _versions/ directory with a manifest)")]
    NotADataset(PathBuf),
    /// A dataset already exists where one is to be created.
    #[error("a dataset already exists at {0}")]
    DatasetExists(PathBuf),
    /// The requested version does not exist.
    #[error("version {requested} does not exist (latest is {latest})")]
    VersionNotFound {
        /// The version asked for.
        requested: u64,
        /// The newest version there is.
        latest: u64,
    },
    /// Another writer committed the same version first; nothing was written.
    #[error("commit conflict: version {version} was committed by another writer; reopen the dataset and retry")]
    CommitConflict {
        /// The version both writers tried to commit.
        version: u64,
    },
    /// Data appended does not fit the dataset's schema.
    #[error("schema mismatch: {0}")]
    SchemaMismatch(String),
    /// An input file is truncated or malformed; the message says where.
    #[error("malformed input {path}: {message}")]
    MalformedInput {
        /// The input file.
        path: PathBuf,
        /// What is wrong, and where in the file.
        message: String,
    },
    /// An on-disk file of the dataset is damaged.
    #[error("corrupt dataset file {path}: {message}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An operating-system I/O error.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// An error from the Arrow or Parquet libraries.
    #[error("arrow/parquet error: {0}")]
    Arrow(String),
    /// The search was cancelled (its caller went away, or it was asked to
    /// stop); nothing of it is kept.
    #[error("search cancelled")]
    Cancelled,
    /// The engine is too busy to take the request now (its queue or memory
    /// budget is full); retrying later may succeed.
    #[error("overloaded: {0}; retry later")]
    Overloaded(String),
    /// The request's deadline passed before its scan started.
    #[error(
        "deadline exceeded: the search waited {waited_ms} ms, its deadline was {deadline_ms} ms"
    )]
    DeadlineExceeded {
        /// How long the search waited.
        waited_ms: u64,
        /// Its deadline.
        deadline_ms: u64,
    },
    /// The engine is shutting down and takes no new requests.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// Object storage could not be reached, or refused the request (a
    /// missing bucket, denied credentials, a timed-out or interrupted
    /// transfer), after the configured retries. Nothing was changed: a
    /// write that fails here commits nothing.
    #[error("storage unavailable at {url}: {message}")]
    StorageUnavailable {
        /// The dataset or object URL.
        url: String,
        /// What the store answered.
        message: String,
    },
    /// A bug: an invariant of shoal itself did not hold.
    #[error("internal error: {0}")]
    Internal(String),
}

fn available_hint(available: &[String]) -> String {
    if available.is_empty() {
        String::new()
    } else {
        format!(" (columns: {})", available.join(", "))
    }
}

impl Error {
    /// The class of this error. Exhaustive on purpose: every new variant
    /// must be placed here.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::DimensionMismatch { .. }
            | Error::NonFinite { .. }
            | Error::InvalidArgument(_)
            | Error::LimitExceeded { .. }
            | Error::UnknownColumn { .. }
            | Error::WrongColumnType { .. }
            | Error::Filter { .. }
            | Error::NotADataset(_)
            | Error::SchemaMismatch(_)
            | Error::MalformedInput { .. } => ErrorKind::InvalidInput,
            Error::DatasetNotFound(_) | Error::VersionNotFound { .. } => ErrorKind::NotFound,
            Error::DatasetExists(_) | Error::CommitConflict { .. } => ErrorKind::Conflict,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Overloaded(_) | Error::ShuttingDown => ErrorKind::Overloaded,
            Error::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
            Error::StorageUnavailable { .. } => ErrorKind::Unavailable,
            Error::Io { .. } | Error::Corrupt { .. } | Error::Arrow(_) | Error::Internal(_) => {
                ErrorKind::Internal
            }
        }
    }

    /// True when the caller caused the error (4xx), false for server-side
    /// failures (5xx) and for cancellation.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::InvalidInput | ErrorKind::NotFound | ErrorKind::Conflict
        )
    }

    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// A malformed-input error for `path`.
    pub fn malformed(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::MalformedInput {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A corruption error for `path`.
    pub fn corrupt(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::Arrow(e.to_string())
    }
}

impl From<parquet::errors::ParquetError> for Error {
    fn from(e: parquet::errors::ParquetError) -> Self {
        Error::Arrow(e.to_string())
    }
}

/// Shorthand for results in shoal.
pub type Result<T, E = Error> = std::result::Result<T, E>;
