//! `shoal bench --mode engine`: closed-loop clients against the engine,
//! coalesced against direct, in one run.
//!
//! Each client awaits one `search` at a time and sends the next as soon as
//! it has its answer. Two engines over the same dataset and config differ
//! only in the coalescer: `coalesced` uses the window under test and the
//! config's other coalescer settings; `direct` has window 0 and batch size 1, so each query runs the
//! single-query path on the scan pool. Measurements alternate between the
//! two, pass by pass, and QPS is the median pass; latency percentiles pool
//! every request of every pass. Nothing here is asserted on.

use super::{peak_rss_mib, recall_at_k, QueryShape};
use serde::Serialize;
use shoal::ingest::{read_ivecs, read_vectors};
use shoal::Config;
use shoal::Query;
use shoal::{DatasetHandle, Engine, EngineStats};
use shoal::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct EngineBenchOptions {
    /// The indexed dataset (its directory name is its engine name).
    pub dataset: PathBuf,
    /// Query vectors (.fvecs/.npy).
    pub queries: PathBuf,
    /// Ground truth (.ivecs), for recall.
    pub groundtruth: Option<PathBuf>,
    /// k per query.
    pub k: usize,
    /// Each query's filter, probing and refine factor.
    pub shape: QueryShape,
    /// Client counts.
    pub concurrency: Vec<usize>,
    /// Coalescing windows to measure (µs).
    pub windows_us: Vec<u64>,
    /// Seconds per pass.
    pub seconds: f64,
    /// Passes per measurement (modes alternate pass by pass).
    pub passes: usize,
    /// Where to draw latency against throughput (PNG).
    pub plot: Option<PathBuf>,
}

/// One row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct EngineRow {
    /// `coalesced` or `direct`.
    pub mode: String,
    /// The coalescing window (µs); 0 for direct.
    pub window_us: u64,
    /// Closed-loop clients.
    pub concurrency: usize,
    /// Searches answered per second (median pass).
    pub qps: f64,
    /// Request latency, median (ms).
    pub p50_ms: f64,
    /// Request latency, 99th percentile (ms).
    pub p99_ms: f64,
    /// Mean queries per scanned batch.
    pub mean_batch: f64,
    /// recall@k over the answered queries, when ground truth was given.
    pub recall: Option<f64>,
    /// Partition-cache hit ratio during the measurement.
    pub cache_hit_ratio: f64,
    /// Searches answered over all passes.
    pub requests: usize,
    /// Peak resident memory of the process so far (MiB).
    pub peak_rss_mib: f64,
}

/// What one pass of closed-loop clients produced.
struct Pass {
    qps: f64,
    latencies: Vec<Duration>,
    /// (query index, ids found).
    answers: Vec<(usize, Vec<i64>)>,
}

/// Accumulates the passes of one (mode, window, concurrency) cell.
#[derive(Default)]
struct Cell {
    qps: Vec<f64>,
    latencies: Vec<Duration>,
    found: Vec<Option<Vec<i64>>>,
    batches: u64,
    batched_queries: u64,
    cache_hits: u64,
    cache_misses: u64,
}

/// Runs the engine benchmark and prints its table.
pub fn run_engine_bench(opts: &EngineBenchOptions, config: &Config) -> Result<Vec<EngineRow>> {
    let (data_dir, name) = split_dataset_path(&opts.dataset)?;
    let (_, queries) = read_vectors(&opts.queries)?;
    if queries.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{} holds no query vectors",
            opts.queries.display()
        )));
    }
    let truth = match &opts.groundtruth {
        Some(p) => Some(read_ivecs(p)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start a tokio runtime: {e}")))?;
    let queries = Arc::new(queries);
    let rows = runtime.block_on(async {
        let mut direct_config = config.clone();
        direct_config.coalescer.window_us = 0;
        direct_config.coalescer.max_batch_size = 1;
        direct_config.coalescer.flush_when_idle = true;
        let direct = Engine::start(direct_config, &data_dir)?;
        let direct_ds = direct.dataset(&name).await?;
        let mut engines = Vec::new();
        for &window in &opts.windows_us {
            let mut c = config.clone();
            c.coalescer.window_us = window;
            c.validate()?;
            let engine = Engine::start(c, &data_dir)?;
            let ds = engine.dataset(&name).await?;
            engines.push((window, engine, ds));
        }
        eprintln!(
            "engine benchmark: {} ({} rows), {} queries, k = {}, {}, cache {} bytes",
            opts.dataset.display(),
            direct_ds.latest().count_rows(),
            queries.len(),
            opts.k,
            opts.shape.describe(),
            config.cache.capacity_bytes.bytes()
        );
        // Warm-up: every engine answers every query once (fills its cache).
        let warm = Duration::from_secs_f64(opts.seconds.min(1.0));
        for ds in std::iter::once(&direct_ds).chain(engines.iter().map(|(_, _, d)| d)) {
            closed_loop(ds, &queries, opts.k, &opts.shape, 16, warm).await?;
        }
        let mut rows = Vec::new();
        let pass = Duration::from_secs_f64(opts.seconds);
        for &clients in &opts.concurrency {
            let mut direct_cell = Cell::default();
            let mut cells: Vec<Cell> = engines.iter().map(|_| Cell::default()).collect();
            for p in 0..opts.passes.max(1) {
                measure(
                    &direct,
                    &direct_ds,
                    &mut direct_cell,
                    &queries,
                    opts,
                    clients,
                    pass,
                )
                .await?;
                for ((_, engine, ds), cell) in engines.iter().zip(&mut cells) {
                    measure(engine, ds, cell, &queries, opts, clients, pass).await?;
                }
                eprintln!(
                    "  {clients} clients, pass {}/{}: direct {:.0} QPS, coalesced {}",
                    p + 1,
                    opts.passes.max(1),
                    direct_cell.qps.last().copied().unwrap_or(0.0),
                    cells
                        .iter()
                        .zip(&engines)
                        .map(|(c, (w, _, _))| format!(
                            "{:.0} QPS (window {w} µs)",
                            c.qps.last().copied().unwrap_or(0.0)
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            rows.push(row(
                "direct",
                0,
                clients,
                direct_cell,
                truth.as_deref(),
                opts.k,
            ));
            for ((window, _, _), cell) in engines.iter().zip(cells) {
                rows.push(row(
                    "coalesced",
                    *window,
                    clients,
                    cell,
                    truth.as_deref(),
                    opts.k,
                ));
            }
        }
        direct.shutdown().await;
        for (_, engine, _) in &engines {
            engine.shutdown().await;
        }
        Ok::<_, Error>(rows)
    })?;
    print_table(&rows, opts.k);
    if let Some(path) = &opts.plot {
        super::plot::latency_throughput(path, &rows)?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(rows)
}

/// `data/gcide` → (`data`, `gcide`): the engine serves a directory of
/// datasets by name.
fn split_dataset_path(dataset: &Path) -> Result<(PathBuf, String)> {
    let name = dataset
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::InvalidArgument(format!("{} names no dataset", dataset.display())))?;
    let parent = match dataset.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}

/// One pass of `clients` closed-loop clients on `ds`, folded into `cell`
/// with the engine's batch and cache counters over the pass.
async fn measure(
    engine: &Engine,
    ds: &DatasetHandle,
    cell: &mut Cell,
    queries: &Arc<Vec<Vec<f32>>>,
    opts: &EngineBenchOptions,
    clients: usize,
    duration: Duration,
) -> Result<()> {
    let before = engine.stats();
    let pass = closed_loop(ds, queries, opts.k, &opts.shape, clients, duration).await?;
    let after = engine.stats();
    fold(cell, pass, &before, &after, queries.len());
    Ok(())
}

fn fold(cell: &mut Cell, pass: Pass, before: &EngineStats, after: &EngineStats, n: usize) {
    cell.qps.push(pass.qps);
    cell.latencies.extend(pass.latencies);
    if cell.found.is_empty() {
        cell.found = vec![None; n];
    }
    for (i, ids) in pass.answers {
        cell.found[i].get_or_insert(ids);
    }
    cell.batches += after.batch_size.count() - before.batch_size.count();
    cell.batched_queries += after.batch_size.sum - before.batch_size.sum;
    cell.cache_hits += after.cache_hits - before.cache_hits;
    cell.cache_misses += after.cache_misses - before.cache_misses;
}

/// `clients` tasks, each searching query after query (round robin over
/// the set, shared) until `duration` has passed.
async fn closed_loop(
    ds: &DatasetHandle,
    queries: &Arc<Vec<Vec<f32>>>,
    k: usize,
    shape: &QueryShape,
    clients: usize,
    duration: Duration,
) -> Result<Pass> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let stop = start + duration;
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients.max(1) {
        let ds = ds.clone();
        let queries = Arc::clone(queries);
        let next = Arc::clone(&next);
        let shape = shape.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut answers = Vec::new();
            while Instant::now() < stop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let i = n % queries.len();
                let mut query = Query::new(queries[i].clone(), k);
                // Filters cycle with the request count, not the query, so
                // every query vector meets every filter over a run.
                query.own = shape.own(n / queries.len() + i);
                let t = Instant::now();
                let response = ds.search(&query).await?;
                latencies.push(t.elapsed());
                answers.push((i, response.hits.iter().map(|h| h.id).collect()));
            }
            Ok::<_, Error>((latencies, answers))
        }));
    }
    let mut pass = Pass {
        qps: 0.0,
        latencies: Vec::new(),
        answers: Vec::new(),
    };
    for task in tasks {
        let (latencies, answers) = task
            .await
            .map_err(|e| Error::Internal(format!("a benchmark client failed: {e}")))??;
        pass.latencies.extend(latencies);
        pass.answers.extend(answers);
    }
    pass.qps = pass.latencies.len() as f64 / start.elapsed().as_secs_f64();
    Ok(pass)
}

fn row(
    mode: &str,
    window_us: u64,
    concurrency: usize,
    mut cell: Cell,
    truth: Option<&[Vec<i32>]>,
    k: usize,
) -> EngineRow {
    cell.latencies.sort();
    let pct = |p: f64| -> f64 {
        if cell.latencies.is_empty() {
            return 0.0;
        }
        let i = ((cell.latencies.len() - 1) as f64 * p).round() as usize;
        cell.latencies[i].as_secs_f64() * 1e3
    };
    cell.qps.sort_by(|a, b| a.total_cmp(b));
    let recall = truth.map(|truth| {
        let (found, expected): (Vec<Vec<i64>>, Vec<Vec<i32>>) = cell
            .found
            .iter()
            .zip(truth)
            .filter_map(|(f, t)| f.clone().map(|f| (f, t.clone())))
            .unzip();
        recall_at_k(&found, &expected, k)
    });
    let lookups = cell.cache_hits + cell.cache_misses;
    EngineRow {
        mode: mode.to_string(),
        window_us,
        concurrency,
        qps: cell.qps.get(cell.qps.len() / 2).copied().unwrap_or(0.0),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        mean_batch: cell.batched_queries as f64 / cell.batches.max(1) as f64,
        recall,
        cache_hit_ratio: if lookups == 0 {
            0.0
        } else {
            cell.cache_hits as f64 / lookups as f64
        },
        requests: cell.latencies.len(),
        peak_rss_mib: peak_rss_mib(),
    }
}

fn print_table(rows: &[EngineRow], k: usize) {
    println!("\n| mode | window µs | clients | QPS | p50 ms | p99 ms | mean batch | recall@{k} | cache hit | vs direct |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let direct = rows
            .iter()
            .find(|d| d.mode == "direct" && d.concurrency == r.concurrency)
            .map_or(0.0, |d| d.qps);
        println!(
            "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {:.1} | {} | {:.2} | {:.2}× |",
            r.mode,
            r.window_us,
            r.concurrency,
            r.qps,
            r.p50_ms,
            r.p99_ms,
            r.mean_batch,
            r.recall.map_or("-".into(), |x| format!("{x:.3}")),
            r.cache_hit_ratio,
            if direct > 0.0 { r.qps / direct } else { 0.0 }
        );
    }
}
