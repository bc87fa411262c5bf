//! Seeded synthetic data (clustered vectors with scalar columns) for the
//! demo, benchmarks and tests.

use crate::error::Result;
use crate::kernel::Metric;
use crate::storage::{ColumnType, Schema};
use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field};
use rand::{Rng, SeedableRng};
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
        (column, ColumnType::Vector { dim, metric }),
        ("category", ColumnType::Utf8),
        ("len", ColumnType::Int64),
    ])
}
