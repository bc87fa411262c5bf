//! `shoal bench --mode batch`: the shared scan against the per-query path
//! (and exact) on an existing dataset, batch size by batch size, modes
//! interleaved pass by pass.

use super::{peak_rss_mib, recall_at_k, QueryShape};
use serde::Serialize;
use shoal::{BatchQuery, Config, Dataset, Result};
use std::time::{Duration, Instant};

/// What `shoal bench --mode batch` measures.
#[derive(Clone, Debug)]
pub struct BatchBenchOptions {
    /// An existing, indexed dataset.
    pub dataset: std::path::PathBuf,
    /// Query vectors (.fvecs/.npy).
    pub queries: std::path::PathBuf,
    /// Ground truth (.ivecs of ids), for recall; optional.
    pub groundtruth: Option<std::path::PathBuf>,
    /// k.
    pub k: usize,
    /// Each query's filter, probing and refine factor.
    pub shape: QueryShape,
    /// Batch sizes.
    pub batch_sizes: Vec<usize>,
    /// Modes to compare.
    pub modes: Vec<shoal::SearchMode>,
    /// Passes over the query set per measurement (after one warm-up pass).
    pub passes: usize,
}

/// One (mode, batch size) row.
#[derive(Clone, Debug, Serialize)]
pub struct BatchRow {
    /// Mode asked for.
    pub mode: String,
    /// Mode the planner ran.
    pub ran_as: String,
    /// Queries per batch.
    pub batch: usize,
    /// Query vectors answered.
    pub queries: usize,
    /// Query vectors per second (median pass).
    pub qps: f64,
    /// Batch latency, median, ms.
    pub batch_p50_ms: f64,
    /// Batch latency, 99th percentile, ms.
    pub batch_p99_ms: f64,
    /// Wall time per query vector at the median QPS, µs (not request latency).
    pub amortised_us: f64,
    /// recall@k, when ground truth was given.
    pub recall: Option<f64>,
    /// (query, partition) pairs per batch.
    pub pairs_per_batch: f64,
    /// Distinct partitions read per batch.
    pub distinct_per_batch: f64,
    /// Partition loads that missed the cache, per batch.
    pub misses_per_batch: f64,
    /// Scan GFLOP/s (flat/SQ rows scored × dim × 2 ÷ scan time).
    pub scan_gflops: f64,
    /// Partition bytes the batches read through (each distinct partition
    /// once per shared scan, once per probing query per query), per second
    /// of batch wall time, GB/s: against the machine's read bandwidth
    /// (`shoal bench --mode exact`), how close the scan is to memory-bound.
    pub partition_gbs: f64,
    /// Flat/SQ shared scans: the scan threads' busy time over what they
    /// could have worked (see `Profile::thread_utilisation`); 0 otherwise.
    pub thread_utilisation: f64,
    /// Flat/SQ shared scans: share of the scan phase spent merging the
    /// threads' per-query heaps.
    pub heap_merge_share: f64,
    /// Share of the batches' wall time spent ranking centroids.
    pub rank_share: f64,
    /// Flat/SQ shared scans: share of the batches' wall time outside the
    /// parallel partition scan (validation, ranking, heap merge, results):
    /// the part that does not shrink with more threads.
    pub outside_scan_share: f64,
    /// Peak resident memory of the process so far, MiB.
    pub peak_rss_mib: f64,
    /// Whether every query's ids equal those of the first mode measured.
    pub same_as_first: bool,
}

/// Shared scan against the per-query loop on an indexed dataset.
pub fn run_batch(opts: &BatchBenchOptions, config: &Config) -> Result<Vec<BatchRow>> {
    use shoal::ingest::{read_ivecs, read_vectors};
    let ds = Dataset::open_with_config(&opts.dataset, config.clone())?;
    let (_, queries) = read_vectors(&opts.queries)?;
    let truth = match &opts.groundtruth {
        Some(p) => Some(read_ivecs(p)?),
        None => None,
    };
    let (_, dim, _) = ds.schema().vector_column(None)?;
    let flat_scoring = ds.index_segments().iter().all(|s| {
        !matches!(
            s.params.kind,
            shoal::IndexKind::IvfPq { .. } | shoal::IndexKind::IvfRq { .. }
        )
    });
    let mut rows = Vec::new();
    for &b in &opts.batch_sizes {
        let per_mode: Vec<Vec<BatchQuery>> = opts
            .modes
            .iter()
            .map(|&mode| {
                queries
                    .chunks(b)
                    .enumerate()
                    .map(|(ci, c)| {
                        let each = (0..c.len()).map(|j| opts.shape.own(ci * b + j)).collect();
                        BatchQuery::new(c.to_vec(), opts.k).each(each).mode(mode)
                    })
                    .collect()
            })
            .collect();
        // Warm-up pass per mode (fills the cache), recording the answers.
        let mut found: Vec<Vec<Vec<i64>>> = Vec::new();
        for batches in &per_mode {
            let mut ids = Vec::with_capacity(queries.len());
            for q in batches {
                ids.extend(
                    ds.search_batch(q)?
                        .hits
                        .into_iter()
                        .map(|h| h.into_iter().map(|h| h.id).collect()),
                );
            }
            found.push(ids);
        }
        // Timed passes, modes interleaved so that drift on a shared host
        // hits them alike; QPS is the median pass.
        let mut laps: Vec<Vec<Duration>> = vec![Vec::new(); per_mode.len()];
        let mut pass_qps: Vec<Vec<f64>> = vec![Vec::new(); per_mode.len()];
        let mut totals: Vec<shoal::Profile> = vec![Default::default(); per_mode.len()];
        for _ in 0..opts.passes.max(1) {
            for (mi, batches) in per_mode.iter().enumerate() {
                let start = Instant::now();
                for q in batches {
                    let t = Instant::now();
                    let (_, p) = ds.explain(q)?;
                    laps[mi].push(t.elapsed());
                    let tot = &mut totals[mi];
                    tot.mode = p.mode;
                    tot.pairs_probed += p.pairs_probed;
                    tot.distinct_partitions += p.distinct_partitions;
                    tot.partition_bytes += p.partition_bytes;
                    tot.cache_misses += p.cache_misses;
                    tot.rows_scored += p.rows_scored;
                    tot.scan_ms += p.scan_ms;
                    tot.share_capacity_ms += p.share_capacity_ms;
                    tot.share_busy_ms += p.share_busy_ms;
                    tot.scan_parallel_ms += p.scan_parallel_ms;
                    tot.heap_merge_ms += p.heap_merge_ms;
                    tot.rank_ms += p.rank_ms;
                }
                pass_qps[mi].push(queries.len() as f64 / start.elapsed().as_secs_f64());
            }
        }
        for (mi, &mode) in opts.modes.iter().enumerate() {
            let laps = &mut laps[mi];
            laps.sort();
            let pct =
                |p: f64| laps[((laps.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3;
            let nb = laps.len() as f64;
            let qps_runs = &mut pass_qps[mi];
            qps_runs.sort_by(|a, b| a.total_cmp(b));
            let qps = qps_runs[qps_runs.len() / 2];
            let tot = &totals[mi];
            let wall_ms: f64 = laps.iter().map(|l| l.as_secs_f64() * 1e3).sum();
            rows.push(BatchRow {
                mode: format!("{mode:?}"),
                ran_as: tot.mode.to_string(),
                batch: b,
                queries: queries.len() * opts.passes.max(1),
                qps,
                batch_p50_ms: pct(0.5),
                batch_p99_ms: pct(0.99),
                amortised_us: 1e6 / qps,
                recall: truth.as_ref().map(|t| recall_at_k(&found[mi], t, opts.k)),
                pairs_per_batch: tot.pairs_probed as f64 / nb,
                distinct_per_batch: tot.distinct_partitions as f64 / nb,
                misses_per_batch: tot.cache_misses as f64 / nb,
                scan_gflops: if flat_scoring && tot.scan_ms > 0.0 {
                    tot.rows_scored as f64 * dim as f64 * 2.0 / (tot.scan_ms * 1e6)
                } else {
                    0.0
                },
                partition_gbs: tot.partition_bytes as f64 / (wall_ms * 1e6),
                thread_utilisation: tot.thread_utilisation(),
                heap_merge_share: if tot.scan_parallel_ms + tot.heap_merge_ms > 0.0 {
                    tot.heap_merge_ms / (tot.scan_parallel_ms + tot.heap_merge_ms)
                } else {
                    0.0
                },
                rank_share: tot.rank_ms / wall_ms,
                outside_scan_share: if tot.scan_parallel_ms > 0.0 {
                    1.0 - tot.scan_parallel_ms / wall_ms
                } else {
                    0.0
                },
                peak_rss_mib: peak_rss_mib(),
                same_as_first: found[mi] == found[0],
            });
            eprintln!(
                "  {mode:?} batch {b}: {qps:.0} QPS (median of {} passes)",
                qps_runs.len()
            );
        }
    }
    rows.sort_by(|a, b| a.mode.cmp(&b.mode).then(a.batch.cmp(&b.batch)));
    println!(
        "batch benchmark: {} ({} rows), {} queries, k = {}, {}, cache {} bytes",
        opts.dataset.display(),
        ds.count_rows(),
        queries.len(),
        opts.k,
        opts.shape.describe(),
        config.cache.capacity_bytes.bytes()
    );
    println!("\n| mode (ran as) | batch | QPS | batch p50 ms | batch p99 ms | µs/query | recall@{} | pairs/batch | distinct partitions/batch | overlap | misses/batch | scan GFLOP/s | partitions GB/s | threads busy | heap merge | rank | outside scan | peak RSS MiB | ids = first mode's |", opts.k);
    println!(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for r in &rows {
        println!(
            "| {} ({}) | {} | {:.0} | {:.2} | {:.2} | {:.1} | {} | {:.1} | {:.1} | {:.2} | {:.1} | {} | {:.1} | {} | {} | {:.1}% | {} | {:.0} | {} |",
            r.mode,
            r.ran_as,
            r.batch,
            r.qps,
            r.batch_p50_ms,
            r.batch_p99_ms,
            r.amortised_us,
            r.recall.map_or("-".into(), |x| format!("{x:.3}")),
            r.pairs_per_batch,
            r.distinct_per_batch,
            if r.distinct_per_batch > 0.0 { r.pairs_per_batch / r.distinct_per_batch } else { 0.0 },
            r.misses_per_batch,
            if r.scan_gflops > 0.0 { format!("{:.1}", r.scan_gflops) } else { "-".into() },
            r.partition_gbs,
            if r.thread_utilisation > 0.0 { format!("{:.0}%", 100.0 * r.thread_utilisation) } else { "-".into() },
            if r.thread_utilisation > 0.0 { format!("{:.1}%", 100.0 * r.heap_merge_share) } else { "-".into() },
            100.0 * r.rank_share,
            if r.outside_scan_share > 0.0 { format!("{:.1}%", 100.0 * r.outside_scan_share) } else { "-".into() },
            r.peak_rss_mib,
            if r.same_as_first { "yes" } else { "no" }
        );
    }
    Ok(rows)
}
