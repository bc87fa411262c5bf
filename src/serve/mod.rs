//! The engine: concurrent single-vector searches gathered into shared
//! scans, behind an async API.
//!
//! ```text
//! caller ── DatasetHandle::search ──▶ coalescer actor ──batch──▶ scanner ──▶ rows by query index
//!            validate, pin version     group by BatchKey,          blocking thread +
//!                                      flush on size / window /    scan pool, budget,
//!                                      free slot                   cancel when callers leave
//! ```
//!
//! Each caller gets exactly the rows [`Dataset::search`](crate::Dataset::search)
//! gives for its query alone; the batch only makes it cheaper.
//!
//! ```no_run
//! # async fn demo() -> shoal::Result<()> {
//! use shoal::{Config, Engine, Query};
//! let engine = Engine::start(Config::default(), "data/")?;
//! let demo = engine.dataset("demo").await?;
//! let answer = demo.search(&Query::new(vec![0.0; 128], 10)).await?;
//! println!("{} hits from a batch of {}", answer.hits.len(), answer.batch.size);
//! engine.shutdown().await;
//! # Ok(()) }
//! ```

mod blocking;
pub mod budget;
pub(crate) mod coalescer;
mod engine;
mod handle;
pub mod reply;
pub(crate) mod scanner;
pub mod stats;

pub use blocking::{BlockingDataset, BlockingEngine};
pub use engine::{dataset_names_in, Engine};
pub use handle::DatasetHandle;
pub use stats::{EngineStats, HistogramSnapshot};
