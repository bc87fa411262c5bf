//! Search results: per query, rows ordered by `(distance, row_id)`.

use crate::error::{Error, Result};
use crate::query::request::SearchMode;
use crate::storage::{ColumnType, Schema};
use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Float64Array, Int64Array, StringArray,
};
use arrow_schema::{DataType, Field};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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

/// Merges the hits of split searches ([`SharedParams::split`](crate::SharedParams::split))
/// per query: `parts[s][i]` are split `s`'s rows for query `i` (its best
/// `k + offset`, as a split search returns them). Each query gets the best
/// rows of all splits by (distance, row id) — the order every search
/// ranks by, ties to the lower row id — with its `offset` skipped and at
/// most `k` kept: for disjoint splits covering the snapshot, exactly what
/// searching the whole snapshot returns. `k` and `offset` are per query,
/// as in the split searches; a part with fewer queries adds nothing to
/// the queries it lacks.
pub fn merge_split_hits(parts: Vec<Vec<Vec<Hit>>>, k: &[usize], offset: &[usize]) -> Vec<Vec<Hit>> {
    let queries = k.len();
    let mut merged: Vec<Vec<Hit>> = (0..queries).map(|_| Vec::new()).collect();
    for part in parts {
        for (qi, hits) in part.into_iter().enumerate().take(queries) {
            merged[qi].extend(hits);
        }
    }
    for (qi, hits) in merged.iter_mut().enumerate() {
        hits.sort_by(|a, b| {
            a.distance
                .total_cmp(&b.distance)
                .then(a.row_id.cmp(&b.row_id))
        });
        let skip = offset.get(qi).copied().unwrap_or(0).min(hits.len());
        hits.drain(..skip);
        hits.truncate(k[qi]);
    }
    merged
}

/// The answer to a batch: `hits[i]` belongs to query `i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResults {
    /// The version searched.
    pub version: u64,
    /// Names of the projected columns, when every query projects the same
    /// ones (empty otherwise).
    pub projection: Vec<String>,
    /// Each query's projected columns, when queries chose different ones
    /// (empty otherwise). [`SearchResults::projection_of`] reads either.
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

    /// The projected columns of every row, in [`rows`](Self::rows) order,
    /// as Arrow arrays typed from `schema` (a value missing from a row is
    /// null): what a binding puts after its own fixed columns. Refused when
    /// the queries projected different columns.
    pub fn projected_arrays(&self, schema: &Schema) -> Result<Vec<(Field, ArrayRef)>> {
        let projection = self.projection_of(0);
        if (0..self.hits.len()).any(|i| self.projection_of(i) != projection) {
            return Err(Error::InvalidArgument(
                "queries of one call must select the same columns".into(),
            ));
        }
        let arrow = |e: arrow_schema::ArrowError| Error::Arrow(e.to_string());
        let mut out = Vec::with_capacity(projection.len());
        for (j, name) in projection.iter().enumerate() {
            let column = schema.column(name)?;
            let values = || self.rows().map(move |(_, h)| h.values.get(j));
            let array: ArrayRef = match &column.ty {
                ColumnType::Int64 => Arc::new(Int64Array::from_iter(values().map(|v| match v {
                    Some(ScalarValue::Int64(x)) => Some(*x),
                    _ => None,
                }))),
                ColumnType::Float64 => {
                    Arc::new(Float64Array::from_iter(values().map(|v| match v {
                        Some(ScalarValue::Float64(x)) => Some(*x),
                        _ => None,
                    })))
                }
                ColumnType::Bool => Arc::new(BooleanArray::from_iter(values().map(|v| match v {
                    Some(ScalarValue::Bool(x)) => Some(*x),
                    _ => None,
                }))),
                ColumnType::Utf8 => Arc::new(StringArray::from_iter(values().map(|v| match v {
                    Some(ScalarValue::Utf8(x)) => Some(x.as_str()),
                    _ => None,
                }))),
                ColumnType::Vector { dim, .. } => {
                    let dim = *dim;
                    let (mut flat, mut valid) = (Vec::new(), Vec::new());
                    for v in values() {
                        match v {
                            Some(ScalarValue::Vector(x)) if x.len() == dim => {
                                flat.extend_from_slice(x);
                                valid.push(true);
                            }
                            _ => {
                                flat.extend(std::iter::repeat_n(0.0, dim));
                                valid.push(false);
                            }
                        }
                    }
                    let nulls = valid.contains(&false).then(|| valid.into());
                    Arc::new(
                        FixedSizeListArray::try_new(
                            Arc::new(Field::new("item", DataType::Float32, false)),
                            dim as i32,
                            Arc::new(Float32Array::from(flat)),
                            nulls,
                        )
                        .map_err(arrow)?,
                    )
                }
            };
            out.push((Field::new(name, array.data_type().clone(), true), array));
        }
        Ok(out)
    }
}

/// The answer to one search ([`crate::Dataset::search`],
/// [`crate::DatasetHandle::search`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResponse {
    /// The version searched.
    pub version: u64,
    /// Names of the projected columns, in the order of each hit's values.
    pub projection: Vec<String>,
    /// Rows, nearest first: exactly those the query gets searched alone.
    pub hits: Vec<Hit>,
    /// The batch that answered it.
    pub batch: BatchInfo,
}

/// How a search was served: which batch, how big, how long it waited.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchInfo {
    /// Engine-wide batch number (0 for a direct [`crate::Dataset`] search).
    pub id: u64,
    /// Queries in the batch (1 for a direct search).
    pub size: usize,
    /// How the batch was executed (`shared_scan`, `exact`, `per_query`).
    pub mode: SearchMode,
    /// The coalesced batch failed on something only some of its callers
    /// may touch, so this search was run again alone.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retried_alone: bool,
    /// Time from submission to the start of the scan (µs).
    pub queue_wait_us: u64,
    /// The batch's scan time (µs).
    pub scan_us: u64,
}

impl SearchResponse {
    /// Query `i` of `results` as one response, served by `batch`.
    pub(crate) fn of(results: &mut SearchResults, i: usize, batch: BatchInfo) -> SearchResponse {
        SearchResponse {
            version: results.version,
            projection: results.projection_of(i).to_vec(),
            hits: results
                .hits
                .get_mut(i)
                .map(std::mem::take)
                .unwrap_or_default(),
            batch,
        }
    }
}
