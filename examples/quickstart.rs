//! In-process quickstart: make a schema and an Arrow batch, append it,
//! build an index, search one query and a batch. Run with
//! `cargo run --example quickstart`. The README shows this program.

use shoal::arrow_array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use shoal::arrow_schema::{DataType, Field};
use shoal::{
    BatchQuery, ColumnType, Config, Dataset, IndexKind, IndexParams, Metric, Query, Schema,
};
use std::sync::Arc;

fn main() -> shoal::Result<()> {
    let dir = std::env::temp_dir().join(format!("shoal-quickstart-{}", std::process::id()));
    let (rows, dim) = (10_000, 8);
    // A dataset: a vector column and two scalar columns (an int64 `id` is added).
    let schema = Schema::new([
        (
            "vector",
            ColumnType::Vector {
                dim,
                metric: Metric::L2,
            },
        ),
        ("category", ColumnType::Utf8),
        ("len", ColumnType::Int64),
    ])?;
    let mut ds = Dataset::create(&dir, schema, Config::default())?;

    // One Arrow batch: vectors as a FixedSizeList of float32.
    let floats: Vec<f32> = (0..rows * dim)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let vectors = FixedSizeListArray::try_new(
        item,
        dim as i32,
        Arc::new(Float32Array::from(floats.clone())),
        None,
    )
    .map_err(|e| shoal::Error::Arrow(e.to_string()))?;
    let category = StringArray::from_iter_values((0..rows).map(|i| ["noun", "verb"][i % 2]));
    let len = Int64Array::from_iter_values((0..rows as i64).map(|i| i % 20));
    let batch = RecordBatch::try_from_iter([
        ("vector", Arc::new(vectors) as _),
        ("category", Arc::new(category) as _),
        ("len", Arc::new(len) as _),
    ])
    .map_err(|e| shoal::Error::Arrow(e.to_string()))?;
    let commit = ds.append([batch])?; // rows without an `id` get the running row count
    println!("version {} holds {} rows", commit.version, ds.count_rows());

    // An IVF_FLAT index of 64 partitions (k-means over the vectors).
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 64))?;

    // One query: its own filter, columns and probing.
    let query = Query::new(floats[..dim].to_vec(), 3)
        .filter("category = 'noun' AND len < 10")
        .select(["category", "len"])
        .nprobes(16);
    for hit in ds.search(&query)?.hits {
        println!(
            "id {} at distance {:.3}: {:?}",
            hit.id, hit.distance, hit.values
        );
    }

    // A batch: 32 queries scored in one shared scan; hits[i] answers query i.
    let batch = BatchQuery::new(
        floats.chunks(dim).take(32).map(<[f32]>::to_vec).collect(),
        5,
    );
    let results = ds.search_batch(&batch)?;
    assert_eq!(results.hits.len(), 32);
    println!("32 queries answered in one shared scan");
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
