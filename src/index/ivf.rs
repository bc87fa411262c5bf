//! IVF index segments: training, building, and loading.
//!
//! A segment covers a set of fragments of one vector column. It holds the
//! coarse centroids, the quantizer (PQ codebooks, SQ ranges or the RaBitQ
//! rotation), and one
//! partition record per centroid (see [`partition`](crate::index::partition)):
//!
//! ```text
//! indices/<segment-id>/segment.json    directory: offset, length, rows per partition; model checksum
//! indices/<segment-id>/model.bin       centroids (f32, partitions × dim), then PQ codebooks, SQ min/step
//!                                      or the RaBitQ rotation (D' × dim)
//! indices/<segment-id>/partitions.bin  the partition records
//! ```
//!
//! Rows are assigned to partitions by the *coarse metric*: cosine for a
//! cosine index (spherical k-means), l2 otherwise. A delta segment built by
//! `optimize` reuses the model of the segment that trained it.

use crate::error::{Error, Result};
use crate::index::cache::PartitionCache;
use crate::index::kmeans::{self, KMeansParams};
use crate::index::partition::{
    read_partition, ExpectedRecord, Partition, PartitionWriter, Payload, RecordKind,
};
use crate::index::pq::ProductQuantizer;
use crate::index::rq::RabitQuantizer;
use crate::index::sq::ScalarQuantizer;
use crate::kernel::{Metric, PreparedQueries, VectorBlocks};
pub use crate::storage::index_meta::{IndexKind, IndexParams, IndexSegmentMeta};
use crate::storage::manifest::write_synced;
use crate::storage::DatasetRoot;
use crate::storage::FragmentView;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::storage::index_meta::INDICES_DIR;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct PartitionEntry {
    offset: u64,
    len: u64,
    rows: u32,
}

/// The `segment.json` format this build writes. Format 2 added a CRC-32
/// over each partition header; format 1 segments are still read, with
/// every header field held to the directory but no header CRC.
const SEGMENT_FORMAT: u32 = 2;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentDirectory {
    format: u32,
    dim: usize,
    model_bytes: u64,
    model_crc32: u32,
    partitions: Vec<PartitionEntry>,
}

/// Centroids and quantizer: everything needed to assign and encode.
#[derive(Clone, Debug)]
pub struct IvfModel {
    /// Dimension.
    pub dim: usize,
    /// Centroids, row-major.
    pub centroid_rows: Vec<f32>,
    /// Centroids, block-transposed for the ranking kernel.
    pub centroids: VectorBlocks,
    /// PQ codebooks (IVF_PQ).
    pub pq: Option<ProductQuantizer>,
    /// SQ ranges (IVF_SQ); shared with every loaded SQ partition.
    pub sq: Option<Arc<ScalarQuantizer>>,
    /// The RaBitQ rotation and code width (IVF_RQ).
    pub rq: Option<Arc<RabitQuantizer>>,
}

impl IvfModel {
    /// Whether partitions hold codes scanned query by query (PQ, RaBitQ)
    /// rather than vectors or SQ codes scored partition-major.
    pub fn query_major(&self) -> bool {
        self.pq.is_some() || self.rq.is_some()
    }
}

/// The metric partitions are assigned and ranked by.
pub fn coarse_metric(metric: Metric) -> Metric {
    if metric == Metric::Cosine {
        Metric::Cosine
    } else {
        Metric::L2
    }
}

/// Rows of `fragments` that are not deleted.
pub(crate) fn visible_rows(fragments: &[FragmentView]) -> usize {
    fragments
        .iter()
        .map(|f| f.rows() - f.deleted.as_ref().map_or(0, |d| d.len() as usize))
        .sum()
}

/// Streams the non-deleted rows of `fragments`' column `column` in storage
/// order, one record batch at a time: `f(row_ids, row-major rows)`. Memory
/// is one batch, whatever the data's size. Every row is held to what
/// `metric` can score ([`Metric::vector_problem`]; ingest enforces it, but
/// a dataset written before that check may hold a vector that would turn
/// k-means distances into NaN).
pub(crate) fn for_each_visible(
    fragments: &[FragmentView],
    column: &str,
    dim: usize,
    metric: Metric,
    mut f: impl FnMut(&[u64], &[f32]) -> Result<()>,
) -> Result<()> {
    let (mut ids, mut kept) = (Vec::new(), Vec::new());
    for frag in fragments {
        let base = (frag.meta.id as u64) << 32;
        frag.for_each_vector_batch(column, |first, rows| {
            let n = rows.len() / dim;
            for (i, row) in rows.chunks_exact(dim).enumerate() {
                let deleted = frag
                    .deleted
                    .as_ref()
                    .is_some_and(|d| d.contains((first + i) as u32));
                if let Some(problem) = metric.vector_problem(row).filter(|_| !deleted) {
                    return Err(Error::InvalidArgument(format!(
                        "cannot index {}: the vector of row offset {} {problem}",
                        frag.path().display(),
                        first + i
                    )));
                }
            }
            ids.clear();
            match &frag.deleted {
                None => {
                    ids.extend((first..first + n).map(|i| base | i as u64));
                    f(&ids, rows)
                }
                Some(deleted) => {
                    kept.clear();
                    for i in 0..n {
                        if !deleted.contains((first + i) as u32) {
                            ids.push(base | (first + i) as u64);
                            kept.extend_from_slice(&rows[i * dim..(i + 1) * dim]);
                        }
                    }
                    f(&ids, &kept)
                }
            }
        })?;
    }
    Ok(())
}

/// The training sample: at most `partitions × sample_per_partition` of the
/// `n` visible rows, chosen by a seeded shuffle, in storage order.
fn sample_rows(
    fragments: &[FragmentView],
    column: &str,
    dim: usize,
    metric: Metric,
    n: usize,
    params: &IndexParams,
) -> Result<Vec<f32>> {
    let n32 = u32::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!("{n} rows are too many for one index build"))
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(params.seed);
    let mut order: Vec<u32> = (0..n32).collect();
    order.shuffle(&mut rng);
    order.truncate((params.partitions * params.sample_per_partition.max(1)).min(n));
    order.sort_unstable();
    let mut sample = Vec::with_capacity(order.len() * dim);
    let (mut position, mut next) = (0usize, 0usize);
    for_each_visible(fragments, column, dim, metric, |ids, rows| {
        let end = position + ids.len();
        while let Some(&pick) = order.get(next).filter(|&&p| (p as usize) < end) {
            let i = pick as usize - position;
            sample.extend_from_slice(&rows[i * dim..(i + 1) * dim]);
            next += 1;
        }
        position = end;
        Ok(())
    })?;
    Ok(sample)
}

/// What the quantizers see of a row: normalised for cosine, raw otherwise.
fn quantizer_input(metric: Metric, dim: usize, rows: &[f32]) -> Vec<f32> {
    if metric == Metric::Cosine {
        PreparedQueries::new(Metric::Cosine, dim, rows).data
    } else {
        rows.to_vec()
    }
}

fn train_model(
    params: &IndexParams,
    metric: Metric,
    dim: usize,
    sample: &[f32],
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<IvfModel> {
    let kparams = KMeansParams {
        k: params.partitions,
        iterations: params.iterations,
        seed: params.seed,
        metric: coarse_metric(metric),
    };
    let mut centroid_rows =
        kmeans::train(sample, dim, &kparams, &mut |i, t| progress("k-means", i, t));
    let mut centroids = VectorBlocks::from_rows(dim, &centroid_rows);
    let mut rq = None;
    let (pq, sq) = match params.kind {
        IndexKind::Hnsw { .. } => {
            return Err(Error::Internal("an hnsw index has no IVF model".into()))
        }
        IndexKind::IvfFlat => (None, None),
        IndexKind::IvfSq => (
            None,
            Some(Arc::new(ScalarQuantizer::train(
                &quantizer_input(metric, dim, sample),
                dim,
            ))),
        ),
        IndexKind::IvfRq { bits } => {
            if metric == Metric::Cosine {
                // Residuals to the partition means of the unit rows are
                // smaller than to the unit centroids (as for PQ).
                let assigned = kmeans::assign(sample, dim, &centroids, coarse_metric(metric));
                let input = quantizer_input(metric, dim, sample);
                centroid_rows = partition_means(&input, dim, &assigned, centroid_rows);
                centroids = VectorBlocks::from_rows(dim, &centroid_rows);
            }
            rq = Some(Arc::new(
                RabitQuantizer::new(dim, bits, params.seed).ok_or_else(|| {
                    Error::InvalidArgument(format!("ivf_rq cannot take {bits} bits"))
                })?,
            ));
            (None, None)
        }
        IndexKind::IvfPq { sub_vectors } => {
            let mut assigned = kmeans::assign(sample, dim, &centroids, coarse_metric(metric));
            let input = quantizer_input(metric, dim, sample);
            if metric == Metric::Cosine {
                // Spherical k-means leaves unit centroids; unit rows spread
                // around the mean of their partition, which lies inside
                // the sphere. Residuals to that mean are centred and
                // smaller, so the shared codebooks spend no codes on the
                // gap. Same directions: ranking and assignment by cosine
                // are unchanged but for the last step's moves.
                centroid_rows = partition_means(&input, dim, &assigned, centroid_rows);
                centroids = VectorBlocks::from_rows(dim, &centroid_rows);
                assigned = kmeans::assign(sample, dim, &centroids, coarse_metric(metric));
            }
            let residuals = residuals_of(&input, dim, &assigned, &centroid_rows);
            let pq = ProductQuantizer::train(
                &residuals,
                dim,
                sub_vectors,
                params.iterations,
                params.seed,
                &mut |i, t| progress("pq codebooks", i, t),
            );
            (Some(pq), None)
        }
    };
    Ok(IvfModel {
        dim,
        centroid_rows,
        centroids,
        pq,
        sq,
        rq,
    })
}

/// Each partition's mean of the rows `assigned` to it (`centroids` kept
/// for a partition without rows, or whose mean is nearly zero, which
/// cosine could not rank by).
fn partition_means(
    rows: &[f32],
    dim: usize,
    assigned: &[u32],
    mut centroids: Vec<f32>,
) -> Vec<f32> {
    let (sums, counts) = kmeans::cluster_sums(rows, dim, assigned, centroids.len() / dim);
    for (c, count) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        let mean: Vec<f64> = sums[c * dim..(c + 1) * dim]
            .iter()
            .map(|s| s / *count as f64)
            .collect();
        if mean.iter().map(|x| x * x).sum::<f64>() > 1e-8 {
            for (out, m) in centroids[c * dim..(c + 1) * dim].iter_mut().zip(&mean) {
                *out = *m as f32;
            }
        }
    }
    centroids
}

/// PQ inputs: each row's residual to its partition centroid. (For dot, the
/// search adds the `−q·c` term of the centroid separately.)
fn residuals_of(input: &[f32], dim: usize, assigned: &[u32], centroids: &[f32]) -> Vec<f32> {
    let mut out = input.to_vec();
    for (row, c) in out.chunks_exact_mut(dim).zip(assigned) {
        let c = &centroids[*c as usize * dim..(*c as usize + 1) * dim];
        for (x, y) in row.iter_mut().zip(c) {
            *x -= y;
        }
    }
    out
}

fn model_bytes(model: &IvfModel) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |xs: &[f32]| {
        xs.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
    };
    put(&model.centroid_rows);
    if let Some(pq) = &model.pq {
        put(&pq.codebook);
    }
    if let Some(sq) = &model.sq {
        put(&sq.min);
        put(&sq.step);
    }
    if let Some(rq) = &model.rq {
        put(&rq.rotation_rows);
    }
    out
}

/// Bytes per row a record kind stores as a code (the encoder's buffer).
fn kind_code_len(kind: RecordKind, dim: usize) -> usize {
    match kind {
        RecordKind::Flat | RecordKind::Sq => dim,
        RecordKind::Pq { m } => m,
        RecordKind::Rq { bits, padded } => crate::index::rq::code_len(bits, padded),
    }
}

/// The largest `m` an `hnsw` build takes (a node's layer-0 list is `2m`).
pub const MAX_HNSW_M: usize = 256;
/// The largest `ef_construction` an `hnsw` build takes.
pub const MAX_EF_CONSTRUCTION: usize = 4096;

/// Checks build parameters against the data.
pub fn validate_params(params: &IndexParams, dim: usize, rows: u64) -> Result<()> {
    if let IndexKind::Hnsw { m, ef_construction } = params.kind {
        if !(2..=MAX_HNSW_M).contains(&m) {
            return Err(Error::InvalidArgument(format!(
                "m must be 2 to {MAX_HNSW_M} for hnsw; got {m}"
            )));
        }
        if ef_construction < m || ef_construction > MAX_EF_CONSTRUCTION {
            return Err(Error::InvalidArgument(format!(
                "ef_construction must be at least m ({m}) and at most {MAX_EF_CONSTRUCTION} \
                 for hnsw; got {ef_construction}"
            )));
        }
        if rows == 0 {
            return Err(Error::InvalidArgument(
                "an hnsw index needs at least one row".into(),
            ));
        }
        return Ok(());
    }
    if params.partitions == 0 {
        return Err(Error::InvalidArgument(
            "partitions must be at least 1".into(),
        ));
    }
    if params.partitions as u64 > rows {
        return Err(Error::InvalidArgument(format!(
            "{} partitions for {rows} rows: an index needs at least as many rows as partitions",
            params.partitions
        )));
    }
    if params.iterations == 0 || params.sample_per_partition == 0 {
        return Err(Error::InvalidArgument(
            "iterations and sample size must be at least 1".into(),
        ));
    }
    if let IndexKind::IvfPq { sub_vectors } = params.kind {
        if sub_vectors == 0 || !dim.is_multiple_of(sub_vectors) {
            return Err(Error::InvalidArgument(format!(
                "sub-vectors must divide the dimension {dim}; {sub_vectors} does not"
            )));
        }
    }
    if let IndexKind::IvfRq { bits } = params.kind {
        if !(1..=crate::index::rq::MAX_BITS).contains(&bits) {
            return Err(Error::InvalidArgument(format!(
                "bits must be 1 to {} for ivf_rq; got {bits}",
                crate::index::rq::MAX_BITS
            )));
        }
    }
    Ok(())
}

/// Builds a segment over `fragments` and writes its files. Trains a new
/// model unless `model` (from an earlier segment) is given.
#[allow(clippy::too_many_arguments)]
pub fn build_segment(
    root: &DatasetRoot,
    column: &str,
    dim: usize,
    metric: Metric,
    params: &IndexParams,
    fragments: &[FragmentView],
    model: Option<(&IvfModel, &str)>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<(IndexSegmentMeta, IvfModel)> {
    let n = visible_rows(fragments);
    let id = format!("{}-{:016x}", params.kind.name(), rand::random::<u64>());
    let (model, trained_in) = match model {
        Some((m, from)) => (m.clone(), from.to_string()),
        None => {
            let sample = sample_rows(fragments, column, dim, metric, n, params)?;
            (
                train_model(params, metric, dim, &sample, progress)?,
                id.clone(),
            )
        }
    };
    let nlist = model.centroids.len();
    let coarse = coarse_metric(metric);
    // Pass 1: assign every row (4 bytes a row are kept), count per partition.
    let mut assigned: Vec<u32> = Vec::with_capacity(n);
    for_each_visible(fragments, column, dim, metric, |_, rows| {
        assigned.extend(kmeans::assign(rows, dim, &model.centroids, coarse));
        progress("assign", assigned.len(), n);
        Ok(())
    })?;
    let mut counts = vec![0usize; nlist];
    for &c in &assigned {
        counts[c as usize] += 1;
    }
    // Pass 2: encode each row and write it at its partition's place.
    let dir = root.join(INDICES_DIR).join(&id);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let kind = match (&model.pq, &model.sq, &model.rq) {
        (Some(pq), _, _) => RecordKind::Pq { m: pq.m },
        (None, Some(_), _) => RecordKind::Sq,
        (None, None, Some(rq)) => RecordKind::Rq {
            bits: rq.bits,
            padded: rq.padded,
        },
        (None, None, None) => RecordKind::Flat,
    };
    let mut writer = PartitionWriter::create(&dir.join("partitions.bin"), kind, dim, &counts)?;
    let mut next = 0usize;
    let mut residual = vec![0.0f32; dim];
    let mut code = vec![0u8; kind_code_len(kind, dim)];
    for_each_visible(fragments, column, dim, metric, |ids, rows| {
        let quant_in = if kind == RecordKind::Flat {
            Vec::new()
        } else {
            quantizer_input(metric, dim, rows)
        };
        // RaBitQ: the batch's residuals rotated and encoded on every core.
        let rq_codes = match &model.rq {
            Some(rq) => {
                let mut residuals = quant_in.clone();
                for (k, row) in residuals.chunks_exact_mut(dim).enumerate() {
                    let p = assigned[next + k] as usize;
                    let c = &model.centroid_rows[p * dim..(p + 1) * dim];
                    for (r, y) in row.iter_mut().zip(c) {
                        *r -= y;
                    }
                }
                rq.encode_rows(&residuals)
            }
            None => Vec::new(),
        };
        for (k, &row_id) in ids.iter().enumerate() {
            let p = assigned[next] as usize;
            next += 1;
            let row = k * dim..(k + 1) * dim;
            match (&model.pq, &model.sq) {
                _ if model.rq.is_some() => {
                    let len = code.len();
                    writer.push_code(p, row_id, &rq_codes[k * len..(k + 1) * len])?;
                }
                (Some(pq), _) => {
                    let c = &model.centroid_rows[p * dim..(p + 1) * dim];
                    for ((r, x), y) in residual.iter_mut().zip(&quant_in[row]).zip(c) {
                        *r = x - y;
                    }
                    pq.encode(&residual, &mut code);
                    writer.push_code(p, row_id, &code)?;
                }
                (None, Some(sq)) => {
                    sq.encode(&quant_in[row], &mut code);
                    writer.push_code(p, row_id, &code)?;
                }
                (None, None) => writer.push_flat(p, row_id, &rows[row])?,
            }
        }
        progress("partitions", next, n);
        Ok(())
    })?;
    let entries: Vec<PartitionEntry> = writer
        .finish()?
        .into_iter()
        .map(|(offset, len, rows)| PartitionEntry { offset, len, rows })
        .collect();
    let mbytes = model_bytes(&model);
    write_synced(&dir.join("model.bin"), &mbytes)?;
    let directory = SegmentDirectory {
        format: SEGMENT_FORMAT,
        dim,
        model_bytes: mbytes.len() as u64,
        model_crc32: crc32fast::hash(&mbytes),
        partitions: entries,
    };
    let json = serde_json::to_vec_pretty(&directory).map_err(|e| Error::Internal(e.to_string()))?;
    write_synced(&dir.join("segment.json"), &json)?;
    crate::storage::manifest::sync_dir(&dir)?;
    for file in ["partitions.bin", "model.bin", "segment.json"] {
        root.wrote(&format!("{INDICES_DIR}/{id}/{file}"));
    }
    let meta = IndexSegmentMeta {
        id,
        column: column.to_string(),
        metric,
        params: params.clone(),
        fragments: fragments.iter().map(|f| f.meta.id).collect(),
        rows: n as u64,
        trained_in,
    };
    Ok((meta, model))
}

/// A segment opened for search.
#[derive(Debug)]
pub struct LoadedSegment {
    /// Manifest entry.
    pub meta: IndexSegmentMeta,
    /// Centroids and quantizer.
    pub model: IvfModel,
    /// Cache key prefix.
    pub key: Arc<str>,
    directory: Vec<PartitionEntry>,
    /// `segment.json`'s format (decides whether headers carry a CRC).
    format: u32,
    /// What every partition record of this segment holds.
    record_kind: RecordKind,
    path: PathBuf,
    file: crate::storage::RangedFile,
}

impl LoadedSegment {
    /// Opens a segment's files and checks the model's checksum.
    pub fn open(root: &DatasetRoot, meta: &IndexSegmentMeta, dim: usize) -> Result<LoadedSegment> {
        let dir = root.join(INDICES_DIR).join(&meta.id);
        let missing = |p: &Path, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => Error::corrupt(p, "index file is missing"),
            _ => Error::io(p, e),
        };
        let rel = |file: &str| format!("{INDICES_DIR}/{}/{file}", meta.id);
        if let Some(remote) = root.remote_side() {
            // Three independent round trips, made at once.
            let (directory, model, partitions) =
                (rel("segment.json"), rel("model.bin"), rel("partitions.bin"));
            remote.prefetch_files(&[&directory, &model], &[&partitions])?;
        }
        let dpath = dir.join("segment.json");
        let bytes = root
            .read(&rel("segment.json"))?
            .map_err(|e| missing(&dpath, e))?;
        let directory: SegmentDirectory =
            serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(&dpath, e.to_string()))?;
        if !(1..=SEGMENT_FORMAT).contains(&directory.format) {
            return Err(Error::corrupt(
                &dpath,
                format!(
                    "segment format {} is not supported by this build (reads 1..={SEGMENT_FORMAT})",
                    directory.format
                ),
            ));
        }
        let mpath = dir.join("model.bin");
        let model_raw = root
            .read(&rel("model.bin"))?
            .map_err(|e| missing(&mpath, e))?;
        if model_raw.len() as u64 != directory.model_bytes
            || crc32fast::hash(&model_raw) != directory.model_crc32
        {
            return Err(Error::corrupt(&mpath, "checksum mismatch"));
        }
        if directory.dim != dim {
            return Err(Error::corrupt(
                &dpath,
                "dimension differs from the column's",
            ));
        }
        let floats: Vec<f32> = model_raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let nlist = directory.partitions.len();
        let take = |from: usize, n: usize| -> Result<Vec<f32>> {
            floats
                .get(from..from + n)
                .map(|s| s.to_vec())
                .ok_or_else(|| Error::corrupt(&mpath, "model is too short"))
        };
        let centroid_rows = take(0, nlist * dim)?;
        let mut at = nlist * dim;
        let mut rq = None;
        let (pq, sq) = match meta.params.kind {
            IndexKind::Hnsw { .. } => {
                return Err(Error::Internal(format!(
                    "segment {} is an hnsw segment, not an IVF one",
                    meta.id
                )))
            }
            IndexKind::IvfFlat => (None, None),
            IndexKind::IvfRq { bits } => {
                let n = crate::index::rq::padded_dim(dim) * dim;
                let rotation = take(at, n)?;
                at += n;
                rq = Some(Arc::new(
                    RabitQuantizer::from_parts(dim, bits, rotation)
                        .ok_or_else(|| Error::corrupt(&mpath, "RaBitQ model does not fit"))?,
                ));
                (None, None)
            }
            IndexKind::IvfPq { sub_vectors } => {
                let n = dim * crate::index::pq::CODES;
                let codebook = take(at, n)?;
                at += n;
                (
                    Some(ProductQuantizer {
                        dim,
                        m: sub_vectors,
                        codebook,
                    }),
                    None,
                )
            }
            IndexKind::IvfSq => {
                let min = take(at, dim)?;
                let step = take(at + dim, dim)?;
                at += 2 * dim;
                (None, Some(Arc::new(ScalarQuantizer { min, step })))
            }
        };
        if at != floats.len() {
            return Err(Error::corrupt(&mpath, "model has unexpected length"));
        }
        let ppath = dir.join("partitions.bin");
        let file = root
            .open_ranged(&rel("partitions.bin"))?
            .map_err(|e| missing(&ppath, e))?;
        // Every partition must lie inside the file: a directory entry that
        // points past its end (a hand-edited length of 10^15) is corrupt,
        // never a huge allocation.
        let file_len = file.len().map_err(|e| Error::io(&ppath, e))?;
        for (p, entry) in directory.partitions.iter().enumerate() {
            let end = entry.offset.checked_add(entry.len);
            if end.is_none_or(|end| end > file_len) {
                return Err(Error::corrupt(
                    &ppath,
                    format!(
                        "segment.json places partition {p} at bytes {}..+{}, the file has {file_len}",
                        entry.offset, entry.len
                    ),
                ));
            }
        }
        Ok(LoadedSegment {
            meta: meta.clone(),
            model: IvfModel {
                dim,
                centroids: VectorBlocks::from_rows(dim, &centroid_rows),
                centroid_rows,
                pq,
                sq,
                rq,
            },
            key: Arc::from(dir.to_string_lossy().as_ref()),
            format: directory.format,
            record_kind: match meta.params.kind {
                IndexKind::IvfFlat | IndexKind::Hnsw { .. } => RecordKind::Flat,
                IndexKind::IvfSq => RecordKind::Sq,
                IndexKind::IvfPq { sub_vectors } => RecordKind::Pq { m: sub_vectors },
                IndexKind::IvfRq { bits } => RecordKind::Rq {
                    bits,
                    padded: crate::index::rq::padded_dim(dim),
                },
            },
            directory: directory.partitions,
            path: ppath,
            file,
        })
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.directory.len()
    }

    /// Rows in partition `p` (from the directory, without loading it).
    pub fn partition_rows(&self, p: u32) -> usize {
        self.directory[p as usize].rows as usize
    }

    /// Fetches the partitions `wanted` that the cache lacks into the disk
    /// cache ahead of their loads, all in one read: for a remote dataset,
    /// neighbouring partitions in one GET and several GETs at once, where
    /// loading them one by one would cost a round trip each. Nothing to do
    /// for a local dataset.
    pub fn prefetch(&self, wanted: &[u32], cache: &PartitionCache) -> Result<()> {
        if !self.file.is_remote() {
            return Ok(());
        }
        let ranges: Vec<(u64, u64)> = wanted
            .iter()
            .filter(|&&p| !cache.contains(&(self.key.clone(), p)))
            .filter_map(|&p| self.directory.get(p as usize))
            .map(|e| (e.offset, e.len))
            .collect();
        self.file.prefetch(&ranges)
    }

    /// Partition `p`, through the cache, with the bytes read on a miss.
    pub fn partition(
        &self,
        p: u32,
        cache: &PartitionCache,
    ) -> Result<(Arc<Partition>, Option<u64>)> {
        let entry = &self.directory[p as usize];
        cache.get((self.key.clone(), p), || {
            let expected = ExpectedRecord {
                partition: p,
                offset: entry.offset,
                len: entry.len,
                rows: entry.rows,
                kind: self.record_kind,
                dim: self.model.dim,
                header_crc: self.format >= 2,
            };
            let mut part =
                read_partition(&self.path, &self.file, &expected, self.model.sq.as_ref())?;
            if let (Payload::Pq { codes, terms }, Some(pq)) = (&mut part.payload, &self.model.pq) {
                let dim = self.model.dim;
                let c = &self.model.centroid_rows[p as usize * dim..(p as usize + 1) * dim];
                *terms = pq.row_terms(self.meta.metric, c, codes);
            }
            if let (Payload::Rq(codes), Some(rq)) = (&mut part.payload, &self.model.rq) {
                let dim = self.model.dim;
                let c = &self.model.centroid_rows[p as usize * dim..(p as usize + 1) * dim];
                rq.prepare(self.meta.metric, c, codes);
            }
            Ok((part, entry.len))
        })
    }
}
