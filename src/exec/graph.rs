//! The `hnsw` search: every query of a batch walks every graph segment of
//! the column on its own, and the fragments no segment covers are scanned
//! exactly, once for the whole batch.
//!
//! Per (query, segment):
//!
//! * The rows the query may return are the segment's visible rows (the
//!   version's deletions) that pass its prefilter, whose bits come from
//!   the filter cache like a partition's (the segment is partition 0 of its
//!   key).
//! * **Walk** ([`HnswGraph::search`](crate::index::hnsw::graph::HnswGraph)):
//!   `max(ef, (k + offset) × refine factor)` candidates by the walk's
//!   estimated distance, read from the rows' 8-bit codes
//!   ([`WalkCodes`](crate::index::hnsw::codes::WalkCodes); the float32
//!   vectors through [`PairDot`](crate::kernel::pair::PairDot) under
//!   `SHOAL_HNSW_WALK=f32`), every one then *reranked*: its distance
//!   recomputed by the FMA chain of the block kernels and finished by the
//!   metric, so a row has the same distance here as in an exact scan, and
//!   the best `k + offset` by `(distance, row id)` are kept.
//! * **Exact** instead, when the prefilter admits at most
//!   [`exact_below`]`(rows, m, ef)` of the segment's rows: those rows are
//!   scored with the same FMA chain. A walk among few admitted rows visits
//!   about `2m · ef / s` nodes for a share `s` of admitted rows, an exact
//!   pass `s · rows`: the two meet at `s · rows = √(2m · ef · rows)`.
//!   Exact answers are also what a very selective filter needs, since a
//!   walk may not reach `ef` admitted rows at all.
//!
//! Nothing in a query's answer depends on the other queries of its batch:
//! queries are only shared out to threads, and the walk, the rule and the
//! rerank read the query, the graph and the snapshot alone.

use crate::error::{Error, Result};
use crate::exec::ann::{unindexed_by, IndexView};
use crate::exec::exact;
use crate::exec::prefilter::{Admission, Bits, RowTest};
use crate::exec::profile::{ms_since, Profile};
use crate::index::hnsw::segment::{GraphBody, WalkDistance, WalkReads};
use crate::index::partition::{Partition, Payload};
use crate::kernel::pair::{fma_dots, CHAINS};
use crate::kernel::Metric;
use crate::query::{Candidate, TopK, ValidatedBatch};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

/// A query's `ef` when it names none.
pub const DEFAULT_EF: usize = 64;

/// Admitted rows at or below which a filtered query scores a segment's
/// rows exactly instead of walking its graph (see the module doc).
pub fn exact_below(rows: usize, m: usize, ef: usize) -> usize {
    ((2 * m * ef) as f64 * rows as f64).sqrt() as usize
}

/// Candidates query `qi` takes from a walk.
fn walk_width(batch: &ValidatedBatch, qi: usize) -> usize {
    batch.specs[qi]
        .ef
        .unwrap_or(DEFAULT_EF)
        .max(batch.index_depth(qi))
}

/// One loaded segment and what the batch's prefilters admit of it.
struct Loaded {
    part: Arc<Partition>,
    key: Arc<str>,
    m: usize,
    bits: Bits,
    /// No row of the segment's fragments is deleted or outside the search.
    all_visible: bool,
}

/// Searches every query of `batch` through the view's graph segments and
/// the unindexed fragments; one heap of depth `k + offset` per query,
/// before the postfilter and paging.
pub fn search_graphs(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
    profile: &mut Profile,
) -> Result<Vec<TopK>> {
    let n = batch.len();
    let t = Instant::now();
    let mut loaded = Vec::with_capacity(view.graphs.len());
    for seg in &view.graphs {
        view.cancel.check()?;
        let (part, read) = seg.load(view.cache)?;
        match read {
            Some(bytes) => {
                profile.cache_misses += 1;
                profile.bytes_read += bytes;
            }
            None => profile.cache_hits += 1,
        }
        profile.distinct_partitions += 1;
        profile.partition_bytes += part.size_bytes() as u64;
        let bits = admission.bits_for(batch, 0..n, &seg.key, 0, &part)?;
        let m = crate::index::hnsw::segment::graph_params(&seg.meta.params).map_or(0, |p| p.m);
        loaded.push(Loaded {
            part,
            key: seg.key.clone(),
            m,
            bits,
            all_visible: admission.all_visible(&seg.meta.fragments),
        });
    }
    let threads = view.threads.clamp(1, n);
    let per = n.div_ceil(threads);
    let distance = WalkDistance::new(batch.metric);
    let loaded = &loaded;
    let run = |share: usize| -> Result<(Vec<TopK>, Profile)> {
        let mut local = Profile::default();
        let mut heaps = Vec::new();
        for qi in share * per..((share + 1) * per).min(n) {
            view.cancel.check()?;
            let mut heap = TopK::new(batch.depth(qi));
            for seg in loaded {
                search_segment(seg, batch, qi, admission, distance, &mut heap, &mut local)?;
            }
            heaps.push(heap);
        }
        Ok((heaps, local))
    };
    let mut heaps = Vec::with_capacity(n);
    for (h, p) in view.pool.run(threads, run)? {
        heaps.extend(h);
        profile.pairs_probed += p.pairs_probed;
        profile.rows_scored += p.rows_scored;
        profile.refine_rows_read += p.refine_rows_read;
        profile.graph_walks += p.graph_walks;
        profile.graph_exact_scans += p.graph_exact_scans;
    }
    let rest = unindexed_by(view, batch, |id| {
        view.graphs.iter().any(|s| s.meta.fragments.contains(&id))
    });
    if !batch.fast_search && !rest.is_empty() {
        exact::merge_unindexed(view, batch, admission, &rest, &mut heaps, profile)?;
    }
    profile.scan_ms += ms_since(t);
    Ok(heaps)
}

/// Query `qi` against one graph segment: a walk, or an exact pass over the
/// rows its prefilter admits (see the module doc); the rows go into `heap`.
fn search_segment(
    seg: &Loaded,
    batch: &ValidatedBatch,
    qi: usize,
    admission: &Admission<'_>,
    distance: WalkDistance,
    heap: &mut TopK,
    profile: &mut Profile,
) -> Result<()> {
    let Payload::Graph(body) = &seg.part.payload else {
        return Err(Error::Internal(format!(
            "segment {} did not load as a graph",
            seg.key
        )));
    };
    let row_ids = &seg.part.row_ids;
    let q = batch.queries.row(qi);
    let qn = batch.queries.norms_sq[qi];
    let bits = seg.bits.of(batch.prefilter(qi));
    let test = admission.test(bits);
    let width = walk_width(batch, qi);
    profile.pairs_probed += 1;
    if let Some(bits) = bits {
        if bits.count() <= exact_below(row_ids.len(), seg.m, width) {
            profile.graph_exact_scans += 1;
            let rows: Vec<u32> = bits
                .ones()
                .filter(|&r| test.allows(r, row_ids[r]))
                .map(|r| r as u32)
                .collect();
            profile.rows_scored += rows.len() as u64;
            push_exact(body, row_ids, &rows, batch.metric, q, qn, heap);
            return Ok(());
        }
    }
    profile.graph_walks += 1;
    let visited = Cell::new(0u64);
    let everything = bits.is_none() && seg.all_visible;
    let admit = |i: u32| everything || test_allows(&test, row_ids, i);
    let score: Score<'_> = match &body.walk {
        WalkReads::Codes(codes) => {
            let prepared = codes.prepare(batch.metric, q, qn);
            Box::new(move |nodes, out| prepared.to_nodes(nodes, out))
        }
        WalkReads::Floats { scale } => {
            Box::new(move |nodes, out| distance.query_to_nodes(body, scale, q, qn, nodes, out))
        }
    };
    let found = body.graph.search(
        |nodes, out| {
            visited.set(visited.get() + nodes.len() as u64);
            score(nodes, out)
        },
        width,
        width,
        &admit,
    );
    profile.rows_scored += visited.get();
    profile.refine_rows_read += found.len() as u64;
    let nodes: Vec<u32> = found.into_iter().map(|(_, node)| node).collect();
    push_exact(body, row_ids, &nodes, batch.metric, q, qn, heap);
    Ok(())
}

/// A walk's distances to a node's neighbours, from codes or floats.
type Score<'a> = Box<dyn Fn(&[u32], &mut [f32]) + 'a>;

#[inline(always)]
fn test_allows(test: &RowTest<'_>, row_ids: &[u64], node: u32) -> bool {
    test.allows(node as usize, row_ids[node as usize])
}

/// Scores `nodes` of `body` exactly (the FMA chain, finished by the
/// metric, as every exact scan does) into `heap`.
fn push_exact(
    body: &GraphBody,
    row_ids: &[u64],
    nodes: &[u32],
    metric: Metric,
    q: &[f32],
    qn: f32,
    heap: &mut TopK,
) {
    let mut dots = [0.0f32; CHAINS];
    for group in nodes.chunks(CHAINS) {
        let rows: Vec<&[f32]> = group.iter().map(|&i| body.vector(i)).collect();
        fma_dots(q, &rows, &mut dots);
        for (&node, &dot) in group.iter().zip(&dots) {
            heap.push(Candidate {
                distance: metric.finish(dot, qn, body.norms_sq[node as usize]),
                row_id: row_ids[node as usize],
            });
        }
    }
}
