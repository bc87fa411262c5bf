//! Input readers for ingest: `.fvecs`, `.npy`, Parquet and JSON Lines.
//!
//! Readers stream the input in chunks of `ingest.chunk_rows` rows (bounded
//! memory), each chunk becoming one Arrow record batch that
//! `storage::conform::conform_batch` fits to the
//! schema. A new dataset's schema is inferred from the first chunk. Malformed
//! input stops the ingest with an error naming the row or byte, and nothing
//! is committed. The ingest itself (create or open, append, commit) is
//! `db::ingest`.

use crate::error::{Error, Result};
use crate::kernel::Metric;
use crate::progress::Progress;
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

mod guard;
mod infer;
mod json;
mod vecs;

use guard::guarded;
pub use infer::infer_schema;
pub use json::JsonRows;
use json::{json_columns, JsonLines};
use vecs::*;
pub use vecs::{read_ivecs, read_vectors, write_fvecs, write_ivecs};

/// Options of one ingest.
#[derive(Clone, Debug, Default)]
pub struct IngestOptions {
    /// Name of the vector column for `.fvecs`/`.npy` input (default `vector`).
    pub column: Option<String>,
    /// JSON Lines file of scalar columns, one line per vector (`.fvecs`/`.npy`).
    pub meta: Option<PathBuf>,
    /// Metric of a new dataset's vector columns (`None`: l2). Given for an
    /// existing dataset, it must be the metric the dataset has.
    pub metric: Option<Metric>,
    /// Reports `("ingest", input bytes read, input bytes)` as chunks are
    /// read.
    pub progress: Option<Progress>,
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
        /// Scalar columns per row, from the metadata file.
        meta: Option<JsonRows>,
    },
    /// JSON Lines rows.
    Json(JsonRows),
    /// A Parquet record batch.
    Arrow(RecordBatch),
}

impl Chunk {
    /// The chunk as a record batch for `schema` (to be conformed on
    /// append). Vectors must name a vector column of `schema`.
    pub fn into_batch(self, schema: &Schema) -> Result<RecordBatch> {
        match self {
            Chunk::Vectors {
                column,
                dim,
                data,
                meta,
            } => {
                schema.vector_column(Some(&column))?;
                let n = data.len() / dim;
                let vectors: ArrayRef = Arc::new(FixedSizeListArray::try_new(
                    Arc::new(Field::new("item", DataType::Float32, false)),
                    dim as i32,
                    Arc::new(Float32Array::from(data)),
                    None,
                )?);
                let mut fields = vec![(column, vectors)];
                if let Some(meta) = meta {
                    let label = |i: usize| meta.label(i);
                    fields.extend(json_columns(&meta.rows, schema, &label, &meta.path)?);
                }
                batch_from(fields, n)
            }
            Chunk::Json(json) => {
                let label = |i: usize| json.label(i);
                let columns = json_columns(&json.rows, schema, &label, &json.path)?;
                batch_from(columns, json.rows.len())
            }
            Chunk::Arrow(batch) => Ok(batch),
        }
    }
}

/// JSON objects (one per row, keyed by column name) as a record batch for
/// `schema`, to be conformed on append like any ingest chunk. Fields that
/// are not columns, values of the wrong type and vectors holding anything
/// but numbers are [`Error::MalformedInput`] naming `source` and the row
/// (`rows[i]`, counted from 0); a missing vector, a wrong dimension or a
/// non-finite value is caught when the batch is conformed.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub fn json_rows_batch(
    rows: &[Map<String, Value>],
    schema: &Schema,
    source: &str,
) -> Result<RecordBatch> {
    let label = |i: usize| format!("rows[{i}]");
    batch_from(
        json_columns(rows, schema, &label, Path::new(source))?,
        rows.len(),
    )
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

/// Streams an input file (and its metadata file) as chunks of at most
/// `chunk_rows` rows.
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
    /// `None` once the decoder panicked: its state is not to be trusted.
    Parquet(
        Option<parquet::arrow::arrow_reader::ParquetRecordBatchReader>,
        PathBuf,
    ),
    Jsonl(JsonLines),
}

impl Source {
    /// The input file.
    fn path(&self) -> &Path {
        match self {
            Source::Fvecs { path, .. } | Source::Npy { path, .. } | Source::Parquet(_, path) => {
                path
            }
            Source::Jsonl(lines) => &lines.path,
        }
    }
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

    /// Appends up to `len` bytes to `buf`, growing it only as data arrives;
    /// returns how many bytes were read before EOF.
    fn read_up_to(&mut self, len: usize, buf: &mut Vec<u8>, path: &Path) -> Result<usize> {
        let got = (&mut self.inner)
            .take(len as u64)
            .read_to_end(buf)
            .map_err(|e| Error::io(path, e))?;
        self.offset += got as u64;
        Ok(got)
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
                let reader = guarded(path, "opening", || {
                    let malformed =
                        |e: parquet::errors::ParquetError| Error::malformed(path, e.to_string());
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                        .map_err(malformed)?
                        .with_batch_size(chunk_rows)
                        .build()
                        .map_err(malformed)
                })?;
                Source::Parquet(Some(reader), path.to_path_buf())
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
                    // Grown as data arrives: the header's shape is not trusted.
                    let want = n.saturating_mul(*dim).saturating_mul(4);
                    let mut bytes = Vec::new();
                    let got = reader.read_up_to(want, &mut bytes, path)?;
                    if got < want {
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
            Source::Parquet(slot, path) => {
                let Some(reader) = slot.as_mut() else {
                    return Err(Error::malformed(
                        path.as_path(),
                        format!("after row {first_row}: not read further after a decoder failure"),
                    ));
                };
                let at = format!("after row {first_row}");
                let next = guarded(path, &at, || Ok(reader.next()));
                return match next {
                    Err(e) => {
                        *slot = None;
                        Err(e)
                    }
                    Ok(None) => Ok(None),
                    Ok(Some(Ok(batch))) => {
                        self.rows_read += batch.num_rows() as u64;
                        Ok(Some(Chunk::Arrow(batch)))
                    }
                    Ok(Some(Err(e))) => Err(Error::malformed(path.as_path(), format!("{at}: {e}"))),
                };
            }
            Source::Jsonl(lines) => {
                let json = lines.next_rows(chunk_rows)?;
                if json.rows.is_empty() {
                    return Ok(None);
                }
                self.rows_read += json.rows.len() as u64;
                return Ok(Some(Chunk::Json(json)));
            }
        };
        let Some((dim, data)) = vectors else {
            if let Some(meta) = &mut self.meta {
                if !meta.next_rows(1)?.rows.is_empty() {
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
                let json = m.next_rows(n)?;
                if json.rows.len() < n {
                    return Err(Error::malformed(
                        &m.path,
                        format!(
                            "has {} rows, fewer than the vectors (at least {})",
                            first_row + json.rows.len() as u64,
                            first_row + n as u64
                        ),
                    ));
                }
                meta_leaves_out(&json, &self.column, self.source.path())?;
                Some(json)
            }
            None => None,
        };
        self.rows_read += n as u64;
        Ok(Some(Chunk::Vectors {
            column: self.column.clone(),
            dim,
            data,
            meta,
        }))
    }
}

/// Fails when a metadata row sets the vector column, whose values come
/// from the vectors file (`input`).
fn meta_leaves_out(meta: &JsonRows, column: &str, input: &Path) -> Result<()> {
    match meta.rows.iter().position(|row| row.contains_key(column)) {
        None => Ok(()),
        Some(i) => Err(Error::malformed(
            &meta.path,
            format!(
                "{}: field '{column}' is the vector column, whose vectors come from {}; \
                 metadata lines hold only scalar columns",
                meta.label(i),
                input.display()
            ),
        )),
    }
}
