//! The database facade: a [`Session`] (one per process: caches, scan pool,
//! config) and the [`Dataset`] handles opened in it (open, create, append,
//! delete, index, search).

pub mod dataset;
pub mod ingest;
pub mod session;

pub use dataset::{
    Cleanup, Commit, Dataset, IntoRecordBatch, PrewarmPartitions, PrewarmReport, RowValues, Split,
    StagedCommit, VersionInfo, ORPHAN_MIN_AGE,
};
pub use session::Session;
