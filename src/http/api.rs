//! The JSON shapes of the HTTP API and their conversion to and from the
//! engine's types. Unknown fields are errors, like unknown config keys: a
//! typo must not silently change nothing.

use crate::query::{
    BatchQuery, FilterMode, Hit, Nprobes, PerQuery, Query, ScalarValue, SearchParams,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

fn default_k() -> usize {
    10
}

/// Search parameters shared by single and batch searches.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamsBody {
    /// Vector column (the only one when left out).
    pub column: Option<String>,
    /// SQL filter over scalar columns.
    pub filter: Option<String>,
    /// `prefilter` (default) or `postfilter`.
    pub filter_mode: Option<FilterMode>,
    /// Partitions probed per query.
    pub nprobes: Option<usize>,
    /// Rerank (k + offset) × R candidates with exact vectors.
    pub refine_factor: Option<usize>,
    /// Skip fragments no index covers yet.
    #[serde(default)]
    pub fast_search: bool,
    /// Columns returned with each hit.
    #[serde(default)]
    pub select: Vec<String>,
    /// Version to search (latest when left out).
    pub version: Option<u64>,
}

impl ParamsBody {
    fn apply(self, params: &mut SearchParams) {
        params.column = self.column;
        params.filter = self.filter;
        params.filter_mode = self.filter_mode.unwrap_or_default();
        params.projection = self.select;
        params.version = self.version;
        if let Some(n) = self.nprobes {
            params.options.nprobes = Nprobes::Fixed(n);
        }
        params.options.refine_factor = self.refine_factor;
        params.options.fast_search = self.fast_search;
    }
}

/// `POST /v1/datasets/{name}/search`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// The query vector.
    pub vector: Vec<f32>,
    /// Rows to return.
    #[serde(default = "default_k")]
    pub k: usize,
    /// Rows to skip first.
    #[serde(default)]
    pub offset: usize,
    /// Fails with 504 if the scan has not started within this many ms.
    pub timeout_ms: Option<u64>,
    /// Everything else.
    #[serde(flatten)]
    pub params: ParamsBody,
}

impl SearchBody {
    /// The engine query, and its timeout.
    pub fn into_query(self) -> (Query, Option<u64>) {
        let mut query = Query::new(self.vector, self.k).offset(self.offset);
        self.params.apply(&mut query.params);
        (query, self.timeout_ms)
    }
}

/// `POST /v1/datasets/{name}/search/batch` and `/explain`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The query vectors.
    pub vectors: Vec<Vec<f32>>,
    /// Rows per query (all queries).
    pub k: Option<usize>,
    /// Rows per query, one per vector (instead of `k`).
    pub ks: Option<Vec<usize>>,
    /// Rows to skip per query (all queries).
    #[serde(default)]
    pub offset: usize,
    /// Everything else.
    #[serde(flatten)]
    pub params: ParamsBody,
}

impl BatchBody {
    /// The engine batch.
    pub fn into_batch(self) -> BatchQuery {
        let mut batch = BatchQuery::new(self.vectors, self.k.unwrap_or_else(default_k));
        if let Some(ks) = self.ks {
            batch.k = PerQuery::Each(ks);
        }
        batch.offset = PerQuery::All(self.offset);
        self.params.apply(&mut batch.params);
        batch
    }
}

/// One returned row.
#[derive(Debug, Serialize)]
pub struct HitJson {
    /// The row's `id` column.
    pub id: i64,
    /// Distance under the column's metric.
    pub distance: f32,
    /// Selected columns by name.
    pub columns: Map<String, Value>,
}

/// Rows as JSON, with projected values by column name.
pub fn hits_json(hits: &[Hit], projection: &[String]) -> Vec<HitJson> {
    hits.iter()
        .map(|h| HitJson {
            id: h.id,
            distance: h.distance,
            columns: projection
                .iter()
                .zip(&h.values)
                .map(|(name, v)| (name.clone(), scalar_json(v)))
                .collect(),
        })
        .collect()
}

/// One value as JSON (a non-finite float becomes `null`).
pub fn scalar_json(v: &ScalarValue) -> Value {
    match v {
        ScalarValue::Null => Value::Null,
        ScalarValue::Bool(b) => Value::Bool(*b),
        ScalarValue::Int64(i) => Value::from(*i),
        ScalarValue::Float64(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        ScalarValue::Utf8(s) => Value::String(s.clone()),
        ScalarValue::Vector(v) => Value::from(v.clone()),
    }
}
