//! Many independent callers, one engine: 64 tasks each await one search at
//! the same moment; the engine gathers them into a few shared scans, and
//! every task still gets exactly the rows it would have got searching
//! alone. Run with `cargo run --release --example concurrent_clients`.

use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::{Config, Engine, Metric, Query};
use shoal::{IndexKind, IndexParams};

#[tokio::main]
async fn main() -> shoal::Result<()> {
    let data_dir = std::env::temp_dir().join(format!("shoal-clients-{}", std::process::id()));
    let (rows, dim, clients) = (50_000, 64, 64);

    let engine = Engine::start(Config::default(), &data_dir)?;
    let ds = engine
        .create_dataset("demo", demo_schema("vector", dim, Metric::L2)?)
        .await?;
    let vectors = clustered_vectors(rows, dim, 64, 7);
    let batches = vectors
        .chunks(10_000 * dim)
        .enumerate()
        .map(|(i, c)| demo_batch("vector", dim, c, i * 10_000))
        .collect::<shoal::Result<Vec<_>>>()?;
    ds.append(batches).await?;
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 64))
        .await?;
    println!("dataset 'demo': {rows} rows of {dim} floats, IVF_FLAT with 64 partitions");

    // Queries: fresh points from the same clusters.
    let queries: Vec<Vec<f32>> = clustered_vectors(rows + clients, dim, 64, 7)[rows * dim..]
        .chunks(dim)
        .map(|c| c.to_vec())
        .collect();
    let tasks: Vec<_> = queries
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let ds = ds.clone();
            // Each caller picks its own k and filter; they still share
            // batches (a batch holds each caller's own k and filter).
            let mut query = Query::new(v.clone(), 3 + i % 5).nprobes(8);
            if i % 4 == 0 {
                query = query.filter("len < 20");
            }
            tokio::spawn(async move { (query.clone(), ds.search(&query).await) })
        })
        .collect();

    let snapshot = ds.latest();
    let mut batches = std::collections::BTreeMap::new();
    let mut identical = 0;
    for task in tasks {
        let (query, response) = task.await.expect("a client task panicked");
        let response = response?;
        *batches.entry(response.batch.id).or_insert(0) += 1;
        // The reference: the same query searched alone on the same version.
        let alone = snapshot.search(&query)?;
        let same =
            response.hits.len() == alone.hits.len()
                && response.hits.iter().zip(&alone.hits).all(|(a, b)| {
                    a.row_id == b.row_id && a.distance.to_bits() == b.distance.to_bits()
                });
        identical += usize::from(same);
    }
    println!(
        "{clients} concurrent searches were served by {} batches (sizes {:?})",
        batches.len(),
        batches.values().collect::<Vec<_>>()
    );
    println!("{identical} of {clients} callers got bit for bit the rows of searching alone");
    let stats = engine.stats();
    println!(
        "engine: {} batches, mean batch size {:.1}, cache hit ratio {:.2}",
        stats.batches,
        stats.mean_batch_size(),
        stats.cache_hit_ratio()
    );
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&data_dir);
    if identical != clients {
        return Err(shoal::Error::Internal(format!(
            "{} callers got rows that differ from searching alone",
            clients - identical
        )));
    }
    if identical != clients {
        return Err(shoal::Error::Internal(
            "a coalesced search differed from searching alone".into(),
        ));
    }
    Ok(())
}
