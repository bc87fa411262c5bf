//! Schema inference: the schema of a new dataset from its first chunk of
//! input (vector columns from float lists, scalar types from values).

use super::*;

/// The schema of a new dataset, inferred from the first chunk of input.
pub fn infer_schema(chunk: &Chunk, metric: Metric) -> Result<Schema> {
    let mut cols: Vec<(String, ColumnType)> = Vec::new();
    match chunk {
        Chunk::Vectors {
            column, dim, meta, ..
        } => {
            cols.push((column.clone(), ColumnType::Vector { dim: *dim, metric }));
            if let Some(rows) = meta {
                cols.extend(infer_json(rows, metric)?);
            }
        }
        Chunk::Json(rows) => cols.extend(infer_json(rows, metric)?),
        Chunk::Arrow(batch) => {
            for field in batch.schema().fields() {
                let ty = match (
                    ColumnType::from_arrow_scalar(field.data_type()),
                    field.data_type(),
                ) {
                    (Some(scalar), _) => scalar,
                    (None, DataType::FixedSizeList(_, n)) => ColumnType::Vector {
                        dim: *n as usize,
                        metric,
                    },
                    (None, DataType::List(_) | DataType::LargeList(_)) => {
                        let col = batch
                            .column_by_name(field.name())
                            .ok_or_else(|| Error::Internal("column".into()))?;
                        let dim = list_len(col.as_ref(), 0).ok_or_else(|| {
                            Error::SchemaMismatch(format!(
                                "vector column '{}' starts with a null",
                                field.name()
                            ))
                        })?;
                        ColumnType::Vector { dim, metric }
                    }
                    (None, other) => {
                        return Err(Error::SchemaMismatch(format!(
                            "column '{}' has unsupported type {other}",
                            field.name()
                        )))
                    }
                };
                cols.push((field.name().clone(), ty));
            }
        }
    }
    Schema::new(cols)
}

pub(super) fn list_len(array: &dyn Array, row: usize) -> Option<usize> {
    if array.is_empty() || array.is_null(row) {
        return None;
    }
    if let Some(l) = array.as_any().downcast_ref::<arrow_array::ListArray>() {
        return Some(l.value_length(row) as usize);
    }
    if let Some(l) = array.as_any().downcast_ref::<arrow_array::LargeListArray>() {
        return Some(l.value_length(row) as usize);
    }
    None
}

/// Column types of JSON rows: numbers → int64 (all integral) or float64,
/// strings → utf8, booleans → bool, arrays of numbers → vectors. Errors
/// name the file and line.
pub(super) fn infer_json(json: &JsonRows, metric: Metric) -> Result<Vec<(String, ColumnType)>> {
    // (name, type, row where the type was first seen)
    let mut cols: Vec<(String, ColumnType, usize)> = Vec::new();
    for (i, row) in json.rows.iter().enumerate() {
        for (key, value) in row {
            let ty = match value {
                Value::Null => continue,
                Value::Bool(_) => ColumnType::Bool,
                Value::Number(n) if n.is_i64() => ColumnType::Int64,
                Value::Number(_) => ColumnType::Float64,
                Value::String(_) => ColumnType::Utf8,
                Value::Array(a) => ColumnType::Vector {
                    dim: a.len(),
                    metric,
                },
                Value::Object(_) => {
                    return Err(Error::malformed(
                        &json.path,
                        format!(
                            "{}: field '{key}' is an object; only flat rows are supported",
                            json.label(i)
                        ),
                    ))
                }
            };
            match cols.iter_mut().find(|(n, _, _)| n == key) {
                None => cols.push((key.clone(), ty, i)),
                Some((_, existing, first)) => {
                    if *existing == ColumnType::Int64 && ty == ColumnType::Float64 {
                        *existing = ColumnType::Float64;
                    } else if !(*existing == ty
                        || (*existing == ColumnType::Float64 && ty == ColumnType::Int64))
                    {
                        return Err(Error::malformed(
                            &json.path,
                            format!(
                                "{}: field '{key}' is {}, but {} on {}",
                                json.label(i),
                                ty.describe(),
                                existing.describe(),
                                json.label(*first)
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(cols.into_iter().map(|(name, ty, _)| (name, ty)).collect())
}
