//! Vector index structures: k-means, IVF segments, PQ, SQ and RaBitQ quantizers,
//! partition files and the partition cache.

pub(crate) mod cache;
pub(crate) mod hnsw;
pub(crate) mod ivf;
pub(crate) mod kmeans;
pub(crate) mod partition;
pub(crate) mod pq;
pub(crate) mod rq;
pub(crate) mod sq;

pub use cache::{CacheCounters, PartitionCache};
pub use ivf::{IndexKind, IndexParams, IndexSegmentMeta};
