//! Seeded synthetic data (clustered vectors with scalar columns) for the
//! demo, benchmarks and tests, and the `shoal demo` walk-through.

use crate::config::Config;
use crate::db::Dataset;
use crate::error::Result;
use crate::index::Metric;
use crate::query::{BatchQuery, Query};
use crate::storage::{ColumnType, Schema};
use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;

/// Parts of speech used for the demo's `category` column.
pub const CATEGORIES: [&str; 5] = ["noun", "verb", "adj", "adv", "other"];

/// `n` vectors of `dim` floats drawn around `clusters` random centres
/// (Gaussian-ish noise), deterministic for `seed`. Row-major.
pub fn clustered_vectors(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    clustered_vectors_with_noise(n, dim, clusters, 0.15, seed)
}

/// Like [`clustered_vectors`], with per-coordinate noise the sum of three
/// uniforms in `±noise` (centres are uniform in ±1: a noise of 0.6 makes
/// clusters overlap, as real embeddings do).
pub fn clustered_vectors_with_noise(
    n: usize,
    dim: usize,
    clusters: usize,
    noise: f32,
    seed: u64,
) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..clusters.max(1) * dim)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = rng.random_range(0..clusters.max(1));
        for j in 0..dim {
            // Sum of three uniforms: cheap, bell-shaped noise.
            let e: f32 = (0..3).map(|_| rng.random_range(-noise..noise)).sum();
            out.push(centres[c * dim + j] + e);
        }
    }
    out
}

/// A record batch of `vectors` (row-major, `dim` wide) in column `column`,
/// with `category` (utf8) and `len` (int64) columns derived from the row
/// number `first_row + i`.
pub fn demo_batch(
    column: &str,
    dim: usize,
    vectors: &[f32],
    first_row: usize,
) -> Result<RecordBatch> {
    let n = vectors.len() / dim;
    let list = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, false)),
        dim as i32,
        Arc::new(Float32Array::from(vectors.to_vec())),
        None,
    )?;
    let rows = first_row..first_row + n;
    let category =
        StringArray::from_iter_values(rows.clone().map(|r| CATEGORIES[(r * 7 + r / 3) % 5]));
    let len = Int64Array::from_iter_values(rows.map(|r| 4 + ((r * 31) % 40) as i64));
    Ok(RecordBatch::try_from_iter(vec![
        (column, Arc::new(list) as ArrayRef),
        ("category", Arc::new(category) as ArrayRef),
        ("len", Arc::new(len) as ArrayRef),
    ])?)
}

/// The schema of [`demo_batch`] rows.
pub fn demo_schema(column: &str, dim: usize, metric: Metric) -> Result<Schema> {
    Schema::new(vec![
        (column.to_string(), ColumnType::Vector { dim, metric }),
        ("category".into(), ColumnType::Utf8),
        ("len".into(), ColumnType::Int64),
    ])
}

/// Opens the demo dataset at `dir`, creating it (`rows` clustered vectors
/// of `dim` floats) when it does not exist.
pub fn open_or_create_demo(
    dir: &Path,
    rows: usize,
    dim: usize,
    config: &Config,
) -> Result<Dataset> {
    if dir.join(crate::storage::manifest::VERSIONS_DIR).exists() {
        return Dataset::open_with_config(dir, config.clone());
    }
    let mut ds = Dataset::create(dir, demo_schema("vector", dim, Metric::L2)?, config.clone())?;
    let vectors = clustered_vectors(rows, dim, 32, 42);
    let chunk = 8192 * dim;
    let batches = vectors
        .chunks(chunk)
        .enumerate()
        .map(|(i, c)| demo_batch("vector", dim, c, i * 8192));
    ds.append(batches)?;
    Ok(ds)
}

/// `shoal demo`: builds (or reuses) a demo dataset, runs a batch of
/// searches, a filtered search and a single search, and prints them.
pub fn run_demo(dir: &Path, config: &Config) -> Result<()> {
    let (rows, dim) = (20_000, 32);
    let ds = open_or_create_demo(dir, rows, dim, config)?;
    println!(
        "dataset {} — version {}, {} rows, schema: {}",
        dir.display(),
        ds.version(),
        ds.count_rows(),
        ds.schema()
            .columns
            .iter()
            .map(|c| format!("{}: {}", c.name, c.ty.describe()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Fresh points from the same clusters: the generator continued past the data.
    let queries: Vec<Vec<f32>> = clustered_vectors(rows + 8, dim, 32, 42)[rows * dim..]
        .chunks(dim)
        .map(|c| c.to_vec())
        .collect();
    let mut batch = BatchQuery::new(queries.clone(), 5);
    batch.projection = vec!["category".into(), "len".into()];
    let start = std::time::Instant::now();
    let results = ds.search_batch(&batch)?;
    println!(
        "\nexact batch search: {} queries, k = 5, {:.2} ms for the whole batch",
        queries.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    for (qi, hits) in results.hits.iter().enumerate().take(3) {
        println!("query {qi}:");
        print_hits(hits);
    }
    println!("  ... ({} more queries)", queries.len() - 3);
    let mut filtered = Query::new(queries[0].clone(), 5);
    filtered.filter = Some("category = 'verb' AND len < 12".into());
    filtered.projection = vec!["category".into(), "len".into()];
    let r = ds.search(&filtered)?;
    println!("\nquery 0 with filter \"category = 'verb' AND len < 12\":");
    print_hits(&r.hits[0]);
    let alone = ds.search(&Query::new(queries[1].clone(), 5))?;
    let same = alone.hits[0]
        .iter()
        .zip(&results.hits[1])
        .all(|(a, b)| a.row_id == b.row_id && a.distance.to_bits() == b.distance.to_bits());
    println!(
        "\nquery 1 searched alone returns {} rows as in the batch (batch invariance).",
        if same { "the same" } else { "DIFFERENT" }
    );
    Ok(())
}

/// Prints rows projected as (category, len).
fn print_hits(hits: &[crate::query::Hit]) {
    for h in hits {
        println!(
            "  id {:>6}  distance {:>9.4}  category {:<6} len {}",
            h.id,
            h.distance,
            fmt_value(&h.values[0]),
            fmt_value(&h.values[1])
        );
    }
}

fn fmt_value(v: &crate::query::ScalarValue) -> String {
    match v {
        crate::query::ScalarValue::Utf8(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
