//! An `hnsw` index segment: the graph over the segment's rows, with the
//! rows' ids and float32 vectors, as files and in memory.
//!
//! ```text
//! indices/<segment-id>/hnsw.json    format, dim, rows, m; length + CRC-32 of the two files below
//! indices/<segment-id>/vectors.bin  row ids (u64 × rows), then the vectors (f32 × rows × dim), as stored
//! indices/<segment-id>/graph.bin    entry node, each node's top layer, layer-0 and upper-layer links
//! ```
//!
//! The walk reads 8-bit codes of the vectors kept here (not the
//! fragments'), quantized at load ([`super::codes`]), and the rerank the
//! vectors themselves, so that a search touches two contiguous arrays; the
//! rows' norms are computed at load by the FMA chain every kernel uses. A
//! loaded segment is one entry of the partition cache (partition 0 of the
//! segment's key), weighed by its bytes like any partition.

use super::codes::{walk_reads_codes, WalkCodes};
use super::graph::{HnswGraph, HnswParams, NodeDistance, Parallel};
use crate::error::{Error, Result};
use crate::index::cache::PartitionCache;
use crate::index::ivf::{for_each_visible, visible_rows};
use crate::index::partition::{Partition, Payload};
use crate::kernel::pair::{in_fours, prefetch, PairDot};
use crate::kernel::{fma_dot, Metric};
use crate::storage::checksum::{ChecksumWriter, FileChecksum};
use crate::storage::index_meta::{IndexKind, IndexParams, IndexSegmentMeta, INDICES_DIR};
use crate::storage::manifest::write_synced;
use crate::storage::{DatasetRoot, FragmentView};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The `hnsw.json` format this build writes and reads.
const HNSW_FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HnswDirectory {
    format: u32,
    dim: usize,
    rows: u64,
    m: usize,
    vectors: FileChecksum,
    graph: FileChecksum,
}

/// A loaded segment: what a walk reads.
#[derive(Debug)]
pub struct GraphBody {
    /// The graph over nodes `0..rows`.
    pub graph: HnswGraph,
    /// Dimension.
    pub dim: usize,
    /// Row-major vectors, node `i` at `i × dim`.
    pub vectors: Vec<f32>,
    /// ‖x‖² of each node's vector (the FMA chain).
    pub norms_sq: Vec<f32>,
    /// What a walk reads.
    pub walk: WalkReads,
}

/// What a walk reads: the rows' 8-bit codes (see [`super::codes`]), or
/// under `SHOAL_HNSW_WALK=f32` the float32 vectors.
#[derive(Debug)]
pub enum WalkReads {
    /// The codes, with what their distances are finished by.
    Codes(WalkCodes),
    /// The vectors, each row's distance finished by its scale: `1/‖x‖`
    /// under cosine (0 for a zero row), ‖x‖² otherwise (see
    /// [`WalkDistance::query_to_nodes`]).
    Floats {
        /// Per node.
        scale: Vec<f32>,
    },
}

impl GraphBody {
    /// Node `i`'s vector.
    #[inline(always)]
    pub fn vector(&self, i: u32) -> &[f32] {
        let at = i as usize * self.dim;
        &self.vectors[at..at + self.dim]
    }

    /// Bytes held in memory.
    pub fn size_bytes(&self) -> usize {
        self.graph.size_bytes()
            + 4 * (self.vectors.len() + self.norms_sq.len())
            + match &self.walk {
                WalkReads::Codes(codes) => codes.size_bytes(),
                WalkReads::Floats { scale } => 4 * scale.len(),
            }
    }
}

/// The distance a walk and a build use between a prepared query (or a
/// stored row) and a stored row: the estimate of [`PairDot`] finished by
/// the metric.
#[derive(Clone, Copy, Debug)]
pub struct WalkDistance {
    /// The metric.
    pub metric: Metric,
    /// The dot product's estimate.
    pub dot: PairDot,
}

impl WalkDistance {
    /// For `metric` on this CPU.
    pub fn new(metric: Metric) -> WalkDistance {
        WalkDistance {
            metric,
            dot: PairDot::detect(),
        }
    }

    /// A prepared query (normalised for cosine, `qn = ‖q‖²`) to each of
    /// `nodes`, four rows at a time (their loads overlap); a node's
    /// distance is the same in any group. An estimate for the walk: the
    /// dot product's lanes summed, and cosine by `1 − q·x · (1/‖x‖)`.
    /// `scale` is [`WalkReads::Floats`]'.
    #[allow(clippy::too_many_arguments)]
    pub fn query_to_nodes(
        self,
        body: &GraphBody,
        scale: &[f32],
        q: &[f32],
        qn: f32,
        nodes: &[u32],
        out: &mut [f32],
    ) {
        for &i in nodes {
            prefetch(body.vector(i));
        }
        let finish = |d: f32, i: u32| walk_finish(self.metric, d, qn, scale[i as usize]);
        in_fours(
            nodes,
            out,
            |g| {
                let d = self.dot.dot4(q, g.map(|i| body.vector(i)));
                [0, 1, 2, 3].map(|j| finish(d[j], g[j]))
            },
            |i| finish(self.dot.dot(q, body.vector(i)), i),
        );
    }

    /// Between two stored rows (symmetric), from their dot product's
    /// estimate and their *scales*: ‖x‖² for l2, `1/‖x‖` for cosine (0 for
    /// a zero row), unused for dot (see [`build_scale`]).
    #[inline(always)]
    fn finish_between(self, d: f32, sa: f32, sb: f32) -> f32 {
        match self.metric {
            Metric::L2 => ((sa + sb) - 2.0 * d).max(0.0),
            Metric::Cosine if sa > 0.0 && sb > 0.0 => 1.0 - d * sa * sb,
            Metric::Cosine => 1.0,
            Metric::Dot => -d,
        }
    }
}

/// A walk's estimated distance from a query's dot product `d` with a row
/// and the row's *scale* (‖x‖² for l2, `1/‖x‖` for cosine, unused for
/// dot): a multiply where `Metric::finish` divides by a square root (the
/// rerank finishes exactly).
#[inline(always)]
pub fn walk_finish(metric: Metric, d: f32, qn: f32, scale: f32) -> f32 {
    match metric {
        Metric::L2 => ((qn + scale) - 2.0 * d).max(0.0),
        Metric::Cosine => 1.0 - d * scale,
        Metric::Dot => -d,
    }
}

/// A row's scale in the build's distances (see
/// [`WalkDistance::finish_between`]): a multiply instead of a square root
/// and a division per pair under cosine.
fn build_scale(metric: Metric, norm_sq: f32) -> f32 {
    match metric {
        Metric::Cosine if norm_sq > 0.0 => 1.0 / norm_sq.sqrt(),
        Metric::Cosine => 0.0,
        _ => norm_sq,
    }
}

/// The build's distances between stored rows.
struct BuildDistance<'a> {
    distance: WalkDistance,
    vectors: &'a [f32],
    /// Each row's [`build_scale`].
    norms: &'a [f32],
    /// Each row's [`row_hash`], to tell exact copies apart cheaply.
    hashes: &'a [u64],
    dim: usize,
}

/// A hash of a row's bits: rows with different hashes are not copies.
fn row_hash(row: &[f32]) -> u64 {
    row.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl BuildDistance<'_> {
    #[inline(always)]
    fn row(&self, i: u32) -> &[f32] {
        &self.vectors[i as usize * self.dim..(i as usize + 1) * self.dim]
    }
}

impl NodeDistance for BuildDistance<'_> {
    fn between(&self, a: u32, b: u32) -> f32 {
        let d = self.distance.dot.dot(self.row(a), self.row(b));
        self.distance
            .finish_between(d, self.norms[a as usize], self.norms[b as usize])
    }

    fn same(&self, a: u32, b: u32) -> bool {
        self.hashes[a as usize] == self.hashes[b as usize] && self.row(a) == self.row(b)
    }

    fn between_many(&self, a: u32, nodes: &[u32], out: &mut [f32]) {
        for &b in nodes {
            prefetch(self.row(b));
        }
        let na = self.norms[a as usize];
        in_fours(
            nodes,
            out,
            |g| {
                let d = self.distance.dot.dot4(self.row(a), g.map(|b| self.row(b)));
                [0, 1, 2, 3].map(|j| {
                    self.distance
                        .finish_between(d[j], na, self.norms[g[j] as usize])
                })
            },
            |b| self.between(a, b),
        );
    }
}

/// The graph parameters of an `hnsw` index's build parameters.
pub fn graph_params(params: &IndexParams) -> Option<HnswParams> {
    match params.kind {
        IndexKind::Hnsw { m, ef_construction } => Some(HnswParams {
            m,
            ef_construction,
            seed: params.seed,
        }),
        _ => None,
    }
}

/// Builds an `hnsw` segment over the visible rows of `fragments` and
/// writes its files. Holds the rows' vectors and the graph in memory (the
/// graph takes `4 × 2m` bytes a row and a little more for upper layers).
/// `parallel` runs the build's chunks of neighbour searches (see
/// [`HnswGraph::build`]).
#[allow(clippy::too_many_arguments)]
pub fn build_hnsw_segment(
    root: &DatasetRoot,
    column: &str,
    dim: usize,
    metric: Metric,
    params: &IndexParams,
    fragments: &[FragmentView],
    parallel: Parallel<'_>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<IndexSegmentMeta> {
    let gparams = graph_params(params)
        .ok_or_else(|| Error::Internal(format!("{} is not an hnsw index", params.kind.name())))?;
    // Sized once: growing by doubling would hold up to twice the bytes.
    let expected = visible_rows(fragments);
    let mut row_ids: Vec<u64> = Vec::with_capacity(expected);
    let mut vectors: Vec<f32> = Vec::with_capacity(expected * dim);
    for_each_visible(fragments, column, dim, metric, |ids, rows| {
        row_ids.extend_from_slice(ids);
        vectors.extend_from_slice(rows);
        Ok(())
    })?;
    let n = row_ids.len();
    let norms: Vec<f32> = vectors
        .chunks_exact(dim)
        .map(|x| build_scale(metric, fma_dot(x, x)))
        .collect();
    let hashes: Vec<u64> = vectors.chunks_exact(dim).map(row_hash).collect();
    let distance = BuildDistance {
        distance: WalkDistance::new(metric),
        vectors: &vectors,
        norms: &norms,
        hashes: &hashes,
        dim,
    };
    let graph = HnswGraph::build(
        n,
        gparams,
        parallel,
        &mut |done| progress("hnsw graph", done, n),
        distance,
    )
    .map_err(Error::InvalidArgument)?;
    let id = format!("{}-{:016x}", params.kind.name(), rand::random::<u64>());
    let dir = root.join(INDICES_DIR).join(&id);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    // Streamed (the build's peak stays the vectors and the graph).
    let vpath = dir.join("vectors.bin");
    let vectors_sum = {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&vpath)
            .map_err(|e| Error::io(&vpath, e))?;
        let mut out = std::io::BufWriter::new(ChecksumWriter::new(file));
        let write = |out: &mut std::io::BufWriter<_>, bytes: &[u8]| {
            std::io::Write::write_all(out, bytes).map_err(|e| Error::io(&vpath, e))
        };
        for r in &row_ids {
            write(&mut out, &r.to_le_bytes())?;
        }
        for x in &vectors {
            write(&mut out, &x.to_le_bytes())?;
        }
        let (sum, file) = out
            .into_inner()
            .map_err(|e| Error::io(&vpath, e.into_error()))?
            .finish();
        file.sync_all().map_err(|e| Error::io(&vpath, e))?;
        sum
    };
    drop(vectors);
    let gbytes = graph.to_bytes();
    write_synced(&dir.join("graph.bin"), &gbytes)?;
    let directory = HnswDirectory {
        format: HNSW_FORMAT,
        dim,
        rows: n as u64,
        m: gparams.m,
        vectors: vectors_sum,
        graph: FileChecksum::of(&gbytes),
    };
    let json = serde_json::to_vec_pretty(&directory).map_err(|e| Error::Internal(e.to_string()))?;
    write_synced(&dir.join("hnsw.json"), &json)?;
    crate::storage::manifest::sync_dir(&dir)?;
    for file in ["vectors.bin", "graph.bin", "hnsw.json"] {
        root.wrote(&format!("{INDICES_DIR}/{id}/{file}"));
    }
    Ok(IndexSegmentMeta {
        id: id.clone(),
        column: column.to_string(),
        metric,
        params: params.clone(),
        fragments: fragments.iter().map(|f| f.meta.id).collect(),
        rows: n as u64,
        trained_in: id,
    })
}

/// An `hnsw` segment opened for search: its directory read and checked;
/// the graph and vectors load through the partition cache.
#[derive(Debug)]
pub struct HnswSegment {
    /// Manifest entry.
    pub meta: IndexSegmentMeta,
    /// Cache key (and the prefilter's key for the segment's rows).
    pub key: Arc<str>,
    root: DatasetRoot,
    directory: HnswDirectory,
}

impl HnswSegment {
    /// Opens `meta`'s directory file and holds it to the manifest and the
    /// column's dimension.
    pub fn open(root: &DatasetRoot, meta: &IndexSegmentMeta, dim: usize) -> Result<HnswSegment> {
        let dir = root.join(INDICES_DIR).join(&meta.id);
        let path = dir.join("hnsw.json");
        let bytes = root
            .read(&format!("{INDICES_DIR}/{}/hnsw.json", meta.id))?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::corrupt(&path, "index file is missing"),
                _ => Error::io(&path, e),
            })?;
        let directory: HnswDirectory =
            serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(&path, e.to_string()))?;
        if directory.format != HNSW_FORMAT {
            return Err(Error::corrupt(
                &path,
                format!(
                    "hnsw format {} is not supported by this build (reads {HNSW_FORMAT})",
                    directory.format
                ),
            ));
        }
        let m = graph_params(&meta.params).map(|p| p.m);
        if directory.dim != dim || directory.rows != meta.rows || m != Some(directory.m) {
            return Err(Error::corrupt(
                &path,
                "dimension, rows or m differ from the manifest's",
            ));
        }
        Ok(HnswSegment {
            meta: meta.clone(),
            key: Arc::from(dir.to_string_lossy().as_ref()),
            root: root.clone(),
            directory,
        })
    }

    /// Rows in the segment.
    pub fn rows(&self) -> usize {
        self.directory.rows as usize
    }

    /// The graph, ids and vectors, through `cache` (read and checked on a
    /// miss), with the bytes read on a miss.
    pub fn load(&self, cache: &PartitionCache) -> Result<(Arc<Partition>, Option<u64>)> {
        cache.get((self.key.clone(), 0), || self.read())
    }

    fn read(&self) -> Result<(Partition, u64)> {
        let d = &self.directory;
        let file = |name: &str, sum: &FileChecksum| -> Result<Vec<u8>> {
            let path = self.root.join(INDICES_DIR).join(&self.meta.id).join(name);
            let bytes = self
                .root
                .read(&format!("{INDICES_DIR}/{}/{name}", self.meta.id))?
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Error::corrupt(&path, "index file is missing"),
                    _ => Error::io(&path, e),
                })?;
            sum.check_bytes(&path, &bytes)?;
            Ok(bytes)
        };
        if let Some(remote) = self.root.remote_side() {
            // Both downloads at once.
            let rel = |name: &str| format!("{INDICES_DIR}/{}/{name}", self.meta.id);
            remote.prefetch_files(&[&rel("vectors.bin"), &rel("graph.bin")], &[])?;
        }
        let n = self.rows();
        let vbytes = file("vectors.bin", &d.vectors)?;
        let vpath = self
            .root
            .join(INDICES_DIR)
            .join(&self.meta.id)
            .join("vectors.bin");
        if vbytes.len() != n * (8 + 4 * d.dim) {
            return Err(Error::corrupt(
                &vpath,
                "length differs from rows × (8 + 4 × dim)",
            ));
        }
        let (ids, floats) = vbytes.split_at(n * 8);
        let row_ids: Vec<u64> = ids
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let vectors: Vec<f32> = floats
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        drop(vbytes);
        let gbytes = file("graph.bin", &d.graph)?;
        let gpath = self
            .root
            .join(INDICES_DIR)
            .join(&self.meta.id)
            .join("graph.bin");
        let graph =
            HnswGraph::from_bytes(n, d.m, &gbytes).map_err(|e| Error::corrupt(&gpath, e))?;
        let norms_sq = if d.dim == 0 {
            vec![0.0; n]
        } else {
            vectors.chunks_exact(d.dim).map(|x| fma_dot(x, x)).collect()
        };
        let read = d.vectors.bytes + d.graph.bytes;
        let metric = self.meta.metric;
        let walk = if walk_reads_codes() {
            WalkReads::Codes(WalkCodes::encode(&vectors, d.dim, metric))
        } else {
            WalkReads::Floats {
                scale: norms_sq.iter().map(|&n| build_scale(metric, n)).collect(),
            }
        };
        Ok((
            Partition {
                row_ids,
                payload: Payload::Graph(Box::new(GraphBody {
                    graph,
                    dim: d.dim,
                    vectors,
                    norms_sq,
                    walk,
                })),
            },
            read,
        ))
    }
}
