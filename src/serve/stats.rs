//! The engine's counters and histograms, kept with relaxed atomics on the
//! hot path and read as one [`EngineStats`] snapshot (the HTTP layer
//! exports it as Prometheus metrics).

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the batch-size buckets (queries per batch).
pub const BATCH_SIZE_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];
/// Upper bounds of the distinct-filters-per-batch buckets.
pub const FILTER_COUNT_BOUNDS: &[u64] = &[0, 1, 2, 4, 8, 16, 32, 64, 256];
/// Upper bounds of the time buckets, in microseconds.
pub const MICROS_BOUNDS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
    10_000_000,
];

/// A fixed-bucket histogram: `counts[i]` values were at most `bounds[i]`
/// (and above the previous bound); the last count holds values above every
/// bound.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [u64],
    counts: Vec<AtomicU64>,
    sum: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [u64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    pub(crate) fn record(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&b| b < value);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds.to_vec(),
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// A histogram as read at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HistogramSnapshot {
    /// Upper bound of each bucket but the last (which is unbounded).
    pub bounds: Vec<u64>,
    /// Values per bucket; one more entry than `bounds`.
    pub counts: Vec<u64>,
    /// Sum of all recorded values.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Mean of the recorded values (0 when empty).
    pub fn mean(&self) -> f64 {
        let n = self.count();
        if n == 0 {
            0.0
        } else {
            self.sum as f64 / n as f64
        }
    }
}

/// Live counters of one engine.
#[derive(Debug)]
pub(crate) struct Stats {
    pub requests: AtomicU64,
    pub batches: AtomicU64,
    pub explicit_batches: AtomicU64,
    pub skipped_batches: AtomicU64,
    pub failed_batches: AtomicU64,
    pub rejected_overloaded: AtomicU64,
    pub deadline_exceeded: AtomicU64,
    pub cancelled: AtomicU64,
    pub write_conflicts: AtomicU64,
    /// Searches waiting in the coalescer (a gauge the actor sets).
    pub pending: AtomicU64,
    pub batch_size: Histogram,
    pub batch_filters: Histogram,
    pub queue_wait_us: Histogram,
    pub scan_us: Histogram,
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats {
            requests: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            explicit_batches: AtomicU64::new(0),
            skipped_batches: AtomicU64::new(0),
            failed_batches: AtomicU64::new(0),
            rejected_overloaded: AtomicU64::new(0),
            deadline_exceeded: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            write_conflicts: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            batch_size: Histogram::new(BATCH_SIZE_BOUNDS),
            batch_filters: Histogram::new(FILTER_COUNT_BOUNDS),
            queue_wait_us: Histogram::new(MICROS_BOUNDS),
            scan_us: Histogram::new(MICROS_BOUNDS),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> EngineStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EngineStats {
            requests: get(&self.requests),
            batches: get(&self.batches),
            explicit_batches: get(&self.explicit_batches),
            skipped_batches: get(&self.skipped_batches),
            failed_batches: get(&self.failed_batches),
            rejected_overloaded: get(&self.rejected_overloaded),
            deadline_exceeded: get(&self.deadline_exceeded),
            cancelled: get(&self.cancelled),
            write_conflicts: get(&self.write_conflicts),
            batch_size: self.batch_size.snapshot(),
            batch_filters: self.batch_filters.snapshot(),
            queue_wait_us: self.queue_wait_us.snapshot(),
            scan_us: self.scan_us.snapshot(),
            pending: get(&self.pending),
            cache_hits: 0,
            cache_misses: 0,
            storage_gets: 0,
            storage_bytes: 0,
            ready: false,
            budget_in_use: 0,
            budget_limit: 0,
        }
    }
}

/// What an engine has done since it started, read at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineStats {
    /// Coalesced searches submitted (accepted or not).
    pub requests: u64,
    /// Batches scanned (coalesced and explicit).
    pub batches: u64,
    /// Of those, explicit batches (`search_batch`, `explain`).
    pub explicit_batches: u64,
    /// Batches dropped before scanning because every caller had gone.
    pub skipped_batches: u64,
    /// Batches that failed as a whole (the error reached every caller).
    pub failed_batches: u64,
    /// Searches rejected because the queue or the memory budget was full.
    pub rejected_overloaded: u64,
    /// Searches whose deadline passed before their scan started.
    pub deadline_exceeded: u64,
    /// Searches whose caller went away before the answer.
    pub cancelled: u64,
    /// Writes redone because another process committed first (each redo
    /// counts once; a write that ran out of tries answered `CommitConflict`).
    pub write_conflicts: u64,
    /// Queries per scanned batch.
    pub batch_size: HistogramSnapshot,
    /// Scanned batches by the number of distinct filters their queries
    /// bring (0: no query has a filter).
    pub batch_filters: HistogramSnapshot,
    /// Time from submission to the start of the scan, per search (µs).
    pub queue_wait_us: HistogramSnapshot,
    /// Scan time per batch (µs).
    pub scan_us: HistogramSnapshot,
    /// Searches waiting in the coalescer now.
    pub pending: u64,
    /// Partition-cache hits since the session started.
    pub cache_hits: u64,
    /// Partition-cache misses (loads) since the session started.
    pub cache_misses: u64,
    /// GET requests sent to object storage since the session started.
    pub storage_gets: u64,
    /// Bytes those GETs brought.
    pub storage_bytes: u64,
    /// Whether the engine reports ready (`/readyz`): false while the
    /// start-up prewarm runs.
    pub ready: bool,
    /// Bytes of the memory budget held by running batches now.
    pub budget_in_use: u64,
    /// The memory budget's size.
    pub budget_limit: u64,
}

impl EngineStats {
    /// Mean queries per scanned batch.
    pub fn mean_batch_size(&self) -> f64 {
        self.batch_size.mean()
    }

    /// Partition-cache hit ratio (0 before any lookup).
    pub fn cache_hit_ratio(&self) -> f64 {
        let total = self.cache_hits + self.cache_misses;
        if total == 0 {
            0.0
        } else {
            self.cache_hits as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_by_upper_bound() {
        let h = Histogram::new(&[1, 4, 16]);
        for v in [0, 1, 2, 4, 5, 16, 17, 1000] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2, 2]);
        assert_eq!(s.count(), 8);
        assert_eq!(s.sum, 1045);
    }
}
