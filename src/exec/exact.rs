//! Exact search, shared over a batch.
//!
//! One pass over each visible fragment scores every query of the batch: the
//! fragment is cut into chunks of blocks, each chunk is scored against all
//! queries in one kernel call (a queries × vectors dot-product matrix), and
//! each query keeps one bounded top-(k + offset) heap. The prefilter
//! (not deleted ∧ filter) is built once per fragment per batch. Chunks are
//! shared out to scan threads, each with its own heaps and scratch; heaps are
//! merged at the end, which is deterministic because the heap's order
//! `(distance, row_id)` is total.

use crate::error::Result;
use crate::exec::ann::IndexView;
use crate::kernel::{dot_blocks, Kernel, BLOCK};
use crate::query::{Candidate, FilterMode, TopK, ValidatedBatch};
use crate::storage::FragmentView;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks of 16 vectors scored per kernel call.
const CHUNK_BLOCKS: usize = 16;

/// Rows of a fragment that may be returned, as a dense bitset.
pub struct RowMask {
    words: Vec<u64>,
}

impl RowMask {
    /// All `rows` allowed.
    pub fn all(rows: usize) -> RowMask {
        let mut words = vec![u64::MAX; rows.div_ceil(64)];
        if !rows.is_multiple_of(64) {
            if let Some(last) = words.last_mut() {
                *last = (1u64 << (rows % 64)) - 1;
            }
        }
        RowMask { words }
    }

    /// Forbids every offset in `offsets`.
    pub fn remove(&mut self, offsets: impl IntoIterator<Item = u32>) {
        for o in offsets {
            self.words[o as usize / 64] &= !(1u64 << (o % 64));
        }
    }

    /// Keeps only offsets in `offsets`.
    pub fn intersect(&mut self, offsets: &roaring::RoaringBitmap) {
        let mut keep = vec![0u64; self.words.len()];
        for o in offsets {
            if (o as usize / 64) < keep.len() {
                keep[o as usize / 64] |= 1u64 << (o % 64);
            }
        }
        for (w, k) in self.words.iter_mut().zip(keep) {
            *w &= k;
        }
    }

    /// Is `offset` allowed?
    #[inline(always)]
    pub fn contains(&self, offset: usize) -> bool {
        self.words[offset / 64] >> (offset % 64) & 1 == 1
    }

    /// Is any offset in `start..end` allowed?
    pub fn any_in(&self, start: usize, end: usize) -> bool {
        if start >= end {
            return false;
        }
        (start / 64..=(end - 1) / 64).any(|w| {
            let lo = if w == start / 64 { start % 64 } else { 0 };
            let hi = if w == (end - 1) / 64 {
                (end - 1) % 64 + 1
            } else {
                64
            };
            let span = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            self.words[w] & span != 0
        })
    }

    /// Number of allowed rows.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// The rows of `fragment` that are candidates for `batch`: not deleted and,
/// for a prefilter, matching the filter.
pub fn candidate_mask(fragment: &FragmentView, batch: &ValidatedBatch) -> Result<RowMask> {
    let mut mask = RowMask::all(fragment.rows());
    if let Some(deleted) = &fragment.deleted {
        mask.remove(deleted.iter());
    }
    if let (Some(filter), FilterMode::Prefilter) = (&batch.filter, batch.filter_mode) {
        mask.intersect(&filter.evaluate(&fragment.scalars(&filter.columns())?)?);
    }
    Ok(mask)
}

/// Drops candidates that fail a postfilter, then applies offset and k.
pub fn finish_query(
    mut found: Vec<Candidate>,
    k: usize,
    offset: usize,
    postfilter: Option<&dyn Fn(u64) -> bool>,
) -> Vec<Candidate> {
    if let Some(keep) = postfilter {
        found.retain(|c| keep(c.row_id));
    }
    found.into_iter().skip(offset).take(k).collect()
}

/// Exact top-k for every query of `batch` over the view's fragments, using
/// up to `view.threads` shares of the scan pool. Returns each query's rows,
/// nearest first, with offset and k applied.
pub fn search(view: &IndexView<'_>, batch: &ValidatedBatch) -> Result<Vec<Vec<Candidate>>> {
    let fragments = view.fragments;
    let masks = fragments
        .iter()
        .map(|f| candidate_mask(f, batch))
        .collect::<Result<Vec<_>>>()?;
    let items: Vec<(&FragmentView, &RowMask)> = fragments.iter().zip(&masks).collect();
    let heaps = scan(&items, batch, view, view.threads, Kernel::detect())?;
    postfilter_and_page(fragments, batch, heaps)
}

/// Applies the postfilter (when asked for), offset and k to merged heaps.
pub fn postfilter_and_page(
    fragments: &[FragmentView],
    batch: &ValidatedBatch,
    heaps: Vec<TopK>,
) -> Result<Vec<Vec<Candidate>>> {
    let post = match (&batch.filter, batch.filter_mode) {
        (Some(filter), FilterMode::Postfilter) => {
            let mut by_fragment = std::collections::HashMap::new();
            for f in fragments {
                by_fragment.insert(f.meta.id, filter.evaluate(&f.scalars(&filter.columns())?)?);
            }
            Some(by_fragment)
        }
        _ => None,
    };
    let keep = |row_id: u64| {
        post.as_ref().is_some_and(|m| {
            m.get(&((row_id >> 32) as u32))
                .is_some_and(|b| b.contains(row_id as u32))
        })
    };
    Ok(heaps
        .into_iter()
        .enumerate()
        .map(|(qi, heap)| {
            finish_query(
                heap.into_sorted_vec(),
                batch.ks[qi],
                batch.offsets[qi],
                post.is_some().then_some(&keep as &dyn Fn(u64) -> bool),
            )
        })
        .collect())
}

/// The shared scan: every chunk of every fragment scored once for all
/// queries, in up to `threads` shares of `view`'s pool, checking its cancel
/// token at every chunk. Returns one merged heap per query.
pub fn scan(
    items: &[(&FragmentView, &RowMask)],
    batch: &ValidatedBatch,
    view: &IndexView<'_>,
    threads: usize,
    kernel: Kernel,
) -> Result<Vec<TopK>> {
    // Chunks with allowed rows, and the vector column of every fragment
    // that has one (held for the scan).
    let mut units = Vec::new();
    let mut vectors = Vec::with_capacity(items.len());
    for (fi, (f, mask)) in items.iter().enumerate() {
        let before = units.len();
        let blocks = f.rows().div_ceil(BLOCK);
        for start in (0..blocks).step_by(CHUNK_BLOCKS) {
            let end = (start + CHUNK_BLOCKS).min(blocks);
            if mask.any_in(start * BLOCK, (end * BLOCK).min(f.rows())) {
                units.push((fi, start, end));
            }
        }
        vectors.push(if units.len() > before {
            Some(f.vectors(&batch.column)?)
        } else {
            None
        });
    }
    let nq = batch.len();
    let work = units.len() * nq;
    let threads = threads
        .clamp(1, units.len().max(1))
        .min(if work < 64 { 1 } else { usize::MAX });
    let next = AtomicUsize::new(0);
    let worker = || -> Result<Vec<TopK>> {
        let mut heaps: Vec<TopK> = (0..nq).map(|i| TopK::new(batch.depth(i))).collect();
        let mut scratch = vec![0.0f32; nq * CHUNK_BLOCKS * BLOCK];
        loop {
            let u = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(fi, start, end)) = units.get(u) else {
                break;
            };
            view.cancel.check()?;
            let (frag, mask) = items[fi];
            let vectors = vectors[fi].as_deref().ok_or_else(|| {
                crate::error::Error::Internal(format!("fragment lacks column {}", batch.column))
            })?;
            let stride = (end - start) * BLOCK;
            dot_blocks(
                kernel,
                &batch.queries.data,
                vectors,
                start..end,
                &mut scratch,
            );
            let first = start * BLOCK;
            let last = (end * BLOCK).min(frag.rows());
            let norms = &vectors.norms_sq()[first..last];
            let base = (frag.meta.id as u64) << 32;
            for (qi, heap) in heaps.iter_mut().enumerate() {
                let qn = batch.queries.norms_sq[qi];
                let dots = &scratch[qi * stride..qi * stride + (last - first)];
                for (v, (&dot, &xn)) in dots.iter().zip(norms).enumerate() {
                    let d = batch.metric.finish(dot, qn, xn);
                    if heap.may_accept(d) && mask.contains(first + v) {
                        heap.push(Candidate {
                            distance: d,
                            row_id: base | (first + v) as u64,
                        });
                    }
                }
            }
        }
        Ok(heaps)
    };
    let partials = view.pool.run(threads, |_| worker())?;
    let mut merged: Option<Vec<TopK>> = None;
    for part in partials {
        merged = Some(match merged {
            None => part,
            Some(mut acc) => {
                for (a, p) in acc.iter_mut().zip(part) {
                    a.merge(p);
                }
                acc
            }
        });
    }
    Ok(merged.unwrap_or_else(|| (0..nq).map(|i| TopK::new(batch.depth(i))).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_mask_tracks_offsets() {
        let mut m = RowMask::all(130);
        assert_eq!(m.count(), 130);
        m.remove([0, 64, 129]);
        assert!(!m.contains(64) && m.contains(65));
        let keep: roaring::RoaringBitmap = [1u32, 64, 65, 100].into_iter().collect();
        m.intersect(&keep);
        assert_eq!(m.count(), 3);
        assert!(m.any_in(60, 70));
        assert!(!m.any_in(2, 60));
        assert!(!m.any_in(101, 130));
    }
}
