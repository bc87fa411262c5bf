//! Exact search, shared over a batch.
//!
//! One pass over each visible fragment scores every query of the batch: the
//! fragment is cut into chunks of blocks, each chunk is scored against all
//! queries in one kernel call (a queries × vectors dot-product matrix), and
//! each query keeps one bounded top-(k + offset) heap. Visibility (not
//! deleted) is one mask per fragment per batch; each distinct prefilter's
//! rows are evaluated over the fragment once, or found in the session's
//! filter cache (see `exec::prefilter`); each query tests rows against its
//! own. Chunks are shared out to scan threads, each with its own heaps and
//! scratch; heaps are merged at the end, which is deterministic because the
//! heap's order `(distance, row_id)` is total.

use crate::error::Result;
use crate::exec::ann::IndexView;
use crate::exec::prefilter::{Admission, RowMask};
use crate::kernel::{dot_blocks, Kernel, BLOCK};
use crate::query::{Candidate, FilterMode, TopK, ValidatedBatch};
use crate::storage::FragmentView;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Blocks of 16 vectors scored per kernel call.
const CHUNK_BLOCKS: usize = 16;

/// A fragment scanned exactly: its visible rows, and which rows each
/// distinct prefilter of the batch admits (queries find theirs through a
/// mask index; `None` is no prefilter). The filter results are shared with
/// the filter cache, so a batch with many filters copies none of them.
pub struct ExactItem<'a> {
    /// The fragment.
    pub fragment: &'a FragmentView,
    /// Rows not deleted in the snapshot.
    pub visible: RowMask,
    /// Per distinct prefilter: the rows it admits.
    pub filters: Vec<Option<Arc<RowMask>>>,
}

impl ExactItem<'_> {
    /// May a query with mask index `m` return the row at `offset`?
    #[inline(always)]
    fn allows(&self, m: usize, offset: usize) -> bool {
        self.visible.contains(offset) && self.filters[m].as_ref().is_none_or(|b| b.contains(offset))
    }

    /// Could any query take a row of `lo..hi`?
    fn any_in(&self, lo: usize, hi: usize) -> bool {
        self.visible.any_in(lo, hi)
            && self
                .filters
                .iter()
                .any(|f| f.as_ref().is_none_or(|b| b.any_in(lo, hi)))
    }
}

/// The fragments `which` (positions in the snapshot) as exact-scan items
/// for `batch`, and each query's mask index.
pub fn items<'a>(
    admission: &Admission<'_>,
    fragments: &'a [FragmentView],
    which: &[usize],
    batch: &ValidatedBatch,
) -> Result<(Vec<ExactItem<'a>>, Vec<usize>)> {
    let distinct = batch.distinct_prefilters();
    let mask_of = (0..batch.len())
        .map(|qi| {
            distinct
                .iter()
                .position(|f| *f == batch.prefilter(qi))
                .unwrap_or(0)
        })
        .collect();
    let items = which
        .iter()
        .map(|&i| {
            Ok(ExactItem {
                fragment: &fragments[i],
                visible: admission.visible_mask(i),
                filters: distinct
                    .iter()
                    .map(|&f| f.map(|f| admission.fragment_bits(i, f)).transpose())
                    .collect::<Result<_>>()?,
            })
        })
        .collect::<Result<_>>()?;
    Ok((items, mask_of))
}

/// Exact top-k for every query of `batch` over the view's fragments, using
/// up to `view.threads` shares of the scan pool. Returns each query's rows,
/// nearest first, with offset and k applied.
pub fn search(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
) -> Result<Vec<Vec<Candidate>>> {
    let all: Vec<usize> = (0..view.fragments.len())
        .filter(|&i| batch.searches_fragment(view.fragments[i].meta.id))
        .collect();
    let (heaps, _) = scan_positions(view, batch, admission, &all)?;
    postfilter_and_page(admission, batch, heaps)
}

/// The exact scan of the view's fragments at `positions` on the scan pool:
/// each query's heap, and the rows scanned per query.
fn scan_positions(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
    positions: &[usize],
) -> Result<(Vec<TopK>, u64)> {
    let (items, mask_of) = items(admission, view.fragments, positions, batch)?;
    let rows = items.iter().map(|i| i.fragment.rows() as u64).sum();
    let heaps = scan(
        &items,
        &mask_of,
        batch,
        view,
        view.threads,
        Kernel::detect(),
    )?;
    Ok((heaps, rows))
}

/// The exact scan of the fragments at positions `rest` (those no index
/// segment covers), once for the whole batch, merged into each query's
/// index `heaps`; counts the rows scored.
pub fn merge_unindexed(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
    admission: &Admission<'_>,
    rest: &[usize],
    heaps: &mut [TopK],
    profile: &mut crate::exec::Profile,
) -> Result<()> {
    let (found, rows) = scan_positions(view, batch, admission, rest)?;
    for (heap, more) in heaps.iter_mut().zip(found) {
        heap.merge(more);
    }
    profile.rows_scored += rows * batch.len() as u64;
    Ok(())
}

/// Applies each query's postfilter (when it asks for one), offset and k
/// to its merged heap. A postfilter is tested on the query's candidate
/// rows alone.
pub fn postfilter_and_page(
    admission: &Admission<'_>,
    batch: &ValidatedBatch,
    heaps: Vec<TopK>,
) -> Result<Vec<Vec<Candidate>>> {
    heaps
        .into_iter()
        .enumerate()
        .map(|(qi, heap)| {
            let spec = &batch.specs[qi];
            let found = heap.into_sorted_vec();
            let keep = match (spec.filter, spec.filter_mode) {
                (Some(f), FilterMode::Postfilter) => {
                    let ids: Vec<u64> = found.iter().map(|c| c.row_id).collect();
                    Some(admission.matches(f, &ids)?)
                }
                _ => None,
            };
            let found = match keep {
                Some(keep) => found
                    .into_iter()
                    .zip(keep)
                    .filter(|(_, k)| *k)
                    .map(|(c, _)| c)
                    .collect(),
                None => found,
            };
            Ok(found.into_iter().skip(spec.offset).take(spec.k).collect())
        })
        .collect()
}

/// The shared scan: every chunk of every fragment scored once for all
/// queries, in up to `threads` shares of `view`'s pool, checking its cancel
/// token at every chunk. Returns one merged heap per query.
pub fn scan(
    items: &[ExactItem<'_>],
    mask_of: &[usize],
    batch: &ValidatedBatch,
    view: &IndexView<'_>,
    threads: usize,
    kernel: Kernel,
) -> Result<Vec<TopK>> {
    // Chunks with allowed rows, and the vector column of every fragment
    // that has one (held for the scan).
    let mut units = Vec::new();
    let mut vectors = Vec::with_capacity(items.len());
    for (fi, item) in items.iter().enumerate() {
        let f = item.fragment;
        let before = units.len();
        let blocks = f.rows().div_ceil(BLOCK);
        for start in (0..blocks).step_by(CHUNK_BLOCKS) {
            let end = (start + CHUNK_BLOCKS).min(blocks);
            let (lo, hi) = (start * BLOCK, (end * BLOCK).min(f.rows()));
            if item.any_in(lo, hi) {
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
            let item = &items[fi];
            let frag = item.fragment;
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
                let m = mask_of[qi];
                let qn = batch.queries.norms_sq[qi];
                let dots = &scratch[qi * stride..qi * stride + (last - first)];
                for (v, (&dot, &xn)) in dots.iter().zip(norms).enumerate() {
                    let d = batch.metric.finish(dot, qn, xn);
                    if heap.may_accept(d) && item.allows(m, first + v) {
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
