//! Fragment files: rows of a dataset, one file per fragment, in one of
//! two layouts: *paged* (`data/<id>-<nonce>.cols`, manifest format 4, see
//! [`crate::storage::paged`]: each column, and each page of rows, readable
//! alone) or Arrow IPC (`data/<id>-<nonce>.arrow`, every fragment written
//! before format 4). Writing streams record batches into the file and
//! fsyncs it (the nonce keeps two racing writers from ever sharing a file
//! name).
//!
//! Reading is by column and on demand: a [`FragmentView`] loads only the
//! columns a search touches (the vector column for an exact scan, the
//! columns a filter names, `id` and the projected columns of returned rows;
//! of a paged file only the pages holding those rows) through the
//! [`ColumnCache`], a byte-bounded moka cache shared by every dataset of a
//! session. Vector columns are kept in the kernel's block-transposed layout
//! with precomputed norms; scalar columns as Arrow arrays copied out of the
//! file's buffers (so a cached `id` column never pins the vectors it was
//! read next to).

use crate::error::{Error, Result};
use crate::kernel::VectorBlocks;
use crate::storage::checksum::{ChecksumWriter, FileChecksum};
use crate::storage::manifest::FragmentMeta;
use crate::storage::paged::{PageDirectory, PagedWriter};
use crate::storage::root::DatasetRoot;
use crate::storage::schema::{ColumnType, Schema, ID_COLUMN};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_ipc::writer::FileWriter;
use moka::policy::EvictionPolicy;
use roaring::RoaringBitmap;
use std::collections::HashSet;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod ipc;
mod paged_reads;
use ipc::{open_projected, read_columns, vector_rows};
pub use paged_reads::PageTable;

/// Directory of fragment files inside a dataset.
pub const DATA_DIR: &str = "data";

/// Streams record batches into one new fragment file.
pub struct FragmentWriter {
    id: u32,
    file: String,
    path: PathBuf,
    root: DatasetRoot,
    body: WriterBody,
    rows: u64,
}

/// The file being written: one of the two layouts.
enum WriterBody {
    /// Arrow IPC (layout 1).
    Ipc(Box<FileWriter<BufWriter<ChecksumWriter<File>>>>),
    /// Paged columns (layout 2, manifest format 4).
    Paged(PagedWriter),
}

impl FragmentWriter {
    /// Creates `data/<id>-<nonce>.cols` (paged columns) or, when `paged`
    /// is false, `data/<id>-<nonce>.arrow` (Arrow IPC, the layout readers
    /// before manifest format 4 understand), for rows of `schema`.
    pub fn create(root: &DatasetRoot, id: u32, schema: &Schema, paged: bool) -> Result<Self> {
        let suffix = if paged { "cols" } else { "arrow" };
        let file = format!("{id}-{:016x}.{suffix}", rand::random::<u64>());
        let path = root.join(DATA_DIR).join(&file);
        let body = if paged {
            WriterBody::Paged(PagedWriter::create(&path, schema)?)
        } else {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?;
            WriterBody::Ipc(Box::new(FileWriter::try_new(
                BufWriter::new(ChecksumWriter::new(f)),
                &schema.arrow_schema(),
            )?))
        };
        Ok(FragmentWriter {
            id,
            file,
            path,
            root: root.clone(),
            body,
            rows: 0,
        })
    }

    /// Appends a batch that already conforms to the schema.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match &mut self.body {
            WriterBody::Ipc(w) => w.write(batch)?,
            WriterBody::Paged(w) => w.write(batch)?,
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Finishes and fsyncs the file; returns its manifest entry.
    pub fn finish(self) -> Result<FragmentMeta> {
        let (checksum, paged) = match self.body {
            WriterBody::Ipc(mut writer) => {
                writer.finish()?;
                let buf = writer.into_inner()?;
                let (checksum, file) = buf
                    .into_inner()
                    .map_err(|e| Error::io(&self.path, e.into_error()))?
                    .finish();
                file.sync_all().map_err(|e| Error::io(&self.path, e))?;
                (checksum, None)
            }
            WriterBody::Paged(writer) => {
                let (checksum, layout) = writer.finish()?;
                (checksum, Some(layout))
            }
        };
        self.root.wrote(&format!("{DATA_DIR}/{}", self.file));
        Ok(FragmentMeta {
            id: self.id,
            file: self.file,
            rows: self.rows,
            deletion_file: None,
            deleted_rows: 0,
            checksum: Some(checksum),
            deletion_checksum: None,
            paged,
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
    /// A paged file's directory (cached beside its pages).
    Directory(Arc<PageDirectory>),
    /// The pages of one column of a paged file read so far.
    PageTable(Arc<PageTable>),
}

impl ColumnData {
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            ColumnData::Vectors(v) => v.size_bytes(),
            ColumnData::Scalars(a) => a.get_array_memory_size(),
            ColumnData::Deletions(d) => d.serialized_size(),
            ColumnData::Directory(d) => d.size_bytes(),
            ColumnData::PageTable(t) => t.size_bytes(),
        }
    }
}

/// Key: (file path, which part of it). Fragment and deletion files never change
/// once written, so a path names the same bytes for ever.
type ColumnKey = (Arc<Path>, Part);

/// Which part of a file a cache entry holds (a column of any name never
/// meets a file's metadata or another column's page).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Part {
    /// A whole column.
    Column(Arc<str>),
    /// The pages read of a column of a paged file (its [`PageTable`]).
    PageTable(Arc<str>),
    /// A deletion file's bitmap.
    Deletions,
    /// A paged file's directory.
    Directory,
}

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
            .contains_key(&(Arc::from(path), Part::Column(Arc::from(column))))
    }

    /// Is page `page` of `column` of the paged fragment file `path` in
    /// memory now?
    pub fn contains_page(&self, path: &Path, column: &str, page: u32) -> bool {
        match self
            .cache
            .get(&(Arc::from(path), Part::PageTable(Arc::from(column))))
        {
            Some(ColumnData::PageTable(t)) => t.get(page as usize).is_some(),
            _ => false,
        }
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
                let key: ColumnKey = (path, Part::Deletions);
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

    /// Checks the file's checksum unless this session already did (an
    /// Arrow IPC file, read whole; a paged file's pages are checked one by
    /// one as they are read).
    fn verify(&self) -> Result<()> {
        if self.meta.paged.is_some() {
            return Ok(());
        }
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
        if let Some(directory) = self.directory()? {
            return self.for_each_vector_page(&directory, name, f);
        }
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
        let mut out = Vec::new();
        let mut offset = 0u32;
        self.for_each_stored_batch(|batch| {
            let n = batch.num_rows() as u32;
            let batch = match &self.deleted {
                Some(deleted) if deleted.range(offset..offset + n).next().is_some() => {
                    let keep = arrow_array::BooleanArray::from_iter(
                        (offset..offset + n).map(|o| Some(!deleted.contains(o))),
                    );
                    arrow_select::filter::filter_record_batch(batch, &keep)?
                }
                _ => batch.clone(),
            };
            offset += n;
            if batch.num_rows() > 0 {
                out.push(batch);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Every row, deleted ones included, in the stored Arrow form and row
    /// order, batch by batch: what `optimize` rewrites into a paged file
    /// of the same fragment id (so row ids do not change).
    pub fn for_each_stored_batch(
        &self,
        mut f: impl FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<()> {
        if let Some(directory) = self.directory()? {
            return f(&self.whole_batch(&directory)?);
        }
        self.verify()?;
        let all: Vec<usize> = (0..self.schema.columns.len()).collect();
        for batch in open_projected(&self.path, self.open_file()?, &self.schema, &all)? {
            f(&batch.map_err(|e| Error::corrupt(self.path.to_path_buf(), e.to_string()))?)?;
        }
        Ok(())
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
        let key = |n: &str| -> ColumnKey { (self.path.clone(), Part::Column(Arc::from(n))) };
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
            let loaded = match self.directory()? {
                Some(directory) => self.read_paged_columns(&directory, &missing)?,
                None => {
                    self.verify()?;
                    read_columns(
                        &self.path,
                        self.open_file()?,
                        &self.meta,
                        &self.schema,
                        &missing,
                    )?
                }
            };
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
