//! Vector index structures and the distance kernels they are scored with.

pub mod distance;

pub use distance::{Kernel, Metric, VectorBlocks};
