//! The shared IVF partition scan: shoal's reason to exist.
//!
//! A batch ranks all of its queries against each segment's centroids in
//! one kernel call, inverts the per-query probe lists into
//! partition → queries, and then reads each distinct partition once and
//! scores every query that probes it in one call of the same scoring code the
//! single-query path uses ([`score_partition`]). Partitions are shared out to
//! the scan threads through an atomic counter; each thread keeps its own
//! heaps and scratch, merged at the end, so there is no lock on the hot path.
//! Unindexed fragments get one exact pass for the whole batch.
//!
//! Every query sees exactly the candidates, with exactly the distances, it
//! would see alone, so its top-k is identical (the heap order
//! `(distance, row_id)` is total).

use crate::error::{Error, Result};
use crate::exec::ann::{
    pq_tables, push_scored, rank_partitions, score_partition, unindexed, IndexView, Masks,
};
use crate::exec::exact::{self, RowMask};
use crate::exec::profile::{ms_since, Profile};
use crate::index::Kernel;
use crate::query::{Nprobes, TopK, ValidatedBatch};
use crate::storage::FragmentView;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Queries of one partition scored per call.
const QUERY_GROUP: usize = 16;

/// (query, row) scores below which a segment is scanned on one thread.
const MIN_PARALLEL_WORK: usize = 4_096;

/// Every query's PQ table for `seg`, built on up to `threads` threads.
fn parallel_pq_tables(
    seg: &crate::index::ivf::LoadedSegment,
    batch: &ValidatedBatch,
    threads: usize,
) -> Vec<f32> {
    let n = batch.len();
    let threads = threads.clamp(1, n.div_ceil(16));
    if seg.model.pq.is_none() || threads == 1 {
        let all: Vec<usize> = (0..n).collect();
        return pq_tables(seg, batch.metric, &batch.queries, &all);
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let ids: Vec<usize> = (t * per..((t + 1) * per).min(n)).collect();
                    pq_tables(seg, batch.metric, &batch.queries, &ids)
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.append(&mut h.join().unwrap_or_default());
        }
        out
    })
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
        let mut probers: Vec<Vec<usize>> = vec![Vec::new(); seg.partitions()];
        for (qi, parts) in ranked.iter().enumerate() {
            for &p in parts {
                probers[p as usize].push(qi);
            }
        }
        let units: Vec<u32> = (0..seg.partitions() as u32)
            .filter(|&p| !probers[p as usize].is_empty())
            .collect();
        let tables = parallel_pq_tables(seg, batch, view.threads);
        profile.rank_ms += ms_since(t);
        profile.pairs_probed += ranked.iter().map(|r| r.len() as u64).sum::<u64>();
        profile.distinct_partitions += units.len() as u64;

        let t = Instant::now();
        let next = AtomicUsize::new(0);
        let (hits, misses, bytes, scored) = (
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
        );
        let worker = || -> Result<Vec<TopK>> {
            let mut local: Vec<TopK> = (0..n).map(|i| TopK::new(batch.depth(i))).collect();
            let (mut qrows, mut qnorms, mut scores) = (Vec::new(), Vec::new(), Vec::new());
            loop {
                let u = next.fetch_add(1, Ordering::Relaxed);
                let Some(&p) = units.get(u) else { break };
                let (part, read) = seg.partition(p, view.cache)?;
                match read {
                    Some(b) => {
                        misses.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(b, Ordering::Relaxed);
                    }
                    None => {
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let qs = &probers[p as usize];
                // Query groups keep the score matrix in cache between the
                // kernel writing it and the heaps reading it.
                for group in qs.chunks(QUERY_GROUP) {
                    qrows.clear();
                    qnorms.clear();
                    for &qi in group {
                        qrows.extend_from_slice(batch.queries.row(qi));
                        qnorms.push(batch.queries.norms_sq[qi]);
                    }
                    let stride = score_partition(
                        seg,
                        p,
                        &part,
                        batch.metric,
                        &qrows,
                        &qnorms,
                        &tables,
                        group,
                        &mut scores,
                    );
                    for (j, &qi) in group.iter().enumerate() {
                        push_scored(
                            &scores[j * stride..j * stride + part.len()],
                            &part.row_ids,
                            &masks,
                            &mut local[qi],
                        );
                    }
                }
                scored.fetch_add((qs.len() * part.len()) as u64, Ordering::Relaxed);
            }
            Ok(local)
        };
        // Threads pay off only past a few thousand (query, row) scores.
        let work: usize = units
            .iter()
            .map(|&p| seg.partition_rows(p) * probers[p as usize].len())
            .sum();
        let threads = if work < MIN_PARALLEL_WORK {
            1
        } else {
            view.threads.clamp(1, units.len().max(1))
        };
        let parts: Vec<Result<Vec<TopK>>> = if threads == 1 {
            vec![worker()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(worker)).collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(Error::Internal("scan thread panicked".into())))
                    })
                    .collect()
            })
        };
        for part in parts {
            for (h, p) in heaps.iter_mut().zip(part?) {
                h.merge(p);
            }
        }
        profile.cache_hits += hits.into_inner();
        profile.cache_misses += misses.into_inner();
        profile.bytes_read += bytes.into_inner();
        profile.rows_scored += scored.into_inner();
        profile.scan_ms += ms_since(t);
    }
    let rest = unindexed(view);
    if !batch.options.fast_search && !rest.is_empty() {
        let t = Instant::now();
        let items: Vec<(&FragmentView, &RowMask)> = rest
            .iter()
            .map(|&i| (&view.fragments[i], masks.of(i)))
            .collect();
        for (h, e) in
            heaps
                .iter_mut()
                .zip(exact::scan(&items, batch, view.threads, Kernel::detect())?)
        {
            h.merge(e);
        }
        profile.rows_scored +=
            items.iter().map(|(f, _)| f.data.rows as u64).sum::<u64>() * n as u64;
        profile.scan_ms += ms_since(t);
    }
    Ok(heaps)
}
