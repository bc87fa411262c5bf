//! Input readers for ingest: `.fvecs`, `.npy`, Parquet and JSON Lines.
//!
//! Readers stream the input in chunks of `ingest.chunk_rows` rows (bounded
//! memory), each chunk becoming one Arrow record batch that
//! [`conform_batch`](crate::storage::conform::conform_batch) fits to the
//! schema. A new dataset's schema is inferred from the first chunk. Malformed
//! input stops the ingest with an error naming the row or byte, and nothing
//! is committed. The ingest itself (create or open, append, commit) is
//! `db::ingest`.

use crate::error::{Error, Result};
use crate::kernel::Metric;
use crate::storage::schema::{ColumnType, Schema};
use arrow_array::builder::{
    BooleanBuilder, Float32Builder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{Array, ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_schema::{DataType, Field};
use serde_json::{Map, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Options of one ingest.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// Name of the vector column for `.fvecs`/`.npy` input (default `vector`).
    pub column: Option<String>,
    /// JSON Lines file of scalar columns, one line per vector (`.fvecs`/`.npy`).
    pub meta: Option<PathBuf>,
    /// Default metric of vector columns of a new dataset.
    pub metric: Metric,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            column: None,
            meta: None,
            metric: Metric::L2,
            progress: true,
        }
    }
}

/// The input formats shoal reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.fvecs`: per vector an int32 dimension then that many float32s.
    Fvecs,
    /// `.npy`: a 2-D float32 C-order array.
    Npy,
    /// Parquet with a list-of-float vector column.
    Parquet,
    /// JSON Lines, one object per row.
    Jsonl,
}

impl Format {
    /// The format of `path`, from its extension.
    pub fn of(path: &Path) -> Result<Format> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "fvecs" => Ok(Format::Fvecs),
            "npy" => Ok(Format::Npy),
            "parquet" | "pq" => Ok(Format::Parquet),
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl),
            _ => Err(Error::InvalidArgument(format!(
                "cannot tell the format of {} (expected .fvecs, .npy, .parquet or .jsonl)",
                path.display()
            ))),
        }
    }
}

/// One chunk of input rows before it is fitted to the schema.
pub enum Chunk {
    /// Vectors from `.fvecs`/`.npy`, with optional JSON metadata rows.
    Vectors {
        /// The vector column's name.
        column: String,
        /// Dimension.
        dim: usize,
        /// Row-major vectors.
        data: Vec<f32>,
        /// Scalar columns per row, from `--meta`.
        meta: Option<Vec<Map<String, Value>>>,
        /// Row number of the first vector in the input.
        first_row: u64,
    },
    /// JSON Lines rows.
    Json {
        /// Parsed rows.
        rows: Vec<Map<String, Value>>,
        /// Line number of the first row.
        first_line: u64,
    },
    /// A Parquet record batch.
    Arrow(RecordBatch),
}

impl Chunk {
    /// The chunk as a record batch conformed to `schema`.
    pub fn into_batch(self, schema: &Schema, path: &Path) -> Result<RecordBatch> {
        match self {
            Chunk::Vectors {
                column,
                dim,
                data,
                meta,
                first_row,
            } => {
                let n = data.len() / dim;
                let vectors: ArrayRef = Arc::new(FixedSizeListArray::try_new(
                    Arc::new(Field::new("item", DataType::Float32, false)),
                    dim as i32,
                    Arc::new(Float32Array::from(data)),
                    None,
                )?);
                let mut fields = vec![(column.clone(), vectors)];
                if let Some(rows) = meta {
                    let meta_path = path.to_path_buf();
                    for (name, array) in
                        json_columns(&rows, schema, first_row, &meta_path, Some(&column))?
                    {
                        fields.push((name, array));
                    }
                }
                batch_from(fields, n)
            }
            Chunk::Json { rows, first_line } => {
                let n = rows.len();
                batch_from(json_columns(&rows, schema, first_line, path, None)?, n)
            }
            Chunk::Arrow(batch) => Ok(batch),
        }
    }
}

fn batch_from(fields: Vec<(String, ArrayRef)>, rows: usize) -> Result<RecordBatch> {
    let schema = Arc::new(arrow_schema::Schema::new(
        fields
            .iter()
            .map(|(n, a)| Field::new(n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let arrays = fields.into_iter().map(|(_, a)| a).collect();
    Ok(RecordBatch::try_new_with_options(
        schema,
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// Infers a new dataset's schema from its first chunk.
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
        Chunk::Json { rows, .. } => cols.extend(infer_json(rows, metric)?),
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

fn list_len(array: &dyn Array, row: usize) -> Option<usize> {
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
/// strings → utf8, booleans → bool, arrays of numbers → vectors.
fn infer_json(rows: &[Map<String, Value>], metric: Metric) -> Result<Vec<(String, ColumnType)>> {
    let mut cols: Vec<(String, ColumnType)> = Vec::new();
    for row in rows {
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
                    return Err(Error::SchemaMismatch(format!(
                        "field '{key}' is an object; only flat rows are supported"
                    )))
                }
            };
            match cols.iter_mut().find(|(n, _)| n == key) {
                None => cols.push((key.clone(), ty)),
                Some((_, existing)) => {
                    if *existing == ColumnType::Int64 && ty == ColumnType::Float64 {
                        *existing = ColumnType::Float64;
                    } else if !(*existing == ty
                        || (*existing == ColumnType::Float64 && ty == ColumnType::Int64))
                    {
                        return Err(Error::SchemaMismatch(format!(
                            "field '{key}' is {} in one row and {} in another",
                            existing.describe(),
                            ty.describe()
                        )));
                    }
                }
            }
        }
    }
    Ok(cols)
}

/// Builds one Arrow column per schema column named in `rows` (missing keys
/// become nulls). `skip` names a column supplied elsewhere.
fn json_columns(
    rows: &[Map<String, Value>],
    schema: &Schema,
    first_line: u64,
    path: &Path,
    skip: Option<&str>,
) -> Result<Vec<(String, ArrayRef)>> {
    for (i, row) in rows.iter().enumerate() {
        for key in row.keys() {
            if schema.columns.iter().all(|c| &c.name != key) || Some(key.as_str()) == skip {
                return Err(Error::malformed(
                    path,
                    format!(
                        "line {}: field '{key}' is not a column of the dataset (columns: {})",
                        first_line + i as u64 + 1,
                        schema.names().join(", ")
                    ),
                ));
            }
        }
    }
    let mut out = Vec::new();
    for col in &schema.columns {
        if Some(col.name.as_str()) == skip || rows.iter().all(|r| !r.contains_key(&col.name)) {
            continue;
        }
        let bad = |i: usize, what: &str| {
            Error::malformed(
                path,
                format!(
                    "line {}: field '{}' should be {what}",
                    first_line + i as u64 + 1,
                    col.name
                ),
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

/// Streams chunks from one input file (and its metadata file).
/// Streams an input file as chunks of at most `chunk_rows` rows.
pub struct ChunkReader {
    source: Source,
    chunk_rows: usize,
    rows_read: u64,
    meta: Option<JsonLines>,
    column: String,
}

enum Source {
    Fvecs {
        path: PathBuf,
        reader: CountingReader,
        dim: Option<usize>,
    },
    Npy {
        path: PathBuf,
        reader: CountingReader,
        dim: usize,
        rows_left: u64,
    },
    Parquet(
        parquet::arrow::arrow_reader::ParquetRecordBatchReader,
        PathBuf,
    ),
    Jsonl(JsonLines),
}

/// A buffered reader that counts the bytes consumed (for progress and errors).
struct CountingReader {
    inner: BufReader<File>,
    offset: u64,
}

impl CountingReader {
    fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(CountingReader {
            inner: BufReader::with_capacity(1 << 20, f),
            offset: 0,
        })
    }

    /// Fills `buf` completely; returns how many bytes were read before EOF.
    fn read_full(&mut self, buf: &mut [u8], path: &Path) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        self.offset += got as u64;
        Ok(got)
    }
}

struct JsonLines {
    path: PathBuf,
    lines: std::io::Lines<BufReader<File>>,
    line_no: u64,
    bytes: u64,
}

impl JsonLines {
    fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(JsonLines {
            path: path.to_path_buf(),
            lines: BufReader::new(f).lines(),
            line_no: 0,
            bytes: 0,
        })
    }

    /// Up to `n` objects; blank lines are skipped.
    fn next_rows(&mut self, n: usize) -> Result<Vec<Map<String, Value>>> {
        let mut rows = Vec::new();
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
                Ok(Value::Object(map)) => rows.push(map),
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
        Ok(rows)
    }
}

impl ChunkReader {
    /// Opens `path` in `format`.
    pub fn open(
        format: Format,
        path: &Path,
        opts: &IngestOptions,
        chunk_rows: usize,
    ) -> Result<Self> {
        let source = match format {
            Format::Fvecs => Source::Fvecs {
                path: path.to_path_buf(),
                reader: CountingReader::open(path)?,
                dim: None,
            },
            Format::Npy => {
                let mut reader = CountingReader::open(path)?;
                let (rows, dim) = read_npy_header(&mut reader, path)?;
                Source::Npy {
                    path: path.to_path_buf(),
                    reader,
                    dim,
                    rows_left: rows,
                }
            }
            Format::Parquet => {
                let f = File::open(path).map_err(|e| Error::io(path, e))?;
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                        .map_err(|e| Error::malformed(path, e.to_string()))?
                        .with_batch_size(chunk_rows)
                        .build()
                        .map_err(|e| Error::malformed(path, e.to_string()))?;
                Source::Parquet(reader, path.to_path_buf())
            }
            Format::Jsonl => Source::Jsonl(JsonLines::open(path)?),
        };
        let meta = match &opts.meta {
            Some(p) => Some(JsonLines::open(p)?),
            None => None,
        };
        Ok(ChunkReader {
            source,
            chunk_rows,
            rows_read: 0,
            meta,
            column: opts.column.clone().unwrap_or_else(|| "vector".into()),
        })
    }

    /// Input bytes consumed so far (for progress).
    pub fn bytes_read(&self) -> u64 {
        match &self.source {
            Source::Fvecs { reader, .. } | Source::Npy { reader, .. } => reader.offset,
            Source::Jsonl(j) => j.bytes,
            Source::Parquet(..) => 0,
        }
    }

    /// The next chunk, or `None` at the end of the input.
    /// The next chunk, or `None` at the end of the input.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        let first_row = self.rows_read;
        let chunk_rows = self.chunk_rows;
        let vectors = match &mut self.source {
            Source::Fvecs { path, reader, dim } => {
                read_fvecs_chunk(reader, path, dim, chunk_rows, first_row)?
            }
            Source::Npy {
                path,
                reader,
                dim,
                rows_left,
            } => {
                let n = (*rows_left).min(chunk_rows as u64) as usize;
                if n == 0 {
                    None
                } else {
                    let mut bytes = vec![0u8; n * *dim * 4];
                    let got = reader.read_full(&mut bytes, path)?;
                    if got < bytes.len() {
                        let row = first_row + (got / (*dim * 4)) as u64;
                        return Err(Error::malformed(
                            path.as_path(),
                            format!(
                                "truncated: data ends at byte {} inside row {row}",
                                reader.offset
                            ),
                        ));
                    }
                    *rows_left -= n as u64;
                    Some((*dim, bytes_to_f32(&bytes)))
                }
            }
            Source::Parquet(reader, path) => {
                return match reader.next() {
                    None => Ok(None),
                    Some(Ok(batch)) => {
                        self.rows_read += batch.num_rows() as u64;
                        Ok(Some(Chunk::Arrow(batch)))
                    }
                    Some(Err(e)) => Err(Error::malformed(
                        path.as_path(),
                        format!("after row {first_row}: {e}"),
                    )),
                }
            }
            Source::Jsonl(lines) => {
                let first_line = lines.line_no;
                let rows = lines.next_rows(chunk_rows)?;
                if rows.is_empty() {
                    return Ok(None);
                }
                self.rows_read += rows.len() as u64;
                return Ok(Some(Chunk::Json { rows, first_line }));
            }
        };
        let Some((dim, data)) = vectors else {
            if let Some(meta) = &mut self.meta {
                if !meta.next_rows(1)?.is_empty() {
                    return Err(Error::malformed(
                        &meta.path,
                        format!("has more lines than the {} vectors", self.rows_read),
                    ));
                }
            }
            return Ok(None);
        };
        let n = data.len() / dim;
        let meta = match &mut self.meta {
            Some(m) => {
                let first_line = m.line_no;
                let rows = m.next_rows(n)?;
                if rows.len() < n {
                    return Err(Error::malformed(
                        &m.path,
                        format!(
                            "has {} rows, fewer than the vectors (at least {})",
                            first_line as usize + rows.len(),
                            first_row as usize + n
                        ),
                    ));
                }
                Some(rows)
            }
            None => None,
        };
        self.rows_read += n as u64;
        Ok(Some(Chunk::Vectors {
            column: self.column.clone(),
            dim,
            data,
            meta,
            first_row,
        }))
    }
}

fn bytes_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Reads up to `max_rows` `.fvecs` records; errors name the record and byte.
fn read_fvecs_chunk(
    reader: &mut CountingReader,
    path: &Path,
    dim: &mut Option<usize>,
    max_rows: usize,
    first_row: u64,
) -> Result<Option<(usize, Vec<f32>)>> {
    let mut data = Vec::new();
    let mut rows = 0usize;
    let mut head = [0u8; 4];
    let mut record = Vec::new();
    while rows < max_rows {
        let at = reader.offset;
        let row = first_row + rows as u64;
        let got = reader.read_full(&mut head, path)?;
        if got == 0 {
            break;
        }
        if got < 4 {
            return Err(Error::malformed(
                path,
                format!(
                    "truncated: record {row} header ends at byte {}",
                    reader.offset
                ),
            ));
        }
        let d = i32::from_le_bytes(head);
        if d <= 0 || d > 1 << 20 {
            return Err(Error::malformed(
                path,
                format!("record {row} at byte {at} has dimension {d}"),
            ));
        }
        let d = d as usize;
        match *dim {
            None => *dim = Some(d),
            Some(expected) if expected != d => {
                return Err(Error::malformed(
                    path,
                    format!(
                    "record {row} at byte {at} has dimension {d}, earlier records have {expected}"
                ),
                ))
            }
            _ => {}
        }
        record.resize(d * 4, 0);
        let got = reader.read_full(&mut record, path)?;
        if got < record.len() {
            return Err(Error::malformed(
                path,
                format!(
                    "truncated: record {row} ends at byte {} after {got} of {} bytes",
                    reader.offset,
                    d * 4
                ),
            ));
        }
        data.extend(bytes_to_f32(&record));
        rows += 1;
    }
    Ok(if rows == 0 {
        None
    } else {
        dim.map(|d| (d, data))
    })
}

/// Parses an `.npy` header; accepts only 2-D little-endian float32 C-order.
fn read_npy_header(reader: &mut CountingReader, path: &Path) -> Result<(u64, usize)> {
    let mut magic = [0u8; 8];
    if reader.read_full(&mut magic, path)? < 8 || &magic[..6] != b"\x93NUMPY" {
        return Err(Error::malformed(
            path,
            "not an .npy file (bad magic at byte 0)",
        ));
    }
    let header_len = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            if reader.read_full(&mut b, path)? < 2 {
                return Err(Error::malformed(path, "truncated header"));
            }
            u16::from_le_bytes(b) as usize
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            if reader.read_full(&mut b, path)? < 4 {
                return Err(Error::malformed(path, "truncated header"));
            }
            u32::from_le_bytes(b) as usize
        }
        v => {
            return Err(Error::malformed(
                path,
                format!("unsupported .npy version {v}"),
            ))
        }
    };
    if header_len > 1 << 20 {
        return Err(Error::malformed(
            path,
            format!("header length {header_len} is implausible"),
        ));
    }
    let mut header = vec![0u8; header_len];
    if reader.read_full(&mut header, path)? < header_len {
        return Err(Error::malformed(path, "truncated header"));
    }
    let header = String::from_utf8_lossy(&header);
    let field = |key: &str| -> Option<String> {
        let start = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
        let end = if rest.starts_with('(') {
            rest.find(')')? + 1
        } else {
            rest.find([',', '}'])?
        };
        Some(rest[..end].trim().to_string())
    };
    let descr = field("descr").ok_or_else(|| Error::malformed(path, "header has no 'descr'"))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    if descr != "<f4" && descr != "f4" {
        return Err(Error::malformed(
            path,
            format!("dtype is {descr}, only little-endian float32 (<f4) is supported"),
        ));
    }
    if field("fortran_order").as_deref() != Some("False") {
        return Err(Error::malformed(
            path,
            "only C-order (fortran_order: False) arrays are supported",
        ));
    }
    let shape = field("shape").ok_or_else(|| Error::malformed(path, "header has no 'shape'"))?;
    let dims: Vec<u64> = shape
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::malformed(path, format!("bad shape {shape}")))?;
    match dims.as_slice() {
        [rows, dim] if *dim > 0 => Ok((*rows, *dim as usize)),
        _ => Err(Error::malformed(
            path,
            format!("shape {shape} is not 2-D (rows, dim)"),
        )),
    }
}

/// Reads every vector of an `.fvecs` or `.npy` file (for query files).
pub fn read_vectors(path: &Path) -> Result<(usize, Vec<Vec<f32>>)> {
    let opts = IngestOptions {
        progress: false,
        ..IngestOptions::default()
    };
    let format = Format::of(path)?;
    if !matches!(format, Format::Fvecs | Format::Npy) {
        return Err(Error::InvalidArgument(format!(
            "query files must be .fvecs or .npy, got {}",
            path.display()
        )));
    }
    let mut reader = ChunkReader::open(format, path, &opts, 1 << 16)?;
    let mut out = Vec::new();
    let mut dim = 0;
    while let Some(Chunk::Vectors { dim: d, data, .. }) = reader.next_chunk()? {
        dim = d;
        out.extend(data.chunks_exact(d).map(|c| c.to_vec()));
    }
    if out.is_empty() {
        return Err(Error::malformed(path, "holds no vectors"));
    }
    Ok((dim, out))
}

/// Reads an `.ivecs` file (e.g. ground truth): per record an int32 count
/// then that many int32s.
pub fn read_ivecs(path: &Path) -> Result<Vec<Vec<i32>>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let head = bytes.get(at..at + 4).ok_or_else(|| {
            Error::malformed(path, format!("truncated record header at byte {at}"))
        })?;
        let n = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if n < 0 {
            return Err(Error::malformed(
                path,
                format!("negative count at byte {at}"),
            ));
        }
        let body = bytes
            .get(at + 4..at + 4 + n as usize * 4)
            .ok_or_else(|| Error::malformed(path, format!("truncated record at byte {at}")))?;
        out.push(
            body.chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        );
        at += 4 + n as usize * 4;
    }
    Ok(out)
}

/// Writes vectors as `.fvecs`.
pub fn write_fvecs(path: &Path, vectors: &[Vec<f32>]) -> Result<()> {
    let mut bytes = Vec::new();
    for v in vectors {
        bytes.extend_from_slice(&(v.len() as i32).to_le_bytes());
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// Writes records of int32s as `.ivecs`.
pub fn write_ivecs(path: &Path, records: &[Vec<i32>]) -> Result<()> {
    let mut bytes = Vec::new();
    for r in records {
        bytes.extend_from_slice(&(r.len() as i32).to_le_bytes());
        for x in r {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}
