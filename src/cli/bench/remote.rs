//! `shoal bench --mode remote`: a dataset served from object storage
//! against the same dataset on local disk, in one process.
//!
//! The dataset's files are copied into an in-memory object store that
//! waits `--latency-ms` before every request (object_store's
//! `ThrottledStore`), and opened by URL through a session with an empty
//! disk cache. Measured per batch size: the first pass over the queries
//! (cold: every file and partition range is fetched once), then warm
//! passes, local and remote interleaved, median QPS. Answers are checked
//! to be identical on both sides. The remote side also reports the GETs
//! and bytes per query of its cold first pass and of its warm passes
//! (from the session's object-storage counters).

use super::QueryShape;
use serde::Serialize;
use shoal::object_store::throttle::{ThrottleConfig, ThrottledStore};
use shoal::object_store::{
    memory::InMemory, path::Path as ObjectPath, ObjectStore, ObjectStoreExt,
};
use shoal::{BatchQuery, Config, Dataset, Error, Result, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `shoal bench --mode remote` measures.
#[derive(Clone, Debug)]
pub struct RemoteBenchOptions {
    /// An existing, indexed local dataset (copied into the store).
    pub dataset: std::path::PathBuf,
    /// Query vectors (.fvecs/.npy).
    pub queries: std::path::PathBuf,
    /// k.
    pub k: usize,
    /// Each query's filter, probing and refine factor.
    pub shape: QueryShape,
    /// Batch sizes.
    pub batch_sizes: Vec<usize>,
    /// Warm passes per side.
    pub passes: usize,
    /// Wait before every object-store request.
    pub latency: Duration,
    /// Columns every query returns besides `id`.
    pub select: Vec<String>,
}

/// One (side, batch size) row.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteRow {
    /// `local` or `remote`.
    pub side: String,
    /// Queries per batch.
    pub batch: usize,
    /// The first batch of the first pass, ms (remote: cold caches).
    pub first_batch_ms: f64,
    /// The whole first pass, s.
    pub first_pass_s: f64,
    /// Query vectors per second in warm passes (median).
    pub warm_qps: f64,
    /// Bytes in the disk cache after the side's passes (remote only).
    pub disk_cache_bytes: u64,
    /// GETs of the first batch (cold on the remote side).
    pub first_batch_gets: u64,
    /// Bytes fetched from storage for the first batch.
    pub first_batch_bytes: u64,
    /// Bytes of the index partitions the first batch loaded (what it must
    /// read however it reads).
    pub first_batch_partition_bytes: u64,
    /// GETs per query in the first (cold) pass (remote only).
    pub cold_gets_per_query: f64,
    /// Bytes per query in the first pass (remote only).
    pub cold_bytes_per_query: f64,
    /// GETs per query in the warm passes (remote only).
    pub warm_gets_per_query: f64,
    /// Bytes per query in the warm passes (remote only).
    pub warm_bytes_per_query: f64,
}

/// Runs the comparison and prints a table.
pub fn run_remote(opts: &RemoteBenchOptions, config: &Config) -> Result<Vec<RemoteRow>> {
    use shoal::ingest::read_vectors;
    let (_, queries) = read_vectors(&opts.queries)?;
    let cache_dir = std::env::temp_dir().join(format!(
        "shoal-bench-remote-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _guard = super::TempDir(cache_dir.clone());
    let mut rows = Vec::new();
    for &b in &opts.batch_sizes {
        // A fresh store, session and disk cache per batch size: every
        // first pass is cold.
        let store: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(
            InMemory::new(),
            ThrottleConfig {
                wait_get_per_call: opts.latency,
                wait_list_per_call: opts.latency,
                wait_list_with_delimiter_per_call: opts.latency,
                wait_put_per_call: opts.latency,
                wait_delete_per_call: opts.latency,
                ..ThrottleConfig::default()
            },
        ));
        let files = copy_dataset(&opts.dataset, &store, "bench/ds")?;
        let mut config = config.clone();
        config.cache.disk_dir = cache_dir.join(b.to_string()).display().to_string();
        let session = Session::new(config);
        session.register_object_store("memory:///bench", store)?;
        eprintln!(
            "batch {b}: {files} files copied into the store ({} ms per request)",
            opts.latency.as_millis()
        );
        let local = session.open(&opts.dataset)?;
        let remote = session.open("memory:///bench/ds")?;
        let batches: Vec<BatchQuery> = queries
            .chunks(b)
            .enumerate()
            .map(|(ci, c)| {
                let each = (0..c.len())
                    .map(|j| shoal::PerQueryParams {
                        projection: opts.select.clone(),
                        ..opts.shape.own(ci * b + j)
                    })
                    .collect();
                BatchQuery::new(c.to_vec(), opts.k).each(each)
            })
            .collect();
        let mut first = Vec::new();
        let mut first_io = Vec::new();
        let mut answers = Vec::new();
        let io = || session.disk_cache().io();
        let before = io();
        let mut cold = io();
        for ds in [&remote, &local] {
            let started = Instant::now();
            let mut first_batch = Duration::ZERO;
            let mut ids: Vec<Vec<i64>> = Vec::with_capacity(queries.len());
            for (i, q) in batches.iter().enumerate() {
                let (results, profile) = ds.explain(q)?;
                ids.extend(
                    results
                        .hits
                        .into_iter()
                        .map(|h| h.into_iter().map(|h| h.id).collect()),
                );
                if i == 0 {
                    first_batch = started.elapsed();
                    first_io.push(profile);
                }
            }
            first.push((first_batch, started.elapsed()));
            answers.push(ids);
            if first.len() == 1 {
                cold = io();
            }
        }
        if answers[0] != answers[1] {
            return Err(Error::Internal(
                "the remote dataset answered differently from the local one".into(),
            ));
        }
        let warm_before = io();
        let mut qps: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..opts.passes.max(1) {
            for (side, ds) in [&remote, &local].into_iter().enumerate() {
                qps[side].push(pass_qps(ds, &batches, queries.len())?);
            }
        }
        let warm = io();
        let n = queries.len().max(1) as f64;
        let warm_n = n * opts.passes.max(1) as f64;
        for (side, name) in ["remote", "local"].into_iter().enumerate() {
            qps[side].sort_by(f64::total_cmp);
            let remote_only = |v: f64| if side == 0 { v } else { 0.0 };
            rows.push(RemoteRow {
                side: name.into(),
                batch: b,
                first_batch_ms: first[side].0.as_secs_f64() * 1e3,
                first_pass_s: first[side].1.as_secs_f64(),
                warm_qps: qps[side][qps[side].len() / 2],
                disk_cache_bytes: if side == 0 {
                    session.disk_cache().bytes()
                } else {
                    0
                },
                first_batch_gets: first_io[side].storage_gets,
                first_batch_bytes: first_io[side].storage_bytes,
                first_batch_partition_bytes: first_io[side].bytes_read,
                cold_gets_per_query: remote_only((cold.gets - before.gets) as f64 / n),
                cold_bytes_per_query: remote_only((cold.bytes - before.bytes) as f64 / n),
                warm_gets_per_query: remote_only((warm.gets - warm_before.gets) as f64 / warm_n),
                warm_bytes_per_query: remote_only((warm.bytes - warm_before.bytes) as f64 / warm_n),
            });
        }
    }
    println!(
        "Object storage ({} ms per request) against local disk: {} queries, k = {}, {}",
        opts.latency.as_millis(),
        queries.len(),
        opts.k,
        opts.shape.describe()
    );
    println!();
    if !opts.select.is_empty() {
        println!("Each query returns id and {}.", opts.select.join(", "));
    }
    println!(
        "| side | batch | first batch (ms) | its GETs | its KiB | its partitions' KiB \
         | first pass (s) | warm QPS | disk cache (MiB) | cold GETs/q | cold KiB/q \
         | warm GETs/q | warm KiB/q |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} \
             | {:.2} | {:.0} |",
            r.side,
            r.batch,
            r.first_batch_ms,
            r.first_batch_gets,
            r.first_batch_bytes as f64 / 1024.0,
            r.first_batch_partition_bytes as f64 / 1024.0,
            r.first_pass_s,
            r.warm_qps,
            r.disk_cache_bytes as f64 / (1 << 20) as f64,
            r.cold_gets_per_query,
            r.cold_bytes_per_query / 1024.0,
            r.warm_gets_per_query,
            r.warm_bytes_per_query / 1024.0,
        );
    }
    Ok(rows)
}

/// One pass over `batches`; query vectors per second.
fn pass_qps(ds: &Dataset, batches: &[BatchQuery], queries: usize) -> Result<f64> {
    let started = Instant::now();
    for q in batches {
        ds.search_batch(q)?;
    }
    Ok(queries as f64 / started.elapsed().as_secs_f64())
}

/// Copies every file of the local dataset `dir` into `store` under
/// `prefix`; how many.
fn copy_dataset(
    dir: &std::path::Path,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
) -> Result<usize> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let path = entry.map_err(|e| Error::io(&d, e))?.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("tokio runtime: {e}")))?;
    for path in &files {
        let rel = path
            .strip_prefix(dir)
            .map_err(|e| Error::Internal(e.to_string()))?
            .to_string_lossy()
            .replace('\\', "/");
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let object = ObjectPath::from(format!("{prefix}/{rel}"));
        runtime
            .block_on(store.put(&object, bytes.into()))
            .map_err(|e| Error::Internal(format!("copying {rel}: {e}")))?;
    }
    Ok(files.len())
}
