//! Search results: per query, rows ordered by `(distance, row_id)`.

use serde::{Deserialize, Serialize};

/// A projected column value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScalarValue {
    /// SQL NULL.
    Null,
    /// Boolean.
    Bool(bool),
    /// 64-bit integer.
    Int64(i64),
    /// 64-bit float.
    Float64(f64),
    /// String.
    Utf8(String),
    /// A vector column's value.
    Vector(Vec<f32>),
}

/// One result row of one query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// Stable internal row id (`fragment_id << 32 | offset`).
    pub row_id: u64,
    /// The user-visible `id` column.
    pub id: i64,
    /// Distance under the query's metric.
    pub distance: f32,
    /// Projected values, in projection order.
    pub values: Vec<ScalarValue>,
}

/// The answer to a batch: `hits[i]` belongs to query `i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResults {
    /// The version searched.
    pub version: u64,
    /// Names of the projected columns (the batch's projection).
    pub projection: Vec<String>,
    /// Each query's projected columns, when queries chose their own
    /// (`BatchQuery::each`) and they differ from `projection`; empty
    /// otherwise. [`SearchResults::projection_of`] reads either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projections: Vec<Vec<String>>,
    /// Rows per query, nearest first.
    pub hits: Vec<Vec<Hit>>,
}

impl SearchResults {
    /// The names of query `i`'s projected values, in the order of its
    /// hits' values.
    pub fn projection_of(&self, i: usize) -> &[String] {
        self.projections.get(i).unwrap_or(&self.projection)
    }

    /// All rows as `(query_index, hit)`, query by query.
    pub fn rows(&self) -> impl Iterator<Item = (usize, &Hit)> {
        self.hits
            .iter()
            .enumerate()
            .flat_map(|(q, hits)| hits.iter().map(move |h| (q, h)))
    }
}
