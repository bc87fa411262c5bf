//! Which rows each query of a batch may return: rows visible in the
//! snapshot (not deleted), and, for a query with a prefilter, rows its own
//! filter admits.
//!
//! A batch holds queries with different filters. Filters are evaluated
//! only on the rows a scan touches, never on a whole dataset for an
//! indexed search:
//!
//! * an IVF partition that a query with filter F probes gets F evaluated
//!   on that partition's rows once (the scalar columns F reads come through
//!   the column cache, and only the rows of the partition are tested), as a
//!   bit per partition row;
//! * a fragment scanned exactly (no index, or not covered by one) gets F
//!   evaluated on all its rows, since the scan reads them all anyway.
//!
//! Both kinds of result are kept in the session's [`FilterCache`] under
//! (scope, filter in normal form): fragments and segments never change once
//! written, so a filter repeated by later batches, or by other queries of
//! the same batch, is not evaluated again. (A partition's result also
//! assumes that every version holding the segment holds all the fragments
//! it covers, which is so while fragments are only ever appended; a
//! compaction that rewrites fragments must key results by version too.) Deletions belong to a version,
//! so they stay out of the cache: a row's visibility is read from its
//! fragment's deletion bitmap (roaring) when the row is tested, so a batch
//! pays nothing per row of the dataset.

use crate::error::{Error, Result};
use crate::exec::profile::Profile;
use crate::index::partition::Partition;
use crate::query::{Filter, ValidatedBatch};
use crate::storage::FragmentView;
use arrow_array::RecordBatch;
use moka::policy::EvictionPolicy;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Rows of a fragment or partition, as a dense bitset.
#[derive(Clone, Debug, PartialEq, Eq)]
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

    /// No row of `rows` allowed.
    pub fn none(rows: usize) -> RowMask {
        RowMask {
            words: vec![0; rows.div_ceil(64)],
        }
    }

    /// Allows `offset`.
    #[inline]
    pub fn set(&mut self, offset: usize) {
        self.words[offset / 64] |= 1u64 << (offset % 64);
    }

    /// Forbids every offset in `offsets`.
    pub fn remove(&mut self, offsets: impl IntoIterator<Item = u32>) {
        for o in offsets {
            if let Some(w) = self.words.get_mut(o as usize / 64) {
                *w &= !(1u64 << (o % 64));
            }
        }
    }

    /// Keeps only offsets `other` allows too.
    #[cfg(test)]
    pub fn and(&mut self, other: &RowMask) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w &= o;
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
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The allowed offsets, ascending.
    pub fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }

    fn size_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// The rows a cached filter result covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MaskScope {
    /// Every row of the fragment file at this path, by offset.
    Fragment(Arc<Path>),
    /// The rows of partition `.1` of the index segment keyed `.0`, in
    /// partition order.
    Partition(Arc<str>, u32),
}

/// A cached result's key: scope and filter, with a hash computed once per
/// (scope, filter) from hashes the batch computed once per segment,
/// fragment and filter, so a lookup hashes one word instead of two paths.
#[derive(Clone, Debug)]
struct FilterKey {
    hash: u64,
    scope: MaskScope,
    filter: Arc<str>,
}

impl PartialEq for FilterKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.scope == other.scope && self.filter == other.filter
    }
}

impl Eq for FilterKey {}

impl std::hash::Hash for FilterKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A stable hash of `value` (the same within a process).
fn hash_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(value)
}

/// Filter results by (scope, filter in normal form), bounded in bytes,
/// least recently used evicted first; one per session. Scopes are immutable
/// files, so an entry is valid for as long as it is held.
pub struct FilterCache {
    cache: moka::sync::Cache<FilterKey, Arc<RowMask>>,
    evaluations: AtomicU64,
}

impl std::fmt::Debug for FilterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterCache")
            .field("evaluations", &self.evaluations())
            .finish()
    }
}

impl FilterCache {
    /// A cache holding at most `capacity_bytes` of filter results.
    pub fn new(capacity_bytes: u64) -> FilterCache {
        FilterCache {
            cache: moka::sync::Cache::builder()
                .max_capacity(capacity_bytes)
                .weigher(|k: &FilterKey, v: &Arc<RowMask>| {
                    u32::try_from(v.size_bytes() + k.filter.len() + 64).unwrap_or(u32::MAX)
                })
                .eviction_policy(EvictionPolicy::lru())
                .build(),
            evaluations: AtomicU64::new(0),
        }
    }

    /// Filter evaluations so far (cache misses).
    pub fn evaluations(&self) -> u64 {
        self.evaluations.load(Ordering::Relaxed)
    }

    /// The result under `key`, evaluated by `eval` on a miss (concurrent
    /// misses on one key evaluate once); `true` when this call evaluated.
    fn get(
        &self,
        key: FilterKey,
        eval: impl FnOnce() -> Result<RowMask>,
    ) -> Result<(Arc<RowMask>, bool)> {
        let mut evaluated = false;
        let mask = self
            .cache
            .try_get_with(key, || {
                evaluated = true;
                eval().map(Arc::new)
            })
            .map_err(|e: Arc<Error>| (*e).clone())?;
        if evaluated {
            self.evaluations.fetch_add(1, Ordering::Relaxed);
        }
        Ok((mask, evaluated))
    }
}

/// Which rows one query may take from one partition or fragment: visible
/// rows, and of those the ones its prefilter's bits allow (bits indexed by
/// position in the partition or fragment).
#[derive(Clone, Copy)]
pub struct RowTest<'a> {
    admission: &'a Admission<'a>,
    bits: Option<&'a RowMask>,
}

impl RowTest<'_> {
    /// May the row at position `r`, with id `row_id`, be returned?
    #[inline(always)]
    pub fn allows(&self, r: usize, row_id: u64) -> bool {
        self.bits.is_none_or(|b| b.contains(r)) && self.admission.visible(row_id)
    }

    /// How many of `row_ids` (positions 0..) it allows.
    pub fn count(&self, row_ids: &[u64]) -> usize {
        row_ids
            .iter()
            .enumerate()
            .filter(|&(r, &id)| self.allows(r, id))
            .count()
    }
}

/// Filter work of a batch, counted across scan threads.
#[derive(Default)]
struct FilterCounters {
    rows_tested: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    nanos: AtomicU64,
}

/// A batch's view of which rows its queries may return.
pub struct Admission<'a> {
    fragments: &'a [FragmentView],
    /// Position in `fragments` by fragment id (`usize::MAX`: not in the
    /// snapshot).
    slot: Vec<usize>,
    /// Per fragment: its rows and the offsets deleted in this version.
    visible: Vec<(usize, Option<Arc<roaring::RoaringBitmap>>)>,
    /// Per fragment: searched (in the split, or no split). Kept apart from
    /// `slot` and `visible`, which filter results are evaluated and cached
    /// by: a split hides rows, it never changes what a filter says.
    searched: Vec<bool>,
    filters: &'a [Filter],
    /// Each filter's normal form and its hash, made once per batch.
    names: Vec<(Arc<str>, u64)>,
    /// Per filter and fragment: the columns the filter reads (from the
    /// column cache), gathered once per batch.
    scalars: Vec<Vec<OnceLock<RecordBatch>>>,
    cache: &'a FilterCache,
    counters: FilterCounters,
}

impl<'a> Admission<'a> {
    /// Visibility of every fragment of the snapshot, for `batch`'s filters.
    pub fn new(
        fragments: &'a [FragmentView],
        batch: &'a ValidatedBatch,
        cache: &'a FilterCache,
    ) -> Admission<'a> {
        let max_id = fragments
            .iter()
            .map(|f| f.meta.id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut slot = vec![usize::MAX; max_id];
        for (i, f) in fragments.iter().enumerate() {
            slot[f.meta.id as usize] = i;
        }
        let visible = fragments
            .iter()
            .map(|f| (f.rows(), f.deleted.clone()))
            .collect();
        Admission {
            fragments,
            slot,
            searched: fragments
                .iter()
                .map(|f| batch.searches_fragment(f.meta.id))
                .collect(),
            visible,
            filters: &batch.filters,
            names: batch
                .filters
                .iter()
                .map(|f| (Arc::from(f.normalized()), hash_of(&f.normalized())))
                .collect(),
            scalars: batch
                .filters
                .iter()
                .map(|_| fragments.iter().map(|_| OnceLock::new()).collect())
                .collect(),
            cache,
            counters: FilterCounters::default(),
        }
    }

    /// Is `row_id` a row of the snapshot (of the split, if any) that is not
    /// deleted?
    #[inline(always)]
    pub fn visible(&self, row_id: u64) -> bool {
        match self.slot.get((row_id >> 32) as usize) {
            Some(&i) if i != usize::MAX && self.searched[i] => {
                let (rows, deleted) = &self.visible[i];
                let offset = (row_id & 0xffff_ffff) as u32;
                (offset as usize) < *rows && !deleted.as_ref().is_some_and(|d| d.contains(offset))
            }
            _ => false,
        }
    }

    /// Whether every row of the fragments `ids` is visible to the batch
    /// (each in the snapshot, searched, nothing deleted): then only a
    /// prefilter can refuse one of their rows.
    pub fn all_visible(&self, ids: &[u32]) -> bool {
        ids.iter().all(|&id| match self.slot.get(id as usize) {
            Some(&i) if i != usize::MAX && self.searched[i] => {
                self.visible[i].1.as_ref().is_none_or(|d| d.is_empty())
            }
            _ => false,
        })
    }

    /// A row test with `bits` (from [`Admission::partition_bits`]) as the
    /// prefilter, or none.
    pub fn test<'b>(&'b self, bits: Option<&'b RowMask>) -> RowTest<'b> {
        RowTest {
            admission: self,
            bits,
        }
    }

    /// Which rows of partition `p` (of the segment keyed `segment`) the
    /// batch's filter `filter` admits, by position in the partition: from
    /// the cache, or evaluated on the partition's rows alone.
    pub fn partition_bits(
        &self,
        segment: &Arc<str>,
        p: u32,
        part: &Partition,
        filter: usize,
    ) -> Result<Arc<RowMask>> {
        let f = self.filter(filter)?;
        let key = self.key(MaskScope::Partition(segment.clone(), p), filter)?;
        self.cached(key, part.len(), || {
            self.evaluate_rows(filter, f, &part.row_ids)
        })
    }

    /// Prefilter bits for every distinct prefilter of the queries `qs` of
    /// `batch` over partition `p`: `(prefilter slot, bits)` pairs, to look
    /// up with [`Bits::of`].
    pub fn bits_for(
        &self,
        batch: &ValidatedBatch,
        qs: impl IntoIterator<Item = usize>,
        segment: &Arc<str>,
        p: u32,
        part: &Partition,
    ) -> Result<Bits> {
        let mut out = Bits(Vec::new());
        for qi in qs {
            if let Some(f) = batch.prefilter(qi) {
                if !out.0.iter().any(|(g, _)| *g == f) {
                    out.0.push((f, self.partition_bits(segment, p, part, f)?));
                }
            }
        }
        Ok(out)
    }

    /// The visible (not deleted) rows of fragment number `i` (position in
    /// the snapshot), as a dense mask: what an exact scan of it tests.
    pub fn visible_mask(&self, i: usize) -> RowMask {
        let (rows, deleted) = &self.visible[i];
        let mut mask = RowMask::all(*rows);
        if let Some(deleted) = deleted {
            mask.remove(deleted.iter());
        }
        mask
    }

    /// Which rows of fragment number `i` filter slot `filter` admits, by
    /// offset: evaluated on the whole fragment (an exact scan reads every
    /// row anyway), or found in the cache.
    pub fn fragment_bits(&self, i: usize, filter: usize) -> Result<Arc<RowMask>> {
        let f = self.filter(filter)?;
        let frag = &self.fragments[i];
        let key = self.key(MaskScope::Fragment(Arc::from(frag.path())), filter)?;
        self.cached(key, frag.rows(), || {
            let truth = f.evaluate_all(&frag.scalars(&f.columns())?)?;
            let mut m = RowMask::none(frag.rows());
            for (offset, _) in truth.iter().enumerate().filter(|(_, t)| **t) {
                m.set(offset);
            }
            Ok(m)
        })
    }

    /// Whether each of `row_ids` matches filter slot `filter` (tested on
    /// those rows alone): the postfilter's test of returned rows.
    pub fn matches(&self, filter: usize, row_ids: &[u64]) -> Result<Vec<bool>> {
        let f = self.filter(filter)?;
        let start = Instant::now();
        let mask = self.evaluate_rows(filter, f, row_ids)?;
        self.counters
            .nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok((0..row_ids.len()).map(|r| mask.contains(r)).collect())
    }

    fn filter(&self, slot: usize) -> Result<&'a Filter> {
        self.filters
            .get(slot)
            .ok_or_else(|| Error::Internal(format!("no filter in slot {slot}")))
    }

    /// The cache key of filter slot `filter` over `scope`.
    fn key(&self, scope: MaskScope, filter: usize) -> Result<FilterKey> {
        let (name, name_hash) = self
            .names
            .get(filter)
            .ok_or_else(|| Error::Internal(format!("no filter in slot {filter}")))?;
        let scope_hash = match &scope {
            // Hashing the segment key's address, not its text: a segment
            // stays open (one `Arc`) for the session, and equal keys
            // still compare equal by text if two opens ever differ.
            MaskScope::Partition(segment, p) => {
                hash_of(&(Arc::as_ptr(segment) as *const u8 as usize, *p))
            }
            MaskScope::Fragment(path) => hash_of(path),
        };
        Ok(FilterKey {
            hash: scope_hash ^ name_hash.rotate_left(17),
            scope,
            filter: name.clone(),
        })
    }

    fn cached(
        &self,
        key: FilterKey,
        rows: usize,
        eval: impl FnOnce() -> Result<RowMask>,
    ) -> Result<Arc<RowMask>> {
        let counters = &self.counters;
        let (bits, evaluated) = self.cache.get(key, || {
            let start = Instant::now();
            let out = eval();
            counters
                .nanos
                .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            out
        })?;
        if evaluated {
            counters.misses.fetch_add(1, Ordering::Relaxed);
            counters
                .rows_tested
                .fetch_add(rows as u64, Ordering::Relaxed);
        } else {
            counters.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(bits)
    }

    /// `f` tested on the rows `row_ids` (in any order, from any fragments
    /// of the snapshot), as a bit per position; rows of fragments outside
    /// the snapshot do not match.
    fn evaluate_rows(&self, slot: usize, f: &Filter, row_ids: &[u64]) -> Result<RowMask> {
        let mut out = RowMask::none(row_ids.len());
        let mut start = 0;
        while start < row_ids.len() {
            let fragment = (row_ids[start] >> 32) as usize;
            let mut end = start + 1;
            while end < row_ids.len() && (row_ids[end] >> 32) as usize == fragment {
                end += 1;
            }
            if let Some(&i) = self.slot.get(fragment).filter(|&&i| i != usize::MAX) {
                let offsets: Vec<u32> = row_ids[start..end]
                    .iter()
                    .map(|&r| (r & 0xffff_ffff) as u32)
                    .collect();
                let scalars = self.scalars_of(slot, f, i)?;
                for (j, hit) in f.evaluate_at(scalars, &offsets)?.into_iter().enumerate() {
                    if hit {
                        out.set(start + j);
                    }
                }
            }
            start = end;
        }
        Ok(out)
    }

    /// The columns filter `slot` (`f`) reads from fragment number `i`,
    /// gathered once per batch.
    fn scalars_of(&self, slot: usize, f: &Filter, i: usize) -> Result<&RecordBatch> {
        let cell = self
            .scalars
            .get(slot)
            .and_then(|per| per.get(i))
            .ok_or_else(|| Error::Internal(format!("no columns for filter {slot}")))?;
        if let Some(batch) = cell.get() {
            return Ok(batch);
        }
        let batch = self.fragments[i].scalars(&f.columns())?;
        // Two threads may gather it at once; either copy is the same.
        Ok(cell.get_or_init(|| batch))
    }

    /// Adds the batch's filter work to `profile`.
    pub fn add_to(&self, profile: &mut Profile) {
        let c = &self.counters;
        profile.filter_rows_tested += c.rows_tested.load(Ordering::Relaxed);
        profile.filter_cache_hits += c.hits.load(Ordering::Relaxed);
        profile.prefilter_builds += c.misses.load(Ordering::Relaxed) as usize;
        profile.prefilter_ms += c.nanos.load(Ordering::Relaxed) as f64 / 1e6;
    }
}

/// One partition's prefilter bits for the distinct prefilters of the
/// queries probing it.
pub struct Bits(Vec<(usize, Arc<RowMask>)>);

impl Bits {
    /// The bits of prefilter slot `filter` (`None`: no prefilter).
    pub fn of(&self, filter: Option<usize>) -> Option<&RowMask> {
        let f = filter?;
        self.0.iter().find(|(g, _)| *g == f).map(|(_, b)| &**b)
    }
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
        let mut keep = RowMask::none(130);
        for o in [1, 64, 65, 100] {
            keep.set(o);
        }
        m.and(&keep);
        assert_eq!(m.count(), 3);
        assert_eq!(m.ones().collect::<Vec<_>>(), vec![1, 65, 100]);
        assert!(m.any_in(60, 70));
        assert!(!m.any_in(2, 60));
        assert!(!m.any_in(101, 130));
        let mut n = RowMask::none(130);
        n.set(65);
        n.set(129);
        m.and(&n);
        assert_eq!(m.count(), 1);
        assert!(m.contains(65));
    }
}
