//! The JSON shapes of the HTTP API and their conversion to and from the
//! engine's types. Unknown fields are errors, like unknown config keys: a
//! typo must not silently change nothing.

use crate::error::Error;
use crate::query::{
    BatchQuery, FilterMode, Hit, Nprobes, PerQuery, PerQueryParams, Query, ScalarValue,
    SharedParams,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(super) fn default_k() -> usize {
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
    /// Partitions probed per query (IVF indexes).
    pub nprobes: Option<usize>,
    /// Candidates a graph walk keeps per query (`hnsw` indexes).
    pub ef: Option<usize>,
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
    /// The body's per-query and shared parts.
    fn split(self) -> (PerQueryParams, SharedParams) {
        let own = PerQueryParams {
            filter: self.filter,
            filter_mode: self.filter_mode.unwrap_or_default(),
            projection: self.select,
            nprobes: self.nprobes.map(Nprobes::Fixed),
            ef: self.ef,
            refine_factor: self.refine_factor,
        };
        let shared = SharedParams {
            column: self.column,
            version: self.version,
            fast_search: self.fast_search,
            ..SharedParams::default()
        };
        (own, shared)
    }
}

/// `POST /v1/datasets/{name}/search`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// The query vector: numbers, or base64 of little-endian float32.
    #[serde(deserialize_with = "super::wire::vector")]
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
    /// The engine query (with its timeout).
    pub fn into_query(self) -> Query {
        let mut query = Query::new(self.vector, self.k).offset(self.offset);
        (query.own, query.shared) = self.params.split();
        query.timeout = self.timeout_ms.map(std::time::Duration::from_millis);
        query
    }
}

/// One entry of a batch's `queries`: a full search of its own (vector,
/// k, offset, filter, filter mode, nprobes, refine factor, selected
/// columns). Entries share one scan; the batch-level `column`, `version`
/// and `fast_search` apply to all.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchEntry {
    /// The query vector: numbers, or base64 of little-endian float32.
    #[serde(deserialize_with = "super::wire::vector")]
    pub vector: Vec<f32>,
    /// Rows to return.
    #[serde(default = "default_k")]
    pub k: usize,
    /// Rows to skip first.
    #[serde(default)]
    pub offset: usize,
    /// SQL filter over scalar columns.
    pub filter: Option<String>,
    /// `prefilter` (default) or `postfilter`.
    pub filter_mode: Option<FilterMode>,
    /// Partitions probed (IVF indexes).
    pub nprobes: Option<usize>,
    /// Candidates a graph walk keeps (`hnsw` indexes).
    pub ef: Option<usize>,
    /// Rerank (k + offset) × R candidates with exact vectors.
    pub refine_factor: Option<usize>,
    /// Columns returned with each hit.
    #[serde(default)]
    pub select: Vec<String>,
}

/// `POST /v1/datasets/{name}/search/batch` and `/explain`: either
/// `vectors` (with batch-wide `k`/`ks`, `offset`, filter and options) or
/// `queries`, a list of full search requests.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The query vectors (each numbers, or base64 of little-endian
    /// float32).
    #[serde(default, deserialize_with = "super::wire::vectors")]
    pub vectors: Option<Vec<Vec<f32>>>,
    /// Full search requests, one per query (instead of `vectors`).
    #[serde(default)]
    pub queries: Option<Vec<BatchEntry>>,
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
    /// The engine batch; an error when the body gives both or neither of
    /// `vectors` and `queries`, or per-query fields beside `queries`.
    pub fn into_batch(self) -> Result<BatchQuery, Error> {
        let BatchBody {
            vectors,
            queries,
            k,
            ks,
            offset,
            params,
        } = self;
        let Some(entries) = queries else {
            let Some(vectors) = vectors else {
                return Err(Error::InvalidArgument(
                    "a batch needs 'vectors' or 'queries'".into(),
                ));
            };
            let mut batch = BatchQuery::new(vectors, k.unwrap_or_else(default_k));
            if let Some(ks) = ks {
                batch.k = PerQuery::Each(ks);
            }
            batch.offset = PerQuery::All(offset);
            let (own, shared) = params.split();
            batch.own = PerQuery::All(own);
            batch.shared = shared;
            return Ok(batch);
        };
        let per_query_beside = vectors.is_some()
            || k.is_some()
            || ks.is_some()
            || offset != 0
            || params.filter.is_some()
            || params.filter_mode.is_some()
            || params.nprobes.is_some()
            || params.ef.is_some()
            || params.refine_factor.is_some()
            || !params.select.is_empty();
        if per_query_beside {
            return Err(Error::InvalidArgument(
                "with 'queries', each entry gives its own vector, k, offset, filter, \
                 filter_mode, nprobes, ef, refine_factor and select; only column, version \
                 and fast_search belong to the batch"
                    .into(),
            ));
        }
        let mut batch = BatchQuery::new(Vec::with_capacity(entries.len()), default_k());
        batch.shared = params.split().1;
        let (mut ks, mut offsets, mut each) = (Vec::new(), Vec::new(), Vec::new());
        for e in entries {
            batch.vectors.push(e.vector);
            ks.push(e.k);
            offsets.push(e.offset);
            each.push(PerQueryParams {
                filter: e.filter,
                filter_mode: e.filter_mode.unwrap_or_default(),
                projection: e.select,
                nprobes: e.nprobes.map(Nprobes::Fixed),
                ef: e.ef,
                refine_factor: e.refine_factor,
            });
        }
        Ok(batch.ks(ks).offsets(offsets).each(each))
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

/// The query string of a raw-float32 batch (`Content-Type:
/// application/octet-stream` or `application/vnd.apache.arrow.stream` on
/// `/search/batch` and `/explain`): the
/// batch-wide options of a JSON `vectors` batch, `select` comma-separated.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBatchParams {
    /// Rows per query.
    #[serde(default = "default_k")]
    pub k: usize,
    /// Rows to skip first, per query.
    #[serde(default)]
    pub offset: usize,
    /// Vector column (the only one when left out); also gives the
    /// dimension the body is cut by.
    pub column: Option<String>,
    /// SQL filter over scalar columns.
    pub filter: Option<String>,
    /// `prefilter` (default) or `postfilter`.
    pub filter_mode: Option<FilterMode>,
    /// Partitions probed per query (IVF indexes).
    pub nprobes: Option<usize>,
    /// Candidates a graph walk keeps per query (`hnsw` indexes).
    pub ef: Option<usize>,
    /// Rerank (k + offset) × R candidates with exact vectors.
    pub refine_factor: Option<usize>,
    /// Skip fragments no index covers yet.
    #[serde(default)]
    pub fast_search: bool,
    /// Columns returned with each hit, comma-separated.
    pub select: Option<String>,
    /// Version to search (latest when left out).
    pub version: Option<u64>,
}

impl RawBatchParams {
    /// The batch of `vectors` these options ask for.
    pub fn into_batch(self, vectors: Vec<Vec<f32>>) -> Result<BatchQuery, Error> {
        let select = self
            .select
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        BatchBody {
            vectors: Some(vectors),
            queries: None,
            k: Some(self.k),
            ks: None,
            offset: self.offset,
            params: ParamsBody {
                column: self.column,
                filter: self.filter,
                filter_mode: self.filter_mode,
                nprobes: self.nprobes,
                ef: self.ef,
                refine_factor: self.refine_factor,
                fast_search: self.fast_search,
                select,
                version: self.version,
            },
        }
        .into_batch()
    }
}
