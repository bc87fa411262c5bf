//! The shared IVF partition scan: shoal's reason to exist.
//!
//! A batch ranks all of its queries against each segment's centroids in
//! one kernel call and inverts the per-query probe lists into
//! partition → queries; each distinct partition is then read once (through
//! the partition cache) for every query that probes it:
//!
//! * IVF_FLAT / IVF_SQ, partition-major: a partition is scored for all of
//!   its queries in kernel calls of up to 16 queries (the register tiles
//!   reuse each loaded vector across queries — the compute win).
//! * IVF_PQ and IVF_RQ, in blocks of 64 queries: the block's distinct
//!   partitions are fetched once, then scanned query by query
//!   ([`scan_code_partition`](crate::exec::ann::scan_code_partition): the
//!   quantized-table screen, the float table for the rows it cannot rule
//!   out), so each query's tables stay in L1
//!   while its partitions stream past (a table lookup per code byte gains
//!   nothing from sharing; the load does). Query by query also keeps each
//!   query's heap, and so RaBitQ's threshold-dependent screen, in the
//!   order of its single-query walk. A PQ or one-bit RaBitQ block (exact
//!   screens) with fewer queries than threads and at least
//!   `PQ_MIN_SPLIT_ROWS` code rows splits each query's partitions over the
//!   threads instead (`codes.rs`, `scan_pq_split`).
//!
//! Each query brings its own options: k, offset, filter (and mode),
//! nprobes and refine factor. Per partition, each distinct prefilter of its
//! queries is evaluated once on the partition's rows (or found in the
//! filter cache) and each query's rows are tested against its own before
//! they reach its heap.
//!
//! * Fixed nprobes: a query probes its first n partitions in centroid
//!   order (the batch ranks once, to the largest n asked for).
//! * Adaptive nprobes ([`resolve_probes`]): every query's first `min`
//!   partitions are loaded in one shared round; then, round after round,
//!   each query still short of k + offset candidate rows adds its next
//!   partition, each distinct partition of a round loaded once. A query
//!   probes exactly the partitions its single-query walk would (the stop
//!   rule depends only on counts of candidate rows, not on scores), and
//!   the partitions are then scanned like fixed probes.
//! * Refine ([`refine_shared`]): a refining query keeps (k + offset) × r
//!   index candidates; the union of all queries' candidates is reranked
//!   with exact distances, each fragment's vectors read once for the batch.
//!
//! Work is shared out to the scan threads through an atomic counter; each
//! thread keeps its own heaps and scratch, merged at the end (on the
//! threads too, in groups of queries), so there is no lock on the hot
//! path. The centroid ranking before the scan also runs on the threads, in
//! groups of queries: on many cores a serial step of a few percent would
//! cap the batch's speed-up. Unindexed fragments get one exact pass for the
//! whole batch. Every (query, row) distance comes from the same functions as
//! in the single-query path ([`score_partition`],
//! [`scan_code_partition`](crate::exec::ann::scan_code_partition),
//! the exact rerank's `fma_dot`), so each query's top-k is identical to what
//! it gets alone.

use crate::error::{Error, Result};
use crate::exec::ann::{
    probe_bounds, push_scored, rank_partitions, rank_query_range, score_partition, unindexed,
    IndexView, KernelQueries,
};
use crate::exec::exact;
use crate::exec::prefilter::Admission;
use crate::exec::profile::{ms_since, Profile};
use crate::index::ivf::LoadedSegment;
use crate::index::partition::Partition;
use crate::kernel::streams_from_memory;
use crate::query::{Candidate, Nprobes, TopK, ValidatedBatch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod codes;
use codes::scan_pq_block;

/// Queries per block of a PQ or RaBitQ segment's scan.
const PQ_QUERY_BLOCK: usize = 64;

/// Queries of one partition scored per kernel call (keeps the score matrix
/// in cache between the kernel writing it and the heaps reading it).
const QUERY_GROUP: usize = 16;

/// (query, row) scores below which a segment is scanned on one thread.
const MIN_PARALLEL_WORK: usize = 4_096;

/// Code rows a PQ (or one-bit RaBitQ) block must scan before its queries'
/// partitions are split over the threads. A code row costs a few table
/// lookups, far less than a float row, and each share's heap starts
/// empty, so its screen rules out fewer rows than one walk's would:
/// measured on 2 cores (1M × 128, m 16, one query), splitting cost 30% at
/// 16,000 rows, broke even at 64,000 and gained 14% at 256,000.
const PQ_MIN_SPLIT_ROWS: usize = 131_072;

/// Partition loads of one scan, counted across threads.
#[derive(Default)]
struct Loads {
    hits: AtomicU64,
    misses: AtomicU64,
    bytes: AtomicU64,
    scored: AtomicU64,
    rescored: AtomicU64,
    bound_skipped: AtomicU64,
    /// Bytes of the distinct partitions scanned.
    partition_bytes: AtomicU64,
}

impl Loads {
    fn fetch(&self, seg: &LoadedSegment, p: u32, view: &IndexView<'_>) -> Result<Arc<Partition>> {
        let (part, read) = seg.partition(p, view.cache)?;
        match read {
            Some(b) => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(b, Ordering::Relaxed);
            }
            None => {
                self.hits.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(part)
    }

    fn add_to(self, profile: &mut Profile) {
        profile.cache_hits += self.hits.into_inner();
        profile.cache_misses += self.misses.into_inner();
        profile.bytes_read += self.bytes.into_inner();
        profile.rows_scored += self.scored.into_inner();
        profile.rows_rescored += self.rescored.into_inner();
        profile.rows_bound_skipped += self.bound_skipped.into_inner();
        profile.partition_bytes += self.partition_bytes.into_inner();
    }
}

/// Shares a segment's scan is split into: one when the work is small (a
/// hand-off to another thread would cost more than it saves), else up to
/// one per scan thread, for a single query too. Idle scan threads help;
/// when every one is busy, the caller scans the shares itself (see
/// `ScanPool::run`), so a lone query uses idle cores without taking them
/// from a loaded engine. The per-share heaps merge under the one tie rule,
/// so the rows and distance bits are those of a one-thread scan.
fn threads_for(view: &IndexView<'_>, work: usize, units: usize) -> usize {
    if work < MIN_PARALLEL_WORK {
        1
    } else {
        view.threads.clamp(1, units.max(1))
    }
}

/// Runs the shared scan; returns one heap of depth k + offset per query
/// (refined where a query asked for it), before its postfilter and paging.
pub fn search_shared(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
    profile: &mut Profile,
) -> Result<Vec<TopK>> {
    let n = batch.len();
    let mut heaps: Vec<TopK> = (0..n).map(|i| TopK::new(batch.index_depth(i))).collect();
    let limit = (0..n)
        .map(|qi| probe_bounds(batch, qi).1)
        .max()
        .unwrap_or(0);
    for seg in &view.segments {
        let t = Instant::now();
        let ranked = rank_shared(view, seg, batch, limit)?;
        profile.rank_ms += ms_since(t);
        let t = Instant::now();
        let loads = Loads::default();
        let probes = resolve_probes(view, seg, batch, admission, ranked, &loads, profile)?;
        let mut distinct: Vec<u32> = probes.iter().flatten().copied().collect();
        distinct.sort_unstable();
        distinct.dedup();
        seg.prefetch(&distinct, view.cache)?;
        profile.pairs_probed += probes.iter().map(|r| r.len() as u64).sum::<u64>();
        let scan = SegmentScan {
            view,
            seg,
            batch,
            probes: &probes,
            admission,
            loads: &loads,
        };
        if seg.model.query_major() {
            for lo in (0..n).step_by(PQ_QUERY_BLOCK) {
                let hi = (lo + PQ_QUERY_BLOCK).min(n);
                scan_pq_block(&scan, lo..hi, &mut heaps, profile)?;
            }
        } else {
            scan_partition_major(&scan, &mut heaps, profile)?;
        }
        loads.add_to(profile);
        profile.scan_ms += ms_since(t);
    }
    let t = Instant::now();
    let mut heaps = refine_shared(view, batch, heaps, profile)?;
    profile.merge_ms += ms_since(t);
    let rest = unindexed(view, batch);
    if !batch.fast_search && !rest.is_empty() {
        let t = Instant::now();
        exact::merge_unindexed(view, batch, admission, &rest, &mut heaps, profile)?;
        profile.scan_ms += ms_since(t);
    }
    Ok(heaps)
}

/// Every query's ranked partitions of `seg` ([`rank_partitions`]), ranked on
/// the scan threads in groups of [`QUERY_GROUP`] queries when the batch is
/// large enough to be worth it: ranking is a serial step before the
/// partition scan, and on many cores a serial step of a few percent
/// becomes a large share of the batch's time.
fn rank_shared(
    view: &IndexView<'_>,
    seg: &LoadedSegment,
    batch: &ValidatedBatch,
    limit: usize,
) -> Result<Vec<Vec<u32>>> {
    let n = batch.len();
    let groups = n.div_ceil(QUERY_GROUP);
    let shares = threads_for(view, n * seg.partitions(), groups);
    if shares <= 1 {
        return Ok(rank_partitions(seg, batch.metric, &batch.queries, limit));
    }
    let by_group = map_query_groups(view, shares, 0..n, |range| {
        rank_query_range(seg, batch.metric, &batch.queries, range, limit)
    })?;
    Ok(by_group.into_iter().flatten().collect())
}

/// `f` of each group of [`QUERY_GROUP`] consecutive queries of `queries`
/// (the last group may be shorter), on `shares` scan threads; the outputs
/// in group order.
fn map_query_groups<T: Send + 'static>(
    view: &IndexView<'_>,
    shares: usize,
    queries: std::ops::Range<usize>,
    f: impl Fn(std::ops::Range<usize>) -> T + Sync,
) -> Result<Vec<T>> {
    let groups: Vec<std::ops::Range<usize>> = queries
        .clone()
        .step_by(QUERY_GROUP)
        .map(|lo| lo..(lo + QUERY_GROUP).min(queries.end))
        .collect();
    let next = AtomicUsize::new(0);
    let done = view.pool.run(shares.clamp(1, groups.len().max(1)), |_| {
        let mut got = Vec::new();
        while let Some(g) = Some(next.fetch_add(1, Ordering::Relaxed)).filter(|&g| g < groups.len())
        {
            got.push((g, f(groups[g].clone())));
        }
        Ok(got)
    })?;
    let mut out: Vec<Option<T>> = (0..groups.len()).map(|_| None).collect();
    for (g, value) in done.into_iter().flatten() {
        out[g] = Some(value);
    }
    out.into_iter()
        .map(|v| v.ok_or_else(|| Error::Internal("a query group was not mapped".into())))
        .collect()
}

/// Each query's probe list in `seg` (from its ranked partitions, nearest
/// first, ranked to the batch's largest limit).
///
/// Fixed nprobes: the first n. Adaptive: what the single-query walk
/// probes — the first `min`, then one more while the probed partitions
/// hold fewer than k + offset rows its row test allows, never more than
/// `max`. The walk runs for all adaptive queries at once in rounds: round
/// 0 loads every query's first `min` partitions, each later round the next
/// partition of every query still short, each distinct partition once per
/// round (and a partition's count of allowed rows once per prefilter, on
/// the scan threads).
fn resolve_probes(
    view: &IndexView<'_>,
    seg: &LoadedSegment,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
    mut ranked: Vec<Vec<u32>>,
    loads: &Loads,
    profile: &mut Profile,
) -> Result<Vec<Vec<u32>>> {
    // (query, partitions decided so far, allowed rows seen), adaptive only.
    let mut walks: Vec<(usize, usize, usize)> = Vec::new();
    for (qi, list) in ranked.iter_mut().enumerate() {
        let (min, max) = probe_bounds(batch, qi);
        list.truncate(max);
        if matches!(batch.specs[qi].nprobes, Nprobes::Adaptive { .. }) {
            walks.push((qi, min.min(list.len()), 0));
        }
    }
    if walks.is_empty() {
        return Ok(ranked);
    }
    // Admitted rows per (partition, prefilter), counted once per batch.
    let mut counts: HashMap<(u32, Option<usize>), usize> = HashMap::new();
    // (walk, positions of its ranked list) to count this round: round 0
    // partitions [0, min) of each walk, later rounds one each.
    let mut wanted: Vec<(usize, std::ops::Range<usize>)> = walks
        .iter()
        .enumerate()
        .map(|(w, &(_, upto, _))| (w, 0..upto))
        .collect();
    while !wanted.is_empty() {
        view.cancel.check()?;
        // The round's distinct partitions, each with the prefilters whose
        // counts it still lacks.
        let mut round: Vec<(u32, Vec<Option<usize>>)> = Vec::new();
        let mut slot: HashMap<u32, usize> = HashMap::new();
        for (w, range) in &wanted {
            let f = batch.prefilter(walks[*w].0);
            for &p in &ranked[walks[*w].0][range.clone()] {
                if counts.contains_key(&(p, f)) {
                    continue;
                }
                let i = *slot.entry(p).or_insert_with(|| {
                    round.push((p, Vec::new()));
                    round.len() - 1
                });
                if !round[i].1.contains(&f) {
                    round[i].1.push(f);
                }
            }
        }
        profile.adaptive_rounds += 1;
        profile.adaptive_loads.push(round.len() as u64);
        let mut ids: Vec<u32> = round.iter().map(|(p, _)| *p).collect();
        ids.sort_unstable();
        seg.prefetch(&ids, view.cache)?;
        // Load and count on the scan threads; a partition is let go once
        // counted (the scan fetches it again through the cache), so the
        // walk holds no more than a round's partitions at once.
        let next = AtomicUsize::new(0);
        let counted = view
            .pool
            .run(view.threads.clamp(1, round.len().max(1)), |_| {
                let mut got = Vec::new();
                while let Some((p, filters)) = round.get(next.fetch_add(1, Ordering::Relaxed)) {
                    view.cancel.check()?;
                    let part = loads.fetch(seg, *p, view)?;
                    for &f in filters {
                        let bits = match f {
                            Some(f) => Some(admission.partition_bits(&seg.key, *p, &part, f)?),
                            None => None,
                        };
                        got.push((
                            (*p, f),
                            admission.test(bits.as_deref()).count(&part.row_ids),
                        ));
                    }
                }
                Ok(got)
            })?;
        counts.extend(counted.into_iter().flatten());
        for (w, range) in &wanted {
            let walk = &mut walks[*w];
            let f = batch.prefilter(walk.0);
            for &p in &ranked[walk.0][range.clone()] {
                walk.2 += counts
                    .get(&(p, f))
                    .copied()
                    .ok_or_else(|| Error::Internal(format!("partition {p} was not counted")))?;
            }
        }
        // Who probes one more: the single-query rule, checked before
        // probing position `upto`.
        wanted.clear();
        for (w, walk) in walks.iter_mut().enumerate() {
            let (qi, upto, passed) = *walk;
            let (min, _) = probe_bounds(batch, qi);
            let done = upto >= ranked[qi].len() || (upto >= min && passed >= batch.depth(qi));
            if !done {
                wanted.push((w, upto..upto + 1));
                walk.1 = upto + 1;
            }
        }
    }
    for (qi, upto, _) in walks {
        ranked[qi].truncate(upto);
    }
    Ok(ranked)
}

/// What scanning one segment's partitions for a batch needs.
struct SegmentScan<'s, 'v> {
    view: &'s IndexView<'v>,
    seg: &'s LoadedSegment,
    batch: &'s ValidatedBatch,
    /// Each query's partitions.
    probes: &'s [Vec<u32>],
    admission: &'s Admission<'s>,
    loads: &'s Loads,
}

/// Flat and SQ segments: each distinct partition once, all its queries.
fn scan_partition_major(
    scan: &SegmentScan<'_, '_>,
    heaps: &mut [TopK],
    profile: &mut Profile,
) -> Result<()> {
    let SegmentScan {
        view,
        seg,
        batch,
        probes,
        admission,
        loads,
    } = *scan;
    let n = batch.len();
    let mut probers: Vec<Vec<usize>> = vec![Vec::new(); seg.partitions()];
    for (qi, parts) in probes.iter().enumerate() {
        for &p in parts {
            probers[p as usize].push(qi);
        }
    }
    let mut units: Vec<u32> = (0..seg.partitions() as u32)
        .filter(|&p| !probers[p as usize].is_empty())
        .collect();
    // Largest units first (rows × queries): the threads take units in
    // this order, so the last ones to start are the small ones and the
    // shares end close together, where partitions differ widely in size.
    units.sort_by_key(|&p| std::cmp::Reverse(seg.partition_rows(p) * probers[p as usize].len()));
    profile.distinct_partitions += units.len() as u64;
    let work: usize = units
        .iter()
        .map(|&p| seg.partition_rows(p) * probers[p as usize].len())
        .sum();
    let all: Vec<usize> = (0..n).collect();
    let kq = KernelQueries::new(seg, &batch.queries, &all);
    // A segment larger than the last-level cache streams from memory: its
    // float32 tiles prefetch ahead (in cache that would only cost time).
    let streamed = streams_from_memory(seg.meta.rows * (seg.model.dim as u64) * 4);
    let next = AtomicUsize::new(0);
    let shares = threads_for(view, work, units.len());
    // How the shares spent the phase (for `--explain` and the scaling
    // benchmark): their busy time, summed and the longest.
    let (busy_ns, longest_ns) = (AtomicU64::new(0), AtomicU64::new(0));
    let phase = Instant::now();
    let parts = view.pool.run(shares, |_| {
        let started = Instant::now();
        let _timer = ShareTimer {
            started,
            busy_ns: &busy_ns,
            longest_ns: &longest_ns,
        };
        let mut local: Vec<TopK> = (0..n).map(|i| TopK::new(batch.index_depth(i))).collect();
        let (mut qrows, mut qnorms, mut qoffsets, mut scores) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Counted here and added once per share: a shared counter
        // written per partition would bounce between cores.
        let (mut scored, mut bytes) = (0u64, 0u64);
        while let Some(&p) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
            view.cancel.check()?;
            let part = loads.fetch(seg, p, view)?;
            let qs = &probers[p as usize];
            let bits = admission.bits_for(batch, qs.iter().copied(), &seg.key, p, &part)?;
            for group in qs.chunks(QUERY_GROUP) {
                qrows.clear();
                qnorms.clear();
                qoffsets.clear();
                for &qi in group {
                    qrows.extend_from_slice(kq.row(qi));
                    qnorms.push(kq.norm(qi));
                    qoffsets.extend(kq.offset(qi));
                }
                let stride = score_partition(
                    p,
                    &part,
                    streamed,
                    batch.metric,
                    &qrows,
                    &qnorms,
                    &qoffsets,
                    &mut scores,
                )?;
                for (j, &qi) in group.iter().enumerate() {
                    push_scored(
                        &scores[j * stride..j * stride + part.len()],
                        &part.row_ids,
                        admission.test(bits.of(batch.prefilter(qi))),
                        &mut local[qi],
                    );
                }
            }
            scored += (qs.len() * part.len()) as u64;
            bytes += part.size_bytes() as u64;
        }
        loads.scored.fetch_add(scored, Ordering::Relaxed);
        loads.partition_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(local)
    })?;
    let wall = ms_since(phase);
    profile.scan_parallel_ms += wall;
    profile.share_capacity_ms += shares as f64 * wall;
    profile.scan_shares += shares as u64;
    profile.share_busy_ms += busy_ns.load(Ordering::Relaxed) as f64 / 1e6;
    profile.share_max_ms += longest_ns.load(Ordering::Relaxed) as f64 / 1e6;
    let merging = Instant::now();
    merge_shares(view, heaps, parts)?;
    profile.heap_merge_ms += ms_since(merging);
    Ok(())
}

/// One group of queries' heaps, and each share's heaps of those queries.
type MergeUnit<'h> = (&'h mut [TopK], Vec<Vec<TopK>>);

/// Queries whose per-share heaps one merge unit takes.
const MERGE_GROUP: usize = 16;

/// Merges each share's heaps (`parts[share][query]`) into `heaps`. The
/// merge's work grows with the shares (each keeps up to k + offset rows of
/// every query it scanned for), so on many threads a serial merge would
/// take a growing share of a shrinking batch time: the queries are merged
/// in groups of [`MERGE_GROUP`] on the scan threads instead. Any merge
/// order gives the same heap (one total order: distance, then row id).
fn merge_shares(view: &IndexView<'_>, heaps: &mut [TopK], parts: Vec<Vec<TopK>>) -> Result<()> {
    let groups = heaps.len().div_ceil(MERGE_GROUP);
    let entries: usize = parts.iter().flatten().map(TopK::len).sum();
    let shares = threads_for(view, entries, groups);
    if parts.len() <= 1 || shares <= 1 {
        for part in parts {
            for (h, p) in heaps.iter_mut().zip(part) {
                h.merge(p);
            }
        }
        return Ok(());
    }
    // Group g: its queries' heaps, and each share's heaps of those queries.
    let mut from_shares: Vec<Vec<Vec<TopK>>> = (0..groups).map(|_| Vec::new()).collect();
    for part in parts {
        let mut part = part.into_iter();
        for group in from_shares.iter_mut() {
            group.push(part.by_ref().take(MERGE_GROUP).collect());
        }
    }
    let units: Vec<Mutex<MergeUnit<'_>>> = heaps
        .chunks_mut(MERGE_GROUP)
        .zip(from_shares)
        .map(Mutex::new)
        .collect();
    let next = AtomicUsize::new(0);
    view.pool.run(shares, |_| {
        while let Some(unit) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
            let mut unit = unit
                .lock()
                .map_err(|_| Error::Internal("a heap merge panicked".into()))?;
            let (heaps, from_shares) = &mut *unit;
            for part in std::mem::take(from_shares) {
                for (h, p) in heaps.iter_mut().zip(part) {
                    h.merge(p);
                }
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// Adds a share's busy time to its phase's totals when the share ends
/// (returning or failing).
struct ShareTimer<'a> {
    started: Instant,
    busy_ns: &'a AtomicU64,
    longest_ns: &'a AtomicU64,
}

impl Drop for ShareTimer<'_> {
    fn drop(&mut self) {
        let ns = self.started.elapsed().as_nanos() as u64;
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        self.longest_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

/// Turns each query's index heap into its top k + offset: as is, or — for a
/// query with a refine factor — reranked by exact float32 distances. The
/// union of the refining queries' candidates is grouped by fragment, so
/// each fragment's vector column is read once for the batch; each
/// candidate's distance is computed as the single-query rerank computes it
/// (`fma_dot` of the prepared query and the stored vector, finished by the
/// metric; here eight candidates' chains interleaved,
/// [`VectorBlocks::fma_dot_pairs`](crate::kernel::VectorBlocks::fma_dot_pairs)),
/// sorted and cut the same way.
pub fn refine_shared(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    heaps: Vec<TopK>,
    profile: &mut Profile,
) -> Result<Vec<TopK>> {
    let refining: Vec<bool> = batch
        .specs
        .iter()
        .map(|s| s.refine_factor.is_some())
        .collect();
    if !refining.contains(&true) {
        return Ok(heaps);
    }
    let mut found: Vec<Vec<Candidate>> = heaps.into_iter().map(TopK::into_sorted_vec).collect();
    let mut by_fragment: HashMap<u32, Vec<(usize, usize)>> = HashMap::new();
    for (qi, cands) in found.iter().enumerate() {
        if refining[qi] {
            for (j, c) in cands.iter().enumerate() {
                by_fragment
                    .entry((c.row_id >> 32) as u32)
                    .or_default()
                    .push((qi, j));
            }
        }
    }
    for (fragment, pairs) in &by_fragment {
        view.cancel.check()?;
        let frag = view
            .fragments
            .iter()
            .find(|f| f.meta.id == *fragment)
            .ok_or_else(|| {
                Error::Internal(format!("fragment {fragment} is not in the snapshot"))
            })?;
        let vectors = frag.vectors(&batch.column)?;
        // Each candidate's dot product as the single-query rerank's FMA
        // chain, eight candidates' chains at a time.
        let mut rows = Vec::with_capacity(pairs.len());
        for &(qi, j) in pairs {
            let row = (found[qi][j].row_id & 0xffff_ffff) as usize;
            if row >= vectors.len() {
                return Err(Error::Internal(format!(
                    "row {} is past the end of its fragment",
                    found[qi][j].row_id
                )));
            }
            rows.push((qi, row));
        }
        let dots = vectors.fma_dot_pairs(&batch.queries, &rows);
        for ((&(qi, j), &(_, i)), dot) in pairs.iter().zip(&rows).zip(dots) {
            found[qi][j].distance =
                batch
                    .metric
                    .finish(dot, batch.queries.norms_sq[qi], vectors.norms_sq()[i]);
        }
        profile.refine_rows_read += pairs.len() as u64;
    }
    Ok(found
        .into_iter()
        .enumerate()
        .map(|(qi, mut cands)| {
            if refining[qi] {
                cands.sort_unstable();
            }
            let mut heap = TopK::new(batch.depth(qi));
            for c in cands {
                heap.push(c);
            }
            heap
        })
        .collect())
}
