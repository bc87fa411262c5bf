//! shoal: an embedded vector-search engine that answers many concurrent
//! single-vector searches with shared scans.
//!
//! This layer is the foundation: versioned on-disk datasets
//! ([`Dataset`]), ingest, SQL filters, and exact search shared over a batch
//! with a register-tiled, batch-invariant SIMD kernel.
//!
//! ```no_run
//! use shoal::{BatchQuery, Dataset, Query};
//! let ds = Dataset::open("data/demo")?;
//! let one = ds.search(&Query::new(vec![0.0; 32], 10))?;
//! let many = ds.search_batch(&BatchQuery::new(vec![vec![0.0; 32]; 8], 10))?;
//! # Ok::<(), shoal::Error>(())
//! ```

pub mod config;
pub mod db;
pub mod demo;
pub mod error;
pub mod exec;
pub mod index;
pub mod kernel;
pub mod query;
pub mod storage;

pub use config::Config;
pub use db::{Dataset, Session};
pub use error::{Error, ErrorKind, Result};
pub use exec::CancelToken;
pub use kernel::Metric;
pub use query::{
    BatchQuery, FilterMode, Hit, PerQuery, Query, ScalarValue, SearchMode, SearchResults,
};
pub use storage::{ColumnType, Schema};
