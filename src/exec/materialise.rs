//! Turning candidates into result rows: user ids and projected columns.
//!
//! Only the fragments that hold returned rows are touched, and of those
//! only `id` and the projected columns are read (through the column cache),
//! so an indexed search never loads a vector column it does not return.

use crate::error::{Error, Result};
use crate::query::{Candidate, Hit, ScalarValue};
use crate::storage::fragment::ColumnData;
use crate::storage::FragmentView;
use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, StringArray};
use std::collections::HashMap;

fn value_at(array: &dyn Array, row: usize) -> Result<ScalarValue> {
    if array.is_null(row) {
        return Ok(ScalarValue::Null);
    }
    let any = array.as_any();
    if let Some(a) = any.downcast_ref::<Int64Array>() {
        Ok(ScalarValue::Int64(a.value(row)))
    } else if let Some(a) = any.downcast_ref::<Float64Array>() {
        Ok(ScalarValue::Float64(a.value(row)))
    } else if let Some(a) = any.downcast_ref::<StringArray>() {
        Ok(ScalarValue::Utf8(a.value(row).to_string()))
    } else if let Some(a) = any.downcast_ref::<BooleanArray>() {
        Ok(ScalarValue::Bool(a.value(row)))
    } else {
        Err(Error::Internal(format!(
            "unexpected column type {}",
            array.data_type()
        )))
    }
}

fn column_value(data: &ColumnData, offset: usize) -> Result<ScalarValue> {
    match data {
        ColumnData::Vectors(v) => Ok(ScalarValue::Vector(v.vector(offset))),
        ColumnData::Scalars(a) => value_at(a.as_ref(), offset),
        ColumnData::Deletions(_) => Err(Error::Internal("projected a deletion file".into())),
    }
}

/// The values of columns `names` at `offset` of `fragment` (read through
/// the column cache).
pub fn row_values(
    fragment: &FragmentView,
    offset: usize,
    names: &[&str],
) -> Result<Vec<ScalarValue>> {
    fragment
        .columns(names)?
        .iter()
        .map(|d| column_value(d, offset))
        .collect()
}

/// Result rows for each query's candidates, each with its own projected
/// columns (`projections[i]` for query `i`). The union of the projected
/// columns is read once per fragment holding a returned row.
pub fn hits(
    fragments: &[FragmentView],
    candidates: &[Vec<Candidate>],
    projections: &[&[String]],
) -> Result<Vec<Vec<Hit>>> {
    let by_id: HashMap<u32, &FragmentView> = fragments.iter().map(|f| (f.meta.id, f)).collect();
    let mut names: Vec<&str> = vec![crate::storage::ID_COLUMN];
    for projection in projections {
        for name in projection.iter() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    // Each query's columns as positions in `names`.
    let positions: Vec<Vec<usize>> = projections
        .iter()
        .map(|p| {
            p.iter()
                .map(|n| names.iter().position(|m| *m == n.as_str()).unwrap_or(0))
                .collect()
        })
        .collect();
    // Columns of each fragment that holds a returned row, read once.
    let mut loaded: HashMap<u32, Vec<ColumnData>> = HashMap::new();
    for c in candidates.iter().flatten() {
        let frag_id = (c.row_id >> 32) as u32;
        if let std::collections::hash_map::Entry::Vacant(slot) = loaded.entry(frag_id) {
            let f = by_id
                .get(&frag_id)
                .ok_or_else(|| Error::Internal(format!("row {} has no fragment", c.row_id)))?;
            slot.insert(f.columns(&names)?);
        }
    }
    let value = column_value;
    candidates
        .iter()
        .enumerate()
        .map(|(qi, cands)| {
            let wanted = positions.get(qi).map(Vec::as_slice).unwrap_or(&[]);
            cands
                .iter()
                .map(|c| {
                    let offset = (c.row_id & 0xffff_ffff) as usize;
                    let columns = loaded
                        .get(&((c.row_id >> 32) as u32))
                        .ok_or_else(|| Error::Internal("fragment columns not loaded".into()))?;
                    let id = match value(&columns[0], offset)? {
                        ScalarValue::Int64(id) => id,
                        other => {
                            return Err(Error::Internal(format!("id is not an int64: {other:?}")))
                        }
                    };
                    let values = wanted
                        .iter()
                        .map(|&c| value(&columns[c], offset))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Hit {
                        row_id: c.row_id,
                        id,
                        distance: c.distance,
                        values,
                    })
                })
                .collect()
        })
        .collect()
}
