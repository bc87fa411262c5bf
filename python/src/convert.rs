//! Conversions between Python's arguments and the crate's types: one
//! search's options, NumPy vectors and matrices, Arrow record batches of
//! results, dataset schemas.

use crate::{invalid, to_py};
use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch, UInt32Array};
use arrow_pyarrow::FromPyArrow;
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use numpy::{PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyList;
use shoal::{
    BatchQuery, ColumnType, DatasetHandle, FilterMode, Metric, Nprobes, PerQueryParams, Query,
    Schema, SearchResults,
};
use std::sync::Arc;

/// The options of one search, as Python passes them.
#[derive(Clone, Default)]
pub(crate) struct Options {
    pub filter: Option<String>,
    pub postfilter: bool,
    pub select: Vec<String>,
    pub nprobes: Option<usize>,
    pub ef: Option<usize>,
    pub refine_factor: Option<usize>,
    pub column: Option<String>,
    pub version: Option<u64>,
    pub exact: bool,
    pub timeout_ms: Option<u64>,
}

impl Options {
    fn own(&self) -> PerQueryParams {
        PerQueryParams {
            filter: self.filter.clone(),
            filter_mode: if self.postfilter {
                FilterMode::Postfilter
            } else {
                FilterMode::Prefilter
            },
            projection: self.select.clone(),
            nprobes: self.nprobes.map(Nprobes::Fixed),
            ef: self.ef,
            refine_factor: self.refine_factor,
        }
    }

    pub(crate) fn query(&self, vector: Vec<f32>, k: usize) -> Query {
        let mut q = Query::new(vector, k);
        q.own = self.own();
        q.shared.column = self.column.clone();
        q.shared.version = self.version;
        if self.exact {
            q.shared.mode = shoal::SearchMode::Exact;
        }
        q.timeout = self.timeout_ms.map(std::time::Duration::from_millis);
        q
    }

    pub(crate) fn batch(&self, vectors: Vec<Vec<f32>>, k: usize) -> BatchQuery {
        let mut b = BatchQuery::new(vectors, k);
        b.own = shoal::PerQuery::All(self.own());
        b.shared.column = self.column.clone();
        b.shared.version = self.version;
        if self.exact {
            b.shared.mode = shoal::SearchMode::Exact;
        }
        b
    }
}

/// A 1-D float32 NumPy vector, copied once into Rust.
pub(crate) fn vector_of(v: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    let array: PyReadonlyArray1<f32> = v.extract().map_err(|_| {
        invalid("a query vector must be a 1-D float32 NumPy array (one vector; use search_batch for a 2-D matrix)")
    })?;
    Ok(array.as_array().iter().copied().collect())
}

/// A 2-D float32 NumPy matrix, one query per row.
pub(crate) fn matrix_of(m: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<f32>>> {
    let array: PyReadonlyArray2<f32> = m.extract().map_err(|_| {
        invalid("query vectors must be a 2-D float32 NumPy array (one row per query)")
    })?;
    Ok(array
        .as_array()
        .rows()
        .into_iter()
        .map(|r| r.iter().copied().collect())
        .collect())
}

/// Rows as one Arrow batch: `query_index` (batches only), `id`,
/// `_distance`, then the projected columns typed from the schema.
pub(crate) fn results_batch(
    results: &SearchResults,
    schema: &Schema,
    with_query_index: bool,
) -> Result<RecordBatch, shoal::Error> {
    let arrow_err = |e: arrow_schema::ArrowError| shoal::Error::Arrow(e.to_string());
    // The projected columns first: they check that every query selected
    // the same ones.
    let projected = results.projected_arrays(schema)?;
    let rows: Vec<(u32, &shoal::Hit)> = results.rows().map(|(q, h)| (q as u32, h)).collect();
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    if with_query_index {
        fields.push(Field::new("query_index", DataType::UInt32, false));
        columns.push(Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.0),
        )));
    }
    fields.push(Field::new("id", DataType::Int64, false));
    columns.push(Arc::new(Int64Array::from_iter_values(
        rows.iter().map(|r| r.1.id),
    )));
    fields.push(Field::new("_distance", DataType::Float32, false));
    columns.push(Arc::new(Float32Array::from_iter_values(
        rows.iter().map(|r| r.1.distance),
    )));
    for (field, array) in projected {
        fields.push(field);
        columns.push(array);
    }
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns).map_err(arrow_err)
}

/// One search's answer as its record batch (`id`, `_distance`, the
/// selected columns).
pub(crate) fn response_batch(
    response: shoal::SearchResponse,
    handle: &DatasetHandle,
) -> Result<RecordBatch, shoal::Error> {
    let results = SearchResults {
        version: response.version,
        projection: response.projection,
        projections: Vec::new(),
        hits: vec![response.hits],
    };
    results_batch(&results, handle.latest().schema(), false)
}

/// A dataset schema from an Arrow schema: `FixedSizeList<float32>` columns
/// are vectors (with `metric`), integers, floats, strings and booleans
/// scalars; an `id` column must be int64 and is the row id.
pub(crate) fn schema_of(arrow: &ArrowSchema, metric: Metric) -> PyResult<Schema> {
    let mut columns = Vec::new();
    for f in arrow.fields() {
        let ty = match f.data_type() {
            DataType::FixedSizeList(item, dim) if item.data_type() == &DataType::Float32 => {
                ColumnType::Vector {
                    dim: *dim as usize,
                    metric,
                }
            }
            other => ColumnType::from_arrow_scalar(other).ok_or_else(|| {
                invalid(format!(
                    "column '{}' has type {other}, which shoal does not store (vectors are \
                     fixed-size lists of float32; scalars are integers, floats, strings, booleans)",
                    f.name()
                ))
            })?,
        };
        columns.push((f.name().clone(), ty));
    }
    Schema::new(columns).map_err(to_py)
}

/// Record batches from a `pyarrow.RecordBatch` or `pyarrow.Table`.
pub(crate) fn batches_of(data: &Bound<'_, PyAny>) -> PyResult<Vec<RecordBatch>> {
    let list = if data.hasattr("to_batches")? {
        data.call_method0("to_batches")?
    } else {
        PyList::new(data.py(), [data])?.into_any()
    };
    let mut out = Vec::new();
    for item in list.try_iter()? {
        out.push(RecordBatch::from_pyarrow_bound(&item?)?);
    }
    Ok(out)
}
