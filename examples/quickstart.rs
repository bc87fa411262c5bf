//! In-process quickstart: create a dataset, append vectors, search one and
//! many queries. Run with `cargo run --example quickstart`.

use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::{BatchQuery, Config, Dataset, Metric, Query};

fn main() -> shoal::Result<()> {
    let dir = std::env::temp_dir().join(format!("shoal-quickstart-{}", std::process::id()));
    let dim = 16;
    let mut ds = Dataset::create(
        &dir,
        demo_schema("vector", dim, Metric::L2)?,
        Config::default(),
    )?;
    let vectors = clustered_vectors(5_000, dim, 8, 1);
    ds.append([demo_batch("vector", dim, &vectors, 0)])?;
    println!("version {} holds {} rows", ds.version(), ds.count_rows());

    let mut q = Query::new(vectors[..dim].to_vec(), 3);
    q.filter = Some("category = 'noun'".into());
    for hit in &ds.search(&q)?.hits[0] {
        println!("id {} at distance {}", hit.id, hit.distance);
    }

    let batch = BatchQuery::new(
        vectors.chunks(dim).take(32).map(|v| v.to_vec()).collect(),
        5,
    );
    let results = ds.search_batch(&batch)?;
    println!("{} queries answered in one shared scan", results.hits.len());
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
