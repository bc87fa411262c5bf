//! Paged column files: the fragment layout that lets a search read one
//! column, or a few rows of one column, without the rest of the file.
//!
//! An Arrow IPC file (the first fragment layout) stores its record
//! batches row group by row group, every column of a group together, so
//! reading the `id` of ten hits over object storage fetched the whole
//! file, vectors included. A paged file stores each column end to end,
//! cut into *pages* of a fixed number of rows (about 64 KiB each); every
//! page is a self-contained Arrow IPC stream of that one column. A
//! *directory* at the end of the file gives every page's offset, length
//! and CRC-32, and the manifest gives the directory's place and CRC-32,
//! so one ranged read opens a fragment and one more reads any page:
//!
//! ```text
//! column 0: page 0 | page 1 | …   column 1: page 0 | …   …   directory
//! directory: "SHOALPG1", rows u64, columns u32, then per column (schema
//!            order) rows-per-page u32, pages u32, then per page
//!            offset u64, length u32, CRC-32 u32 (all little-endian)
//! ```
//!
//! A whole column is one run of adjacent pages (one coalesced GET on
//! object storage); the `id` of a hit is one page. Each page is checked
//! against its CRC-32 before it is decoded, the directory against the
//! manifest's, so a damaged page is `Corrupt` naming the file while the
//! rest of the file stays readable.

use crate::error::{Error, Result};
use crate::storage::checksum::{ChecksumWriter, FileChecksum};
use crate::storage::schema::{ColumnType, Schema};
use arrow_array::{ArrayRef, RecordBatch};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"SHOALPG1";

/// How the name of a column's spool file (beside the fragment being
/// written) begins: `cleanup` removes old ones a crashed writer left.
pub const SPOOL_PREFIX: &str = ".spool-";

/// Bytes a page aims at: small enough that the id of one hit costs little
/// to fetch, large enough that a whole column is not thousands of pieces.
const PAGE_BYTES: usize = 64 << 10;

/// Where a paged fragment's directory lies (recorded in the manifest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagedLayout {
    /// Offset of the directory (= the bytes of all pages).
    pub directory_offset: u64,
    /// Length of the directory.
    pub directory_len: u64,
    /// CRC-32 of the directory.
    pub directory_crc32: u32,
}

/// One page: `len` bytes at `offset`, with their CRC-32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// Offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// CRC-32 of the page's bytes.
    pub crc32: u32,
}

/// The pages of one column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnPages {
    /// Rows in every page but the last.
    pub page_rows: u32,
    /// The pages, in row order.
    pub pages: Vec<Page>,
}

impl ColumnPages {
    /// The page holding row `offset`, and the row's place in it.
    pub fn locate(&self, offset: usize) -> (usize, usize) {
        let per = self.page_rows as usize;
        (offset / per, offset % per)
    }

    /// Rows in page `p` of a column of `rows` rows.
    pub fn rows_in(&self, p: usize, rows: u64) -> usize {
        let per = self.page_rows as u64;
        (rows - p as u64 * per).min(per) as usize
    }
}

/// A paged file's directory: every page of every column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageDirectory {
    /// Rows in the fragment.
    pub rows: u64,
    /// Per schema column, in schema order.
    pub columns: Vec<ColumnPages>,
}

impl PageDirectory {
    /// Bytes held in memory (for the column cache's weigher).
    pub fn size_bytes(&self) -> usize {
        64 + self
            .columns
            .iter()
            .map(|c| 32 + c.pages.len() * std::mem::size_of::<Page>())
            .sum::<usize>()
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_bytes());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.rows.to_le_bytes());
        out.extend_from_slice(&(self.columns.len() as u32).to_le_bytes());
        for c in &self.columns {
            out.extend_from_slice(&c.page_rows.to_le_bytes());
            out.extend_from_slice(&(c.pages.len() as u32).to_le_bytes());
            for p in &c.pages {
                out.extend_from_slice(&p.offset.to_le_bytes());
                out.extend_from_slice(&p.len.to_le_bytes());
                out.extend_from_slice(&p.crc32.to_le_bytes());
            }
        }
        out
    }

    /// Parses and checks the directory `bytes` of the file `path`, read
    /// from where `layout` places it: its CRC-32, its row count against
    /// the manifest's, one entry per schema column, as many pages as the
    /// rows need, every page inside the pages' part of the file.
    pub fn decode(
        path: &Path,
        bytes: &[u8],
        layout: &PagedLayout,
        rows: u64,
        schema: &Schema,
    ) -> Result<PageDirectory> {
        let corrupt = |m: String| Error::corrupt(path, format!("page directory: {m}"));
        if crc32fast::hash(bytes) != layout.directory_crc32 {
            return Err(corrupt("checksum mismatch".into()));
        }
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let piece = bytes
                .get(at..at + n)
                .ok_or_else(|| corrupt("shorter than its entries".into()))?;
            at += n;
            Ok(piece)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let u64_of = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        };
        if take(8)? != MAGIC {
            return Err(corrupt("bad magic".into()));
        }
        let got_rows = u64_of(take(8)?);
        if got_rows != rows {
            return Err(corrupt(format!(
                "holds {got_rows} rows, the manifest says {rows}"
            )));
        }
        let n_columns = u32_of(take(4)?) as usize;
        if n_columns != schema.columns.len() {
            return Err(corrupt(format!(
                "{n_columns} columns, the schema has {}",
                schema.columns.len()
            )));
        }
        let mut columns = Vec::with_capacity(n_columns);
        for column in &schema.columns {
            let page_rows = u32_of(take(4)?);
            let n_pages = u32_of(take(4)?) as usize;
            if page_rows == 0 || n_pages as u64 != rows.div_ceil(u64::from(page_rows)) {
                return Err(corrupt(format!(
                    "column '{}' has {n_pages} pages of {page_rows} rows for {rows} rows",
                    column.name
                )));
            }
            let mut pages = Vec::with_capacity(n_pages.min(bytes.len() / 16));
            for _ in 0..n_pages {
                let page = Page {
                    offset: u64_of(take(8)?),
                    len: u32_of(take(4)?),
                    crc32: u32_of(take(4)?),
                };
                let end = page.offset.checked_add(u64::from(page.len));
                if end.is_none_or(|end| end > layout.directory_offset) {
                    return Err(corrupt(format!(
                        "a page of column '{}' lies outside the file",
                        column.name
                    )));
                }
                pages.push(page);
            }
            columns.push(ColumnPages { page_rows, pages });
        }
        if at != bytes.len() {
            return Err(corrupt("trailing bytes".into()));
        }
        Ok(PageDirectory { rows, columns })
    }
}

/// Rows per page of a column of type `ty`: a power of two near
/// [`PAGE_BYTES`] of data, 16 to 8,192 rows.
fn page_rows_for(ty: &ColumnType) -> u32 {
    let row_bytes = match ty {
        ColumnType::Vector { dim, .. } => dim * 4,
        ColumnType::Utf8 => 32,
        ColumnType::Bool => 1,
        ColumnType::Int64 | ColumnType::Float64 => 8,
    };
    let rows = (PAGE_BYTES / row_bytes.max(1)).clamp(16, 8192);
    1 << rows.ilog2()
}

/// Checks `bytes` (page `page` of column `name` of `path`) against its
/// CRC-32 and decodes it: the Arrow array it holds, of `rows` rows and the
/// column's stored type.
pub fn decode_page(
    path: &Path,
    name: &str,
    page: &Page,
    bytes: &[u8],
    rows: usize,
    field: &arrow_schema::Field,
) -> Result<ArrayRef> {
    let corrupt = |m: &str| Error::corrupt(path, format!("page of column '{name}': {m}"));
    if bytes.len() != page.len as usize || crc32fast::hash(bytes) != page.crc32 {
        return Err(corrupt("checksum mismatch"));
    }
    let mut reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| corrupt(&e.to_string()))?;
    let batch = reader
        .next()
        .ok_or_else(|| corrupt("holds no rows"))?
        .map_err(|e| corrupt(&e.to_string()))?;
    if batch.num_columns() != 1
        || batch.schema().field(0).data_type() != field.data_type()
        || batch.num_rows() != rows
    {
        return Err(corrupt("type or row count differs from the directory's"));
    }
    Ok(batch.column(0).clone())
}

/// One column being written: its pages so far in a spool file of their
/// own (copied into the fragment file by [`PagedWriter::finish`]), and the
/// rows not yet making a whole page.
struct Spool {
    path: PathBuf,
    file: BufWriter<File>,
    field: Arc<arrow_schema::Schema>,
    page_rows: usize,
    pending: Vec<ArrayRef>,
    pending_rows: usize,
    /// Pages written, with offsets inside the spool.
    pages: Vec<Page>,
    written: u64,
}

impl Spool {
    /// Writes whole pages out of the pending rows (and the last, partial
    /// one when `all`).
    fn flush(&mut self, all: bool) -> Result<()> {
        while self.pending_rows >= self.page_rows || (all && self.pending_rows > 0) {
            let refs: Vec<&dyn arrow_array::Array> =
                self.pending.iter().map(|a| a.as_ref()).collect();
            let joined = arrow_select::concat::concat(&refs)?;
            let n = self.page_rows.min(self.pending_rows);
            let page = joined.slice(0, n);
            let rest = joined.slice(n, self.pending_rows - n);
            self.pending = if rest.is_empty() {
                Vec::new()
            } else {
                vec![rest]
            };
            self.pending_rows -= n;
            let mut bytes = Vec::with_capacity(n * 8 + 512);
            {
                let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &self.field)?;
                w.write(&RecordBatch::try_new(self.field.clone(), vec![page])?)?;
                w.finish()?;
            }
            self.file
                .write_all(&bytes)
                .map_err(|e| Error::io(&self.path, e))?;
            let len = u32::try_from(bytes.len())
                .map_err(|_| Error::Internal("a page over 4 GiB".into()))?;
            self.pages.push(Page {
                offset: self.written,
                len,
                crc32: crc32fast::hash(&bytes),
            });
            self.written += bytes.len() as u64;
        }
        Ok(())
    }
}

/// Streams record batches into one new paged file.
pub struct PagedWriter {
    path: PathBuf,
    spools: Vec<Spool>,
    rows: u64,
}

impl PagedWriter {
    /// A writer of the paged file `path` (created by
    /// [`PagedWriter::finish`]) for rows of `schema`; its columns are
    /// spooled beside it meanwhile.
    pub fn create(path: &Path, schema: &Schema) -> Result<PagedWriter> {
        let arrow = schema.arrow_schema();
        let mut spools = Vec::with_capacity(schema.columns.len());
        for (i, column) in schema.columns.iter().enumerate() {
            let spool =
                path.with_file_name(format!("{SPOOL_PREFIX}{:016x}-{i}", rand::random::<u64>()));
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&spool)
                .map_err(|e| Error::io(&spool, e))?;
            spools.push(Spool {
                path: spool,
                file: BufWriter::new(file),
                field: Arc::new(arrow_schema::Schema::new(vec![arrow.field(i).clone()])),
                page_rows: page_rows_for(&column.ty) as usize,
                pending: Vec::new(),
                pending_rows: 0,
                pages: Vec::new(),
                written: 0,
            });
        }
        Ok(PagedWriter {
            path: path.to_path_buf(),
            spools,
            rows: 0,
        })
    }

    /// Appends a batch that already conforms to the schema.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        for (spool, column) in self.spools.iter_mut().zip(batch.columns()) {
            spool.pending.push(column.clone());
            spool.pending_rows += column.len();
            spool.flush(false)?;
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Writes the file (every column's pages, then the directory) and
    /// fsyncs it; its checksum and where its directory is.
    pub fn finish(mut self) -> Result<(FileChecksum, PagedLayout)> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&self.path)
            .map_err(|e| Error::io(&self.path, e))?;
        let mut out = BufWriter::new(ChecksumWriter::new(file));
        let mut columns = Vec::with_capacity(self.spools.len());
        let mut at = 0u64;
        for spool in &mut self.spools {
            spool.flush(true)?;
            spool.file.flush().map_err(|e| Error::io(&spool.path, e))?;
            let mut from = File::open(&spool.path).map_err(|e| Error::io(&spool.path, e))?;
            std::io::copy(&mut from, &mut out).map_err(|e| Error::io(&self.path, e))?;
            columns.push(ColumnPages {
                page_rows: spool.page_rows as u32,
                pages: spool
                    .pages
                    .iter()
                    .map(|p| Page {
                        offset: p.offset + at,
                        ..*p
                    })
                    .collect(),
            });
            at += spool.written;
        }
        let directory = PageDirectory {
            rows: self.rows,
            columns,
        }
        .encode();
        out.write_all(&directory)
            .map_err(|e| Error::io(&self.path, e))?;
        let (checksum, file) = out
            .into_inner()
            .map_err(|e| Error::io(&self.path, e.into_error()))?
            .finish();
        file.sync_all().map_err(|e| Error::io(&self.path, e))?;
        Ok((
            checksum,
            PagedLayout {
                directory_offset: at,
                directory_len: directory.len() as u64,
                directory_crc32: crc32fast::hash(&directory),
            },
        ))
    }
}

impl Drop for PagedWriter {
    fn drop(&mut self) {
        for spool in &self.spools {
            let _ = std::fs::remove_file(&spool.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Metric;
    use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, StringArray};

    fn schema() -> Schema {
        Schema::new(vec![
            (
                "v",
                ColumnType::Vector {
                    dim: 3,
                    metric: Metric::L2,
                },
            ),
            ("s", ColumnType::Utf8),
        ])
        .unwrap()
    }

    fn batch(schema: &Schema, first: i64, n: usize) -> RecordBatch {
        let floats: Vec<f32> = (0..n * 3)
            .map(|i| (first as usize * 3 + i) as f32)
            .collect();
        let list = FixedSizeListArray::try_new(
            Arc::new(arrow_schema::Field::new(
                "item",
                arrow_schema::DataType::Float32,
                false,
            )),
            3,
            Arc::new(Float32Array::from(floats)),
            None,
        )
        .unwrap();
        let ids = Int64Array::from_iter_values(first..first + n as i64);
        let text = StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("r{i}"))));
        RecordBatch::try_new(
            schema.arrow_schema(),
            vec![Arc::new(ids), Arc::new(list), Arc::new(text)],
        )
        .unwrap()
    }

    /// Writes 5,000 rows in uneven batches; reads every page back, checks
    /// the directory, and catches a flipped byte in a page and in the
    /// directory.
    #[test]
    fn pages_round_trip_and_damage_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.cols");
        let schema = schema();
        let mut w = PagedWriter::create(&path, &schema).unwrap();
        let mut written = 0i64;
        for n in [1usize, 999, 3000, 1000] {
            w.write(&batch(&schema, written, n)).unwrap();
            written += n as i64;
        }
        let (checksum, layout) = w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(checksum.bytes, bytes.len() as u64);
        // No spool file is left beside the fragment.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let at = layout.directory_offset as usize;
        let directory_bytes = &bytes[at..at + layout.directory_len as usize];
        let directory =
            PageDirectory::decode(&path, directory_bytes, &layout, 5_000, &schema).unwrap();
        assert_eq!(directory.columns.len(), 3);
        // ids: 8,192 rows a page; vectors of 12 bytes: 4,096 rows a page.
        assert_eq!(directory.columns[0].pages.len(), 1);
        assert_eq!(directory.columns[1].page_rows, 4096);
        assert_eq!(directory.columns[1].pages.len(), 2);
        let arrow = schema.arrow_schema();
        let mut seen_ids = Vec::new();
        for (c, column) in directory.columns.iter().enumerate() {
            for (p, page) in column.pages.iter().enumerate() {
                let raw =
                    &bytes[page.offset as usize..(page.offset + u64::from(page.len)) as usize];
                let rows = column.rows_in(p, directory.rows);
                let array = decode_page(&path, "c", page, raw, rows, arrow.field(c)).unwrap();
                assert_eq!(array.len(), rows);
                if c == 0 {
                    let ids = array.as_any().downcast_ref::<Int64Array>().unwrap();
                    seen_ids.extend(ids.values().iter().copied());
                }
                if c == 1 && p == 1 {
                    // Row 4,096 + 2 is vector (12294, 12295, 12296).
                    let list = array.as_any().downcast_ref::<FixedSizeListArray>().unwrap();
                    let v = list.value(2);
                    let v = v.as_any().downcast_ref::<Float32Array>().unwrap();
                    assert_eq!(v.values(), &[12294.0, 12295.0, 12296.0]);
                }
            }
        }
        assert_eq!(seen_ids, (0..5_000).collect::<Vec<i64>>());
        assert_eq!(directory.columns[1].locate(4_098), (1, 2));
        // A flipped byte in a page: that page is corrupt.
        let page = directory.columns[2].pages[0];
        let mut raw =
            bytes[page.offset as usize..(page.offset + u64::from(page.len)) as usize].to_vec();
        let middle = raw.len() / 2;
        raw[middle] ^= 1;
        let rows = directory.columns[2].rows_in(0, directory.rows);
        let err = decode_page(&path, "s", &page, &raw, rows, arrow.field(2)).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { path: p, .. } if p == &path),
            "{err}"
        );
        // A flipped byte in the directory, or the wrong row count.
        let mut damaged = directory_bytes.to_vec();
        damaged[20] ^= 1;
        assert!(PageDirectory::decode(&path, &damaged, &layout, 5_000, &schema).is_err());
        assert!(PageDirectory::decode(&path, directory_bytes, &layout, 4_999, &schema).is_err());
    }
}
