//! Fragment files: rows of a dataset as one Arrow IPC file each.
//!
//! Writing streams record batches into `data/<id>-<nonce>.arrow` and fsyncs
//! it (the nonce keeps two racing writers from ever sharing a file name).
//!
//! Reading is by column and on demand: a [`FragmentView`] loads only the
//! columns a search touches (the vector column for an exact scan, the
//! columns a filter names, `id` and the projected columns of returned rows)
//! through the [`ColumnCache`], a byte-bounded moka cache shared by every
//! dataset of a session. Vector columns are kept in the kernel's
//! block-transposed layout with precomputed norms; scalar columns as Arrow
//! arrays copied out of the file's buffers (so a cached `id` column never
//! pins the vectors it was read next to).

use crate::error::{Error, Result};
use crate::kernel::VectorBlocks;
use crate::storage::checksum::{ChecksumWriter, FileChecksum};
use crate::storage::manifest::FragmentMeta;
use crate::storage::root::DatasetRoot;
use crate::storage::schema::{ColumnType, Schema, ID_COLUMN};
use arrow_array::{make_array, Array, ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_data::transform::MutableArrayData;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use moka::policy::EvictionPolicy;
use roaring::RoaringBitmap;
use std::collections::HashSet;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Directory of fragment files inside a dataset.
pub const DATA_DIR: &str = "data";

/// Streams record batches into one new fragment file.
pub struct FragmentWriter {
    id: u32,
    file: String,
    path: PathBuf,
    root: DatasetRoot,
    writer: FileWriter<BufWriter<ChecksumWriter<File>>>,
    rows: u64,
}

impl FragmentWriter {
    /// Creates `data/<id>-<nonce>.arrow` for rows of `schema`.
    pub fn create(root: &DatasetRoot, id: u32, schema: &Schema) -> Result<Self> {
        let file = format!("{id}-{:016x}.arrow", rand::random::<u64>());
        let path = root.join(DATA_DIR).join(&file);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let writer = FileWriter::try_new(
            BufWriter::new(ChecksumWriter::new(f)),
            &schema.arrow_schema(),
        )?;
        Ok(FragmentWriter {
            id,
            file,
            path,
            root: root.clone(),
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
        let (checksum, file) = buf
            .into_inner()
            .map_err(|e| Error::io(&self.path, e.into_error()))?
            .finish();
        file.sync_all().map_err(|e| Error::io(&self.path, e))?;
        self.root.wrote(&format!("{DATA_DIR}/{}", self.file));
        Ok(FragmentMeta {
            id: self.id,
            file: self.file,
            rows: self.rows,
            deletion_file: None,
            deleted_rows: 0,
            checksum: Some(checksum),
            deletion_checksum: None,
        })
    }
}

/// One column of one fragment file, in memory.
#[derive(Clone, Debug)]
pub enum ColumnData {
    /// A vector column, block-transposed with norms.
    Vectors(Arc<VectorBlocks>),
    /// A scalar column (or `id`), as an Arrow array owning its buffers.
    Scalars(ArrayRef),
    /// A deletion bitmap (cached beside the columns it applies to).
    Deletions(Arc<RoaringBitmap>),
}

impl ColumnData {
    fn size_bytes(&self) -> usize {
        match self {
            ColumnData::Vectors(v) => v.size_bytes(),
            ColumnData::Scalars(a) => a.get_array_memory_size(),
            ColumnData::Deletions(d) => d.serialized_size(),
        }
    }
}

/// Key: (file path, column name). Fragment and deletion files never change
/// once written, so a path names the same bytes for ever.
type ColumnKey = (Arc<Path>, Arc<str>);

/// Columns read from fragment files, bounded in bytes, least recently used
/// evicted first; shared by every dataset of a session.
pub struct ColumnCache {
    cache: moka::sync::Cache<ColumnKey, ColumnData>,
    capacity: u64,
    loads: AtomicU64,
    /// Fragment files whose checksum has been checked in this session
    /// (files never change once written, so once is enough).
    verified: Mutex<HashSet<Arc<Path>>>,
}

impl std::fmt::Debug for ColumnCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnCache")
            .field("capacity", &self.capacity)
            .field("loads", &self.column_loads())
            .finish()
    }
}

impl ColumnCache {
    /// A cache holding at most `capacity_bytes` of loaded columns.
    pub fn new(capacity_bytes: u64) -> ColumnCache {
        ColumnCache {
            cache: moka::sync::Cache::builder()
                .max_capacity(capacity_bytes)
                .weigher(|_k: &ColumnKey, v: &ColumnData| {
                    u32::try_from(v.size_bytes()).unwrap_or(u32::MAX)
                })
                .eviction_policy(EvictionPolicy::lru())
                .build(),
            capacity: capacity_bytes,
            loads: AtomicU64::new(0),
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// Bytes held now (after applying pending evictions).
    pub fn weighted_size(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }

    /// Column loads from disk so far (one per column per miss).
    pub fn column_loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// Checks the fragment file `path` against `checksum` unless this
    /// session already did: before any of its bytes is decoded.
    fn verify_once(
        &self,
        path: &Arc<Path>,
        checksum: Option<&FileChecksum>,
        open: impl FnOnce() -> Result<File>,
    ) -> Result<()> {
        let Some(checksum) = checksum else {
            return Ok(()); // a fragment written before format 2
        };
        let done = |set: &HashSet<Arc<Path>>| set.contains(path);
        if done(&self.verified.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(());
        }
        checksum.check_open_file(path, open()?)?;
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.clone());
        Ok(())
    }

    /// Is `column` of the fragment file `path` in memory now?
    pub fn contains(&self, path: &Path, column: &str) -> bool {
        self.cache
            .contains_key(&(Arc::from(path), Arc::from(column)))
    }
}

/// A fragment of a snapshot: its manifest entry and deletions, with its
/// columns read on demand through the session's [`ColumnCache`].
#[derive(Clone, Debug)]
pub struct FragmentView {
    /// The manifest entry.
    pub meta: FragmentMeta,
    /// Deleted offsets in this version, if any.
    pub deleted: Option<Arc<RoaringBitmap>>,
    path: Arc<Path>,
    /// The dataset's location and the file's path inside it (a remote
    /// dataset downloads the file when it is first read).
    root: DatasetRoot,
    rel: Arc<str>,
    schema: Arc<Schema>,
    columns: Arc<ColumnCache>,
}

impl FragmentView {
    /// A view of the fragment `meta` of the dataset at `root`; reads its
    /// deletion bitmap (through the cache), not its columns.
    pub fn open(
        root: &DatasetRoot,
        meta: &FragmentMeta,
        schema: Arc<Schema>,
        columns: Arc<ColumnCache>,
    ) -> Result<FragmentView> {
        let deleted = match &meta.deletion_file {
            Some(file) => {
                let path: Arc<Path> = Arc::from(
                    root.join(crate::storage::deletions::DELETIONS_DIR)
                        .join(file)
                        .as_path(),
                );
                let key: ColumnKey = (path, Arc::from("#deleted"));
                let data = columns.cache.try_get_with(key, || {
                    crate::storage::deletions::read_deletions(root, file, meta)
                        .map(|d| ColumnData::Deletions(Arc::new(d)))
                });
                match data.map_err(|e: Arc<Error>| (*e).clone())? {
                    ColumnData::Deletions(d) => Some(d),
                    _ => return Err(Error::Internal("deletion cache entry of wrong kind".into())),
                }
            }
            None => None,
        };
        Ok(FragmentView {
            meta: meta.clone(),
            deleted,
            path: Arc::from(root.join(DATA_DIR).join(&meta.file).as_path()),
            root: root.clone(),
            rel: Arc::from(format!("{DATA_DIR}/{}", meta.file)),
            schema,
            columns,
        })
    }

    /// The fragment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the fragment file for reading (downloading it first when the
    /// dataset is on object storage).
    fn open_file(&self) -> Result<File> {
        self.root.open(&self.rel)?.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::corrupt(&*self.path, "fragment file is missing"),
            _ => Error::io(&*self.path, e),
        })
    }

    /// Checks the file's checksum unless this session already did.
    fn verify(&self) -> Result<()> {
        self.columns
            .verify_once(&self.path, self.meta.checksum.as_ref(), || self.open_file())
    }

    /// Rows in the fragment (deleted ones included).
    pub fn rows(&self) -> usize {
        self.meta.rows as usize
    }

    /// The vector column `name`, block-transposed with norms.
    pub fn vectors(&self, name: &str) -> Result<Arc<VectorBlocks>> {
        match self.columns(&[name])?.pop() {
            Some(ColumnData::Vectors(v)) => Ok(v),
            _ => Err(Error::Internal(format!("'{name}' is not a vector column"))),
        }
    }

    /// Streams the vector column `name` record batch by record batch, as
    /// row-major floats: `f(first_offset, rows)`. Holds one batch at a time
    /// and never touches the cache (index builds read every row this way).
    pub fn for_each_vector_batch(
        &self,
        name: &str,
        mut f: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        self.verify()?;
        let path = &*self.path;
        let (index, dim) = self
            .schema
            .columns
            .iter()
            .enumerate()
            .find_map(|(i, c)| match c.ty {
                ColumnType::Vector { dim, .. } if c.name == name => Some((i, dim)),
                _ => None,
            })
            .ok_or_else(|| Error::Internal(format!("'{name}' is not a vector column")))?;
        let reader = open_projected(path, self.open_file()?, &self.schema, &[index])?;
        let mut offset = 0usize;
        for batch in reader {
            let batch = batch.map_err(|e| Error::corrupt(path, e.to_string()))?;
            let raw = vector_rows(path, name, dim, batch.column(0))?;
            f(offset, raw)?;
            offset += batch.num_rows();
        }
        if offset as u64 != self.meta.rows {
            return Err(Error::corrupt(
                path,
                format!("holds {offset} rows, the manifest says {}", self.meta.rows),
            ));
        }
        Ok(())
    }

    /// The `id` column followed by the scalar columns `names`, as one batch.
    pub fn scalars(&self, names: &[&str]) -> Result<RecordBatch> {
        let mut wanted: Vec<&str> = vec![ID_COLUMN];
        for n in names {
            if !wanted.contains(n) {
                wanted.push(n);
            }
        }
        let arrays = self.columns(&wanted)?;
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for (name, data) in wanted.iter().zip(arrays) {
            let ColumnData::Scalars(array) = data else {
                return Err(Error::Internal(format!("'{name}' is not a scalar column")));
            };
            fields.push(arrow_schema::Field::new(
                *name,
                array.data_type().clone(),
                true,
            ));
            columns.push(array);
        }
        Ok(RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(fields)),
            columns,
        )?)
    }

    /// Every visible row (deleted rows left out), in the stored Arrow form
    /// and row order: what compaction rewrites. Read from the file, not
    /// through the column cache.
    pub fn visible_batches(&self) -> Result<Vec<RecordBatch>> {
        self.verify()?;
        let all: Vec<usize> = (0..self.schema.columns.len()).collect();
        let reader = open_projected(&self.path, self.open_file()?, &self.schema, &all)?;
        let mut out = Vec::new();
        let mut offset = 0u32;
        for batch in reader {
            let batch =
                batch.map_err(|e| Error::corrupt(self.path.to_path_buf(), e.to_string()))?;
            let n = batch.num_rows() as u32;
            let batch = match &self.deleted {
                Some(deleted) if deleted.range(offset..offset + n).next().is_some() => {
                    let keep = arrow_array::BooleanArray::from_iter(
                        (offset..offset + n).map(|o| Some(!deleted.contains(o))),
                    );
                    arrow_select::filter::filter_record_batch(&batch, &keep)?
                }
                _ => batch,
            };
            offset += n;
            if batch.num_rows() > 0 {
                out.push(batch);
            }
        }
        Ok(out)
    }

    /// The `id` column.
    pub fn ids(&self) -> Result<ArrayRef> {
        match self.columns(&[ID_COLUMN])?.pop() {
            Some(ColumnData::Scalars(a)) => Ok(a),
            _ => Err(Error::Internal("fragment has no id column".into())),
        }
    }

    /// Columns `names`, from the cache or (all missing ones in one read)
    /// from the file.
    pub fn columns(&self, names: &[&str]) -> Result<Vec<ColumnData>> {
        let key = |n: &str| -> ColumnKey { (self.path.clone(), Arc::from(n)) };
        let mut out: Vec<Option<ColumnData>> = names
            .iter()
            .map(|n| self.columns.cache.get(&key(n)))
            .collect();
        let mut missing: Vec<&str> = Vec::new();
        for (n, d) in names.iter().zip(&out) {
            if d.is_none() && !missing.contains(n) {
                missing.push(n);
            }
        }
        if !missing.is_empty() {
            self.verify()?;
            let loaded = read_columns(
                &self.path,
                self.open_file()?,
                &self.meta,
                &self.schema,
                &missing,
            )?;
            self.columns
                .loads
                .fetch_add(missing.len() as u64, Ordering::Relaxed);
            for (name, data) in missing.iter().zip(loaded) {
                self.columns.cache.insert(key(name), data.clone());
                // Evict now, not at moka's next housekeeping (see the
                // partition cache).
                self.columns.cache.run_pending_tasks();
                for (slot, n) in out.iter_mut().zip(names) {
                    if n == name && slot.is_none() {
                        *slot = Some(data.clone());
                    }
                }
            }
        }
        out.into_iter()
            .map(|d| d.ok_or_else(|| Error::Internal("column not loaded".into())))
            .collect()
    }
}

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
fn open_projected(
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
fn vector_rows<'a>(path: &Path, name: &str, dim: usize, col: &'a ArrayRef) -> Result<&'a [f32]> {
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
fn owned_concat(parts: &[ArrayRef], data_type: &arrow_schema::DataType) -> Result<ArrayRef> {
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
