//! `shoal bench --mode exact`: kernel throughput against the machine's FMA
//! peak, and exact batch search against a per-query loop of the same code.
//!
//! Everything is measured in one run on the same data, and reported as
//! rates and ratios; nothing here is asserted on.

use super::fma_peak::measure_fma_peak_gflops;
use serde::Serialize;
use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::kernel::{dot_blocks, Kernel, VectorBlocks, BLOCK};
use shoal::Config;
use shoal::Dataset;
use shoal::Metric;
use shoal::{BatchQuery, Query};
use shoal::{Error, Result};
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
        threads,
        kernel_rows,
        search_rows,
    };
    print_report(&report);
    Ok(report)
}

/// A throwaway dataset of `rows` (row-major, `dim` wide) in the temp
/// directory, removed when the returned guard drops.
fn temp_dataset(
    prefix: &str,
    dim: usize,
    metric: Metric,
    rows: &[f32],
    config: &Config,
) -> Result<(Dataset, TempDir)> {
    const CHUNK: usize = 65536;
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let guard = TempDir(dir.clone());
    let mut ds = Dataset::create(&dir, demo_schema("vector", dim, metric)?, config.clone())?;
    ds.append(
        rows.chunks(CHUNK * dim)
            .enumerate()
            .map(|(i, c)| demo_batch("vector", dim, c, i * CHUNK)),
    )?;
    Ok((ds, guard))
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// Writes a report as JSON.
pub fn write_json<T: Serialize>(path: &std::path::Path, report: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(report).map_err(|e| Error::Internal(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// What `shoal bench --mode ivf` measures.
#[derive(Clone, Debug)]
pub struct IvfBenchOptions {
    /// Base vectors file; synthetic clustered data when `None`.
    pub base: Option<std::path::PathBuf>,
    /// Query vectors file; synthetic when `None`.
    pub queries: Option<std::path::PathBuf>,
    /// Ground truth `.ivecs` (base row ids, best first); exact search when `None`.
    pub groundtruth: Option<std::path::PathBuf>,
    /// Synthetic rows.
    pub rows: usize,
    /// Synthetic dimension.
    pub dim: usize,
    /// Synthetic queries.
    pub num_queries: usize,
    /// Metric.
    pub metric: Metric,
    /// Index types.
    pub kinds: Vec<shoal::IndexKind>,
    /// Partitions.
    pub partitions: usize,
    /// nprobes values.
    pub nprobes: Vec<usize>,
    /// k.
    pub k: usize,
    /// Write the base, queries and ground truth used here as
    /// `base.fvecs`, `query.fvecs`, `groundtruth.ivecs` into this directory.
    pub export: Option<std::path::PathBuf>,
}

/// One row of the IVF table.
#[derive(Clone, Debug, Serialize)]
pub struct IvfRow {
    /// Index type.
    pub index: String,
    /// Build time, seconds.
    pub build_s: f64,
    /// nprobes.
    pub nprobes: usize,
    /// recall@k against the ground truth.
    pub recall: f64,
    /// Queries per second, one `search` call per query.
    pub qps_one_at_a_time: f64,
}

/// The IVF report.
#[derive(Clone, Debug, Serialize)]
pub struct IvfReport {
    /// Rows, dimension, queries.
    pub rows: usize,
    /// Dimension.
    pub dim: usize,
    /// Queries.
    pub queries: usize,
    /// Metric.
    pub metric: String,
    /// Partitions.
    pub partitions: usize,
    /// k.
    pub k: usize,
    /// Table rows.
    pub rows_measured: Vec<IvfRow>,
}

/// The IVF benchmarks' synthetic set: 1,000 overlapping clusters (noise
/// 0.6), queries drawn from the same clusters as the base.
fn synthetic(n: usize, dim: usize) -> Vec<f32> {
    shoal::demo::clustered_vectors_with_noise(n, dim, 1000, 0.6, 3)
}

/// Recall@k of `found` ids against `truth` (best first).
pub fn recall_at_k(found: &[Vec<i64>], truth: &[Vec<i32>], k: usize) -> f64 {
    let mut hit = 0usize;
    let mut total = 0usize;
    for (f, t) in found.iter().zip(truth) {
        let t: std::collections::HashSet<i64> = t.iter().take(k).map(|x| *x as i64).collect();
        hit += f.iter().take(k).filter(|x| t.contains(x)).count();
        total += k.min(t.len());
    }
    hit as f64 / total.max(1) as f64
}

/// Builds each index type over the data and measures recall and QPS per
/// nprobes, one query per call.
pub fn run_ivf(opts: &IvfBenchOptions, config: &Config) -> Result<IvfReport> {
    use shoal::ingest::{read_ivecs, read_vectors, write_fvecs, write_ivecs};
    let (dim, base): (usize, Vec<Vec<f32>>) = match &opts.base {
        Some(p) => read_vectors(p)?,
        None => {
            eprintln!(
                "generating {} × {} clustered vectors ...",
                opts.rows, opts.dim
            );
            let all = clustered_vectors(opts.rows + opts.num_queries, opts.dim, 1000, 3);
            (
                opts.dim,
                all[..opts.rows * opts.dim]
                    .chunks(opts.dim)
                    .map(|c| c.to_vec())
                    .collect(),
            )
        }
    };
    let queries: Vec<Vec<f32>> = match &opts.queries {
        Some(p) => read_vectors(p)?.1,
        None => synthetic(opts.rows + opts.num_queries, dim)[opts.rows * dim..]
            .chunks(dim)
            .map(|c| c.to_vec())
            .collect(),
    };
    let flat: Vec<f32> = base.iter().flatten().copied().collect();
    let (mut ds, _cleanup) = temp_dataset("shoal-ivf-bench", dim, opts.metric, &flat, config)?;
    let truth: Vec<Vec<i32>> = match &opts.groundtruth {
        Some(p) => read_ivecs(p)?,
        None => {
            eprintln!("computing exact ground truth ...");
            let mut out = Vec::new();
            for chunk in queries.chunks(256) {
                let b = BatchQuery::new(chunk.to_vec(), opts.k.max(100).min(base.len()))
                    .mode(shoal::SearchMode::Exact);
                for hits in ds.search_batch(&b)?.hits {
                    out.push(hits.iter().map(|h| h.id as i32).collect());
                }
            }
            out
        }
    };
    if truth.len() < queries.len() {
        return Err(Error::InvalidArgument(format!(
            "ground truth has {} records for {} queries",
            truth.len(),
            queries.len()
        )));
    }
    if let Some(out) = &opts.export {
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        write_fvecs(&out.join("base.fvecs"), &base)?;
        write_fvecs(&out.join("query.fvecs"), &queries)?;
        write_ivecs(&out.join("groundtruth.ivecs"), &truth)?;
    }
    let mut rows_measured = Vec::new();
    for kind in &opts.kinds {
        let params = shoal::IndexParams::new(*kind, opts.partitions);
        eprintln!("building {} ...", kind.name());
        let t = Instant::now();
        ds.create_index(None, params)?;
        let build_s = t.elapsed().as_secs_f64();
        for &np in &opts.nprobes {
            let mut found = Vec::with_capacity(queries.len());
            let single: Vec<Query> = queries
                .iter()
                .map(|v| {
                    Query::new(v.clone(), opts.k)
                        .mode(shoal::SearchMode::PerQuery)
                        .nprobes(np)
                })
                .collect();
            // Warm the partition cache, then time one pass.
            for q in single.iter().take(50) {
                ds.search(q)?;
            }
            let t = Instant::now();
            for q in &single {
                found.push(
                    ds.search(q)?
                        .hits
                        .into_iter()
                        .map(|h| h.id)
                        .collect::<Vec<i64>>(),
                );
            }
            let qps = single.len() as f64 / t.elapsed().as_secs_f64();
            rows_measured.push(IvfRow {
                index: kind.name().into(),
                build_s,
                nprobes: np,
                recall: recall_at_k(&found, &truth, opts.k),
                qps_one_at_a_time: qps,
            });
            let r = rows_measured.last().map(|r| r.recall).unwrap_or(0.0);
            eprintln!("  nprobes {np}: recall@{} {r:.3}, {qps:.0} QPS", opts.k);
        }
    }
    let report = IvfReport {
        rows: base.len(),
        dim,
        queries: queries.len(),
        metric: opts.metric.name().into(),
        partitions: opts.partitions,
        k: opts.k,
        rows_measured,
    };
    println!(
        "IVF benchmark: {} × {}, {} queries, metric {}, {} partitions, k = {}, one query per call",
        report.rows, report.dim, report.queries, report.metric, report.partitions, report.k
    );
    println!(
        "\n| index | build (s) | nprobes | recall@{} | QPS |",
        report.k
    );
    println!("|---|---:|---:|---:|---:|");
    for r in &report.rows_measured {
        println!(
            "| {} | {:.2} | {} | {:.3} | {:.0} |",
            r.index, r.build_s, r.nprobes, r.recall, r.qps_one_at_a_time
        );
    }
    Ok(report)
}

/// Each benchmark query's own filter, probing and refine factor.
#[derive(Clone, Debug)]
pub struct QueryShape {
    /// Distinct filters (empty: none); query i takes filter i mod N.
    pub filters: Vec<String>,
    /// Partitions probed.
    pub nprobes: shoal::Nprobes,
    /// Refine factor.
    pub refine_factor: Option<usize>,
}

impl QueryShape {
    /// `filters` distinct filters from `template` (`{i}` replaced by the
    /// filter number; without it, `(template) AND id <> -(i+1)`, distinct
    /// filters admitting the same rows); fixed `nprobes`, or `adaptive`
    /// `[min, max]` when given.
    pub fn new(
        template: Option<String>,
        filters: usize,
        nprobes: usize,
        adaptive: &[usize],
        refine_factor: Option<usize>,
    ) -> Result<QueryShape> {
        if filters == 0 {
            return Err(shoal::Error::InvalidArgument(
                "--filters must be at least 1".into(),
            ));
        }
        let filters = match template {
            None if filters > 1 => {
                return Err(shoal::Error::InvalidArgument(
                    "--filters N needs --filter (the template of the N filters)".into(),
                ))
            }
            None => Vec::new(),
            Some(t) if filters == 1 => vec![t.replace("{i}", "0")],
            Some(t) if t.contains("{i}") => (0..filters)
                .map(|i| t.replace("{i}", &i.to_string()))
                .collect(),
            Some(t) => (0..filters)
                .map(|i| format!("({t}) AND id <> -{}", i + 1))
                .collect(),
        };
        let nprobes = match adaptive {
            [] => shoal::Nprobes::Fixed(nprobes),
            [min, max] => shoal::Nprobes::Adaptive {
                min: *min,
                max: *max,
            },
            _ => {
                return Err(shoal::Error::InvalidArgument(
                    "--adaptive takes MIN,MAX".into(),
                ))
            }
        };
        Ok(QueryShape {
            filters,
            nprobes,
            refine_factor,
        })
    }

    /// Query number `i`'s own parameters.
    pub fn own(&self, i: usize) -> shoal::PerQueryParams {
        shoal::PerQueryParams {
            filter: (!self.filters.is_empty())
                .then(|| self.filters[i % self.filters.len()].clone()),
            nprobes: self.nprobes,
            refine_factor: self.refine_factor,
            ..shoal::PerQueryParams::default()
        }
    }

    /// One line saying what the queries ask for.
    pub fn describe(&self) -> String {
        let probes = match self.nprobes {
            shoal::Nprobes::Fixed(n) => format!("nprobes = {n}"),
            shoal::Nprobes::Adaptive { min, max } => format!("adaptive nprobes {min}..{max}"),
        };
        let filters = match self.filters.len() {
            0 => "no filter".to_string(),
            1 => format!("filter {}", self.filters[0]),
            n => format!("{n} distinct filters like {}", self.filters[0]),
        };
        let refine = self
            .refine_factor
            .map_or(String::new(), |r| format!(", refine factor {r}"));
        format!("{probes}, {filters}{refine}")
    }
}

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
    /// Peak resident memory of the process so far, MiB.
    pub peak_rss_mib: f64,
    /// Whether every query's ids equal those of the first mode measured.
    pub same_as_first: bool,
}

/// Peak resident set size (VmHWM) in MiB, where the OS reports it.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
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
    let flat_scoring = ds
        .index_segments()
        .iter()
        .all(|s| !matches!(s.params.kind, shoal::IndexKind::IvfPq { .. }));
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
                    tot.cache_misses += p.cache_misses;
                    tot.rows_scored += p.rows_scored;
                    tot.scan_ms += p.scan_ms;
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
    println!("\n| mode (ran as) | batch | QPS | batch p50 ms | batch p99 ms | µs/query | recall@{} | pairs/batch | distinct partitions/batch | overlap | misses/batch | scan GFLOP/s | peak RSS MiB | ids = first mode's |", opts.k);
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} ({}) | {} | {:.0} | {:.2} | {:.2} | {:.1} | {} | {:.1} | {:.1} | {:.2} | {:.1} | {} | {:.0} | {} |",
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
            r.peak_rss_mib,
            if r.same_as_first { "yes" } else { "no" }
        );
    }
    Ok(rows)
}
