//! Fragment files: rows of a dataset as one Arrow IPC file each.
//!
//! Writing streams record batches into `data/<id>-<nonce>.arrow` and fsyncs
//! it (the nonce keeps two racing writers from ever sharing a file name).
//! Loading reads the file back into a [`LoadedFragment`]: scalar columns as
//! Arrow arrays and every vector column in the kernel's block-transposed
//! layout with precomputed norms.

use crate::error::{Error, Result};
use crate::index::VectorBlocks;
use crate::storage::manifest::FragmentMeta;
use crate::storage::schema::{ColumnType, Schema};
use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use roaring::RoaringBitmap;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Directory of fragment files inside a dataset.
pub const DATA_DIR: &str = "data";

/// Streams record batches into one new fragment file.
pub struct FragmentWriter {
    id: u32,
    file: String,
    path: PathBuf,
    writer: FileWriter<BufWriter<File>>,
    rows: u64,
}

impl FragmentWriter {
    /// Creates `data/<id>-<nonce>.arrow` for rows of `schema`.
    pub fn create(root: &Path, id: u32, schema: &Schema) -> Result<Self> {
        let file = format!("{id}-{:016x}.arrow", rand::random::<u64>());
        let path = root.join(DATA_DIR).join(&file);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let writer = FileWriter::try_new(BufWriter::new(f), &schema.arrow_schema())?;
        Ok(FragmentWriter {
            id,
            file,
            path,
            writer,
            rows: 0,
        })
    }

    /// Appends a batch that already conforms to the schema.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch)?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Finishes and fsyncs the file; returns its manifest entry.
    pub fn finish(mut self) -> Result<FragmentMeta> {
        self.writer.finish()?;
        let buf = self.writer.into_inner()?;
        let file = buf
            .into_inner()
            .map_err(|e| Error::io(&self.path, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&self.path, e))?;
        Ok(FragmentMeta {
            id: self.id,
            file: self.file,
            rows: self.rows,
            deletion_file: None,
            deleted_rows: 0,
        })
    }
}

/// A fragment read into memory, ready to be scanned.
#[derive(Debug)]
pub struct LoadedFragment {
    /// Rows in the fragment.
    pub rows: usize,
    /// All non-vector columns (including `id`), concatenated.
    pub scalars: RecordBatch,
    /// Each vector column, block-transposed with norms.
    pub vectors: HashMap<String, Arc<VectorBlocks>>,
}

impl LoadedFragment {
    /// The `id` column.
    pub fn ids(&self) -> Result<&Int64Array> {
        self.scalars
            .column_by_name(crate::storage::schema::ID_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| Error::Internal("fragment has no int64 id column".into()))
    }

    /// Approximate bytes held in memory.
    pub fn size_bytes(&self) -> usize {
        self.scalars.get_array_memory_size()
            + self.vectors.values().map(|v| v.size_bytes()).sum::<usize>()
    }
}

/// Reads a fragment file and checks it against the manifest and schema.
pub fn load_fragment(root: &Path, meta: &FragmentMeta, schema: &Schema) -> Result<LoadedFragment> {
    let path = root.join(DATA_DIR).join(&meta.file);
    let file = File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::corrupt(&path, "fragment file is missing"),
        _ => Error::io(&path, e),
    })?;
    let reader =
        FileReader::try_new(file, None).map_err(|e| Error::corrupt(&path, e.to_string()))?;
    let expected = schema.arrow_schema();
    if reader.schema().fields() != expected.fields() {
        return Err(Error::corrupt(
            &path,
            "fragment schema differs from the manifest's",
        ));
    }
    let mut vectors: Vec<(String, usize, VectorBlocks)> = schema
        .columns
        .iter()
        .filter_map(|c| match c.ty {
            ColumnType::Vector { dim, .. } => Some((c.name.clone(), dim, VectorBlocks::new(dim))),
            _ => None,
        })
        .collect();
    let scalar_idx: Vec<usize> = schema
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| !matches!(c.ty, ColumnType::Vector { .. }))
        .map(|(i, _)| i)
        .collect();
    let scalar_schema = Arc::new(expected.project(&scalar_idx)?);
    let mut scalar_batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| Error::corrupt(&path, e.to_string()))?;
        for (name, dim, blocks) in vectors.iter_mut() {
            let col = batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>())
                .ok_or_else(|| {
                    Error::corrupt(&path, format!("vector column '{name}' unreadable"))
                })?;
            let values = col
                .values()
                .as_any()
                .downcast_ref::<Float32Array>()
                .ok_or_else(|| Error::corrupt(&path, "vector values are not float32"))?;
            let start = col.offset() * *dim;
            blocks.extend_from_rows(&values.values()[start..start + col.len() * *dim]);
        }
        scalar_batches.push(batch.project(&scalar_idx)?);
    }
    let scalars = arrow_select::concat::concat_batches(&scalar_schema, &scalar_batches)?;
    if scalars.num_rows() as u64 != meta.rows {
        return Err(Error::corrupt(
            &path,
            format!(
                "holds {} rows, the manifest says {}",
                scalars.num_rows(),
                meta.rows
            ),
        ));
    }
    Ok(LoadedFragment {
        rows: scalars.num_rows(),
        scalars,
        vectors: vectors
            .into_iter()
            .map(|(name, _, blocks)| (name, Arc::new(blocks)))
            .collect(),
    })
}

/// Loaded fragments shared by every handle and version of one dataset.
/// Fragment files never change once written, so caching by file name is safe.
#[derive(Debug, Default)]
pub struct FragmentCache {
    loaded: Mutex<HashMap<String, Arc<LoadedFragment>>>,
    deletions: Mutex<HashMap<String, Arc<RoaringBitmap>>>,
}

impl FragmentCache {
    /// The fragment, loaded on first use.
    pub fn get(
        &self,
        root: &Path,
        meta: &FragmentMeta,
        schema: &Schema,
    ) -> Result<Arc<LoadedFragment>> {
        if let Some(f) = self.lock().get(&meta.file) {
            return Ok(f.clone());
        }
        let loaded = Arc::new(load_fragment(root, meta, schema)?);
        self.lock().insert(meta.file.clone(), loaded.clone());
        Ok(loaded)
    }

    /// A deletion bitmap, read with `read` on first use.
    pub fn deletions(
        &self,
        file: &str,
        read: impl FnOnce() -> Result<RoaringBitmap>,
    ) -> Result<Arc<RoaringBitmap>> {
        let mut map = self.deletions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = map.get(file) {
            return Ok(b.clone());
        }
        let bitmap = Arc::new(read()?);
        map.insert(file.to_string(), bitmap.clone());
        Ok(bitmap)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LoadedFragment>>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }
}
