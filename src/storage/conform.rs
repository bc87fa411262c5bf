//! Making an incoming record batch fit a dataset's schema.
//!
//! Ingest readers produce batches with whatever types the source had
//! (int32, float32, `List<Float32>` vectors, ...). `conform_batch` checks and
//! casts them to the stored types, assigns default ids, fills absent scalar
//! columns with nulls, and rejects what does not fit — naming the row.

use crate::error::{Error, Result};
use crate::kernel::Metric;
use crate::storage::schema::{ColumnType, Schema, ID_COLUMN};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Int64Array, LargeListArray, ListArray,
    RecordBatch,
};
use arrow_schema::{DataType, Field};
use std::sync::Arc;

/// Casts `batch` to `schema`'s stored layout. `first_id` is the id given to
/// the batch's first row when it has no `id` column; `first_row` is the
/// batch's position in the whole input, for error messages.
pub fn conform_batch(
    schema: &Schema,
    batch: &RecordBatch,
    first_id: i64,
    first_row: u64,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    for field in batch.schema().fields() {
        if schema.columns.iter().all(|c| &c.name != field.name()) {
            return Err(Error::SchemaMismatch(format!(
                "input column '{}' is not in the dataset (columns: {})",
                field.name(),
                schema.names().join(", ")
            )));
        }
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.columns.len());
    for col in &schema.columns {
        let input = batch.column_by_name(&col.name);
        let array: ArrayRef = match (&col.ty, input) {
            (ColumnType::Int64, None) if col.name == ID_COLUMN => {
                Arc::new(Int64Array::from_iter_values(first_id..first_id + n as i64))
            }
            (ColumnType::Vector { .. }, None) => {
                return Err(Error::SchemaMismatch(format!(
                    "input has no vector column '{}'",
                    col.name
                )))
            }
            (ty, None) => arrow_array::new_null_array(&ty.arrow_type(), n),
            (ColumnType::Vector { dim, metric }, Some(a)) => {
                vectors(&col.name, *dim, *metric, a, first_row)?
            }
            (ty, Some(a)) => {
                let target = ty.arrow_type();
                // Null columns fit anything; int64 widens to float64.
                let cast_ok = *a.data_type() == DataType::Null
                    || match ColumnType::from_arrow_scalar(a.data_type()) {
                        Some(ColumnType::Int64) => {
                            matches!(ty, ColumnType::Int64 | ColumnType::Float64)
                        }
                        Some(src) => src == *ty,
                        None => false,
                    };
                if !cast_ok {
                    return Err(Error::SchemaMismatch(format!(
                        "column '{}' is {} in the dataset but {} in the input",
                        col.name,
                        ty.describe(),
                        a.data_type()
                    )));
                }
                let cast = arrow_cast::cast(a, &target)?;
                if col.name == ID_COLUMN && cast.null_count() > 0 {
                    let row = (0..n).find(|&i| cast.is_null(i)).unwrap_or(0);
                    return Err(Error::SchemaMismatch(format!(
                        "row {}: id is null",
                        first_row + row as u64
                    )));
                }
                cast
            }
        };
        columns.push(array);
    }
    Ok(RecordBatch::try_new(schema.arrow_schema(), columns)?)
}

/// Checks and converts a vector column: `FixedSizeList`, `List` or
/// `LargeList` of float32 (or float64), no nulls, right length, and every
/// row one the metric can score (finite, not too large, a direction under
/// cosine: [`Metric::vector_problem`]).
fn vectors(
    name: &str,
    dim: usize,
    metric: Metric,
    a: &ArrayRef,
    first_row: u64,
) -> Result<ArrayRef> {
    let bad = |row: usize, msg: String| {
        Error::SchemaMismatch(format!(
            "row {}: vector column '{name}' {msg}",
            first_row + row as u64
        ))
    };
    if let Some(row) = (0..a.len()).find(|&i| a.is_null(i)) {
        return Err(bad(row, "is null".into()));
    }
    // Collect (values, offsets) whatever the list flavour.
    let (values, offsets): (ArrayRef, Vec<usize>) = match a.data_type() {
        DataType::FixedSizeList(_, size) => {
            let l = a
                .as_any()
                .downcast_ref::<FixedSizeListArray>()
                .ok_or_else(|| Error::Internal("fixed-size list downcast".into()))?;
            let size = *size as usize;
            let offs = (0..=l.len()).map(|i| (l.offset() + i) * size).collect();
            (l.values().clone(), offs)
        }
        DataType::List(_) => {
            let l = a
                .as_any()
                .downcast_ref::<ListArray>()
                .ok_or_else(|| Error::Internal("list downcast".into()))?;
            (
                l.values().clone(),
                l.offsets().iter().map(|o| *o as usize).collect(),
            )
        }
        DataType::LargeList(_) => {
            let l = a
                .as_any()
                .downcast_ref::<LargeListArray>()
                .ok_or_else(|| Error::Internal("large list downcast".into()))?;
            (
                l.values().clone(),
                l.offsets().iter().map(|o| *o as usize).collect(),
            )
        }
        other => {
            return Err(Error::SchemaMismatch(format!(
                "vector column '{name}' must be a list of float32, the input has {other}"
            )))
        }
    };
    let values = match values.data_type() {
        DataType::Float32 | DataType::Float64 | DataType::Float16 => {
            arrow_cast::cast(&values, &DataType::Float32)?
        }
        other => {
            return Err(Error::SchemaMismatch(format!(
                "vector column '{name}' must hold floats, the input holds {other}"
            )))
        }
    };
    if values.null_count() > 0 {
        return Err(Error::SchemaMismatch(format!(
            "vector column '{name}' holds null elements"
        )));
    }
    let floats = values
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| Error::Internal("float32 downcast".into()))?
        .values();
    let mut out = Vec::with_capacity(a.len() * dim);
    for row in 0..a.len() {
        let (s, e) = (offsets[row], offsets[row + 1]);
        if e - s != dim {
            return Err(bad(
                row,
                format!("has {} values, the dataset's dimension is {dim}", e - s),
            ));
        }
        let v = &floats[s..e];
        if let Some(problem) = metric.vector_problem(v) {
            return Err(bad(row, problem.to_string()));
        }
        out.extend_from_slice(v);
    }
    Ok(Arc::new(FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, false)),
        dim as i32,
        Arc::new(Float32Array::from(out)),
        None,
    )?))
}
