//! Turning candidates into result rows: user ids and projected columns.
//!
//! Only the fragments that hold returned rows are touched, and of those
//! only `id` and the projected columns are read (through the column cache),
//! so an indexed search never loads a vector column it does not return.
//! Of a paged fragment file only the pages holding returned rows are read.

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
        ColumnData::Deletions(_) | ColumnData::Directory(_) | ColumnData::PageTable(_) => {
            Err(Error::Internal("projected a file's metadata".into()))
        }
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
        .take(names, &[offset])?
        .iter()
        .map(|rows| column_value(&rows[0].0, rows[0].1))
        .collect()
}

/// Result rows for each query's candidates, each with its own projected
/// columns (`projections[i]` for query `i`). The union of the projected
/// columns is read once per fragment holding a returned row, only at the
/// returned rows (see [`FragmentView::take`]).
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
    // The returned rows of each fragment, then their columns, read once.
    let mut offsets: HashMap<u32, Vec<usize>> = HashMap::new();
    for c in candidates.iter().flatten() {
        let rows = offsets.entry((c.row_id >> 32) as u32).or_default();
        let offset = (c.row_id & 0xffff_ffff) as usize;
        if !rows.contains(&offset) {
            rows.push(offset);
        }
    }
    // (fragment, offset) -> the values of `names` at that row.
    let mut values: HashMap<(u32, usize), Vec<ScalarValue>> = HashMap::new();
    for (frag_id, rows) in &offsets {
        let f = by_id
            .get(frag_id)
            .ok_or_else(|| Error::Internal(format!("fragment {frag_id} is not in the view")))?;
        let taken = f.take(&names, rows)?;
        for (i, &offset) in rows.iter().enumerate() {
            let row = taken
                .iter()
                .map(|column| column_value(&column[i].0, column[i].1))
                .collect::<Result<Vec<_>>>()?;
            values.insert((*frag_id, offset), row);
        }
    }
    candidates
        .iter()
        .enumerate()
        .map(|(qi, cands)| {
            let wanted = positions.get(qi).map(Vec::as_slice).unwrap_or(&[]);
            cands
                .iter()
                .map(|c| {
                    let key = ((c.row_id >> 32) as u32, (c.row_id & 0xffff_ffff) as usize);
                    let row = values
                        .get(&key)
                        .ok_or_else(|| Error::Internal("returned row not read".into()))?;
                    let id = match &row[0] {
                        ScalarValue::Int64(id) => *id,
                        other => {
                            return Err(Error::Internal(format!("id is not an int64: {other:?}")))
                        }
                    };
                    Ok(Hit {
                        row_id: c.row_id,
                        id,
                        distance: c.distance,
                        values: wanted.iter().map(|&c| row[c].clone()).collect(),
                    })
                })
                .collect()
        })
        .collect()
}
