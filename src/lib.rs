//! shoal: an embedded vector-search engine that answers many concurrent
//! single-vector searches with shared scans.
//!
//! A [`Dataset`] is a versioned directory of Arrow data: append record
//! batches, delete by SQL filter, build an IVF index (IVF_FLAT, IVF_PQ,
//! IVF_SQ), and search it — one [`Query`], or a [`BatchQuery`] scored in one
//! shared scan with a batch-invariant SIMD kernel. Datasets opened in one
//! [`Session`] share its memory-bounded caches and scan threads.
//!
//! The [`Engine`] serves datasets to many concurrent async callers: each
//! awaits one search, and the engine gathers concurrent searches of the
//! same version, column and metric into one shared scan (each query keeps
//! its own filter, k and options), handing each caller exactly the rows it
//! would have got alone. With the `server` feature (on by default),
//! `shoal::http` serves an engine as a JSON API (`shoal serve`).
//!
//! ```no_run
//! use shoal::{BatchQuery, Dataset, Query};
//! let ds = Dataset::open("data/demo")?;
//! let one = ds.search(&Query::new(vec![0.0; 128], 10).filter("len < 20"))?;
//! println!("{} rows from version {}", one.hits.len(), one.version);
//! let many = ds.search_batch(&BatchQuery::new(vec![vec![0.0; 128]; 8], 10))?;
//! assert_eq!(many.hits.len(), 8); // by query index
//! # Ok::<(), shoal::Error>(())
//! ```
//!
//! ```no_run
//! # async fn run() -> shoal::Result<()> {
//! use shoal::{Config, Engine, Query};
//! let engine = Engine::start(Config::default(), "data")?; // inside a tokio runtime
//! let demo = engine.dataset("demo").await?;                // cheap to clone
//! let response = demo.search(&Query::new(vec![0.0; 128], 10)).await?; // coalesced
//! println!("{} rows, batch of {}", response.hits.len(), response.batch.size);
//! engine.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! `ARCHITECTURE.md` in the repository has the layers, the data flow and
//! the on-disk format.

#![warn(missing_docs)]

mod cancel;
pub mod config;
mod db;
pub mod demo;
mod error;
mod exec;
#[cfg(feature = "server")]
pub mod http;
mod index;
#[doc(hidden)]
pub mod kernel;
mod progress;
mod query;
mod serve;
mod storage;
mod sync;

/// The Arrow crates shoal reads and writes ([`RecordBatch`](arrow_array::RecordBatch)
/// in, schemas), re-exported so that a program uses the same versions.
pub use arrow_array;
/// See [`arrow_array`].
pub use arrow_schema;
/// The `object_store` crate shoal is built with (for
/// [`Session::register_object_store`]).
pub use object_store;

pub use cancel::CancelToken;
pub use config::{Config, FragmentLayout};
pub use db::{
    Cleanup, Commit, Dataset, IntoRecordBatch, PrewarmPartitions, PrewarmReport, RowValues,
    Session, Split, StagedCommit, VersionInfo, ORPHAN_MIN_AGE,
};
pub use error::{Error, ErrorKind, Result};
pub use exec::{Profile, ScanPool};
pub use index::{IndexKind, IndexParams, IndexSegmentMeta};
pub use kernel::Metric;
pub use progress::Progress;
pub use query::{
    merge_split_hits, BatchInfo, BatchQuery, FilterMode, Hit, Nprobes, PerQuery, PerQueryParams,
    Query, ScalarValue, SearchMode, SearchResponse, SearchResults, SharedParams,
};
pub use serve::{
    BlockingDataset, BlockingEngine, DatasetHandle, Engine, EngineStats, HistogramSnapshot,
};
pub use storage::{
    Column, ColumnType, DiskCache, FragmentMeta, Manifest, Schema, StorageIo, ID_COLUMN,
};

/// Reading input files into datasets: `.fvecs`, `.npy`, Parquet and JSON
/// Lines, streamed in chunks and committed as one version.
pub mod ingest {
    pub use crate::db::ingest::{ingest, IngestReport};
    pub use crate::storage::input::{
        read_ivecs, read_vectors, write_fvecs, write_ivecs, Format, IngestOptions,
    };
}

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Internals that the binary, the integration tests and the loom models
/// drive directly (the kernel benchmarks, a delta segment compared with a
/// fresh segment built from the same model, the concurrency core). Not
/// part of the API: anything here may change without notice.
#[doc(hidden)]
pub mod internals {
    pub use crate::exec::ann::IndexView;
    pub use crate::exec::plan::execute;
    pub use crate::exec::pool::{run_shared, Helper};
    pub use crate::index::cache::{LoadPermit, LoadPermits};
    pub use crate::index::ivf::{build_segment, LoadedSegment};
    pub use crate::index::{CacheCounters, PartitionCache};
    pub use crate::query::validated::ValidatedBatch;
    pub use crate::serve::budget::{BudgetPermit, MemoryBudget};
    pub use crate::serve::coalescer::core::{
        split_at_start, Batch, CoalescerCore, CoreSettings, FlushReason, Pending, Refusal,
        StartSplit,
    };
    pub use crate::serve::dataset_names_in;
    pub use crate::serve::reply::{
        cancel_when_all_gone, reply_channel, ReplyReceiver, ReplySender, SenderGone,
    };
    pub use crate::storage::{ColumnCache, DatasetRoot, FragmentView, Remote};
}
