//! shoal: an embedded vector-search engine that answers many concurrent
//! single-vector searches with shared scans.
//!
//! What is here: versioned on-disk datasets ([`Dataset`]) with ingest, SQL
//! filters and deletions; exact search and IVF_FLAT / IVF_PQ / IVF_SQ
//! indexes searched by a shared scan over the batch with a register-tiled,
//! batch-invariant SIMD kernel; and one [`Session`] per process holding the
//! memory-bounded partition and column caches, the scan pool and the
//! config. A running search can be stopped with a [`CancelToken`].
//!
//! The [`Engine`] serves datasets to many concurrent async callers: each
//! awaits one search, and the engine gathers concurrent searches that share
//! their parameters into one shared scan, handing each caller exactly the
//! rows it would have got alone. [`http`] serves an engine as a JSON API
//! (`shoal serve`). `ARCHITECTURE.md` has the layers, the data flow and the
//! on-disk format.
//!
//! ```no_run
//! use shoal::{BatchQuery, Dataset, Query};
//! let ds = Dataset::open("data/demo")?;
//! let one = ds.search(&Query::new(vec![0.0; 32], 10))?;
//! let many = ds.search_batch(&BatchQuery::new(vec![vec![0.0; 32]; 8], 10))?;
//! # Ok::<(), shoal::Error>(())
//! ```
//!
//! ```no_run
//! # async fn run() -> shoal::Result<()> {
//! use shoal::{Config, Engine, Query};
//! let engine = Engine::start(Config::default(), "data")?; // inside a tokio runtime
//! let demo = engine.dataset("demo").await?;                // cheap to clone
//! let response = demo.search(Query::new(vec![0.0; 32], 10)).await?; // coalesced
//! println!("{} rows, batch of {}", response.hits.len(), response.batch.size);
//! engine.shutdown().await;
//! # Ok(())
//! # }
//! ```

pub mod config;
pub mod db;
pub mod demo;
pub mod error;
pub(crate) mod exec;
pub mod http;
pub mod index;
pub mod kernel;
pub mod query;
pub mod serve;
pub mod storage;
pub(crate) mod sync;

pub use config::Config;
pub use db::{Dataset, Session};
pub use error::{Error, ErrorKind, Result};
pub use exec::{CancelToken, Profile, ScanPool};
pub use index::{IndexKind, IndexParams, IndexSegmentMeta};
pub use kernel::Metric;
pub use query::{
    BatchQuery, FilterMode, Hit, Nprobes, PerQuery, PerQueryParams, Query, ScalarValue, SearchMode,
    SearchParams, SearchResults, SharedParams,
};
pub use serve::{
    BatchInfo, BlockingDataset, BlockingEngine, DatasetHandle, Engine, EngineStats, SearchResponse,
};
pub use storage::{ColumnType, Schema};

/// Internals that the integration tests and the loom models drive
/// directly (a delta segment compared with a fresh segment built from the
/// same model; the concurrency core). Not part of the API: anything here
/// may change without notice.
#[doc(hidden)]
pub mod internals {
    pub use crate::exec::ann::IndexView;
    pub use crate::exec::cancel::CancelToken;
    pub use crate::exec::plan::execute;
    pub use crate::exec::pool::{run_shared, Helper};
    pub use crate::index::cache::{LoadPermit, LoadPermits};
    pub use crate::index::ivf::{build_segment, LoadedSegment};
    pub use crate::query::request::ValidatedBatch;
    pub use crate::serve::budget::{BudgetPermit, MemoryBudget};
    pub use crate::serve::coalescer::core::{
        split_at_start, Batch, CoalescerCore, CoreSettings, FlushReason, Pending, Refusal,
        StartSplit,
    };
    pub use crate::serve::reply::{reply_channel, ReplyReceiver, ReplySender, SenderGone};
}
