//! `shoal bench --mode ivf`: builds each index type over a data set and
//! measures recall@k and QPS per nprobes, one query per call.

use super::{recall_at_k, temp_dataset};
use serde::Serialize;
use shoal::demo::clustered_vectors;
use shoal::{BatchQuery, Config, Error, Metric, Query, Result};
use std::time::Instant;

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
    /// nprobes values (IVF indexes).
    pub nprobes: Vec<usize>,
    /// ef values (hnsw indexes).
    pub efs: Vec<usize>,
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
    /// Bytes of the index's files (`partitions.bin`, `model.bin`,
    /// `segment.json`).
    pub index_bytes: u64,
    /// nprobes (IVF) or ef (hnsw).
    pub nprobes: usize,
    /// Which of the two `nprobes` is.
    pub knob: &'static str,
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
    let (mut ds, cleanup) = temp_dataset("shoal-ivf-bench", dim, opts.metric, &flat, config)?;
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
        eprintln!("building {kind:?} ...");
        let t = Instant::now();
        ds.create_index(None, params)?;
        let build_s = t.elapsed().as_secs_f64();
        let index_bytes = ds
            .index_segments()
            .iter()
            .map(|seg| dir_bytes(&cleanup.0.join("indices").join(&seg.id)))
            .sum::<u64>();
        let (knob, values) = if kind.is_graph() {
            ("ef", &opts.efs)
        } else {
            ("nprobes", &opts.nprobes)
        };
        for &np in values {
            let mut found = Vec::with_capacity(queries.len());
            let single: Vec<Query> = queries
                .iter()
                .map(|v| {
                    let q = Query::new(v.clone(), opts.k).mode(shoal::SearchMode::PerQuery);
                    if kind.is_graph() {
                        q.ef(np.max(opts.k))
                    } else {
                        q.nprobes(np)
                    }
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
                index: match kind {
                    shoal::IndexKind::IvfRq { bits: 1 } => "ivf_rq 1 bit".into(),
                    shoal::IndexKind::IvfRq { bits } => format!("ivf_rq {bits} bits"),
                    shoal::IndexKind::Hnsw { m, ef_construction } => {
                        format!("hnsw m {m} efc {ef_construction}")
                    }
                    _ => kind.name().into(),
                },
                build_s,
                index_bytes,
                nprobes: np,
                knob,
                recall: recall_at_k(&found, &truth, opts.k),
                qps_one_at_a_time: qps,
            });
            let r = rows_measured.last().map(|r| r.recall).unwrap_or(0.0);
            eprintln!("  {knob} {np}: recall@{} {r:.3}, {qps:.0} QPS", opts.k);
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
        "\n| index | build (s) | index bytes | nprobes / ef | recall@{} | QPS |",
        report.k
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &report.rows_measured {
        println!(
            "| {} | {:.2} | {} | {} {} | {:.3} | {:.0} |",
            r.index, r.build_s, r.index_bytes, r.knob, r.nprobes, r.recall, r.qps_one_at_a_time
        );
    }
    Ok(report)
}

/// Bytes of the files directly in `dir` (0 when it cannot be read).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
