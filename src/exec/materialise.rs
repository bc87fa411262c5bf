//! Turning candidates into result rows: user ids and projected columns,
//! read once per row from the fragments already in memory.

use crate::error::{Error, Result};
use crate::query::{Candidate, Hit, ScalarValue};
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

/// Result rows for each query's candidates, with `projection` columns.
pub fn hits(
    fragments: &[FragmentView],
    candidates: &[Vec<Candidate>],
    projection: &[String],
) -> Result<Vec<Vec<Hit>>> {
    let by_id: HashMap<u32, &FragmentView> = fragments.iter().map(|f| (f.meta.id, f)).collect();
    candidates
        .iter()
        .map(|cands| {
            cands
                .iter()
                .map(|c| {
                    let frag_id = (c.row_id >> 32) as u32;
                    let offset = (c.row_id & 0xffff_ffff) as usize;
                    let f = by_id.get(&frag_id).ok_or_else(|| {
                        Error::Internal(format!("row {} has no fragment", c.row_id))
                    })?;
                    let id = f.data.ids()?.value(offset);
                    let values = projection
                        .iter()
                        .map(|name| {
                            if let Some(v) = f.data.vectors.get(name) {
                                return Ok(ScalarValue::Vector(v.vector(offset)));
                            }
                            let col = f.data.scalars.column_by_name(name).ok_or_else(|| {
                                Error::Internal(format!("projected column '{name}' missing"))
                            })?;
                            value_at(col.as_ref(), offset)
                        })
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
