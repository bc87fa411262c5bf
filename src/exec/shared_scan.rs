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
//! * IVF_PQ, in blocks of 64 queries: the block's distinct partitions are
//!   fetched once, then scanned query by query ([`scan_pq_partition`]: the
//!   quantized-table screen, the float table for the rows it cannot rule
//!   out), so each query's tables stay in L1 while its partitions stream
//!   past (a table lookup per code byte gains nothing from sharing; the
//!   load does).
//!
//! Work is shared out to the scan threads through an atomic counter; each
//! thread keeps its own heaps and scratch, merged at the end, so there is no
//! lock on the hot path. Unindexed fragments get one exact pass for the
//! whole batch. Every (query, row) distance comes from the same functions as
//! in the single-query path ([`score_partition`], [`scan_pq_partition`]),
//! so each query's top-k is identical to what it gets alone.

use crate::error::{Error, Result};
use crate::exec::ann::{
    push_scored, rank_partitions, scan_pq_partition, score_partition, unindexed, IndexView,
    KernelQueries, Masks, PqQuery,
};
use crate::exec::exact::{self, RowMask};
use crate::exec::profile::{ms_since, Profile};
use crate::index::ivf::LoadedSegment;
use crate::index::partition::Partition;
use crate::kernel::Kernel;
use crate::query::{Nprobes, TopK, ValidatedBatch};
use crate::storage::FragmentView;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Queries per block of a PQ segment's scan.
const PQ_QUERY_BLOCK: usize = 64;

/// Queries of one partition scored per kernel call (keeps the score matrix
/// in cache between the kernel writing it and the heaps reading it).
const QUERY_GROUP: usize = 16;

/// (query, row) scores below which a segment is scanned on one thread.
const MIN_PARALLEL_WORK: usize = 4_096;

/// Partition loads of one scan, counted across threads.
#[derive(Default)]
struct Loads {
    hits: AtomicU64,
    misses: AtomicU64,
    bytes: AtomicU64,
    scored: AtomicU64,
    rescored: AtomicU64,
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
    }
}

/// Scan threads for `work` (query, row) scores over `units` work items.
fn threads_for(view: &IndexView<'_>, queries: usize, work: usize, units: usize) -> usize {
    // One query runs on one thread, as in the per-query path.
    if queries < 2 || work < MIN_PARALLEL_WORK {
        1
    } else {
        view.threads.clamp(1, units.max(1))
    }
}

/// Runs the shared scan; returns one heap of depth k + offset per query.
/// Only for fixed nprobes and no refine (the planner sends the rest to the
/// per-query path).
pub fn search_shared(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    profile: &mut Profile,
) -> Result<Vec<TopK>> {
    let Nprobes::Fixed(nprobes) = batch.options.nprobes else {
        return Err(Error::Internal("shared scan needs fixed nprobes".into()));
    };
    let masks = Masks::build(view.fragments, batch, profile)?;
    let n = batch.len();
    let mut heaps: Vec<TopK> = (0..n).map(|i| TopK::new(batch.depth(i))).collect();
    for seg in &view.segments {
        let t = Instant::now();
        let ranked = rank_partitions(seg, batch.metric, &batch.queries, nprobes);
        profile.rank_ms += ms_since(t);
        profile.pairs_probed += ranked.iter().map(|r| r.len() as u64).sum::<u64>();
        let t = Instant::now();
        let loads = Loads::default();
        if seg.model.pq.is_some() {
            for lo in (0..n).step_by(PQ_QUERY_BLOCK) {
                let hi = (lo + PQ_QUERY_BLOCK).min(n);
                scan_pq_block(
                    view,
                    seg,
                    batch,
                    &ranked,
                    lo..hi,
                    &masks,
                    &mut heaps,
                    &loads,
                    profile,
                )?;
            }
        } else {
            scan_partition_major(
                view, seg, batch, &ranked, &masks, &mut heaps, &loads, profile,
            )?;
        }
        loads.add_to(profile);
        profile.scan_ms += ms_since(t);
    }
    let rest = unindexed(view);
    if !batch.options.fast_search && !rest.is_empty() {
        let t = Instant::now();
        let items: Vec<(&FragmentView, &RowMask)> = rest
            .iter()
            .map(|&i| (&view.fragments[i], masks.of(i)))
            .collect();
        for (h, e) in heaps.iter_mut().zip(exact::scan(
            &items,
            batch,
            view,
            view.threads,
            Kernel::detect(),
        )?) {
            h.merge(e);
        }
        profile.rows_scored += items.iter().map(|(f, _)| f.rows() as u64).sum::<u64>() * n as u64;
        profile.scan_ms += ms_since(t);
    }
    Ok(heaps)
}

/// Flat and SQ segments: each distinct partition once, all its queries.
#[allow(clippy::too_many_arguments)]
fn scan_partition_major(
    view: &IndexView<'_>,
    seg: &LoadedSegment,
    batch: &ValidatedBatch,
    ranked: &[Vec<u32>],
    masks: &Masks,
    heaps: &mut [TopK],
    loads: &Loads,
    profile: &mut Profile,
) -> Result<()> {
    let n = batch.len();
    let mut probers: Vec<Vec<usize>> = vec![Vec::new(); seg.partitions()];
    for (qi, parts) in ranked.iter().enumerate() {
        for &p in parts {
            probers[p as usize].push(qi);
        }
    }
    let units: Vec<u32> = (0..seg.partitions() as u32)
        .filter(|&p| !probers[p as usize].is_empty())
        .collect();
    profile.distinct_partitions += units.len() as u64;
    let work: usize = units
        .iter()
        .map(|&p| seg.partition_rows(p) * probers[p as usize].len())
        .sum();
    let all: Vec<usize> = (0..n).collect();
    let kq = KernelQueries::new(seg, &batch.queries, &all);
    let next = AtomicUsize::new(0);
    let parts = view
        .pool
        .run(threads_for(view, n, work, units.len()), |_| {
            let mut local: Vec<TopK> = (0..n).map(|i| TopK::new(batch.depth(i))).collect();
            let (mut qrows, mut qnorms, mut qoffsets, mut scores) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            while let Some(&p) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                view.cancel.check()?;
                let part = loads.fetch(seg, p, view)?;
                let qs = &probers[p as usize];
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
                            masks,
                            &mut local[qi],
                        );
                    }
                }
                loads
                    .scored
                    .fetch_add((qs.len() * part.len()) as u64, Ordering::Relaxed);
            }
            Ok(local)
        })?;
    for part in parts {
        for (h, p) in heaps.iter_mut().zip(part) {
            h.merge(p);
        }
    }
    Ok(())
}

/// PQ segments, queries `block`: fetch the block's distinct partitions once,
/// then score query by query.
#[allow(clippy::too_many_arguments)]
fn scan_pq_block(
    view: &IndexView<'_>,
    seg: &LoadedSegment,
    batch: &ValidatedBatch,
    ranked: &[Vec<u32>],
    block: std::ops::Range<usize>,
    masks: &Masks,
    heaps: &mut [TopK],
    loads: &Loads,
    profile: &mut Profile,
) -> Result<()> {
    let mut slot = vec![usize::MAX; seg.partitions()];
    let mut units: Vec<u32> = Vec::new();
    for parts in &ranked[block.clone()] {
        for &p in parts {
            if slot[p as usize] == usize::MAX {
                slot[p as usize] = units.len();
                units.push(p);
            }
        }
    }
    profile.distinct_partitions += units.len() as u64;
    let work: usize = ranked[block.clone()]
        .iter()
        .flat_map(|parts| parts.iter().map(|&p| seg.partition_rows(p)))
        .sum();
    let threads = threads_for(view, block.len(), work, block.len());
    // Fetch: each distinct partition once, shared out to the threads.
    let next = AtomicUsize::new(0);
    let fetched = view.pool.run(threads, |_| {
        let mut got = Vec::new();
        while let Some(&p) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
            view.cancel.check()?;
            got.push((slot[p as usize], loads.fetch(seg, p, view)?));
        }
        Ok(got)
    })?;
    let mut partitions: Vec<Option<Arc<Partition>>> = vec![None; units.len()];
    for (i, part) in fetched.into_iter().flatten() {
        partitions[i] = Some(part);
    }
    // Score: queries shared out to the threads, each with its table hot.
    // Each query's heap so far (from earlier segments) goes with it, so the
    // screen starts from its threshold instead of an empty heap.
    let carried: Vec<Mutex<TopK>> = heaps[block.clone()]
        .iter_mut()
        .map(|h| Mutex::new(std::mem::replace(h, TopK::new(0))))
        .collect();
    let next = AtomicUsize::new(block.start);
    let scored = view.pool.run(threads, |_| {
        let mut out = Vec::new();
        while let Some(qi) = Some(next.fetch_add(1, Ordering::Relaxed)).filter(|qi| *qi < block.end)
        {
            let q = batch.queries.row(qi);
            let pq = PqQuery::new(seg, batch.metric, q)
                .ok_or_else(|| Error::Internal("PQ scan of a segment without PQ".into()))?;
            let mut heap = match carried[qi - block.start].lock() {
                Ok(mut h) => std::mem::replace(&mut *h, TopK::new(0)),
                Err(_) => return Err(Error::Internal("a scan thread panicked".into())),
            };
            for &p in &ranked[qi] {
                view.cancel.check()?;
                let part = partitions[slot[p as usize]]
                    .as_ref()
                    .ok_or_else(|| Error::Internal(format!("partition {p} was not fetched")))?;
                let rescored =
                    scan_pq_partition(seg, p, part, batch.metric, q, &pq, masks, &mut heap)?;
                loads.scored.fetch_add(part.len() as u64, Ordering::Relaxed);
                loads.rescored.fetch_add(rescored as u64, Ordering::Relaxed);
            }
            out.push((qi, heap));
        }
        Ok(out)
    })?;
    for (qi, heap) in scored.into_iter().flatten() {
        heaps[qi] = heap;
    }
    Ok(())
}
