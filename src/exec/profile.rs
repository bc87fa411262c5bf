//! Per-batch explain/profile counters.

use crate::query::SearchMode;
use serde::Serialize;

/// What one batch did, for `--explain` and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Profile {
    /// Query vectors in the batch.
    pub queries: usize,
    /// Execution mode: `exact`, `per_query` or `shared_scan` (never
    /// `auto`).
    pub mode: SearchMode,
    /// Why the batch did not take the mode it asked for, if it did not.
    pub fallback_reason: Option<String>,
    /// Distinct filters among the batch's queries (by normal form).
    pub distinct_filters: usize,
    /// Filter evaluations: a filter tested on the rows of one partition or
    /// fragment (a filter-cache miss).
    pub prefilter_builds: usize,
    /// Filter results found in the session's filter cache instead.
    pub filter_cache_hits: u64,
    /// Rows those evaluations tested.
    pub filter_rows_tested: u64,
    /// Time evaluating filters (cache misses and postfilters).
    pub prefilter_ms: f64,
    /// (query, partition) pairs probed, summed over queries.
    pub pairs_probed: u64,
    /// Distinct partitions read by the batch.
    pub distinct_partitions: u64,
    /// Partition requests answered by the cache.
    pub cache_hits: u64,
    /// Partition requests that loaded from disk.
    pub cache_misses: u64,
    /// Bytes read from partition files.
    pub bytes_read: u64,
    /// GET requests the search sent to object storage (partitions, pages
    /// of fragment files, whole files); 0 for a local dataset or a warm
    /// disk cache.
    pub storage_gets: u64,
    /// Bytes those GETs brought.
    pub storage_bytes: u64,
    /// Bytes of the partitions the scan read through (vectors or codes,
    /// and row ids): each distinct partition once per shared scan, once
    /// per probing query on the per-query path. Against the batch's time,
    /// the memory bandwidth the scan drew.
    pub partition_bytes: u64,
    /// (query, row) pairs in the partitions and fragments scanned.
    pub rows_scored: u64,
    /// Of those, in IVF_PQ and IVF_RQ partitions, the pairs scored in
    /// full (PQ: the float table; RaBitQ: the `bits`-bit estimate): the
    /// screen could not rule them out, or the heap had no threshold yet.
    pub rows_rescored: u64,
    /// In IVF_RQ partitions, the pairs the screen skipped: the 1-bit
    /// estimate less its error bound (one bit: its exact lower bound) was
    /// above the query's threshold. (IVF_PQ's skips are `rows_scored −
    /// rows_rescored` less filtered rows.)
    pub rows_bound_skipped: u64,
    /// Adaptive-probing rounds (all segments).
    pub adaptive_rounds: u64,
    /// Distinct partitions loaded in each adaptive round, in order.
    pub adaptive_loads: Vec<u64>,
    /// Index candidates reranked with exact vectors (refine factor).
    pub refine_rows_read: u64,
    /// Time ranking centroids.
    pub rank_ms: f64,
    /// Time scanning partitions and fragments.
    pub scan_ms: f64,
    /// Time merging, refining and paging.
    pub merge_ms: f64,
    /// Time materialising ids and projected columns.
    pub materialise_ms: f64,
    /// Shares of work (threads) the partition-major scan phases ran,
    /// summed over segments (IVF_FLAT and IVF_SQ shared scans, and the
    /// lone-query split of PQ and one-bit RaBitQ partitions).
    pub scan_shares: u64,
    /// Wall time of those phases, ms.
    pub scan_parallel_ms: f64,
    /// Each phase's shares times its wall time, summed, ms: what the
    /// threads could have worked.
    pub share_capacity_ms: f64,
    /// Time their shares spent working, summed, ms: against
    /// `share_capacity_ms`, how busy the threads were.
    pub share_busy_ms: f64,
    /// The longest share of each phase, summed, ms: against the mean
    /// share, the load imbalance.
    pub share_max_ms: f64,
    /// Time merging the shares' per-query heaps, ms.
    pub heap_merge_ms: f64,
    /// `hnsw`: (query, segment) pairs answered by a walk of the graph.
    pub graph_walks: u64,
    /// `hnsw`: (query, segment) pairs scored exactly instead, because the
    /// query's filter admits few of the segment's rows.
    pub graph_exact_scans: u64,
}

impl Profile {
    /// Human-readable multi-line summary.
    pub fn render(&self) -> String {
        let mut s = format!("mode {}", self.mode);
        if let Some(r) = &self.fallback_reason {
            s.push_str(&format!(" (fallback: {r})"));
        }
        s.push_str(&format!(
            "\nqueries {}  distinct filters {}  filter evaluations {} ({} rows tested, {:.2} ms)  \
             filter cache hits {}\n\
             (query, partition) pairs {}  distinct partitions {} ({} bytes)  cache hits {} misses {}  bytes read {}\n\
             adaptive rounds {} (partitions loaded per round {:?})  refine rows read {}\n\
             rows scored {} (PQ/RQ rows scored in full {}, RQ rows skipped by the bound {})\n\
             time: rank {:.2} ms  scan {:.2} ms  merge {:.2} ms  materialise {:.2} ms",
            self.queries,
            self.distinct_filters,
            self.prefilter_builds,
            self.filter_rows_tested,
            self.prefilter_ms,
            self.filter_cache_hits,
            self.pairs_probed,
            self.distinct_partitions,
            self.partition_bytes,
            self.cache_hits,
            self.cache_misses,
            self.bytes_read,
            self.adaptive_rounds,
            self.adaptive_loads,
            self.refine_rows_read,
            self.rows_scored,
            self.rows_rescored,
            self.rows_bound_skipped,
            self.rank_ms,
            self.scan_ms,
            self.merge_ms,
            self.materialise_ms
        ));
        if self.storage_gets > 0 {
            s.push_str(&format!(
                "\nobject storage: {} GETs, {} bytes",
                self.storage_gets, self.storage_bytes
            ));
        }
        if self.graph_walks + self.graph_exact_scans > 0 {
            s.push_str(&format!(
                "\nhnsw: (query, segment) walks {}  exact scans of filtered rows {}",
                self.graph_walks, self.graph_exact_scans
            ));
        }
        if self.scan_shares > 0 {
            s.push_str(&format!(
                "\nscan shares {}: {:.2} ms wall, {:.2} ms busy in all ({:.0}% of shares × wall), \
                 longest share {:.2} ms; heap merge {:.2} ms",
                self.scan_shares,
                self.scan_parallel_ms,
                self.share_busy_ms,
                100.0 * self.thread_utilisation(),
                self.share_max_ms,
                self.heap_merge_ms
            ));
        }
        s
    }

    /// The shares' busy time over what they could have worked (1.0 when
    /// every share worked its whole phase; 0 when none ran).
    pub fn thread_utilisation(&self) -> f64 {
        if self.share_capacity_ms > 0.0 {
            (self.share_busy_ms / self.share_capacity_ms).min(1.0)
        } else {
            0.0
        }
    }
}

/// Milliseconds since `t`.
pub fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
