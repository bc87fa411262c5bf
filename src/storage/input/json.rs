//! JSON Lines input: reading lines in chunks and converting JSON values
//! to Arrow columns (also the metadata rows of `.fvecs`/`.npy`).

use super::*;

/// Where row `i` of a chunk came from, for error messages
/// (`line 12` of a file, `rows[3]` of a request).
pub(super) type RowLabel<'a> = &'a dyn Fn(usize) -> String;

/// Rows read from a JSON Lines file, each with the line it came from.
pub struct JsonRows {
    /// The file the rows came from.
    pub path: PathBuf,
    /// One object per row.
    pub rows: Vec<Map<String, Value>>,
    /// The line number (from 1) of each row; blank lines hold no row.
    pub lines: Vec<u64>,
}

impl JsonRows {
    /// `line N` of row `i`, for error messages.
    pub(super) fn label(&self, i: usize) -> String {
        match self.lines.get(i) {
            Some(line) => format!("line {line}"),
            None => format!("row {i}"),
        }
    }
}

/// Builds one Arrow column per schema column named in `rows` (missing keys
/// become nulls); `label` names a row in errors.
pub(super) fn json_columns(
    rows: &[Map<String, Value>],
    schema: &Schema,
    label: RowLabel<'_>,
    path: &Path,
) -> Result<Vec<(String, ArrayRef)>> {
    for (i, row) in rows.iter().enumerate() {
        for key in row.keys() {
            if schema.columns.iter().all(|c| &c.name != key) {
                return Err(Error::malformed(
                    path,
                    format!(
                        "{}: field '{key}' is not a column of the dataset (columns: {})",
                        label(i),
                        schema.names().join(", ")
                    ),
                ));
            }
        }
    }
    let mut out = Vec::new();
    for col in &schema.columns {
        if rows.iter().all(|r| !r.contains_key(&col.name)) {
            continue;
        }
        let bad = |i: usize, what: &str| {
            Error::malformed(
                path,
                format!("{}: field '{}' should be {what}", label(i), col.name),
            )
        };
        let values = rows
            .iter()
            .map(|r| r.get(&col.name).filter(|v| !v.is_null()));
        let array: ArrayRef = match &col.ty {
            ColumnType::Int64 => {
                let mut b = Int64Builder::new();
                for (i, v) in values.enumerate() {
                    match v {
                        None => b.append_null(),
                        Some(v) => b.append_value(
                            v.as_i64()
                                .or_else(|| {
                                    v.as_f64()
                                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                                        .map(|f| f as i64)
                                })
                                .ok_or_else(|| bad(i, "an integer"))?,
                        ),
                    }
                }
                Arc::new(b.finish())
            }
            ColumnType::Float64 => {
                let mut b = Float64Builder::new();
                for (i, v) in values.enumerate() {
                    match v {
                        None => b.append_null(),
                        Some(v) => b.append_value(v.as_f64().ok_or_else(|| bad(i, "a number"))?),
                    }
                }
                Arc::new(b.finish())
            }
            ColumnType::Utf8 => {
                let mut b = StringBuilder::new();
                for (i, v) in values.enumerate() {
                    match v {
                        None => b.append_null(),
                        Some(v) => b.append_value(v.as_str().ok_or_else(|| bad(i, "a string"))?),
                    }
                }
                Arc::new(b.finish())
            }
            ColumnType::Bool => {
                let mut b = BooleanBuilder::new();
                for (i, v) in values.enumerate() {
                    match v {
                        None => b.append_null(),
                        Some(v) => b.append_value(v.as_bool().ok_or_else(|| bad(i, "a boolean"))?),
                    }
                }
                Arc::new(b.finish())
            }
            ColumnType::Vector { .. } => {
                let mut b = ListBuilder::new(Float32Builder::new());
                for (i, v) in values.enumerate() {
                    match v {
                        None => b.append_null(),
                        Some(Value::Array(items)) => {
                            for item in items {
                                let f =
                                    item.as_f64().ok_or_else(|| bad(i, "an array of numbers"))?;
                                b.values().append_value(f as f32);
                            }
                            b.append(true);
                        }
                        Some(_) => return Err(bad(i, "an array of numbers")),
                    }
                }
                Arc::new(b.finish())
            }
        };
        out.push((col.name.clone(), array));
    }
    Ok(out)
}

pub(super) struct JsonLines {
    pub(super) path: PathBuf,
    lines: std::io::Lines<BufReader<File>>,
    pub(super) line_no: u64,
    pub(super) bytes: u64,
}

impl JsonLines {
    pub(super) fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(JsonLines {
            path: path.to_path_buf(),
            lines: BufReader::new(f).lines(),
            line_no: 0,
            bytes: 0,
        })
    }

    /// Up to `n` objects with their line numbers; blank lines are skipped.
    pub(super) fn next_rows(&mut self, n: usize) -> Result<JsonRows> {
        let mut rows = Vec::new();
        let mut lines = Vec::new();
        while rows.len() < n {
            let Some(line) = self.lines.next() else { break };
            self.line_no += 1;
            let line = line
                .map_err(|e| Error::malformed(&self.path, format!("line {}: {e}", self.line_no)))?;
            self.bytes += line.len() as u64 + 1;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(&line) {
                Ok(Value::Object(map)) => {
                    rows.push(map);
                    lines.push(self.line_no);
                }
                Ok(_) => {
                    return Err(Error::malformed(
                        &self.path,
                        format!("line {}: expected a JSON object", self.line_no),
                    ))
                }
                Err(e) => {
                    return Err(Error::malformed(
                        &self.path,
                        format!("line {}: {e}", self.line_no),
                    ))
                }
            }
        }
        Ok(JsonRows {
            path: self.path.clone(),
            rows,
            lines,
        })
    }
}
