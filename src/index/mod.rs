//! Vector index structures: k-means, IVF segments, PQ and SQ quantizers,
//! partition files and the partition cache.

pub mod cache;
pub mod ivf;
pub mod kmeans;
pub mod partition;
pub mod pq;
pub mod sq;

pub use cache::PartitionCache;
pub use ivf::{IndexKind, IndexParams, IndexSegmentMeta};
