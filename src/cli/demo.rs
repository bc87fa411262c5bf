//! `shoal demo`: builds a seeded demo dataset and searches it.

use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::{BatchQuery, Config, Dataset, Metric, Query, Result};
use std::path::Path;

/// Opens the demo dataset at `dir`, creating it (`rows` clustered vectors
/// of `dim` floats) when it does not exist.
pub fn open_or_create_demo(
    dir: &Path,
    rows: usize,
    dim: usize,
    config: &Config,
) -> Result<Dataset> {
    if Dataset::exists(dir) {
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
    let batch = BatchQuery::new(queries.clone(), 5).select(["category", "len"]);
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
    let filtered = Query::new(queries[0].clone(), 5)
        .filter("category = 'verb' AND len < 12")
        .select(["category", "len"]);
    let r = ds.search(&filtered)?;
    println!("\nquery 0 with filter \"category = 'verb' AND len < 12\":");
    print_hits(&r.hits);
    let alone = ds.search(&Query::new(queries[1].clone(), 5))?;
    let same = alone
        .hits
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
fn print_hits(hits: &[shoal::Hit]) {
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

fn fmt_value(v: &shoal::ScalarValue) -> String {
    match v {
        shoal::ScalarValue::Utf8(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
