//! Writes the dataset and queries the C tests search:
//! `shoal-c-fixture DIR` makes `DIR/ds` (five fragments of 16-d rows:
//! two under a trained IVF_FLAT segment, one under a delta segment, two
//! unindexed; repeated vectors for ties; some rows deleted; columns
//! `category` and `len`) and `DIR/queries.f32` (`n × 16` little-endian
//! floats: repeated queries and copies of stored rows among them), and
//! prints `n dim`.

use shoal::demo::clustered_vectors;
use shoal::{Config, Dataset, IndexKind, IndexParams};
use std::sync::Arc;

const DIM: usize = 16;

fn batch(first_id: i64, vectors: &[f32]) -> arrow_array::RecordBatch {
    use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field};
    let n = vectors.len() / DIM;
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let list = FixedSizeListArray::try_new(
        item,
        DIM as i32,
        Arc::new(Float32Array::from(vectors.to_vec())),
        None,
    )
    .expect("vectors");
    let categories = ["noun", "verb", "adj"];
    arrow_array::RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(first_id..first_id + n as i64)) as _,
        ),
        ("vector", Arc::new(list) as _),
        (
            "category",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| categories[i % 3]),
            )) as _,
        ),
        (
            "len",
            Arc::new(Int64Array::from_iter_values(
                (0..n).map(|i| (i % 10) as i64),
            )) as _,
        ),
    ])
    .expect("batch")
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: shoal-c-fixture DIR");
    let dir = std::path::Path::new(&dir);
    let root = dir.join("ds");
    let schema = shoal::Schema::new(vec![
        (
            "vector",
            shoal::ColumnType::Vector {
                dim: DIM,
                metric: shoal::Metric::L2,
            },
        ),
        ("category", shoal::ColumnType::Utf8),
        ("len", shoal::ColumnType::Int64),
    ])
    .expect("schema");
    let mut ds = Dataset::create(&root, schema, Config::default()).expect("create");
    let mut all = clustered_vectors(2600, DIM, 12, 7);
    // Every 9th row repeats an earlier one: distance ties.
    for i in (9..2600).step_by(9) {
        let earlier = (i / 3) * DIM;
        let copy = all[earlier..earlier + DIM].to_vec();
        all[i * DIM..(i + 1) * DIM].copy_from_slice(&copy);
    }
    let sizes = [700usize, 600, 500, 450, 350];
    let mut at = 0;
    for (f, &n) in sizes.iter().enumerate() {
        ds.append([batch(at as i64, &all[at * DIM..(at + n) * DIM])])
            .expect("append");
        at += n;
        if f == 1 {
            ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 16))
                .expect("index");
        }
        if f == 2 {
            ds.optimize().expect("delta segment");
        }
    }
    ds.delete("len = 7").expect("delete");
    let mut queries: Vec<f32> = clustered_vectors(30, DIM, 12, 8);
    // Copies of stored rows (zero distances, ties with their repeats) and
    // repeated queries.
    for r in [9usize, 18, 700, 2599] {
        queries.extend_from_slice(&all[r * DIM..(r + 1) * DIM]);
    }
    for q in [0usize, 3] {
        let copy = queries[q * DIM..(q + 1) * DIM].to_vec();
        queries.extend_from_slice(&copy);
    }
    let bytes: Vec<u8> = queries.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(dir.join("queries.f32"), bytes).expect("queries");
    println!("{} {DIM}", queries.len() / DIM);
}
