//! IVF search building blocks, and the single-query ANN path.
//!
//! The pieces here are shared by every path that touches an index, so that
//! a (query, row) distance is computed by the same code whichever path asks:
//! [`rank_partitions`] (one kernel call for any number of queries),
//! [`score_partition`] (flat/SQ through the dot kernel) with
//! [`push_scored`] (bound test, the query's row test and heap push),
//! [`scan_code_partition`] (PQ: quantized-table screen, then float lookup
//! tables into the heap; RaBitQ: the 1-bit estimate's screen with its error
//! bound, then the full estimate) and [`refine`] (exact rerank).
//! [`search_per_query`] is the reference single-query path: each query
//! ranks centroids, probes its partitions, merges segments and the exact
//! scan of unindexed fragments, on its own.

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::exec::exact;
use crate::exec::pool::ScanPool;
use crate::exec::prefilter::{Admission, FilterCache, RowTest};
use crate::exec::profile::{ms_since, Profile};
use crate::index::hnsw::segment::HnswSegment;
use crate::index::ivf::{coarse_metric, LoadedSegment};
use crate::index::partition::{Partition, Payload};
use crate::index::pq::{scan_codes, ProductQuantizer, ScanSink, CODES};
use crate::index::rq::{scan_rq_codes, RqQuery, ScanCounts};
use crate::index::PartitionCache;
use crate::kernel::lookup::{LookupKernel, LookupTable};
use crate::kernel::{
    dot_blocks, dot_blocks_streamed, dot_code_blocks, fma_dot, Kernel, Metric, PreparedQueries,
    BLOCK,
};
use crate::query::{Candidate, Nprobes, TopK, ValidatedBatch};
use crate::storage::FragmentView;
use std::sync::Arc;
use std::time::Instant;

/// A snapshot's fragments and index segments for one column.
pub struct IndexView<'a> {
    /// Every fragment of the snapshot.
    pub fragments: &'a [FragmentView],
    /// Whether the searched column has index segments in this snapshot.
    pub indexed: bool,
    /// Index segments of the searched column, opened; left empty when the
    /// search cannot use them (an exact search never opens index files).
    pub segments: Vec<Arc<LoadedSegment>>,
    /// The column's `hnsw` segments, opened (when its index is a graph:
    /// then `segments` is empty).
    pub graphs: Vec<Arc<HnswSegment>>,
    /// The partition cache.
    pub cache: &'a PartitionCache,
    /// Most shares of work one search runs at once.
    pub threads: usize,
    /// The threads scans run on.
    pub pool: &'a ScanPool,
    /// Checked at every partition and every exact-scan chunk.
    pub cancel: &'a CancelToken,
    /// The session's cache of filter results.
    pub filters: &'a FilterCache,
}

/// For each query (rows of `queries`, prepared for the index's metric), the
/// `limit` nearest partitions of `seg` by the coarse metric, nearest first,
/// ties to the lower partition number. One kernel call for all queries.
pub fn rank_partitions(
    seg: &LoadedSegment,
    metric: Metric,
    queries: &PreparedQueries,
    limit: usize,
) -> Vec<Vec<u32>> {
    rank_query_range(seg, metric, queries, 0..queries.len(), limit)
}

/// [`rank_partitions`] for queries `range` of `queries` only. A query's
/// ranking does not depend on the other queries of the kernel call (the
/// kernel's per-pair sums are batch invariant), so ranges can be ranked on
/// different threads.
pub fn rank_query_range(
    seg: &LoadedSegment,
    metric: Metric,
    queries: &PreparedQueries,
    range: std::ops::Range<usize>,
    limit: usize,
) -> Vec<Vec<u32>> {
    let cents = &seg.model.centroids;
    let nb = cents.block_count();
    let stride = nb * BLOCK;
    let dim = queries.dim;
    let rows = &queries.data[range.start * dim..range.end * dim];
    let mut dots = vec![0.0f32; range.len() * stride];
    dot_blocks(Kernel::detect(), rows, cents, 0..nb, &mut dots);
    let coarse = coarse_metric(metric);
    let n = cents.len();
    let limit = limit.min(n);
    range
        .enumerate()
        .map(|(at, qi)| {
            let mut ranked: Vec<(f32, u32)> = (0..n)
                .map(|c| {
                    (
                        coarse.finish(
                            dots[at * stride + c],
                            queries.norms_sq[qi],
                            cents.norms_sq()[c],
                        ),
                        c as u32,
                    )
                })
                .collect();
            let order = |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
            if limit < n {
                ranked.select_nth_unstable_by(limit, order);
                ranked.truncate(limit);
            }
            ranked.sort_unstable_by(order);
            ranked.into_iter().map(|(_, c)| c).collect()
        })
        .collect()
}

/// One query's tables for a segment scanned query by query: PQ's float
/// ADC table ([`ProductQuantizer::query_table`], `m × 256`) and its
/// quantized screen, or RaBitQ's rotated query and plane table.
pub enum CodeQuery {
    /// IVF_PQ.
    Pq {
        /// The float ADC table.
        table: Vec<f32>,
        /// Its quantized screen.
        screen: Option<LookupTable>,
    },
    /// IVF_RQ.
    Rq(RqQuery),
}

impl CodeQuery {
    /// The tables of query `q` (prepared for the metric) for `seg`; `None`
    /// for flat and SQ segments.
    pub fn new(seg: &LoadedSegment, metric: Metric, q: &[f32]) -> Option<CodeQuery> {
        if let Some(rq) = &seg.model.rq {
            return Some(CodeQuery::Rq(rq.query(metric, q)));
        }
        let pq = seg.model.pq.as_ref()?;
        let mut table = vec![0.0f32; pq.m * CODES];
        pq.query_table(metric, q, &mut table);
        let screen = LookupTable::quantize(&table, pq.m);
        Some(CodeQuery::Pq { table, screen })
    }
}

/// A query's heap behind its row test, as a PQ scan's sink.
struct HeapSink<'a> {
    heap: &'a mut TopK,
    test: RowTest<'a>,
    row_ids: &'a [u64],
}

impl ScanSink for HeapSink<'_> {
    fn threshold(&self) -> Option<f32> {
        self.heap.threshold()
    }

    fn allows(&self, r: usize) -> bool {
        self.test.allows(r, self.row_ids[r])
    }

    fn offer(&mut self, r: usize, distance: f32) {
        self.heap.push(Candidate {
            distance,
            row_id: self.row_ids[r],
        });
    }
}

/// Scans PQ or RaBitQ partition `p` of `seg` for one query (`q`, with its
/// tables `cq`) into `heap`: the screen skips rows that cannot enter (PQ:
/// exactly; RaBitQ: by the 1-bit estimate's error bound), the rest are
/// scored and pushed as [`push_scored`] would.
#[allow(clippy::too_many_arguments)]
pub fn scan_code_partition(
    seg: &LoadedSegment,
    p: u32,
    part: &Partition,
    metric: Metric,
    q: &[f32],
    cq: &CodeQuery,
    test: RowTest<'_>,
    heap: &mut TopK,
) -> Result<ScanCounts> {
    let dim = seg.model.dim;
    let c = &seg.model.centroid_rows[p as usize * dim..(p as usize + 1) * dim];
    let constant = ProductQuantizer::query_constant(metric, q, c);
    let mut sink = HeapSink {
        heap,
        test,
        row_ids: &part.row_ids,
    };
    match (&part.payload, cq, &seg.model.rq) {
        (Payload::Pq { codes, terms }, CodeQuery::Pq { table, screen }, _) => Ok(ScanCounts {
            rescored: scan_codes(
                table,
                screen.as_ref(),
                LookupKernel::detect(),
                codes,
                constant,
                terms,
                &mut sink,
            ),
            bound_skipped: 0,
        }),
        (Payload::Rq(codes), CodeQuery::Rq(query), Some(rq)) => Ok(scan_rq_codes(
            rq,
            query,
            LookupKernel::detect(),
            codes,
            constant,
            &mut sink,
        )),
        _ => Err(Error::Internal(format!(
            "partition {p} does not hold the codes its segment's model scans"
        ))),
    }
}

/// Queries as a flat or SQ segment's partitions are scored with, once per
/// (query, segment) instead of per partition: for IVF_FLAT the prepared
/// rows; for IVF_SQ each row times the quantizer's steps, with `q·min` to
/// add back (`q·x = q·min + Σ_j (q_j step_j) code_j`, see `kernel::codes`).
pub struct KernelQueries {
    dim: usize,
    rows: Vec<f32>,
    norms: Vec<f32>,
    offsets: Vec<f32>,
}

impl KernelQueries {
    /// Queries `ids` of `queries` (prepared for the metric) for `seg`, in
    /// `ids` order.
    pub fn new(seg: &LoadedSegment, queries: &PreparedQueries, ids: &[usize]) -> KernelQueries {
        let dim = queries.dim;
        let mut rows = Vec::with_capacity(ids.len() * dim);
        let mut offsets = Vec::new();
        for &qi in ids {
            let q = queries.row(qi);
            match &seg.model.sq {
                Some(sq) => {
                    rows.extend(q.iter().zip(&sq.step).map(|(a, s)| a * s));
                    offsets.push(fma_dot(q, &sq.min));
                }
                None => rows.extend_from_slice(q),
            }
        }
        KernelQueries {
            dim,
            rows,
            norms: ids.iter().map(|&qi| queries.norms_sq[qi]).collect(),
            offsets,
        }
    }

    /// Query `j`'s row as the kernel multiplies it.
    pub fn row(&self, j: usize) -> &[f32] {
        &self.rows[j * self.dim..(j + 1) * self.dim]
    }

    /// Query `j`'s ‖q‖².
    pub fn norm(&self, j: usize) -> f32 {
        self.norms[j]
    }

    /// Query `j`'s `q·min` (SQ), or nothing (flat).
    pub fn offset(&self, j: usize) -> Option<f32> {
        self.offsets.get(j).copied()
    }
}

/// Distances of `nq` queries to every row of flat or SQ partition `p`
/// (of a segment), through the dot kernel, written to
/// `out[j * stride + r]`; returns the stride. The queries come as
/// [`KernelQueries`] gives them: rows (row-major `qrows`), norms and, for
/// SQ, offsets. (PQ and RaBitQ partitions go through [`scan_code_partition`].)
/// `streamed`: the segment's vectors come from memory, not cache
/// ([`streams_from_memory`](crate::kernel::streams_from_memory)), so
/// float32 tiles prefetch ahead.
#[allow(clippy::too_many_arguments)]
pub fn score_partition(
    p: u32,
    part: &Partition,
    streamed: bool,
    metric: Metric,
    qrows: &[f32],
    qnorms: &[f32],
    qoffsets: &[f32],
    out: &mut Vec<f32>,
) -> Result<usize> {
    let nq = qnorms.len();
    match &part.payload {
        Payload::Sq { codes, .. } => {
            if qoffsets.len() != nq {
                return Err(Error::Internal(format!(
                    "partition {p}: SQ scores need q·min for every query"
                )));
            }
            let stride = codes.block_count() * BLOCK;
            out.resize(nq * stride, 0.0);
            dot_code_blocks(Kernel::detect(), qrows, codes, out);
            let norms = codes.norms_sq();
            for (j, (qn, q_min)) in qnorms.iter().zip(qoffsets).enumerate() {
                let dots = &mut out[j * stride..j * stride + codes.len()];
                metric.finish_all(dots, Some(*q_min), *qn, norms);
            }
            Ok(stride)
        }
        Payload::Flat(v) => {
            let nb = v.block_count();
            let stride = nb * BLOCK;
            out.resize(nq * stride, 0.0);
            let dots = if streamed {
                dot_blocks_streamed
            } else {
                dot_blocks
            };
            dots(Kernel::detect(), qrows, v, 0..nb, out);
            let norms = v.norms_sq();
            for (j, qn) in qnorms.iter().enumerate() {
                metric.finish_all(&mut out[j * stride..j * stride + v.len()], None, *qn, norms);
            }
            Ok(stride)
        }
        Payload::Pq { .. } | Payload::Rq(_) | Payload::Graph(_) => Err(Error::Internal(format!(
            "partition {p} holds PQ or RaBitQ codes, which scan_code_partition scans"
        ))),
    }
}

/// Pushes one query's scored rows (of a partition, by position) into its
/// heap, skipping rows its test forbids. Most rows lose to the heap's
/// current worst, so that cheap test comes first and the row test is made
/// only for rows that could enter.
#[inline]
pub fn push_scored(dists: &[f32], row_ids: &[u64], test: RowTest<'_>, heap: &mut TopK) {
    const CHUNK: usize = 16;
    let mut bound = heap.threshold();
    for (c, (ds, ids)) in dists.chunks(CHUNK).zip(row_ids.chunks(CHUNK)).enumerate() {
        // One branch-free compare over the chunk first, as a bit per row:
        // once the heap is full, most rows cannot enter and are passed over
        // without touching their ids. (The compare also lets -0.0 through
        // against +0.0, and NaN; the exact test below decides.)
        let mut maybe = match bound {
            Some(b) => ds.iter().enumerate().fold(0u32, |m, (i, &d)| {
                m | ((((d <= b) | d.is_nan()) as u32) << i)
            }),
            None => u32::MAX >> (32 - ds.len()),
        };
        while maybe != 0 {
            let i = maybe.trailing_zeros() as usize;
            maybe &= maybe - 1;
            let (d, row_id) = (ds[i], ids[i]);
            if bound.is_some_and(|b| d.total_cmp(&b).is_gt()) || !test.allows(c * CHUNK + i, row_id)
            {
                continue;
            }
            heap.push(Candidate {
                distance: d,
                row_id,
            });
            bound = heap.threshold();
        }
    }
}

/// Reranks candidates with exact float32 distances from the fragments
/// (bit-identical to the exact scan's), nearest first.
pub fn refine(
    candidates: &[Candidate],
    fragments: &[FragmentView],
    column: &str,
    metric: Metric,
    query: &[f32],
    query_norm_sq: f32,
) -> Result<Vec<Candidate>> {
    let mut out = Vec::with_capacity(candidates.len());
    for c in candidates {
        let frag = fragments
            .iter()
            .find(|f| f.meta.id as u64 == c.row_id >> 32)
            .ok_or_else(|| Error::Internal(format!("row {} has no fragment", c.row_id)))?;
        // Refine needs the exact vectors: the one indexed search that reads
        // the vector column (through the column cache).
        let v = frag.vectors(column)?;
        let i = (c.row_id & 0xffff_ffff) as usize;
        let x = v.vector(i);
        out.push(Candidate {
            distance: metric.finish(fma_dot(query, &x), query_norm_sq, v.norms_sq()[i]),
            row_id: c.row_id,
        });
    }
    out.sort_unstable();
    Ok(out)
}

/// Fragments `batch` searches that no segment of the view covers.
pub fn unindexed(view: &IndexView<'_>, batch: &ValidatedBatch) -> Vec<usize> {
    unindexed_by(view, batch, |id| {
        view.segments.iter().any(|s| s.meta.fragments.contains(&id))
    })
}

/// Positions of the fragments `batch` searches that `covered` (by
/// fragment id) says no segment covers.
pub fn unindexed_by(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    covered: impl Fn(u32) -> bool,
) -> Vec<usize> {
    view.fragments
        .iter()
        .enumerate()
        .filter(|(_, f)| batch.searches_fragment(f.meta.id) && !covered(f.meta.id))
        .map(|(i, _)| i)
        .collect()
}

/// The single-query path, run for each query of the batch on its own
/// (queries are shared out to threads; nothing else is shared but the
/// filter cache and the unindexed fragments' row masks, which do not
/// depend on the query). Returns one heap of depth k + offset per query,
/// before the postfilter and paging.
pub fn search_per_query(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
    profile: &mut Profile,
) -> Result<Vec<TopK>> {
    // Fragments no segment covers, prepared once for the batch (visibility
    // and each distinct prefilter's rows); each query scans them alone.
    let rest = unindexed(view, batch);
    let exact_items = if batch.fast_search || rest.is_empty() {
        None
    } else {
        Some(exact::items(admission, view.fragments, &rest, batch)?)
    };
    let n = batch.len();
    let threads = view.threads.clamp(1, n);
    let per = n.div_ceil(threads);
    let t = Instant::now();
    let run = |part: usize| -> Result<(Vec<TopK>, Profile)> {
        let mut local = Profile::default();
        let mut heaps = Vec::new();
        for qi in part * per..((part + 1) * per).min(n) {
            heaps.push(search_one(
                view,
                batch,
                qi,
                admission,
                exact_items.as_ref(),
                &mut local,
            )?);
        }
        Ok((heaps, local))
    };
    let parts = view.pool.run(threads, run)?;
    let mut heaps = Vec::with_capacity(n);
    for (h, p) in parts {
        heaps.extend(h);
        profile.pairs_probed += p.pairs_probed;
        profile.distinct_partitions += p.distinct_partitions;
        profile.partition_bytes += p.partition_bytes;
        profile.cache_hits += p.cache_hits;
        profile.cache_misses += p.cache_misses;
        profile.bytes_read += p.bytes_read;
        profile.rows_scored += p.rows_scored;
        profile.rows_rescored += p.rows_rescored;
        profile.rows_bound_skipped += p.rows_bound_skipped;
        profile.refine_rows_read += p.refine_rows_read;
        profile.rank_ms += p.rank_ms;
    }
    profile.scan_ms += ms_since(t) - profile.rank_ms / threads as f64;
    Ok(heaps)
}

/// The partitions query `qi` probes at most, and at least, per segment.
pub fn probe_bounds(batch: &ValidatedBatch, qi: usize) -> (usize, usize) {
    match batch.specs[qi].nprobes {
        Nprobes::Fixed(n) => (n, n),
        Nprobes::Adaptive { min, max } => (min, max),
    }
}

/// One query, alone.
fn search_one(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    qi: usize,
    admission: &Admission<'_>,
    unindexed: Option<&(Vec<exact::ExactItem<'_>>, Vec<usize>)>,
    profile: &mut Profile,
) -> Result<TopK> {
    let spec = &batch.specs[qi];
    let depth = batch.depth(qi);
    let one = batch.subset(&[qi]);
    let q = one.queries.row(0);
    let qn = one.queries.norms_sq[0];
    let prefilter = batch.prefilter(qi);
    let mut heap = TopK::new(batch.index_depth(qi));
    let mut scores = Vec::new();
    for seg in &view.segments {
        let cq = CodeQuery::new(seg, batch.metric, q);
        let mut kernel_queries = None;
        let (min, limit) = probe_bounds(batch, qi);
        let adaptive = matches!(spec.nprobes, Nprobes::Adaptive { .. });
        let t = Instant::now();
        let ranked = rank_partitions(seg, batch.metric, &one.queries, limit);
        profile.rank_ms += ms_since(t);
        // The partitions it will surely probe, fetched together.
        let mut surely: Vec<u32> = ranked[0].iter().copied().take(min).collect();
        surely.sort_unstable();
        seg.prefetch(&surely, view.cache)?;
        let mut passed = 0usize;
        for (i, &p) in ranked[0].iter().enumerate() {
            if i >= min && passed >= depth {
                break;
            }
            view.cancel.check()?;
            let (part, read) = seg.partition(p, view.cache)?;
            match read {
                Some(bytes) => {
                    profile.cache_misses += 1;
                    profile.bytes_read += bytes;
                }
                None => profile.cache_hits += 1,
            }
            profile.pairs_probed += 1;
            profile.distinct_partitions += 1;
            profile.partition_bytes += part.size_bytes() as u64;
            profile.rows_scored += part.len() as u64;
            let bits = match prefilter {
                Some(f) => Some(admission.partition_bits(&seg.key, p, &part, f)?),
                None => None,
            };
            let test = admission.test(bits.as_deref());
            if let Some(cq) = &cq {
                let scan =
                    scan_code_partition(seg, p, &part, batch.metric, q, cq, test, &mut heap)?;
                profile.rows_rescored += scan.rescored as u64;
                profile.rows_bound_skipped += scan.bound_skipped as u64;
            } else {
                let kq = kernel_queries
                    .get_or_insert_with(|| KernelQueries::new(seg, &one.queries, &[0]));
                let offset = kq.offset(0);
                // One query: its tiles never prefetch, streamed or not.
                score_partition(
                    p,
                    &part,
                    false,
                    batch.metric,
                    kq.row(0),
                    &[qn],
                    offset.as_slice(),
                    &mut scores,
                )?;
                push_scored(&scores[..part.len()], &part.row_ids, test, &mut heap);
            }
            if adaptive {
                passed += test.count(&part.row_ids);
            }
        }
    }
    let mut found = heap.into_sorted_vec();
    if spec.refine_factor.is_some() {
        profile.refine_rows_read += found.len() as u64;
        found = refine(&found, view.fragments, &batch.column, batch.metric, q, qn)?;
    }
    let mut out = TopK::new(depth);
    for c in found {
        out.push(c);
    }
    if let Some((items, mask_of)) = unindexed {
        for h in exact::scan(items, &[mask_of[qi]], &one, view, 1, Kernel::detect())? {
            out.merge(h);
        }
        profile.rows_scored += items.iter().map(|i| i.fragment.rows() as u64).sum::<u64>();
    }
    Ok(out)
}
