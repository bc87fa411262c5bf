//! Vector index structures and the distance kernels they are scored with.

pub mod cache;
pub mod distance;
pub mod ivf;
pub mod kmeans;
pub mod partition;
pub mod pq;
pub mod sq;

pub use cache::PartitionCache;
pub use distance::{Kernel, Metric, VectorBlocks};
pub use ivf::{IndexKind, IndexParams, IndexSegmentMeta};
