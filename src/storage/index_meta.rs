//! What the manifest records of an index: its kind, build parameters and
//! segments. The index itself (training, files, search) is `index`; these
//! records live here because a version's manifest lists its segments.

use crate::kernel::Metric;
use serde::{Deserialize, Serialize};

/// Directory of index segments inside a dataset (one subdirectory each).
pub const INDICES_DIR: &str = "indices";

/// The type of an IVF index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum IndexKind {
    /// Float32 vectors per partition.
    IvfFlat,
    /// Residual product quantization with `sub_vectors` 8-bit codes.
    IvfPq {
        /// Number of sub-vectors (bytes per code); divides the dimension.
        sub_vectors: usize,
    },
    /// 8-bit scalar quantization per dimension.
    IvfSq,
    /// RaBitQ: a seeded random rotation, then `bits` bits per rotated
    /// dimension with per-row factors that make the code an estimator with
    /// an error bound.
    IvfRq {
        /// Bits per dimension, 1 to 8.
        bits: usize,
    },
    /// A graph (HNSW) over the rows' float32 vectors; searched by a walk
    /// of `ef` candidates, not by partitions.
    Hnsw {
        /// Neighbours a node keeps on the upper layers (twice that on
        /// layer 0).
        m: usize,
        /// Candidates kept while a row's neighbours are searched for.
        ef_construction: usize,
    },
}

impl IndexKind {
    /// RaBitQ bits per dimension when none are given.
    pub const DEFAULT_RQ_BITS: usize = 4;

    /// `hnsw`'s `m` when none is given.
    pub const DEFAULT_HNSW_M: usize = 16;
    /// `hnsw`'s `ef_construction` when none is given.
    pub const DEFAULT_EF_CONSTRUCTION: usize = 200;

    /// Whether this is a graph index (searched with `ef`) rather than an
    /// IVF index (searched with `nprobes`).
    pub fn is_graph(&self) -> bool {
        matches!(self, IndexKind::Hnsw { .. })
    }

    /// Short name (`ivf_flat`, `ivf_pq`, `ivf_sq`, `ivf_rq`, `hnsw`).
    pub fn name(&self) -> &'static str {
        match self {
            IndexKind::IvfFlat => "ivf_flat",
            IndexKind::IvfPq { .. } => "ivf_pq",
            IndexKind::IvfSq => "ivf_sq",
            IndexKind::IvfRq { .. } => "ivf_rq",
            IndexKind::Hnsw { .. } => "hnsw",
        }
    }
}

/// How to build an index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexParams {
    /// Index type.
    pub kind: IndexKind,
    /// Number of partitions (k-means centroids); not used by `hnsw`.
    pub partitions: usize,
    /// Training sample: at most this many rows per partition.
    pub sample_per_partition: usize,
    /// Lloyd iterations for centroids and codebooks.
    pub iterations: usize,
    /// Random seed (sampling, k-means++).
    pub seed: u64,
}

impl IndexParams {
    /// Defaults: 256-row sample per partition, 25 iterations, seed 42.
    pub fn new(kind: IndexKind, partitions: usize) -> Self {
        IndexParams {
            kind,
            partitions,
            sample_per_partition: 256,
            iterations: 25,
            seed: 42,
        }
    }
}

/// A segment as recorded in the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexSegmentMeta {
    /// Directory name under `indices/`.
    pub id: String,
    /// The vector column indexed.
    pub column: String,
    /// The metric the index was built for.
    pub metric: Metric,
    /// Build parameters.
    pub params: IndexParams,
    /// Fragments covered.
    pub fragments: Vec<u32>,
    /// Rows indexed.
    pub rows: u64,
    /// Segment whose model (centroids, quantizer) this one uses; its own id
    /// for a trained segment.
    pub trained_in: String,
}
