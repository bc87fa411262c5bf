//! Fragment files of the first layout: one Arrow IPC file, read column by
//! column through the IPC reader's projection (which still reads every
//! record batch's whole body: on object storage the file is fetched whole).

use crate::error::{Error, Result};
use crate::kernel::VectorBlocks;
use crate::storage::manifest::FragmentMeta;
use crate::storage::schema::{ColumnType, Schema};
use arrow_array::{make_array, Array, ArrayRef, FixedSizeListArray, Float32Array};
use arrow_data::transform::MutableArrayData;
use arrow_ipc::reader::FileReader;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::ColumnData;

/// Reads columns `names` of a fragment file, checking the file against the
/// manifest and schema. Only the named columns are decoded and kept.
pub fn read_columns(
    path: &Path,
    file: File,
    meta: &FragmentMeta,
    schema: &Schema,
    names: &[&str],
) -> Result<Vec<ColumnData>> {
    let expected = schema.arrow_schema();
    let mut projection = Vec::with_capacity(names.len());
    for name in names {
        let i = schema
            .columns
            .iter()
            .position(|c| c.name == *name)
            .ok_or_else(|| Error::Internal(format!("no column '{name}' in the schema")))?;
        projection.push(i);
    }
    let reader = open_projected(path, file, schema, &projection)?;
    let mut vectors: Vec<Option<VectorBlocks>> = projection
        .iter()
        .map(|&i| match schema.columns[i].ty {
            ColumnType::Vector { dim, .. } => Some(VectorBlocks::new(dim)),
            _ => None,
        })
        .collect();
    let mut scalar_parts: Vec<Vec<ArrayRef>> = vec![Vec::new(); projection.len()];
    let mut rows = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| Error::corrupt(path, e.to_string()))?;
        rows += batch.num_rows();
        for (j, &i) in projection.iter().enumerate() {
            let col = batch.column(j);
            match (&mut vectors[j], &schema.columns[i].ty) {
                (Some(blocks), &ColumnType::Vector { dim, .. }) => {
                    blocks.extend_from_rows(vector_rows(path, names[j], dim, col)?);
                }
                // Copied now: a slice would pin this batch's whole buffer
                // (every column of it) until the end of the read.
                _ => scalar_parts[j].push(owned_concat(
                    std::slice::from_ref(col),
                    expected.field(i).data_type(),
                )?),
            }
        }
    }
    if rows as u64 != meta.rows {
        return Err(Error::corrupt(
            path,
            format!("holds {rows} rows, the manifest says {}", meta.rows),
        ));
    }
    let mut out = Vec::with_capacity(projection.len());
    for (j, &i) in projection.iter().enumerate() {
        out.push(match vectors[j].take() {
            Some(blocks) => ColumnData::Vectors(Arc::new(blocks)),
            None => ColumnData::Scalars(owned_concat(
                &scalar_parts[j],
                expected.field(i).data_type(),
            )?),
        });
    }
    Ok(out)
}

/// Opens a fragment file for reading only the columns `projection` (schema
/// positions), checking that they have the manifest's types.
pub(super) fn open_projected(
    path: &Path,
    file: File,
    schema: &Schema,
    projection: &[usize],
) -> Result<FileReader<std::io::BufReader<File>>> {
    let reader = FileReader::try_new(std::io::BufReader::new(file), Some(projection.to_vec()))
        .map_err(|e| Error::corrupt(path, e.to_string()))?;
    if reader.schema().fields() != schema.arrow_schema().project(projection)?.fields() {
        return Err(Error::corrupt(
            path,
            "fragment schema differs from the manifest's",
        ));
    }
    Ok(reader)
}

/// The row-major floats of one batch's vector column `name` of dimension
/// `dim` (a slice of the batch's buffer, not a copy).
pub(super) fn vector_rows<'a>(
    path: &Path,
    name: &str,
    dim: usize,
    col: &'a ArrayRef,
) -> Result<&'a [f32]> {
    let list = col
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .ok_or_else(|| Error::corrupt(path, format!("vector column '{name}' unreadable")))?;
    if list.value_length() as usize != dim {
        return Err(Error::corrupt(
            path,
            "vector dimension differs from the schema",
        ));
    }
    let values = list
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| Error::corrupt(path, "vector values are not float32"))?;
    let start = list.offset() * dim;
    values
        .values()
        .get(start..start + list.len() * dim)
        .ok_or_else(|| Error::corrupt(path, "vector column shorter than its rows"))
}

/// One array holding `parts` end to end in freshly allocated buffers (the
/// parts point into the whole record batch read from the file; keeping
/// them would keep every column of that batch alive).
pub(super) fn owned_concat(
    parts: &[ArrayRef],
    data_type: &arrow_schema::DataType,
) -> Result<ArrayRef> {
    if parts.is_empty() {
        return Ok(arrow_array::new_empty_array(data_type));
    }
    let data: Vec<arrow_data::ArrayData> = parts.iter().map(|p| p.to_data()).collect();
    let total: usize = data.iter().map(|d| d.len()).sum();
    let mut copy = MutableArrayData::new(data.iter().collect(), false, total);
    for (i, d) in data.iter().enumerate() {
        copy.try_extend(i, 0, d.len())?;
    }
    Ok(make_array(copy.freeze()))
}
