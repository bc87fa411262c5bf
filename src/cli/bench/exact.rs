//! `shoal bench --mode exact`: kernel throughput against the machine's FMA
//! peak (and its memory read bandwidth, the other ceiling of a scan), and
//! exact batch search against a per-query loop of the same code.

use super::fma_peak::measure_fma_peak_gflops;
use super::read_bandwidth::measure_read_bandwidth_gbs;
use super::temp_dataset;
use serde::Serialize;
use shoal::demo::clustered_vectors;
use shoal::kernel::{
    dot_blocks, last_level_cache_bytes, prefetch_override, Kernel, VectorBlocks, BLOCK,
};
use shoal::{BatchQuery, Config, Metric, Query, Result};
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct ExactBenchOptions {
    /// Rows of synthetic data.
    pub rows: usize,
    /// Dimension.
    pub dim: usize,
    /// Batch sizes (queries per call).
    pub batch_sizes: Vec<usize>,
    /// k per query.
    pub k: usize,
    /// Minimum time per measurement.
    pub seconds: f64,
}

impl Default for ExactBenchOptions {
    fn default() -> Self {
        ExactBenchOptions {
            rows: 100_000,
            dim: 128,
            batch_sizes: vec![1, 8, 64],
            k: 10,
            seconds: 2.0,
        }
    }
}

/// One row of the kernel table.
#[derive(Clone, Debug, Serialize)]
pub struct KernelRow {
    /// Queries per kernel call.
    pub queries: usize,
    /// Threads.
    pub threads: usize,
    /// Where the vectors come from: streamed from memory or in cache.
    pub working_set: String,
    /// Measured GFLOP/s (2 flops per multiply-add).
    pub gflops: f64,
    /// Fraction of the FMA peak for that many threads.
    pub of_peak: f64,
}

/// One row of the search table.
#[derive(Clone, Debug, Serialize)]
pub struct SearchRow {
    /// Batch size.
    pub batch: usize,
    /// Query vectors per second answered in batches.
    pub batch_qps: f64,
    /// Query vectors per second answered one `search` call at a time.
    pub per_query_qps: f64,
    /// batch_qps ÷ per_query_qps.
    pub speedup: f64,
    /// Median latency of one batch call, milliseconds.
    pub batch_latency_ms_p50: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct ExactBenchReport {
    /// Kernel in use.
    pub kernel: String,
    /// Rows × dim of the data.
    pub rows: usize,
    /// Dimension.
    pub dim: usize,
    /// FMA peak of one thread, GFLOP/s.
    pub peak_1t_gflops: f64,
    /// FMA peak of all scan threads together, GFLOP/s.
    pub peak_all_gflops: f64,
    /// Memory read bandwidth of one thread, GB/s.
    pub read_1t_gbs: f64,
    /// Memory read bandwidth of all scan threads together, GB/s.
    pub read_all_gbs: f64,
    /// The last-level cache as shoal sees it (`ivf_flat` segments larger
    /// than it are scanned with prefetch); `None` where unknown.
    pub last_level_cache_bytes: Option<u64>,
    /// `SHOAL_PREFETCH`, when it overrides that rule (`Some(true)`: on).
    pub prefetch_override: Option<bool>,
    /// Scan threads.
    pub threads: usize,
    /// Kernel rows.
    pub kernel_rows: Vec<KernelRow>,
    /// Search rows.
    pub search_rows: Vec<SearchRow>,
}

fn timed<F: FnMut() -> Result<usize>>(seconds: f64, mut f: F) -> Result<(f64, Vec<Duration>)> {
    f()?; // warm-up
    let start = Instant::now();
    let mut done = 0usize;
    let mut laps = Vec::new();
    while start.elapsed().as_secs_f64() < seconds || laps.len() < 3 {
        let t = Instant::now();
        done += f()?;
        laps.push(t.elapsed());
    }
    Ok((done as f64 / start.elapsed().as_secs_f64(), laps))
}

/// GFLOP/s of `dot_blocks` over all of `blocks` (or, `in_cache`, over its
/// first 64 blocks repeated to the same size) on `threads` threads.
fn kernel_gflops(
    kernel: Kernel,
    blocks: &VectorBlocks,
    q: &[f32],
    nq: usize,
    threads: usize,
    in_cache: bool,
    seconds: f64,
) -> Result<f64> {
    const CHUNK: usize = 16;
    let nb = blocks.block_count();
    let per = nb.div_ceil(threads);
    let (rate, _) = timed(seconds, || {
        std::thread::scope(|s| {
            for part in 0..threads {
                s.spawn(move || {
                    let mut out = vec![0.0f32; nq * CHUNK * BLOCK];
                    let (lo, hi) = (part * per, ((part + 1) * per).min(nb));
                    let mut b = lo;
                    while b < hi {
                        let e = (b + CHUNK).min(hi);
                        let range = if in_cache {
                            (b - lo) % 64..(b - lo) % 64 + (e - b)
                        } else {
                            b..e
                        };
                        dot_blocks(kernel, q, blocks, range, &mut out);
                        std::hint::black_box(&mut out);
                        b = e;
                    }
                });
            }
        });
        Ok(1)
    })?;
    Ok(rate * 2.0 * nq as f64 * (nb * BLOCK) as f64 * blocks.dim() as f64 / 1e9)
}

fn peak_all_threads(threads: usize) -> f64 {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| measure_fma_peak_gflops(1.0).unwrap_or(0.0)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    })
}

/// Runs the exact-search benchmark and prints its tables.
pub fn run_exact(opts: &ExactBenchOptions, config: &Config) -> Result<ExactBenchReport> {
    let kernel = Kernel::detect();
    let threads = config.scan_threads();
    eprintln!("measuring FMA peak ...");
    let peak_1t = measure_fma_peak_gflops(1.0).unwrap_or(0.0);
    let peak_all = peak_all_threads(threads);
    eprintln!("measuring memory read bandwidth ...");
    let read_1t = measure_read_bandwidth_gbs(1, 1.0);
    let read_all = measure_read_bandwidth_gbs(threads, 1.0);
    eprintln!("generating {} × {} vectors ...", opts.rows, opts.dim);
    let data = clustered_vectors(opts.rows, opts.dim, 64, 1);
    let max_batch = opts.batch_sizes.iter().copied().max().unwrap_or(1);
    let queries = clustered_vectors(max_batch.max(64), opts.dim, 64, 2);

    // Kernel: all rows in the scan's chunking (streamed from memory), then
    // the same number of flops over a 1,024-vector slice that stays in cache.
    let blocks = VectorBlocks::from_rows(opts.dim, &data);
    let mut kernel_rows = Vec::new();
    for in_cache in [false, true] {
        for &nq in &opts.batch_sizes {
            for t in [1, threads] {
                let gflops = kernel_gflops(
                    kernel,
                    &blocks,
                    &queries[..nq * opts.dim],
                    nq,
                    t,
                    in_cache,
                    opts.seconds / 2.0,
                )?;
                let peak = if t == 1 { peak_1t } else { peak_all };
                kernel_rows.push(KernelRow {
                    queries: nq,
                    threads: t,
                    working_set: if in_cache {
                        "in cache (1,024 vectors)"
                    } else {
                        "streamed (all rows)"
                    }
                    .into(),
                    gflops,
                    of_peak: if peak > 0.0 { gflops / peak } else { 0.0 },
                });
                if t == threads {
                    break;
                }
            }
        }
    }

    // Search: a real dataset on disk, loaded once.
    let (ds, cleanup) = temp_dataset("shoal-bench", opts.dim, Metric::L2, &data, config)?;
    let qvecs: Vec<Vec<f32>> = queries.chunks(opts.dim).map(|c| c.to_vec()).collect();
    let mut search_rows = Vec::new();
    for &b in &opts.batch_sizes {
        let batch = BatchQuery::new(qvecs[..b].to_vec(), opts.k);
        let (batch_qps, laps) = timed(opts.seconds, || Ok(ds.search_batch(&batch)?.hits.len()))?;
        let singles: Vec<Query> = qvecs[..b]
            .iter()
            .map(|v| Query::new(v.clone(), opts.k))
            .collect();
        let (per_query_qps, _) = timed(opts.seconds, || {
            for q in &singles {
                ds.search(q)?;
            }
            Ok(singles.len())
        })?;
        let mut laps = laps;
        laps.sort();
        search_rows.push(SearchRow {
            batch: b,
            batch_qps,
            per_query_qps,
            speedup: batch_qps / per_query_qps,
            batch_latency_ms_p50: laps[laps.len() / 2].as_secs_f64() * 1e3,
        });
    }
    drop(cleanup);
    let report = ExactBenchReport {
        kernel: kernel.name().into(),
        rows: opts.rows,
        dim: opts.dim,
        peak_1t_gflops: peak_1t,
        peak_all_gflops: peak_all,
        read_1t_gbs: read_1t,
        read_all_gbs: read_all,
        last_level_cache_bytes: last_level_cache_bytes(),
        prefetch_override: prefetch_override(),
        threads,
        kernel_rows,
        search_rows,
    };
    print_report(&report);
    Ok(report)
}

fn print_report(r: &ExactBenchReport) {
    println!(
        "exact search benchmark: {} × {} float32, kernel {}, {} scan threads",
        r.rows, r.dim, r.kernel, r.threads
    );
    println!(
        "FMA peak: {:.1} GFLOP/s on 1 thread, {:.1} GFLOP/s on {} threads",
        r.peak_1t_gflops, r.peak_all_gflops, r.threads
    );
    println!(
        "memory read bandwidth: {:.1} GB/s on 1 thread, {:.1} GB/s on {} threads",
        r.read_1t_gbs, r.read_all_gbs, r.threads
    );
    let cache = match r.last_level_cache_bytes {
        Some(bytes) => format!("{} MiB", bytes >> 20),
        None => "unknown".to_string(),
    };
    let rule = match r.prefetch_override {
        Some(true) => "prefetch forced on by SHOAL_PREFETCH",
        Some(false) => "prefetch forced off by SHOAL_PREFETCH",
        None => "ivf_flat segments larger than it prefetch",
    };
    println!("last-level cache: {cache} ({rule})");
    println!("\n| vectors | queries per call | threads | kernel GFLOP/s | of FMA peak |");
    println!("|---|---:|---:|---:|---:|");
    for k in &r.kernel_rows {
        println!(
            "| {} | {} | {} | {:.1} | {:.0}% |",
            k.working_set,
            k.queries,
            k.threads,
            k.gflops,
            k.of_peak * 100.0
        );
    }
    println!(
        "\n| batch | batch QPS | per-query loop QPS | batch ÷ loop | batch latency p50 (ms) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for s in &r.search_rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.2}× | {:.2} |",
            s.batch, s.batch_qps, s.per_query_qps, s.speedup, s.batch_latency_ms_p50
        );
    }
}
