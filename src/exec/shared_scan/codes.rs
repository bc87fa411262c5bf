//! The shared scan of code segments (IVF_PQ, IVF_RQ): a block of queries
//! fetches its distinct partitions once, then scores query by query, each
//! query's tables hot while its partitions stream past; a lone query (fewer
//! queries than threads) over enough rows splits its partitions over the
//! threads instead, where the screen is exact (PQ, one-bit RaBitQ).

use super::merge_shares;
use super::{map_query_groups, threads_for, SegmentScan, PQ_MIN_SPLIT_ROWS, QUERY_GROUP};
use crate::error::{Error, Result};
use crate::exec::ann::{scan_code_partition, CodeQuery};
use crate::exec::prefilter::Bits;
use crate::exec::profile::{ms_since, Profile};
use crate::index::ivf::LoadedSegment;
use crate::index::partition::Partition;
use crate::query::TopK;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// PQ and RaBitQ segments, queries `block`: fetch the block's distinct partitions once
/// (with their prefilter bits), then score query by query.
pub(super) fn scan_pq_block(
    scan: &SegmentScan<'_, '_>,
    block: std::ops::Range<usize>,
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
    let mut slot = vec![usize::MAX; seg.partitions()];
    let mut units: Vec<u32> = Vec::new();
    let mut unit_queries: Vec<Vec<usize>> = Vec::new();
    for qi in block.clone() {
        for &p in &probes[qi] {
            if slot[p as usize] == usize::MAX {
                slot[p as usize] = units.len();
                units.push(p);
                unit_queries.push(Vec::new());
            }
            unit_queries[slot[p as usize]].push(qi);
        }
    }
    profile.distinct_partitions += units.len() as u64;
    let work: usize = probes[block.clone()]
        .iter()
        .flat_map(|parts| parts.iter().map(|&p| seg.partition_rows(p)))
        .sum();
    let threads = threads_for(view, work, block.len());
    // Fewer queries than threads (a lone query, say): PQ and one-bit
    // RaBitQ split each query's partitions over the threads instead (see
    // `scan_pq_split`). RaBitQ above one bit does not: its screen's error
    // bound makes which rows it skips depend on the heap it scans into, so
    // each query keeps its walk (a split that replays the walk was
    // measured 2x slower: docs/PERFORMANCE.md, 2026-12-07).
    let split_threads = threads_for(view, work, units.len());
    let split = seg.model.rq.as_ref().is_none_or(|rq| rq.bits == 1)
        && block.len() < view.threads
        && work >= PQ_MIN_SPLIT_ROWS
        && split_threads > 1;
    let fetch_threads = if split { split_threads } else { threads };
    // Fetch: each distinct partition once, shared out to the threads, with
    // the bits of each prefilter its queries bring.
    let next = AtomicUsize::new(0);
    let fetched = view.pool.run(fetch_threads, |_| {
        let mut got = Vec::new();
        while let Some(u) = Some(next.fetch_add(1, Ordering::Relaxed)).filter(|&u| u < units.len())
        {
            view.cancel.check()?;
            let p = units[u];
            let part = loads.fetch(seg, p, view)?;
            let bits =
                admission.bits_for(batch, unit_queries[u].iter().copied(), &seg.key, p, &part)?;
            got.push((u, part, bits));
        }
        Ok(got)
    })?;
    let mut partitions = Vec::new();
    partitions.resize_with(units.len(), || None);
    for (u, part, bits) in fetched.into_iter().flatten() {
        profile.partition_bytes += part.size_bytes() as u64;
        partitions[u] = Some((part, bits));
    }
    let fetched = FetchedBlock {
        block: block.clone(),
        slot: &slot,
        partitions: &partitions,
    };
    if split {
        let phase = Instant::now();
        scan_pq_split(scan, &fetched, fetch_threads, heaps)?;
        profile.scan_shares += fetch_threads as u64;
        profile.scan_parallel_ms += ms_since(phase);
        return Ok(());
    }
    // RaBitQ: the block's queries rotated in kernel calls of 16 (the dot
    // kernel is batch invariant: the same bits as rotating one alone);
    // chunk `c` holds queries `block.start + 16c ..`.
    let rotated: Vec<Vec<f32>> = match &seg.model.rq {
        Some(rq) => {
            let dim = batch.queries.dim;
            map_query_groups(view, threads, block.clone(), |range| {
                rq.rotate(&batch.queries.data[range.start * dim..range.end * dim])
            })?
        }
        None => Vec::new(),
    };
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
            let cq = match &seg.model.rq {
                Some(rq) => {
                    let k = qi - block.start;
                    let at = (k % QUERY_GROUP) * rq.padded;
                    let z = rotated[k / QUERY_GROUP][at..at + rq.padded].to_vec();
                    CodeQuery::Rq(rq.query_rotated(batch.metric, q, z))
                }
                None => code_query(seg, batch.metric, q)?,
            };
            let mut heap = match carried[qi - block.start].lock() {
                Ok(mut h) => std::mem::replace(&mut *h, TopK::new(0)),
                Err(_) => return Err(Error::Internal("a scan thread panicked".into())),
            };
            for &p in &probes[qi] {
                view.cancel.check()?;
                fetched.scan(scan, qi, p, &cq, &mut heap)?;
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

/// Query `q`'s tables for code segment `seg` ([`CodeQuery::new`]); a
/// segment without codes here is an internal error.
fn code_query(seg: &LoadedSegment, metric: crate::kernel::Metric, q: &[f32]) -> Result<CodeQuery> {
    CodeQuery::new(seg, metric, q)
        .ok_or_else(|| Error::Internal("code scan of a segment without PQ or RaBitQ".into()))
}

/// A PQ block's partitions as fetched: `partitions[slot[p]]` is partition
/// `p` with its prefilter bits.
struct FetchedBlock<'a> {
    block: std::ops::Range<usize>,
    slot: &'a [usize],
    partitions: &'a [Option<(Arc<Partition>, Bits)>],
}

impl FetchedBlock<'_> {
    /// Scans fetched partition `p` for query `qi` (tables `cq`) into `heap`
    /// through the query's own row test, and counts the rows.
    fn scan(
        &self,
        scan: &SegmentScan<'_, '_>,
        qi: usize,
        p: u32,
        cq: &CodeQuery,
        heap: &mut TopK,
    ) -> Result<()> {
        let (part, bits) = self.partitions[self.slot[p as usize]]
            .as_ref()
            .ok_or_else(|| Error::Internal(format!("partition {p} was not fetched")))?;
        let batch = scan.batch;
        let test = scan.admission.test(bits.of(batch.prefilter(qi)));
        let counts = scan_code_partition(
            scan.seg,
            p,
            part,
            batch.metric,
            batch.queries.row(qi),
            cq,
            test,
            heap,
        )?;
        let loads = scan.loads;
        loads.scored.fetch_add(part.len() as u64, Ordering::Relaxed);
        loads
            .rescored
            .fetch_add(counts.rescored as u64, Ordering::Relaxed);
        loads
            .bound_skipped
            .fetch_add(counts.bound_skipped as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A PQ (or one-bit RaBitQ) block with fewer queries than scan threads:
/// its (query, partition) pairs are shared out to `shares` threads,
/// largest partitions first, each share with its own heap per query,
/// merged at the end. These screens only skip rows whose exact lower bound
/// (one bit: of the distance itself) exceeds the heap's threshold,
/// and a share's heap (fewer candidates) never has a lower threshold than
/// the query's whole walk, so every row of the query's true top k is
/// scored in either case: the rows and distance bits are those of the
/// query scanned alone.
fn scan_pq_split(
    scan: &SegmentScan<'_, '_>,
    fetched: &FetchedBlock<'_>,
    shares: usize,
    heaps: &mut [TopK],
) -> Result<()> {
    let (view, seg, batch) = (scan.view, scan.seg, scan.batch);
    let block = fetched.block.clone();
    let tables: Vec<CodeQuery> = block
        .clone()
        .map(|qi| code_query(seg, batch.metric, batch.queries.row(qi)))
        .collect::<Result<_>>()?;
    let mut pairs: Vec<(usize, u32)> = block
        .clone()
        .flat_map(|qi| scan.probes[qi].iter().map(move |&p| (qi, p)))
        .collect();
    pairs.sort_by_key(|&(_, p)| std::cmp::Reverse(seg.partition_rows(p)));
    let next = AtomicUsize::new(0);
    let parts = view.pool.run(shares, |_| {
        let mut local: Vec<TopK> = block
            .clone()
            .map(|qi| TopK::new(batch.index_depth(qi)))
            .collect();
        while let Some(&(qi, p)) = pairs.get(next.fetch_add(1, Ordering::Relaxed)) {
            view.cancel.check()?;
            let k = qi - block.start;
            fetched.scan(scan, qi, p, &tables[k], &mut local[k])?;
        }
        Ok(local)
    })?;
    merge_shares(view, &mut heaps[block], parts)
}
